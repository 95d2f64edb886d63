-- Jobs awaiting a person's decision, by when their approval times out
-- (the sweep's query and the live count's walk).
CREATE INDEX jobs_awaiting ON jobs (run_at) WHERE state = 'awaiting_approval';
