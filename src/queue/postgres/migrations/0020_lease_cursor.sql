-- The fair lease's index holds minus the priority (ascending), so that a
-- lease can start a key's scan where it last leased with a row comparison
-- the index answers (postgres/cursor.rs): a scan from the head walks every
-- entry leased jobs left behind, which a snapshot held elsewhere keeps
-- vacuum from removing. `jobs_due` has served no statement since the fair
-- lease (0019); it only cost a write per queued job.
CREATE INDEX jobs_fair_from ON jobs ((COALESCE(owner, '') COLLATE "C"), (-(priority::bigint)), run_at, id) WHERE state = 'queued';
DROP INDEX jobs_fair;
DROP INDEX jobs_due;
