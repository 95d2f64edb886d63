//! The read operations: a job, a page of jobs, counts, a job's events,
//! journal and last sequence number, schedules, deliveries and push
//! configs — one statement or a few, no rule, outside any write.

use super::*;

operation! {
    pub(crate) struct GetJob {
        pub id: JobId,
    }
    read "get" -> Option<Job> = |op, tx| tx.job(op.id.as_str(), false).await;
}

operation! {
    pub(crate) struct ListJobs {
        pub filter: JobFilter,
    }
    read "list" -> Page = |op, tx| reads::list(tx, &op.filter).await;
}

operation! {
    /// How many jobs a filter matches, every page of its listing.
    pub(crate) struct CountJobs {
        pub filter: JobFilter,
    }
    read "count" -> u64 = |op, tx| reads::count(tx, &op.filter).await;
}

operation! {
    /// (bundle, state, count) for every non-empty combination, of every job
    /// or only of `owner`'s (an API key that may list only its own).
    pub(crate) struct CountByState {
        pub owner: Option<String>,
    }
    read "counts_by_state" -> Vec<(String, JobState, u64)> = |op, tx|
        reads::counts_by_state(tx, op.owner.as_deref()).await;
}

operation! {
    /// How many jobs are in each live state.
    pub(crate) struct CountLive;
    read "live_counts" -> Vec<(JobState, u64)> = |_, tx| reads::live_counts(tx).await;
}

operation! {
    pub(crate) struct EventsAfter {
        pub id: JobId,
        pub after: u64,
        pub limit: usize,
    }
    read "events_after" -> Vec<StoredEvent> = |op, tx|
        tx.events_after(op.id.as_str(), op.after, op.limit).await;
}

operation! {
    pub(crate) struct LastSeq {
        pub id: JobId,
    }
    read "last_seq" -> u64 = |op, tx| tx.last_seq(op.id.as_str()).await;
}

operation! {
    pub(crate) struct ReadJournal {
        pub id: JobId,
    }
    read "journal" -> Vec<JournalEntry> = |op, tx| tx.journal(op.id.as_str()).await;
}

operation! {
    /// What the jobs of `bundle` created since `since` (ms), and its nested
    /// runs, spent and hold.
    pub(crate) struct SpendSince {
        pub bundle: String,
        pub since: i64,
    }
    read "spend_since" -> crate::budget::DaySpend = |op, tx|
        Ok(tx.spend_since(&op.bundle, op.since).await?.day());
}

operation! {
    /// What an API key's jobs hold and spent since `since` (ms).
    pub(crate) struct LoadOfOwner {
        pub owner: String,
        pub since: i64,
    }
    read "owner_load" -> OwnerLoad = |op, tx| reads::owner_load(tx, &op.owner, op.since).await;
}

operation! {
    pub(crate) struct ListSchedules;
    read "schedules" -> Vec<StoredSchedule> = |_, tx| tx.schedules().await;
}

operation! {
    /// How many deliveries are dead-lettered.
    pub(crate) struct CountDeadDeliveries;
    read "dead_deliveries" -> u64 = |_, tx|
        Ok(u64::try_from(tx.dead_deliveries().await?).unwrap_or(0));
}

operation! {
    pub(crate) struct ListDeliveries {
        pub filter: DeliveryFilter,
    }
    read "list_deliveries" -> DeliveryPage = |op, tx| outbox::list(tx, &op.filter).await;
}

operation! {
    pub(crate) struct PushConfigs {
        pub id: JobId,
    }
    read "push_configs" -> Vec<PushConfig> = |op, tx| tx.push_configs(op.id.as_str()).await;
}
