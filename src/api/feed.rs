//! A job's feed as the wires open it: [`crate::follow`]'s feed of the job,
//! read from this daemon's queue and live hub, holding one of the caller's
//! stream permits until it is dropped; and the wait for a job's end, for
//! the wires that answer with the finished job; and [`batches`], a wire's
//! reader of a feed turned into the stream of what it sends.

use std::future::Future;
use std::sync::Arc;

use futures::{Stream, StreamExt};

use super::AppState;
use super::admission::{Submission, admit};
use super::auth::Caller;
use super::error::{ApiError, ErrorCode};
use super::limits::StreamPermit;
use crate::follow::WaitError;
use crate::queue::{Job, JobId};

pub use crate::follow::{Feed, Item, MIN_RECHECK, approval_required};

/// Where this daemon's feeds read a job from.
fn source(state: &AppState) -> crate::follow::Source {
    crate::follow::Source {
        queue: state.queue.clone(),
        live: state.live.clone(),
        recheck: state.sse_recheck,
    }
}

/// Follows job `id` from its first event, taken before the job is queued
/// so that its first model call already streams; counted against the
/// caller's streams (chat completions and the Responses API).
pub fn listen_first(state: &AppState, caller: &Caller, id: &JobId) -> Result<Feed, ApiError> {
    let permit = state.streams.acquire(caller.name())?;
    Ok(Box::pin(job_feed(
        state.clone(),
        id.clone(),
        0,
        false,
        permit,
    )))
}

/// The feed of job `id` from the event after `after` ([`crate::follow::job_feed`]),
/// holding `permit` and ended when its key is revoked.
pub fn job_feed(
    state: AppState,
    id: JobId,
    after: u64,
    calls: bool,
    permit: StreamPermit,
) -> impl Stream<Item = Item> {
    let hold = crate::follow::Hold {
        revoked: permit.revoked(),
        held: permit,
    };
    crate::follow::job_feed(source(&state), id, after, calls, hold)
}

/// The feed of job `id` from its first event for a stream that follows
/// several jobs in turn under one permit (a thread's event stream, run
/// after run): each feed holds it, and it is given back with the last.
pub fn shared_feed(state: &AppState, id: JobId, permit: &Arc<StreamPermit>) -> Feed {
    let hold = crate::follow::Hold {
        revoked: permit.revoked(),
        held: Arc::clone(permit),
    };
    Box::pin(crate::follow::job_feed(source(state), id, 0, false, hold))
}

/// Admits a job and waits until it is finished or parked: a synchronous
/// caller's answer (see [`wait_finished`]).
pub(super) async fn run_to_end(
    state: &AppState,
    caller: &Caller,
    submission: Submission,
) -> Result<Job, ApiError> {
    let (job, _) = admit(state, caller, submission).await?;
    wait_finished(state, &job.id).await
}

/// Waits until the job is finished, or parked for a person
/// ([`crate::follow::wait_finished`] on this daemon's queue).
pub(super) async fn wait_finished(state: &AppState, id: &JobId) -> Result<Job, ApiError> {
    crate::follow::wait_finished(state.queue.as_ref(), id, state.sse_recheck)
        .await
        .map_err(|e| match e {
            WaitError::Queue(e) => e.into(),
            WaitError::Vanished(_) => ApiError::new(ErrorCode::NotFound, e.to_string()),
        })
}

/// What a wire's reader of a feed sends next: a batch, and whether more
/// follow.
pub(super) enum Step<T> {
    More(Vec<T>),
    Last(Vec<T>),
}

/// A wire's reader of a job's feed (chat completions' chunks, the
/// Responses API's frames): each step reads the feed up to its next batch.
pub(super) trait Stepper: Send + 'static {
    /// What the wire sends (an SSE event, a frame).
    type Sent: Send + 'static;
    /// Reads the feed up to the next batch to send.
    fn step(&mut self) -> impl Future<Output = Step<Self::Sent>> + Send;
}

/// Everything `stepper` sends, batch after batch, through its last.
pub(super) fn batches<S: Stepper>(stepper: S) -> impl Stream<Item = S::Sent> + Send {
    futures::stream::unfold(Some(stepper), |stepper| async move {
        let mut stepper = stepper?;
        match stepper.step().await {
            Step::More(sent) => Some((sent, Some(stepper))),
            Step::Last(sent) => Some((sent, None)),
        }
    })
    .flat_map(futures::stream::iter)
}
