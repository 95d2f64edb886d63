//! The SQL the PostgreSQL statements share, so each rule of it is written
//! once: the database's clock, a job's locked row (`JOB_ROW`), the hot
//! path's transaction (planned once per connection, sent in one round
//! trip), the fair-share key and the order of a key's queued jobs, the
//! skip scan of the keys with due jobs, and PostgreSQL's integer types.

/// The database's clock in milliseconds.
pub(super) const NOW: &str = "(EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT";

/// Counters and sequence numbers as PostgreSQL integers (saturating: no
/// real job gets near the limits).
pub(super) fn int(n: u32) -> i32 {
    i32::try_from(n).unwrap_or(i32::MAX)
}

/// A duration as the milliseconds the queue's times are kept in.
pub(super) fn ms(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX)
}

/// The bottom of the lease's row comparisons: where a key's scan starts
/// when nothing is known of it (its head; `cursor::HEAD` in SQL).
pub(super) const SCAN_FROM_HEAD: &str = "'-9223372036854775808'::bigint";

/// Begins a transaction of the hot path (a lease, a finish, a group of
/// journal steps or submits) whose statements are planned once per
/// connection, not on every execution. PostgreSQL's default plans such a
/// statement anew each time, because its generic plan, costed without the
/// parameters' values (an array's length, a `LIMIT`), looks dearer than a
/// custom one: measured with `pg_stat_statements` on a 200,000-job queue,
/// planning took 19 s of the 28 s the queue's statements used in 30 s (the
/// lease 4 ms a call). The generic plan is made without sequential scans,
/// hash or merge joins, so it walks the indexes however small the tables
/// were when it was made (one made on an empty table joined the leased
/// jobs by a sequential scan: 286 ms a lease at 182,643 queued). Every
/// hot statement finds its rows by key, so indexes are always its plan.
/// The settings last until the transaction ends; other statements keep the
/// defaults.
pub(super) const BEGIN_HOT: &str = "BEGIN; SET LOCAL plan_cache_mode = force_generic_plan; \
     SET LOCAL enable_seqscan = off; SET LOCAL enable_hashjoin = off; SET LOCAL enable_mergejoin = off";

/// A job's row by its id (`$1`), locked, as the CTE `job`: the hot path's
/// statements find the row this way and test its state and attempt after.
/// A fence (`MATERIALIZED`), so that the test cannot reach the scan: with
/// `state = 'running'` in it, a generic plan walked the whole partial index
/// of running jobs (`jobs_lease`) for one id, and with a snapshot held the
/// index holds every lease since: 20,653 buffers for one journal step,
/// measured (docs/daemon.md).
pub(super) const JOB_ROW: &str =
    "job AS MATERIALIZED (SELECT id, state, attempts, cancel_requested, max_attempts, crash_resumes
                                  FROM jobs WHERE id = $1 FOR UPDATE)";

/// `statements` in one hot-path transaction, in one round trip: `BEGIN_HOT`,
/// them and `COMMIT` pipelined on `client` (each statement must be prepared
/// already, so it goes out on its first poll, in order). A statement that
/// fails aborts the transaction and the `COMMIT` then rolls it back. The
/// answers of `BEGIN`, the statements and `COMMIT`.
pub(super) async fn pipelined_hot<T>(
    client: &deadpool_postgres::Object,
    statements: impl std::future::Future<Output = T>,
) -> (
    Result<(), tokio_postgres::Error>,
    T,
    Result<(), tokio_postgres::Error>,
) {
    tokio::join!(
        client.batch_execute(BEGIN_HOT),
        statements,
        client.batch_execute("COMMIT"),
    )
}

/// A job's fair-share key as the indexes of queued jobs hold it
/// (migration 0019): its owner, `""` for jobs from before keys, compared
/// bytewise as the daemon compares names.
pub(super) const FAIR_KEY: &str = "(COALESCE(owner, '') COLLATE \"C\")";

/// Minus a job's priority, as `jobs_fair_from` holds it (migration 0020):
/// its order ascending, so that a scan can start at a place in a key
/// (`cursor`) with a row comparison the index answers.
pub(super) const NEG_PRIORITY: &str = "(-(priority::bigint))";

/// A key's queued jobs in the order they are leased: by priority, then
/// age, as `jobs_fair_from` holds them.
pub(super) const FAIR_ORDER: &str = "(-(priority::bigint)), run_at, id";

/// The keys with queued jobs due by `now` (a parameter or expression) and
/// each one's pass (`queue::fair`): a skip scan of `jobs_fair_from`, each step
/// seeking the next key, so its cost grows with the keys, not the queue.
/// Whether a key has a due job is a scalar subquery with `LIMIT 1`, not an
/// `EXISTS`: the planner may turn an `EXISTS` into a join, and a plan made
/// while the queue was small then read every queued job of the key
/// (182,643 rows per lease, measured).
pub(super) fn ready_keys_sql(now: &str) -> String {
    format!(
        "WITH RECURSIVE walk(k) AS (
           SELECT (SELECT {FAIR_KEY} FROM jobs WHERE state = 'queued' ORDER BY {FAIR_KEY} LIMIT 1)
           UNION ALL
           SELECT (SELECT {FAIR_KEY} FROM jobs WHERE state = 'queued' AND {FAIR_KEY} > walk.k ORDER BY {FAIR_KEY} LIMIT 1)
           FROM walk WHERE walk.k IS NOT NULL)
         SELECT walk.k::text, (SELECT MAX(fair_pass) FROM jobs WHERE {FAIR_KEY} = walk.k AND fair_pass IS NOT NULL)
         FROM walk
         WHERE walk.k IS NOT NULL
           AND (SELECT TRUE FROM jobs WHERE state = 'queued' AND {FAIR_KEY} = walk.k AND run_at <= {now} LIMIT 1)"
    )
}

/// The conflict target of a submit's insert: the unique index of the jobs'
/// idempotency keys, which holds only the jobs that have one (migration
/// 0022). Every version of a job's row would otherwise add an entry for
/// its NULL key, and most jobs have none.
pub(super) const KEYED: &str = "(idempotency_key) WHERE idempotency_key IS NOT NULL";
