//! The schedule operations (their rules in `queue/schedules.rs`): put,
//! delete, pause and resume a schedule, record a fire under the next fire
//! it expected.

use super::*;

operation! {
    pub(crate) struct PutSchedule {
        pub schedule: StoredSchedule,
    }
    write "put_schedule" -> () = |op, tx| schedules::put(tx, &op.schedule).await;
}

operation! {
    /// Whether there was one to delete.
    pub(crate) struct DeleteSchedule {
        pub id: String,
    }
    write "delete_schedule" -> bool = |op, tx| tx.delete_schedule(&op.id).await;
}

operation! {
    /// Whether there was one to pause or resume.
    pub(crate) struct PauseSchedule {
        pub id: String,
        pub paused: bool,
    }
    write "pause_schedule" -> bool = |op, tx| schedules::pause(tx, &op.id, op.paused).await;
}

operation! {
    /// Whether the fire was recorded (its `next_fire` still held).
    pub(crate) struct RecordFire {
        pub fire: FireRecord,
    }
    write "record_fire" -> bool = |op, tx| schedules::record_fire(tx, &op.fire).await;
}
