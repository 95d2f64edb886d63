//! A task's updates as an A2A stream (SSE, each event a JSON-RPC response):
//! first the task, then, from the job's feed (`follow`, opened by
//! `api::feed`), a status update per change of state (WORKING when an
//! attempt starts, INPUT_REQUIRED with the parked call, WORKING again once
//! decided, the final state), and the answer as chunks of the `answer`
//! artifact (the job's answer stream, the one of chat completions), closed
//! by the whole answer as its last chunk (`task::end_updates`: the answer's
//! one place, the final status carries none). The stream ends with the
//! final state, or with INPUT_REQUIRED while the job is still parked there.
//! Updates read from the store carry the event's sequence number as their
//! SSE `id:`, so `SubscribeToTask` with `Last-Event-ID` resumes after it —
//! also across a daemon restart; without it, the task's events are replayed
//! from the start, then followed live.

use std::convert::Infallible;
use std::pin::Pin;

use a2a::{
    A2AError, StreamResponse, SubscribeToTaskRequest, TaskState, TaskStatus, TaskStatusUpdateEvent,
};
use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};

use super::super::AppState;
use super::super::error::ApiError;
use super::super::feed::{Item, approval_required, job_feed};
use super::rpc::Reply;
use super::task::{self, View, context_of};
use super::{Call, RpcError, params};

use crate::access::policy::Action;
use crate::events::answer::AnswerStream;
use crate::events::{Event, EventEnvelope, JobStatus};
use crate::queue::{Job, JobId, JobState};

type Feed = Pin<Box<dyn Stream<Item = Item> + Send>>;

/// `SubscribeToTask`: the task and its updates, replayed from the start or
/// from after `Last-Event-ID`; a task that has ended has nothing to follow.
pub async fn subscribe(call: &Call, raw: Value) -> Result<Response, RpcError> {
    call.caller.require(Action::ReadJob)?;
    let request: SubscribeToTaskRequest = params("SubscribeToTask", raw)?;
    let after = super::super::sse::resume_point(&call.headers, None)?;
    let state = &call.state;
    let permit = state
        .streams
        .acquire(call.caller.name())
        .map_err(ApiError::from)?;
    let id = JobId::from(request.id);
    let job = call
        .caller
        .job(Action::ReadJob, &id, state.queue.get(&id).await?)?;
    if job.state.is_terminal() {
        return Err(A2AError::unsupported_operation(format!(
            "task {id} has ended ({}): there is nothing to subscribe to; GetTask reads it",
            job.state
        ))
        .into());
    }
    let feed = job_feed(state.clone(), id, after, false, permit);
    Ok(respond(call, job, feed))
}

/// The stream of `job` (as it is now) following `feed`.
pub fn respond(call: &Call, job: Job, feed: impl Stream<Item = Item> + Send + 'static) -> Response {
    let state = call.state.clone();
    let snapshot = task::task(
        &job,
        View {
            history_length: None,
            artifacts: false,
        },
    );
    let first = frame(&call.id, None, &StreamResponse::Task(snapshot));
    let follower = Follower {
        answer: super::super::answer::answer_stream(&state, &job),
        state: state.clone(),
        rpc_id: call.id.clone(),
        context: context_of(&job),
        job,
        feed: Box::pin(feed),
        answer_started: false,
        done: false,
    };
    let updates = futures::stream::unfold(follower, |mut f| async move {
        if f.done {
            return None;
        }
        let frames = f.next_frames().await;
        Some((frames, f))
    })
    .flat_map(futures::stream::iter);
    let events = futures::stream::once(async { first })
        .chain(updates)
        .map(Ok::<_, Infallible>);
    Sse::new(events)
        .keep_alive(
            KeepAlive::new()
                .interval(state.sse_heartbeat)
                .text("heartbeat"),
        )
        .into_response()
}

/// Follows one job's feed, turning its items into A2A updates.
struct Follower {
    state: AppState,
    rpc_id: Value,
    /// The job as the stream began (its id, bundle and context).
    job: Job,
    context: String,
    feed: Feed,
    answer: AnswerStream,
    /// Whether a chunk of the answer was sent (the next ones append).
    answer_started: bool,
    done: bool,
}

impl Follower {
    /// The frames of the feed's next items that make any.
    async fn next_frames(&mut self) -> Vec<SseEvent> {
        loop {
            let frames = match self.feed.next().await {
                Some(Item::Token(token)) => {
                    let text = self.answer.token(&token.run_id, token.turn, &token.text);
                    self.chunk(None, &text).into_iter().collect()
                }
                Some(Item::Progress(_)) => continue,
                Some(Item::Event { seq, json }) => self.stored(seq, &json).await,
                Some(Item::End(job)) => self.end(&job),
                None => {
                    self.done = true;
                    let lost = A2AError::internal(format!(
                        "lost the event log of job {}; SubscribeToTask with Last-Event-ID resumes where this stream stopped",
                        self.job.id
                    ));
                    vec![SseEvent::default().data(Reply::error(&self.rpc_id, &lost).to_json())]
                }
            };
            if !frames.is_empty() || self.done {
                return frames;
            }
        }
    }

    /// The update a stored event makes, if any, with its sequence number.
    async fn stored(&mut self, seq: u64, json: &str) -> Vec<SseEvent> {
        let Ok(envelope) = serde_json::from_str::<EventEnvelope>(json) else {
            return Vec::new();
        };
        let own = envelope.run_id == self.job.id.as_str() && envelope.parent.is_none();
        let at = task::timestamp(&envelope.timestamp);
        let status = match &envelope.event {
            Event::JobState { state, .. } if own => match state {
                JobStatus::Running => Some((TaskState::Working, None)),
                JobStatus::Retrying | JobStatus::Released => Some((TaskState::Submitted, None)),
                // Parked (its INPUT_REQUIRED went with the request): the
                // stream ends here unless it has been decided since.
                JobStatus::AwaitingApproval => {
                    self.done = still_parked(&self.state, &self.job.id, seq).await;
                    None
                }
                // The final state comes with the job's end.
                _ => None,
            },
            Event::ApprovalRequested { .. } => {
                let frame = approval_required(self.job.id.as_str(), json).unwrap_or_default();
                let message = task::approval_message(&self.job, &frame);
                Some((TaskState::InputRequired, Some(message)))
            }
            Event::ApprovalDecided {
                call_id,
                decision,
                by,
                ..
            } => {
                let text = format!("call {call_id}: {decision} (by {by}); the job goes on");
                let part = a2a::Part::text(text);
                let message =
                    task::agent_message(&self.job, &format!("decided-{call_id}"), vec![part]);
                Some((TaskState::Working, Some(message)))
            }
            _ => None,
        };
        if let Some((state, message)) = status {
            let status = TaskStatus {
                state,
                message,
                timestamp: at,
            };
            return vec![self.status(Some(seq), status)];
        }
        let text = self.answer.event(&envelope);
        self.chunk(Some(seq), &text).into_iter().collect()
    }

    /// The whole answer as the last chunk, and the final status.
    fn end(&mut self, job: &Job) -> Vec<SseEvent> {
        self.done = true;
        task::end_updates(job)
            .iter()
            .map(|update| frame(&self.rpc_id, None, update))
            .collect()
    }

    /// A chunk of the answer (nothing for empty text).
    fn chunk(&mut self, seq: Option<u64>, text: &str) -> Option<SseEvent> {
        if text.is_empty() {
            return None;
        }
        let update = task::chunk_update(&self.job, text, self.answer_started);
        self.answer_started = true;
        Some(frame(
            &self.rpc_id,
            seq,
            &StreamResponse::ArtifactUpdate(update),
        ))
    }

    fn status(&self, seq: Option<u64>, status: TaskStatus) -> SseEvent {
        let update = TaskStatusUpdateEvent {
            task_id: self.job.id.to_string(),
            context_id: self.context.clone(),
            status,
            metadata: None,
        };
        frame(&self.rpc_id, seq, &StreamResponse::StatusUpdate(update))
    }
}

/// Whether job `id` is still parked by its event `seq` (the one that
/// recorded the park, written with the job's state): a replayed park that
/// was decided since is history.
async fn still_parked(state: &AppState, id: &JobId, seq: u64) -> bool {
    let (Ok(Some(job)), Ok(last)) = (state.queue.get(id).await, state.queue.last_seq(id).await)
    else {
        return false;
    };
    job.state == JobState::AwaitingApproval && last == seq
}

/// One SSE event: a JSON-RPC response carrying `update`, with the stored
/// event's sequence number as its `id:` when it came from one.
fn frame(rpc_id: &Value, seq: Option<u64>, update: &StreamResponse) -> SseEvent {
    let body = Reply::result(rpc_id, json!(update));
    let event = SseEvent::default().data(body.to_json());
    match seq {
        Some(seq) => event.id(seq.to_string()),
        None => event,
    }
}
