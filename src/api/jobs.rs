//! `/v1/jobs`: submit one job or a batch, and get one. What an operator does
//! to a job that exists is `job_actions`; its journal, `job_journal`; the
//! list, `job_list`.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::AppState;
use super::admission::{Submission, admit, admit_batch};
use super::auth::Caller;
use super::body::{JsonBody, Path};
use super::document::{QUOTA, UNAVAILABLE, answers};
use super::error::{ApiError, ErrorCode};
use super::idempotency::{idempotency_key, reads_idempotency_key};
use super::trace_context::{CallerTrace, TraceContext};
use crate::types::text;
// Where the wires that answered with a finished job found the wait.
pub(super) use super::feed::wait_finished;
use crate::access::policy::Action;
use crate::queue::{Job, JobId, JobState, NewJob};

/// The body of `POST /v1/jobs`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SubmitRequest {
    #[schemars(regex(pattern = text::NO_NUL_PATTERN))]
    pub bundle: String,
    #[schemars(regex(pattern = text::NO_NUL_PATTERN))]
    pub input: String,
    #[serde(default)]
    #[schemars(schema_with = "text::nul_free_object")]
    pub variables: Map<String, Value>,
    /// Higher runs first; at most the key's `max_priority`.
    #[serde(default)]
    #[schemars(range(min = crate::admit::PRIORITY_MIN, max = crate::admit::PRIORITY_MAX))]
    pub priority: i32,
    /// RFC 3339; the job waits until then.
    #[serde(default)]
    #[schemars(extend("format" = "date-time"))]
    pub run_at: Option<String>,
    /// Names the job (beside an `Idempotency-Key` header, this wins).
    #[serde(default)]
    #[schemars(regex(pattern = text::KEY_PATTERN))]
    pub idempotency_key: Option<String>,
    #[serde(default)]
    #[schemars(range(min = 1, max = crate::admit::MAX_ATTEMPTS))]
    pub max_attempts: Option<u32>,
    /// W3C trace context; the job's spans join this trace.
    #[serde(default)]
    #[schemars(regex(pattern = crate::trace_context::traceparent_pattern()))]
    pub traceparent: Option<String>,
    /// W3C `tracestate` sent with `traceparent`; one that is not W3C trace
    /// context is left out.
    #[serde(default)]
    pub tracestate: Option<String>,
    /// Continue this conversation: the job starts from its earlier turns.
    #[serde(default)]
    #[schemars(regex(pattern = crate::types::text::ID_PATTERN))]
    pub conversation_id: Option<String>,
    /// Lower the bundle's budgets for this job (`prompt_tokens`,
    /// `completion_tokens`, `cost`, `wall_time`, `tool_calls`,
    /// `model_calls`, `depth`); a limit above the bundle's is refused.
    #[serde(default, deserialize_with = "crate::budget::object_only")]
    pub limits: Option<crate::budget::BudgetLimits>,
    /// Where the job's state changes are POSTed (within `egress.allow`;
    /// docs/api.md, Completion webhooks).
    #[serde(default)]
    #[schemars(regex(pattern = crate::access::file::WEBHOOK_PATTERN))]
    pub webhook: Option<String>,
}

/// `POST /v1/jobs` in the API document.
pub(super) fn submit_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Submit a job")
        .description(
            "An `Idempotency-Key` header (or the body's `idempotency_key`) names the job: \
             a repeat with the same key and body answers the job it made (200).",
        )
        .response_with::<201, Json<Job>, _>(|r| r.description("The job, queued"))
        .response_with::<200, Json<Job>, _>(|r| {
            r.description("The job an earlier submit with this idempotency key made")
        });
    let op = reads_idempotency_key(
        op,
        "Names the job (the body's `idempotency_key` wins): a repeat with the same key and body \
         answers the job it made",
    );
    answers(
        op,
        &[
            (409, "The idempotency key names a different job"),
            QUOTA,
            UNAVAILABLE,
        ],
    )
}

pub async fn submit(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    trace: CallerTrace,
    JsonBody(mut request): JsonBody<SubmitRequest>,
) -> Result<(StatusCode, Json<Job>), ApiError> {
    request.idempotency_key = idempotency_key(request.idempotency_key, &headers)?;
    let submission = Submission::new(validated(request, &trace)?, "bundle");
    let (job, created) = admit(&state, &caller, submission).await?;
    Ok((
        if created {
            StatusCode::CREATED
        } else {
            StatusCode::OK
        },
        Json(job),
    ))
}

/// `run_at` as a time (see [`time_field`]).
fn start_time(text: &str) -> Result<std::time::SystemTime, ApiError> {
    time_field("run_at", text).map(Into::into)
}

/// A time field of a request (`field` names it in the refusal): RFC 3339
/// with any offset (the document's `date-time`), or the weaker forms
/// humantime reads (`2026-01-05 10:00:00`, taken as UTC).
pub(super) fn time_field(
    field: &str,
    text: &str,
) -> Result<chrono::DateTime<chrono::Utc>, ApiError> {
    if let Ok(time) = chrono::DateTime::parse_from_rfc3339(text) {
        return Ok(time.with_timezone(&chrono::Utc));
    }
    humantime::parse_rfc3339_weak(text)
        .map(Into::into)
        .map_err(|e| {
            ApiError::field(
                ErrorCode::InvalidRequest,
                field,
                format!("invalid RFC 3339 time {text:?}: {e}; send e.g. 2026-01-05T10:00:00Z"),
            )
        })
}

/// A submit request read into the job it asks for: its wire's own checks
/// (times, trace context, conversation id); the rules every way in shares
/// are admission's. The job's `traceparent` is the body's (an explicit
/// field, checked: a bad one is a 422) with the body's `tracestate`, else
/// the request's headers'.
pub(super) fn validated(request: SubmitRequest, trace: &CallerTrace) -> Result<NewJob, ApiError> {
    let run_at = match &request.run_at {
        Some(text) => Some(start_time(text)?),
        None => None,
    };
    if let Some(tp) = &request.traceparent
        && !super::trace_context::valid_traceparent(tp)
    {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "traceparent",
            format!("not a W3C traceparent: {tp:?}"),
        ));
    }
    if let Some(id) = &request.conversation_id {
        super::conversations::check_id(id)?;
    }
    Ok(NewJob {
        id: None,
        bundle: request.bundle,
        bundle_version: None,
        bundle_digest: None,
        fork: None,
        input: request.input,
        variables: request.variables,
        kind: Default::default(),
        controls: Default::default(),
        messages: None,
        conversation_id: request.conversation_id,
        after_turns: false,
        priority: request.priority,
        run_at,
        idempotency_key: request.idempotency_key,
        max_attempts: request.max_attempts,
        trace: match &request.traceparent {
            Some(tp) => TraceContext::parse(tp, request.tracestate.as_deref()),
            None => trace.or_body(None, None),
        },
        limits: request.limits,
        owner: None,
        webhook: request.webhook,
        push: Vec::new(),
        daily: None,
        push_caps: None,
        run_meta: None,
    })
}

/// Jobs one batch may carry.
pub const MAX_BATCH: usize = 10_000;

/// The body of `POST /v1/jobs/batch`.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BatchRequest {
    #[schemars(length(min = 1, max = MAX_BATCH))]
    pub jobs: Vec<SubmitRequest>,
}

/// `POST /v1/jobs/batch`: many jobs in one transaction (multi-row
/// inserts), all or none. A job the API refuses is a 422 naming its index
/// (`jobs[3].run_at`) and nothing is queued; a key reused for different
/// content is a 409 naming its index. 201 when any job was created, else
/// 200 (every job was an idempotent repeat).
pub async fn submit_batch(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    JsonBody(request): JsonBody<BatchRequest>,
) -> Result<(StatusCode, Json<Batch>), ApiError> {
    if request.jobs.is_empty() || request.jobs.len() > MAX_BATCH {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "jobs",
            format!(
                "a batch holds 1 to {MAX_BATCH} jobs, not {}",
                request.jobs.len()
            ),
        ));
    }
    let submissions = request
        .jobs
        .into_iter()
        .enumerate()
        .map(|(i, job)| {
            validated(job, &trace)
                .map(|job| Submission::new(job, "bundle"))
                .map_err(|e| super::admission::at_index(i, e))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let submitted = admit_batch(&state, &caller, submissions).await?;
    let any_created = submitted.iter().any(|(_, created)| *created);
    let (jobs, created): (Vec<Job>, Vec<bool>) = submitted.into_iter().unzip();
    let status = if any_created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, Json(Batch { jobs, created })))
}

/// The jobs of a batch, in the order submitted.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Batch {
    pub jobs: Vec<Job>,
    /// Per job: made by this batch (`true`) or an idempotent repeat.
    pub created: Vec<bool>,
}

/// `POST /v1/jobs/batch` in the API document.
pub(super) fn submit_batch_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Submit many jobs in one transaction, all or none")
        .description(
            "A job the API refuses is a 422 naming its index (`jobs[3].run_at`) and nothing is \
             queued.",
        )
        .response_with::<201, Json<Batch>, _>(|r| r.description("Jobs were created"))
        .response_with::<200, Json<Batch>, _>(|r| {
            r.description("Every job was an idempotent repeat")
        });
    answers(
        op,
        &[
            (409, "A job's idempotency key names a different job"),
            QUOTA,
            UNAVAILABLE,
        ],
    )
}

/// `GET /v1/jobs/{id}` in the API document.
pub(super) fn get_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary("Get a job")
        .response_with::<200, Json<Job>, _>(|r| r.description("The job"))
}

pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Job>, ApiError> {
    let id = JobId::from(id);
    let mut job = caller.stored_job(&state, Action::ReadJob, &id).await?;
    if job.state == JobState::Running {
        job.heartbeat_every_ms = Some(state.job_heartbeat.as_millis() as u64);
    }
    Ok(Json(job))
}

/// The schemas the API document is generated from (schemars, which reads
/// serde's attributes) hold to what serde really writes and reads: real
/// jobs as serialized, and submit bodies of docs/api.md and the tests,
/// pass; what serde refuses, the schema refuses too.
#[cfg(test)]
mod tests {
    use serde_json::json;

    use schemars::generate::SchemaSettings;
    use serde::de::DeserializeOwned;

    use super::*;
    use crate::approval::ParkedCall;
    use crate::queue::{Controls, JobKind, JobOrigin, JobState};
    use crate::types::{AnswerFormat, TerminationReason, ToolSchema};

    /// The schema's verdict on `value`, with its first error for messages.
    fn verdict(schema: &schemars::Schema, value: &Value) -> Result<(), String> {
        let validator = jsonschema::validator_for(schema.as_value())
            .unwrap_or_else(|e| panic!("the generated schema does not compile: {e}"));
        match validator.iter_errors(value).next() {
            None => Ok(()),
            Some(error) => Err(format!("{error} at {}", error.instance_path())),
        }
    }

    /// `T`'s schemas as the document will be made: the reading one
    /// (`schema_for!`: what serde reads) and the draft-07 one aide makes
    /// for a request (`input`) or an answer (`output`).
    fn schemas<T: JsonSchema>(output: bool) -> [(&'static str, schemars::Schema); 2] {
        let settings = if output {
            SchemaSettings::draft07().for_serialize()
        } else {
            SchemaSettings::draft07().for_deserialize()
        };
        let aide = settings.into_generator().into_root_schema_for::<T>();
        [
            ("schema_for!", schemars::schema_for!(T)),
            ("draft-07", aide),
        ]
    }

    /// Serde and the reading schema give `value` the same verdict, `reads`.
    fn serde_and_schema_agree<T: DeserializeOwned + JsonSchema>(value: &Value, reads: bool) {
        let by_serde = serde_json::from_value::<T>(value.clone()).map(|_| ());
        assert_eq!(by_serde.is_ok(), reads, "serde on {value}: {by_serde:?}");
        let by_schema = verdict(&schemars::schema_for!(T), value);
        assert_eq!(by_schema.is_ok(), reads, "schema on {value}: {by_schema:?}");
    }

    /// A job as the queue stores one: queued, nothing else set.
    fn stored() -> Value {
        json!({
            "id": "0193a1b2-0000-7000-8000-000000000001", "bundle": "refunds",
            "bundle_version": null, "bundle_digest": null, "input": "refund order 17",
            "variables": {"order": 17}, "priority": 0, "state": "queued", "attempts": 0,
            "max_attempts": 3, "idempotency_key": null, "traceparent": null,
            "cancel_requested": false, "result": null, "error": null, "pending_call": null,
            "run_at": "2026-01-05T10:00:00.000Z", "created_at": "2026-01-05T10:00:00.000Z",
            "updated_at": "2026-01-05T10:00:00.000Z", "started_at": null,
            "finished_at": null, "lease_expires_at": null,
        })
    }

    fn job(changes: impl FnOnce(&mut Job)) -> Job {
        let mut job: Job = serde_json::from_value(stored()).unwrap();
        changes(&mut job);
        job
    }

    fn parked(call: Value, job: &str) -> Option<ParkedCall> {
        Some(
            serde_json::from_value::<ParkedCall>(call)
                .unwrap()
                .for_job(job, Some("ops")),
        )
    }

    /// Jobs in the states and shapes the API answers with.
    fn jobs() -> Vec<Job> {
        let awaiting = job(|j| {
            j.state = JobState::AwaitingApproval;
            j.attempts = 1;
            j.started_at = Some("2026-01-05T10:00:01.000Z".into());
            j.pending_call = parked(
                json!({
                    "kind": "approval", "scope": "", "turn": 2, "position": 0,
                    "call_id": "call_7", "tool": "refund", "arguments": {"amount": 500},
                    "effect": "unsafe", "idempotency_key": "j:2:0", "digest": "sha256:ab",
                    "parameters": {"type": "object"}, "timeout_ms": 3_600_000,
                    "approver": "others", "requested_at": "2026-01-05T10:00:02.000Z",
                    "expires_at": "2026-01-05T11:00:02.000Z"
                }),
                j.id.as_str(),
            );
            j.error = Some("tool `refund` waits for a person's decision".into());
            j.termination_reason = Some(TerminationReason::AwaitingApproval);
        });
        let caller_call = job(|j| {
            j.state = JobState::NeedsAttention;
            j.controls.caller_tools = vec![ToolSchema {
                name: "lookup".into(),
                description: "Looks an order up.".into(),
                parameters: json!({"type": "object", "properties": {"id": {"type": "string"}}}),
            }];
            j.pending_call = parked(
                json!({
                    "kind": "caller_call", "scope": "", "turn": 1, "position": 0,
                    "call_id": "c1", "tool": "lookup", "arguments": {"id": "17"},
                    "effect": "unsafe", "idempotency_key": "j:1:0",
                    "caller_calls": [
                        {"position": 0, "call_id": "c1", "tool": "lookup", "arguments": {"id": "17"}},
                        {"position": 1, "call_id": "c2", "tool": "lookup", "arguments": {"id": "18"}}
                    ]
                }),
                j.id.as_str(),
            );
        });
        let succeeded = job(|j| {
            j.state = JobState::Succeeded;
            j.attempts = 2;
            j.crash_resumes = 1;
            j.result = Some(json!({"output": "{\"refunded\": 500}", "turns": 3}));
            j.termination_reason = Some(TerminationReason::NoToolCalls);
            j.finished_at = Some("2026-01-05T10:00:09.000Z".into());
            j.tokens_spent = 1234;
            j.cost_spent = 0.0042;
            j.tool_errors = 1;
            j.owner = Some("ops".into());
            j.conversation_id = Some("chat-42".into());
            j.traceparent = Some("00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01".into());
            j.tracestate = Some("rojo=00f067aa0ba902b7".into());
            j.messages = Some(vec![json!({"role": "user", "content": "hi"})]);
            j.limits = serde_json::from_value(json!({"tokens": 5000, "wall_time": "26h"})).ok();
            j.controls.answer_format = Some(AnswerFormat::JsonSchema {
                name: "refund".into(),
                schema: json!({"type": "object"}),
                strict: Some(true),
            });
        });
        let forked = job(|j| {
            j.bundle_version = Some("3".into());
            j.bundle_digest = Some("sha256:0f".into());
            j.forked_from = Some(JobOrigin {
                job_id: "0193a1b2-0000-7000-8000-000000000000".into(),
                at_turn: 2,
            });
            j.kind = JobKind::Stage {
                stage: "simplify".into(),
            };
            j.controls = Controls {
                tools: Some(vec!["refund".into(), "lookup".into()]),
                max_agents: Some(2),
                verbose: true,
                ..Controls::default()
            };
        });
        let group_chat = job(|j| {
            j.state = JobState::Failed;
            j.error = Some("agent critic timed out".into());
            j.termination_reason = Some(TerminationReason::Error);
            j.kind = serde_json::from_value(json!({"type": "group_chat", "plan": {
                "agents": [
                    {"id": "w", "name": "Writer", "kind": "local", "bundle": "writer"},
                    {"id": "c", "name": "Critic", "kind": "remote",
                     "endpoint": "http://127.0.0.1:9/critic", "message_type": 0, "timeout_ms": 5000}
                ],
                "max_iterations": 3, "termination": {"type": "selector"},
                "selector": {"id": "s", "name": "Host", "kind": "local", "bundle": "host"},
                "stop_word": "DONE"
            }}))
            .unwrap();
        });
        let verify = job(|j| {
            j.state = JobState::Cancelled;
            j.cancel_requested = true;
            j.termination_reason = Some(TerminationReason::Cancelled);
            j.kind = serde_json::from_value(json!({
                "type": "verify", "input": "x", "real_tools": true,
                "tool_results": {"refund": {"ok": true}}
            }))
            .unwrap();
        });
        vec![awaiting, caller_call, succeeded, forked, group_chat, verify]
    }

    #[test]
    fn every_job_the_api_answers_with_fits_its_schemas_and_reads_back() {
        let served: Vec<Value> = jobs().iter().map(|j| json!(j)).collect();
        assert_eq!(served[2]["limits"]["wall_time"], "1day 2h");
        assert!(served[0]["pending_call"]["decide"].is_string());
        assert_eq!(served[3]["forked_from"]["at_turn"], 2);
        for (name, schema) in schemas::<Job>(true) {
            for job in &served {
                assert_eq!(verdict(&schema, job), Ok(()), "{name} on {job}");
            }
        }
        for job in &served {
            serde_and_schema_agree::<Job>(job, true);
        }
    }

    #[test]
    fn what_serde_reads_of_a_job_and_refuses_the_reading_schema_does_too() {
        // Rows from before `kind`, `controls`, the counters and a parked
        // call's `kind`: `tools` as one string, a call's older names.
        let mut old = stored();
        old["state"] = json!("needs_attention");
        old["controls"] = json!({"tools": "refund, lookup"});
        old["pending_call"] = json!({
            "turn": 1, "call": "c1", "tool_name": "charge", "effect": "unsafe"
        });
        serde_and_schema_agree::<Job>(&old, true);
        serde_and_schema_agree::<Job>(&stored(), true);
        let refused = [
            ("state", json!("paused")),
            ("kind", json!({"type": "later"})),
            ("kind", json!({"type": "stage"})),
            ("controls", json!({"tools": 3})),
            ("termination_reason", json!("gave_up")),
            ("forked_from", json!({"job_id": "j0"})),
            (
                "pending_call",
                json!({"turn": 1, "call": "c1", "call_id": "c1", "tool": "t", "effect": "unsafe"}),
            ),
            (
                "pending_call",
                json!({"turn": 1, "tool": "t", "effect": "unsafe"}),
            ),
        ];
        for (field, value) in refused {
            let mut job = stored();
            job[field] = value;
            serde_and_schema_agree::<Job>(&job, false);
        }
        let mut served = json!(jobs()[2]);
        served["state"] = json!("paused");
        for (name, schema) in schemas::<Job>(true) {
            assert!(verdict(&schema, &served).is_err(), "{name} took {served}");
        }
    }

    #[test]
    fn submit_bodies_of_the_docs_and_tests_fit_and_those_refused_do_not() {
        let bodies = [
            json!({"bundle": "arithmetic", "input": "2+3"}),
            json!({"bundle": "arithmetic", "input": "4*5", "idempotency_key": "order-17"}),
            json!({"bundle": "friend", "input": "My name is Ada.", "conversation_id": "chat-42"}),
            json!({"bundle": "implement-review", "input": "",
                   "variables": {"only_stage": "simplify", "files": ["calc.py"], "focus": "the loops"}}),
            json!({"bundle": "b", "input": "later", "run_at": "2099-01-01T00:00:00Z"}),
            json!({"bundle": "looper", "input": "loop", "limits": {"model_calls": 4}}),
            json!({"bundle": "looper", "input": "x", "limits": {"wall_time": "10m", "cost": 0.5}}),
            json!({"bundle": "looper", "input": "x", "limits": {"wall_time": "1.5h"}}),
            json!({"bundle": "looper", "input": "x", "limits": {"wall_time": " 2 weeks 1h30min "}}),
            json!({"bundle": "calc", "input": "break it", "max_attempts": 2, "priority": -1}),
            json!({"bundle": "plain", "input": "x", "webhook": "http://127.0.0.1:9/hook",
                   "traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
                   "tracestate": "rojo=00f067aa0ba902b7"}),
        ];
        for body in &bodies {
            serde_and_schema_agree::<SubmitRequest>(body, true);
            for (name, schema) in schemas::<SubmitRequest>(false) {
                assert_eq!(verdict(&schema, body), Ok(()), "{name} on {body}");
            }
        }
        serde_and_schema_agree::<BatchRequest>(&json!({"jobs": bodies}), true);
        let refused = [
            json!({"bundle": "b", "input": 42}),
            json!({"input": "x"}),
            json!({"bundle": "b", "input": "x", "kind": {"type": "bundle"}}),
            json!({"bundle": "b", "input": "x", "limits": {"turns": 3}}),
            json!({"bundle": "b", "input": "x", "limits": {"wall_time": 60}}),
            json!({"bundle": "b", "input": "x", "limits": {"wall_time": "5 parsecs"}}),
            json!({"bundle": "b", "input": "x", "limits": {"wall_time": "1.s"}}),
            json!({"bundle": "b", "input": "x", "priority": "high"}),
        ];
        for body in &refused {
            serde_and_schema_agree::<SubmitRequest>(body, false);
            for (name, schema) in schemas::<SubmitRequest>(false) {
                assert!(verdict(&schema, body).is_err(), "{name} took {body}");
            }
        }
    }
}
