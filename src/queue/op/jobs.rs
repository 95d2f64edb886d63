//! The job operations: submit (one or many), lease, heartbeat, pin, finish
//! (alone or with the slot's next lease), release, an operator's cancel,
//! resolve and approval decisions, journal steps, conversations, versions
//! and retention.

use super::*;

operation! {
    /// Inserts a job, or finds the one its idempotency key names: the job and
    /// whether it is new.
    pub(crate) struct Submit {
        pub id: JobId,
        pub job: NewJob,
    }
    write(REFUSED_WHEN_BUSY) "submit" -> (Job, bool) = |op, tx|
        lifecycle::submit(tx, &op.id, &op.job).await;
}

operation! {
    /// Inserts many jobs in one transaction, each answered as [`Submit`].
    pub(crate) struct SubmitMany {
        pub jobs: Vec<(JobId, NewJob)>,
    }
    write(REFUSED_WHEN_BUSY, MAY_QUEUE_BEHIND) "submit_many" -> Vec<(Job, bool)> = |op, tx|
        lifecycle::submit_many(tx, &op.jobs).await;
}

operation! {
    /// Leases up to `n` of the best runnable jobs.
    pub(crate) struct LeaseJobs {
        pub worker: String,
        pub lease_for: Duration,
        pub n: usize,
        pub max_crash_resumes: u32,
        pub pin: Option<Arc<Pinner>>,
        pub shares: Arc<Shares>,
    }
    write "lease" -> Vec<Lease> = |op, tx| {
        let ask = LeaseAsk {
            worker: &op.worker,
            lease_for: op.lease_for,
            n: op.n,
            max_crash_resumes: op.max_crash_resumes,
            pin: op.pin.as_deref(),
            shares: &op.shares,
        };
        lifecycle::lease(tx, &ask).await
    };
}

operation! {
    /// Renews a current attempt's lease.
    pub(crate) struct Heartbeat {
        pub id: JobId,
        pub attempt: u32,
        pub lease_for: Duration,
    }
    write "heartbeat" -> HeartbeatReply = |op, tx|
        lifecycle::heartbeat(tx, &op.id, op.attempt, op.lease_for).await;
}

operation! {
    /// Pins the bundle a first attempt runs with.
    pub(crate) struct PinVersion {
        pub id: JobId,
        pub attempt: u32,
        pub pin: Pin,
    }
    write "pin_version" -> () = |op, tx|
        lifecycle::pin_version(tx, &op.id, op.attempt, &op.pin).await;
}

operation! {
    /// Records an attempt's outcome by the one rule, `decide`.
    pub(crate) struct Finish {
        pub id: JobId,
        pub attempt: u32,
        pub outcome: Outcome,
        pub events: Vec<EventEnvelope>,
        pub final_event: Option<EventEnvelope>,
        pub retry: RetryPolicy,
    }
    write "finish" -> Finished = |op, tx| {
        let ending = Ending {
            events: &op.events,
            final_event: op.final_event.as_ref(),
        };
        lifecycle::finish(tx, &op.id, op.attempt, &op.outcome, ending, &op.retry).await
    };
}

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

operation! {
    /// Gives a running job back (drain) without using its attempt.
    pub(crate) struct Release {
        pub id: JobId,
        pub attempt: u32,
        pub events: Vec<EventEnvelope>,
        pub final_event: Option<EventEnvelope>,
    }
    write(MAY_QUEUE_BEHIND) "release" -> Finished = |op, tx| {
        let ending = Ending {
            events: &op.events,
            final_event: op.final_event.as_ref(),
        };
        lifecycle::release(tx, &op.id, op.attempt, ending).await
    };
}

operation! {
    /// Cancels a queued or parked job; asks a running one to stop.
    pub(crate) struct Cancel {
        pub id: JobId,
    }
    write "cancel" -> Option<Changed> = |op, tx| decisions::cancel(tx, &op.id).await;
}

operation! {
    /// An operator's answer for a `needs_attention` job.
    pub(crate) struct Resolve {
        pub id: JobId,
        pub resolution: Resolution,
    }
    write(MAY_QUEUE_BEHIND) "resolve" -> Changed = |op, tx|
        decisions::resolve(tx, &op.id, &op.resolution).await;
}

operation! {
    /// A person's decision on the call an `awaiting_approval` job waits for.
    pub(crate) struct DecideApproval {
        pub id: JobId,
        pub call: String,
        pub decision: crate::approval::Decision,
        pub by: String,
        /// The store, as errors name it.
        pub store: String,
    }
    write(MAY_QUEUE_BEHIND) "decide_approval" -> Changed = |op, tx| {
        let DecideApproval {
            id,
            call,
            decision,
            by,
            store,
        } = op;
        decisions::decide_approval(tx, id, call, decision, by, store).await
    };
}

operation! {
    /// Denies the calls whose approval timeout passed.
    pub(crate) struct ExpireApprovals {
        pub limit: usize,
        /// The store, as errors name it.
        pub store: String,
    }
    write(MAY_QUEUE_BEHIND) "expire_approvals" -> Vec<Job> = |op, tx|
        decisions::expire_approvals(tx, op.limit, &op.store).await;
}

operation! {
    /// Records journal steps with the events held until then.
    pub(crate) struct RecordSteps {
        pub id: JobId,
        pub attempt: u32,
        pub entries: Vec<JournalEntry>,
        pub events: Vec<EventEnvelope>,
    }
    write "record_steps" -> () = |op, tx|
        lifecycle::record_steps(tx, &op.id, op.attempt, &op.entries, &op.events).await;
}

operation! {
    /// Deletes a conversation's finished jobs: (deleted, left unfinished).
    pub(crate) struct ForgetConversation {
        pub owner: Option<String>,
        pub id: String,
    }
    write "forget_conversation" -> (usize, usize) = |op, tx| {
        let conversation = Conversation::of(op.owner.as_deref(), &op.id);
        reads::forget_conversation(tx, &conversation).await
    };
}

operation! {
    /// Deletes one job if it has ended.
    pub(crate) struct DeleteFinished {
        pub id: JobId,
    }
    write "delete_finished" -> reads::Deletion = |op, tx| reads::delete_finished(tx, &op.id).await;
}

operation! {
    /// Whether a key's conversation `id` has its row: some job of that key
    /// claimed it (and it was not forgotten since).
    pub(crate) struct HasConversation {
        pub owner: Option<String>,
        pub id: String,
    }
    read "has_conversation" -> bool = |op, tx| {
        let conversation = Conversation::of(op.owner.as_deref(), &op.id);
        tx.has_conversation(&conversation, false).await
    };
}

operation! {
    /// Moves a queued or parked job to another content of its bundle.
    pub(crate) struct MoveVersion {
        pub id: JobId,
        pub from: String,
        pub to: Pin,
    }
    write(MAY_QUEUE_BEHIND) "move_version" -> Option<Job> = |op, tx|
        super::versions::move_version(tx, &op.id, &op.from, &op.to).await;
}

operation! {
    /// Deletes up to `limit` jobs that finished before `cutoff` (ms).
    pub(crate) struct PurgeFinished {
        pub cutoff: i64,
        pub limit: usize,
    }
    write "purge_finished" -> usize = |op, tx| reads::purge_finished(tx, op.cutoff, op.limit).await;
}
