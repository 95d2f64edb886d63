//! `SendMessage`, `SendStreamingMessage` and `CancelTask`: a message starts
//! a job (through admission: its text is the input, its data parts'
//! fields the variables, its `contextId` the conversation, its `messageId`
//! the idempotency key, its `taskPushNotificationConfig` a push config
//! written with the job), or, sent to a task that awaits approval, decides
//! the parked call (through the one decision path, `approvals::take`).

use crate::access::policy::{Action, Resource};
use std::time::Duration;

use a2a::{A2AError, CancelTaskRequest, Message, PartContent, SendMessageRequest};
use axum::response::Response;
use serde_json::{Map, Value, json};

use super::super::admission::{Submission, admit};
use super::super::approvals;
use super::super::error::ApiError;
use super::super::feed::job_feed;
use super::super::feed::wait_finished;
use super::super::job_actions::settled;
use super::task::{self, View, context_of};
use super::{Call, RpcError, params, push, stream};

use crate::approval::{Decision, ParkedCall, ParkedKind, Verdict};
use crate::queue::{Job, JobId, JobState, NewJob, PushConfig};

/// How long `CancelTask` waits for a running job to stop before it answers
/// with the task as it is (the cancel goes on; `GetTask` shows the end).
const CANCEL_WAIT: Duration = Duration::from_secs(5);

/// `SendMessage`: the task once it ends or waits for input (at once with
/// `configuration.returnImmediately`).
pub async fn send(call: &Call, raw: Value) -> Result<Value, RpcError> {
    let request: SendMessageRequest = params("SendMessage", raw)?;
    let config = request.configuration.as_ref();
    let immediately = config.and_then(|c| c.return_immediately).unwrap_or(false);
    let view = View {
        history_length: task::history_length(config.and_then(|c| c.history_length))?,
        artifacts: true,
    };
    let job = match task_of(&request.message) {
        Some(task) => answer(call, task, &request).await?.0,
        None => submit(call, &request, None).await?,
    };
    let job = match immediately {
        true => job,
        false => wait_finished(&call.state, &job.id).await?,
    };
    Ok(json!({"task": task::task(&job, view)}))
}

/// `SendStreamingMessage`: the task, then its updates as they happen (see
/// [`stream`]). The job's feed listens before the job is queued, so its
/// first tokens already stream.
pub async fn send_streaming(call: &Call, raw: Value) -> Result<Response, RpcError> {
    let request: SendMessageRequest = params("SendStreamingMessage", raw)?;
    task::history_length(
        request
            .configuration
            .as_ref()
            .and_then(|c| c.history_length),
    )?;
    let state = &call.state;
    let permit = state
        .streams
        .acquire(call.caller.name())
        .map_err(ApiError::from)?;
    if let Some(task) = task_of(&request.message) {
        let (job, after) = answer(call, task, &request).await?;
        let feed = job_feed(state.clone(), job.id.clone(), after, false, permit);
        return Ok(stream::respond(call, job, feed));
    }
    let id = JobId::new();
    let feed = job_feed(state.clone(), id.clone(), 0, false, permit);
    let job = submit(call, &request, Some(id.clone())).await?;
    if job.id == id {
        return Ok(stream::respond(call, job, feed));
    }
    // A repeated message (its id named an earlier job): follow that one.
    drop(feed);
    let permit = state
        .streams
        .acquire(call.caller.name())
        .map_err(ApiError::from)?;
    let feed = job_feed(state.clone(), job.id.clone(), 0, false, permit);
    Ok(stream::respond(call, job, feed))
}

/// The task a message is for (a client that leaves the field empty, as
/// proto3 JSON may, names none).
fn task_of(message: &Message) -> Option<&str> {
    message.task_id.as_deref().filter(|t| !t.is_empty())
}

/// Queues the job a message asks for, as `id` when given.
async fn submit(
    call: &Call,
    request: &SendMessageRequest,
    id: Option<JobId>,
) -> Result<Job, RpcError> {
    let message = &request.message;
    let (bundle, field) = bundle_of(call, request)?;
    let push = push_config(call, request)?;
    let (input, variables) = content(message)?;
    let conversation = match message.context_id.as_ref().filter(|c| !c.is_empty()) {
        Some(context) => {
            super::super::conversations::check_id(context)?;
            context.clone()
        }
        None => a2a::new_context_id(),
    };
    // The metadata that carries a traceparent carries its tracestate.
    let body_trace = [&message.metadata, &request.metadata]
        .into_iter()
        .flatten()
        .find(|m| m.get("traceparent").is_some_and(Value::is_string));
    let body_field = |name| body_trace.and_then(|m| m.get(name)).and_then(Value::as_str);
    let job = NewJob {
        id,
        bundle,
        input,
        variables,
        conversation_id: Some(conversation),
        trace: call
            .trace
            .or_body(body_field("traceparent"), body_field("tracestate")),
        idempotency_key: (!message.message_id.trim().is_empty())
            .then(|| format!("a2a:{}", message.message_id)),
        push: push.into_iter().collect(),
        push_caps: Some(push::caps(&call.state)),
        ..Default::default()
    };
    let (job, _) = admit(&call.state, &call.caller, Submission::new(job, field)).await?;
    Ok(job)
}

/// The push config a message's configuration asks for, checked.
fn push_config(call: &Call, request: &SendMessageRequest) -> Result<Option<PushConfig>, RpcError> {
    request
        .configuration
        .as_ref()
        .and_then(|c| c.task_push_notification_config.as_ref())
        .map(|config| push::accepted(&call.state, config))
        .transpose()
}

/// The bundle a message is for: the interface's, else the request's or
/// the message's `metadata.bundle`, else the key's only bundle.
fn bundle_of(
    call: &Call,
    request: &SendMessageRequest,
) -> Result<(String, &'static str), RpcError> {
    let named = [&request.metadata, &request.message.metadata]
        .into_iter()
        .flatten()
        .find_map(|m| m.get("bundle").and_then(Value::as_str));
    match (&call.bundle, named) {
        (Some(path), Some(named)) if path != named => Err(A2AError::invalid_params(format!(
            "metadata.bundle {named:?} is not this interface's bundle {path:?}: send to /a2a/{named}, or leave metadata.bundle out"
        ))
        .into()),
        (Some(path), _) => Ok((path.clone(), "bundle")),
        (None, Some(named)) => Ok((named.to_string(), "metadata.bundle")),
        (None, None) => {
            let snapshot = call.state.registry.snapshot();
            let usable: Vec<&str> = snapshot
                .loaded()
                .map(|b| b.name())
                .filter(|b| call.caller.allows(Action::SubmitJob, &Resource::bundle(b)))
                .collect();
            match usable.as_slice() {
                [only] => Ok((only.to_string(), "metadata.bundle")),
                _ => Err(A2AError::invalid_params(format!(
                    "which bundle? name it in the message's metadata.bundle (one of: {}), or send to /a2a/<bundle>",
                    usable.join(", ")
                ))
                .into()),
            }
        }
    }
}

/// A message's text parts (the input, one per line) and its data parts'
/// fields (the variables); files are refused.
fn content(message: &Message) -> Result<(String, Map<String, Value>), RpcError> {
    let mut text = Vec::new();
    let mut variables = Map::new();
    for (i, part) in message.parts.iter().enumerate() {
        match &part.content {
            PartContent::Text(t) => text.push(t.as_str()),
            PartContent::Data(Value::Object(fields)) => variables.extend(fields.clone()),
            PartContent::Data(_) => {
                return Err(A2AError::invalid_params(format!(
                    "part {i} of message {:?} is data but not an object: its fields are the bundle's variables",
                    message.message_id
                ))
                .into());
            }
            PartContent::Raw(_) | PartContent::Url(_) => {
                return Err(A2AError::new(
                    a2a::error_code::CONTENT_TYPE_NOT_SUPPORTED,
                    format!(
                        "part {i} of message {:?} is a file: this agent takes text parts (the input) and data parts (variables)",
                        message.message_id
                    ),
                )
                .into());
            }
        }
    }
    if text.is_empty() {
        return Err(A2AError::invalid_params(format!(
            "message {:?} has no text part: send the job's input as text",
            message.message_id
        ))
        .into());
    }
    Ok((text.join("\n"), variables))
}

/// A message to an existing task: the decision it waits for. Returns the
/// job as the decision left it and the last event before it (where a
/// stream of what follows starts).
async fn answer(
    call: &Call,
    task_id: &str,
    request: &SendMessageRequest,
) -> Result<(Job, u64), RpcError> {
    let message = &request.message;
    let state = &call.state;
    let id = JobId::from(task_id.to_string());
    let job = call
        .caller
        .job(Action::ReadJob, &id, state.queue.get(&id).await?)?;
    let context = context_of(&job);
    if message
        .context_id
        .as_ref()
        .is_some_and(|c| !c.is_empty() && *c != context)
    {
        return Err(A2AError::invalid_params(format!(
            "task {id} belongs to context {context:?}, not {:?}",
            message.context_id.as_deref().unwrap_or_default()
        ))
        .into());
    }
    match (job.state, &job.pending_call) {
        (JobState::AwaitingApproval, Some(parked)) if parked.kind == ParkedKind::Approval => {
            let decision = decision_of(&job, parked, message)?;
            // A config sent with the answer hears of what the answer starts.
            if let Some(config) = push_config(call, request)? {
                state
                    .queue
                    .put_push_config(&id, config, push::caps(state))
                    .await?;
            }
            let after = state.queue.last_seq(&id).await?;
            let job = approvals::take(state, &call.caller, &id, &parked.call_id, decision).await?;
            Ok((job, after))
        }
        (done, _) if done.is_terminal() => Err(A2AError::unsupported_operation(format!(
            "task {id} has ended ({done}) and takes no more messages; send a new message with contextId {context:?} to continue the conversation"
        ))
        .into()),
        (now, _) => Err(A2AError::unsupported_operation(format!(
            "task {id} is {now}: a message to a task is taken only while it awaits input (TASK_STATE_INPUT_REQUIRED)"
        ))
        .into()),
    }
}

/// The decision a message carries on the call `parked`: a data part
/// `{"decision": …}` (the approvals API's body), or the text `approve` /
/// `deny: <reason>`. Without a digest it decides the call the task's
/// status shows (the only one pending).
fn decision_of(job: &Job, parked: &ParkedCall, message: &Message) -> Result<Decision, RpcError> {
    let asks = || {
        format!(
            "task {} awaits a decision on tool `{}` (call {}): answer `approve` or `deny: <reason>`, or a data part {{\"decision\": \"approve\" | \"deny\" | \"edit\", …}}",
            job.id, parked.tool, parked.call_id
        )
    };
    let data = message.parts.iter().find_map(|p| match &p.content {
        PartContent::Data(value) if value.get("decision").is_some() => Some(value),
        _ => None,
    });
    if let Some(value) = data {
        let mut decision: Decision = serde_json::from_value(value.clone())
            .map_err(|e| A2AError::invalid_params(format!("{} ({e})", asks())))?;
        decision
            .digest
            .get_or_insert_with(|| parked.digest().to_string());
        return Ok(decision);
    }
    let text: Vec<&str> = message.parts.iter().filter_map(|p| p.as_text()).collect();
    let text = text.join(" ");
    let text = text.trim();
    let split = text
        .find(|c: char| c == ':' || c.is_whitespace())
        .unwrap_or(text.len());
    let (word, rest) = text.split_at(split);
    let rest = rest.trim_start_matches(':').trim();
    let verdict = match word.to_ascii_lowercase().as_str() {
        "approve" | "approved" | "yes" | "ok" => Verdict::Approve,
        "deny" | "denied" | "no" | "reject" => Verdict::Deny {
            reason: (!rest.is_empty()).then(|| rest.to_string()),
        },
        _ => {
            return Err(A2AError::invalid_params(format!("{}, not {text:?}", asks())).into());
        }
    };
    Ok(Decision {
        verdict,
        digest: Some(parked.digest().to_string()),
    })
}

/// `CancelTask`: cancels the job (a running one stops at its next step)
/// and answers with the task once it has stopped, or after
/// [`CANCEL_WAIT`] as it is then.
pub async fn cancel(call: &Call, raw: Value) -> Result<Value, RpcError> {
    call.caller.require(Action::CancelJob)?;
    let request: CancelTaskRequest = params("CancelTask", raw)?;
    let state = &call.state;
    let id = JobId::from(request.id);
    let job = call
        .caller
        .job(Action::CancelJob, &id, state.queue.get(&id).await?)?;
    if job.state.is_terminal() {
        return Err(A2AError::new(
            a2a::error_code::TASK_NOT_CANCELABLE,
            format!(
                "task {id} has already ended ({}); nothing to cancel",
                job.state
            ),
        )
        .into());
    }
    let changed = state
        .queue
        .cancel(&id)
        .await?
        .ok_or_else(|| ApiError::job_not_found(&id))?;
    let mut job = settled(state, changed);
    if !job.state.is_terminal()
        && let Ok(stopped) = tokio::time::timeout(CANCEL_WAIT, wait_finished(state, &id)).await
    {
        job = stopped?;
    }
    let view = View {
        history_length: None,
        artifacts: true,
    };
    Ok(json!(task::task(&job, view)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use a2a::{Part, Role};

    fn message(parts: Vec<Part>) -> Message {
        Message::new(Role::User, parts)
    }

    fn parked() -> (Job, ParkedCall) {
        let call: ParkedCall = serde_json::from_value(json!({
            "kind": "approval", "scope": "", "turn": 1, "position": 0, "call_id": "c1",
            "tool": "pay", "arguments": {"amount": 5}, "effect": "unsafe",
            "idempotency_key": "k", "digest": "sha256:abc", "parameters": {}
        }))
        .unwrap();
        let job: Job = serde_json::from_value(json!({
            "id": "j1", "bundle": "b", "bundle_version": null, "bundle_digest": null,
            "input": "hi", "variables": {}, "priority": 0, "state": "awaiting_approval",
            "attempts": 1, "max_attempts": 3, "idempotency_key": null, "traceparent": null,
            "cancel_requested": false, "result": null, "error": null, "pending_call": null,
            "run_at": "", "created_at": "", "updated_at": "", "started_at": null,
            "finished_at": null, "lease_expires_at": null
        }))
        .unwrap();
        (job, call)
    }

    #[test]
    fn text_and_data_answers_are_decisions_on_the_parked_call() {
        let (job, call) = parked();
        let approve = decision_of(&job, &call, &message(vec![Part::text(" Approve ")])).unwrap();
        assert_eq!(approve.verdict, Verdict::Approve);
        assert_eq!(approve.digest.as_deref(), Some("sha256:abc"));
        let deny = decision_of(&job, &call, &message(vec![Part::text("deny: too much")])).unwrap();
        assert_eq!(
            deny.verdict,
            Verdict::Deny {
                reason: Some("too much".into())
            }
        );
        let edit = json!({"decision": "edit", "arguments": {"amount": 1}});
        let edited = decision_of(&job, &call, &message(vec![Part::data(edit)])).unwrap();
        assert_eq!(edited.verdict.kind(), "edit");
        let err = decision_of(&job, &call, &message(vec![Part::text("maybe")])).unwrap_err();
        let RpcError::Protocol(e) = err else {
            panic!("a protocol error")
        };
        assert!(
            e.message.contains("`pay`") && e.message.contains("\"maybe\""),
            "{}",
            e.message
        );
    }

    #[test]
    fn text_is_the_input_and_data_the_variables() {
        let (input, variables) = content(&message(vec![
            Part::text("line one"),
            Part::data(json!({"city": "Oslo"})),
            Part::text("line two"),
        ]))
        .unwrap();
        assert_eq!(input, "line one\nline two");
        assert_eq!(variables["city"], "Oslo");
        assert!(content(&message(vec![Part::data(json!({"a": 1}))])).is_err());
        assert!(content(&message(vec![Part::url("http://x/y")])).is_err());
    }
}
