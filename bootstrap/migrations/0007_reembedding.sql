-- 0007: re-embedding for another model (projections/search/projection.py). A memory's
-- vectors of models the index does not serve wait in search_vectors until their model is
-- adopted; search_serving holds the model the vector lane serves: the latest adopted, else
-- the model of the first memory vector (what every existing index was written with), named
-- by that memory (named_by): when it is erased, the earliest vector left names it, as a
-- replay from zero, which never sees an erased memory's vector, would.
CREATE TABLE IF NOT EXISTS memwarden.search_vectors (
    ref uuid NOT NULL,
    model text NOT NULL,
    embedding halfvec NOT NULL,
    PRIMARY KEY (ref, model)
);

CREATE TABLE IF NOT EXISTS memwarden.search_serving (
    only_row boolean PRIMARY KEY DEFAULT true CHECK (only_row),
    model text NOT NULL,
    dimensions int NOT NULL,
    adopted_position bigint,
    named_by uuid
);

CREATE INDEX IF NOT EXISTS search_docs_first_vector ON memwarden.search_docs (position)
    WHERE kind = 'memory' AND model IS NOT NULL AND embedding IS NOT NULL;

INSERT INTO memwarden.search_serving (model, dimensions, named_by)
SELECT model, vector_dims(embedding), ref FROM memwarden.search_docs
WHERE kind = 'memory' AND model IS NOT NULL AND embedding IS NOT NULL
ORDER BY position LIMIT 1
ON CONFLICT DO NOTHING;
