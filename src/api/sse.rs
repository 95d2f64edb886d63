//! `GET /v1/jobs/{id}/events`: the job's durable event log as Server-Sent
//! Events. `id:` is the sequence number; `Last-Event-ID` (or `?after=N`)
//! resumes with no gap and no duplicate, also across daemon restarts, because
//! the stream reads the store, not memory. The stream ends with an `end`
//! event carrying the job's final state. While the job runs in this daemon,
//! the model's answer also arrives token by token as `token` events, and
//! the run's steps as they happen as `progress` events (a model or tool
//! call started or ended, a wait), both with no `id:`: never stored, so
//! resumption is unaffected (a client that reconnects gets the stored
//! events after its `Last-Event-ID`, then the live ones from then on).

use std::borrow::Cow;
use std::convert::Infallible;

use aide::transform::TransformOperation;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::AppState;
use super::auth::Caller;
use super::body::{Path, Query};
use super::document::{EventStream, answers, json_text, reads_header, sse_event};
use super::error::{ApiError, ErrorCode};
use super::feed::{Item, job_feed};
use crate::access::policy::Action;
use crate::events::live::{Progress, Token};
use crate::queue::{Job, JobId, JobState};
use crate::types::TerminationReason;

#[derive(Debug, Deserialize, JsonSchema)]
pub struct EventsQuery {
    /// Stream the events after this sequence number (a `Last-Event-ID`
    /// header wins).
    #[schemars(range(max = i64::MAX))]
    pub after: Option<u64>,
}

/// `GET /v1/jobs/{id}/events` in the API document.
pub(super) fn events_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("The job's events as Server-Sent Events (id = sequence number; ends with an `end` event)")
        .description(
            "Stored events come as `event: event` with `id:` their sequence number: \
             `Last-Event-ID` (or `?after=N`) resumes after it with no gap and no duplicate, \
             also across daemon restarts. While the job runs in this daemon, the model's \
             answer also arrives token by token (`event: token`) and the run's steps as they \
             happen (`event: progress`), both with no `id:` (never stored, so resuming is \
             unaffected). The last event is `event: end`, the job's outcome. A `: heartbeat` \
             comment keeps an idle stream open.",
        )
        .response_with::<200, EventStream<JobStreamEvent>, _>(|r| {
            r.description("The job's events, each `data:` JSON")
        });
    let op = reads_header(
        op,
        "Last-Event-ID",
        "The `id:` of the last event received: a sequence number from 0 to \
         9223372036854775807, in decimal without sign or leading zeros (anything else is a \
         400); the stream resumes after it.",
        &crate::types::text::sequence_number_pattern(),
    );
    answers(
        op,
        &[
            (400, "The Last-Event-ID header is not a sequence number"),
            (
                503,
                "The key's event streams (server.max_event_streams) are all open, or the \
                 queue cannot answer now; Retry-After says when to try again",
            ),
        ],
    )
}

pub async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<EventStream<JobStreamEvent>, ApiError> {
    let id = JobId::from(id);
    let after = resume_point(&headers, query.after)?;
    // Before the store is read: a refused stream costs nothing.
    let permit = state.streams.acquire(caller.name())?;
    caller.stored_job(&state, Action::ReadJob, &id).await?;
    let heartbeat = state.sse_heartbeat;
    let stream = async_stream(state, id, after, permit);
    Ok(EventStream::new(Sse::new(stream).keep_alive(
        KeepAlive::new().interval(heartbeat).text("heartbeat"),
    )))
}

/// The `end` event's data: the job's outcome (docs/api.md, "A job's
/// outcome").
#[derive(Debug, Serialize, JsonSchema)]
pub struct JobEnd {
    pub job_id: JobId,
    pub state: JobState,
    pub error: Option<String>,
    pub result: Option<Value>,
    pub termination_reason: Option<TerminationReason>,
    pub tool_errors: u64,
    pub tokens_spent: u64,
    pub cost_spent: f64,
}

impl JobEnd {
    fn of(job: &Job) -> Self {
        Self {
            job_id: job.id.clone(),
            state: job.state,
            error: job.error.clone(),
            result: job.result.clone(),
            termination_reason: job.termination_reason,
            tool_errors: job.tool_errors,
            tokens_spent: job.tokens_spent,
            cost_spent: job.cost_spent,
        }
    }
}

/// One event of a job's stream, by its `event:` name — for the API
/// document only (no value has this type: each event's data is written
/// from its own type).
pub enum JobStreamEvent {}

impl JsonSchema for JobStreamEvent {
    fn schema_name() -> Cow<'static, str> {
        "JobStreamEvent".into()
    }

    fn json_schema(generator: &mut SchemaGenerator) -> Schema {
        let stored = json_schema!({
            "type": "object",
            "description": "A job event as stored: `seq`, `type` (`KernelStart`, `ModelRequest`, \
                `ToolCall`, `ToolResult`, `JobState`, …) and its fields",
        });
        let events = [
            sse_event(
                Some("event"),
                "A stored event; `id:` its sequence number",
                json_text(stored),
            ),
            sse_event(
                Some("token"),
                "A piece of the model's answer as it arrives; no `id:` of its own",
                json_text(generator.subschema_for::<Token>()),
            ),
            sse_event(
                Some("progress"),
                "A step of the run as it happens; no `id:` of its own",
                json_text(generator.subschema_for::<Progress>()),
            ),
            sse_event(
                Some("end"),
                "The last event: the job's outcome",
                json_text(generator.subschema_for::<JobEnd>()),
            ),
        ];
        json_schema!({
            "description": "One event of a job's stream: `event`, then `token` and `progress` \
                while it runs in this daemon, `end` last",
            "oneOf": events,
        })
    }
}

/// Where the stream resumes: after `Last-Event-ID`, else `?after=`, else the
/// start. The store keeps sequence numbers as signed 64-bit integers, so a
/// number past `i64::MAX` is refused rather than wrapped (a wrapped one is
/// negative and would replay the whole log).
pub(super) fn resume_point(headers: &HeaderMap, after: Option<u64>) -> Result<u64, ApiError> {
    // `?after` is checked even where the header wins: a request the
    // document calls invalid is refused, whatever else it carries.
    if let Some(n) = after
        && i64::try_from(n).is_err()
    {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "after",
            format!(
                "?after={n} is past the largest sequence number ({}); send the `id:` of the last event received",
                i64::MAX
            ),
        ));
    }
    if let Some(value) = headers.get("last-event-id") {
        let text = String::from_utf8_lossy(value.as_bytes());
        // HTTP's optional whitespace around a value is not part of it.
        let number = text.trim_matches([' ', '\t']);
        return crate::types::text::sequence_number(number).ok_or_else(|| {
            ApiError::field(
                ErrorCode::BadRequest,
                "Last-Event-ID",
                format!(
                    "the Last-Event-ID header {text:?} is not a sequence number (an integer from 0 to {}); send the `id:` of the last event received, or leave the header out to start from the beginning",
                    i64::MAX
                ),
            )
        });
    }
    Ok(after.unwrap_or(0))
}

fn async_stream(
    state: AppState,
    id: JobId,
    after: u64,
    permit: super::limits::StreamPermit,
) -> impl Stream<Item = Result<SseEvent, Infallible>> {
    job_feed(state, id, after, false, permit).map(|item| {
        Ok(match item {
            Item::Token(token) => token_event(&token),
            Item::Progress(progress) => progress_event(&progress),
            Item::Event { seq, json } => SseEvent::default()
                .id(seq.to_string())
                .event("event")
                .data(json),
            Item::End(job) => {
                // The outcome with it: why the job ended, failed tool calls, spend.
                let end = serde_json::to_string(&JobEnd::of(&job)).unwrap_or_else(|_| "{}".into());
                SseEvent::default().event("end").data(end)
            }
        })
    })
}

/// A `token` event: ephemeral, with no `id:`, so resumption is unaffected.
fn token_event(token: &Token) -> SseEvent {
    let data = serde_json::to_string(token).unwrap_or_else(|_| "{}".into());
    SseEvent::default().event("token").data(data)
}

/// A `progress` event: ephemeral like a token (no `id:`); its data is the
/// [`Progress`] as it serializes (`run_id`, `turn`, `at`, `kind`, …).
fn progress_event(progress: &Progress) -> SseEvent {
    let data = serde_json::to_string(progress).unwrap_or_else(|_| "{}".into());
    SseEvent::default().event("progress").data(data)
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_id(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("last-event-id", HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn a_last_event_id_past_i64_is_a_400_naming_the_header() {
        for bad in [
            "9223372036854775808",
            "18446744073709551615",
            "-1",
            "abc",
            "",
        ] {
            let err = resume_point(&with_id(bad), None).unwrap_err();
            assert_eq!(err.code, ErrorCode::BadRequest, "{bad:?}");
            assert_eq!(err.field.as_deref(), Some("Last-Event-ID"), "{bad:?}");
            assert!(err.message.contains("Last-Event-ID"), "{}", err.message);
        }
        let err = resume_point(&HeaderMap::new(), Some(1 << 63)).unwrap_err();
        assert_eq!(err.field.as_deref(), Some("after"));
    }

    #[test]
    fn valid_resume_points_are_kept() {
        assert_eq!(resume_point(&with_id(" 42 "), Some(7)).unwrap(), 42);
        assert_eq!(
            resume_point(&with_id("9223372036854775807"), None).unwrap(),
            i64::MAX as u64
        );
        assert_eq!(resume_point(&HeaderMap::new(), Some(7)).unwrap(), 7);
        assert_eq!(resume_point(&HeaderMap::new(), None).unwrap(), 0);
    }
}
