-- A conversation's turns one after another (LangGraph's `enqueue`,
-- queue/lifecycle/submit.rs). A job sent to wait behind its conversation's
-- turns is inserted with a `run_at` no lease reaches (queue::HELD_RUN_AT_MS)
-- and names in `after_job` the newest turn that is queued or running and not
-- held itself; that turn is marked `followed`, which locks its row until the
-- submit commits. So a turn's followers are one list, in the order they were
-- sent.
--
-- When a followed turn leaves queued and running (it ended, or parked for a
-- person), the trigger releases the oldest of its followers still queued, in
-- the same transaction (a job is deleted only once it has ended:
-- queue/reads.rs): its `run_at` becomes now,
-- and the rest wait behind it (it is followed in turn). So whichever path
-- ends a job, a follower is never left held. An ending that raced a submit
-- waited for the turn's row lock, and the trigger's statements, each with a
-- snapshot taken after it, see the committed follower; a follower cancelled
-- while the trigger picked it fails the release's state test, and the
-- trigger picks again.
ALTER TABLE jobs ADD COLUMN after_job TEXT;
ALTER TABLE jobs ADD COLUMN followed BOOLEAN NOT NULL DEFAULT FALSE;
CREATE INDEX jobs_after ON jobs (after_job, created_at, id) WHERE after_job IS NOT NULL;
CREATE FUNCTION jobs_release_after() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    next_turn TEXT;
BEGIN
    LOOP
        SELECT id INTO next_turn FROM jobs WHERE after_job = OLD.id AND state = 'queued'
        ORDER BY created_at, id LIMIT 1;
        IF next_turn IS NULL THEN
            RETURN NULL;
        END IF;
        UPDATE jobs SET after_job = NULL, run_at = (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT
        WHERE id = next_turn AND after_job = OLD.id AND state = 'queued';
        EXIT WHEN FOUND;
    END LOOP;
    UPDATE jobs SET after_job = next_turn WHERE after_job = OLD.id AND state = 'queued';
    IF FOUND THEN
        UPDATE jobs SET followed = TRUE WHERE id = next_turn;
    END IF;
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_release_after_end AFTER UPDATE OF state ON jobs FOR EACH ROW
WHEN (NEW.followed AND OLD.state IN ('queued', 'running') AND NEW.state NOT IN ('queued', 'running'))
EXECUTE FUNCTION jobs_release_after();
