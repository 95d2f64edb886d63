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
    paused INTEGER NOT NULL DEFAULT 0,
    next_fire INTEGER,
    last_fire INTEGER,
    last_job TEXT,
    last_outcome TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
