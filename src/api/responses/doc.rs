//! The Responses routes in the API document: what each answers beside what
//! its extractors and types say. Their refusals are in OpenAI's shape; the
//! key's scope, the request layer and the path and query extractors answer
//! in the API's.

use aide::transform::TransformOperation;
use axum::Json;

use super::super::document::{answers_in, event_stream};
use super::super::openai::{OpenAiErrorBody, wire_quota};
use super::object::ResponseObject;
use super::shape::{ResponseDeleted, ResponseStreamEvent};

/// A response the key may not see, or one that is not there.
const NOT_VISIBLE: [(u16, &str); 2] = [
    (
        403,
        "The key may not act on the response's job (`permission_error`)",
    ),
    (
        404,
        "No response by that id that the key may see (ids are `resp_<job id>`)",
    ),
];

/// The queue cannot answer now.
const QUEUE_DOWN: (u16, &str) = (
    503,
    "The queue cannot answer now; Retry-After says when to try again",
);

/// What the stream's events carry.
const EVENTS: &str = "Each event's `data` is a Responses event whose `type` is also the \
                      event's name (`response.created` … `response.completed`)";

/// `POST /v1/responses` in the API document.
pub(in crate::api) fn create_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "OpenAI Responses API: runs the bundle named by `model` (`bundle/<name>`) as a job \
             on `input`",
        )
        .description(
            "Answered when the job ends (or parks for a person: `in_progress`), at once with \
             `background` (`queued`), or as it goes with `stream`. A response is a job \
             (`resp_<job id>`, in `/v1/jobs`); `previous_response_id` continues its \
             conversation, and `function_call_output` items answer the calls of the caller's \
             tools it handed over (docs/api.md, Responses); a stream ends with those calls \
             (`function_call` items, `response.completed`), and a streamed answer to them \
             follows the resumed job.",
        )
        .response_with::<200, Json<ResponseObject>, _>(|r| {
            r.description(
                "The `response`; with `stream: true` its Responses events \
                 (`response.created` … `response.completed`)",
            )
        });
    let op = event_stream::<ResponseStreamEvent>(op, EVENTS);
    answers_in::<OpenAiErrorBody>(
        op,
        &[
            (
                400,
                "The request cannot be answered as sent (`param` names what): a body that is \
                 not a response request, no user message, an input item that is not taken, \
                 `n` other than 1, a `tool_choice` or `text.format` the job cannot hold to, \
                 caller tools the bundle does not take, outputs that do not answer the calls \
                 of `previous_response_id`, a `previous_response_id` not of this key's",
            ),
            (
                403,
                "The key may not use the model's bundle (`permission_error`)",
            ),
            (
                404,
                "No such model (`model_not_found`): models are `bundle/<name>`",
            ),
            wire_quota(),
            (
                503,
                "The queue cannot take the request now, or the key's event streams are all \
                 open (with `stream`); Retry-After says when to try again",
            ),
        ],
    )
}

/// `GET /v1/responses/{id}` in the API document.
pub(in crate::api) fn retrieve_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "A response (a job) now; with `stream=true` its events after `starting_after`, also \
             across a daemon restart",
        )
        .response_with::<200, Json<ResponseObject>, _>(|r| {
            r.description("The `response`, or with `stream=true` its Responses events")
        });
    let op = event_stream::<ResponseStreamEvent>(op, EVENTS);
    answers_in::<OpenAiErrorBody>(
        op,
        &[
            NOT_VISIBLE[0],
            NOT_VISIBLE[1],
            (
                503,
                "The queue cannot answer now, or the key's event streams are all open (with \
                 `stream`); Retry-After says when to try again",
            ),
        ],
    )
}

/// `DELETE /v1/responses/{id}` in the API document.
pub(in crate::api) fn delete_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Deletes an ended response's job (as `DELETE /v1/jobs/{id}`)")
        .response_with::<200, Json<ResponseDeleted>, _>(|r| {
            r.description("OpenAI's deletion object")
        });
    answers_in::<OpenAiErrorBody>(
        op,
        &[
            (
                400,
                "The job has not ended (`invalid_state`): cancel the response first",
            ),
            NOT_VISIBLE[0],
            NOT_VISIBLE[1],
            QUEUE_DOWN,
        ],
    )
}

/// `POST /v1/responses/{id}/cancel` in the API document.
pub(in crate::api) fn cancel_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Cancels a response's job (as `POST /v1/jobs/{id}/cancel`)")
        .description("A running job stops at its next step; the response is then `cancelled`.")
        .response_with::<200, Json<ResponseObject>, _>(|r| {
            r.description("The `response` as the cancel left it")
        });
    answers_in::<OpenAiErrorBody>(op, &[NOT_VISIBLE[0], NOT_VISIBLE[1], QUEUE_DOWN])
}
