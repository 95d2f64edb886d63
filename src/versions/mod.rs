//! Forks and versions: a job's journal replayed on purpose. A fork is a new
//! job seeded with the turns of another job's journal before a turn it
//! names ([`seed`]); a version move re-pins waiting or parked jobs to their
//! bundle's current content ([`migrate`]). Whenever the replayed journal
//! meets content other than the content it was recorded on, the one
//! replay-compatibility check ([`compat`]) decides. What the jobs are
//! pinned to ([`pins`]) is kept in the bundle store.
//!
//! This module sits between the HTTP layer (which admits forks and serves
//! `migrate-jobs`) and the queue and registry; the daemon also calls it
//! after a reload for bundles that declare `on_new_version: move`.

pub mod compat;
pub mod migrate;
pub mod pins;
pub mod seed;
