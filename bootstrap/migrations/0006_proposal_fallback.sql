-- 0006: a proposal drafted by the extractive drafter although a model drafter was
-- configured records why (domain/model/consolidation.py), for reviewers and /metrics.
ALTER TABLE memwarden.proposals ADD COLUMN IF NOT EXISTS fallback text;
