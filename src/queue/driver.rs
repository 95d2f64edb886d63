//! One [`JobQueue`] over any backend, as River's client is one over its
//! drivers: [`Queue`] turns each call into its operation's struct (see
//! `op`) and hands it to its `Driver` (`backend.rs`), which only knows how to run an
//! operation in a transaction of its dialect (and commit and announce it),
//! or outside one for a read. The answer has the type the operation names.
//! Each backend module holds only its driver, its dialect, its wake-ups and
//! its migrations.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::broadcast;

use super::backend::Driver;
use super::op::{self, FinishAndLease, LeaseJobs};
use super::*;

/// The durable job queue over a backend's driver (`SqliteQueue`,
/// `PostgresQueue`).
pub struct Queue<D> {
    pub(crate) driver: D,
    pub(crate) retry: RetryPolicy,
    /// How leases share the queue between keys (the keys file's weights,
    /// set by the worker when they change).
    pub(crate) shares: std::sync::RwLock<Arc<Shares>>,
}

impl<D> Queue<D> {
    pub(crate) fn new(driver: D, retry: RetryPolicy) -> Self {
        Self {
            driver,
            retry,
            shares: Default::default(),
        }
    }

    fn shares(&self) -> Arc<Shares> {
        self.shares
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    fn finish_op(
        &self,
        id: &JobId,
        attempt: u32,
        outcome: Outcome,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> op::Finish {
        op::Finish {
            id: id.clone(),
            attempt,
            outcome,
            events: events.to_vec(),
            final_event,
            retry: self.retry,
        }
    }
}

// Kept as one method per call, alike by design: each repeats its
// signature in `seam.rs` (as an impl must) and only builds its operation's
// struct for the driver; the operations themselves are `op/`'s.
#[async_trait]
impl<D: Driver> JobQueue for Queue<D> {
    async fn submit(&self, mut job: NewJob) -> Result<(Job, bool), QueueError> {
        let id = job.id.take().unwrap_or_default();
        let submitted = self.driver.submit(op::Submit { id, job }).await?;
        if submitted.1 {
            crate::failpoint::hit(crate::failpoint::Failpoint::AfterSubmitCommit);
        }
        Ok(submitted)
    }

    async fn submit_many(&self, jobs: Vec<NewJob>) -> Result<Vec<(Job, bool)>, QueueError> {
        let jobs = with_ids(jobs);
        self.driver.write(op::SubmitMany { jobs }).await
    }

    async fn get(&self, id: &JobId) -> Result<Option<Job>, QueueError> {
        self.driver.read(op::GetJob { id: id.clone() }).await
    }

    async fn list(&self, filter: JobFilter) -> Result<Page, QueueError> {
        self.driver.read(op::ListJobs { filter }).await
    }

    async fn count(&self, filter: JobFilter) -> Result<u64, QueueError> {
        self.driver.read(op::CountJobs { filter }).await
    }

    async fn counts_by_state(
        &self,
        owner: Option<&str>,
    ) -> Result<Vec<(String, JobState, u64)>, QueueError> {
        let op = op::CountByState {
            owner: owner.map(str::to_string),
        };
        self.driver.read(op).await
    }

    async fn live_counts(&self) -> Result<Vec<(JobState, u64)>, QueueError> {
        self.driver.read(op::CountLive).await
    }

    async fn lease_many(
        &self,
        worker: &str,
        lease_for: Duration,
        n: usize,
        pin: Option<Arc<Pinner>>,
    ) -> Result<Vec<Lease>, QueueError> {
        let op = LeaseJobs {
            worker: worker.to_string(),
            lease_for,
            n,
            max_crash_resumes: self.retry.max_crash_resumes,
            pin,
            shares: self.shares(),
        };
        self.driver.lease(op).await
    }

    fn share_by(&self, shares: Shares) {
        if **self.shares.read().unwrap_or_else(|e| e.into_inner()) != shares {
            *self.shares.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(shares);
        }
    }

    async fn heartbeat(
        &self,
        id: &JobId,
        attempt: u32,
        lease_for: Duration,
    ) -> Result<HeartbeatReply, QueueError> {
        let op = op::Heartbeat {
            id: id.clone(),
            attempt,
            lease_for,
        };
        self.driver.heartbeat(op).await
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
        let op = op::PinVersion {
            id: id.clone(),
            attempt,
            pin,
        };
        self.driver.write(op).await
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
        let op = self.finish_op(id, attempt, outcome, events, final_event);
        self.driver.finish(op).await
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
        let lease = LeaseJobs {
            worker: next.worker,
            lease_for: next.lease_for,
            n: next.n,
            max_crash_resumes: self.retry.max_crash_resumes,
            pin: next.pin,
            shares: self.shares(),
        };
        self.driver
            .finish_and_lease(FinishAndLease { finish, lease })
            .await
    }

    async fn release(
        &self,
        id: &JobId,
        attempt: u32,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> Result<Finished, QueueError> {
        let op = op::Release {
            id: id.clone(),
            attempt,
            events: events.to_vec(),
            final_event,
        };
        self.driver.release(op).await
    }

    async fn forget_conversation(
        &self,
        owner: Option<&str>,
        id: &str,
    ) -> Result<(usize, usize), QueueError> {
        let op = op::ForgetConversation {
            owner: owner.map(str::to_string),
            id: id.to_string(),
        };
        self.driver.write(op).await
    }

    async fn delete_finished(&self, id: &JobId) -> Result<Deletion, QueueError> {
        self.driver
            .write(op::DeleteFinished { id: id.clone() })
            .await
    }

    async fn has_conversation(&self, owner: Option<&str>, id: &str) -> Result<bool, QueueError> {
        let op = op::HasConversation {
            owner: owner.map(str::to_string),
            id: id.to_string(),
        };
        self.driver.read(op).await
    }

    async fn purge_finished(
        &self,
        finished_before: SystemTime,
        limit: usize,
    ) -> Result<usize, QueueError> {
        let op = op::PurgeFinished {
            cutoff: millis(finished_before),
            limit,
        };
        self.driver.write(op).await
    }

    async fn journal(&self, id: &JobId) -> Result<Vec<JournalEntry>, QueueError> {
        self.driver.read(op::ReadJournal { id: id.clone() }).await
    }

    async fn record_steps(
        &self,
        id: &JobId,
        attempt: u32,
        entries: &[JournalEntry],
        events: &[EventEnvelope],
    ) -> Result<(), QueueError> {
        let op = op::RecordSteps {
            id: id.clone(),
            attempt,
            entries: entries.to_vec(),
            events: events.to_vec(),
        };
        self.driver.record_steps(op).await?;
        lost_reply(self.driver.label())
    }

    async fn resolve(&self, id: &JobId, resolution: Resolution) -> Result<Changed, QueueError> {
        let op = op::Resolve {
            id: id.clone(),
            resolution,
        };
        self.driver.write(op).await
    }

    async fn decide_approval(
        &self,
        id: &JobId,
        call: &str,
        decision: crate::approval::Decision,
        by: &str,
    ) -> Result<Changed, QueueError> {
        let op = op::DecideApproval {
            id: id.clone(),
            call: call.to_string(),
            decision,
            by: by.to_string(),
            store: self.driver.label().to_string(),
        };
        self.driver.write(op).await
    }

    async fn spend_since(
        &self,
        bundle: &str,
        since: std::time::SystemTime,
    ) -> Result<crate::budget::DaySpend, QueueError> {
        let op = op::SpendSince {
            bundle: bundle.to_string(),
            since: super::millis(since),
        };
        self.driver.read(op).await
    }

    async fn owner_load(
        &self,
        owner: &str,
        since: std::time::SystemTime,
    ) -> Result<super::OwnerLoad, QueueError> {
        let op = op::LoadOfOwner {
            owner: owner.to_string(),
            since: super::millis(since),
        };
        self.driver.read(op).await
    }

    async fn expire_approvals(&self, limit: usize) -> Result<Vec<Job>, QueueError> {
        let op = op::ExpireApprovals {
            limit,
            store: self.driver.label().to_string(),
        };
        self.driver.write(op).await
    }

    async fn cancel(&self, id: &JobId) -> Result<Option<Changed>, QueueError> {
        self.driver.write(op::Cancel { id: id.clone() }).await
    }

    async fn events_after(
        &self,
        id: &JobId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, QueueError> {
        let op = op::EventsAfter {
            id: id.clone(),
            after: after_seq,
            limit,
        };
        self.driver.read(op).await
    }

    async fn last_seq(&self, id: &JobId) -> Result<u64, QueueError> {
        self.driver.read(op::LastSeq { id: id.clone() }).await
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
        let op = op::MoveVersion {
            id: id.clone(),
            from: from.to_string(),
            to: Pin {
                version: version.to_string(),
                digest: digest.to_string(),
            },
        };
        self.driver.write(op).await
    }

    async fn ping(&self) -> Result<(), QueueError> {
        self.driver.ping().await
    }

    async fn put_schedule(&self, schedule: StoredSchedule) -> Result<(), QueueError> {
        self.driver.write(op::PutSchedule { schedule }).await
    }

    async fn schedules(&self) -> Result<Vec<StoredSchedule>, QueueError> {
        self.driver.read(op::ListSchedules).await
    }

    async fn delete_schedule(&self, id: &str) -> Result<bool, QueueError> {
        let id = id.to_string();
        self.driver.write(op::DeleteSchedule { id }).await
    }

    async fn pause_schedule(&self, id: &str, paused: bool) -> Result<bool, QueueError> {
        let op = op::PauseSchedule {
            id: id.to_string(),
            paused,
        };
        self.driver.write(op).await
    }

    async fn record_fire(&self, fire: FireRecord) -> Result<bool, QueueError> {
        self.driver.write(op::RecordFire { fire }).await
    }

    async fn claim_deliveries(
        &self,
        lease_for: Duration,
        limit: usize,
    ) -> Result<Vec<Delivery>, QueueError> {
        let op = op::ClaimDeliveries { lease_for, limit };
        self.driver.write(op).await
    }

    async fn settle_delivery(
        &self,
        id: &str,
        claim: u64,
        result: DeliveryResult,
    ) -> Result<Settled, QueueError> {
        let op = op::SettleDelivery {
            id: id.to_string(),
            claim,
            result,
        };
        self.driver.write(op).await
    }

    async fn dead_deliveries(&self) -> Result<u64, QueueError> {
        self.driver.read(op::CountDeadDeliveries).await
    }

    async fn list_deliveries(&self, filter: DeliveryFilter) -> Result<DeliveryPage, QueueError> {
        self.driver.read(op::ListDeliveries { filter }).await
    }

    async fn redrive_delivery(&self, id: &str, owner: Option<&str>) -> Result<Redrive, QueueError> {
        let op = op::RedriveDelivery {
            id: id.to_string(),
            owner: owner.map(str::to_string),
        };
        self.driver.write(op).await
    }

    async fn put_push_config(
        &self,
        id: &JobId,
        config: PushConfig,
        caps: super::PushCaps,
    ) -> Result<(), QueueError> {
        let op = op::PutPushConfig {
            id: id.clone(),
            config,
            caps,
        };
        self.driver.write(op).await
    }

    async fn push_configs(&self, id: &JobId) -> Result<Vec<PushConfig>, QueueError> {
        self.driver.read(op::PushConfigs { id: id.clone() }).await
    }

    async fn record_release(
        &self,
        release: StoredRelease,
        replaces: Replaces,
    ) -> Result<Option<u64>, QueueError> {
        self.driver
            .write(op::RecordRelease { release, replaces })
            .await
    }

    async fn releases_after(
        &self,
        seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredRelease>, QueueError> {
        self.driver.read(op::ReleasesAfter { seq, limit }).await
    }

    async fn create_thread(
        &self,
        owner: &str,
        id: &str,
        metadata: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Created, QueueError> {
        let op = op::CreateThread {
            owner: owner.to_string(),
            id: id.to_string(),
            metadata,
        };
        self.driver.write(op).await
    }

    async fn thread(&self, owner: &str, id: &str) -> Result<Option<StoredThread>, QueueError> {
        let op = op::ThreadOf {
            owner: owner.to_string(),
            id: id.to_string(),
        };
        self.driver.read(op).await
    }

    async fn patch_thread(
        &self,
        owner: &str,
        id: &str,
        metadata: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Option<StoredThread>, QueueError> {
        let op = op::PatchThread {
            owner: owner.to_string(),
            id: id.to_string(),
            metadata,
        };
        self.driver.write(op).await
    }

    async fn threads(&self, owner: &str, limit: usize) -> Result<Vec<StoredThread>, QueueError> {
        let op = op::ThreadsOf {
            owner: owner.to_string(),
            limit,
        };
        self.driver.read(op).await
    }

    async fn delete_thread(&self, owner: &str, id: &str) -> Result<ThreadDeletion, QueueError> {
        let op = op::DeleteThread {
            owner: owner.to_string(),
            id: id.to_string(),
        };
        self.driver.write(op).await
    }

    async fn copy_thread(
        &self,
        owner: &str,
        from: &str,
        to: &str,
        max_runs: usize,
    ) -> Result<ThreadCopy, QueueError> {
        let op = op::CopyThread {
            owner: owner.to_string(),
            from: from.to_string(),
            to: to.to_string(),
            max_runs,
        };
        self.driver.write(op).await
    }

    async fn delete_push_config(&self, id: &JobId, config: &str) -> Result<bool, QueueError> {
        let op = op::DeletePushConfig {
            id: id.clone(),
            config: config.to_string(),
        };
        self.driver.write(op).await
    }
}
