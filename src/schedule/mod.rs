//! Schedules: a cron expression in a time zone, the input and variables
//! each fire's job gets, and what to do with fires missed while no daemon
//! ran (`missed`) and with a fire that comes while the last one's job still
//! runs (`overlap`). A bundle declares one under `schedule:`; an operator
//! makes more over `POST /v1/schedules`.
//!
//! This module is pure: it parses specs and says which fires are due. The
//! queue stores where each schedule stands (`queue::StoredSchedule`); the
//! API's scheduler submits the fires through admission.

mod due;
mod spec;
mod turn;

pub use due::{Due, due_fires, fire_key};
pub use spec::{Compiled, Missed, Overlap, ScheduleError, ScheduleSpec, Stored, next_after};
pub use turn::{LastJob, Turn, turn};
