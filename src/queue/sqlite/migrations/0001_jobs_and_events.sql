CREATE TABLE jobs (
    id TEXT PRIMARY KEY,
    bundle TEXT NOT NULL,
    bundle_version TEXT,
    input TEXT NOT NULL,
    variables TEXT NOT NULL,
    priority INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    idempotency_key TEXT UNIQUE,
    traceparent TEXT,
    cancel_requested INTEGER NOT NULL DEFAULT 0,
    result TEXT,
    error TEXT,
    run_at INTEGER NOT NULL,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL,
    started_at INTEGER,
    finished_at INTEGER,
    lease_owner TEXT,
    lease_expires_at INTEGER
);
CREATE INDEX jobs_due ON jobs (state, priority DESC, run_at);
CREATE INDEX jobs_bundle ON jobs (bundle, state);
CREATE TABLE events (
    job_id TEXT NOT NULL,
    seq INTEGER NOT NULL,
    attempt INTEGER NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
) WITHOUT ROWID;
