//! A job's feed as the wires open it: [`crate::follow`]'s feed of the job,
//! read from this daemon's queue and live hub, holding one of the caller's
//! stream permits until it is dropped.

use futures::Stream;

use super::AppState;
use super::auth::Caller;
use super::error::ApiError;
use super::limits::StreamPermit;
use crate::queue::JobId;

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
