-- What a job's nested agent runs spent, per bundle they ran (tokens, cost
-- in millionths), dated as the job: a bundle's daily budget counts its
-- nested runs in other bundles' jobs too. Deleted with the job.
CREATE TABLE nested_spend (
    job_id TEXT NOT NULL,
    bundle TEXT NOT NULL,
    created_at INTEGER NOT NULL,
    tokens INTEGER NOT NULL,
    cost_micros INTEGER NOT NULL,
    PRIMARY KEY (job_id, bundle)
);
CREATE INDEX nested_spend_bundle_created ON nested_spend (bundle, created_at);
