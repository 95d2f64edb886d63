-- Fair shares between API keys (queue/fair.rs): a leased job stores its
-- key's pass (`fair_pass`, a virtual time); the lease walks the keys with
-- queued jobs through `jobs_fair` and finds each key's pass through
-- `jobs_fair_pass`, never scanning the queue. Jobs from before keys share
-- the key "".
ALTER TABLE jobs ADD COLUMN fair_pass INTEGER;
CREATE INDEX jobs_fair ON jobs (COALESCE(owner, ''), priority DESC, run_at, id) WHERE state = 'queued';
CREATE INDEX jobs_fair_pass ON jobs (COALESCE(owner, ''), fair_pass) WHERE fair_pass IS NOT NULL;
