//! Why admission refuses a job: [`Refusal`], one variant
//! per rule, each holding what the client sent (the field, the value) and
//! saying what to do instead. It knows no HTTP: the API spells each
//! variant as its status and error code in one place (`api/error.rs`,
//! `impl From<Refusal> for ApiError`).

use std::borrow::Cow;

use crate::access::file::NotHttpUrl;
use crate::budget::LimitAboveBundle;
use crate::egress::EgressError;
use crate::group_chat::PLAN_VARIABLE;
use crate::queue::{ControlError, JobId, ONLY_STAGE_VARIABLE, QueueError, TOOLS_VARIABLE};
use crate::registry::UnofferableTools;
use crate::tools::engine::UnknownTools;
use crate::workflow::OnlyStageError;

/// A submission that admission will not let in.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    /// A text (or a string or key inside JSON) holds a NUL byte, which
    /// PostgreSQL cannot store and SQLite would cut short.
    #[error("`{field}` contains a NUL character (\\u0000), which a job cannot hold; remove it")]
    Nul { field: String },
    /// An idempotency key that is empty or only whitespace.
    #[error("the idempotency key is empty; send a non-blank key or leave the field out")]
    BlankIdempotencyKey,
    /// `max_attempts` outside `1..=max`.
    #[error("{asked} is out of range: a job gets 1 to {max} attempts")]
    Attempts { asked: u32, max: u32 },
    /// A priority outside the range every job is held to.
    #[error("{asked} is out of range: priorities go from {lowest} to {highest}")]
    Priority {
        asked: i32,
        lowest: i32,
        highest: i32,
    },
    /// A priority above the key's `max_priority`.
    #[error(
        "API key {key:?} may submit priorities up to {max}, not {asked}; lower it or ask the operator to raise the key's max_priority"
    )]
    KeyPriority { key: String, max: i32, asked: i32 },
    /// The bundle named in `field` is not loaded (or the key may not see
    /// it: the two read the same).
    #[error("no loaded bundle named {name:?} (loaded: {})", .loaded.join(", "))]
    UnknownBundle {
        field: String,
        name: String,
        loaded: Vec<String>,
    },
    /// A callback URL (a webhook, an A2A push config's `url`) that is not
    /// http(s).
    #[error("{field} {source}")]
    NotHttp { field: String, source: NotHttpUrl },
    /// A callback URL that `egress.allow` does not let the daemon reach.
    #[error("{field}: {source}")]
    Egress { field: String, source: EgressError },
    /// The key's `rate_per_minute` is used up for now.
    #[error(
        "API key {key:?} may submit {per_minute} jobs a minute (rate_per_minute); retry after {wait_secs} s"
    )]
    Rate {
        key: String,
        per_minute: u32,
        wait_secs: u64,
    },
    /// A batch larger than the key's rate allows in any minute.
    #[error(
        "a batch of {jobs} jobs is more than API key {key:?} may submit in a minute ({per_minute}); split it"
    )]
    BatchOverRate {
        key: String,
        jobs: u32,
        per_minute: u32,
    },
    /// The key's jobs in flight (direct tool runs and verifies are jobs
    /// too) are at its `max_in_flight`.
    #[error(
        "API key {key:?} has {in_flight} jobs not finished (direct tool runs and verifies included) and may have {max} (max_in_flight); wait for some to finish"
    )]
    InFlight {
        key: String,
        in_flight: u64,
        max: u64,
    },
    /// An idempotency key already used for a different job.
    #[error(
        "idempotency key {key:?} was already used for job {job} with a different {differs}; \
         use a new key for a new job, or GET /v1/jobs/{job} for the existing one"
    )]
    KeyReused {
        key: String,
        job: JobId,
        differs: &'static str,
    },
    /// A control sent as a variable (`tools`, `only_stage`,
    /// `max_agents`) whose value has the wrong shape; `field` names it.
    #[error("{source}")]
    Control { field: String, source: ControlError },
    /// A group chat's plan sent as a variable to the bundle that hosts
    /// group chats: only the runtime API that builds (and checks) a plan
    /// hands one over.
    #[error(
        "`variables.{plan}` is set by the daemon: bundle {bundle:?} hosts group chats, which start with POST /api/group-chat",
        plan = PLAN_VARIABLE
    )]
    PlanVariable { bundle: String },
    /// A rerun of a group chat, which carries no plan: the daemon starts a
    /// chat with the plan it builds.
    #[error(
        "a group chat of bundle {bundle:?} is started by the daemon, with the plan it builds: send POST /api/group-chat again"
    )]
    GroupChatRerun { bundle: String },
    /// `only_stage` on a bundle that has no workflow.
    #[error(
        "`variables.{only}` runs one stage of a workflow, and bundle {bundle:?} has no `workflow:` section: name a workflow bundle, or leave the variable out",
        only = ONLY_STAGE_VARIABLE
    )]
    NotAWorkflow { bundle: String },
    /// `only_stage` naming a stage the workflow lacks or will not run alone.
    #[error("bundle {bundle:?}: {source}")]
    OnlyStage {
        bundle: String,
        source: OnlyStageError,
    },
    /// `tools` on a workflow or a group-chat host (`kind`), which offer no
    /// tools of their own to narrow.
    #[error(
        "`variables.{tools}` offers a subset of an agent bundle's tools; bundle {bundle:?} is a {kind} (leave the variable out)",
        tools = TOOLS_VARIABLE
    )]
    ToolsOnComposite { bundle: String, kind: &'static str },
    /// `tools` naming a tool the bundle does not have.
    #[error("bundle {bundle:?} has {source}")]
    UnknownTools {
        bundle: String,
        source: UnknownTools,
    },
    /// `tools` whose subset the bundle's `tool_choice` or grammar cannot
    /// take.
    #[error("{source}")]
    UnofferableTools { source: UnofferableTools },
    /// A submitter's `limits` above the bundle's: a submitter may only
    /// lower a budget.
    #[error(transparent)]
    LimitAboveBundle(#[from] LimitAboveBundle),
    /// The queue could not answer admission's question (a key's load).
    #[error(transparent)]
    Store(#[from] QueueError),
}

/// Seconds a key waits when its jobs in flight are at its cap: long
/// enough for a job to finish, short enough not to give up.
pub const IN_FLIGHT_RETRY_SECS: u64 = 5;

impl Refusal {
    /// The request's field the refusal is about, as the client named it
    /// (`variables.user.name`, `idempotency_key`), if it is about one.
    pub fn field(&self) -> Option<Cow<'_, str>> {
        let variable = |name: &str| Some(Cow::Owned(format!("variables.{name}")));
        match self {
            Self::Nul { field }
            | Self::UnknownBundle { field, .. }
            | Self::NotHttp { field, .. }
            | Self::Egress { field, .. }
            | Self::Control { field, .. } => Some(Cow::Borrowed(field)),
            Self::PlanVariable { .. } => variable(PLAN_VARIABLE),
            Self::NotAWorkflow { .. } | Self::OnlyStage { .. } => variable(ONLY_STAGE_VARIABLE),
            Self::ToolsOnComposite { .. }
            | Self::UnknownTools { .. }
            | Self::UnofferableTools { .. } => variable(TOOLS_VARIABLE),
            Self::LimitAboveBundle(_) => Some(Cow::Borrowed("limits")),
            Self::BlankIdempotencyKey | Self::KeyReused { .. } => {
                Some(Cow::Borrowed("idempotency_key"))
            }
            Self::Attempts { .. } => Some(Cow::Borrowed("max_attempts")),
            Self::Priority { .. } | Self::KeyPriority { .. } => Some(Cow::Borrowed("priority")),
            Self::BatchOverRate { .. } => Some(Cow::Borrowed("jobs")),
            Self::Rate { .. }
            | Self::InFlight { .. }
            | Self::GroupChatRerun { .. }
            | Self::Store(_) => None,
        }
    }

    /// Seconds after which asking again may succeed, for a refusal that
    /// means "not now" (a quota), not "not this".
    pub fn retry_after(&self) -> Option<u64> {
        match self {
            Self::Rate { wait_secs, .. } => Some(*wait_secs),
            Self::InFlight { .. } => Some(IN_FLIGHT_RETRY_SECS),
            _ => None,
        }
    }
}
