//! The daemon as an A2A 1.0 agent (JSON-RPC binding). A task is a job; its
//! context is the job's conversation. Agent cards are at
//! `/.well-known/agent-card.json` (the daemon, a skill per bundle) and
//! `/a2a/{bundle}/.well-known/agent-card.json` (one bundle); the JSON-RPC
//! interface at `POST /a2a/{bundle}` (or `POST /a2a`, the bundle named in
//! the message's `metadata.bundle`) serves `SendMessage`,
//! `SendStreamingMessage`, `GetTask`, `ListTasks`, `CancelTask`,
//! `SubscribeToTask` and `GetExtendedAgentCard`. A message enters as any
//! job does, through admission; a message to a task that awaits approval
//! (INPUT_REQUIRED) is the decision. A task's state changes are pushed to
//! the configs set with `SendMessage` or `CreateTaskPushNotificationConfig`
//! (see [`push`]). The v0.3 method names (`message/send`, …), whose
//! payloads differ too, are not served.
//!
//! The wire types are the official `a2a-lf` crate's. The official server
//! framework (`a2a-server-lf`) is not used: its handler owns the task store
//! and the executor (a task here is a job of the queue, run by its workers
//! and resumed from its journal), it sees a request's headers but not the
//! caller that our authentication resolved, and it brings protobuf
//! (`a2a-pb`), a second `tower-http` and an HTTP client for push. So the
//! JSON-RPC envelope and its dispatch are this module's, in a few lines.

mod card;
mod list;
mod proto_names;
pub mod push;
mod rpc;
mod send;
mod stream;
mod task;

use a2a::{A2AError, GetTaskRequest, error_code};
use aide::axum::ApiRouter;
use aide::axum::routing::{get_with, post_with};
use aide::transform::TransformOperation;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::{Json, middleware};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::AppState;
use super::auth::{self, Auth, Caller};
use super::body::Path;
use super::document;
use super::error::{ApiError, ErrorCode};
use super::trace_context::CallerTrace;

use crate::access::policy::Action;
use crate::queue::JobId;
use rpc::{Envelope, Method, Reply, RpcBody};
use task::View;

/// The A2A routes: the cards (read with or without a key), and the
/// JSON-RPC interface, which authenticates like `/v1` (each method then
/// needs its scope: `submit`, `read`, `operate` or `approve`).
pub fn routes(auth: Auth) -> ApiRouter<AppState> {
    let rpc = ApiRouter::new()
        .api_route("/a2a", post_with(daemon_rpc, daemon_rpc_doc))
        // The interface URL as the A2A TCK posts to it, with a slash.
        .api_route("/a2a/", post_with(daemon_rpc, slash_doc))
        .api_route("/a2a/{bundle}", post_with(bundle_rpc, bundle_rpc_doc))
        .api_route("/a2a/{bundle}/", post_with(bundle_rpc, slash_doc))
        .route_layer(middleware::from_fn_with_state(auth, auth::authenticate_rpc));
    ApiRouter::new()
        .api_route(
            "/.well-known/agent-card.json",
            get_with(card::daemon_card, card::daemon_card_doc),
        )
        // Where a client that was given the interface URL looks for the
        // card (the A2A TCK does), as for a bundle's interface below.
        .api_route(
            "/a2a/.well-known/agent-card.json",
            get_with(card::daemon_card, card::interface_card_doc),
        )
        .api_route(
            "/a2a/{bundle}/.well-known/agent-card.json",
            get_with(card::bundle_card, card::bundle_card_doc),
        )
        .merge(rpc)
}

fn daemon_rpc_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    rpc_doc(op.summary("A2A 1.0 JSON-RPC at the daemon's card's interface").description(
        "A task is a job (docs/api.md, A2A). A message names its bundle in `metadata.bundle` \
         (with one usable bundle it may leave it out). A body that is not a JSON-RPC call is \
         answered with a JSON-RPC error.",
    ))
}

fn bundle_rpc_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    rpc_doc(op.summary("A2A 1.0 JSON-RPC at one bundle's interface").description(
        "A task is a job of the bundle (docs/api.md, A2A). A body that is not a JSON-RPC call \
         is answered with a JSON-RPC error.",
    ))
}

fn slash_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    rpc_doc(op.summary("The same interface, with the trailing slash the A2A TCK appends"))
}

/// What every JSON-RPC route reads and answers: the call, the headers it
/// honours, a response (or for the streaming methods, events that each
/// carry one), and the refusals HTTP says.
fn rpc_doc(mut op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.inner_mut()
        .extensions
        .insert(document::ERRORS_AS_JSON_RPC.into(), Value::Bool(true));
    aide::generate::in_context(|ctx| {
        let headers = [
            document::header(
                a2a::SVC_PARAM_VERSION,
                "The A2A version the client speaks: 1.x, or none (a call of another major version is refused)",
            ),
            document::header(
                "Last-Event-ID",
                "SubscribeToTask: resume after this event of the task (an SSE id)",
            ),
        ];
        aide::operation::add_parameters(ctx, op.inner_mut(), headers);
        <CallerTrace as aide::OperationInput>::operation_input(ctx, op.inner_mut());
    });
    // Outside the response's own transform, which holds aide's context.
    let data = aide::generate::in_context(|ctx| ctx.schema.subschema_for::<Reply>());
    let op = op.response_with::<200, Json<Reply>, _>(|mut r| {
        r.inner().content.insert(
            "text/event-stream".into(),
            document::json_events(
                "SendStreamingMessage and SubscribeToTask: events whose data is a JSON-RPC response carrying a StreamResponse (the task, then its status and artifact updates)",
                data,
            ),
        );
        r.description(
            "A JSON-RPC response: the method's result, or an error (also for a call that could not be read)",
        )
    });
    document::answers(op, &[document::QUOTA, document::UNAVAILABLE])
}

/// What went wrong with a call: an error of the protocol (HTTP 200 with a
/// JSON-RPC error), or a refusal that HTTP says (the key's scope: 403;
/// its quotas: 429 with `Retry-After`; a store that is down: 503).
#[derive(Debug)]
pub enum RpcError {
    Protocol(A2AError),
    Http(ApiError),
}

impl From<A2AError> for RpcError {
    fn from(e: A2AError) -> Self {
        Self::Protocol(e)
    }
}

impl From<ApiError> for RpcError {
    fn from(e: ApiError) -> Self {
        let code = match e.code {
            ErrorCode::Unauthorized
            | ErrorCode::Forbidden
            | ErrorCode::QuotaExceeded
            | ErrorCode::BudgetExhausted
            | ErrorCode::Unavailable => return Self::Http(e),
            // A job no one may see is an unknown task; an unknown
            // conversation (a field) is a bad parameter.
            ErrorCode::NotFound if e.field.is_none() => error_code::TASK_NOT_FOUND,
            ErrorCode::Internal
            | ErrorCode::JobFailed
            | ErrorCode::JobAwaitingApproval
            | ErrorCode::JobNeedsAttention => error_code::INTERNAL_ERROR,
            _ => error_code::INVALID_PARAMS,
        };
        Self::Protocol(A2AError::new(code, e.message))
    }
}

impl From<crate::queue::QueueError> for RpcError {
    fn from(e: crate::queue::QueueError) -> Self {
        ApiError::from(e).into()
    }
}

/// One JSON-RPC call: who asked, at which interface, and its id.
pub struct Call {
    pub state: AppState,
    pub caller: Caller,
    /// The bundle of the interface (`/a2a/{bundle}`), if any.
    pub bundle: Option<String>,
    pub headers: HeaderMap,
    /// The caller's trace context (its `traceparent` header).
    pub trace: CallerTrace,
    pub id: Value,
}

async fn daemon_rpc(
    State(state): State<AppState>,
    caller: Caller,
    headers: HeaderMap,
    RpcBody(body): RpcBody,
) -> Response {
    rpc(state, caller, None, headers, &body).await
}

async fn bundle_rpc(
    State(state): State<AppState>,
    caller: Caller,
    Path(bundle): Path<String>,
    headers: HeaderMap,
    RpcBody(body): RpcBody,
) -> Response {
    rpc(state, caller, Some(bundle), headers, &body).await
}

/// Reads the JSON-RPC envelope and runs its method.
async fn rpc(
    state: AppState,
    caller: Caller,
    bundle: Option<String>,
    headers: HeaderMap,
    body: &[u8],
) -> Response {
    // The one JSON rule of every route, answered the JSON-RPC way.
    if let Err(e) = super::guard::json_only(&axum::http::Method::POST, &headers) {
        let e = A2AError::invalid_request(e.message);
        return reply(&Value::Null, Err(e.into()));
    }
    let request: Value = match serde_json::from_slice(body) {
        Ok(request) => request,
        Err(e) => {
            let e = A2AError::parse_error(format!("the body is not JSON: {e}"));
            return reply(&Value::Null, Err(e.into()));
        }
    };
    // JSON-RPC's ids are strings, numbers or null: a call under any other
    // is not a Request object (-32600), answered under null.
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    if !(id.is_string() || id.is_number() || id.is_null()) {
        let e = A2AError::invalid_request(format!(
            "the id {id} is not a JSON-RPC id: send a string, a number or null"
        ));
        return reply(&Value::Null, Err(e.into()));
    }
    let envelope: Envelope = match serde_json::from_value(request) {
        Ok(envelope) => envelope,
        Err(e) => {
            let e = A2AError::invalid_request(format!(
                "not a JSON-RPC 2.0 request ({e}): send {{\"jsonrpc\": \"2.0\", \"id\": …, \"method\": …, \"params\": {{…}}}}"
            ));
            return reply(&id, Err(e.into()));
        }
    };
    if let Err(e) = version(&headers) {
        return reply(&id, Err(e.into()));
    }
    let Some(method) = Method::named(&envelope.method) else {
        let e = A2AError::new(
            error_code::METHOD_NOT_FOUND,
            format!(
                "no method {:?}: this agent speaks A2A 1.0 over JSON-RPC (SendMessage, SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask, GetExtendedAgentCard, Create/Get/List/DeleteTaskPushNotificationConfig)",
                envelope.method
            ),
        );
        return reply(&id, Err(e.into()));
    };
    let params = envelope.params.unwrap_or_else(|| json!({}));
    let call = Call {
        state,
        caller,
        bundle,
        trace: CallerTrace::of(&headers),
        headers,
        id: id.clone(),
    };
    dispatch(&call, method, proto_names::json_names(params)).await
}

/// Runs `method`: a stream for the streaming methods, else one response.
async fn dispatch(call: &Call, method: Method, params: Value) -> Response {
    let answered = match method {
        Method::SendStreamingMessage => {
            return streamed(&call.id, send::send_streaming(call, params).await);
        }
        Method::SubscribeToTask => {
            return streamed(&call.id, stream::subscribe(call, params).await);
        }
        Method::SendMessage => send::send(call, params).await,
        Method::GetTask => get_task(call, params).await,
        Method::ListTasks => list::list_tasks(call, params).await,
        Method::CancelTask => send::cancel(call, params).await,
        Method::GetExtendedAgentCard => extended_card(call),
        Method::CreateTaskPushNotificationConfig => push::create(call, params).await,
        Method::GetTaskPushNotificationConfig => push::get(call, params).await,
        Method::ListTaskPushNotificationConfigs | Method::ListTaskPushNotificationConfig => {
            push::list(call, params).await
        }
        Method::DeleteTaskPushNotificationConfig => push::delete(call, params).await,
    };
    reply(&call.id, answered)
}

/// Refuses a client of another major version (`A2A-Version`; none is 1.0).
fn version(headers: &HeaderMap) -> Result<(), A2AError> {
    let Some(asked) = headers.get(a2a::SVC_PARAM_VERSION) else {
        return Ok(());
    };
    let asked = String::from_utf8_lossy(asked.as_bytes());
    let major = asked.trim().split('.').next().unwrap_or_default();
    if major == "1" {
        return Ok(());
    }
    Err(A2AError::new(
        error_code::VERSION_NOT_SUPPORTED,
        format!(
            "A2A version {asked:?} is not supported: this agent speaks {}",
            a2a::VERSION
        ),
    ))
}

/// The JSON-RPC response of a call.
fn reply(id: &Value, result: Result<Value, RpcError>) -> Response {
    match result {
        Ok(result) => Json(Reply::result(id, result)).into_response(),
        Err(RpcError::Protocol(e)) => Json(Reply::error(id, &e)).into_response(),
        Err(RpcError::Http(e)) => e.into_response(),
    }
}

/// A stream, or the call's error as a plain JSON-RPC response.
fn streamed(id: &Value, result: Result<Response, RpcError>) -> Response {
    result.unwrap_or_else(|e| reply(id, Err(e)))
}

/// The call's parameters as `T`, or an invalid-params error naming what
/// did not fit.
pub fn params<T: DeserializeOwned>(method: &str, params: Value) -> Result<T, RpcError> {
    serde_json::from_value(params).map_err(|e| {
        A2AError::invalid_params(format!(
            "invalid params of {method}: {e} (see the A2A 1.0 specification)"
        ))
        .into()
    })
}

/// `GetTask`: the job as a task, with its answer.
async fn get_task(call: &Call, raw: Value) -> Result<Value, RpcError> {
    call.caller.require(Action::ReadJob)?;
    let request: GetTaskRequest = params("GetTask", raw)?;
    let view = View {
        history_length: task::history_length(request.history_length)?,
        artifacts: true,
    };
    let id = JobId::from(request.id);
    let job = call
        .caller
        .job(Action::ReadJob, &id, call.state.queue.get(&id).await?)?;
    Ok(json!(task::task(&job, view)))
}

/// `GetExtendedAgentCard`: the card as the caller's key sees it. A daemon
/// without keys shows everything on its public card, which says
/// `extendedAgentCard: false`: then the method is unsupported, as A2A 1.0
/// requires.
fn extended_card(call: &Call) -> Result<Value, RpcError> {
    if call.state.registry.snapshot().keys.is_open() {
        return Err(A2AError::new(
            error_code::UNSUPPORTED_OPERATION,
            "this agent has no extended card (its card says extendedAgentCard: false): without API keys the public card shows every skill",
        )
        .into());
    }
    let base = card::base_url(&call.headers);
    let card = match &call.bundle {
        Some(bundle) => {
            card::for_bundle(&call.state, &base, &call.caller.0, bundle).ok_or_else(|| {
                A2AError::invalid_params(format!(
                    "no bundle {bundle:?} that API key {:?} may use",
                    call.caller.name()
                ))
            })?
        }
        None => card::for_daemon(&call.state, &base, Some(&call.caller.0)),
    };
    Ok(json!(card))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn only_major_version_one_is_spoken() {
        let mut headers = HeaderMap::new();
        assert!(version(&headers).is_ok());
        headers.insert("A2A-Version", HeaderValue::from_static("1.0"));
        assert!(version(&headers).is_ok());
        headers.insert("A2A-Version", HeaderValue::from_static("0.3"));
        assert_eq!(
            version(&headers).unwrap_err().code,
            error_code::VERSION_NOT_SUPPORTED
        );
    }

    #[test]
    fn api_errors_become_protocol_errors_or_stay_http() {
        let code = |e: ApiError| match RpcError::from(e) {
            RpcError::Protocol(e) => Some(e.code),
            RpcError::Http(_) => None,
        };
        let unknown = ApiError::job_not_found(&JobId::from("x".to_string()));
        assert_eq!(code(unknown), Some(error_code::TASK_NOT_FOUND));
        let conversation = ApiError::field(ErrorCode::NotFound, "conversation_id", "no");
        assert_eq!(code(conversation), Some(error_code::INVALID_PARAMS));
        assert_eq!(code(ApiError::new(ErrorCode::Forbidden, "scope")), None);
        assert_eq!(code(ApiError::new(ErrorCode::QuotaExceeded, "rate")), None);
    }
}
