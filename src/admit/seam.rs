//! How the daemon's own loops submit a job as a key ([`OnBehalf`]): the
//! scheduler's fires, an eval run's cases. The daemon fills it with the
//! API's admission, so a job submitted on a key's behalf is admitted
//! exactly as the key's own request would be — its scopes and globs, its
//! quotas, its daily budgets.

use crate::queue::{JobId, NewJob};

/// Submits jobs as a key (or as the daemon).
#[async_trait::async_trait]
pub trait OnBehalf: Send + Sync {
    /// The id of the job `job` was admitted as (or the one its
    /// idempotency key names already), submitted as `owner` — the key as
    /// the key ring has it now — or, for `None`, as the daemon itself.
    async fn submit(&self, owner: Option<&str>, job: NewJob) -> Result<JobId, NotAdmitted>;
}

/// Why a job submitted on a key's behalf was not queued, as its loop must
/// act on it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NotAdmitted {
    /// The store could not take it now: try again later.
    #[error("the store cannot take the job now: {0}")]
    Unavailable(String),
    /// The key's rate or in-flight cap refused it: the same job may be
    /// admitted once the key's other jobs end.
    #[error("{0}")]
    Throttled(String),
    /// Admission refused it (the owner key gone, a scope, a daily budget,
    /// the bundle unloaded): the same job would be refused again.
    #[error("{0}")]
    Refused(String),
}
