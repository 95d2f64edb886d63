-- What a job holds of the daily budgets (its key's, its bundle's) it was
-- admitted under: reserved in the write that queued it, counted while the
-- job is not finished (beyond what it spent so far), replaced by its real
-- spend when it ends. 0 for jobs under no daily budget.
ALTER TABLE jobs ADD COLUMN reserved_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN reserved_cost_micros INTEGER NOT NULL DEFAULT 0;
