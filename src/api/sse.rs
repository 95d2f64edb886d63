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

use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde::Deserialize;
use serde_json::json;
use std::convert::Infallible;

use super::AppState;
use super::auth::Caller;
use super::body::{Path, Query};
use super::error::{ApiError, ErrorCode};
use super::feed::{Item, job_feed};
use crate::access::policy::Action;
use crate::events::live::{Progress, Token};
use crate::queue::JobId;

#[derive(Debug, Deserialize, schemars::JsonSchema)]
pub struct EventsQuery {
    /// Stream the events after this sequence number (a `Last-Event-ID`
    /// header wins).
    pub after: Option<u64>,
}

pub async fn events(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<EventsQuery>,
    headers: HeaderMap,
) -> Result<Sse<impl Stream<Item = Result<SseEvent, Infallible>>>, ApiError> {
    let id = JobId::from(id);
    let after = resume_point(&headers, query.after)?;
    // Before the store is read: a refused stream costs nothing.
    let permit = state.streams.acquire(caller.name())?;
    caller.job(Action::ReadJob, &id, state.queue.get(&id).await?)?;
    let heartbeat = state.sse_heartbeat;
    let stream = async_stream(state, id, after, permit);
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(heartbeat).text("heartbeat")))
}

/// Where the stream resumes: after `Last-Event-ID`, else `?after=`, else the
/// start. The store keeps sequence numbers as signed 64-bit integers, so a
/// number past `i64::MAX` is refused rather than wrapped (a wrapped one is
/// negative and would replay the whole log).
pub(super) fn resume_point(headers: &HeaderMap, after: Option<u64>) -> Result<u64, ApiError> {
    let sequence = |text: &str| text.parse::<i64>().ok().and_then(|n| u64::try_from(n).ok());
    if let Some(value) = headers.get("last-event-id") {
        let text = String::from_utf8_lossy(value.as_bytes());
        return sequence(text.trim()).ok_or_else(|| {
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
    match after {
        // A query parameter that does not fit, like one that does not parse.
        Some(n) if i64::try_from(n).is_err() => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "after",
            format!(
                "?after={n} is past the largest sequence number ({}); send the `id:` of the last event received",
                i64::MAX
            ),
        )),
        after => Ok(after.unwrap_or(0)),
    }
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
                let end = json!({"job_id": job.id, "state": job.state, "error": job.error, "result": job.result,
                                 "termination_reason": job.termination_reason, "tool_errors": job.tool_errors,
                                 "tokens_spent": job.tokens_spent, "cost_spent": job.cost_spent});
                SseEvent::default().event("end").data(end.to_string())
            }
        })
    })
}

/// A `token` event: ephemeral, with no `id:`, so resumption is unaffected.
fn token_event(token: &Token) -> SseEvent {
    let data = json!({"turn": token.turn, "run_id": token.run_id, "text": token.text});
    SseEvent::default().event("token").data(data.to_string())
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
