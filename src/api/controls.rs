//! A job's kind and the daemon's controls over it, as admission decides
//! them for every way in ([`decide`]): controls a wire sent as variables
//! (`tools`, `only_stage`, `max_agents`; see `queue::Asked::lift`) leave
//! `variables` for their typed fields, a group chat's plan comes only from
//! the runtime API that built it, and each is checked against the bundle
//! as it is loaded now. What the worker later reads is exactly what this
//! wrote.

use serde_json::{Map, Value};

use super::AppState;
use super::error::{ApiError, ErrorCode};
use crate::group_chat::{PLAN_VARIABLE, Plan};
use crate::queue::{Asked, JobKind, NewJob, ONLY_STAGE_VARIABLE, TOOLS_VARIABLE};
use crate::registry::LoadedBundle;

/// Sets `job.kind` and `job.controls`: the wire's typed controls, then
/// those its variables carry; the kind from `plan` (handed over only by the
/// runtime API's group chat, which checked it), else `only_stage`, else
/// the kind the job came with (a rerun's). A submitter cannot make a
/// group chat: its `group_chat` variable on the bundle that hosts chats is
/// refused, and a rerun of a group chat carries no plan.
pub(super) fn decide(
    state: &AppState,
    job: &mut NewJob,
    plan: Option<Plan>,
) -> Result<(), ApiError> {
    let snapshot = state.registry.snapshot();
    let loaded = snapshot.bundle(&job.bundle);
    if let Some(loaded) = loaded {
        no_plan_variable(loaded, &job.variables)?;
    }
    let asked = Asked::lift(&mut job.variables).map_err(|e| {
        ApiError::field(
            ErrorCode::InvalidRequest,
            format!("variables.{}", e.variable),
            e.to_string(),
        )
    })?;
    job.controls = std::mem::take(&mut job.controls).or(asked.controls);
    job.kind = match (plan, asked.stage, std::mem::take(&mut job.kind)) {
        (Some(plan), _, _) => JobKind::GroupChat {
            plan: Box::new(plan),
        },
        (None, _, JobKind::GroupChat { .. }) => {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                format!(
                    "a group chat of bundle {:?} is started by the daemon, with the plan it builds: send POST /api/group-chat again",
                    job.bundle
                ),
            ));
        }
        (None, Some(stage), _) => JobKind::Stage { stage },
        (None, None, kind) => kind,
    };
    let Some(loaded) = loaded else {
        return Ok(());
    };
    if let JobKind::Stage { stage } = &job.kind {
        only_stage(loaded, stage)?;
    }
    if let Some(names) = &job.controls.tools {
        offered_tools(loaded, names)?;
    }
    Ok(())
}

/// The plan of a group chat (which names the agents, endpoints and rounds
/// of a chat) comes only from `POST /api/group-chat`, which checks it; a
/// submitter cannot hand one to the host bundle as a variable.
fn no_plan_variable(loaded: &LoadedBundle, variables: &Map<String, Value>) -> Result<(), ApiError> {
    if loaded.bundle.raw.group_chat.is_none() || !variables.contains_key(PLAN_VARIABLE) {
        return Ok(());
    }
    Err(ApiError::field(
        ErrorCode::InvalidRequest,
        format!("variables.{PLAN_VARIABLE}"),
        format!(
            "`variables.{PLAN_VARIABLE}` is set by the daemon: bundle {:?} hosts group chats, which start with POST /api/group-chat",
            loaded.name()
        ),
    ))
}

/// A 422 unless `stage` is a stage of the bundle's workflow that may run
/// alone.
fn only_stage(loaded: &LoadedBundle, stage: &str) -> Result<(), ApiError> {
    let refused = |message: String| {
        ApiError::field(
            ErrorCode::InvalidRequest,
            format!("variables.{ONLY_STAGE_VARIABLE}"),
            message,
        )
    };
    let Some(workflow) = &loaded.bundle.workflow else {
        return Err(refused(format!(
            "`variables.{ONLY_STAGE_VARIABLE}` runs one stage of a workflow, and bundle {:?} has no `workflow:` section: name a workflow bundle, or leave the variable out",
            loaded.name()
        )));
    };
    workflow
        .only_stage(stage)
        .map_err(|e| refused(format!("bundle {:?}: {e}", loaded.name())))
}

/// A 422 unless the agent bundle can offer the tools `names` alone.
fn offered_tools(loaded: &LoadedBundle, names: &[String]) -> Result<(), ApiError> {
    let refused = |message: String| {
        ApiError::field(
            ErrorCode::InvalidRequest,
            format!("variables.{TOOLS_VARIABLE}"),
            message,
        )
    };
    let raw = &loaded.bundle.raw;
    if raw.workflow.is_some() || raw.group_chat.is_some() {
        return Err(refused(format!(
            "`variables.{TOOLS_VARIABLE}` offers a subset of an agent bundle's tools; bundle {:?} is a {} (leave the variable out)",
            loaded.name(),
            if raw.workflow.is_some() {
                "workflow"
            } else {
                "group-chat host"
            }
        )));
    }
    let tools = loaded
        .tools
        .subset(names)
        .map_err(|e| refused(format!("bundle {:?} has {e}", loaded.name())))?;
    loaded
        .shapes_for(&tools)
        .map(|_| ())
        .map_err(|e| refused(e.to_string()))
}
