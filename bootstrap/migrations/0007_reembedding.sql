-- 0007: re-embedding for another model (projections/search/projection.py). A memory's
-- vectors of models the index does not serve wait in search_vectors until their model is
-- adopted; search_serving holds the model the vector lane serves: the latest adopted, else
-- the model of the first memory vector (what every existing index was written with).
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
    adopted_position bigint
);

INSERT INTO memwarden.search_serving (model, dimensions)
SELECT model, vector_dims(embedding) FROM memwarden.search_docs
WHERE kind = 'memory' AND model IS NOT NULL AND embedding IS NOT NULL
ORDER BY position LIMIT 1
ON CONFLICT DO NOTHING;
