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
mod proto_names;
pub mod push;
mod send;
mod stream;
mod task;

use a2a::{A2AError, GetTaskRequest, ListTasksRequest, TaskState, error_code};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router, middleware};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::AppState;
use super::auth::{self, Auth, Caller};
use super::body::Path;
use super::error::{ApiError, ErrorCode};
use super::trace_context::CallerTrace;

use crate::access::policy::Action;
use crate::queue::{JobFilter, JobId};
use task::View;

/// The A2A routes: the cards (read with or without a key), and the
/// JSON-RPC interface, which authenticates like `/v1` (each method then
/// needs its scope: `submit`, `read`, `operate` or `approve`).
pub fn routes(auth: Auth) -> Router<AppState> {
    let rpc = Router::new()
        .route("/a2a", post(daemon_rpc))
        // The interface URL as the A2A TCK posts to it, with a slash.
        .route("/a2a/", post(daemon_rpc))
        .route("/a2a/{bundle}", post(bundle_rpc))
        .route("/a2a/{bundle}/", post(bundle_rpc))
        .route_layer(middleware::from_fn_with_state(auth, auth::authenticate_rpc));
    Router::new()
        .route("/.well-known/agent-card.json", get(card::daemon_card))
        .route(
            "/a2a/{bundle}/.well-known/agent-card.json",
            get(card::bundle_card),
        )
        .merge(rpc)
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
    body: Bytes,
) -> Response {
    rpc(state, caller, None, headers, &body).await
}

async fn bundle_rpc(
    State(state): State<AppState>,
    caller: Caller,
    Path(bundle): Path<String>,
    headers: HeaderMap,
    body: Bytes,
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
    let id = request.get("id").cloned().unwrap_or(Value::Null);
    let method = match (&request["jsonrpc"], request["method"].as_str()) {
        (Value::String(v), Some(method)) if v == "2.0" => method.to_string(),
        _ => {
            let e = A2AError::invalid_request(
                "not a JSON-RPC 2.0 request: send {\"jsonrpc\": \"2.0\", \"id\": …, \"method\": …, \"params\": {…}}",
            );
            return reply(&id, Err(e.into()));
        }
    };
    if let Err(e) = version(&headers) {
        return reply(&id, Err(e.into()));
    }
    let params = request.get("params").cloned().unwrap_or_else(|| json!({}));
    let params = proto_names::json_names(params);
    let call = Call {
        state,
        caller,
        bundle,
        trace: CallerTrace::of(&headers),
        headers,
        id: id.clone(),
    };
    match method.as_str() {
        "SendStreamingMessage" => streamed(&id, send::send_streaming(&call, params).await),
        "SubscribeToTask" => streamed(&id, stream::subscribe(&call, params).await),
        method => reply(&id, answer(&call, method, params).await),
    }
}

/// The methods that answer with one result.
async fn answer(call: &Call, method: &str, params: Value) -> Result<Value, RpcError> {
    match method {
        "SendMessage" => send::send(call, params).await,
        "GetTask" => get_task(call, params).await,
        "ListTasks" => list_tasks(call, params).await,
        "CancelTask" => send::cancel(call, params).await,
        "GetExtendedAgentCard" => extended_card(call),
        push if push::is_method(push) => push::call(call, push, params).await,
        other => Err(A2AError::new(
            error_code::METHOD_NOT_FOUND,
            format!(
                "no method {other:?}: this agent speaks A2A 1.0 over JSON-RPC (SendMessage, SendStreamingMessage, GetTask, ListTasks, CancelTask, SubscribeToTask, GetExtendedAgentCard, Create/Get/List/DeleteTaskPushNotificationConfig)"
            ),
        )
        .into()),
    }
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
        Ok(result) => Json(json!({"jsonrpc": "2.0", "id": id, "result": result})).into_response(),
        Err(RpcError::Protocol(e)) => Json(error_body(id, &e)).into_response(),
        Err(RpcError::Http(e)) => e.into_response(),
    }
}

/// A stream, or the call's error as a plain JSON-RPC response.
fn streamed(id: &Value, result: Result<Response, RpcError>) -> Response {
    result.unwrap_or_else(|e| reply(id, Err(e)))
}

pub fn error_body(id: &Value, e: &A2AError) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": e.to_jsonrpc_error()})
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
    let id = JobId::from(request.id);
    let job = call
        .caller
        .job(Action::ReadJob, &id, call.state.queue.get(&id).await?)?;
    let view = View {
        history_length: request.history_length,
        artifacts: true,
    };
    Ok(json!(task::task(&job, view)))
}

/// The most tasks `ListTasks` gives in one page.
const MAX_PAGE: i32 = 100;

/// `ListTasks`: the key's jobs (all with `read_all`), of the interface's
/// bundle, newest first, filtered by context and state.
async fn list_tasks(call: &Call, raw: Value) -> Result<Value, RpcError> {
    call.caller.require(Action::ListJobs)?;
    let request: ListTasksRequest = params("ListTasks", lenient_list(raw))?;
    let page_size = request.page_size.unwrap_or(50);
    if !(1..=MAX_PAGE).contains(&page_size) {
        return Err(A2AError::invalid_params(format!(
            "pageSize {page_size} is out of range: a page holds 1 to {MAX_PAGE} tasks"
        ))
        .into());
    }
    let status = request
        .status
        .as_ref()
        .filter(|s| **s != TaskState::Unspecified);
    let state = match status {
        Some(status) => Some(task::job_state(status).ok_or_else(|| {
            A2AError::invalid_params(format!(
                "no task of this agent is ever in state {}; filter on SUBMITTED, WORKING, INPUT_REQUIRED, COMPLETED, FAILED or CANCELED",
                json!(status)
            ))
        })?),
        None => None,
    };
    let context = request.context_id.clone().filter(|c| !c.is_empty());
    let filter = JobFilter {
        state,
        bundle: call.bundle.clone(),
        conversation_id: context.clone(),
        // A context is a conversation, and conversations are per key:
        // the caller's own.
        conversation_owner: context.is_some().then(|| call.caller.name().to_string()),
        owner: call.caller.listing_owner(Action::ListJobs),
        limit: page_size as usize,
        cursor: request.page_token.clone().filter(|t| !t.is_empty()),
        search: None,
        unfinished: false,
    };
    let page = call.state.queue.list(filter.clone()).await?;
    let view = View {
        history_length: request.history_length,
        artifacts: request.include_artifacts.unwrap_or(false),
    };
    let after = request.status_timestamp_after;
    let changed_after =
        |job: &crate::queue::Job| after.is_none_or(|t| task::timestamp(&job.updated_at) >= Some(t));
    let tasks: Vec<a2a::Task> = page
        .jobs
        .iter()
        .filter(|job| changed_after(job))
        .map(|job| task::task(job, view))
        .collect();
    let total_size = match (&filter.cursor, &page.next_cursor) {
        // The whole listing is this page.
        (None, None) => tasks.len(),
        _ => total(call, filter, changed_after).await?,
    };
    Ok(json!(a2a::ListTasksResponse {
        total_size: i32::try_from(total_size).unwrap_or(i32::MAX),
        tasks,
        next_page_token: page.next_cursor.unwrap_or_default(),
        page_size,
    }))
}

/// Jobs read per query while `ListTasks` counts its `totalSize`.
const COUNT_PAGE: usize = 500;

/// How many tasks the listing holds in all, every page (`totalSize`): the
/// store keeps no count per filter (context, bundle, state, owner, time),
/// so the listing is read to its end, [`COUNT_PAGE`] jobs at a time.
async fn total(
    call: &Call,
    filter: JobFilter,
    counted: impl Fn(&crate::queue::Job) -> bool,
) -> Result<usize, RpcError> {
    let mut filter = JobFilter {
        limit: COUNT_PAGE,
        cursor: None,
        ..filter
    };
    let mut total = 0;
    loop {
        let page = call.state.queue.list(filter.clone()).await?;
        total += page.jobs.iter().filter(|job| counted(job)).count();
        match page.next_cursor {
            Some(cursor) => filter.cursor = Some(cursor),
            None => return Ok(total),
        }
    }
}

/// `ListTasks`' parameters as proto3 JSON clients send them: a status
/// left unset may come as `UNRECOGNIZED` (the JavaScript SDK), which
/// filters on nothing.
fn lenient_list(mut raw: Value) -> Value {
    if let Some(fields) = raw.as_object_mut()
        && fields.get("status").and_then(Value::as_str) == Some("UNRECOGNIZED")
    {
        fields.remove("status");
    }
    raw
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

    #[test]
    fn an_unrecognized_status_filters_on_nothing() {
        let raw = lenient_list(json!({"status": "UNRECOGNIZED", "pageSize": 5}));
        let request: ListTasksRequest = params("ListTasks", raw).unwrap();
        assert!(request.status.is_none());
        assert_eq!(request.page_size, Some(5));
    }
}
