-- A submitter's budget limits, and what a job spent (tokens, cost in
-- millionths) as its last attempt's final event said: the bundle's daily
-- budget sums them.
ALTER TABLE jobs ADD COLUMN limits TEXT;
ALTER TABLE jobs ADD COLUMN tokens_spent INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN cost_micros INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_bundle_created ON jobs (bundle, created_at);
