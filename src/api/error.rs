//! One table of API errors: each code has a status, and every error body has
//! the same shape `{"error": {"code", "message", "field"?}}`. Internal errors
//! return a generic message and log the detail.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    InvalidRequest,
    PayloadTooLarge,
    /// A body that is not `application/json` (a browser's simple request).
    UnsupportedMediaType,
    /// A `Host` the daemon does not serve (DNS rebinding).
    MisdirectedHost,
    /// A request from a web page whose origin is not allowed.
    ForbiddenOrigin,
    Unauthorized,
    /// The API key lacks the scope or bundle the request needs.
    Forbidden,
    /// The API key's rate limit, jobs in flight or daily budget is used up.
    QuotaExceeded,
    NotFound,
    /// The route exists, not with this method.
    MethodNotAllowed,
    UnknownBundle,
    /// An idempotency key reused for a different job.
    IdempotencyConflict,
    /// The job is not in a state that allows this (e.g. resolving a job
    /// that is not `needs_attention`).
    InvalidState,
    /// A bundle's daily budget is used up.
    BudgetExhausted,
    Unavailable,
    /// The job behind a synchronous answer ended without one.
    JobFailed,
    Internal,
}

impl ErrorCode {
    pub fn status(self) -> StatusCode {
        match self {
            Self::InvalidRequest => StatusCode::UNPROCESSABLE_ENTITY,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::MisdirectedHost => StatusCode::MISDIRECTED_REQUEST,
            Self::ForbiddenOrigin => StatusCode::FORBIDDEN,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::QuotaExceeded => StatusCode::TOO_MANY_REQUESTS,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::UnknownBundle => StatusCode::UNPROCESSABLE_ENTITY,
            Self::IdempotencyConflict => StatusCode::CONFLICT,
            Self::InvalidState => StatusCode::CONFLICT,
            Self::BudgetExhausted => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::JobFailed => StatusCode::INTERNAL_SERVER_ERROR,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    fn name(self) -> &'static str {
        match self {
            Self::InvalidRequest => "invalid_request",
            Self::PayloadTooLarge => "payload_too_large",
            Self::UnsupportedMediaType => "unsupported_media_type",
            Self::MisdirectedHost => "misdirected_host",
            Self::ForbiddenOrigin => "forbidden_origin",
            Self::Unauthorized => "unauthorized",
            Self::Forbidden => "forbidden",
            Self::QuotaExceeded => "quota_exceeded",
            Self::NotFound => "not_found",
            Self::MethodNotAllowed => "method_not_allowed",
            Self::UnknownBundle => "unknown_bundle",
            Self::IdempotencyConflict => "idempotency_conflict",
            Self::InvalidState => "invalid_state",
            Self::BudgetExhausted => "budget_exhausted",
            Self::Unavailable => "unavailable",
            Self::JobFailed => "job_failed",
            Self::Internal => "internal",
        }
    }
}

#[derive(Debug)]
pub struct ApiError {
    pub code: ErrorCode,
    pub message: String,
    pub field: Option<String>,
    /// Seconds a client should wait before it tries again (`Retry-After`).
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: None,
            retry_after: None,
        }
    }

    /// The same error, telling the client when to try again.
    pub fn retry_after(mut self, seconds: u64) -> Self {
        self.retry_after = Some(seconds.max(1));
        self
    }

    pub fn field(code: ErrorCode, field: impl Into<String>, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
            field: Some(field.into()),
            retry_after: None,
        }
    }

    /// Logs the detail; the client sees a generic message.
    pub fn internal(detail: impl std::fmt::Display) -> Self {
        tracing::error!(error = %detail, "internal API error");
        Self::new(ErrorCode::Internal, "internal error; see the daemon log")
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut body = json!({"code": self.code.name(), "message": self.message});
        if let Some(field) = self.field {
            body["field"] = json!(field);
        }
        let mut response = (self.code.status(), Json(json!({"error": body}))).into_response();
        if let Some(seconds) = self.retry_after {
            response
                .headers_mut()
                .insert(axum::http::header::RETRY_AFTER, seconds.into());
        }
        response
    }
}

impl From<crate::queue::QueueError> for ApiError {
    fn from(e: crate::queue::QueueError) -> Self {
        use crate::queue::QueueError;
        if let Some(refused) = super::approvals::refused(&e) {
            return refused;
        }
        match e {
            QueueError::NotFound(_) => ApiError::new(ErrorCode::NotFound, e.to_string()),
            QueueError::NotParked { .. } | QueueError::NoCallToSkip(_) => {
                ApiError::new(ErrorCode::InvalidState, e.to_string())
            }
            e => ApiError::internal(e),
        }
    }
}
