-- 0012: findings are grouped by their newer statement (domain/model/autopilot.py
-- finding_group), so one statement that contradicts many older ones is one group for a
-- reviewer. Existing findings take the same key: memory_b, the memory whose pass found them.
ALTER TABLE memwarden.findings ADD COLUMN IF NOT EXISTS group_id uuid;
UPDATE memwarden.findings SET group_id = memory_b WHERE group_id IS NULL;
ALTER TABLE memwarden.findings ALTER COLUMN group_id SET NOT NULL;
CREATE INDEX IF NOT EXISTS findings_group ON memwarden.findings (group_id, opened_at);
