//! Where each schedule stands, kept in the queue's database so that every
//! daemon sharing it sees one state: the schedule's spec (JSON the queue
//! does not read: cron, time zone, input, policies), who owns it, whether
//! it is paused, its next fire and its last one.
//!
//! A fire is recorded by a compare-and-set on `next_fire`: of several
//! daemons that handled the same fire, one advances the schedule and the
//! others learn that someone did. The fire's job itself is made once by
//! its idempotency key (see `crate::schedule`).

use serde::{Deserialize, Serialize};

use super::statements::JobStatements;
use super::tx::{Columns, Res};

/// A schedule as stored.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StoredSchedule {
    pub id: String,
    /// `bundle` (declared by a bundle's `schedule:`) or `api`.
    pub source: String,
    /// The spec as JSON text.
    pub spec: String,
    /// The API key the fires are submitted as (`None`: the daemon).
    pub owner: Option<String>,
    pub paused: bool,
    /// The first fire not handled yet (ms since the epoch).
    pub next_fire: Option<i64>,
    pub last_fire: Option<i64>,
    pub last_job: Option<String>,
    /// What the last fire did (`submitted`, `skipped_overlap`, …).
    pub last_outcome: Option<String>,
    /// Fires passed over so far (late under its `missed` policy, or while
    /// paused).
    #[serde(default)]
    pub missed_fires: u64,
    /// When the store first took it, and last changed it (its spec, its
    /// pause or a fire), ms since the epoch: the store's clock, never the
    /// writer's (0 until stored).
    #[serde(default)]
    pub created_at: i64,
    #[serde(default)]
    pub updated_at: i64,
}

impl StoredSchedule {
    /// A schedule not fired yet, running, its first fire at `next_fire`.
    pub fn new(
        id: String,
        source: String,
        spec: String,
        owner: Option<String>,
        next_fire: Option<i64>,
    ) -> Self {
        Self {
            id,
            source,
            spec,
            owner,
            paused: false,
            next_fire,
            last_fire: None,
            last_job: None,
            last_outcome: None,
            missed_fires: 0,
            created_at: 0,
            updated_at: 0,
        }
    }
}

/// What handling a schedule's due fires changed.
#[derive(Debug, Clone, PartialEq)]
pub struct FireRecord {
    pub id: String,
    /// The `next_fire` the handler read: the record is written only if it
    /// still holds (compare-and-set).
    pub expected_next: i64,
    pub next_fire: Option<i64>,
    pub last_fire: Option<i64>,
    /// `None` keeps the last job (a fire that submitted nothing).
    pub last_job: Option<String>,
    pub last_outcome: String,
    /// Fires this handling passed over, added to the schedule's count.
    pub missed: u64,
}

/// The columns every schedule query selects, in the order
/// [`schedule_from_row`] reads them.
pub(crate) const SCHEDULE_COLUMNS: &str = "id, source, spec, owner, paused, next_fire, last_fire, last_job, last_outcome, missed_fires, \
     created_at, updated_at";

pub(crate) fn schedule_from_row(row: &impl Columns) -> Res<StoredSchedule> {
    Ok(StoredSchedule {
        id: row.req_text(0)?,
        source: row.req_text(1)?,
        spec: row.req_text(2)?,
        owner: row.text(3)?,
        paused: row.req_int(4)? != 0,
        next_fire: row.int(5)?,
        last_fire: row.int(6)?,
        last_job: row.text(7)?,
        last_outcome: row.text(8)?,
        missed_fires: row.req_int(9)?.max(0) as u64,
        created_at: row.req_int(10)?,
        updated_at: row.req_int(11)?,
    })
}

/// The schedule statements of a dialect (one statement each, no rule).
pub(crate) trait ScheduleStatements {
    /// Inserts the schedule or replaces its spec, owner, source and next
    /// fire (its pause and history stay).
    fn put_schedule(
        &mut self,
        schedule: &StoredSchedule,
        now: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    fn schedules(&mut self) -> impl Future<Output = Res<Vec<StoredSchedule>>> + Send;
    fn delete_schedule(&mut self, id: &str) -> impl Future<Output = Res<bool>> + Send;
    fn pause_schedule(
        &mut self,
        id: &str,
        paused: bool,
        now: i64,
    ) -> impl Future<Output = Res<bool>> + Send;
    fn record_fire(
        &mut self,
        fire: &FireRecord,
        now: i64,
    ) -> impl Future<Output = Res<bool>> + Send;
}

pub(crate) async fn put(
    tx: &mut (impl JobStatements + ScheduleStatements),
    schedule: &StoredSchedule,
) -> Res<()> {
    let now = tx.now().await?;
    tx.put_schedule(schedule, now).await
}

pub(crate) async fn pause(
    tx: &mut (impl JobStatements + ScheduleStatements),
    id: &str,
    paused: bool,
) -> Res<bool> {
    let now = tx.now().await?;
    tx.pause_schedule(id, paused, now).await
}

pub(crate) async fn record_fire(
    tx: &mut (impl JobStatements + ScheduleStatements),
    fire: &FireRecord,
) -> Res<bool> {
    let now = tx.now().await?;
    tx.record_fire(fire, now).await
}
