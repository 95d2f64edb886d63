//! A job's answer stream as the API builds it: [`events::answer`]'s one
//! rule, told by the job's bundle's model plugin where a tool call could
//! begin in streamed text and whether the bundle offers tools. Used by
//! `/v1/chat/completions` and the runtime API's streams.
//!
//! [`events::answer`]: crate::events::answer

use std::sync::Arc;

use super::AppState;
use crate::events::answer::{AnswerStream, CallStart};
use crate::queue::Job;

/// The answer stream of `job`. A bundle that is not loaded (any more)
/// holds every turn until it is decided.
pub fn answer_stream(state: &AppState, job: &Job) -> AnswerStream {
    let snapshot = state.registry.snapshot();
    let Some(loaded) = snapshot.bundle(&job.bundle) else {
        return AnswerStream::new(job.id.as_str(), None, true);
    };
    let plugin = loaded.bundle.model.plugin.clone();
    let call_start: CallStart = Arc::new(move |text: &str| plugin.call_start(text));
    // The runtime's router is given the agent directory as tools at run
    // time; a job with the caller's tools offers those too.
    let tools_offered = !loaded.tools.is_empty()
        || snapshot.config.runtime.router == job.bundle
        || !job.controls.caller_tools.is_empty();
    AnswerStream::new(job.id.as_str(), Some(call_start), tools_offered)
}
