//! The outbox: a job's state changes that someone is to be told of (a
//! completion webhook, kind `webhook`; an A2A push notification per
//! config of the task, kind `a2a_push`), written by the lifecycle in the
//! transaction that changes the state, so a change is never recorded
//! without its deliveries nor the other way round. [`state_changed`] is
//! the one rule of what a change writes, for every kind. A sender claims due deliveries (a lease, so several
//! daemons never send one at once, and a crashed sender's come back),
//! sends them, and settles each: delivered, again later, or dead.
//!
//! Claims are fenced: each claim of a delivery takes the next generation
//! (`Delivery::claim`), and a settle records only with the generation of
//! the delivery's latest claim. A sender that stalled past its lease (a
//! paused daemon) while another claimed and sent the delivery settles
//! nothing when it wakes ([`Settled::Stale`]): it cannot turn a delivered
//! change back into a pending one, nor dead-letter it.
//!
//! Per job only the oldest undelivered delivery can be claimed: a receiver
//! hears a job's changes in the order they happened.
//!
//! Operators list deliveries (the dead letters above all) and redrive a
//! dead one: it is pending again with its attempts reset, due at once. A
//! redriven delivery may reach its receiver after the job's later changes
//! did (they were not held up by a dead one).

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::listing::{comparisons, page_limit, paged};
use super::statements::JobStatements;
use super::tx::{Columns, Fail, Res};
use super::{Job, JobState, rfc3339};

/// The `kind` of a completion webhook's delivery.
pub const WEBHOOK: &str = "webhook";

/// The `kind` of an A2A push notification's delivery.
pub const A2A_PUSH: &str = "a2a_push";

/// The largest payload sent: a bigger job result is left out (the receiver
/// reads it with `GET /v1/jobs/{id}`).
pub const MAX_PAYLOAD_BYTES: usize = 256 * 1024;

/// The states a webhook is told of.
pub const NOTIFIED: [JobState; 6] = [
    JobState::Succeeded,
    JobState::Failed,
    JobState::Dead,
    JobState::Cancelled,
    JobState::NeedsAttention,
    JobState::AwaitingApproval,
];

/// Where an A2A task's state changes are pushed (its
/// `TaskPushNotificationConfig`): stored per job, each change delivered to
/// every config the job has then.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushConfig {
    /// Unique per job.
    pub id: String,
    pub url: String,
    /// Sent back with each push for the receiver to check.
    pub token: Option<String>,
    /// How the agent authenticates to the receiver.
    pub authentication: Option<PushAuth>,
}

/// The `Authorization` a push carries: `{scheme} {credentials}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushAuth {
    pub scheme: String,
    pub credentials: Option<String>,
}

/// An `a2a_push` delivery's payload: the config it goes to and the job as
/// the change left it (the sender's formatter makes the wire body of it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PushPayload {
    pub config: PushConfig,
    pub job: Job,
    /// The job's input, variables and result were left out (too big).
    #[serde(default)]
    pub truncated: bool,
}

/// A delivery as a sender claims it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Delivery {
    /// Also the receiver's idempotency key (`webhook-id`).
    pub id: String,
    pub kind: String,
    /// Where it goes (a URL for a webhook).
    pub target: String,
    pub job_id: String,
    /// Its place among the job's deliveries (1, 2, …).
    pub seq: i64,
    /// `job.succeeded`, `job.awaiting_approval`, …
    pub event: String,
    pub payload: String,
    /// Attempts made before this one.
    pub attempts: u32,
    /// This claim's generation: settling with it records the attempt only
    /// while no later claim took the delivery.
    #[serde(default)]
    pub claim: u64,
}

/// What a settle did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Settled {
    /// The attempt's outcome is recorded.
    Recorded,
    /// The claim is no longer the delivery's latest (another sender claimed
    /// it after this one's lease ran out, or it was settled already):
    /// nothing changed.
    Stale,
}

/// How a delivery attempt ended.
#[derive(Debug, Clone, PartialEq)]
pub enum DeliveryResult {
    Delivered,
    /// Try again at this time (ms since the epoch).
    Retry {
        at: i64,
        error: String,
    },
    /// No attempt is left: the delivery is dead-lettered.
    Dead {
        error: String,
    },
}

impl DeliveryResult {
    /// What a settle writes, on either store: the delivery's state, when it
    /// is attempted next (a settled one: `now`) and its last error.
    pub(crate) fn stored(&self, now: i64) -> (&'static str, i64, Option<&str>) {
        match self {
            Self::Delivered => ("delivered", now, None),
            Self::Retry { at, error } => ("pending", *at, Some(error.as_str())),
            Self::Dead { error } => ("dead", now, Some(error.as_str())),
        }
    }
}

/// A claim generation as both stores keep it (a signed 64-bit integer).
pub(crate) fn stored_claim(claim: u64) -> i64 {
    i64::try_from(claim).unwrap_or(i64::MAX)
}

/// The columns a claim selects, in the order [`delivery_from_row`] reads
/// them (`claims`: the generation of the delivery's latest claim).
pub(crate) const DELIVERY_COLUMNS: &str =
    "id, kind, target, job_id, seq, event, payload, attempts, claims";

pub(crate) fn delivery_from_row(row: &impl Columns) -> Res<Delivery> {
    Ok(Delivery {
        id: row.req_text(0)?,
        kind: row.req_text(1)?,
        target: row.req_text(2)?,
        job_id: row.req_text(3)?,
        seq: row.req_int(4)?,
        event: row.req_text(5)?,
        payload: row.req_text(6)?,
        attempts: u32::try_from(row.req_int(7)?.max(0)).unwrap_or(u32::MAX),
        claim: u64::try_from(row.req_int(8)?).unwrap_or(0),
    })
}

/// Where a delivery stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum DeliveryState {
    /// Waiting for its next attempt (or being attempted).
    Pending,
    Delivered,
    /// Its last attempt failed; only a redrive sends it again.
    Dead,
}

impl DeliveryState {
    pub const ALL: [DeliveryState; 3] = [Self::Pending, Self::Delivered, Self::Dead];

    pub fn as_str(self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Delivered => "delivered",
            Self::Dead => "dead",
        }
    }

    pub fn parse(text: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|s| s.as_str() == text)
    }
}

// Kept apart from `Delivery`, whose first fields it repeats: that is what a
// sender claims (payload, claim generation), this what an operator reads
// (state, error, times, owner), each from its own query and columns.
/// A delivery as an operator sees it: where it stands and why, without its
/// payload (the job's own page has what it carries).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct DeliveryRecord {
    pub id: String,
    pub kind: String,
    pub target: String,
    pub job_id: String,
    pub seq: i64,
    pub event: String,
    pub state: DeliveryState,
    /// Attempts made (a redrive resets them to 0).
    pub attempts: u32,
    pub last_error: Option<String>,
    /// RFC 3339: when a pending one is attempted next; when a settled one
    /// was settled.
    pub next_attempt_at: String,
    pub created_at: String,
    pub updated_at: String,
    /// The API key that submitted its job (`None` without keys, or once
    /// the job was purged).
    pub owner: Option<String>,
}

pub(crate) const RECORD_COLUMNS: &str = "d.id, d.kind, d.target, d.job_id, d.seq, d.event, d.state, d.attempts, d.last_error, d.next_attempt_at, d.created_at, d.updated_at, j.owner";

/// What a record is read from: a delivery and its job's owner.
pub(crate) const RECORD_FROM: &str = "deliveries d LEFT JOIN jobs j ON j.id = d.job_id";

pub(crate) fn record_from_row(row: &impl Columns) -> Res<DeliveryRecord> {
    let state = row.req_text(6)?;
    Ok(DeliveryRecord {
        id: row.req_text(0)?,
        kind: row.req_text(1)?,
        target: row.req_text(2)?,
        job_id: row.req_text(3)?,
        seq: row.req_int(4)?,
        event: row.req_text(5)?,
        state: DeliveryState::parse(&state)
            .ok_or_else(|| Fail::Db(format!("unknown delivery state {state:?}")))?,
        attempts: u32::try_from(row.req_int(7)?.max(0)).unwrap_or(u32::MAX),
        last_error: row.text(8)?,
        next_attempt_at: rfc3339(row.req_int(9)?),
        created_at: rfc3339(row.req_int(10)?),
        updated_at: rfc3339(row.req_int(11)?),
        owner: row.text(12)?,
    })
}

/// Which deliveries a listing shows, newest first.
#[derive(Debug, Clone, Default)]
pub struct DeliveryFilter {
    pub state: Option<DeliveryState>,
    pub kind: Option<String>,
    pub job_id: Option<String>,
    /// Only deliveries of the jobs this API key submitted.
    pub owner: Option<String>,
    pub limit: usize,
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
}

impl DeliveryFilter {
    /// The filter as SQL conditions over [`RECORD_FROM`] and their
    /// arguments (see `JobFilter::conditions`).
    pub(crate) fn conditions(
        &self,
        placeholder: impl Fn(usize) -> String,
    ) -> (String, Vec<String>) {
        comparisons(
            [
                ("d.state", "=", self.state.map(|s| s.as_str().to_string())),
                ("d.kind", "=", self.kind.clone()),
                ("d.job_id", "=", self.job_id.clone()),
                ("j.owner", "=", self.owner.clone()),
                // Ids are `msg_` and a UUIDv7: newest first, a page
                // continues below the cursor.
                ("d.id", "<", self.cursor.clone()),
            ],
            &placeholder,
        )
    }
}

/// A page of deliveries, newest first.
#[derive(Debug, Clone, Serialize, schemars::JsonSchema)]
pub struct DeliveryPage {
    pub deliveries: Vec<DeliveryRecord>,
    /// The `cursor` of the next page; `null` on the last.
    pub next_cursor: Option<String>,
}

/// What a redrive found.
#[derive(Debug, Clone, PartialEq)]
pub enum Redrive {
    /// It was dead and is pending again, due now.
    Redriven(DeliveryRecord),
    /// It is not dead (pending or delivered): nothing changed.
    NotDead(DeliveryRecord),
    /// No such delivery, or not one of the asking key's jobs.
    NotFound,
}

pub(crate) const PUSH_COLUMNS: &str = "id, url, token, auth_scheme, auth_credentials";

pub(crate) fn push_from_row(row: &impl Columns) -> Res<PushConfig> {
    let credentials = row.text(4)?;
    Ok(PushConfig {
        id: row.req_text(0)?,
        url: row.req_text(1)?,
        token: row.text(2)?,
        authentication: row.text(3)?.map(|scheme| PushAuth {
            scheme,
            credentials,
        }),
    })
}

/// A delivery to insert (its `seq` is the job's next).
pub(crate) struct NewDelivery<'a> {
    pub id: String,
    pub kind: &'a str,
    pub target: &'a str,
    pub job_id: &'a str,
    pub event: String,
    pub payload: String,
}

/// The outbox statements of a dialect (one statement each, no rule).
pub(crate) trait OutboxStatements {
    fn set_job_webhook(&mut self, job_id: &str, url: &str) -> impl Future<Output = Res<()>> + Send;
    fn job_webhook(&mut self, job_id: &str) -> impl Future<Output = Res<Option<String>>> + Send;
    fn insert_delivery(
        &mut self,
        delivery: &NewDelivery<'_>,
        now: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    /// Up to `limit` due, unleased deliveries that are their job's oldest
    /// pending one (locked, skipping locked rows, on PostgreSQL), with the
    /// generation of their latest claim.
    fn due_deliveries(
        &mut self,
        now: i64,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<Delivery>>> + Send;
    /// Leases a delivery until `lease_until` under claim generation `claim`.
    fn lease_delivery(
        &mut self,
        id: &str,
        claim: u64,
        lease_until: i64,
        now: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    /// Records an attempt's outcome if `claim` is still the delivery's
    /// latest claim and it is leased (not settled since); whether it was.
    fn settle_delivery(
        &mut self,
        id: &str,
        claim: u64,
        result: &DeliveryResult,
        now: i64,
    ) -> impl Future<Output = Res<bool>> + Send;
    /// How many deliveries are dead-lettered.
    fn dead_deliveries(&mut self) -> impl Future<Output = Res<i64>> + Send;
    fn delivery(&mut self, id: &str) -> impl Future<Output = Res<Option<DeliveryRecord>>> + Send;
    /// Up to `limit` records the filter selects, newest first.
    fn list_deliveries(
        &mut self,
        filter: &DeliveryFilter,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<DeliveryRecord>>> + Send;
    /// A dead delivery pending again: attempts 0, due at `now`, unleased;
    /// whether it was dead.
    fn redrive_delivery(&mut self, id: &str, now: i64) -> impl Future<Output = Res<bool>> + Send;
    /// Inserts a job's push config or replaces the one with its id.
    fn put_push_config(
        &mut self,
        job_id: &str,
        config: &PushConfig,
        now: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    /// A job's push configs, oldest first.
    fn push_configs(&mut self, job_id: &str) -> impl Future<Output = Res<Vec<PushConfig>>> + Send;
    /// Push configs held on jobs not finished: of job `job_id`, of
    /// `owner`'s jobs, or (neither) of all.
    fn count_push_configs(
        &mut self,
        job_id: Option<&str>,
        owner: Option<&str>,
    ) -> impl Future<Output = Res<i64>> + Send;
    /// Whether there was one to delete.
    fn delete_push_config(
        &mut self,
        job_id: &str,
        id: &str,
    ) -> impl Future<Output = Res<bool>> + Send;
    /// Drops a job's deliveries of `kind` to `target` not sent yet.
    fn drop_pending(
        &mut self,
        job_id: &str,
        kind: &str,
        target: &str,
    ) -> impl Future<Output = Res<()>> + Send;
}

/// The one rule of what goes into the outbox: called by the lifecycle
/// right after it wrote a job's new state (a state other than the one
/// before), in the same transaction. A webhook hears of the states in
/// [`NOTIFIED`]; a push config of every change.
pub(crate) async fn state_changed(
    tx: &mut (impl JobStatements + OutboxStatements),
    id: &str,
    state: JobState,
) -> Res<()> {
    let webhook = match NOTIFIED.contains(&state) {
        true => tx.job_webhook(id).await?,
        false => None,
    };
    let pushes = tx.push_configs(id).await?;
    if webhook.is_none() && pushes.is_empty() {
        return Ok(());
    }
    let now = tx.now().await?;
    let job = tx
        .job(id, false)
        .await?
        .ok_or_else(|| Fail::Db(format!("job {id} vanished as its state changed")))?;
    let event = format!("job.{}", state.as_str());
    let mut deliveries = Vec::new();
    if let Some(url) = webhook {
        deliveries.push((WEBHOOK, url, payload(&job, &event, now)));
    }
    for config in pushes {
        let url = config.url.clone();
        deliveries.push((A2A_PUSH, url, push_payload(&job, config)));
    }
    for (kind, target, payload) in deliveries {
        let delivery = NewDelivery {
            id: format!("msg_{}", uuid::Uuid::now_v7().simple()),
            kind,
            target: &target,
            job_id: id,
            payload,
            event: event.clone(),
        };
        tx.insert_delivery(&delivery, now).await?;
    }
    Ok(())
}

/// An `a2a_push` delivery's payload ([`PushPayload`]), without the job's
/// input, variables and result when it would pass [`MAX_PAYLOAD_BYTES`].
pub fn push_payload(job: &Job, config: PushConfig) -> String {
    let mut payload = PushPayload {
        config,
        job: job.clone(),
        truncated: false,
    };
    let full = serde_json::to_string(&payload).unwrap_or_default();
    if full.len() <= MAX_PAYLOAD_BYTES {
        return full;
    }
    payload.job.input = String::new();
    payload.job.variables = serde_json::Map::new();
    payload.job.messages = None;
    payload.job.result = None;
    payload.job.pending_call = None;
    payload.truncated = true;
    serde_json::to_string(&payload).unwrap_or_default()
}

/// The body a receiver gets (Standard Webhooks' `{type, timestamp, data}`).
pub fn payload(job: &Job, event: &str, now: i64) -> String {
    let mut data = json!({
        "job_id": job.id, "bundle": job.bundle, "state": job.state,
        "error": job.error, "termination_reason": job.termination_reason,
        "owner": job.owner, "finished_at": job.finished_at,
        "pending_call": job.pending_call, "result": job.result,
    });
    let body =
        |data: &Value| json!({"type": event, "timestamp": rfc3339(now), "data": data}).to_string();
    let full = body(&data);
    if full.len() <= MAX_PAYLOAD_BYTES {
        return full;
    }
    data["result"] = Value::Null;
    data["pending_call"] = Value::Null;
    data["truncated"] = Value::Bool(true);
    body(&data)
}

/// The one rule of a claim: each due delivery is leased for `lease_ms`
/// under the next generation of its claims, which its settle must show.
pub(crate) async fn claim(
    tx: &mut (impl JobStatements + OutboxStatements),
    lease_ms: i64,
    limit: usize,
) -> Res<Vec<Delivery>> {
    let now = tx.now().await?;
    let lease_until = now.saturating_add(lease_ms);
    let mut due = tx.due_deliveries(now, limit).await?;
    for delivery in &mut due {
        delivery.claim = delivery.claim.saturating_add(1);
        tx.lease_delivery(&delivery.id, delivery.claim, lease_until, now)
            .await?;
    }
    Ok(due)
}

/// The one rule of a settle: only the delivery's latest claim records its
/// attempt; a stale one changes nothing (see the module docs).
pub(crate) async fn settle(
    tx: &mut (impl JobStatements + OutboxStatements),
    id: &str,
    claim: u64,
    result: &DeliveryResult,
) -> Res<Settled> {
    let now = tx.now().await?;
    Ok(match tx.settle_delivery(id, claim, result, now).await? {
        true => Settled::Recorded,
        false => Settled::Stale,
    })
}

pub(crate) async fn list(
    tx: &mut (impl JobStatements + OutboxStatements),
    filter: &DeliveryFilter,
) -> Res<DeliveryPage> {
    let rows = tx
        .list_deliveries(filter, page_limit(filter.limit) + 1)
        .await?;
    let (deliveries, next_cursor) = paged(rows, filter.limit, |d| d.id.clone());
    Ok(DeliveryPage {
        deliveries,
        next_cursor,
    })
}

/// The one rule of a redrive: only a dead delivery, and with `owner` only
/// one of that key's jobs, is made pending again, its attempts reset and
/// due now (the sender claims it at its next round).
pub(crate) async fn redrive(
    tx: &mut (impl JobStatements + OutboxStatements),
    id: &str,
    owner: Option<&str>,
) -> Res<Redrive> {
    let Some(found) = tx.delivery(id).await? else {
        return Ok(Redrive::NotFound);
    };
    if owner.is_some_and(|owner| found.owner.as_deref() != Some(owner)) {
        return Ok(Redrive::NotFound);
    }
    let now = tx.now().await?;
    if !tx.redrive_delivery(id, now).await? {
        return Ok(Redrive::NotDead(found));
    }
    let redriven = tx
        .delivery(id)
        .await?
        .ok_or_else(|| Fail::Db(format!("delivery {id} vanished as it was redriven")))?;
    Ok(Redrive::Redriven(redriven))
}
