-- 0009: each key carries the highest provenance it may claim (KeyIssued.max_provenance).
-- NULL: the key was made without one (every key made before this migration too); its cap is
-- then its role's default, as the listing says (conversation for agents, manual for people).
ALTER TABLE memwarden.api_keys ADD COLUMN IF NOT EXISTS max_provenance text;
