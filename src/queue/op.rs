//! One queue operation as data ([`Op`]) and what it answers ([`Done`]), so
//! a backend's driver can run any of them in its own transaction (or queue
//! it for a group commit) without knowing what it does: [`Op::run`] hands
//! each one to its rule in `lifecycle`, written once for every dialect.

use std::sync::Arc;
use std::time::Duration;

use super::lifecycle::{self, Ending, LeaseAsk, Pinner};
use super::outbox::{self, Delivery, DeliveryFilter, DeliveryPage, DeliveryResult, Redrive};
use super::schedules::{self, FireRecord, StoredSchedule};
use super::tx::{Fail, Pin, Res, Tx};
use super::*;

/// A queue operation with everything it needs, owned, so it can cross to a
/// writer thread or task.
pub(crate) enum Op {
    Submit(JobId, NewJob),
    SubmitMany(Vec<(JobId, NewJob)>),
    Lease(LeaseOp),
    Heartbeat {
        id: JobId,
        attempt: u32,
        lease_for: Duration,
    },
    Pin {
        id: JobId,
        attempt: u32,
        pin: Pin,
    },
    Finish(FinishOp),
    /// A finish, then a lease, in the same transaction.
    FinishAndLease(FinishOp, LeaseOp),
    Release {
        id: JobId,
        attempt: u32,
        events: Vec<EventEnvelope>,
        final_event: Option<EventEnvelope>,
    },
    Cancel(JobId),
    Resolve {
        id: JobId,
        resolution: Resolution,
    },
    DecideApproval {
        id: JobId,
        call: String,
        decision: crate::approval::Decision,
        by: String,
        store: String,
    },
    ExpireApprovals {
        limit: usize,
        store: String,
    },
    RecordSteps {
        id: JobId,
        attempt: u32,
        entries: Vec<JournalEntry>,
        events: Vec<EventEnvelope>,
    },
    Forget(String),
    MoveVersion {
        id: JobId,
        from: String,
        to: Pin,
    },
    Purge {
        cutoff: i64,
        limit: usize,
    },
    // Reads.
    Get(JobId),
    List(JobFilter),
    CountsByState,
    LiveCounts,
    EventsAfter {
        id: JobId,
        after: u64,
        limit: usize,
    },
    LastSeq(JobId),
    Journal(JobId),
    SpendSince {
        bundle: String,
        since: i64,
    },
    OwnerLoad {
        owner: String,
        since: i64,
    },
    // Schedules (see `schedules`).
    PutSchedule(StoredSchedule),
    DeleteSchedule(String),
    PauseSchedule {
        id: String,
        paused: bool,
    },
    RecordFire(FireRecord),
    Schedules,
    // The outbox (see `outbox`).
    ClaimDeliveries {
        lease_for: Duration,
        limit: usize,
    },
    SettleDelivery {
        id: String,
        result: DeliveryResult,
    },
    DeadDeliveries,
    ListDeliveries(DeliveryFilter),
    RedriveDelivery {
        id: String,
        /// Only a delivery of this key's jobs.
        owner: Option<String>,
    },
    PutPushConfig {
        id: JobId,
        config: PushConfig,
    },
    PushConfigs(JobId),
    DeletePushConfig {
        id: JobId,
        config: String,
    },
}

pub(crate) struct LeaseOp {
    pub worker: String,
    pub lease_for: Duration,
    pub n: usize,
    pub max_crash_resumes: u32,
    pub pin: Option<Arc<Pinner>>,
}

impl LeaseOp {
    pub(crate) async fn run(&self, tx: &mut impl Tx) -> Res<Vec<Lease>> {
        let ask = LeaseAsk {
            worker: &self.worker,
            lease_for: self.lease_for,
            n: self.n,
            max_crash_resumes: self.max_crash_resumes,
            pin: self.pin.as_deref(),
        };
        lifecycle::lease(tx, &ask).await
    }
}

pub(crate) struct FinishOp {
    pub id: JobId,
    pub attempt: u32,
    pub outcome: Outcome,
    pub events: Vec<EventEnvelope>,
    pub final_event: Option<EventEnvelope>,
    pub retry: RetryPolicy,
}

impl FinishOp {
    pub(crate) async fn run(&self, tx: &mut impl Tx) -> Res<Finished> {
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

/// Where an operation waits for locks other writes may hold, in the one
/// order a transaction running several operations (PostgreSQL's group
/// commit) takes them in: sorted by this, every transaction waits only for
/// a lock that comes after every lock it holds, so no two wait for each
/// other in a cycle (a deadlock).
///
/// - `Nothing`: waits for no lock (a submit without idempotency keys
///   inserts rows no one else can see yet; reads).
/// - `Keys`: inserts keyed jobs, which waits for a concurrent write of the
///   same key; by its smallest stored key (a batch inserts its keys sorted).
/// - `Row`: locks one job's row (`FOR UPDATE` or an `UPDATE`), and writes
///   that job's events, journal and spend under it; by the job's id.
/// - `Skipping`: takes only rows no other write holds (`FOR UPDATE SKIP
///   LOCKED`: leases and the sweeps) and writes only those, so it never
///   waits; last, since what it takes is in no order.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum LockOrder {
    Nothing,
    Keys(String),
    Row(JobId),
    /// Locks one schedule's row; by its id.
    Schedule(String),
    /// Locks one outbox delivery's row; by its id.
    Delivery(String),
    Skipping,
}

/// What an [`Op`] answers: one variant per kind of answer.
pub(crate) enum Done {
    Submitted((Job, bool)),
    SubmittedMany(Vec<(Job, bool)>),
    Leases(Vec<Lease>),
    Heartbeat(HeartbeatReply),
    Nothing(()),
    Finished(Finished),
    FinishedAndLeased((Finished, Vec<Lease>)),
    Changed(Changed),
    Cancelled(Option<Changed>),
    Forgotten((usize, usize)),
    Purged(usize),
    Expired(Vec<Job>),
    Job(Option<Job>),
    Page(Page),
    CountsByState(Vec<(String, JobState, u64)>),
    LiveCounts(Vec<(JobState, u64)>),
    Events(Vec<StoredEvent>),
    LastSeq(u64),
    Journal(Vec<JournalEntry>),
    Spend((u64, f64)),
    OwnerLoad(super::OwnerLoad),
    Schedules(Vec<StoredSchedule>),
    Flag(bool),
    Deliveries(Vec<Delivery>),
    DeliveryPage(DeliveryPage),
    Redrive(Redrive),
    PushConfigs(Vec<PushConfig>),
}

impl Op {
    /// Runs the operation's rule inside `tx` (the backend opened it and
    /// commits it). It borrows the operation, so a write the database gave
    /// up on ([`Fail::Conflict`]) can run again.
    pub(crate) async fn run(&self, tx: &mut impl Tx) -> Res<Done> {
        Ok(match self {
            Op::Submit(id, job) => Done::Submitted(lifecycle::submit(tx, id, job).await?),
            Op::SubmitMany(jobs) => Done::SubmittedMany(lifecycle::submit_many(tx, jobs).await?),
            Op::Lease(lease) => Done::Leases(lease.run(tx).await?),
            Op::Heartbeat {
                id,
                attempt,
                lease_for,
            } => Done::Heartbeat(lifecycle::heartbeat(tx, id, *attempt, *lease_for).await?),
            Op::Pin { id, attempt, pin } => {
                Done::Nothing(lifecycle::pin_version(tx, id, *attempt, pin).await?)
            }
            Op::Finish(finish) => Done::Finished(finish.run(tx).await?),
            Op::FinishAndLease(finish, lease) => {
                let finished = finish.run(tx).await?;
                Done::FinishedAndLeased((finished, lease.run(tx).await?))
            }
            Op::Release {
                id,
                attempt,
                events,
                final_event,
            } => {
                let ending = Ending {
                    events,
                    final_event: final_event.as_ref(),
                };
                Done::Finished(lifecycle::release(tx, id, *attempt, ending).await?)
            }
            Op::Cancel(id) => Done::Cancelled(lifecycle::cancel(tx, id).await?),
            Op::Resolve { id, resolution } => {
                Done::Changed(lifecycle::resolve(tx, id, resolution).await?)
            }
            Op::DecideApproval {
                id,
                call,
                decision,
                by,
                store,
            } => {
                Done::Changed(lifecycle::decide_approval(tx, id, call, decision, by, store).await?)
            }
            Op::ExpireApprovals { limit, store } => {
                Done::Expired(lifecycle::expire_approvals(tx, *limit, store).await?)
            }
            Op::RecordSteps {
                id,
                attempt,
                entries,
                events,
            } => Done::Nothing(lifecycle::record_steps(tx, id, *attempt, entries, events).await?),
            Op::Forget(conversation) => {
                Done::Forgotten(lifecycle::forget_conversation(tx, conversation).await?)
            }
            Op::Purge { cutoff, limit } => {
                Done::Purged(lifecycle::purge_finished(tx, *cutoff, *limit).await?)
            }
            Op::MoveVersion { id, from, to } => {
                Done::Job(super::versions::move_version(tx, id, from, to).await?)
            }
            Op::PutSchedule(schedule) => Done::Nothing(schedules::put(tx, schedule).await?),
            Op::DeleteSchedule(id) => Done::Flag(tx.delete_schedule(id).await?),
            Op::PauseSchedule { id, paused } => {
                Done::Flag(schedules::pause(tx, id, *paused).await?)
            }
            Op::RecordFire(fire) => Done::Flag(schedules::record_fire(tx, fire).await?),
            Op::ClaimDeliveries { lease_for, limit } => {
                let lease_ms = i64::try_from(lease_for.as_millis()).unwrap_or(i64::MAX);
                Done::Deliveries(outbox::claim(tx, lease_ms, *limit).await?)
            }
            Op::SettleDelivery { id, result } => {
                Done::Nothing(outbox::settle(tx, id, result).await?)
            }
            Op::RedriveDelivery { id, owner } => {
                Done::Redrive(outbox::redrive(tx, id, owner.as_deref()).await?)
            }
            Op::PutPushConfig { id, config } => {
                let now = tx.now().await?;
                Done::Nothing(tx.put_push_config(id.as_str(), config, now).await?)
            }
            Op::DeletePushConfig { id, config } => {
                Done::Flag(outbox::delete_push(tx, id.as_str(), config).await?)
            }
            read => read.run_read(tx).await?,
        })
    }

    /// The reads: one statement or a few, no rule.
    async fn run_read(&self, tx: &mut impl Tx) -> Res<Done> {
        Ok(match self {
            Op::Get(id) => Done::Job(tx.job(id.as_str(), false).await?),
            Op::List(filter) => Done::Page(lifecycle::list(tx, filter).await?),
            Op::CountsByState => Done::CountsByState(lifecycle::counts_by_state(tx).await?),
            Op::LiveCounts => Done::LiveCounts(lifecycle::live_counts(tx).await?),
            Op::EventsAfter { id, after, limit } => {
                Done::Events(tx.events_after(id.as_str(), *after, *limit).await?)
            }
            Op::LastSeq(id) => Done::LastSeq(tx.last_seq(id.as_str()).await?),
            Op::Journal(id) => Done::Journal(tx.journal(id.as_str()).await?),
            Op::SpendSince { bundle, since } => {
                Done::Spend(lifecycle::spend_since(tx, bundle, *since).await?)
            }
            Op::OwnerLoad { owner, since } => {
                Done::OwnerLoad(lifecycle::owner_load(tx, owner, *since).await?)
            }
            Op::Schedules => Done::Schedules(tx.schedules().await?),
            Op::DeadDeliveries => {
                Done::LastSeq(u64::try_from(tx.dead_deliveries().await?).unwrap_or(0))
            }
            Op::ListDeliveries(filter) => Done::DeliveryPage(outbox::list(tx, filter).await?),
            Op::PushConfigs(id) => Done::PushConfigs(tx.push_configs(id.as_str()).await?),
            write => {
                return Err(Fail::Db(format!("{} is a write, not a read", write.name())));
            }
        })
    }

    /// Where this operation waits for locks in the one order every write
    /// group takes them in (see [`LockOrder`]).
    pub(crate) fn lock_order(&self) -> LockOrder {
        match self {
            Op::Submit(_, job) => {
                lifecycle::job_key(job).map_or(LockOrder::Nothing, LockOrder::Keys)
            }
            Op::SubmitMany(jobs) => jobs
                .iter()
                .filter_map(|(_, job)| lifecycle::job_key(job))
                .min()
                .map_or(LockOrder::Nothing, LockOrder::Keys),
            Op::Heartbeat { id, .. }
            | Op::Pin { id, .. }
            | Op::Finish(FinishOp { id, .. })
            | Op::FinishAndLease(FinishOp { id, .. }, _)
            | Op::Release { id, .. }
            | Op::Cancel(id)
            | Op::Resolve { id, .. }
            | Op::DecideApproval { id, .. }
            | Op::RecordSteps { id, .. }
            | Op::MoveVersion { id, .. }
            | Op::PutPushConfig { id, .. }
            | Op::DeletePushConfig { id, .. } => LockOrder::Row(id.clone()),
            Op::Lease(..) | Op::ExpireApprovals { .. } | Op::Forget(..) | Op::Purge { .. } => {
                LockOrder::Skipping
            }
            Op::Get(..)
            | Op::List(..)
            | Op::CountsByState
            | Op::LiveCounts
            | Op::EventsAfter { .. }
            | Op::LastSeq(..)
            | Op::Journal(..)
            | Op::SpendSince { .. }
            | Op::OwnerLoad { .. }
            | Op::Schedules
            | Op::DeadDeliveries
            | Op::ListDeliveries(..)
            | Op::PushConfigs(..) => LockOrder::Nothing,
            Op::SettleDelivery { id, .. } | Op::RedriveDelivery { id, .. } => {
                LockOrder::Delivery(id.clone())
            }
            Op::ClaimDeliveries { .. } => LockOrder::Skipping,
            Op::PutSchedule(StoredSchedule { id, .. })
            | Op::DeleteSchedule(id)
            | Op::PauseSchedule { id, .. }
            | Op::RecordFire(FireRecord { id, .. }) => LockOrder::Schedule(id.clone()),
        }
    }

    /// Whether a full write backlog refuses this operation
    /// ([`QueueError::Busy`]) rather than making it wait for room: only new
    /// work is refused; the writes of jobs already running (leases,
    /// heartbeats, outcomes, journal steps) and operators' decisions wait,
    /// because they are what drains the backlog.
    pub(crate) fn refused_when_busy(&self) -> bool {
        matches!(self, Op::Submit(..) | Op::SubmitMany(..))
    }

    /// The operation's name, for errors.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Op::Submit(..) => "submit",
            Op::SubmitMany(..) => "submit_many",
            Op::Lease(..) => "lease",
            Op::Heartbeat { .. } => "heartbeat",
            Op::Pin { .. } => "pin_version",
            Op::Finish(..) => "finish",
            Op::FinishAndLease(..) => "finish_and_lease",
            Op::Release { .. } => "release",
            Op::Cancel(..) => "cancel",
            Op::Resolve { .. } => "resolve",
            Op::DecideApproval { .. } => "decide_approval",
            Op::ExpireApprovals { .. } => "expire_approvals",
            Op::RecordSteps { .. } => "record_steps",
            Op::Forget(..) => "forget_conversation",
            Op::Purge { .. } => "purge_finished",
            Op::MoveVersion { .. } => "move_version",
            Op::Get(..) => "get",
            Op::List(..) => "list",
            Op::CountsByState => "counts_by_state",
            Op::LiveCounts => "live_counts",
            Op::EventsAfter { .. } => "events_after",
            Op::LastSeq(..) => "last_seq",
            Op::Journal(..) => "journal",
            Op::SpendSince { .. } => "spend_since",
            Op::OwnerLoad { .. } => "owner_load",
            Op::PutSchedule(..) => "put_schedule",
            Op::DeleteSchedule(..) => "delete_schedule",
            Op::PauseSchedule { .. } => "pause_schedule",
            Op::RecordFire(..) => "record_fire",
            Op::Schedules => "schedules",
            Op::ClaimDeliveries { .. } => "claim_deliveries",
            Op::SettleDelivery { .. } => "settle_delivery",
            Op::DeadDeliveries => "dead_deliveries",
            Op::ListDeliveries(..) => "list_deliveries",
            Op::RedriveDelivery { .. } => "redrive_delivery",
            Op::PutPushConfig { .. } => "put_push_config",
            Op::PushConfigs(..) => "push_configs",
            Op::DeletePushConfig { .. } => "delete_push_config",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keyed(key: &str, owner: Option<&str>) -> NewJob {
        NewJob {
            idempotency_key: Some(key.into()),
            owner: owner.map(str::to_string),
            ..Default::default()
        }
    }

    fn lease() -> LeaseOp {
        LeaseOp {
            worker: "w".into(),
            lease_for: Duration::from_secs(1),
            n: 1,
            max_crash_resumes: 1,
            pin: None,
        }
    }

    fn finish(id: &str) -> FinishOp {
        FinishOp {
            id: JobId::from(id),
            attempt: 1,
            outcome: Outcome::Succeeded(serde_json::Value::Null),
            events: Vec::new(),
            final_event: None,
            retry: RetryPolicy::default(),
        }
    }

    /// A write group sorted by lock order takes keys (by the smallest of a
    /// batch's, as stored: owner first), then job rows by id (a
    /// finish-and-lease by its finish's job), then what only takes unlocked
    /// rows; writes to one job keep the order they came in.
    #[test]
    fn a_group_locks_keys_then_job_ids_then_skips_locked_rows() {
        let mut ops = vec![
            Op::Lease(lease()),
            Op::Cancel(JobId::from("j3")),
            Op::FinishAndLease(finish("j2"), lease()),
            Op::SubmitMany(vec![
                (JobId::from("n1"), keyed("k9", None)),
                (JobId::from("n2"), keyed("k2", None)),
                (JobId::from("n3"), NewJob::default()),
            ]),
            Op::Heartbeat {
                id: JobId::from("j1"),
                attempt: 1,
                lease_for: Duration::from_secs(1),
            },
            Op::Submit(JobId::from("n4"), keyed("k5", Some("alice"))),
            Op::Purge {
                cutoff: 0,
                limit: 1,
            },
            Op::Cancel(JobId::from("j1")),
            Op::Submit(JobId::from("n5"), NewJob::default()),
            Op::ExpireApprovals {
                limit: 1,
                store: "s".into(),
            },
        ];
        ops.sort_by_cached_key(Op::lock_order);
        let names: Vec<&str> = ops.iter().map(Op::name).collect();
        assert_eq!(
            names,
            [
                "submit",
                "submit",
                "submit_many",
                "heartbeat",
                "cancel",
                "finish_and_lease",
                "cancel",
                "lease",
                "purge_finished",
                "expire_approvals"
            ]
        );
        let order: Vec<LockOrder> = ops.iter().map(Op::lock_order).collect();
        assert_eq!(order[0], LockOrder::Nothing);
        assert_eq!(order[1], LockOrder::Keys("alice/k5".into()));
        assert_eq!(order[2], LockOrder::Keys("k2".into()));
        assert_eq!(order[5], LockOrder::Row(JobId::from("j2")));
    }
}
