-- 0013: every list pages by keyset on (its time, its id), newest or oldest first
-- (projections/listing.py): an index in that order serves a page without sorting the table.
CREATE INDEX IF NOT EXISTS findings_order ON memwarden.findings (opened_at, id);
CREATE INDEX IF NOT EXISTS autopilot_decisions_order ON memwarden.autopilot_decisions (settled_at, id);
CREATE INDEX IF NOT EXISTS proposals_order ON memwarden.proposals (drafted_at, id);
CREATE INDEX IF NOT EXISTS disputes_order ON memwarden.disputes (opened_at, id);
CREATE INDEX IF NOT EXISTS api_keys_order ON memwarden.api_keys (issued_at, key_id);
-- a queue's writer filter reads one actor's memories
CREATE INDEX IF NOT EXISTS memory_objects_actor ON memwarden.memory_objects (actor);
