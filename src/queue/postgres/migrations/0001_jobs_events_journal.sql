CREATE TABLE jobs (
    id TEXT COLLATE "C" PRIMARY KEY,
    bundle TEXT NOT NULL,
    bundle_version TEXT,
    bundle_digest TEXT,
    input TEXT NOT NULL,
    variables TEXT NOT NULL,
    priority INTEGER NOT NULL,
    state TEXT NOT NULL,
    attempts INTEGER NOT NULL,
    max_attempts INTEGER NOT NULL,
    idempotency_key TEXT UNIQUE,
    traceparent TEXT,
    cancel_requested BOOLEAN NOT NULL DEFAULT FALSE,
    result TEXT,
    error TEXT,
    pending_call TEXT,
    run_at BIGINT NOT NULL,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    started_at BIGINT,
    finished_at BIGINT,
    lease_owner TEXT,
    lease_expires_at BIGINT
);
-- The lease queries walk these in lease order and stop at the first row
-- that is not locked by another daemon.
CREATE INDEX jobs_due ON jobs (priority DESC, run_at, id) WHERE state = 'queued';
CREATE INDEX jobs_lease ON jobs (lease_expires_at) WHERE state = 'running';
CREATE INDEX jobs_bundle ON jobs (bundle, state);
CREATE TABLE events (
    job_id TEXT COLLATE "C" NOT NULL,
    seq BIGINT NOT NULL,
    attempt INTEGER NOT NULL,
    event TEXT NOT NULL,
    PRIMARY KEY (job_id, seq)
);
CREATE TABLE journal (
    job_id TEXT COLLATE "C" NOT NULL,
    scope TEXT COLLATE "C" NOT NULL,
    turn INTEGER NOT NULL,
    step TEXT COLLATE "C" NOT NULL,
    attempt INTEGER NOT NULL,
    body TEXT NOT NULL,
    PRIMARY KEY (job_id, scope, turn, step)
);
