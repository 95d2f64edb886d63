//! Admission: what a submission may be, for every way in that starts a job
//! (the API's wires, direct tool runs and verifies, the scheduler's fires). The rules live
//! here and refuse with a typed [`Refusal`] naming the field, what is wrong
//! and what to do; the API only reads the caller, calls them in order and
//! spells a refusal as its status (`api/admission.rs`, `api/error.rs`).
//!
//! - `fields`: a job's own fields (no NUL byte, a non-blank idempotency
//!   key, attempts and priority in range, the key's `max_priority`);
//! - `bundle`: the bundle it names is loaded, its webhook (or any
//!   callback URL) is http(s) and within `egress.allow`;
//! - `quota`: the key's rate and jobs in flight;
//! - `controls`: the job's kind and the daemon's controls over it (those
//!   sent as variables lifted out of them, each checked against the bundle);
//! - `budgets`: a submitter's limits only lower the bundle's, and the daily
//!   budgets the job is queued under;
//! - `idempotency`: a repeated idempotency key names the same job;
//! - `canary`: a canary's share of the new jobs pinned to it;
//! - `gate`: what admission keeps between requests (each key's rate
//!   limiter and its in-flight lock);
//! - `seam`: [`OnBehalf`], how the daemon's own loops (the scheduler, an
//!   eval run) submit a job as a key, through the API's admission.
//!
//! It knows keys, bundles and the queue, never HTTP.

mod budgets;
mod bundle;
mod canary;
mod controls;
mod fields;
mod gate;
mod idempotency;
mod quota;
mod refusal;
mod seam;

pub use budgets::daily_budgets;
pub use bundle::{check_callback, loaded_bundle, webhook};
pub use canary::route_canary;
pub use controls::{action_of, decide};
pub use fields::{
    MAX_ATTEMPTS, PRIORITY_MAX, PRIORITY_MIN, PRIORITY_RANGE, check_fields, key_priority, no_nul,
};
pub use gate::Gate;
pub use idempotency::same_job;
pub use quota::key_quotas;
pub use refusal::{IN_FLIGHT_RETRY_SECS, Refusal};
pub use seam::{NotAdmitted, OnBehalf};
