-- 0004: every signed checkpoint the ledger issues is kept (domain/ledger/checkpoints.py), so
-- GET /v1/compliance/checkpoints can list them, newest first.
CREATE TABLE IF NOT EXISTS memwarden.checkpoints (
    id bigserial PRIMARY KEY,
    position bigint NOT NULL,
    hash text NOT NULL,
    time timestamptz NOT NULL,
    key_id text NOT NULL,
    signature text NOT NULL
);
