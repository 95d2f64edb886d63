//! Bearer-token authentication with a constant-time comparison. The token
//! is the registry snapshot's, so a reload that changes it applies at once.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::{ApiError, ErrorCode};

/// Where the expected token is read, per request, and this run's reload
/// key (see `crate::control`).
#[derive(Clone)]
pub struct Auth {
    pub registry: Arc<crate::registry::Registry>,
    pub reload_key: Option<Arc<str>>,
}

/// `POST /v1/reload` also takes the control file's reload key, so a local
/// operator can apply an edit that changes the token itself.
pub async fn require_token_or_reload_key(
    State(auth): State<Auth>,
    request: Request,
    next: Next,
) -> Response {
    let key = request
        .headers()
        .get(crate::control::RELOAD_KEY_HEADER)
        .and_then(|v| v.to_str().ok());
    if let (Some(given), Some(expected)) = (key, &auth.reload_key)
        && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
    {
        return next.run(request).await;
    }
    require_token(State(auth), request, next).await
}

pub async fn require_token(State(auth): State<Auth>, request: Request, next: Next) -> Response {
    let Some(expected) = auth.registry.snapshot().token.clone() else {
        return next.run(request).await;
    };
    let given = request
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or_default();
    if bool::from(given.as_bytes().ct_eq(expected.as_bytes())) {
        next.run(request).await
    } else {
        ApiError::new(
            ErrorCode::Unauthorized,
            "missing or wrong bearer token (Authorization: Bearer <token>)",
        )
        .into_response()
    }
}
