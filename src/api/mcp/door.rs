//! What `/mcp` checks before rmcp sees a request: the cap on open
//! sessions (only an `initialize` opens one; a 2026-07-28 request is
//! stateless), the status of a session's end, and rmcp's plain-text
//! refusals reshaped into the API's JSON error shape.

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
pub async fn at_the_door(State(door): State<Door>, request: Request, next: Next) -> Response {
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
        session_ended(next.run(request).await)
    } else {
        next.run(request).await
    };
    shaped(response).await
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
