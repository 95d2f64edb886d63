//! A response's event stream as the client reads it: its job's feed told
//! by the [`Translator`], from `response.created` to the job's end — or to
//! its park on calls of the caller's tools, which the stream hands over
//! and ends with (`response.completed`), as the non-streamed response
//! does. A stream of a view (`resp_<job>.<n>`, a resumed job) tells only
//! what followed the view's event.

use std::convert::Infallible;

use axum::response::sse::{Event as SseEvent, KeepAlive, Sse};
use futures::{Stream, StreamExt};
use serde_json::json;

use super::super::AppState;
use super::super::caller_tools;
use super::super::feed::{Feed, Item, Step, Stepper, batches};
use super::View;
use super::object::response;
use super::stream::{Frame, Translator};
use crate::queue::{Job, JobState};

/// The job's Responses event stream from its feed, after event `after` of
/// the stream (the client's `starting_after`), named as `view`.
pub fn event_stream(
    state: &AppState,
    job: Job,
    feed: Feed,
    after: Option<u64>,
    view: View,
) -> Sse<impl Stream<Item = Result<SseEvent, Infallible>> + use<>> {
    let answer = super::super::answer::answer_stream(state, &job);
    let mut translator = Translator::new(job.id.as_str(), answer, after)
        .handing_over(job.controls.caller_tools.iter().map(|t| t.name.clone()));
    let mut fresh = job.clone();
    fresh.state = JobState::Queued;
    fresh.result = None;
    let first = translator.start(view.name(response(&fresh, &[])));
    let frames = Frames {
        state: state.clone(),
        feed,
        translator,
        job,
        view,
    };
    let body = batches(frames);
    let events = futures::stream::iter(first).chain(body).map(|frame| {
        Ok(SseEvent::default()
            .event(frame.kind)
            .data(frame.body.to_string()))
    });
    Sse::new(events).keep_alive(KeepAlive::default())
}

/// A response's stream between its frames.
struct Frames {
    state: AppState,
    feed: Feed,
    translator: Translator,
    /// The job as the stream started (its id).
    job: Job,
    view: View,
}

impl Stepper for Frames {
    type Sent = Frame;

    async fn step(&mut self) -> Step<Frame> {
        loop {
            let frames = match self.feed.next().await {
                Some(Item::Token(token)) => {
                    self.translator
                        .token(&token.run_id, token.turn, &token.text)
                }
                Some(Item::Event { seq, json }) => {
                    let mut frames = self.translator.stored(seq, &json);
                    if self.translator.at_park() {
                        match caller_tools::waiting_since(&self.state, &self.job.id, seq).await {
                            Ok(Some(parked)) => {
                                frames.extend(self.hand_over(&parked));
                                return Step::Last(frames);
                            }
                            Ok(None) => {}
                            Err(e) => {
                                frames.push(lost(&e.message));
                                return Step::Last(frames);
                            }
                        }
                    }
                    frames
                }
                Some(Item::Progress(_)) => continue,
                Some(Item::End(job)) => {
                    let view = &self.view;
                    let frames = self
                        .translator
                        .end(&job, |items| view.name(response(&job, items)));
                    return Step::Last(frames);
                }
                None => {
                    let why = "lost the job's feed (the store could not be read)";
                    return Step::Last(vec![lost(why)]);
                }
            };
            if !frames.is_empty() {
                return Step::More(frames);
            }
        }
    }
}

impl Frames {
    /// The calls `parked` waits on, handed over, and the completed
    /// response that ends with them.
    fn hand_over(&mut self, parked: &Job) -> Vec<Frame> {
        let calls = caller_tools::awaited(parked).unwrap_or_default();
        let view = &self.view;
        self.translator
            .hand_over(calls, |items| view.name(response(parked, items)))
    }
}

/// The `error` event of a stream that cannot go on: why, and how to pick
/// it up again.
fn lost(why: &str) -> Frame {
    let message = format!("{why}; retrieve the response again with starting_after");
    let body = json!({"type": "error", "code": "server_error", "param": null, "message": message});
    Frame {
        kind: "error",
        body,
    }
}
