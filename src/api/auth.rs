//! Bearer-token authentication with a constant-time comparison. The token
//! is the registry snapshot's, so a reload that changes it applies at once.

use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header::AUTHORIZATION;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::{ApiError, ErrorCode};

/// Where the expected token is read, per request.
#[derive(Clone)]
pub struct Auth(pub Arc<crate::registry::Registry>);

pub async fn require_token(State(auth): State<Auth>, request: Request, next: Next) -> Response {
    let Some(expected) = auth.0.snapshot().token.clone() else {
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
