-- 0010: the RFC 6962 Merkle tree over the ledger (docs/architecture.md §12), kept by the
-- `merkle` projection as its complete subtrees: node (level, idx) covers leaves
-- [idx * 2^level, (idx + 1) * 2^level), leaf i being ledger position i + 1. A node is written
-- once, when its last leaf arrives, and never changes; every root and proof up to the stored
-- size is made from O(log n) of them.
CREATE TABLE IF NOT EXISTS memwarden.merkle_nodes (
    level smallint NOT NULL,
    idx bigint NOT NULL,
    hash bytea NOT NULL,
    PRIMARY KEY (level, idx)
);

-- Witnesses' cosignatures of the checkpoints (C2SP tlog-cosignature), and the witness keys
-- the server accepts them from.
ALTER TABLE memwarden.checkpoints ADD COLUMN IF NOT EXISTS size bigint;
ALTER TABLE memwarden.checkpoints ADD COLUMN IF NOT EXISTS note text;
CREATE INDEX IF NOT EXISTS checkpoints_size ON memwarden.checkpoints (size);

CREATE TABLE IF NOT EXISTS memwarden.witness_keys (
    name text PRIMARY KEY,
    vkey text NOT NULL,
    added_at timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE IF NOT EXISTS memwarden.cosignatures (
    checkpoint_id bigint NOT NULL REFERENCES memwarden.checkpoints (id),
    witness text NOT NULL,
    line text NOT NULL,
    signed_at timestamptz NOT NULL,
    PRIMARY KEY (checkpoint_id, witness)
);
