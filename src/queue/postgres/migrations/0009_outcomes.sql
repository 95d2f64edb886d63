-- What a finished job's outcome was: why it ended (the queue's decision,
-- one of the kernel's termination reasons, `cancelled` or `error`; NULL
-- while the job can still run) and how many of its tool calls ended in an
-- error over all its attempts.
ALTER TABLE jobs ADD COLUMN termination_reason TEXT;
ALTER TABLE jobs ADD COLUMN tool_errors BIGINT NOT NULL DEFAULT 0;
