//! One type per queue operation, as River's driver interface takes one
//! params struct per operation and answers with its own result type: each
//! struct owns what the operation needs (so it can cross to a writer thread
//! or task), names its answer ([`Operation::Output`]) and runs its rule in
//! `lifecycle` (or `outbox`, `schedules`, `versions`), written once for
//! every dialect over any [`Tx`]. A backend's driver runs any of them
//! without knowing what they do, and a caller gets exactly the answer type
//! its operation names: a wrong one does not compile.
//!
//! Writes ([`Write`]) say whether a full backlog refuses them; reads
//! ([`Read`]) run outside any write. A driver's `read` takes only a `Read`
//! and its `write` only a `Write`, so a write cannot slip out of its
//! transaction. A finish and the worker slot's next lease
//! ([`FinishAndLease`]) is neither: it is a write in two parts that a
//! driver may run apart (PostgreSQL: the finish, then the lease, each one
//! statement), and drivers take it through a method of its own.
//!
//! A write that locks several rows takes them in one order inside itself
//! (a submit under daily budgets the budgets' one lock first, then a
//! batch's conversations, then its idempotency keys, sorted; a job's row
//! before its events, journal and deliveries), and no write holds another's
//! locks (each is its own transaction on PostgreSQL), so concurrent writes
//! do not wait for each other in a cycle.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::lifecycle::{self, Ending, LeaseAsk, Pinner};
use super::outbox::{
    self, Delivery, DeliveryFilter, DeliveryPage, DeliveryResult, Redrive, Settled,
};
use super::schedules::{self, FireRecord, StoredSchedule};
use super::transaction::Tx;
use super::tx::{Conversation, Pin, Res};
use super::*;

/// A queue operation: its parameters, owned, and the rule that runs it.
pub(crate) trait Operation: Send + Sync + 'static {
    /// What the operation answers.
    type Output: Send + 'static;
    /// Its name, for errors and logs.
    const NAME: &'static str;
    /// Runs the rule inside `tx` (the backend opened it and commits it). It
    /// borrows the operation, so a write the database gave up on
    /// (`Fail::Conflict`) can run again. The future is `Send` for every
    /// dialect, so a writer task can carry operations of any type.
    fn run<T: Tx>(&self, tx: &mut T) -> impl Future<Output = Res<Self::Output>> + Send;
}

/// An operation that writes: run in a transaction of its own (or, on
/// SQLite, a share of the writer's batch) and answered once committed.
pub(crate) trait Write: Operation {
    /// Whether a full write backlog refuses it (`QueueError::Busy`) rather
    /// than making it wait for room: only new work is refused; the writes
    /// of jobs already running (leases, heartbeats, outcomes, journal
    /// steps) and operators' decisions wait, because they are what drains
    /// the backlog.
    const REFUSED_WHEN_BUSY: bool = false;
    /// Whether it may queue a job at a place the leases have passed (put
    /// back with its old `run_at`, or new with one in the past): a store
    /// whose leases start where they last leased (PostgreSQL's cursors)
    /// then looks from every key's head at its next lease.
    const MAY_QUEUE_BEHIND: bool = false;
}

/// An operation that only reads: one statement or a few, no rule, outside
/// any write.
pub(crate) trait Read: Operation {}

// ---------------------------------------------------------------------
// Jobs: submit, lease, run, end.

/// Inserts a job, or finds the one its idempotency key names: the job and
/// whether it is new.
pub(crate) struct Submit {
    pub id: JobId,
    pub job: NewJob,
}

impl Operation for Submit {
    type Output = (Job, bool);
    const NAME: &'static str = "submit";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<(Job, bool)> {
        lifecycle::submit(tx, &self.id, &self.job).await
    }
}

impl Write for Submit {
    const REFUSED_WHEN_BUSY: bool = true;
}

/// Inserts many jobs in one transaction, each answered as [`Submit`].
pub(crate) struct SubmitMany {
    pub jobs: Vec<(JobId, NewJob)>,
}

impl Operation for SubmitMany {
    type Output = Vec<(Job, bool)>;
    const NAME: &'static str = "submit_many";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Vec<(Job, bool)>> {
        lifecycle::submit_many(tx, &self.jobs).await
    }
}

impl Write for SubmitMany {
    const REFUSED_WHEN_BUSY: bool = true;
    const MAY_QUEUE_BEHIND: bool = true;
}

/// Leases up to `n` of the best runnable jobs.
pub(crate) struct LeaseJobs {
    pub worker: String,
    pub lease_for: Duration,
    pub n: usize,
    pub max_crash_resumes: u32,
    pub pin: Option<Arc<Pinner>>,
    pub shares: Arc<Shares>,
}

impl Operation for LeaseJobs {
    type Output = Vec<Lease>;
    const NAME: &'static str = "lease";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Vec<Lease>> {
        let ask = LeaseAsk {
            worker: &self.worker,
            lease_for: self.lease_for,
            n: self.n,
            max_crash_resumes: self.max_crash_resumes,
            pin: self.pin.as_deref(),
            shares: &self.shares,
        };
        lifecycle::lease(tx, &ask).await
    }
}

impl Write for LeaseJobs {}

/// Renews a current attempt's lease.
pub(crate) struct Heartbeat {
    pub id: JobId,
    pub attempt: u32,
    pub lease_for: Duration,
}

impl Operation for Heartbeat {
    type Output = HeartbeatReply;
    const NAME: &'static str = "heartbeat";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<HeartbeatReply> {
        lifecycle::heartbeat(tx, &self.id, self.attempt, self.lease_for).await
    }
}

impl Write for Heartbeat {}

/// Pins the bundle a first attempt runs with.
pub(crate) struct PinVersion {
    pub id: JobId,
    pub attempt: u32,
    pub pin: Pin,
}

impl Operation for PinVersion {
    type Output = ();
    const NAME: &'static str = "pin_version";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<()> {
        lifecycle::pin_version(tx, &self.id, self.attempt, &self.pin).await
    }
}

impl Write for PinVersion {}

/// Records an attempt's outcome by the one rule, `decide`.
pub(crate) struct Finish {
    pub id: JobId,
    pub attempt: u32,
    pub outcome: Outcome,
    pub events: Vec<EventEnvelope>,
    pub final_event: Option<EventEnvelope>,
    pub retry: RetryPolicy,
}

impl Operation for Finish {
    type Output = Finished;
    const NAME: &'static str = "finish";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Finished> {
        let ending = Ending {
            events: &self.events,
            final_event: self.final_event.as_ref(),
        };
        lifecycle::finish(
            tx,
            &self.id,
            self.attempt,
            &self.outcome,
            ending,
            &self.retry,
        )
        .await
    }
}

impl Write for Finish {}

/// A finish, then the worker slot's next lease. Not a [`Write`]: SQLite
/// runs both in one transaction, PostgreSQL as two statements (a lease
/// that fails after its finish committed answers the finish with nothing
/// leased); drivers take it through `Driver::finish_and_lease`.
pub(crate) struct FinishAndLease {
    pub finish: Finish,
    pub lease: LeaseJobs,
}

impl Operation for FinishAndLease {
    type Output = (Finished, Vec<Lease>);
    const NAME: &'static str = "finish_and_lease";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<(Finished, Vec<Lease>)> {
        let finished = self.finish.run(tx).await?;
        Ok((finished, self.lease.run(tx).await?))
    }
}

/// Gives a running job back (drain) without using its attempt.
pub(crate) struct Release {
    pub id: JobId,
    pub attempt: u32,
    pub events: Vec<EventEnvelope>,
    pub final_event: Option<EventEnvelope>,
}

impl Operation for Release {
    type Output = Finished;
    const NAME: &'static str = "release";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Finished> {
        let ending = Ending {
            events: &self.events,
            final_event: self.final_event.as_ref(),
        };
        lifecycle::release(tx, &self.id, self.attempt, ending).await
    }
}

impl Write for Release {
    const MAY_QUEUE_BEHIND: bool = true;
}

/// Cancels a queued or parked job; asks a running one to stop.
pub(crate) struct Cancel {
    pub id: JobId,
}

impl Operation for Cancel {
    type Output = Option<Changed>;
    const NAME: &'static str = "cancel";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Option<Changed>> {
        lifecycle::cancel(tx, &self.id).await
    }
}

impl Write for Cancel {}

/// An operator's answer for a `needs_attention` job.
pub(crate) struct Resolve {
    pub id: JobId,
    pub resolution: Resolution,
}

impl Operation for Resolve {
    type Output = Changed;
    const NAME: &'static str = "resolve";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Changed> {
        lifecycle::resolve(tx, &self.id, &self.resolution).await
    }
}

impl Write for Resolve {
    const MAY_QUEUE_BEHIND: bool = true;
}

/// A person's decision on the call an `awaiting_approval` job waits for.
pub(crate) struct DecideApproval {
    pub id: JobId,
    pub call: String,
    pub decision: crate::approval::Decision,
    pub by: String,
    /// The store, as errors name it.
    pub store: String,
}

impl Operation for DecideApproval {
    type Output = Changed;
    const NAME: &'static str = "decide_approval";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Changed> {
        let DecideApproval {
            id,
            call,
            decision,
            by,
            store,
        } = self;
        lifecycle::decide_approval(tx, id, call, decision, by, store).await
    }
}

impl Write for DecideApproval {
    const MAY_QUEUE_BEHIND: bool = true;
}

/// Denies the calls whose approval timeout passed.
pub(crate) struct ExpireApprovals {
    pub limit: usize,
    /// The store, as errors name it.
    pub store: String,
}

impl Operation for ExpireApprovals {
    type Output = Vec<Job>;
    const NAME: &'static str = "expire_approvals";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Vec<Job>> {
        lifecycle::expire_approvals(tx, self.limit, &self.store).await
    }
}

impl Write for ExpireApprovals {
    const MAY_QUEUE_BEHIND: bool = true;
}

/// Records journal steps with the events held until then.
pub(crate) struct RecordSteps {
    pub id: JobId,
    pub attempt: u32,
    pub entries: Vec<JournalEntry>,
    pub events: Vec<EventEnvelope>,
}

impl Operation for RecordSteps {
    type Output = ();
    const NAME: &'static str = "record_steps";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<()> {
        lifecycle::record_steps(tx, &self.id, self.attempt, &self.entries, &self.events).await
    }
}

impl Write for RecordSteps {}

/// Deletes a conversation's finished jobs: (deleted, left unfinished).
pub(crate) struct ForgetConversation {
    pub owner: Option<String>,
    pub id: String,
}

impl Operation for ForgetConversation {
    type Output = (usize, usize);
    const NAME: &'static str = "forget_conversation";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<(usize, usize)> {
        let conversation = Conversation::of(self.owner.as_deref(), &self.id);
        lifecycle::forget_conversation(tx, &conversation).await
    }
}

impl Write for ForgetConversation {}

/// Whether a key's conversation `id` has its row: some job of that key
/// claimed it (and it was not forgotten since).
pub(crate) struct HasConversation {
    pub owner: Option<String>,
    pub id: String,
}

impl Operation for HasConversation {
    type Output = bool;
    const NAME: &'static str = "has_conversation";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<bool> {
        let conversation = Conversation::of(self.owner.as_deref(), &self.id);
        tx.has_conversation(&conversation, false).await
    }
}

impl Read for HasConversation {}

/// Moves a queued or parked job to another content of its bundle.
pub(crate) struct MoveVersion {
    pub id: JobId,
    pub from: String,
    pub to: Pin,
}

impl Operation for MoveVersion {
    type Output = Option<Job>;
    const NAME: &'static str = "move_version";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Option<Job>> {
        super::versions::move_version(tx, &self.id, &self.from, &self.to).await
    }
}

impl Write for MoveVersion {
    const MAY_QUEUE_BEHIND: bool = true;
}

/// Deletes up to `limit` jobs that finished before `cutoff` (ms).
pub(crate) struct PurgeFinished {
    pub cutoff: i64,
    pub limit: usize,
}

impl Operation for PurgeFinished {
    type Output = usize;
    const NAME: &'static str = "purge_finished";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<usize> {
        lifecycle::purge_finished(tx, self.cutoff, self.limit).await
    }
}

impl Write for PurgeFinished {}

// ---------------------------------------------------------------------
// Schedules (see `schedules`).

pub(crate) struct PutSchedule {
    pub schedule: StoredSchedule,
}

impl Operation for PutSchedule {
    type Output = ();
    const NAME: &'static str = "put_schedule";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<()> {
        schedules::put(tx, &self.schedule).await
    }
}

impl Write for PutSchedule {}

/// Whether there was one to delete.
pub(crate) struct DeleteSchedule {
    pub id: String,
}

impl Operation for DeleteSchedule {
    type Output = bool;
    const NAME: &'static str = "delete_schedule";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<bool> {
        tx.delete_schedule(&self.id).await
    }
}

impl Write for DeleteSchedule {}

/// Whether there was one to pause or resume.
pub(crate) struct PauseSchedule {
    pub id: String,
    pub paused: bool,
}

impl Operation for PauseSchedule {
    type Output = bool;
    const NAME: &'static str = "pause_schedule";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<bool> {
        schedules::pause(tx, &self.id, self.paused).await
    }
}

impl Write for PauseSchedule {}

/// Whether the fire was recorded (its `next_fire` still held).
pub(crate) struct RecordFire {
    pub fire: FireRecord,
}

impl Operation for RecordFire {
    type Output = bool;
    const NAME: &'static str = "record_fire";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<bool> {
        schedules::record_fire(tx, &self.fire).await
    }
}

impl Write for RecordFire {}

// ---------------------------------------------------------------------
// The outbox (see `outbox`).

/// Up to `limit` due deliveries, leased for `lease_for`.
pub(crate) struct ClaimDeliveries {
    pub lease_for: Duration,
    pub limit: usize,
}

impl Operation for ClaimDeliveries {
    type Output = Vec<Delivery>;
    const NAME: &'static str = "claim_deliveries";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Vec<Delivery>> {
        let lease_ms = i64::try_from(self.lease_for.as_millis()).unwrap_or(i64::MAX);
        outbox::claim(tx, lease_ms, self.limit).await
    }
}

impl Write for ClaimDeliveries {}

/// Records a delivery attempt's outcome under the claim that made it.
pub(crate) struct SettleDelivery {
    pub id: String,
    /// The claim's generation (`Delivery::claim`).
    pub claim: u64,
    pub result: DeliveryResult,
}

impl Operation for SettleDelivery {
    type Output = Settled;
    const NAME: &'static str = "settle_delivery";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Settled> {
        outbox::settle(tx, &self.id, self.claim, &self.result).await
    }
}

impl Write for SettleDelivery {}

pub(crate) struct RedriveDelivery {
    pub id: String,
    /// Only a delivery of this key's jobs.
    pub owner: Option<String>,
}

impl Operation for RedriveDelivery {
    type Output = Redrive;
    const NAME: &'static str = "redrive_delivery";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Redrive> {
        outbox::redrive(tx, &self.id, self.owner.as_deref()).await
    }
}

impl Write for RedriveDelivery {}

/// Adds a push config to a task within its caps (or replaces the one
/// with its id).
pub(crate) struct PutPushConfig {
    pub id: JobId,
    pub config: PushConfig,
    pub caps: super::PushCaps,
}

impl Operation for PutPushConfig {
    type Output = ();
    const NAME: &'static str = "put_push_config";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<()> {
        outbox::put_push(tx, self.id.as_str(), &self.config, &self.caps).await
    }
}

impl Write for PutPushConfig {}

/// Whether there was one to delete.
pub(crate) struct DeletePushConfig {
    pub id: JobId,
    pub config: String,
}

impl Operation for DeletePushConfig {
    type Output = bool;
    const NAME: &'static str = "delete_push_config";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<bool> {
        outbox::delete_push(tx, self.id.as_str(), &self.config).await
    }
}

impl Write for DeletePushConfig {}

// ---------------------------------------------------------------------
// Reads.

pub(crate) struct GetJob {
    pub id: JobId,
}

impl Operation for GetJob {
    type Output = Option<Job>;
    const NAME: &'static str = "get";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Option<Job>> {
        tx.job(self.id.as_str(), false).await
    }
}

impl Read for GetJob {}

pub(crate) struct ListJobs {
    pub filter: JobFilter,
}

impl Operation for ListJobs {
    type Output = Page;
    const NAME: &'static str = "list";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Page> {
        lifecycle::list(tx, &self.filter).await
    }
}

impl Read for ListJobs {}

/// (bundle, state, count) for every non-empty combination, of every job
/// or only of `owner`'s (an API key that may list only its own).
pub(crate) struct CountByState {
    pub owner: Option<String>,
}

impl Operation for CountByState {
    type Output = Vec<(String, JobState, u64)>;
    const NAME: &'static str = "counts_by_state";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Vec<(String, JobState, u64)>> {
        lifecycle::counts_by_state(tx, self.owner.as_deref()).await
    }
}

impl Read for CountByState {}

/// How many jobs are in each live state.
pub(crate) struct CountLive;

impl Operation for CountLive {
    type Output = Vec<(JobState, u64)>;
    const NAME: &'static str = "live_counts";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Vec<(JobState, u64)>> {
        lifecycle::live_counts(tx).await
    }
}

impl Read for CountLive {}

pub(crate) struct EventsAfter {
    pub id: JobId,
    pub after: u64,
    pub limit: usize,
}

impl Operation for EventsAfter {
    type Output = Vec<StoredEvent>;
    const NAME: &'static str = "events_after";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Vec<StoredEvent>> {
        tx.events_after(self.id.as_str(), self.after, self.limit)
            .await
    }
}

impl Read for EventsAfter {}

pub(crate) struct LastSeq {
    pub id: JobId,
}

impl Operation for LastSeq {
    type Output = u64;
    const NAME: &'static str = "last_seq";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<u64> {
        tx.last_seq(self.id.as_str()).await
    }
}

impl Read for LastSeq {}

pub(crate) struct ReadJournal {
    pub id: JobId,
}

impl Operation for ReadJournal {
    type Output = Vec<JournalEntry>;
    const NAME: &'static str = "journal";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Vec<JournalEntry>> {
        tx.journal(self.id.as_str()).await
    }
}

impl Read for ReadJournal {}

/// What the jobs of `bundle` created since `since` (ms), and its nested
/// runs, spent and hold.
pub(crate) struct SpendSince {
    pub bundle: String,
    pub since: i64,
}

impl Operation for SpendSince {
    type Output = crate::budget::DaySpend;
    const NAME: &'static str = "spend_since";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<crate::budget::DaySpend> {
        Ok(tx.spend_since(&self.bundle, self.since).await?.day())
    }
}

impl Read for SpendSince {}

/// What an API key's jobs hold and spent since `since` (ms).
pub(crate) struct LoadOfOwner {
    pub owner: String,
    pub since: i64,
}

impl Operation for LoadOfOwner {
    type Output = OwnerLoad;
    const NAME: &'static str = "owner_load";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<OwnerLoad> {
        lifecycle::owner_load(tx, &self.owner, self.since).await
    }
}

impl Read for LoadOfOwner {}

pub(crate) struct ListSchedules;

impl Operation for ListSchedules {
    type Output = Vec<StoredSchedule>;
    const NAME: &'static str = "schedules";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Vec<StoredSchedule>> {
        tx.schedules().await
    }
}

impl Read for ListSchedules {}

/// How many deliveries are dead-lettered.
pub(crate) struct CountDeadDeliveries;

impl Operation for CountDeadDeliveries {
    type Output = u64;
    const NAME: &'static str = "dead_deliveries";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<u64> {
        Ok(u64::try_from(tx.dead_deliveries().await?).unwrap_or(0))
    }
}

impl Read for CountDeadDeliveries {}

pub(crate) struct ListDeliveries {
    pub filter: DeliveryFilter,
}

impl Operation for ListDeliveries {
    type Output = DeliveryPage;
    const NAME: &'static str = "list_deliveries";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<DeliveryPage> {
        outbox::list(tx, &self.filter).await
    }
}

impl Read for ListDeliveries {}

pub(crate) struct PushConfigs {
    pub id: JobId,
}

impl Operation for PushConfigs {
    type Output = Vec<PushConfig>;
    const NAME: &'static str = "push_configs";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Vec<PushConfig>> {
        tx.push_configs(self.id.as_str()).await
    }
}

impl Read for PushConfigs {}

#[cfg(test)]
mod tests {
    use super::*;

    /// Only new work is refused by a full backlog.
    #[test]
    fn only_submits_are_refused_when_busy() {
        const REFUSED: [bool; 4] = [
            Submit::REFUSED_WHEN_BUSY,
            SubmitMany::REFUSED_WHEN_BUSY,
            Finish::REFUSED_WHEN_BUSY,
            LeaseJobs::REFUSED_WHEN_BUSY,
        ];
        assert_eq!(REFUSED, [true, true, false, false]);
    }
}
