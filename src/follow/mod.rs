//! Following a job: what every wire that streams a job or waits for it
//! reads, kept out of the wires so that each of them only translates.
//! `feed`: a job's events from the store, its live tokens and progress and
//! its end, in one order (the job's SSE stream, the runtime API's, A2A's,
//! AG-UI's, MCP's and the OpenAI-style streams all read it); `wait`: a
//! synchronous caller's wait for the job's end.
//! It knows the queue and the live hub, never HTTP: the wire hands it what
//! it holds while the feed is open (its stream permit).

mod feed;
mod wait;

pub use feed::{Feed, Hold, Item, MIN_RECHECK, Source, approval_required, job_feed};
pub use wait::{WaitError, wait_finished};
