-- The unique index of idempotency keys held an entry for every version
-- of every job row, NULL keys included: a lease and a finish each write a
-- new version of the row (its state and lease change, so the update is
-- not HOT), and most jobs have no key. Only the jobs with a key need the
-- index; a submit names it as `ON CONFLICT (idempotency_key) WHERE
-- idempotency_key IS NOT NULL` (postgres/sql.rs's KEYED), and a lookup by
-- key (`idempotency_key = $1`) implies the predicate, so it still seeks.
CREATE UNIQUE INDEX jobs_keyed ON jobs (idempotency_key) WHERE idempotency_key IS NOT NULL;
ALTER TABLE jobs DROP CONSTRAINT jobs_idempotency_key_key;
