//! The job operations: submit (one or many), lease, heartbeat, pin, finish
//! (alone or with the slot's next lease), release, an operator's cancel,
//! resolve and approval decisions, journal steps, conversations, versions
//! and retention.

use super::*;

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
        decisions::cancel(tx, &self.id).await
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
        decisions::resolve(tx, &self.id, &self.resolution).await
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
        decisions::decide_approval(tx, id, call, decision, by, store).await
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
        decisions::expire_approvals(tx, self.limit, &self.store).await
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
        reads::forget_conversation(tx, &conversation).await
    }
}

impl Write for ForgetConversation {}

/// Deletes one job if it has ended.
pub(crate) struct DeleteFinished {
    pub id: JobId,
}

impl Operation for DeleteFinished {
    type Output = reads::Deletion;
    const NAME: &'static str = "delete_finished";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<reads::Deletion> {
        reads::delete_finished(tx, &self.id).await
    }
}

impl Write for DeleteFinished {}

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
        reads::purge_finished(tx, self.cutoff, self.limit).await
    }
}

impl Write for PurgeFinished {}
