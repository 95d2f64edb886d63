//! A park on calls of the caller's tools, as the stream tells it: the
//! `function_call` items handed over and the response completed with
//! them — where the stream ends, as the non-streamed response does.

use serde_json::{Value, json};

use super::super::items;
use super::super::object::ResponseObject;
use super::{Frame, Position, Translator, as_json, step};
use crate::approval::CallerCall;

impl Translator {
    /// Whether the last stored event parked the job in `needs_attention`:
    /// where a stream looks whether the job now waits for the client (see
    /// [`Translator::hand_over`]).
    pub fn at_park(&self) -> bool {
        self.at_park
    }

    /// The job parked here. Nothing is sent at a park but the calls it
    /// hands over, numbered past the step bits when there are many; a
    /// client that resumes from here has what this translator has sent:
    /// all of the answer so far, and the message if it is open.
    pub(super) fn parked(&mut self) {
        self.at_park = true;
        let resumes_here = self
            .after
            .is_some_and(|after| Position::of(after).stored == self.stored);
        if resumes_here {
            self.client_text = self.text.len() as u64;
            self.client_opened = self.message.is_some();
            self.client_has_part = self.client_opened;
        }
    }

    /// The job waits on the caller's `calls` since the park just read: a
    /// `function_call` item for each (`response.output_item.added`,
    /// `response.function_call_arguments.delta` and `.done`,
    /// `response.output_item.done`), then `response.completed` with
    /// `response` (built by the caller from [`Translator::items`], as the
    /// non-streamed response ends with the same items).
    pub fn hand_over(
        &mut self,
        calls: &[CallerCall],
        response: impl FnOnce(&[Value]) -> ResponseObject,
    ) -> Vec<Frame> {
        let mut frames = Vec::new();
        for call in calls {
            let item = items::function_call(call);
            let index = self.items.len();
            self.items.push(item.clone());
            let (id, arguments) = (item["id"].clone(), item["arguments"].clone());
            let mut added = item.clone();
            added["arguments"] = json!("");
            added["status"] = json!("in_progress");
            let steps = [
                (
                    "response.output_item.added",
                    json!({"output_index": index, "item": added}),
                ),
                (
                    "response.function_call_arguments.delta",
                    json!({"item_id": id, "output_index": index, "delta": arguments}),
                ),
                (
                    "response.function_call_arguments.done",
                    json!({"item_id": id, "output_index": index, "name": call.tool,
                           "arguments": arguments}),
                ),
                (
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ),
            ];
            for (kind, body) in steps {
                frames.extend(self.frame(step::HANDED_OVER, kind, body));
            }
        }
        let body = response(&self.items);
        frames.extend(self.frame(
            step::HANDED_OVER,
            "response.completed",
            json!({"response": as_json(&body)}),
        ));
        frames
    }
}
