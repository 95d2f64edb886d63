-- What a LangGraph client attached to its run (api/langgraph/runs.rs): its
-- metadata, the assistant and the request's settings, as JSON the queue
-- keeps and never reads. NULL for every other job.
ALTER TABLE jobs ADD COLUMN run_meta TEXT;
