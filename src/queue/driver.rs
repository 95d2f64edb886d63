//! One [`JobQueue`] over any backend, as River's client is one over its
//! drivers: [`Queue`] turns each call into an [`Op`] and hands it to its
//! [`Driver`], which only knows how to run an operation in a transaction
//! of its dialect (and commit and announce it), or outside one for a read.
//! Each backend module holds only its driver, its dialect, its wake-ups and
//! its migrations.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::broadcast;

use super::op::{Done, FinishOp, LeaseOp, Op};
use super::tx::Wakeups;
use super::*;

/// What a backend provides: a way to run an operation durably (`write`:
/// its own transaction, or a share of a group commit, answered once
/// committed and announced) and a way to read.
#[async_trait]
pub(crate) trait Driver: Send + Sync + 'static {
    /// Runs `op` in a transaction; answers once it committed and its changes
    /// were announced.
    async fn write(&self, op: Op) -> Result<Done, QueueError>;
    /// Runs a read `op` outside any write.
    async fn read(&self, op: Op) -> Result<Done, QueueError>;
    /// Checks that the store answers.
    async fn ping(&self) -> Result<(), QueueError>;
    /// The store, as errors name it.
    fn label(&self) -> &str;
    /// This handle's wake-ups (fed at commit, and by other daemons where
    /// the store is shared).
    fn wakeups(&self) -> &Wakeups;
    fn write_counts(&self) -> WriteCounts;
}

/// The durable job queue over a backend's driver (`SqliteQueue`,
/// `PostgresQueue`).
pub struct Queue<D> {
    pub(crate) driver: D,
    pub(crate) retry: RetryPolicy,
}

/// Takes the expected variant out of a driver's answer. Another kind of
/// answer is a bug in the backend, reported rather than trusted.
macro_rules! expect {
    ($self:ident, $answer:expr, $variant:ident) => {
        match $answer {
            Done::$variant(value) => Ok(value),
            _ => Err(mismatch($self.driver.label(), stringify!($variant))),
        }
    };
}

fn mismatch(store: &str, expected: &str) -> QueueError {
    QueueError::Store {
        path: store.to_string(),
        detail: format!(
            "internal error: the backend did not answer with {expected}; please report this"
        ),
    }
}

impl<D> Queue<D> {
    fn finish_op(
        &self,
        id: &JobId,
        attempt: u32,
        outcome: Outcome,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> FinishOp {
        FinishOp {
            id: id.clone(),
            attempt,
            outcome,
            events: events.to_vec(),
            final_event,
            retry: self.retry,
        }
    }
}

#[async_trait]
impl<D: Driver> JobQueue for Queue<D> {
    async fn submit(&self, mut job: NewJob) -> Result<(Job, bool), QueueError> {
        let id = job.id.take().unwrap_or_default();
        let submitted = expect!(
            self,
            self.driver.write(Op::Submit(id, job)).await?,
            Submitted
        )?;
        if submitted.1 {
            crate::failpoint::hit(crate::failpoint::Failpoint::AfterSubmitCommit);
        }
        Ok(submitted)
    }

    async fn submit_many(&self, jobs: Vec<NewJob>) -> Result<Vec<(Job, bool)>, QueueError> {
        let op = Op::SubmitMany(with_ids(jobs));
        expect!(self, self.driver.write(op).await?, SubmittedMany)
    }

    async fn get(&self, id: &JobId) -> Result<Option<Job>, QueueError> {
        expect!(self, self.driver.read(Op::Get(id.clone())).await?, Job)
    }

    async fn list(&self, filter: JobFilter) -> Result<Page, QueueError> {
        expect!(self, self.driver.read(Op::List(filter)).await?, Page)
    }

    async fn counts_by_state(&self) -> Result<Vec<(String, JobState, u64)>, QueueError> {
        expect!(
            self,
            self.driver.read(Op::CountsByState).await?,
            CountsByState
        )
    }

    async fn live_counts(&self) -> Result<Vec<(JobState, u64)>, QueueError> {
        expect!(self, self.driver.read(Op::LiveCounts).await?, LiveCounts)
    }

    async fn lease_many(
        &self,
        worker: &str,
        lease_for: Duration,
        n: usize,
        pin: Option<Arc<Pinner>>,
    ) -> Result<Vec<Lease>, QueueError> {
        let op = Op::Lease(LeaseOp {
            worker: worker.to_string(),
            lease_for,
            n,
            max_crash_resumes: self.retry.max_crash_resumes,
            pin,
        });
        expect!(self, self.driver.write(op).await?, Leases)
    }

    async fn heartbeat(
        &self,
        id: &JobId,
        attempt: u32,
        lease_for: Duration,
    ) -> Result<HeartbeatReply, QueueError> {
        let op = Op::Heartbeat {
            id: id.clone(),
            attempt,
            lease_for,
        };
        expect!(self, self.driver.write(op).await?, Heartbeat)
    }

    async fn pin_version(
        &self,
        id: &JobId,
        attempt: u32,
        version: &str,
        digest: &str,
    ) -> Result<(), QueueError> {
        let pin = Pin {
            version: version.to_string(),
            digest: digest.to_string(),
        };
        let op = Op::Pin {
            id: id.clone(),
            attempt,
            pin,
        };
        expect!(self, self.driver.write(op).await?, Nothing)
    }

    async fn finish(
        &self,
        id: &JobId,
        attempt: u32,
        outcome: Outcome,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> Result<Finished, QueueError> {
        crate::failpoint::reached(crate::failpoint::Failpoint::BeforeCompletionCommit).await;
        let op = Op::Finish(self.finish_op(id, attempt, outcome, events, final_event));
        expect!(self, self.driver.write(op).await?, Finished)
    }

    async fn finish_and_lease(
        &self,
        id: &JobId,
        attempt: u32,
        outcome: Outcome,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
        next: NextLease,
    ) -> Result<(Finished, Vec<Lease>), QueueError> {
        crate::failpoint::reached(crate::failpoint::Failpoint::BeforeCompletionCommit).await;
        let finish = self.finish_op(id, attempt, outcome, events, final_event);
        let lease = LeaseOp {
            worker: next.worker,
            lease_for: next.lease_for,
            n: next.n,
            max_crash_resumes: self.retry.max_crash_resumes,
            pin: next.pin,
        };
        let op = Op::FinishAndLease(finish, lease);
        expect!(self, self.driver.write(op).await?, FinishedAndLeased)
    }

    async fn release(
        &self,
        id: &JobId,
        attempt: u32,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> Result<Finished, QueueError> {
        let op = Op::Release {
            id: id.clone(),
            attempt,
            events: events.to_vec(),
            final_event,
        };
        expect!(self, self.driver.write(op).await?, Finished)
    }

    async fn forget_conversation(
        &self,
        conversation_id: &str,
    ) -> Result<(usize, usize), QueueError> {
        let op = Op::Forget(conversation_id.to_string());
        expect!(self, self.driver.write(op).await?, Forgotten)
    }

    async fn purge_finished(
        &self,
        finished_before: SystemTime,
        limit: usize,
    ) -> Result<usize, QueueError> {
        let op = Op::Purge {
            cutoff: millis(finished_before),
            limit,
        };
        expect!(self, self.driver.write(op).await?, Purged)
    }

    async fn journal(&self, id: &JobId) -> Result<Vec<JournalEntry>, QueueError> {
        expect!(
            self,
            self.driver.read(Op::Journal(id.clone())).await?,
            Journal
        )
    }

    async fn record_steps(
        &self,
        id: &JobId,
        attempt: u32,
        entries: &[JournalEntry],
        events: &[EventEnvelope],
    ) -> Result<(), QueueError> {
        let op = Op::RecordSteps {
            id: id.clone(),
            attempt,
            entries: entries.to_vec(),
            events: events.to_vec(),
        };
        expect!(self, self.driver.write(op).await?, Nothing)?;
        lost_reply(self.driver.label())
    }

    async fn resolve(&self, id: &JobId, resolution: Resolution) -> Result<Changed, QueueError> {
        let op = Op::Resolve {
            id: id.clone(),
            resolution,
        };
        expect!(self, self.driver.write(op).await?, Changed)
    }

    async fn decide_approval(
        &self,
        id: &JobId,
        call: &str,
        decision: crate::approval::Decision,
        by: &str,
    ) -> Result<Changed, QueueError> {
        let op = Op::DecideApproval {
            id: id.clone(),
            call: call.to_string(),
            decision,
            by: by.to_string(),
            store: self.driver.label().to_string(),
        };
        expect!(self, self.driver.write(op).await?, Changed)
    }

    async fn spend_since(
        &self,
        bundle: &str,
        since: std::time::SystemTime,
    ) -> Result<(u64, f64), QueueError> {
        let op = Op::SpendSince {
            bundle: bundle.to_string(),
            since: super::millis(since),
        };
        expect!(self, self.driver.read(op).await?, Spend)
    }

    async fn owner_load(
        &self,
        owner: &str,
        since: std::time::SystemTime,
    ) -> Result<super::OwnerLoad, QueueError> {
        let op = Op::OwnerLoad {
            owner: owner.to_string(),
            since: super::millis(since),
        };
        expect!(self, self.driver.read(op).await?, OwnerLoad)
    }

    async fn expire_approvals(&self, limit: usize) -> Result<Vec<Job>, QueueError> {
        let op = Op::ExpireApprovals {
            limit,
            store: self.driver.label().to_string(),
        };
        expect!(self, self.driver.write(op).await?, Expired)
    }

    async fn cancel(&self, id: &JobId) -> Result<Option<Changed>, QueueError> {
        expect!(
            self,
            self.driver.write(Op::Cancel(id.clone())).await?,
            Cancelled
        )
    }

    async fn events_after(
        &self,
        id: &JobId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, QueueError> {
        let op = Op::EventsAfter {
            id: id.clone(),
            after: after_seq,
            limit,
        };
        expect!(self, self.driver.read(op).await?, Events)
    }

    async fn last_seq(&self, id: &JobId) -> Result<u64, QueueError> {
        expect!(
            self,
            self.driver.read(Op::LastSeq(id.clone())).await?,
            LastSeq
        )
    }

    fn subscribe(&self) -> broadcast::Receiver<JobId> {
        self.driver.wakeups().changes.subscribe()
    }

    fn runnable(&self) -> Option<broadcast::Receiver<JobId>> {
        Some(self.driver.wakeups().runnable.subscribe())
    }

    fn cancels(&self) -> Option<broadcast::Receiver<JobId>> {
        Some(self.driver.wakeups().cancels.subscribe())
    }

    fn write_stats(&self) -> WriteCounts {
        self.driver.write_counts()
    }

    async fn move_version(
        &self,
        id: &JobId,
        from: &str,
        version: &str,
        digest: &str,
    ) -> Result<Option<Job>, QueueError> {
        let op = Op::MoveVersion {
            id: id.clone(),
            from: from.to_string(),
            to: Pin {
                version: version.to_string(),
                digest: digest.to_string(),
            },
        };
        expect!(self, self.driver.write(op).await?, Job)
    }

    async fn ping(&self) -> Result<(), QueueError> {
        self.driver.ping().await
    }

    async fn put_schedule(&self, schedule: StoredSchedule) -> Result<(), QueueError> {
        let op = Op::PutSchedule(schedule);
        expect!(self, self.driver.write(op).await?, Nothing)
    }

    async fn schedules(&self) -> Result<Vec<StoredSchedule>, QueueError> {
        expect!(self, self.driver.read(Op::Schedules).await?, Schedules)
    }

    async fn delete_schedule(&self, id: &str) -> Result<bool, QueueError> {
        let op = Op::DeleteSchedule(id.to_string());
        expect!(self, self.driver.write(op).await?, Flag)
    }

    async fn pause_schedule(&self, id: &str, paused: bool) -> Result<bool, QueueError> {
        let op = Op::PauseSchedule {
            id: id.to_string(),
            paused,
        };
        expect!(self, self.driver.write(op).await?, Flag)
    }

    async fn record_fire(&self, fire: FireRecord) -> Result<bool, QueueError> {
        expect!(self, self.driver.write(Op::RecordFire(fire)).await?, Flag)
    }

    async fn claim_deliveries(
        &self,
        lease_for: Duration,
        limit: usize,
    ) -> Result<Vec<Delivery>, QueueError> {
        let op = Op::ClaimDeliveries { lease_for, limit };
        expect!(self, self.driver.write(op).await?, Deliveries)
    }

    async fn settle_delivery(&self, id: &str, result: DeliveryResult) -> Result<(), QueueError> {
        let op = Op::SettleDelivery {
            id: id.to_string(),
            result,
        };
        expect!(self, self.driver.write(op).await?, Nothing)
    }

    async fn dead_deliveries(&self) -> Result<u64, QueueError> {
        expect!(self, self.driver.read(Op::DeadDeliveries).await?, LastSeq)
    }

    async fn list_deliveries(&self, filter: DeliveryFilter) -> Result<DeliveryPage, QueueError> {
        let op = Op::ListDeliveries(filter);
        expect!(self, self.driver.read(op).await?, DeliveryPage)
    }

    async fn redrive_delivery(&self, id: &str, owner: Option<&str>) -> Result<Redrive, QueueError> {
        let op = Op::RedriveDelivery {
            id: id.to_string(),
            owner: owner.map(str::to_string),
        };
        expect!(self, self.driver.write(op).await?, Redrive)
    }

    async fn put_push_config(&self, id: &JobId, config: PushConfig) -> Result<(), QueueError> {
        let op = Op::PutPushConfig {
            id: id.clone(),
            config,
        };
        expect!(self, self.driver.write(op).await?, Nothing)
    }

    async fn push_configs(&self, id: &JobId) -> Result<Vec<PushConfig>, QueueError> {
        let op = Op::PushConfigs(id.clone());
        expect!(self, self.driver.read(op).await?, PushConfigs)
    }

    async fn delete_push_config(&self, id: &JobId, config: &str) -> Result<bool, QueueError> {
        let op = Op::DeletePushConfig {
            id: id.clone(),
            config: config.to_string(),
        };
        expect!(self, self.driver.write(op).await?, Flag)
    }
}
