//! The pieces every part of the API document is made of: an error answer
//! of the API's shape (or a wire's own), JSON and event-stream media, a
//! header a handler reads, the security a route requires, and a body field
//! that is a JSON object or its text.

use aide::generate::GenContext;
use aide::openapi::{
    self, MediaType, Operation, Parameter, ParameterData, ParameterSchemaOrContent, SchemaObject,
    StatusCode as DocStatus,
};
use indexmap::IndexMap;
use schemars::{JsonSchema, Schema, SchemaGenerator, json_schema};

use super::super::error::ErrorBody;
use super::stream::{json_text, sse_event};

/// The name of the bearer-token scheme every authenticated route takes.
pub(in crate::api) const BEARER: &str = "bearer";
/// The name of the `X-Api-Key` scheme every authenticated route takes as
/// well (the same key, in the header LangGraph's SDKs send).
pub(in crate::api) const API_KEY: &str = "api_key";

/// A body field read as a JSON object, or its text (`null` is none): a tool
/// run's `arguments`, a verify's `exchange`. What another value means is
/// the route's to say, beside its field.
pub(in crate::api) fn object_or_text(_: &mut SchemaGenerator) -> Schema {
    json_schema!({"oneOf": [{"type": "object"}, {"type": "string"}, {"type": "null"}]})
}

/// An error answer whose body is `E`.
pub(super) fn shaped_error<E: JsonSchema>(
    ctx: &mut GenContext,
    description: &str,
) -> openapi::Response {
    let schema = ctx.schema.subschema_for::<E>();
    answer_of(description, "application/json", schema)
}

/// An answer of `media_type` whose body `schema` describes.
pub(in crate::api) fn answer_of(
    description: &str,
    media_type: &str,
    schema: schemars::Schema,
) -> openapi::Response {
    openapi::Response {
        description: description.into(),
        content: IndexMap::from_iter([(media_type.into(), json_media(schema))]),
        ..openapi::Response::default()
    }
}

/// An error answer of the API's shape, described once.
pub(super) fn error_response(ctx: &mut GenContext, description: &str) -> openapi::Response {
    let schema = ctx.schema.subschema_for::<ErrorBody>();
    answer_of(description, "application/json", schema)
}

pub(super) fn errors(
    ctx: &mut GenContext,
    codes: &[(u16, &str)],
) -> Vec<(Option<DocStatus>, openapi::Response)> {
    codes
        .iter()
        .map(|(code, description)| {
            (
                Some(DocStatus::Code(*code)),
                error_response(ctx, description),
            )
        })
        .collect()
}

/// JSON described by `schema`.
pub(in crate::api) fn json_media(schema: schemars::Schema) -> MediaType {
    MediaType {
        schema: Some(SchemaObject {
            json_schema: schema,
            example: None,
            external_docs: None,
        }),
        ..MediaType::default()
    }
}

/// A stream of Server-Sent Events, each an unnamed event whose `data` is
/// the JSON text of `data` (a wire that streams the same message type it
/// answers with: A2A's responses, MCP's server messages).
pub(in crate::api) fn json_events(description: &str, data: schemars::Schema) -> MediaType {
    json_media(sse_event(None, description, json_text(data)))
}

/// An optional string header a handler reads itself (from its `HeaderMap`).
pub(in crate::api) fn header(name: &str, description: &str) -> Parameter {
    header_of(name, description, json_schema!({"type": "string"}), false)
}

/// A header a handler reads itself, its values those `schema` allows
/// (what the handler refuses, the schema must refuse too).
pub(in crate::api) fn header_of(
    name: &str,
    description: &str,
    schema: schemars::Schema,
    required: bool,
) -> Parameter {
    Parameter::Header {
        parameter_data: parameter_data(name, Some(description), schema, required),
        style: openapi::HeaderStyle::Simple,
    }
}

/// What every parameter says of itself: its name, what it is, whether it
/// must be sent, and the schema of its values.
pub(super) fn parameter_data(
    name: &str,
    description: Option<&str>,
    schema: schemars::Schema,
    required: bool,
) -> ParameterData {
    ParameterData {
        name: name.into(),
        description: description.map(String::from),
        required,
        format: ParameterSchemaOrContent::Schema(SchemaObject {
            json_schema: schema,
            example: None,
            external_docs: None,
        }),
        extensions: IndexMap::default(),
        deprecated: None,
        example: None,
        examples: IndexMap::default(),
        explode: None,
    }
}

/// `operation` admits a caller that satisfies `scheme` (one of its
/// requirements, each enough alone).
pub(super) fn require(operation: &mut Operation, scheme: &str) {
    let requirement = IndexMap::from_iter([(scheme.to_string(), Vec::new())]);
    if !operation.security.contains(&requirement) {
        operation.security.push(requirement);
    }
}
