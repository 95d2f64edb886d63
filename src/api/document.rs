//! The API document (`GET /v1/openapi.json`), generated from the routes:
//! each route's extractors say what it reads (a [`JsonBody`]'s type is the
//! request body, a [`Query`]'s fields the query parameters, [`Caller`] the
//! key and the 401/403 it may answer) and its answer type what it writes,
//! through `aide` over the same `schemars` schemas the config uses. A route
//! cannot describe one body and read another: the type is the one both use.
//!
//! What a type cannot say — a route's summary, a status its handler
//! answers beside its success — is said once where the route is made
//! (`api/mod.rs`, with [`TransformOperation`]). Routes not generated yet keep
//! their hand-written entries (`openapi.json`), merged under the generated
//! ones until the last route moves.

use aide::generate::GenContext;
use aide::openapi::{
    self, Info, MediaType, OpenApi, Operation, Parameter, ParameterData, ParameterSchemaOrContent,
    ReferenceOr, RequestBody, SchemaObject, SecurityScheme, StatusCode as DocStatus,
};
use aide::operation::{ParamLocation, add_parameters, parameters_from_schema, set_body};
use aide::transform::{TransformOpenApi, TransformOperation};
use aide::{OperationInput, OperationOutput};
use axum::body::Bytes;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use indexmap::IndexMap;
use schemars::JsonSchema;
use serde_json::Value;

use super::auth::Caller;
use super::body::{JsonBody, Path, Query};
use super::error::{ApiError, ErrorBody};
use super::trace_context::CallerTrace;

/// The name of the bearer-token scheme every authenticated route requires.
const BEARER: &str = "bearer";

/// The document's frame: what the API is and how a caller authenticates.
pub(super) fn frame() -> OpenApi {
    let mut api = OpenApi {
        info: Info {
            title: "structured-agents".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: Some(
                "Runs LLM tool-calling agents as durable jobs. All /v1 and /api routes and /mcp \
                 require `Authorization: Bearer <token>` (an API key, docs/security.md) unless no \
                 key is configured; each route needs a scope (docs/api.md, \"Scopes per route\"): \
                 a key without it gets 403. Quotas answer 429 with Retry-After."
                    .into(),
            ),
            ..Info::default()
        },
        ..OpenApi::default()
    };
    let components = api.components.get_or_insert_with(Default::default);
    components.security_schemes.insert(
        BEARER.into(),
        ReferenceOr::Item(SecurityScheme::Http {
            scheme: "bearer".into(),
            bearer_format: None,
            description: Some("An API key from the keys file (docs/security.md).".into()),
            extensions: IndexMap::default(),
        }),
    );
    api
}

/// Starts generating on this thread: aide's context is thread-local, and
/// every document is generated afresh (a daemon builds its router once;
/// the tests build many).
pub(super) fn begin() {
    aide::generate::reset_context();
    aide::generate::extract_schemas(true);
    aide::generate::infer_responses(true);
    aide::generate::on_error(|e| {
        tracing::error!(error = %e, "the API document could not describe a route");
    });
}

/// What no single route says, added to every route's operations once the
/// routes are in (before their schemas are gathered into the components):
/// the path parameters of each template and what the request layer
/// answers.
pub(super) fn complete(mut api: TransformOpenApi<'_>) -> TransformOpenApi<'_> {
    fill_path_parameters(api.inner_mut());
    aide::generate::in_context(|ctx| request_layer_answers(ctx, api.inner_mut()));
    api
}

/// The document as served: the generated paths, then the hand-written
/// entries of the routes not generated yet, serialized once.
pub(super) fn served(api: &OpenApi) -> Served {
    let generated = serde_json::to_value(api).unwrap_or(Value::Null);
    let document = under_hand_written(generated);
    Served(Bytes::from(document.to_string()))
}

/// The generated document over the hand-written one: an operation or
/// component the code describes replaces the hand's.
fn under_hand_written(mut generated: Value) -> Value {
    let Ok(hand) = serde_json::from_str::<Value>(include_str!("openapi.json")) else {
        return generated;
    };
    if let Some(paths) = hand["paths"].as_object() {
        for (route, item) in paths {
            let into = object_at(&mut generated, &["paths", route.as_str()]);
            for (method, operation) in item.as_object().into_iter().flatten() {
                into.entry(method.clone())
                    .or_insert_with(|| operation.clone());
            }
        }
    }
    // The routes still described by hand rely on the document-wide
    // requirement; a generated operation states its own.
    if generated.get("security").is_none() {
        generated["security"] = hand["security"].clone();
    }
    for section in ["schemas", "responses"] {
        let from = hand["components"][section].as_object().cloned();
        let into = object_at(&mut generated, &["components", section]);
        for (name, entry) in from.into_iter().flatten() {
            into.entry(name).or_insert(entry);
        }
    }
    generated
}

/// The object at `keys` in `value`, made where it is missing.
fn object_at<'v>(value: &'v mut Value, keys: &[&str]) -> &'v mut serde_json::Map<String, Value> {
    let mut at = value;
    for key in keys {
        if !at.is_object() {
            *at = Value::Object(Default::default());
        }
        at = &mut at[*key];
    }
    if !at.is_object() {
        *at = Value::Object(Default::default());
    }
    match at {
        Value::Object(map) => map,
        _ => unreachable!("made an object above"),
    }
}

/// Every `{name}` of a route is a required string path parameter: the
/// route's template says so, and no extractor need say it again (a path
/// extractor of a tuple carries no names).
fn fill_path_parameters(api: &mut OpenApi) {
    let Some(paths) = api.paths.as_mut() else {
        return;
    };
    for (route, item) in paths.paths.iter_mut() {
        let ReferenceOr::Item(item) = item else {
            continue;
        };
        let names = template_names(route);
        for operation in operations(item) {
            for name in &names {
                let declared = operation.parameters.iter().any(|p| match p {
                    ReferenceOr::Item(p) => p.parameter_data_ref().name == *name,
                    ReferenceOr::Reference { .. } => false,
                });
                if !declared {
                    operation
                        .parameters
                        .push(ReferenceOr::Item(path_parameter(name)));
                }
            }
        }
    }
}

/// What the request layer answers before any route sees a body
/// (`serve.rs`'s body limit and deadline, `guard::json_only`): every
/// operation that takes a body may answer them.
fn request_layer_answers(ctx: &mut GenContext, api: &mut OpenApi) {
    let Some(paths) = api.paths.as_mut() else {
        return;
    };
    let layer = [
        (408, "The body did not arrive within server.body_timeout"),
        (413, "The body exceeds server.max_body_bytes"),
        (
            415,
            "A body that is not application/json (send none at all, or JSON)",
        ),
    ];
    for (_, item) in paths.paths.iter_mut() {
        let ReferenceOr::Item(item) = item else {
            continue;
        };
        let writes = [&mut item.post, &mut item.put, &mut item.patch];
        for operation in writes.into_iter().flatten() {
            let responses = operation.responses.get_or_insert_with(Default::default);
            for (code, description) in layer {
                responses
                    .responses
                    .entry(DocStatus::Code(code))
                    .or_insert_with(|| ReferenceOr::Item(error_response(ctx, description)));
            }
        }
    }
}

/// Every operation of a path.
fn operations(item: &mut openapi::PathItem) -> impl Iterator<Item = &mut Operation> {
    [
        &mut item.get,
        &mut item.put,
        &mut item.post,
        &mut item.delete,
        &mut item.options,
        &mut item.head,
        &mut item.patch,
        &mut item.trace,
    ]
    .into_iter()
    .flatten()
}

fn template_names(route: &str) -> Vec<String> {
    route
        .split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.strip_suffix('}'))
        .map(|name| name.trim_start_matches('*').to_string())
        .collect()
}

fn path_parameter(name: &str) -> Parameter {
    let schema = schemars::json_schema!({"type": "string"});
    Parameter::Path {
        parameter_data: ParameterData {
            name: name.to_string(),
            description: None,
            required: true,
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
        },
        style: openapi::PathStyle::Simple,
    }
}

/// The served document, serialized once (each answer shares its bytes).
#[derive(Clone)]
pub(super) struct Served(Bytes);

impl Served {
    pub(super) fn answer(&self) -> Response {
        ([(header::CONTENT_TYPE, "application/json")], self.0.clone()).into_response()
    }
}

/// An error answer of the API's shape, described once.
fn error_response(ctx: &mut GenContext, description: &str) -> openapi::Response {
    let schema = ctx.schema.subschema_for::<ErrorBody>();
    openapi::Response {
        description: description.into(),
        content: IndexMap::from_iter([(
            "application/json".into(),
            MediaType {
                schema: Some(SchemaObject {
                    json_schema: schema,
                    example: None,
                    external_docs: None,
                }),
                ..MediaType::default()
            },
        )]),
        ..openapi::Response::default()
    }
}

fn errors(
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

/// An API error: the error shape, for the statuses a route adds with
/// [`answers`].
impl OperationOutput for ApiError {
    type Inner = ErrorBody;

    fn operation_response(ctx: &mut GenContext, _: &mut Operation) -> Option<openapi::Response> {
        Some(error_response(ctx, "An error"))
    }
}

/// The statuses a route's handler answers besides its success and what its
/// extractors already say, each with the error shape.
pub(super) fn answers<'t>(
    op: TransformOperation<'t>,
    codes: &[(u16, &'static str)],
) -> TransformOperation<'t> {
    codes.iter().fold(op, |op, (code, description)| {
        add_error(op, *code, description)
    })
}

fn add_error<'t>(
    mut op: TransformOperation<'t>,
    code: u16,
    description: &str,
) -> TransformOperation<'t> {
    let response = aide::generate::in_context(|ctx| error_response(ctx, description));
    let responses = op
        .inner_mut()
        .responses
        .get_or_insert_with(Default::default);
    responses
        .responses
        .insert(DocStatus::Code(code), ReferenceOr::Item(response));
    op
}

/// A key's quota used up (admission, on every way a job is submitted).
pub(super) const QUOTA: (u16, &str) = (
    429,
    "The key's rate limit, jobs in flight or daily budget is used up; Retry-After says when to try again",
);
/// The queue cannot take or answer now (a full disk, a PostgreSQL outage).
pub(super) const UNAVAILABLE: (u16, &str) = (
    503,
    "The queue cannot take the request now; Retry-After says when to try again",
);
/// The job is not in a state that allows the request.
pub(super) const INVALID_STATE: (u16, &str) = (409, "The job is not in a state that allows this");

/// The caller's key: the route needs the bearer scheme, and answers 401
/// without a key and 403 without the scope.
impl OperationInput for Caller {
    fn operation_input(_: &mut GenContext, operation: &mut Operation) {
        let requirement = IndexMap::from_iter([(BEARER.to_string(), Vec::new())]);
        if !operation.security.contains(&requirement) {
            operation.security.push(requirement);
        }
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
        let schema = ctx.schema.subschema_for::<T>();
        let description = ctx
            .resolve_schema(&schema)
            .get("description")
            .and_then(Value::as_str)
            .map(String::from);
        let required = ctx
            .resolve_schema(&schema)
            .get("required")
            .and_then(Value::as_array)
            .is_some_and(|r| !r.is_empty());
        set_body(
            ctx,
            operation,
            RequestBody {
                description,
                content: IndexMap::from_iter([(
                    "application/json".into(),
                    MediaType {
                        schema: Some(SchemaObject {
                            json_schema: schema,
                            example: None,
                            external_docs: None,
                        }),
                        ..MediaType::default()
                    },
                )]),
                required,
                extensions: IndexMap::default(),
            },
        );
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

/// Each field of `T` as a parameter at `location`.
fn add_fields_as<T: JsonSchema>(
    ctx: &mut GenContext,
    operation: &mut Operation,
    location: ParamLocation,
) {
    let schema = ctx.schema.subschema_for::<T>();
    let params = parameters_from_schema(ctx, schema, location);
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

/// The caller's W3C trace context headers.
impl OperationInput for CallerTrace {
    fn operation_input(ctx: &mut GenContext, operation: &mut Operation) {
        let params = [
            (
                "traceparent",
                "W3C trace context: the job's spans join the caller's trace",
            ),
            (
                "tracestate",
                "W3C trace context: the vendors' state sent with `traceparent`, carried by the job's spans (one that is not W3C trace context is left out)",
            ),
        ]
        .map(|(name, description)| Parameter::Header {
            parameter_data: ParameterData {
                name: name.into(),
                description: Some(description.into()),
                required: false,
                format: ParameterSchemaOrContent::Schema(SchemaObject {
                    json_schema: schemars::json_schema!({"type": "string"}),
                    example: None,
                    external_docs: None,
                }),
                extensions: IndexMap::default(),
                deprecated: None,
                example: None,
                examples: IndexMap::default(),
                explode: None,
            },
            style: openapi::HeaderStyle::Simple,
        });
        add_parameters(ctx, operation, params);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_routes_template_names_its_path_parameters() {
        assert_eq!(
            template_names("/v1/jobs/{id}/approvals/{call}"),
            ["id", "call"]
        );
        assert!(template_names("/v1/jobs").is_empty());
    }

    #[test]
    fn generated_entries_replace_the_hand_written_ones() {
        let generated = serde_json::json!({
            "paths": {"/v1/jobs/{id}": {"get": {"summary": "generated"}}},
        });
        let merged = under_hand_written(generated);
        assert_eq!(
            merged["paths"]["/v1/jobs/{id}"]["get"]["summary"],
            "generated"
        );
        // A route the code does not describe yet keeps its hand entry.
        assert!(merged["paths"]["/v1/chat/completions"]["post"].is_object());
        assert!(merged["components"]["schemas"]["MessageEnvelope"].is_object());
    }
}
