//! The thread streaming protocol's commands, the Agent Protocol's
//! `POST /threads/{id}/commands`: `run.start` (a run on the thread, made
//! first when the thread is new, as a run request with `if_not_exists:
//! create` would), `input.respond` (the answer to the thread's interrupt,
//! through the one decision path: `resume`), `state.get` and
//! `state.listCheckpoints` (the thread's state and checkpoints, as
//! `history` serves them). What the command asks that cannot be done is the
//! protocol's error answer (`invalid_argument`, `no_such_interrupt`,
//! `no_such_checkpoint`, `not_supported`, `unknown_command`); an unknown
//! thread, a refused key or a full quota stay HTTP's answers.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::{JsonBody, Path};
use super::super::conversations::jobs_of;
use super::super::document::answers;
use super::super::error::{ApiError, ErrorCode};
use super::super::trace_context::CallerTrace;
use super::history::{checkpoints_of, state_at};
use super::interrupts;
use super::resume;
use super::run_routes::start_on_thread;
use super::runs::RunRequest;
use super::state;
use super::thread_events::run_base;
use super::threads::own_thread;
use crate::access::policy::Action;

/// The most checkpoints one `state.listCheckpoints` answers.
const MAX_CHECKPOINTS: usize = 1000;

/// A command of the thread streaming protocol.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct StreamingCommand {
    /// The client's number for it (a whole number from 0), which the
    /// answer repeats.
    #[serde(deserialize_with = "command_id")]
    #[schemars(schema_with = "command_id_schema")]
    pub id: serde_json::Number,
    /// `run.start`, `input.respond`, `state.get` or `state.listCheckpoints`.
    pub method: String,
    /// The command's parameters.
    #[serde(default)]
    pub params: Map<String, Value>,
}

/// A command's id: any whole number from 0, as JSON sends it.
fn command_id<'de, D: serde::Deserializer<'de>>(d: D) -> Result<serde_json::Number, D::Error> {
    let number = serde_json::Number::deserialize(d)?;
    let whole = number.as_u64().is_some()
        || number
            .as_f64()
            .is_some_and(|f| f >= 0.0 && f.fract() == 0.0);
    match whole {
        true => Ok(number),
        false => Err(serde::de::Error::custom(format!(
            "id {number} is not a whole number from 0"
        ))),
    }
}

fn command_id_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({"type": "integer", "minimum": 0})
}

/// A command's answer: `{"type": "success", "id", "result", "meta"?}` or
/// `{"type": "error", "id", "error", "message"}`.
#[derive(Debug, serde::Serialize, JsonSchema)]
pub struct CommandAnswer(#[schemars(with = "Map<String, Value>")] Value);

/// Why a command was not done, as the protocol names it.
struct Refusal {
    code: &'static str,
    message: String,
}

impl Refusal {
    fn new(code: &'static str, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

/// What a command did not do: the protocol's error, or HTTP's.
enum Failed {
    Refused(Refusal),
    Http(ApiError),
}

/// A request the command itself got wrong is the protocol's
/// `invalid_argument`; the rest (an unknown thread or one the daemon cannot
/// name so, a refused key, a full quota, a broken store) stays HTTP's.
impl From<ApiError> for Failed {
    fn from(error: ApiError) -> Self {
        if error.field.as_deref() == Some("thread_id") {
            return Self::Http(error);
        }
        match error.code {
            ErrorCode::InvalidRequest
            | ErrorCode::BadRequest
            | ErrorCode::UnknownBundle
            | ErrorCode::InvalidState
            | ErrorCode::IdempotencyConflict => Self::Refused(Refusal::new(
                "invalid_argument",
                match error.field {
                    Some(field) => format!("{field}: {}", error.message),
                    None => error.message,
                },
            )),
            _ => Self::Http(error),
        }
    }
}

impl From<Refusal> for Failed {
    fn from(refusal: Refusal) -> Self {
        Self::Refused(refusal)
    }
}

/// A command done: its result, and the last event `seq` it stands after.
struct Done {
    result: Value,
    applied_through: Option<u64>,
}

/// `POST /threads/{thread_id}/commands` in the API document.
pub(super) fn command_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "Send a thread streaming command: start a run, answer an interrupt, read the state",
        )
        .description(
            "`run.start` (`assistant_id`, `input`, `config`, `metadata`, \
             `multitask_strategy`; the thread is made when new) answers `{run_id}` and \
             `meta.applied_through_seq`, where the run's events start after; \
             `input.respond` (`interrupt_id`, `response`) decides the parked call as \
             every other way to decide does; `state.get` and `state.listCheckpoints` \
             read the thread. A command that cannot be done answers the protocol's \
             error, 200.",
        )
        .response_with::<200, Json<CommandAnswer>, _>(|r| r.description("The command's answer"));
    answers(
        op,
        &[
            (403, "The key may not start runs or decide"),
            (
                404,
                "The key has no thread of that id (but `run.start` makes it)",
            ),
            (422, "The body is not a command"),
            (429, "The key's quota is used up"),
        ],
    )
}

/// `POST /threads/{thread_id}/commands`.
pub async fn command(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    Path(thread): Path<String>,
    JsonBody(command): JsonBody<StreamingCommand>,
) -> Result<Json<CommandAnswer>, ApiError> {
    let answered = answer(&state, &caller, &trace, &thread, &command).await?;
    Ok(Json(CommandAnswer(answered)))
}

/// A command's answer, the protocol's success or error; what stays HTTP's
/// answer (an unknown thread, a refused key, a full quota, a broken store)
/// is the error.
pub(super) async fn answer(
    state: &AppState,
    caller: &Caller,
    trace: &CallerTrace,
    thread: &str,
    command: &StreamingCommand,
) -> Result<Value, ApiError> {
    let params = &command.params;
    // Every command but a run's start (which makes a new thread) is on a
    // thread the key has.
    if command.method != "run.start" {
        own_thread(state, caller, thread).await?;
    }
    let done = match command.method.as_str() {
        "run.start" => run_start(state, caller, trace, thread, params).await,
        "input.respond" => respond(state, caller, thread, params).await,
        "state.get" => state_get(state, caller, thread, params).await,
        "state.listCheckpoints" => list_checkpoints(state, caller, thread, params).await,
        "input.inject" | "state.fork" | "agent.getTree" => Err(Refusal::new(
            "not_supported",
            format!(
                "{} is not served: a run's steps are its bundle's (fork a job at a step with POST /v1/jobs/{{id}}/fork; an assistant's graph is GET /assistants/{{id}}/graph)",
                command.method
            ),
        )
        .into()),
        method if method.starts_with("subscription.") => Err(Refusal::new(
            "not_supported",
            format!(
                "{method} is a WebSocket command: over HTTP each POST /threads/{thread}/stream is one subscription"
            ),
        )
        .into()),
        method => Err(Refusal::new(
            "unknown_command",
            format!(
                "{method:?} is not a command: send run.start, input.respond, state.get or state.listCheckpoints"
            ),
        )
        .into()),
    };
    let answer = match done {
        Ok(Done {
            result,
            applied_through,
        }) => {
            let mut answer = json!({"type": "success", "id": command.id, "result": result});
            if let Some(seq) = applied_through {
                answer["meta"] = json!({"applied_through_seq": seq});
            }
            answer
        }
        Err(Failed::Refused(refusal)) => json!({
            "type": "error", "id": command.id, "error": refusal.code, "message": refusal.message,
        }),
        Err(Failed::Http(error)) => return Err(error),
    };
    Ok(answer)
}

/// HTTP's answer to a command told where there is no status (a
/// WebSocket): the protocol's error for command `id`.
pub(super) fn refused(id: &Value, error: &ApiError) -> Value {
    let code = match error.code {
        ErrorCode::Forbidden => "permission_denied",
        ErrorCode::NotFound
        | ErrorCode::InvalidRequest
        | ErrorCode::BadRequest
        | ErrorCode::InvalidState => "invalid_argument",
        _ => "unknown_error",
    };
    json!({"type": "error", "id": id, "error": code, "message": error.message})
}

/// `run.start`: a run on the thread (made first when new); its events
/// start after `applied_through_seq`.
async fn run_start(
    state: &AppState,
    caller: &Caller,
    trace: &CallerTrace,
    thread: &str,
    params: &Map<String, Value>,
) -> Result<Done, Failed> {
    caller.require(Action::SubmitJob)?;
    let mut body = params.clone();
    body.entry("if_not_exists")
        .or_insert_with(|| json!("create"));
    let request: RunRequest = serde_json::from_value(Value::Object(body))
        .map_err(|e| Refusal::new("invalid_argument", format!("run.start's params: {e}")))?;
    let job = start_on_thread(state, caller, trace, thread, &request, None).await?;
    let runs = jobs_of(state, caller.name(), thread).await?;
    let applied_through = runs
        .iter()
        .position(|run| run.id == job.id)
        .map(|ordinal| run_base(ordinal) - 1);
    Ok(Done {
        result: json!({"run_id": job.id}),
        applied_through,
    })
}

/// `input.respond`: the answer to the interrupt the thread waits on (one
/// of `responses` at most: a run waits on one call at a time).
async fn respond(
    state: &AppState,
    caller: &Caller,
    thread: &str,
    params: &Map<String, Value>,
) -> Result<Done, Failed> {
    caller.require(Action::SubmitJob)?;
    let one = match params.get("responses") {
        Some(Value::Array(responses)) => match responses.as_slice() {
            [one] => one.as_object().cloned().unwrap_or_default(),
            _ => {
                return Err(Refusal::new(
                    "invalid_argument",
                    format!(
                        "{} responses: a run waits on one call at a time, so answer its one interrupt",
                        responses.len()
                    ),
                )
                .into());
            }
        },
        _ => params.clone(),
    };
    let Some(answer) = one.get("response") else {
        return Err(Refusal::new(
            "invalid_argument",
            "input.respond needs `response`: the answer to the interrupt",
        )
        .into());
    };
    let waiting = jobs_of(state, caller.name(), thread)
        .await?
        .last()
        .map(interrupts::of_job)
        .unwrap_or_default();
    let wanted = one.get("interrupt_id").and_then(Value::as_str);
    let Some(interrupt) = waiting
        .iter()
        .find(|i| wanted.is_none_or(|wanted| i["id"] == wanted))
    else {
        let now: Vec<&Value> = waiting.iter().map(|i| &i["id"]).collect();
        return Err(Refusal::new(
            "no_such_interrupt",
            format!(
                "thread {thread:?} waits on no interrupt {}: it waits on {now:?} (read the state again)",
                wanted.unwrap_or("at all")
            ),
        )
        .into());
    };
    let id = interrupt["id"].as_str().unwrap_or_default();
    let command = json!({"resume": {id: answer}});
    let pending = resume::find(state, caller, thread, &command).await?;
    let resumed = resume::take(state, caller, pending).await?;
    Ok(Done {
        result: json!({"run_id": resumed.job.id}),
        applied_through: None,
    })
}

/// `state.get`: the thread's values and latest checkpoint.
async fn state_get(
    state: &AppState,
    caller: &Caller,
    thread: &str,
    params: &Map<String, Value>,
) -> Result<Done, Failed> {
    refuse_namespace(params)?;
    let now = state_at(state, caller, thread, None).await?;
    let mut values = now.values;
    if let Some(Value::Array(keys)) = params.get("keys")
        && let Value::Object(all) = &mut values
    {
        all.retain(|key, _| keys.iter().any(|k| k == key));
    }
    let mut result = json!({"values": values});
    if let Some(id) = now.checkpoint.checkpoint_id {
        result["checkpoint"] = json!({"id": id});
    }
    Ok(Done {
        result,
        applied_through: None,
    })
}

/// `state.listCheckpoints`: the thread's checkpoints, newest first, at
/// most `limit` (all up to 1000 without), those older than `before`.
async fn list_checkpoints(
    state: &AppState,
    caller: &Caller,
    thread: &str,
    params: &Map<String, Value>,
) -> Result<Done, Failed> {
    refuse_namespace(params)?;
    let limit = match params.get("limit") {
        None | Some(Value::Null) => MAX_CHECKPOINTS,
        Some(limit) => limit
            .as_u64()
            .filter(|n| (1..=MAX_CHECKPOINTS as u64).contains(n))
            .ok_or_else(|| {
                Refusal::new(
                    "invalid_argument",
                    format!("limit {limit} is not a number from 1 to {MAX_CHECKPOINTS}"),
                )
            })? as usize,
    };
    let all = checkpoints_of(state, caller, thread).await?;
    let end = match params.get("before").and_then(Value::as_str) {
        None => all.len(),
        Some(before) => all.iter().position(|c| c.id() == before).ok_or_else(|| {
            Refusal::new(
                "no_such_checkpoint",
                format!(
                    "thread {thread:?} has no checkpoint {before:?}: its ids are `<run id>:<step>`"
                ),
            )
        })?,
    };
    let checkpoints: Vec<Value> = (0..end)
        .rev()
        .take(limit)
        .map(|at| {
            let here = &all[at];
            let metadata = state::at(thread, &all, at).map(|s| s.metadata);
            // The node that wrote the checkpoint, as its state names it.
            let node = metadata
                .as_ref()
                .and_then(|m| m.get("writes")?.as_object()?.keys().next().cloned());
            json!({
                "id": here.id(), "timestamp": here.created_at, "step": at as i64 - 1,
                "node_name": node, "metadata": metadata,
            })
        })
        .collect();
    Ok(Done {
        result: json!({"checkpoints": checkpoints}),
        applied_through: None,
    })
}

/// A namespace other than the root's: a nested run (a subgraph) streams in
/// its namespace, but its state is not kept apart from the thread's.
fn refuse_namespace(params: &Map<String, Value>) -> Result<(), Refusal> {
    match params.get("namespace") {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Array(parts)) if parts.is_empty() => Ok(()),
        Some(other) => Err(Refusal::new(
            "no_such_namespace",
            format!(
                "namespace {other} is not the root's (`[]`): a nested run's state is not kept apart from its thread's; ask for the root's"
            ),
        )),
    }
}
