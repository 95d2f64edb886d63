-- The W3C `tracestate` a caller sent beside its `traceparent`, continued
-- by the job's spans. NULL for jobs from before it and for jobs sent none.
ALTER TABLE jobs ADD COLUMN tracestate TEXT;
