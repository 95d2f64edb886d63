//! The outbox: a job's state changes that someone is to be told of (a
//! completion webhook today; A2A push notifications can add their own
//! `kind`), written by the lifecycle in the transaction that changes the
//! state, so a change is never recorded without its delivery nor the
//! other way round. A sender claims due deliveries (a lease, so several
//! daemons never send one at once, and a crashed sender's come back),
//! sends them, and settles each: delivered, again later, or dead.
//!
//! Per job only the oldest undelivered delivery can be claimed: a receiver
//! hears a job's changes in the order they happened.

use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::tx::{Columns, Fail, Res, Tx};
use super::{Job, JobState, rfc3339};

/// The `kind` of a completion webhook's delivery.
pub const WEBHOOK: &str = "webhook";

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

pub(crate) const DELIVERY_COLUMNS: &str = "id, kind, target, job_id, seq, event, payload, attempts";

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
#[allow(async_fn_in_trait)]
pub(crate) trait OutboxStatements {
    async fn set_job_webhook(&mut self, job_id: &str, url: &str) -> Res<()>;
    async fn job_webhook(&mut self, job_id: &str) -> Res<Option<String>>;
    async fn insert_delivery(&mut self, delivery: &NewDelivery<'_>, now: i64) -> Res<()>;
    /// Due, unleased deliveries that are their job's oldest pending one,
    /// leased until `lease_until`.
    async fn claim_deliveries(
        &mut self,
        now: i64,
        lease_until: i64,
        limit: usize,
    ) -> Res<Vec<Delivery>>;
    async fn settle_delivery(&mut self, id: &str, result: &DeliveryResult, now: i64) -> Res<()>;
    /// How many deliveries are dead-lettered.
    async fn dead_deliveries(&mut self) -> Res<i64>;
}

/// Records a job's webhook as it is submitted.
pub(crate) async fn set_webhook(tx: &mut impl Tx, job_id: &str, url: Option<&str>) -> Res<()> {
    match url {
        Some(url) => tx.set_job_webhook(job_id, url).await,
        None => Ok(()),
    }
}

/// The one rule of what goes into the outbox: called by the lifecycle
/// right after it wrote a job's new state, in the same transaction.
pub(crate) async fn state_changed(tx: &mut impl Tx, id: &str, state: JobState) -> Res<()> {
    if !NOTIFIED.contains(&state) {
        return Ok(());
    }
    let Some(url) = tx.job_webhook(id).await? else {
        return Ok(());
    };
    let now = tx.now().await?;
    let job = tx
        .job(id, false)
        .await?
        .ok_or_else(|| Fail::Db(format!("job {id} vanished as its state changed")))?;
    let event = format!("job.{}", state.as_str());
    let delivery = NewDelivery {
        id: format!("msg_{}", uuid::Uuid::now_v7().simple()),
        kind: WEBHOOK,
        target: &url,
        job_id: id,
        payload: payload(&job, &event, now),
        event,
    };
    tx.insert_delivery(&delivery, now).await
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

pub(crate) async fn claim(tx: &mut impl Tx, lease_ms: i64, limit: usize) -> Res<Vec<Delivery>> {
    let now = tx.now().await?;
    tx.claim_deliveries(now, now.saturating_add(lease_ms), limit)
        .await
}

pub(crate) async fn settle(tx: &mut impl Tx, id: &str, result: &DeliveryResult) -> Res<()> {
    let now = tx.now().await?;
    tx.settle_delivery(id, result, now).await
}
