ALTER TABLE jobs ADD COLUMN bundle_digest TEXT;
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
ALTER TABLE jobs ADD COLUMN pending_call TEXT;
CREATE INDEX jobs_lease ON jobs (state, lease_expires_at);
CREATE TABLE journal (
    job_id TEXT NOT NULL,
    scope TEXT NOT NULL,
    turn INTEGER NOT NULL,
    step TEXT NOT NULL,
    attempt INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (job_id, scope, turn, step)
) WITHOUT ROWID;
