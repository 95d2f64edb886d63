//! `/mcp` in the API document. The endpoint is rmcp's Streamable HTTP
//! service, not a handler of ours, so its operations are described here
//! from rmcp's own message types (the ones it reads and writes): a POST
//! carries a client's JSON-RPC message, its answer a server's (as JSON, or
//! as events), a GET opens a session's event stream, a DELETE ends it.

use aide::axum::ApiRouter;
use aide::axum::routing::ApiMethodDocs;
use aide::openapi::{Operation, ReferenceOr, Response, StatusCode};
use aide::transform::TransformOperation;
use indexmap::IndexMap;
use rmcp::model::{ClientJsonRpcMessage, JsonRpcError, ServerJsonRpcMessage};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::document::{self, answers};
use super::super::error::ErrorBody;

/// `/mcp`'s operations, added to the document of `router` (which does not
/// route them: the service is nested beside it).
pub fn described(router: ApiRouter<AppState>) -> ApiRouter<AppState> {
    router
        .api_route_docs(
            "/mcp",
            ApiMethodDocs::new("post", operation(post, Session::Optional)),
        )
        .api_route_docs(
            "/mcp",
            ApiMethodDocs::new("get", operation(listen, Session::Required)),
        )
        .api_route_docs(
            "/mcp",
            ApiMethodDocs::new("delete", operation(end, Session::Required)),
        )
}

/// Whether an operation belongs to a session: a POST may open one or be
/// stateless (2026-07-28); a GET (its stream) and a DELETE (its end) need
/// one, so they need its id and speak a revision that has sessions.
#[derive(Clone, Copy, PartialEq)]
enum Session {
    Optional,
    Required,
}

/// The MCP revisions rmcp speaks; with sessions, only those that
/// negotiate one over `initialize`.
fn revisions(session: Session) -> Vec<&'static str> {
    rmcp::model::ProtocolVersion::KNOWN_VERSIONS
        .iter()
        .filter(|v| session == Session::Optional || v.has_initialize())
        .map(|v| v.as_str())
        .collect()
}

/// An operation as `doc` describes it, with the key every `/mcp` request
/// needs and the session headers.
fn operation(
    doc: fn(TransformOperation<'_>) -> TransformOperation<'_>,
    session: Session,
) -> Operation {
    let mut operation = Operation::default();
    aide::generate::in_context(|ctx| {
        <Caller as aide::OperationInput>::operation_input(ctx, &mut operation);
        let early = <Caller as aide::OperationInput>::inferred_early_responses(ctx, &mut operation);
        let responses = operation.responses.get_or_insert_with(Default::default);
        for (status, response) in early {
            if let Some(status) = status {
                responses
                    .responses
                    .insert(status, ReferenceOr::Item(response));
            }
        }
        let headers = [
            document::header_of(
                "Mcp-Session-Id",
                "The session, as `initialize` answered it (none for a 2026-07-28 client, which is stateless)",
                schemars::json_schema!({"type": "string", "pattern": "^[!-~]+$"}),
                session == Session::Required,
            ),
            document::header_of(
                "MCP-Protocol-Version",
                "The MCP revision the client speaks",
                schemars::json_schema!({"type": "string", "enum": revisions(session)}),
                false,
            ),
        ];
        aide::operation::add_parameters(ctx, &mut operation, headers);
    });
    let _ = doc(TransformOperation::new(&mut operation));
    operation
}

fn post(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let mut op = op
        .summary("MCP over Streamable HTTP: the bundles as tools")
        .description(
            "Each loaded bundle the key may use is a tool (`input`, `variables`); `tools/call` \
             runs it as a job and answers with its final answer; jobs are resources, bundles \
             prompts; `notifications/tools/list_changed` on reload (docs/api.md, Bundles as MCP \
             tools). A message that is not JSON-RPC is answered with a JSON-RPC error.",
        );
    aide::generate::in_context(|ctx| {
        let operation = op.inner_mut();
        document::json_request_body::<ClientJsonRpcMessage>(ctx, operation);
        operation.request_body = operation.request_body.take().map(|body| match body {
            ReferenceOr::Item(mut body) => {
                body.required = true;
                ReferenceOr::Item(body)
            }
            reference => reference,
        });
        let answer = ctx.schema.subschema_for::<ServerJsonRpcMessage>();
        let responses = operation.responses.get_or_insert_with(Default::default);
        responses.responses.insert(
            StatusCode::Code(200),
            ReferenceOr::Item(Response {
                description: "The server's JSON-RPC answer: as JSON, or as events (a tool call's progress and log lines, then its result)".into(),
                content: IndexMap::from_iter([
                    ("application/json".into(), document::json_media(answer.clone())),
                    (
                        "text/event-stream".into(),
                        document::json_events("Events each carrying a server JSON-RPC message", answer),
                    ),
                ]),
                ..Response::default()
            }),
        );
        responses.responses.insert(
            StatusCode::Code(202),
            ReferenceOr::Item(Response {
                description: "A notification or a response from the client, taken".into(),
                ..Response::default()
            }),
        );
        for (code, description) in [
            (
                400,
                "Not a JSON-RPC message, or a session header that does not fit the message",
            ),
            (
                404,
                "No such session (it ended or expired after server.mcp.session_idle)",
            ),
            (
                406,
                "The Accept header does not take application/json and text/event-stream",
            ),
            (413, "The body exceeds server.max_body_bytes"),
            (415, "A body that is not application/json"),
        ] {
            responses.responses.insert(
                StatusCode::Code(code),
                ReferenceOr::Item(refusal(ctx, description)),
            );
        }
    });
    answers(
        op,
        &[(
            503,
            "Too many MCP sessions open (server.mcp.max_sessions); Retry-After says when to try again",
        )],
    )
}

fn listen(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let mut op = op.summary("MCP over Streamable HTTP: a session's stream of server messages");
    aide::generate::in_context(|ctx| {
        let message = ctx.schema.subschema_for::<ServerJsonRpcMessage>();
        let operation = op.inner_mut();
        let responses = operation.responses.get_or_insert_with(Default::default);
        responses.responses.insert(
            StatusCode::Code(200),
            ReferenceOr::Item(Response {
                description: "Server-Sent Events carrying JSON-RPC messages (notifications, requests to the client)".into(),
                content: IndexMap::from_iter([(
                    "text/event-stream".into(),
                    document::json_events("Events each carrying a server JSON-RPC message", message),
                )]),
                ..Response::default()
            }),
        );
        for (code, description) in [
            (400, "No Mcp-Session-Id"),
            (404, "No such session"),
            (406, "The Accept header does not take text/event-stream"),
        ] {
            responses.responses.insert(
                StatusCode::Code(code),
                ReferenceOr::Item(refusal(ctx, description)),
            );
        }
    });
    op
}

fn end(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let mut op = op.summary(
        "MCP over Streamable HTTP: end the session named by Mcp-Session-Id (an idle one also \
         ends by itself after server.mcp.session_idle)",
    );
    aide::generate::in_context(|ctx| {
        let responses = op
            .inner_mut()
            .responses
            .get_or_insert_with(Default::default);
        responses.responses.insert(
            StatusCode::Code(200),
            ReferenceOr::Item(Response {
                description: "The session is ended".into(),
                ..Response::default()
            }),
        );
        for (code, description) in [(400, "No Mcp-Session-Id"), (404, "No such session")] {
            responses.responses.insert(
                StatusCode::Code(code),
                ReferenceOr::Item(refusal(ctx, description)),
            );
        }
    });
    op
}

/// A refusal of the transport: the API's error shape (the door reshapes
/// rmcp's plain-text ones), or a JSON-RPC error rmcp answers itself.
fn refusal(ctx: &mut aide::generate::GenContext, description: &str) -> Response {
    let api = ctx.schema.subschema_for::<ErrorBody>();
    let rpc = ctx.schema.subschema_for::<JsonRpcError>();
    Response {
        description: description.into(),
        content: IndexMap::from_iter([(
            "application/json".into(),
            document::json_media(schemars::json_schema!({"anyOf": [api, rpc]})),
        )]),
        ..Response::default()
    }
}
