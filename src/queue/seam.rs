//! [`JobQueue`]: the seam between the API, the workers and a store. Every
//! operation a caller may ask of the queue, with the answer it gets; each
//! store (`sqlite`, `postgres`) implements it through the typed operations
//! of `op/`, and `tests/queue_conformance.rs` holds both to one meaning.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use tokio::sync::broadcast;

use super::*;
use crate::events::EventEnvelope;
use crate::journal::JournalEntry;

/// The seam between API, workers and storage (with [`ItemStore`], the
/// items of LangGraph's store a key keeps in the same database).
#[async_trait]
pub trait JobQueue: ItemStore + AssistantStore + Send + Sync {
    async fn submit(&self, job: NewJob) -> Result<(Job, bool), QueueError>;
    /// Submits many jobs in one transaction (multi-row inserts), each
    /// answered as `submit` would, in order. All or nothing: a key reused
    /// for different content ([`QueueError::KeyConflict`]) refuses the batch.
    async fn submit_many(&self, jobs: Vec<NewJob>) -> Result<Vec<(Job, bool)>, QueueError>;
    async fn get(&self, id: &JobId) -> Result<Option<Job>, QueueError>;
    /// A page of jobs in the filter's order (`JobOrder`), after its cursor.
    async fn list(&self, filter: JobFilter) -> Result<Page, QueueError>;
    /// How many jobs the filter matches on all pages (its cursor, limit and
    /// order aside): one count in the store, no job read.
    async fn count(&self, filter: JobFilter) -> Result<u64, QueueError>;
    /// (bundle, state, count) for every non-empty combination: of every
    /// job, or with `owner` only of that API key's.
    async fn counts_by_state(
        &self,
        owner: Option<&str>,
    ) -> Result<Vec<(String, JobState, u64)>, QueueError>;
    /// How many jobs are in each live state (queued, running,
    /// needs_attention), for gauges read on every metrics scrape: backends
    /// answer from an index, never by scanning finished jobs.
    async fn live_counts(&self) -> Result<Vec<(JobState, u64)>, QueueError> {
        let counts = self.counts_by_state(None).await?;
        Ok(JobState::LIVE
            .into_iter()
            .map(|state| {
                let n = counts
                    .iter()
                    .filter(|(_, s, _)| *s == state)
                    .map(|(_, _, n)| n)
                    .sum();
                (state, n)
            })
            .collect())
    }
    /// The best runnable job: highest priority, then earliest `run_at`, then
    /// oldest; queued and due, or running with an expired lease.
    async fn lease(&self, worker: &str, lease_for: Duration) -> Result<Option<Lease>, QueueError> {
        Ok(self
            .lease_many(worker, lease_for, 1, None)
            .await?
            .into_iter()
            .next())
    }
    /// Up to `n` of the best runnable jobs in lease order, in one write. A
    /// first attempt is pinned in the same write to what `pin` answers for
    /// its bundle (then `pin_version` is not needed). Jobs leased and never
    /// started come back when their lease expires, like any other.
    async fn lease_many(
        &self,
        worker: &str,
        lease_for: Duration,
        n: usize,
        pin: Option<std::sync::Arc<Pinner>>,
    ) -> Result<Vec<Lease>, QueueError>;
    /// Shares the queue between keys by `shares` from the next lease on
    /// (`queue::fair`; every key has weight 1 until this is called).
    fn share_by(&self, shares: Shares);
    async fn heartbeat(
        &self,
        id: &JobId,
        attempt: u32,
        lease_for: Duration,
    ) -> Result<HeartbeatReply, QueueError>;
    /// Records the bundle version and content digest a job runs with (first
    /// attempt only; later attempts keep the first pin).
    async fn pin_version(
        &self,
        id: &JobId,
        attempt: u32,
        version: &str,
        digest: &str,
    ) -> Result<(), QueueError>;
    /// Records an attempt's outcome, decided by [`decide`], and appends
    /// `events` then `final_event` (stamped with the decision) in the same
    /// transaction.
    async fn finish(
        &self,
        id: &JobId,
        attempt: u32,
        outcome: Outcome,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> Result<Finished, QueueError>;
    /// [`finish`](JobQueue::finish), then [`lease_many`](JobQueue::lease_many)
    /// for `next`, in one write: the worker ending a job takes its next one
    /// without a commit of its own. Both or neither: an error records
    /// nothing.
    // It takes `finish`'s arguments again, and `next`: a method of its own
    // so that a store can make the two one transaction.
    async fn finish_and_lease(
        &self,
        id: &JobId,
        attempt: u32,
        outcome: Outcome,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
        next: NextLease,
    ) -> Result<(Finished, Vec<Lease>), QueueError>;
    /// `finish` without a final event to stamp.
    async fn complete(
        &self,
        id: &JobId,
        attempt: u32,
        outcome: Outcome,
        final_events: &[EventEnvelope],
    ) -> Result<CompleteReply, QueueError> {
        self.finish(id, attempt, outcome, final_events, None)
            .await
            .map(|f| f.reply)
    }
    /// Puts a running job back without consuming the attempt (graceful
    /// drain), appending `events` and the stamped `final_event`; a job whose
    /// cancellation was requested ends `cancelled` instead of running again.
    async fn release(
        &self,
        id: &JobId,
        attempt: u32,
        events: &[EventEnvelope],
        final_event: Option<EventEnvelope>,
    ) -> Result<Finished, QueueError>;
    /// Deletes the finished jobs of `owner`'s conversation `id` with their
    /// events and journals; returns how many. Unfinished jobs are left
    /// alone and counted in the second number.
    async fn forget_conversation(
        &self,
        owner: Option<&str>,
        id: &str,
    ) -> Result<(usize, usize), QueueError>;
    /// Deletes job `id` with its events, journal and deliveries if it has
    /// ended; an unfinished job is left as it is.
    async fn delete_finished(&self, id: &JobId) -> Result<Deletion, QueueError>;
    /// Whether `owner` has a conversation `id` (a job of that key claimed
    /// it, and it was not forgotten since). Conversations are per key: two
    /// keys' conversations of one id are two.
    async fn has_conversation(&self, owner: Option<&str>, id: &str) -> Result<bool, QueueError>;

    /// Deletes up to `limit` jobs that finished before `finished_before`,
    /// with their events and journals; returns how many. Called in small
    /// batches so no transaction holds the store for long.
    async fn purge_finished(
        &self,
        finished_before: SystemTime,
        limit: usize,
    ) -> Result<usize, QueueError>;
    /// The job's step journal, as its attempts recorded it.
    async fn journal(&self, id: &JobId) -> Result<Vec<JournalEntry>, QueueError>;
    /// Records journal steps (guarded by the attempt) together with the
    /// events held until then, durably, before the caller acts on them.
    async fn record_steps(
        &self,
        id: &JobId,
        attempt: u32,
        entries: &[JournalEntry],
        events: &[EventEnvelope],
    ) -> Result<(), QueueError>;
    /// Resolves a `needs_attention` job: retry its pending call, skip it
    /// with a supplied result, or fail the job (with its final event).
    async fn resolve(&self, id: &JobId, resolution: Resolution) -> Result<Changed, QueueError>;
    /// Takes a person's decision on the call an `awaiting_approval` job
    /// waits for: checked against the request (its call and argument
    /// digest), journaled where the run finds it, and the job queued again
    /// — in one write, so a decision is taken at most once.
    async fn decide_approval(
        &self,
        id: &JobId,
        call: &str,
        decision: crate::approval::Decision,
        by: &str,
    ) -> Result<Changed, QueueError>;
    /// What the jobs of `bundle` created since `since`, and its nested
    /// runs, spent and hold: the bundle's daily budget.
    async fn spend_since(
        &self,
        bundle: &str,
        since: SystemTime,
    ) -> Result<crate::budget::DaySpend, QueueError>;
    /// What `owner`'s jobs hold (unfinished jobs) and spent since `since`:
    /// an API key's quotas.
    async fn owner_load(&self, owner: &str, since: SystemTime) -> Result<OwnerLoad, QueueError>;
    /// Denies the calls whose approval timeout passed (at most `limit`
    /// jobs); returns those jobs, queued again.
    async fn expire_approvals(&self, limit: usize) -> Result<Vec<Job>, QueueError>;
    /// Cancels a queued or parked job at once (with its final event); asks
    /// a running job to stop.
    async fn cancel(&self, id: &JobId) -> Result<Option<Changed>, QueueError>;
    async fn events_after(
        &self,
        id: &JobId,
        after_seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredEvent>, QueueError>;
    async fn last_seq(&self, id: &JobId) -> Result<u64, QueueError>;
    /// Job ids whose events or state changed: in this process, and with a
    /// shared backend (PostgreSQL) in every daemon using the same database.
    fn subscribe(&self) -> broadcast::Receiver<JobId>;
    /// Ids of jobs that became runnable (submitted, released, resolved):
    /// in this process, and with a shared backend in every daemon using the
    /// same database; they wake idle workers at once. `None` for a backend
    /// that cannot tell (its callers wake the workers themselves).
    fn runnable(&self) -> Option<broadcast::Receiver<JobId>> {
        None
    }
    /// Ids of running jobs someone asked to cancel: in this process, and with
    /// a shared backend in every daemon using the same database; the worker
    /// running one stops it at once. `None` for a backend that cannot tell
    /// (its workers hear of it at their next heartbeat).
    fn cancels(&self) -> Option<broadcast::Receiver<JobId>> {
        None
    }
    /// The writes this handle committed, the transactions that carried
    /// them (SQLite's group commit puts many writes in one) and the
    /// statements they sent (PostgreSQL), for benchmarks and tests.
    fn write_stats(&self) -> WriteCounts {
        WriteCounts::default()
    }
    async fn ping(&self) -> Result<(), QueueError>;
    /// Moves a queued or parked job pinned to content `from` to `version`
    /// and `digest` (its journal was checked to replay there): the job
    /// moved, or `None` when it is running, ended or pinned elsewhere now.
    async fn move_version(
        &self,
        id: &JobId,
        from: &str,
        version: &str,
        digest: &str,
    ) -> Result<Option<Job>, QueueError>;

    // Schedules (see `schedules`): where each stands, shared by every
    // daemon on the same store.
    /// Inserts a schedule or replaces its spec, owner, source and next fire.
    async fn put_schedule(&self, schedule: StoredSchedule) -> Result<(), QueueError>;
    async fn schedules(&self) -> Result<Vec<StoredSchedule>, QueueError>;
    /// Whether there was one to delete.
    async fn delete_schedule(&self, id: &str) -> Result<bool, QueueError>;
    /// Whether there was one to pause or resume.
    async fn pause_schedule(&self, id: &str, paused: bool) -> Result<bool, QueueError>;
    /// Records a schedule's handled fires if its next fire is still the
    /// one the handler read; whether it was.
    async fn record_fire(&self, fire: FireRecord) -> Result<bool, QueueError>;

    // The outbox (see `outbox`).
    /// Up to `limit` due deliveries, leased for `lease_for`.
    async fn claim_deliveries(
        &self,
        lease_for: Duration,
        limit: usize,
    ) -> Result<Vec<Delivery>, QueueError>;
    /// Records a delivery attempt's outcome under the claim that made it
    /// (`claim`: the claimed `Delivery::claim`). A claim that is no longer
    /// the delivery's latest (its lease ran out and another sender claimed
    /// it) changes nothing: [`Settled::Stale`].
    async fn settle_delivery(
        &self,
        id: &str,
        claim: u64,
        result: DeliveryResult,
    ) -> Result<Settled, QueueError>;
    /// How many deliveries are dead-lettered.
    async fn dead_deliveries(&self) -> Result<u64, QueueError>;
    /// A page of deliveries, newest first (the dead letters with
    /// `state: Dead`).
    async fn list_deliveries(&self, filter: DeliveryFilter) -> Result<DeliveryPage, QueueError>;
    /// Sends a dead delivery again: pending, attempts reset, due now. With
    /// `owner`, only a delivery of that key's jobs is found.
    async fn redrive_delivery(&self, id: &str, owner: Option<&str>) -> Result<Redrive, QueueError>;
    /// Adds an A2A push config to job `id` (or replaces the one with its
    /// id): the job's next state changes are pushed to it too.
    async fn put_push_config(
        &self,
        id: &JobId,
        config: PushConfig,
        caps: PushCaps,
    ) -> Result<(), QueueError>;
    /// Job `id`'s push configs, oldest first.
    async fn push_configs(&self, id: &JobId) -> Result<Vec<PushConfig>, QueueError>;
    /// Deletes one of job `id`'s push configs and what is still to be
    /// sent to it; whether there was one.
    async fn delete_push_config(&self, id: &JobId, config: &str) -> Result<bool, QueueError>;
    /// Records a release gate's decision (`release.seq` is the store's to
    /// take) for every daemon on the store, unless one is recorded already
    /// about its content that it does not replace: its number when it was
    /// written.
    async fn record_release(
        &self,
        release: StoredRelease,
        replaces: Replaces,
    ) -> Result<Option<u64>, QueueError>;
    /// Up to `limit` release decisions numbered above `seq`, oldest first:
    /// a reader that saw up to `seq` has seen every decision up to it.
    async fn releases_after(
        &self,
        seq: u64,
        limit: usize,
    ) -> Result<Vec<StoredRelease>, QueueError>;
    /// Makes `owner`'s thread (conversation) `id` with `metadata`, or
    /// finds the one it has: either way as it stands.
    async fn create_thread(
        &self,
        owner: &str,
        id: &str,
        metadata: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Created, QueueError>;
    /// `owner`'s thread `id` as it stands: its metadata, and what its jobs
    /// say (busy, its newest job's state). Any conversation of the key is
    /// a thread, whatever made it.
    async fn thread(&self, owner: &str, id: &str) -> Result<Option<StoredThread>, QueueError>;
    /// Merges `metadata` into `owner`'s thread `id` (a `null` value removes
    /// its key): the thread after, or none when the key has no such thread.
    async fn patch_thread(
        &self,
        owner: &str,
        id: &str,
        metadata: serde_json::Map<String, serde_json::Value>,
    ) -> Result<Option<StoredThread>, QueueError>;
    /// `owner`'s newest `limit` threads, newest first.
    async fn threads(&self, owner: &str, limit: usize) -> Result<Vec<StoredThread>, QueueError>;
    /// Deletes `owner`'s thread `id` with its jobs (their events and
    /// journals), unless one of them has not ended.
    async fn delete_thread(&self, owner: &str, id: &str) -> Result<ThreadDeletion, QueueError>;
    /// Copies `owner`'s thread `from` as its new thread `to`: its metadata
    /// and its ended jobs (with their events and journals) under new ids;
    /// nothing when it has more than `max_runs` ended jobs.
    async fn copy_thread(
        &self,
        owner: &str,
        from: &str,
        to: &str,
        max_runs: usize,
    ) -> Result<ThreadCopy, QueueError>;
}

/// A key's items of LangGraph's store (`queue::items`), kept in the queue's
/// database: part of every [`JobQueue`].
#[async_trait]
pub trait ItemStore: Send + Sync {
    /// Writes `owner`'s item (LangGraph's store), replacing the one of its
    /// namespace and key; the key's expired items go first.
    async fn put_item(&self, owner: &str, item: NewItem) -> Result<(), QueueError>;
    /// `owner`'s item unless missing or expired; `refresh`: its time to
    /// live starts again (a write, only for an item that has one).
    async fn item(
        &self,
        owner: &str,
        namespace: &str,
        key: &str,
        refresh: bool,
    ) -> Result<Option<StoredItem>, QueueError>;
    /// Deletes `owner`'s item: whether there was one.
    async fn delete_item(
        &self,
        owner: &str,
        namespace: &str,
        key: &str,
    ) -> Result<bool, QueueError>;
    /// `owner`'s live items in `namespace` or under it (`""`: all), the
    /// most recently updated first, `limit` at most.
    async fn items_under(
        &self,
        owner: &str,
        namespace: &str,
        limit: usize,
    ) -> Result<Vec<StoredItem>, QueueError>;
    /// Starts again the time to live of `owner`'s `items` (namespace, key).
    async fn touch_items(
        &self,
        owner: &str,
        items: Vec<(String, String)>,
    ) -> Result<(), QueueError>;
    /// `owner`'s namespaces holding a live item, in order, `limit` at most.
    async fn item_namespaces(&self, owner: &str, limit: usize) -> Result<Vec<String>, QueueError>;
}

/// A key's custom assistants (`queue::assistants`), kept in the queue's
/// database: part of every [`JobQueue`].
#[async_trait]
pub trait AssistantStore: Send + Sync {
    /// Makes `owner`'s assistant `id` with `settings` as its version 1; an
    /// id the key has already is answered as it stands.
    async fn create_assistant(
        &self,
        owner: &str,
        id: &str,
        settings: AssistantSettings,
    ) -> Result<AssistantCreated, QueueError>;
    /// A new version of `owner`'s assistant `id`, `patch` over its latest,
    /// made the latest; none when the key has no such assistant.
    async fn update_assistant(
        &self,
        owner: &str,
        id: &str,
        patch: AssistantPatch,
    ) -> Result<Option<StoredAssistant>, QueueError>;
    /// Makes `version` the latest of `owner`'s assistant `id`; none when
    /// the key has no such assistant or it no such version.
    async fn set_assistant_latest(
        &self,
        owner: &str,
        id: &str,
        version: i64,
    ) -> Result<Option<StoredAssistant>, QueueError>;
    /// Deletes `owner`'s assistant `id` with its versions: whether there
    /// was one.
    async fn delete_assistant(&self, owner: &str, id: &str) -> Result<bool, QueueError>;
    /// `owner`'s assistant `id` at its latest version.
    async fn assistant(&self, owner: &str, id: &str)
    -> Result<Option<StoredAssistant>, QueueError>;
    /// `owner`'s newest assistants ([`ASSISTANTS_SCANNED`] at most).
    async fn assistants(&self, owner: &str) -> Result<Vec<StoredAssistant>, QueueError>;
    /// The versions of `owner`'s assistant `id`, newest first
    /// ([`VERSIONS_LISTED`] at most).
    async fn assistant_versions(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<Vec<StoredAssistantVersion>, QueueError>;
}
