//! What a route reads, in the API document: each request extractor says
//! what its part of the request is (a [`JsonBody`]'s type is the body, a
//! [`Query`]'s fields the query parameters, [`Caller`] the key and the
//! 401/403 it may answer), so a route cannot describe one body and read
//! another.

use aide::OperationInput;
use aide::generate::GenContext;
use aide::openapi::{
    self, Operation, ParameterSchemaOrContent, RequestBody, StatusCode as DocStatus,
};
use aide::operation::{ParamLocation, add_parameters, parameters_from_schema, set_body};
use indexmap::IndexMap;
use schemars::JsonSchema;
use schemars::transform::Transform;
use serde_json::Value;

use super::super::auth::Caller;
use super::super::body::{JsonBody, JsonList, ListQuery, Path, Query, WireBody};
use super::super::trace_context::CallerTrace;
use super::bounds::IntegerBounds;
use super::shapes::{API_KEY, BEARER, errors, header, json_media, require};

/// The caller's key: the route takes it as a bearer token or in
/// `X-Api-Key`, and answers 401 without a key and 403 without the scope.
impl OperationInput for Caller {
    fn operation_input(_: &mut GenContext, operation: &mut Operation) {
        require(operation, BEARER);
        require(operation, API_KEY);
    }

    fn inferred_early_responses(
        ctx: &mut GenContext,
        _: &mut Operation,
    ) -> Vec<(Option<DocStatus>, openapi::Response)> {
        errors(
            ctx,
            &[
                (401, "No API key, or one the daemon does not know"),
                (403, "The key lacks the route's scope or the bundle"),
            ],
        )
    }
}

/// A JSON body of `T`; no body at all reads as `{}` (so it is optional
/// where every field is).
impl<T: JsonSchema> OperationInput for JsonBody<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        json_request_body::<T>(ctx, operation);
    }

    fn inferred_early_responses(
        ctx: &mut GenContext,
        _: &mut Operation,
    ) -> Vec<(Option<DocStatus>, openapi::Response)> {
        errors(
            ctx,
            &[
                (400, "The body could not be read"),
                (
                    422,
                    "The body is not what the route reads: `field` names what is wrong",
                ),
            ],
        )
    }
}

/// A JSON body that is a list of `T`s.
impl<T: JsonSchema> OperationInput for JsonList<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        json_request_body::<Vec<T>>(ctx, operation);
    }

    fn inferred_early_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<DocStatus>, openapi::Response)> {
        JsonBody::<T>::inferred_early_responses(ctx, operation)
    }
}

/// A JSON body of `T` that the handler reads itself: its refusals are the
/// handler's own (its route's document says them).
impl<T: JsonSchema> OperationInput for WireBody<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        json_request_body::<T>(ctx, operation);
    }
}

/// `T` as the operation's JSON request body: required when `T` has
/// required fields, described by `T`'s own description.
pub(in crate::api) fn json_request_body<T: JsonSchema>(
    ctx: &mut GenContext,
    operation: &mut Operation,
) {
    let schema = ctx.schema.subschema_for::<T>();
    let resolved = ctx.resolve_schema(&schema);
    let description = resolved
        .get("description")
        .and_then(Value::as_str)
        .map(String::from);
    let required = refuses_empty(ctx, resolved);
    set_body(
        ctx,
        operation,
        RequestBody {
            description,
            content: IndexMap::from_iter([("application/json".into(), json_media(schema))]),
            required,
            extensions: IndexMap::default(),
        },
    );
}

/// Whether `{}` (what a body-less request reads as) fails `schema`: it
/// requires a field, or every one of its alternatives does, or any part of
/// it does. Such a body is required in the document.
fn refuses_empty(ctx: &GenContext, schema: &schemars::Schema) -> bool {
    let schema = ctx.resolve_schema(schema);
    let parts = |keyword: &str| -> Vec<schemars::Schema> {
        schema
            .get(keyword)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(|part| schemars::Schema::try_from(part.clone()).ok())
            .collect()
    };
    let own = schema
        .get("required")
        .and_then(Value::as_array)
        .is_some_and(|r| !r.is_empty());
    let every = |keyword: &str| {
        let alternatives = parts(keyword);
        !alternatives.is_empty() && alternatives.iter().all(|p| refuses_empty(ctx, p))
    };
    own || every("oneOf") || every("anyOf") || parts("allOf").iter().any(|p| refuses_empty(ctx, p))
}

/// Each field of `T` as a parameter at `location`.
fn add_fields_as<T: JsonSchema>(
    ctx: &mut GenContext,
    operation: &mut Operation,
    location: ParamLocation,
) {
    let schema = ctx.schema.subschema_for::<T>();
    let mut params = parameters_from_schema(ctx, schema, location);
    for param in &mut params {
        if let ParameterSchemaOrContent::Schema(schema) = &mut param.parameter_data_mut().format {
            IntegerBounds.transform(&mut schema.json_schema);
        }
    }
    add_parameters(ctx, operation, params);
}

/// Path parameters: their names come from the route's template
/// ([`fill_path_parameters`]); a struct of named fields describes them.
impl<T: JsonSchema> OperationInput for Path<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        add_fields_as::<T>(ctx, operation, ParamLocation::Path);
    }

    fn inferred_early_responses(
        ctx: &mut GenContext,
        _: &mut Operation,
    ) -> Vec<(Option<DocStatus>, openapi::Response)> {
        errors(ctx, &[(404, "Nothing by that name that the key may see")])
    }
}

// Alike in shape to `Path`'s impl above, kept apart: each says where its
// extractor's fields go and the error its own rejection answers.
/// Query parameters: each field of `T`.
impl<T: JsonSchema> OperationInput for Query<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        add_fields_as::<T>(ctx, operation, ParamLocation::Query);
    }

    fn inferred_early_responses(
        ctx: &mut GenContext,
        _: &mut Operation,
    ) -> Vec<(Option<DocStatus>, openapi::Response)> {
        errors(
            ctx,
            &[(
                422,
                "A query parameter is unknown or does not parse: `field` names it",
            )],
        )
    }
}

/// Query parameters read leniently (lists as repeated keys): each field
/// of `T`, as for [`Query`].
impl<T: JsonSchema> OperationInput for ListQuery<T> {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        Query::<T>::operation_input(ctx, operation);
    }

    fn inferred_early_responses(
        ctx: &mut GenContext,
        operation: &mut Operation,
    ) -> Vec<(Option<DocStatus>, openapi::Response)> {
        Query::<T>::inferred_early_responses(ctx, operation)
    }
}

/// The caller's W3C trace context headers.
impl OperationInput for CallerTrace {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        let params = [
            header(
                "traceparent",
                "W3C trace context: the job's spans join the caller's trace",
            ),
            header(
                "tracestate",
                "W3C trace context: the vendors' state sent with `traceparent`, carried by the job's spans (one that is not W3C trace context is left out)",
            ),
        ];
        add_parameters(ctx, operation, params);
    }
}
