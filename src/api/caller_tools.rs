//! The caller's own tools on the OpenAI wires (Responses and chat
//! completions): a request's `tools` read and bounded, taken only by a
//! bundle that declares `caller_tools`; the calls of them a parked job
//! waits on; and the client's outputs of those calls, read back to resume
//! the same job. The daemon never runs these tools: a call of one parks
//! the job (`caller_call`) and the answer hands it to the client. A
//! stream of the job ends at that park ([`parks`], [`waiting_since`]),
//! and a streamed resume listens on the job from its last event before it
//! hands the outputs back ([`listen_from_last`]).

use serde_json::{Map, Value};

use super::AppState;
use super::auth::Caller;
use super::error::{ApiError, ErrorCode};
use super::feed::{Feed, job_feed};
use crate::approval::{CallerCall, ParkedKind};
use crate::events::{Event, EventEnvelope, JobStatus};
use crate::queue::{CallerOutput, Job, JobId, JobState, Resolution};
use crate::types::ToolSchema;

/// Events per read of the store when looking for a job's last one.
const PAGE: usize = 256;

/// The longest tool name (OpenAI's own bound).
const MAX_NAME: usize = 64;
/// The longest description, in bytes.
const MAX_DESCRIPTION: usize = 8 * 1024;
/// The largest parameters schema, in bytes of JSON.
const MAX_PARAMETERS: usize = 32 * 1024;
/// The largest output of one call, in bytes.
pub(super) const MAX_OUTPUT: usize = 1024 * 1024;

/// A refusal of the request naming the parameter `param` (on the OpenAI
/// wires a 400 of type `invalid_request_error`).
fn invalid(param: &str, message: impl Into<String>) -> ApiError {
    ApiError::field(ErrorCode::InvalidRequest, param, message)
}

/// A caller's function tool, as `tools` takes it on either wire: chat
/// completions nest its definition in `function`, Responses do not.
// Only its schema is used: [`read`] reads each tool as JSON.
#[derive(schemars::JsonSchema)]
#[serde(untagged)]
#[allow(dead_code)]
pub(super) enum CallerTool {
    Nested {
        #[serde(rename = "type")]
        kind: FunctionTool,
        function: ToolDefinition,
    },
    Flat {
        #[serde(rename = "type")]
        kind: FunctionTool,
        #[serde(flatten)]
        definition: ToolDefinition,
    },
}

/// `"function"`: the one kind of caller tool.
// Only its schema is used.
#[derive(schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
#[allow(dead_code)]
pub(super) enum FunctionTool {
    Function,
}

// Only its schema is used.
#[derive(schemars::JsonSchema)]
#[allow(dead_code)]
pub(super) struct ToolDefinition {
    /// Letters, digits, `_` and `-`; no two tools of a request, and no
    /// tool of the bundle, share it.
    #[schemars(length(min = 1, max = MAX_NAME), regex(pattern = r"^[A-Za-z0-9_-]+$"))]
    name: String,
    /// At most 8 KiB.
    description: Option<String>,
    /// The JSON Schema of the arguments (at most 32 KiB of JSON); left out,
    /// an object of no properties.
    parameters: Option<serde_json::Map<String, Value>>,
}

/// The function tools of a request's `tools` (either wire's shape:
/// Responses' flat `{type, name, description, parameters}` or chat
/// completions' `{type, function: {…}}`), each checked: a function, a name
/// of letters, digits, `_` and `-` (at most 64), no name twice, a
/// description and a parameters object within their bounds.
pub(super) fn read(rest: &Map<String, Value>) -> Result<Vec<ToolSchema>, ApiError> {
    let tools = match rest.get("tools") {
        None | Some(Value::Null) => return Ok(Vec::new()),
        Some(Value::Array(tools)) => tools,
        Some(other) => {
            return Err(invalid(
                "tools",
                format!("`tools` must be a list of function tools, not {other}"),
            ));
        }
    };
    let mut read: Vec<ToolSchema> = Vec::with_capacity(tools.len());
    for (i, tool) in tools.iter().enumerate() {
        let param = format!("tools[{i}]");
        let invalid = |message: String| invalid(&param, message);
        if tool["type"] != "function" {
            return Err(invalid(format!(
                "tools of type {} are not taken: only `function` tools, which the client runs",
                tool["type"]
            )));
        }
        let function = match tool.get("function") {
            Some(nested @ Value::Object(_)) => nested,
            _ => tool,
        };
        let name = function["name"].as_str().unwrap_or_default();
        let valid_name = !name.is_empty()
            && name.len() <= MAX_NAME
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
        if !valid_name {
            return Err(invalid(format!(
                "the name {} must be 1 to {MAX_NAME} letters, digits, `_` or `-`",
                function["name"]
            )));
        }
        if read.iter().any(|t| t.name == name) {
            return Err(invalid(format!("the name {name:?} is used twice")));
        }
        let description = match &function["description"] {
            Value::Null => String::new(),
            Value::String(text) if text.len() <= MAX_DESCRIPTION => text.clone(),
            Value::String(_) => {
                return Err(invalid(format!(
                    "the description of {name:?} is longer than {MAX_DESCRIPTION} bytes"
                )));
            }
            other => {
                return Err(invalid(format!(
                    "the description of {name:?} must be a string, not {other}"
                )));
            }
        };
        let parameters = match &function["parameters"] {
            Value::Null => serde_json::json!({"type": "object", "properties": {}}),
            parameters @ Value::Object(_) => parameters.clone(),
            other => {
                return Err(invalid(format!(
                    "the parameters of {name:?} must be a JSON Schema object, not {other}"
                )));
            }
        };
        if parameters.to_string().len() > MAX_PARAMETERS {
            return Err(invalid(format!(
                "the parameters schema of {name:?} is larger than {MAX_PARAMETERS} bytes"
            )));
        }
        read.push(ToolSchema {
            name: name.to_string(),
            description,
            parameters,
        });
    }
    Ok(read)
}

/// The caller's `tools` as bundle `bundle` takes them: only when it
/// declares `caller_tools`, at most its `max`, and none named as one of
/// its own tools.
pub(super) fn admit(
    state: &AppState,
    bundle: &str,
    tools: Vec<ToolSchema>,
) -> Result<Vec<ToolSchema>, ApiError> {
    let Some(first) = tools.first() else {
        return Ok(tools);
    };
    let loaded = crate::admit::loaded_bundle(&state.registry.snapshot(), bundle, "model")
        .map_err(ApiError::from)?;
    let Some(max) = loaded.bundle.caller_tools_max() else {
        return Err(invalid(
            "tools",
            format!(
                "caller tools are not taken by bundle {bundle} (tools[0]: {}): it runs its own tools, and returns them as calls it ran; leave `tools` out, or declare `caller_tools` in the bundle",
                first.name
            ),
        ));
    };
    if tools.len() > max {
        return Err(invalid(
            "tools",
            format!(
                "{} tools sent, and bundle {bundle} takes at most {max} (its caller_tools.max)",
                tools.len()
            ),
        ));
    }
    if let Some((i, clash)) = tools
        .iter()
        .enumerate()
        .find(|(_, t)| loaded.bundle.has_tool(&t.name) || loaded.tools.tool(&t.name).is_some())
    {
        return Err(invalid(
            &format!("tools[{i}]"),
            format!(
                "the tool {:?} has the name of a tool of bundle {bundle}: rename it",
                clash.name
            ),
        ));
    }
    Ok(tools)
}

/// The caller's calls `job` is parked on, if it waits for the client.
pub(super) fn awaited(job: &Job) -> Option<&[CallerCall]> {
    let pending = job.pending_call.as_ref()?;
    (job.state == JobState::NeedsAttention && pending.kind == ParkedKind::CallerCall)
        .then_some(pending.caller_calls.as_slice())
}

/// Checks a client's `outputs` against the calls `job` waits on: one for
/// each, no other (the queue checks again in the write that takes them).
/// `param` names where they came from.
pub(super) fn check_outputs(
    job: &Job,
    outputs: &[CallerOutput],
    param: &str,
) -> Result<(), ApiError> {
    let Some(awaited) = awaited(job) else {
        return Err(invalid(
            param,
            format!(
                "outputs of caller tools were sent, and job {} waits for none (it is {}): send them only in answer to the calls a response handed over",
                job.id, job.state
            ),
        ));
    };
    let unknown: Vec<&str> = outputs
        .iter()
        .map(|o| o.call_id.as_str())
        .filter(|id| !awaited.iter().any(|c| c.call_id == *id))
        .collect();
    let missing: Vec<&str> = awaited
        .iter()
        .map(|c| c.call_id.as_str())
        .filter(|id| !outputs.iter().any(|o| o.call_id == *id))
        .collect();
    if !unknown.is_empty() || !missing.is_empty() {
        return Err(invalid(
            param,
            format!(
                "the outputs do not answer the calls job {} waits on: unknown call ids [{}], missing call ids [{}]; send one output for each call handed over",
                job.id,
                unknown.join(", "),
                missing.join(", ")
            ),
        ));
    }
    if let Some(big) = outputs.iter().find(|o| o.output.len() > MAX_OUTPUT) {
        return Err(invalid(
            param,
            format!(
                "the output of call {} is larger than {MAX_OUTPUT} bytes",
                big.call_id
            ),
        ));
    }
    Ok(())
}

/// Hands the client's `outputs` to job `id`: journaled as the calls'
/// results in the one write that queues it again (a second request with
/// the same outputs finds it no longer waiting). Answers the job as that
/// write left it.
pub(super) async fn hand_back(
    state: &AppState,
    id: &JobId,
    outputs: Vec<CallerOutput>,
) -> Result<Job, ApiError> {
    let resolution = Resolution::CallerOutputs { outputs };
    let changed = state.queue.resolve(id, resolution).await?;
    Ok(super::job_actions::settled(state, changed))
}

/// Whether stored `event` of job `job_id`'s feed parks the job's own run in
/// `needs_attention` (its attempt's final `JobState`, written with the
/// park): where a stream of the job looks whether it now waits for the
/// client ([`waiting_since`]).
pub(super) fn parks(job_id: &str, event: &EventEnvelope) -> bool {
    event.run_id == job_id
        && event.parent.is_none()
        && matches!(
            event.event,
            Event::JobState {
                state: JobStatus::NeedsAttention,
                ..
            }
        )
}

/// Job `id`, if it waits on the caller's calls since its stored event
/// `seq` (a park, see [`parks`]): parked on them now, with nothing stored
/// after that event. A park the client answered since is followed by the
/// resumed attempt's events, so a stream that replays the job's log ends
/// only at the park the job is in.
pub(super) async fn waiting_since(
    state: &AppState,
    id: &JobId,
    seq: u64,
) -> Result<Option<Job>, ApiError> {
    let job = state
        .queue
        .get(id)
        .await?
        .ok_or_else(|| ApiError::new(ErrorCode::NotFound, format!("job {id} vanished")))?;
    if awaited(&job).is_none() {
        return Ok(None);
    }
    let later = state.queue.events_after(id, seq, 1).await?;
    Ok(later.is_empty().then_some(job))
}

/// The sequence number of job `id`'s last stored event (0: none).
pub(super) async fn last_event(state: &AppState, id: &JobId) -> Result<u64, ApiError> {
    let mut after = 0;
    loop {
        let page = state.queue.events_after(id, after, PAGE).await?;
        match page.last() {
            Some(last) => after = last.seq,
            None => return Ok(after),
        }
    }
}

/// The feed of job `id` from after its last stored event, and that
/// event's number: a streamed resume opens it before it hands the
/// client's outputs back, so nothing the resumed run does is missed.
/// Counted against the caller's streams.
pub(super) async fn listen_from_last(
    state: &AppState,
    caller: &Caller,
    id: &JobId,
) -> Result<(Feed, u64), ApiError> {
    let permit = state.streams.acquire(caller.name())?;
    let after = last_event(state, id).await?;
    let feed = job_feed(state.clone(), id.clone(), after, false, permit);
    Ok((Box::pin(feed), after))
}

/// An output's text: a string, or content parts whose texts are joined
/// (both wires allow either).
pub(super) fn output_text(output: &Value) -> Option<String> {
    match output {
        Value::String(text) => Some(text.clone()),
        Value::Array(parts) => Some(
            parts
                .iter()
                .filter_map(|part| part["text"].as_str())
                .collect(),
        ),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn rest(tools: Value) -> Map<String, Value> {
        let mut rest = Map::new();
        rest.insert("tools".into(), tools);
        rest
    }

    #[test]
    fn both_wires_tools_read_into_one_shape() {
        let tools = read(&rest(json!([
            {"type": "function", "name": "shout", "description": "d",
             "parameters": {"type": "object"}},
            {"type": "function", "function": {"name": "add"}},
        ])))
        .unwrap();
        assert_eq!(tools[0].name, "shout");
        assert_eq!(tools[1].name, "add");
        assert_eq!(tools[1].parameters["type"], "object");
    }

    #[test]
    fn bad_tools_are_refused_naming_the_tool() {
        for (tools, said) in [
            (json!([{"type": "web_search"}]), "web_search"),
            (json!([{"type": "function", "name": "a b"}]), "letters"),
            (
                json!([{"type": "function", "name": "a"}, {"type": "function", "name": "a"}]),
                "twice",
            ),
            (
                json!([{"type": "function", "name": "a", "parameters": "x"}]),
                "JSON Schema",
            ),
        ] {
            let err = read(&rest(tools)).unwrap_err();
            assert_eq!(err.code, ErrorCode::InvalidRequest);
            let param = err.field.clone().unwrap_or_default();
            assert!(param.starts_with("tools["), "{param}: {}", err.message);
            assert!(err.message.contains(said), "{}", err.message);
        }
    }
}
