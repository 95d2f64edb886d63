//! The scheduler's loop, started by the daemon: once a second it brings
//! the bundles' `schedule:`s into the queue's schedules (`bundles`), then
//! takes every due schedule's turn (`fire`), submitting a fire through the
//! same admission as every way in — the `admit::OnBehalf` seam the daemon
//! hands it (the API's admission, as the schedule's owner key or as the
//! daemon for a bundle's). A fire's idempotency key is deterministic, so
//! several daemons sharing a PostgreSQL store make one job of it, and the
//! compare-and-set of `JobQueue::record_fire` lets one of them advance the
//! schedule.
//!
//! What a schedule is and when it fires is `crate::schedule`'s (pure);
//! where each stands is the queue's (`StoredSchedule`). This module knows
//! neither HTTP nor who a key is: admission does.
//!
//! - `seam`: [`Scheduler`] (what the loop works with);
//! - `bundles`: a bundle's schedule in the store (`FROM_BUNDLE`, its id as
//!   its owner names it, syncing the store with the snapshot);
//! - `fire`: one schedule's turn, and passing over a paused one's fires;
//! - `run`: the loop.

mod bundles;
mod fire;
mod run;
mod seam;

pub use bundles::{FROM_BUNDLE, own_id, stored_spec};
pub use fire::{fire_job, pass_over_paused_fires};
pub use run::spawn;
pub use seam::Scheduler;
