//! The schedule operations (their rules in `queue/schedules.rs`): put,
//! delete, pause and resume a schedule, record a fire under the next fire
//! it expected.

use super::*;

pub(crate) struct PutSchedule {
    pub schedule: StoredSchedule,
}

impl Operation for PutSchedule {
    type Output = ();
    const NAME: &'static str = "put_schedule";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<()> {
        schedules::put(tx, &self.schedule).await
    }
}

impl Write for PutSchedule {}

/// Whether there was one to delete.
pub(crate) struct DeleteSchedule {
    pub id: String,
}

impl Operation for DeleteSchedule {
    type Output = bool;
    const NAME: &'static str = "delete_schedule";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<bool> {
        tx.delete_schedule(&self.id).await
    }
}

impl Write for DeleteSchedule {}

/// Whether there was one to pause or resume.
pub(crate) struct PauseSchedule {
    pub id: String,
    pub paused: bool,
}

impl Operation for PauseSchedule {
    type Output = bool;
    const NAME: &'static str = "pause_schedule";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<bool> {
        schedules::pause(tx, &self.id, self.paused).await
    }
}

impl Write for PauseSchedule {}

/// Whether the fire was recorded (its `next_fire` still held).
pub(crate) struct RecordFire {
    pub fire: FireRecord,
}

impl Operation for RecordFire {
    type Output = bool;
    const NAME: &'static str = "record_fire";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<bool> {
        schedules::record_fire(tx, &self.fire).await
    }
}

impl Write for RecordFire {}
