//! The API document (`GET /v1/openapi.json`), generated from the routes:
//! each route's extractors say what it reads (a [`JsonBody`]'s type is the
//! request body, a [`Query`]'s fields the query parameters, [`Caller`] the
//! key and the 401/403 it may answer) and its answer type what it writes,
//! through `aide` over the same `schemars` schemas the config uses. A route
//! cannot describe one body and read another: the type is the one both use.
//!
//! What a type cannot say — a route's summary, a status its handler
//! answers beside its success — is said once where the route is made
//! (a `*_doc` function beside each handler, with [`TransformOperation`]).
//! Nothing is described by hand: `/mcp`, a service of rmcp's, is described
//! from rmcp's message types (`mcp/doc.rs`).

mod bounds;
mod inputs;
mod shapes;
mod stream;

use aide::OperationOutput;
use aide::generate::GenContext;
use aide::openapi::{
    self, ApiKeyLocation, Info, OpenApi, Operation, Parameter, ReferenceOr, SecurityScheme,
    StatusCode as DocStatus,
};
use aide::operation::add_parameters;
use aide::transform::{TransformOpenApi, TransformOperation};
use indexmap::IndexMap;
use schemars::{JsonSchema, json_schema};
use serde_json::Value;

use super::error::{ApiError, ErrorBody};
use bounds::IntegerBounds;

pub(super) use inputs::json_request_body;
pub(super) use shapes::{
    API_KEY, BEARER, answer_of, header, header_of, json_events, json_media, object_or_text,
};
use shapes::{error_response, parameter_data, require, shaped_error};
pub(super) use stream::{EventStream, also_streams, json_text, sse_event};

/// The name of the control file's reload-key scheme (`POST /v1/reload`).
const RELOAD_KEY: &str = "reload_key";

/// Routes the document spells other than axum declares them: the tool run
/// `…/tools/{tool}:run` is one path segment taken apart by its handler
/// (`api/tool_run.rs`: axum captures whole segments).
const SPELLED: [(&str, &str); 1] = [(
    "/v1/bundles/{name}/tools/{tool_run}",
    "/v1/bundles/{name}/tools/{tool}:run",
)];

/// The document's frame: what the API is and how a caller authenticates.
pub(super) fn frame() -> OpenApi {
    let mut api = OpenApi {
        info: Info {
            title: "structured-agents".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            description: Some(
                "Runs LLM tool-calling agents as durable jobs. All /v1 and /api routes and /mcp \
                 require an API key (docs/security.md) as `Authorization: Bearer <token>` or in \
                 `X-Api-Key` unless no \
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
    components.security_schemes.insert(
        API_KEY.into(),
        ReferenceOr::Item(SecurityScheme::ApiKey {
            location: ApiKeyLocation::Header,
            name: "X-Api-Key".into(),
            description: Some(
                "The same API key in the header LangGraph's SDKs send (a bearer token wins \
                 when both are sent)."
                    .into(),
            ),
            extensions: IndexMap::default(),
        }),
    );
    components.security_schemes.insert(
        RELOAD_KEY.into(),
        ReferenceOr::Item(SecurityScheme::ApiKey {
            location: ApiKeyLocation::Header,
            name: crate::control::RELOAD_KEY_HEADER.into(),
            description: Some(
                "The control file's reload key (docs/security.md), taken by POST /v1/reload \
                 alone: a local operator applies an edit of the keys themselves."
                    .into(),
            ),
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
    aide::generate::in_context(|ctx| {
        let settings = ctx.schema.settings().clone().with_transform(IntegerBounds);
        ctx.schema = schemars::SchemaGenerator::new(settings);
    });
    aide::generate::infer_responses(true);
    aide::generate::on_error(|e| {
        // A `*_doc` function's `response_with` replaces the success aide
        // inferred from the handler's answer type, to describe it: aide
        // reports each replacement, and none is a fault.
        if matches!(e, aide::Error::ResponseExists(_)) {
            return;
        }
        tracing::error!(error = %e, "the API document could not describe a route");
    });
}

/// What no single route says, added to every route's operations once the
/// routes are in (before their schemas are gathered into the components):
/// the path parameters of each template and what the request layer
/// answers.
pub(super) fn complete(mut api: TransformOpenApi<'_>) -> TransformOpenApi<'_> {
    respell(api.inner_mut());
    fill_path_parameters(api.inner_mut());
    aide::generate::in_context(|ctx| request_layer_answers(ctx, api.inner_mut()));
    api
}

/// The document as served (`probes` serializes it once).
pub(super) fn served(api: &OpenApi) -> Value {
    serde_json::to_value(api).unwrap_or(Value::Null)
}

/// Each route of [`SPELLED`] under the path the document gives it.
fn respell(api: &mut OpenApi) {
    let Some(paths) = api.paths.as_mut() else {
        return;
    };
    for (declared, spelled) in SPELLED {
        if let Some(item) = paths.paths.shift_remove(declared) {
            paths.paths.insert(spelled.to_string(), item);
        }
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
            let json_rpc = operation.extensions.contains_key(ERRORS_AS_JSON_RPC);
            let responses = operation.responses.get_or_insert_with(Default::default);
            for (code, description) in layer {
                if json_rpc && code == 415 {
                    continue;
                }
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

/// The parameter names of a route's template: `{name}`, `{*rest}`, and
/// one followed by a literal suffix (`{tool}:run`).
fn template_names(route: &str) -> Vec<String> {
    route
        .split('/')
        .filter_map(|segment| segment.strip_prefix('{')?.split_once('}'))
        .map(|(name, _)| name.trim_start_matches('*').to_string())
        .collect()
}

fn path_parameter(name: &str) -> Parameter {
    Parameter::Path {
        parameter_data: parameter_data(name, None, json_schema!({"type": "string"}), true),
        style: openapi::PathStyle::Simple,
    }
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
    codes: &[(u16, &str)],
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

/// The statuses a route's handler answers in an error shape of its own,
/// `E` (a wire's, such as OpenAI's). Where the route's key check or
/// extractors already answer the same status in the API's shape, the
/// answer is either.
pub(super) fn answers_in<'t, E: JsonSchema>(
    mut op: TransformOperation<'t>,
    codes: &[(u16, &'static str)],
) -> TransformOperation<'t> {
    let responses = op
        .inner_mut()
        .responses
        .get_or_insert_with(Default::default);
    for (code, description) in codes {
        let mut own = aide::generate::in_context(|ctx| shaped_error::<E>(ctx, description));
        let status = DocStatus::Code(*code);
        if let Some(ReferenceOr::Item(api)) = responses.responses.get(&status) {
            own = either(api, own, &E::schema_name());
        }
        responses.responses.insert(status, ReferenceOr::Item(own));
    }
    op
}

/// One answer for a status that comes in either of two error shapes: the
/// API's, or the one named `shape`.
fn either(api: &openapi::Response, own: openapi::Response, shape: &str) -> openapi::Response {
    let schema = |response: &openapi::Response| {
        response
            .content
            .get("application/json")
            .and_then(|m| m.schema.as_ref())
            .map(|s| s.json_schema.clone())
    };
    let (Some(first), Some(second)) = (schema(api), schema(&own)) else {
        return own;
    };
    let any_of = schemars::json_schema!({"anyOf": [first, second]});
    openapi::Response {
        description: format!("{}; or, as {shape}: {}", api.description, own.description),
        content: IndexMap::from_iter([("application/json".into(), json_media(any_of))]),
        ..openapi::Response::default()
    }
}

/// The 200 answer is also a stream of server-sent events
/// (`text/event-stream`), each event's `data` a JSON `T` as `data` says.
pub(super) fn event_stream<'t, T: JsonSchema>(
    mut op: TransformOperation<'t>,
    data: &str,
) -> TransformOperation<'t> {
    let payload = aide::generate::in_context(|ctx| ctx.schema.subschema_for::<T>());
    let mut text = json_text(payload);
    text.insert("description".into(), data.into());
    let event = sse_event(
        None,
        "One server-sent event (`event:`, `data:` lines); `data` is JSON text",
        text,
    );
    let responses = op
        .inner_mut()
        .responses
        .get_or_insert_with(Default::default);
    if let Some(ReferenceOr::Item(ok)) = responses.responses.get_mut(&DocStatus::Code(200)) {
        ok.content
            .insert("text/event-stream".into(), json_media(event));
    }
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

/// A route that also takes the control file's reload key (in its header)
/// instead of an API key: either requirement admits the caller.
pub(super) fn or_reload_key(mut op: TransformOperation<'_>) -> TransformOperation<'_> {
    require(op.inner_mut(), RELOAD_KEY);
    op
}

/// The operation reads the optional header `name`, whose values match
/// `pattern` (what the handler refuses, the pattern refuses).
pub(super) fn reads_header<'t>(
    mut op: TransformOperation<'t>,
    name: &str,
    description: &str,
    pattern: &str,
) -> TransformOperation<'t> {
    let schema = json_schema!({"type": "string", "pattern": pattern});
    let parameter = header_of(name, description, schema, false);
    aide::generate::in_context(|ctx| add_parameters(ctx, op.inner_mut(), [parameter]));
    op
}

/// Marks a JSON-RPC interface, which answers a body it cannot read (not
/// JSON, not a call) with a JSON-RPC error in a 200 rather than a 4xx: the
/// request layer's 415 is not said of it.
pub(super) const ERRORS_AS_JSON_RPC: &str = "x-errors-as-json-rpc";

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
        assert_eq!(
            template_names("/v1/bundles/{name}/tools/{tool}:run"),
            ["name", "tool"]
        );
    }
}
