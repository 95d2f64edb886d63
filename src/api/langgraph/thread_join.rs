//! LangGraph's join of a thread, `GET /threads/{id}/stream` without an
//! upgrade (`client.threads.join_stream`; with one, the path is the thread's
//! socket, `thread_socket`): the runs of the thread as LangGraph's events,
//! each run told in its own stream modes between its `metadata`
//! (`{"run_id", "attempt"}`) and its end's (`{"status": "run_done",
//! "run_id"}`, after an `error` for a failed run), the runs still going when
//! the client joins and those started after; the stream stays open until
//! the client goes. `stream_modes` (or `stream_mode`, as the SDKs send it)
//! chooses `run_modes` (all of that), `lifecycle` (the runs' starts and
//! ends) or `state_update` (a thread's state written: never here, its state
//! is its journals). Every event made from the stored log has an `id:`
//! numbered as the thread streaming protocol numbers (`thread_events`), so
//! `Last-Event-ID` resumes after one with exactly what follows, ended runs
//! too, also after a daemon restart.

use std::collections::HashSet;

use aide::transform::TransformOperation;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::json;

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::{ListQuery, Path, Texts};
use super::super::conversations::jobs_of;
use super::super::document::{EventStream, answers};
use super::super::error::{ApiError, ErrorCode};
use super::super::trace_context::CallerTrace;
use super::follower::RESUMED;
use super::stream::Frame;
use super::stream_modes::Modes;
use super::stream_routes::{RunStreamEvent, joined_after, own_modes, own_subgraphs};
use super::thread_events::{FRAME_ROOM, RUN_ROOM, run_base};
use super::thread_socket::{self, MaybeUpgrade};
use super::thread_stream::{Telling, ThreadFollow, Told, sse_answer};
use super::threads::own_thread;
use crate::queue::{Job, JobId};

/// `?stream_modes=` (and `?stream_mode=`, as LangGraph's SDKs send it).
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct JoinThreadQuery {
    /// `run_modes` (the default), `lifecycle` or `state_update`, repeated or
    /// separated by commas.
    #[serde(default)]
    pub stream_modes: Option<Texts>,
    /// As `stream_modes`.
    #[serde(default)]
    pub stream_mode: Option<Texts>,
}

/// What a join of a thread tells.
#[derive(Debug, Clone, Copy, Default)]
struct JoinModes {
    runs: bool,
    lifecycle: bool,
}

impl JoinModes {
    fn read(query: &JoinThreadQuery) -> Result<Self, ApiError> {
        let mut modes = Self::default();
        let asked = query.stream_modes.iter().chain(&query.stream_mode);
        let names = asked
            .flat_map(Texts::iter)
            .flat_map(|names| names.split(','));
        let mut any = false;
        for name in names.map(str::trim).filter(|name| !name.is_empty()) {
            any = true;
            match name {
                "run_modes" => modes.runs = true,
                "lifecycle" => modes.lifecycle = true,
                "state_update" => {}
                other => {
                    return Err(ApiError::field(
                        ErrorCode::InvalidRequest,
                        "stream_modes",
                        format!(
                            "stream mode {other:?} is not a thread's: send run_modes, lifecycle or state_update"
                        ),
                    ));
                }
            }
        }
        if !any {
            modes.runs = true;
        }
        Ok(modes)
    }
}

/// A thread joined: its runs after `since`, or without one those not ended
/// when it was joined.
struct Join {
    modes: JoinModes,
    since: Option<u64>,
    ended: HashSet<JobId>,
}

/// One run of a joined thread: its first number, its job.
struct JoinedRun {
    base: u64,
    job: String,
}

impl Telling for Join {
    type Run = JoinedRun;

    fn run(&self, ordinal: usize, job: &Job) -> Option<JoinedRun> {
        let base = run_base(ordinal);
        let told = match self.since {
            Some(since) => base + RUN_ROOM - 1 <= since,
            None => self.ended.contains(&job.id),
        };
        (!told).then(|| JoinedRun {
            base,
            job: job.id.to_string(),
        })
    }

    /// The run's own modes, as its stream had them.
    fn modes(&self, job: &Job) -> Modes {
        own_modes(job)
    }

    /// The run's subgraphs when its stream had them.
    fn subgraphs(&self, job: &Job) -> bool {
        own_subgraphs(job)
    }

    fn tell(&self, run: &mut JoinedRun, frame: &Frame) -> Vec<Told> {
        let last = run.base + RUN_ROOM - 1;
        let done = |id| {
            Frame::root(
                "metadata",
                json!({"status": "run_done", "run_id": run.job}),
                Some(id),
            )
        };
        let told = match frame.event {
            "metadata" => vec![Frame {
                id: Some(run.base),
                ..frame.clone()
            }],
            "end" => vec![done(last)],
            "error" if self.modes.runs => vec![
                Frame {
                    id: Some(last - 1),
                    ..frame.clone()
                },
                done(last),
            ],
            "error" => vec![done(last)],
            RESUMED => Vec::new(),
            _ if self.modes.runs => vec![Frame {
                id: frame
                    .id
                    .map(|id| (run.base + (id + 1).saturating_mul(FRAME_ROOM)).min(last - 2)),
                ..frame.clone()
            }],
            _ => Vec::new(),
        };
        told.into_iter()
            .filter(|f| self.modes.runs || (self.modes.lifecycle && f.event == "metadata"))
            .filter(|f| f.id.zip(self.since).is_none_or(|(id, since)| id > since))
            .map(Told::Joined)
            .collect()
    }

    fn failed(&self, why: String) -> Told {
        Told::Joined(Frame::root(
            "error",
            json!({"error": "StreamFailed", "message": format!("{why}: join again with Last-Event-ID")}),
            None,
        ))
    }
}

/// `GET /threads/{thread_id}/stream` in the API document.
pub(super) fn join_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Join a thread: its runs as LangGraph's events; with an upgrade, its socket")
        .description(
            "Without `Upgrade`: LangGraph's join of a thread — each run still going or started \
             after, in its own stream modes between its `metadata` and its \
             `{\"status\": \"run_done\"}`; after `Last-Event-ID`, every run after it; open \
             until the client goes. With `Upgrade: websocket`: the thread's socket, as \
             `GET /threads/{thread_id}/stream/events`.",
        )
        .response_with::<200, EventStream<RunStreamEvent>, _>(|r| {
            r.description("The thread's runs' events")
        });
    answers(
        op,
        &[
            (400, "The Last-Event-ID header is not an event's id"),
            (404, "The key has no thread of that id"),
            (422, "A stream mode is not a thread's, named"),
        ],
    )
}

/// `GET /threads/{thread_id}/stream`.
pub async fn join(
    State(state): State<AppState>,
    caller: Caller,
    trace: CallerTrace,
    Path(thread): Path<String>,
    MaybeUpgrade(upgrade): MaybeUpgrade,
    ListQuery(query): ListQuery<JoinThreadQuery>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    if let Some(upgrade) = upgrade {
        return Ok(thread_socket::serve(state, caller, trace, thread, upgrade));
    }
    let modes = JoinModes::read(&query)?;
    let since = joined_after(&headers)?;
    own_thread(&state, &caller, &thread).await?;
    let ended = match since {
        Some(_) => HashSet::new(),
        None => jobs_of(&state, caller.name(), &thread)
            .await?
            .into_iter()
            .filter(|job| job.state.is_terminal())
            .map(|job| job.id)
            .collect(),
    };
    let telling = Join {
        modes,
        since,
        ended,
    };
    let follow = ThreadFollow::new(&state, caller, thread, telling)?;
    Ok(EventStream::<RunStreamEvent>::new(sse_answer(&state, follow)).into_response())
}
