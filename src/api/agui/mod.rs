//! AG-UI 1.0 over the job machinery: `POST /v1/agui/{bundle}` takes a
//! `RunAgentInput` and answers an SSE stream of AG-UI events told from one
//! job's feed — `RUN_STARTED`, `TEXT_MESSAGE_START`/`CONTENT`/`END` (the
//! job's answer stream, as chat completions'), `TOOL_CALL_START`/`ARGS`/
//! `END`/`RESULT` for its own tool calls, then `RUN_FINISHED` (or
//! `RUN_ERROR`). A call that waits for approval ends the run with the
//! `interrupt` outcome; the next run's `resume[]` decides it (through the
//! one decision path, `approvals::take`) and continues the same job.
//!
//! A new run is a job admitted like every other; an interrupt's id names
//! the job, the digest of the arguments shown and the call
//! (`<job>/<digest>/<call>`), so a resume is bound to what was shown.

mod events;

use aide::transform::TransformOperation;
use axum::extract::State;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::AppState;
use super::admission::{Submission, admit, known_bundle};
use super::approvals::interrupt_parts;
use super::auth::Caller;
use super::body::{JsonBody, Path};
use super::chat_input::chat_of;
use super::document::{EventStream, QUOTA, answers};
use super::error::{ApiError, ErrorCode};
use super::feed::job_feed;
use super::trace_context::CallerTrace;
use crate::access::policy::Action;
use crate::approval::{Decision, Verdict};
use crate::queue::{Job, NewJob};
use events::{AguiStreamEvent, Run};

/// AG-UI's `RunAgentInput`: the parts the daemon reads; the rest (tools,
/// context, state) is accepted and left to the bundle.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "RunAgentInput", transform = needs_input)]
pub struct RunInput {
    /// The conversation: a usable conversation id (1 to 128 letters,
    /// digits, `-`, `_`, `.`, `:`) continues the conversation of that id.
    thread_id: String,
    /// Echoed in `RUN_STARTED` and `RUN_FINISHED`.
    run_id: String,
    /// The chat; the last `user` message with text is the job's input
    /// (`developer`/`system`, `user` and `assistant` messages with text
    /// are kept, others dropped).
    #[serde(default)]
    messages: Vec<Value>,
    /// Decisions on the interrupts of the last `RUN_FINISHED`: a run with
    /// them continues that job instead of starting one.
    #[serde(default)]
    resume: Vec<ResumeEntry>,
    /// Passed through; a `traceparent` in it continues the caller's trace
    /// (the `traceparent` header wins).
    #[serde(default)]
    forwarded_props: Option<Value>,
    #[serde(flatten)]
    _rest: Map<String, Value>,
}

/// A run has something to do, as the API document says: a `user` message
/// with text (what [`chat_of`] takes as the job's input), or decisions
/// that resume a job.
fn needs_input(schema: &mut schemars::Schema) {
    let text = json!({"type": "string", "minLength": 1});
    let text_part = json!({
        "type": "object",
        "properties": {"type": {"const": "text"}, "text": text},
        "required": ["type", "text"]
    });
    let user = json!({
        "type": "object",
        "properties": {
            "role": {"const": "user"},
            "content": {"anyOf": [text, {"type": "array", "contains": text_part}]}
        },
        "required": ["role", "content"]
    });
    schema.insert(
        "anyOf".into(),
        json!([
            {"properties": {"messages": {"contains": user}}, "required": ["messages"]},
            {"properties": {"resume": {"minItems": 1}}, "required": ["resume"]}
        ]),
    );
}

/// A decision on one interrupt.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
#[schemars(rename = "AguiResume", transform = decided_by_payload)]
struct ResumeEntry {
    /// The interrupt's `id` (`<job>/<digest>/<call>`).
    #[schemars(regex(pattern = INTERRUPT_PATTERN))]
    interrupt_id: String,
    /// `cancelled` denies the call; `resolved` decides by `payload`.
    #[schemars(extend("enum" = ["resolved", "cancelled"]))]
    status: String,
    /// `true`/`{"approved": true}` approves (with `arguments`: runs those),
    /// `false`/`{"approved": false, "reason"?}` denies.
    #[serde(default)]
    payload: Option<Value>,
}

/// An interrupt's id as [`interrupt_parts`] reads it.
const INTERRUPT_PATTERN: &str = "^[^/]+/[^/]+/[\\s\\S]+$";

/// A `resolved` entry decides by its payload ([`verdict`]): `true`,
/// `false`, or an object with a boolean `approved`.
fn decided_by_payload(schema: &mut schemars::Schema) {
    schema.insert(
        "if".into(),
        json!({"properties": {"status": {"const": "resolved"}}, "required": ["status"]}),
    );
    schema.insert(
        "then".into(),
        json!({
            "properties": {"payload": {"anyOf": [
                {"type": "boolean"},
                {"type": "object", "properties": {"approved": {"type": "boolean"}}, "required": ["approved"]}
            ]}},
            "required": ["payload"]
        }),
    );
}

/// `POST /v1/agui/{bundle}` in the API document.
pub(super) fn run_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "AG-UI 1.0: runs the bundle on a RunAgentInput; AG-UI events as SSE; approvals are \
             interrupts answered by the next run's `resume[]` (docs/api.md)",
        )
        .response_with::<200, EventStream<AguiStreamEvent>, _>(|r| {
            r.description(
                "AG-UI events, one `data:` each (`RUN_STARTED` … `RUN_FINISHED` or `RUN_ERROR`)",
            )
        });
    answers(
        op,
        &[
            (
                403,
                "The key lacks the route's scope or the bundle, or a resume decides a call the \
                 key may not decide (it lacks `approve`, or submitted a job whose tool has \
                 `approval.by: others`)",
            ),
            (
                404,
                "A resume names a job the key may not see or that does not exist",
            ),
            (
                409,
                "A resume names a call that no longer waits for a decision, or arguments that \
                 changed since the interrupt",
            ),
            (
                422,
                "The body is not what the route reads, the bundle is not loaded, no `user` \
                 message has text, or a resume entry is not a decision of this daemon's \
                 interrupts (or answers two jobs); `field` names it",
            ),
            QUOTA,
            (
                503,
                "The key's event streams (server.max_event_streams) are all open, or the queue \
                 cannot take the request now; Retry-After says when to try again",
            ),
        ],
    )
}

/// `POST /v1/agui/{bundle}`.
pub async fn run(
    State(state): State<AppState>,
    caller: Caller,
    Path(bundle): Path<String>,
    trace: CallerTrace,
    JsonBody(input): JsonBody<RunInput>,
) -> Result<EventStream<AguiStreamEvent>, ApiError> {
    // Before anything is decided or queued: a refused stream costs nothing.
    let permit = state.streams.acquire(caller.name())?;
    let (job, after) = match input.resume.is_empty() {
        true => start(&state, &caller, &bundle, &trace, &input)
            .await
            .map_err(|e| e.bundle_in_path("bundle"))?,
        false => resume(&state, &caller, &input.resume).await?,
    };
    let feed = job_feed(state.clone(), job.id.clone(), after, false, permit);
    let answer = super::answer::answer_stream(&state, &job);
    let run = Run::new(&input.thread_id, &input.run_id, &job, answer);
    Ok(EventStream::new(events::events(run, feed)))
}

/// A new run: its job, admitted, followed from its start.
async fn start(
    state: &AppState,
    caller: &Caller,
    bundle: &str,
    trace: &CallerTrace,
    input: &RunInput,
) -> Result<(Job, u64), ApiError> {
    caller.on_bundle(Action::SubmitJob, bundle, "bundle")?;
    known_bundle(state, bundle, "bundle")?;
    let (text, messages) = chat_of(&input.messages, "messages")?;
    let conversation_id = super::conversations::check_id(&input.thread_id)
        .is_ok()
        .then(|| input.thread_id.clone());
    let metadata = input.forwarded_props.as_ref();
    let new_job = NewJob {
        bundle: bundle.to_string(),
        input: text,
        messages,
        conversation_id,
        trace: trace.or_metadata(metadata),
        ..Default::default()
    };
    let (job, _) = admit(state, caller, Submission::new(new_job, "bundle")).await?;
    Ok((job, 0))
}

/// A resume: each entry decides the call its interrupt names; the run
/// follows the job from before the decisions.
async fn resume(
    state: &AppState,
    caller: &Caller,
    entries: &[ResumeEntry],
) -> Result<(Job, u64), ApiError> {
    let mut resumed = None;
    for (i, entry) in entries.iter().enumerate() {
        let field = format!("resume[{i}]");
        let (job_id, digest, call) = interrupt_parts(&entry.interrupt_id).ok_or_else(|| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                format!("{field}.interruptId"),
                format!(
                    "{:?} is not an interrupt of this daemon (`<job>/<digest>/<call>`); answer the ids of the last RUN_FINISHED",
                    entry.interrupt_id
                ),
            )
        })?;
        let verdict = verdict(entry).map_err(|why| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                format!("{field}.{}", why.field()),
                why.to_string(),
            )
        })?;
        match &resumed {
            None => resumed = Some((job_id.clone(), state.queue.last_seq(&job_id).await?)),
            Some((first, _)) if *first != job_id => {
                return Err(ApiError::field(
                    ErrorCode::InvalidRequest,
                    format!("{field}.interruptId"),
                    format!(
                        "resume[0] answers job {first} and {field} job {job_id}: a run continues one job; resume them in separate runs"
                    ),
                ));
            }
            Some(_) => {}
        }
        let decision = Decision {
            verdict,
            digest: Some(digest.to_string()),
        };
        super::approvals::take(state, caller, &job_id, call, decision).await?;
    }
    let (id, after) = resumed.ok_or_else(|| ApiError::internal("a resume without entries"))?;
    let job = caller.stored_job(state, Action::ReadJob, &id).await?;
    Ok((job, after))
}

/// Why a resume entry decides nothing, naming the entry's field at fault.
#[derive(Debug, thiserror::Error)]
enum ResumeError {
    #[error("status {0:?}: use `resolved` or `cancelled`")]
    Status(String),
    #[error(
        "a resolved approval's payload is `{{\"approved\": true|false, \"reason\"?, \"arguments\"?}}` (or `true`/`false`)"
    )]
    Payload,
}

impl ResumeError {
    /// The resume entry's field the error is about.
    fn field(&self) -> &'static str {
        match self {
            ResumeError::Status(_) => "status",
            ResumeError::Payload => "payload",
        }
    }
}

/// What a resume entry decides: `cancelled` denies; `resolved` with
/// `true`/`{"approved": true}` approves (with `arguments`: runs those),
/// `false`/`{"approved": false, "reason"}` denies.
fn verdict(entry: &ResumeEntry) -> Result<Verdict, ResumeError> {
    if entry.status == "cancelled" {
        return Ok(Verdict::Deny {
            reason: Some("the AG-UI client cancelled the interrupt".into()),
        });
    }
    if entry.status != "resolved" {
        return Err(ResumeError::Status(entry.status.clone()));
    }
    let payload = entry.payload.clone().unwrap_or(Value::Null);
    let approved = payload.as_bool().or_else(|| payload["approved"].as_bool());
    match approved {
        Some(true) => Ok(match payload.get("arguments") {
            Some(arguments) => Verdict::Edit {
                arguments: arguments.clone(),
            },
            None => Verdict::Approve,
        }),
        Some(false) => Ok(Verdict::Deny {
            reason: payload["reason"].as_str().map(str::to_string),
        }),
        None => Err(ResumeError::Payload),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_interrupt_pattern_says_what_interrupt_parts_takes() {
        let pattern = regex::Regex::new(INTERRUPT_PATTERN).unwrap();
        for id in [
            "j/d/c",
            "j/d/c/more",
            "j/d/\n",
            "",
            "j/d",
            "j//c",
            "/d/c",
            "j/d/",
        ] {
            assert_eq!(
                pattern.is_match(id),
                interrupt_parts(id).is_some(),
                "{id:?}"
            );
        }
    }

    fn entry(status: &str, payload: Value) -> ResumeEntry {
        ResumeEntry {
            interrupt_id: "j/sha256:ab/c".into(),
            status: status.into(),
            payload: Some(payload),
        }
    }

    #[test]
    fn interrupt_ids_carry_job_digest_and_call() {
        let (job, digest, call) = interrupt_parts("j1/sha256:ab/call/with/slashes").unwrap();
        assert_eq!(
            (job.as_str(), digest, call),
            ("j1", "sha256:ab", "call/with/slashes")
        );
        assert!(interrupt_parts("j1/sha256:ab").is_none());
        assert!(interrupt_parts("//x").is_none());
    }

    #[test]
    fn resume_entries_decide() {
        assert_eq!(
            verdict(&entry("resolved", json!(true))).unwrap(),
            Verdict::Approve
        );
        assert_eq!(
            verdict(&entry(
                "resolved",
                json!({"approved": false, "reason": "no"})
            ))
            .unwrap(),
            Verdict::Deny {
                reason: Some("no".into())
            }
        );
        assert_eq!(
            verdict(&entry(
                "resolved",
                json!({"approved": true, "arguments": {"a": 1}})
            ))
            .unwrap(),
            Verdict::Edit {
                arguments: json!({"a": 1})
            }
        );
        assert!(matches!(
            verdict(&entry("cancelled", Value::Null)).unwrap(),
            Verdict::Deny { .. }
        ));
        assert!(verdict(&entry("resolved", json!({"ok": 1}))).is_err());
        assert!(verdict(&entry("maybe", json!(true))).is_err());
    }
}
