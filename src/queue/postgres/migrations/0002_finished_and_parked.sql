-- Retention finds finished jobs in order; the metrics gauge counts parked ones.
CREATE INDEX jobs_finished ON jobs (finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX jobs_parked ON jobs (id) WHERE state = 'needs_attention';
