//! A job's kind and the daemon's controls over it, as admission decides
//! them for every way in ([`decide`]): controls a wire sent as variables
//! (`tools`, `only_stage`, `max_agents`; see `queue::Asked::lift`) leave
//! `variables` for their typed fields, a group chat's plan comes only from
//! the runtime API that built it, and each is checked against the bundle
//! as it is loaded now. What the worker later reads is exactly what this
//! wrote.

use serde_json::{Map, Value};

use super::refusal::Refusal;
use crate::access::policy::Action;
use crate::group_chat::{PLAN_VARIABLE, Plan};
use crate::queue::{Asked, JobKind, NewJob};
use crate::registry::{LoadedBundle, Snapshot};

/// Sets `job.kind` and `job.controls`: the wire's typed controls, then
/// those its variables carry; the kind from `plan` (handed over only by the
/// runtime API's group chat, which checked it), else `only_stage`, else
/// the kind the job came with (a rerun's). A submitter cannot make a
/// group chat: its `group_chat` variable on the bundle that hosts chats is
/// refused, and a rerun of a group chat carries no plan.
pub fn decide(snapshot: &Snapshot, job: &mut NewJob, plan: Option<Plan>) -> Result<(), Refusal> {
    let loaded = snapshot.bundle(&job.bundle);
    if let Some(loaded) = loaded {
        no_plan_variable(loaded, &job.variables)?;
    }
    let asked = Asked::lift(&mut job.variables).map_err(|source| Refusal::Control {
        field: format!("variables.{}", source.variable),
        source,
    })?;
    job.controls = std::mem::take(&mut job.controls).or(asked.controls);
    job.kind = match (plan, asked.stage, std::mem::take(&mut job.kind)) {
        (Some(plan), _, _) => JobKind::GroupChat {
            plan: Box::new(plan),
        },
        (None, _, JobKind::GroupChat { .. }) => {
            return Err(Refusal::GroupChatRerun {
                bundle: job.bundle.clone(),
            });
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

/// What a key does by queueing a job of `kind`, as the policy judges it:
/// a direct tool run (`run_tool`), a verify (`verify_bundle`), else a
/// submit (an eval run too). The kind decides, not the way in, so a rerun of a tool run or a
/// verify needs what the first one needed.
pub fn action_of(kind: &JobKind) -> Action {
    match kind {
        JobKind::ToolRun { .. } => Action::RunTool,
        JobKind::Verify(_) => Action::VerifyBundle,
        // An eval run submits each case as a job of its key: a submit,
        // and each case is admitted (and counted) as one.
        JobKind::Bundle | JobKind::Stage { .. } | JobKind::GroupChat { .. } | JobKind::Eval(_) => {
            Action::SubmitJob
        }
    }
}

/// The plan of a group chat (which names the agents, endpoints and rounds
/// of a chat) comes only from `POST /api/group-chat`, which checks it; a
/// submitter cannot hand one to the host bundle as a variable.
fn no_plan_variable(loaded: &LoadedBundle, variables: &Map<String, Value>) -> Result<(), Refusal> {
    if loaded.bundle.raw.group_chat.is_none() || !variables.contains_key(PLAN_VARIABLE) {
        return Ok(());
    }
    Err(Refusal::PlanVariable {
        bundle: loaded.name().to_string(),
    })
}

/// Refuses `stage` unless it is a stage of the bundle's workflow that may
/// run alone.
fn only_stage(loaded: &LoadedBundle, stage: &str) -> Result<(), Refusal> {
    let Some(workflow) = &loaded.bundle.workflow else {
        return Err(Refusal::NotAWorkflow {
            bundle: loaded.name().to_string(),
        });
    };
    workflow
        .only_stage(stage)
        .map_err(|source| Refusal::OnlyStage {
            bundle: loaded.name().to_string(),
            source,
        })
}

/// Refuses `names` unless the agent bundle can offer those tools alone.
fn offered_tools(loaded: &LoadedBundle, names: &[String]) -> Result<(), Refusal> {
    let raw = &loaded.bundle.raw;
    let composite = match (raw.workflow.is_some(), raw.group_chat.is_some()) {
        (true, _) => Some("workflow"),
        (false, true) => Some("group-chat host"),
        (false, false) => None,
    };
    if let Some(kind) = composite {
        return Err(Refusal::ToolsOnComposite {
            bundle: loaded.name().to_string(),
            kind,
        });
    }
    let tools = loaded
        .tools
        .subset(names)
        .map_err(|source| Refusal::UnknownTools {
            bundle: loaded.name().to_string(),
            source,
        })?;
    loaded
        .shapes_for(&tools)
        .map(drop)
        .map_err(|source| Refusal::UnofferableTools { source })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_kind_not_the_way_in_decides_what_the_key_must_be_allowed() {
        let tool_run = JobKind::ToolRun {
            tool: "add".into(),
            arguments: "{}".into(),
        };
        let verify = JobKind::Verify(Box::default());
        let stage = JobKind::Stage { stage: "s".into() };
        assert_eq!(action_of(&tool_run), Action::RunTool);
        assert_eq!(action_of(&verify), Action::VerifyBundle);
        assert_eq!(action_of(&stage), Action::SubmitJob);
        assert_eq!(action_of(&JobKind::Bundle), Action::SubmitJob);
    }
}
