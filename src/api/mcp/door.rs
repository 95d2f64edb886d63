//! What `/mcp` checks before rmcp sees a request: the cap on open
//! sessions (only an `initialize` opens one; a 2026-07-28 request is
//! stateless), the status of a session's end, and rmcp's plain-text
//! refusals reshaped into the API's JSON error shape, and what HTTP leaves
//! to the server (an `Accept` of anything, a POST's `Content-Type`) made
//! explicit for rmcp.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use serde_json::json;

use super::super::error::{ApiError, ErrorCode};
use super::sessions;

/// What `/mcp` checks before rmcp sees a request.
#[derive(Clone)]
pub struct Door {
    pub sessions: Arc<sessions::Sessions>,
    pub max_sessions: usize,
    pub max_body_bytes: usize,
}

/// Refuses a new session beyond `server.mcp.max_sessions` (an `initialize`
/// without `Mcp-Session-Id` opens one; a 2026-07-28 request is stateless
/// and opens none), and reshapes rmcp's plain-text refusals.
pub async fn at_the_door(State(door): State<Door>, mut request: Request, next: Next) -> Response {
    defaults(&mut request);
    let (request, opens_session) =
        if request.method() == Method::POST && !request.headers().contains_key("mcp-session-id") {
            match initializes(request, door.max_body_bytes).await {
                Ok(seen) => seen,
                Err(refused) => return refused,
            }
        } else {
            (request, false)
        };
    let response = if opens_session {
        // Held until the session is open: counting and opening do not
        // interleave between two clients.
        let _opening = door.sessions.opening.lock().await;
        let open = door.sessions.open().await;
        if open >= door.max_sessions {
            tracing::warn!(
                open,
                max = door.max_sessions,
                "refused an MCP session: server.mcp.max_sessions reached"
            );
            let mut refused = ApiError::new(
                ErrorCode::Unavailable,
                format!(
                    "too many MCP sessions: {open} of server.mcp.max_sessions ({}) are open; \
                     end unused ones (DELETE /mcp with their Mcp-Session-Id), wait until they \
                     expire after server.mcp.session_idle without a request, or raise \
                     server.mcp.max_sessions",
                    door.max_sessions
                ),
            )
            .into_response();
            refused
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from_static("10"));
            return refused;
        }
        next.run(request).await
    } else if request.method() == Method::DELETE {
        let named = request.headers().get("mcp-session-id").cloned();
        if let Some(refused) = unknown_session(&door, named).await {
            return refused;
        }
        session_ended(next.run(request).await)
    } else {
        next.run(request).await
    };
    shaped(response).await
}

/// What a request leaves to the server, made explicit before rmcp reads
/// it (rmcp refuses what HTTP allows): a request that accepts anything
/// (no `Accept`, or `*/*`) accepts what `/mcp` answers, and a POST without
/// a `Content-Type` sends JSON, the only body `/mcp` reads.
fn defaults(request: &mut Request) {
    let answers = match *request.method() {
        Method::POST => "application/json, text/event-stream",
        Method::GET => "text/event-stream",
        _ => return,
    };
    let headers = request.headers_mut();
    let accepts_anything = headers
        .get(header::ACCEPT)
        .map(|accept| {
            let accept = String::from_utf8_lossy(accept.as_bytes());
            accept.trim().is_empty()
                || accept
                    .split(',')
                    .any(|range| range.split(';').next().is_some_and(|t| t.trim() == "*/*"))
        })
        .unwrap_or(true);
    if accepts_anything {
        headers.insert(header::ACCEPT, HeaderValue::from_static(answers));
    }
    if answers.starts_with("application/json") && !headers.contains_key(header::CONTENT_TYPE) {
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
    }
}

/// Whether a POST is an `initialize` (a JSON-RPC request with that
/// method), reading its body (at most `max_body_bytes`) and handing it on.
async fn initializes(request: Request, max_body_bytes: usize) -> Result<(Request, bool), Response> {
    let (parts, body) = request.into_parts();
    let Ok(bytes) = axum::body::to_bytes(body, max_body_bytes).await else {
        return Err(ApiError::new(
            ErrorCode::PayloadTooLarge,
            format!("/mcp: the request body is larger than {max_body_bytes} bytes (server.max_body_bytes)"),
        )
        .into_response());
    };
    #[derive(serde::Deserialize)]
    struct Method {
        method: Option<String>,
    }
    let initialize = serde_json::from_slice::<Method>(&bytes)
        .ok()
        .and_then(|m| m.method)
        .is_some_and(|m| m == "initialize");
    Ok((Request::from_parts(parts, Body::from(bytes)), initialize))
}

/// A DELETE that names no session of this daemon: 400 for an id that
/// cannot be one (not a token of visible ASCII), 404 for one that is not
/// open (rmcp answers any id with success). Without the header, rmcp's
/// own 400 stands.
async fn unknown_session(door: &Door, named: Option<HeaderValue>) -> Option<Response> {
    use rmcp::transport::streamable_http_server::SessionManager;
    let value = named?;
    let Some(id) = std::str::from_utf8(value.as_bytes())
        .ok()
        .filter(|id| crate::types::text::is_token(id))
    else {
        return Some(
            ApiError::field(
                ErrorCode::BadRequest,
                "Mcp-Session-Id",
                "/mcp: the Mcp-Session-Id header is not a session id (visible ASCII, as `initialize` answered it)",
            )
            .into_response(),
        );
    };
    let open = door
        .sessions
        .has_session(&id.to_string().into())
        .await
        .unwrap_or(true);
    (!open).then(|| {
        ApiError::new(
            ErrorCode::NotFound,
            format!("/mcp: no MCP session {id:?} is open (it ended, or expired after server.mcp.session_idle)"),
        )
        .into_response()
    })
}

/// A client ending its session (`DELETE /mcp` with `Mcp-Session-Id`) gets
/// 200 OK once the session is closed. rmcp answers 202 Accepted, which the
/// Python SDK reports as `Session termination failed: 202`: the
/// specification's answers are a success (the SDK accepts 200 and 204) or
/// 405 for a server that does not let clients end sessions.
fn session_ended(mut response: Response) -> Response {
    if response.status() == StatusCode::ACCEPTED {
        *response.status_mut() = StatusCode::OK;
    }
    response
}

/// rmcp answers some refusals in plain text (`Not Acceptable: …`); those
/// get the API's JSON error shape, keeping their status and headers. JSON
/// (JSON-RPC errors) and successes pass unchanged.
async fn shaped(response: Response) -> Response {
    let status = response.status();
    let is_json = response
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json"));
    if !(status.is_client_error() || status.is_server_error()) || is_json {
        return response;
    }
    let (mut parts, body) = response.into_parts();
    // rmcp's refusals are one short line; more is not worth keeping.
    let text = match axum::body::to_bytes(body, 4096).await {
        Ok(bytes) => String::from_utf8_lossy(&bytes).trim().to_string(),
        Err(_) => String::new(),
    };
    // rmcp answers a body that is JSON but no JSON-RPC message with 415
    // ("fail to deserialize request body"); its media type was right, the
    // message was not: a 400, as for any body the API cannot read.
    let status = match status {
        StatusCode::UNSUPPORTED_MEDIA_TYPE if text.starts_with("fail to deserialize") => {
            parts.status = StatusCode::BAD_REQUEST;
            StatusCode::BAD_REQUEST
        }
        status => status,
    };
    let code = match status {
        StatusCode::FORBIDDEN => ErrorCode::Forbidden,
        StatusCode::NOT_FOUND => ErrorCode::NotFound,
        StatusCode::METHOD_NOT_ALLOWED => ErrorCode::MethodNotAllowed,
        StatusCode::NOT_ACCEPTABLE => ErrorCode::NotAcceptable,
        StatusCode::PAYLOAD_TOO_LARGE => ErrorCode::PayloadTooLarge,
        StatusCode::UNSUPPORTED_MEDIA_TYPE => ErrorCode::UnsupportedMediaType,
        _ if status.is_server_error() => ErrorCode::Internal,
        _ => ErrorCode::InvalidRequest,
    };
    let message = if status.is_server_error() {
        tracing::error!(status = %status, detail = %text, "/mcp failed");
        "internal error; see the daemon log".to_string()
    } else if text.is_empty() {
        format!("/mcp refused the request ({status}); see docs/api.md, Bundles as MCP tools")
    } else {
        format!("/mcp: {text}")
    };
    let body = serde_json::to_vec(&json!({"error": {"code": code.name(), "message": message}}))
        .unwrap_or_default();
    parts.headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    parts.headers.remove(header::CONTENT_LENGTH);
    Response::from_parts(parts, Body::from(body))
}
