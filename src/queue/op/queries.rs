//! The read operations: a job, a page of jobs, counts, a job's events,
//! journal and last sequence number, schedules, deliveries and push
//! configs — one statement or a few, no rule, outside any write.

use super::*;

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
        reads::list(tx, &self.filter).await
    }
}

impl Read for ListJobs {}

/// How many jobs a filter matches, every page of its listing.
pub(crate) struct CountJobs {
    pub filter: JobFilter,
}

impl Operation for CountJobs {
    type Output = u64;
    const NAME: &'static str = "count";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<u64> {
        reads::count(tx, &self.filter).await
    }
}

impl Read for CountJobs {}

/// (bundle, state, count) for every non-empty combination, of every job
/// or only of `owner`'s (an API key that may list only its own).
pub(crate) struct CountByState {
    pub owner: Option<String>,
}

impl Operation for CountByState {
    type Output = Vec<(String, JobState, u64)>;
    const NAME: &'static str = "counts_by_state";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Vec<(String, JobState, u64)>> {
        reads::counts_by_state(tx, self.owner.as_deref()).await
    }
}

impl Read for CountByState {}

/// How many jobs are in each live state.
pub(crate) struct CountLive;

impl Operation for CountLive {
    type Output = Vec<(JobState, u64)>;
    const NAME: &'static str = "live_counts";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Vec<(JobState, u64)>> {
        reads::live_counts(tx).await
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
        reads::owner_load(tx, &self.owner, self.since).await
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
