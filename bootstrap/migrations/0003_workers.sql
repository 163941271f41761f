-- 0003: the workers' tables, as the code of b8b96e5 created them at start-up (idempotent).

-- Each dispatcher's position in the ledger (workers/dispatcher.py); a dispatcher adds its
-- own row when it starts.
CREATE TABLE IF NOT EXISTS memwarden.worker_tracking (name text PRIMARY KEY, position bigint NOT NULL);

-- Accepted asynchronous writes (workers/tickets.py).
CREATE TABLE IF NOT EXISTS memwarden.write_tickets (
    ticket uuid PRIMARY KEY,
    key_id text NOT NULL,
    namespace text NOT NULL,
    actor text NOT NULL,
    role text NOT NULL,
    body bytea NOT NULL,
    state text NOT NULL DEFAULT 'pending',
    result jsonb,
    created_at timestamptz NOT NULL DEFAULT now(),
    claimed_at timestamptz,
    finished_at timestamptz
);
CREATE INDEX IF NOT EXISTS write_tickets_open ON memwarden.write_tickets (created_at)
    WHERE state IN ('pending', 'running');
