-- A2A push notification configs: where a task's (a job's) state changes are
-- POSTed, with the client's token and the credentials the agent presents.
-- Each state change writes one `a2a_push` delivery per config into the
-- outbox (`deliveries`), in the transaction of the change.
CREATE TABLE a2a_push_configs (
    job_id TEXT NOT NULL,
    id TEXT NOT NULL,
    url TEXT NOT NULL,
    token TEXT,
    auth_scheme TEXT,
    auth_credentials TEXT,
    created_at BIGINT NOT NULL,
    PRIMARY KEY (job_id, id)
);
