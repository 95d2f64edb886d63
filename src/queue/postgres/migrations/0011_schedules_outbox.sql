-- Schedules: a bundle's `schedule:` or one made over the API. The spec is
-- JSON the queue does not read (cron, time zone, input, policies); the
-- queue keeps where each schedule stands. `next_fire` is the first fire
-- not handled yet (ms); a fire is recorded only by the daemon whose
-- compare-and-set on it wins.
CREATE TABLE schedules (
    id TEXT PRIMARY KEY,
    source TEXT NOT NULL,
    spec TEXT NOT NULL,
    owner TEXT,
    paused BOOLEAN NOT NULL DEFAULT FALSE,
    next_fire BIGINT,
    last_fire BIGINT,
    last_job TEXT,
    last_outcome TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL
);

-- The outbox: deliveries of a job's state changes (a completion webhook;
-- later A2A push notifications), written in the transaction that changes
-- the state, sent at least once by a sender that retries them. Per job,
-- only the oldest undelivered one (by seq) is sent, so a receiver sees a
-- job's changes in order; after the last attempt one is 'dead'.
CREATE TABLE job_webhooks (
    job_id TEXT PRIMARY KEY,
    url TEXT NOT NULL
);
CREATE TABLE deliveries (
    id TEXT PRIMARY KEY,
    kind TEXT NOT NULL,
    target TEXT NOT NULL,
    job_id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    event TEXT NOT NULL,
    payload TEXT NOT NULL,
    state TEXT NOT NULL,
    attempts BIGINT NOT NULL DEFAULT 0,
    next_attempt_at BIGINT NOT NULL,
    lease_until BIGINT,
    last_error TEXT,
    created_at BIGINT NOT NULL,
    updated_at BIGINT NOT NULL,
    UNIQUE (job_id, seq)
);
CREATE INDEX deliveries_pending ON deliveries (state, next_attempt_at);
