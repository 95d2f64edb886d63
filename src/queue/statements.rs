//! [`JobStatements`]: the job statements a transaction of either dialect
//! can run, each one statement holding no rule. The lifecycle's rules are
//! written over them once; `sqlite` and `postgres` each implement them
//! with their SQL.

use super::tx::{
    AttemptRow, AttemptStart, Change, Conversation, Pin, Res, Settle, StoredSpend, TurnAhead,
};
use super::*;
use crate::journal::JournalEntry;

/// The statements of one transaction (or one read connection). Each is one
/// statement of the dialect, holding no rule. Methods that take `now` get
/// it from [`JobStatements::now`], so PostgreSQL daemons share the
/// database's clock.
///
/// Every statement's future is `Send`, and so is the transaction: an
/// operation's rule is written once over any `transaction::Tx` (see `op`), and
/// SQLite's writer, which carries operations of every type, and
/// PostgreSQL's pooled writes, run on any Tokio worker thread.
pub(crate) trait JobStatements: Send {
    /// The clock of leases and timestamps, in milliseconds.
    fn now(&mut self) -> impl Future<Output = Res<i64>> + Send;
    /// Records a change to announce once the transaction commits.
    fn changed(&mut self, change: Change, id: &JobId);

    // Reading jobs.
    /// `lock`: keep other writers off the row until commit (PostgreSQL).
    fn job(&mut self, id: &str, lock: bool) -> impl Future<Output = Res<Option<Job>>> + Send;
    fn job_by_key(&mut self, key: &str) -> impl Future<Output = Res<Option<Job>>> + Send;
    /// Read and lock: writes guarded by the attempt start here.
    fn attempt_row(&mut self, id: &str) -> impl Future<Output = Res<Option<AttemptRow>>> + Send;
    /// The keys (`COALESCE(owner, '')`) with queued jobs due by `now`, each
    /// with the largest `fair_pass` of its jobs: found by walking the index
    /// of queued jobs from key to key, never by scanning the queue.
    fn ready_keys(&mut self, now: i64) -> impl Future<Output = Res<Vec<ReadyKey>>> + Send;
    /// Up to `n` of `key`'s due queued jobs, by priority, then `run_at`,
    /// then id (locked, skipping locked rows, on PostgreSQL).
    fn due_of(
        &mut self,
        key: &str,
        now: i64,
        n: usize,
    ) -> impl Future<Output = Res<Vec<Candidate>>> + Send;
    /// Up to `n` running jobs whose lease expired, in the order they were
    /// first leased (their `fair_pass`), then oldest `run_at` first.
    fn expired(&mut self, now: i64, n: usize) -> impl Future<Output = Res<Vec<Candidate>>> + Send;
    /// Up to `limit` jobs `filter` matches, in its order after its cursor.
    fn list(
        &mut self,
        filter: &JobFilter,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<Job>>> + Send;
    /// How many jobs `filter` matches (after its cursor, if it has one).
    fn count_jobs(&mut self, filter: &JobFilter) -> impl Future<Output = Res<i64>> + Send;
    /// (bundle, state, count) of every job, or only of `owner`'s.
    fn counts_by_state(
        &mut self,
        owner: Option<&str>,
    ) -> impl Future<Output = Res<Vec<(String, String, i64)>>> + Send;
    /// From the index on live states, never a scan of finished jobs.
    fn count_in_state(&mut self, state: JobState) -> impl Future<Output = Res<i64>> + Send;
    fn finished_before(
        &mut self,
        cutoff: i64,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<String>>> + Send;
    /// Records what a job has spent (tokens, cost in millionths).
    fn record_spend(
        &mut self,
        id: &str,
        tokens: i64,
        cost_micros: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    /// Adds `n` to the job's count of tool calls that ended in an error.
    fn add_tool_errors(&mut self, id: &str, n: i64) -> impl Future<Output = Res<()>> + Send;
    /// What job `id`'s nested runs of `bundle` spent (replacing an earlier
    /// attempt's figure), dated as the job.
    fn record_nested_spend(
        &mut self,
        id: &str,
        bundle: &str,
        tokens: i64,
        cost_micros: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    /// What the jobs of `bundle` created since `since`, and its nested
    /// runs in any job, spent and hold.
    fn spend_since(
        &mut self,
        bundle: &str,
        since: i64,
    ) -> impl Future<Output = Res<StoredSpend>> + Send;
    /// An owner's jobs not finished, and what its jobs created since
    /// `since` spent and hold.
    fn owner_load(
        &mut self,
        owner: &str,
        since: i64,
    ) -> impl Future<Output = Res<(i64, StoredSpend)>> + Send;
    /// Takes the lock every write that reserves daily budgets holds until
    /// it commits, so two cannot both reserve what remains of one day
    /// (PostgreSQL, across daemons; SQLite's one writer holds it anyway).
    fn lock_daily_budgets(&mut self) -> impl Future<Output = Res<()>> + Send;
    /// Records what job `id` reserved of its daily budgets.
    fn set_reservation(
        &mut self,
        id: &str,
        tokens: i64,
        cost_micros: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    /// Jobs awaiting approval whose timeout (`run_at`) has passed.
    fn approvals_due(
        &mut self,
        now: i64,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<String>>> + Send;
    /// The finished jobs of conversation `c`, locked (PostgreSQL).
    fn finished_in_conversation(
        &mut self,
        c: &Conversation<'_>,
    ) -> impl Future<Output = Res<Vec<String>>> + Send;
    /// Jobs of conversation `c`, finished or not.
    fn count_in_conversation(
        &mut self,
        c: &Conversation<'_>,
    ) -> impl Future<Output = Res<i64>> + Send;
    /// Makes conversation `c`'s row unless it has one (then nothing
    /// changes; on PostgreSQL a concurrent claim of it is waited for).
    fn claim_conversation(
        &mut self,
        c: &Conversation<'_>,
        now: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    /// Whether conversation `c` has its row. `lock`: keep other writers
    /// off the row until commit (PostgreSQL).
    fn has_conversation(
        &mut self,
        c: &Conversation<'_>,
        lock: bool,
    ) -> impl Future<Output = Res<bool>> + Send;
    fn delete_conversation(&mut self, c: &Conversation<'_>)
    -> impl Future<Output = Res<()>> + Send;
    /// Marks the newest job of conversation `c` that is queued or running
    /// and not held as followed (its row locked until commit on
    /// PostgreSQL): a job held behind it is released when it leaves queued
    /// and running (the migration's trigger).
    fn follow_newest_turn(
        &mut self,
        c: &Conversation<'_>,
    ) -> impl Future<Output = Res<TurnAhead>> + Send;
    /// Names the job held job `id` waits behind.
    fn set_after(&mut self, id: &str, ahead: &str) -> impl Future<Output = Res<()>> + Send;

    // Writing jobs.
    /// Inserts queued jobs in one statement, in the order given (which is
    /// the order their idempotency keys are locked in); returns those
    /// inserted (a job whose idempotency key is taken is left out), in any
    /// order.
    fn insert_jobs(
        &mut self,
        jobs: &[(&JobId, &NewJob)],
        now: i64,
    ) -> impl Future<Output = Res<Vec<Job>>> + Send;
    /// Starts an attempt (`resumed`: its last worker died), pinning a first
    /// attempt's bundle when `pin` is given and none is pinned yet.
    fn start_attempt(&mut self, start: &AttemptStart<'_>) -> impl Future<Output = Res<Job>> + Send;
    /// Renews a current attempt's lease: `Some(cancel_requested)`, or `None`
    /// when the attempt is not current.
    fn renew(
        &mut self,
        id: &str,
        attempt: u32,
        expires: i64,
        now: i64,
    ) -> impl Future<Output = Res<Option<bool>>> + Send;
    fn pin(&mut self, id: &str, attempt: u32, pin: &Pin) -> impl Future<Output = Res<()>> + Send;
    /// Re-pins a job that is not running (queued or parked) from content
    /// `from` to `to`; whether it did (the job had moved on or started).
    fn repin(
        &mut self,
        id: &str,
        from: &str,
        to: &Pin,
        now: i64,
    ) -> impl Future<Output = Res<bool>> + Send;
    fn settle(
        &mut self,
        id: &str,
        settle: &Settle<'_>,
        now: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    /// Puts a running job back without using its attempt.
    fn unlease(&mut self, id: &str, now: i64) -> impl Future<Output = Res<()>> + Send;
    /// Cancels a queued or parked job; whether it did.
    fn cancel_waiting(&mut self, id: &str, now: i64) -> impl Future<Output = Res<bool>> + Send;
    fn request_cancel(&mut self, id: &str, now: i64) -> impl Future<Output = Res<()>> + Send;
    /// Queues a resolved job again (a decision taken, a caller's outputs
    /// handed back, a parked call resolved) to continue the attempt it
    /// parked: the next lease takes that attempt's number again, so a park
    /// never uses an attempt of `max_attempts` (nor raises it).
    fn requeue(&mut self, id: &str, now: i64) -> impl Future<Output = Res<()>> + Send;
    /// Deletes jobs with their events and journals.
    fn delete_jobs(&mut self, ids: &[String]) -> impl Future<Output = Res<()>> + Send;

    // The event log.
    /// Inserts an event; `false` when its sequence number is taken.
    fn insert_event(
        &mut self,
        id: &str,
        seq: u64,
        attempt: u32,
        json: &str,
    ) -> impl Future<Output = Res<bool>> + Send;
    /// The attempt and JSON stored at a sequence number.
    fn stored_event(
        &mut self,
        id: &str,
        seq: u64,
    ) -> impl Future<Output = Res<Option<(u32, String)>>> + Send;
    fn last_seq(&mut self, id: &str) -> impl Future<Output = Res<u64>> + Send;
    fn last_event(&mut self, id: &str) -> impl Future<Output = Res<Option<String>>> + Send;
    fn events_after(
        &mut self,
        id: &str,
        after: u64,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<StoredEvent>>> + Send;

    // The journal.
    fn journal(&mut self, id: &str) -> impl Future<Output = Res<Vec<JournalEntry>>> + Send;
    fn put_step(
        &mut self,
        id: &str,
        entry: &JournalEntry,
        attempt: u32,
    ) -> impl Future<Output = Res<()>> + Send;
    fn delete_step(
        &mut self,
        id: &str,
        scope: &str,
        turn: u32,
        step: &str,
    ) -> impl Future<Output = Res<()>> + Send;
}
