//! A route's answer as a stream of Server-Sent Events in the API
//! document: `text/event-stream`, its schema that of one event.

use std::marker::PhantomData;

use aide::OperationOutput;
use aide::generate::GenContext;
use aide::openapi::{
    self, MediaType, Operation, ReferenceOr, SchemaObject, StatusCode as DocStatus,
};
use aide::transform::TransformOperation;
use axum::response::{IntoResponse, Response};
use indexmap::IndexMap;
use schemars::{JsonSchema, Schema, json_schema};
use serde_json::Value;

/// A success sent as Server-Sent Events (`text/event-stream`). In the
/// document (OpenAPI 3.1, which has no `itemSchema`) its schema is that of
/// one event, `E`'s: an object of the event's fields ([`sse_event`]). The
/// handler answers with this type, so the stream it sends and the one the
/// document describes are one route's.
pub(in crate::api) struct EventStream<E> {
    response: Response,
    data: PhantomData<fn() -> E>,
}

impl<E> EventStream<E> {
    pub(in crate::api) fn new(events: impl IntoResponse) -> Self {
        Self {
            response: events.into_response(),
            data: PhantomData,
        }
    }
}

impl<E> IntoResponse for EventStream<E> {
    fn into_response(self) -> Response {
        self.response
    }
}

impl<E: JsonSchema> OperationOutput for EventStream<E> {
    type Inner = E;

    fn operation_response(ctx: &mut GenContext, _: &mut Operation) -> Option<openapi::Response> {
        let (description, media) = event_stream::<E>(ctx);
        Some(openapi::Response {
            description,
            content: IndexMap::from_iter([(EVENT_STREAM.into(), media)]),
            ..openapi::Response::default()
        })
    }

    fn inferred_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<DocStatus>, openapi::Response)> {
        Self::operation_response(ctx, operation)
            .map(|response| (Some(DocStatus::Code(200)), response))
            .into_iter()
            .collect()
    }
}

const EVENT_STREAM: &str = "text/event-stream";

/// One Server-Sent Event as a client reads it: its `event` name (absent
/// on the wire for an unnamed one, which clients read as `message`), its
/// `id`, its `data` (text, described by `data`) and `retry`.
pub(in crate::api) fn sse_event(name: Option<&str>, description: &str, data: Schema) -> Schema {
    let event = match name {
        Some(name) => json_schema!({"type": "string", "const": name}),
        None => json_schema!({"type": "string"}),
    };
    json_schema!({
        "type": "object",
        "description": description,
        "required": ["data"],
        "properties": {
            "event": event,
            "id": {"type": "string"},
            "data": data,
            "retry": {"type": "integer"},
        },
    })
}

/// An event's `data` that is the JSON text of a `schema`.
pub(in crate::api) fn json_text(schema: Schema) -> Schema {
    json_schema!({
        "type": "string",
        "contentMediaType": "application/json",
        "contentSchema": schema,
    })
}

/// The media type of a stream of `E`s, and `E`'s description.
fn event_stream<E: JsonSchema>(ctx: &mut GenContext) -> (String, MediaType) {
    let schema = ctx.schema.subschema_for::<E>();
    let description = ctx
        .resolve_schema(&schema)
        .get("description")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let media = MediaType {
        schema: Some(SchemaObject {
            json_schema: schema,
            example: None,
            external_docs: None,
        }),
        ..MediaType::default()
    };
    (description, media)
}

/// The answer of status `code` may also be a stream of `E`s (a route
/// that streams when its request asks): `text/event-stream` beside the
/// answer's other media types.
pub(in crate::api) fn also_streams<'t, E: JsonSchema>(
    mut op: TransformOperation<'t>,
    code: u16,
) -> TransformOperation<'t> {
    let (_, media) = aide::generate::in_context(event_stream::<E>);
    let responses = op
        .inner_mut()
        .responses
        .get_or_insert_with(Default::default);
    let response = responses
        .responses
        .entry(DocStatus::Code(code))
        .or_insert_with(|| ReferenceOr::Item(openapi::Response::default()));
    if let ReferenceOr::Item(response) = response {
        response.content.insert(EVENT_STREAM.into(), media);
    }
    op
}
