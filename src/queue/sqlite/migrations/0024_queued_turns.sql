-- A conversation's turns one after another (LangGraph's `enqueue`,
-- queue/lifecycle/submit.rs). A job sent to wait behind its conversation's
-- turns is inserted with a `run_at` no lease reaches (queue::HELD_RUN_AT_MS)
-- and names in `after_job` the newest turn that is queued or running and not
-- held itself; that turn is marked `followed`. So a turn's followers are one
-- list, in the order they were sent.
--
-- When a followed turn leaves queued and running (it ended, or parked for a
-- person), the trigger releases the oldest of its followers still queued, in
-- the same write: its `run_at` becomes now, and the rest wait behind it (it
-- is followed in turn). So whichever path ends a job, a follower is never
-- left held; a held follower that is cancelled leaves the list and changes
-- nothing. (A job is deleted only once it has ended: queue/reads.rs.)
ALTER TABLE jobs ADD COLUMN after_job TEXT;
ALTER TABLE jobs ADD COLUMN followed INTEGER NOT NULL DEFAULT 0;
CREATE INDEX jobs_after ON jobs (after_job, created_at, id) WHERE after_job IS NOT NULL;
CREATE TRIGGER jobs_release_after_end AFTER UPDATE OF state ON jobs
WHEN NEW.followed AND OLD.state IN ('queued', 'running') AND NEW.state NOT IN ('queued', 'running')
BEGIN
    UPDATE jobs SET after_job = (
        SELECT f.id FROM jobs f WHERE f.after_job = NEW.id AND f.state = 'queued' ORDER BY f.created_at, f.id LIMIT 1)
    WHERE after_job = NEW.id AND state = 'queued' AND id <> (
        SELECT f.id FROM jobs f WHERE f.after_job = NEW.id AND f.state = 'queued' ORDER BY f.created_at, f.id LIMIT 1);
    UPDATE jobs SET
        followed = EXISTS (SELECT 1 FROM jobs f WHERE f.after_job = jobs.id AND f.state = 'queued'),
        after_job = NULL,
        run_at = CAST((julianday('now') - 2440587.5) * 86400000 AS INTEGER)
    WHERE after_job = NEW.id AND state = 'queued';
END;
