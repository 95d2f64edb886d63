-- Who submitted each job: the name of the API key (or "token" for the
-- single token of old configs). NULL for jobs from before keys: only a key
-- that may read every job sees them. Idempotency keys are stored
-- namespaced by owner ("owner/key"), so two keys never share one.
ALTER TABLE jobs ADD COLUMN owner TEXT;
CREATE INDEX jobs_owner_created ON jobs (owner, created_at);
