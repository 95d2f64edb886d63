//! One table of API errors: each code has a status, and every error body has
//! the same shape `{"error": {"code", "message", "field"?}}`. Internal errors
//! return a generic message and log the detail. Every 503 carries
//! `Retry-After`: it always means "not now", never "not ever".

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use schemars::JsonSchema;
use serde::Serialize;

/// The code of an error; it is written by its snake_case name
/// (`invalid_request`), which clients match on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ErrorCode {
    /// A malformed request header (`Last-Event-ID` that is no sequence number).
    BadRequest,
    InvalidRequest,
    /// The request body did not arrive within `server.body_timeout`.
    RequestTimeout,
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
    /// The `Accept` header takes none of the media types the route answers
    /// with (MCP's transport needs JSON and event streams).
    NotAcceptable,
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
    /// The job behind a synchronous answer is parked for an approval: not
    /// failed, answered once someone decides.
    JobAwaitingApproval,
    /// The job behind a synchronous answer is parked until an operator
    /// resolves it.
    JobNeedsAttention,
    /// Something that runs one at a time in a daemon (a verify) is running.
    Busy,
    /// The work a request asked for outgrew its time cap and was stopped.
    TimedOut,
    Internal,
}

impl ErrorCode {
    /// The name clients match on (`invalid_request`): its serialized form,
    /// so the document's list of codes and the answers cannot differ.
    pub fn name(self) -> String {
        match serde_json::to_value(self) {
            Ok(serde_json::Value::String(name)) => name,
            _ => "internal".to_string(),
        }
    }

    pub fn status(self) -> StatusCode {
        match self {
            Self::BadRequest => StatusCode::BAD_REQUEST,
            Self::InvalidRequest => StatusCode::UNPROCESSABLE_ENTITY,
            Self::RequestTimeout => StatusCode::REQUEST_TIMEOUT,
            Self::PayloadTooLarge => StatusCode::PAYLOAD_TOO_LARGE,
            Self::UnsupportedMediaType => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::MisdirectedHost => StatusCode::MISDIRECTED_REQUEST,
            Self::ForbiddenOrigin => StatusCode::FORBIDDEN,
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::Forbidden => StatusCode::FORBIDDEN,
            Self::QuotaExceeded => StatusCode::TOO_MANY_REQUESTS,
            Self::NotFound => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed => StatusCode::METHOD_NOT_ALLOWED,
            Self::NotAcceptable => StatusCode::NOT_ACCEPTABLE,
            Self::UnknownBundle => StatusCode::UNPROCESSABLE_ENTITY,
            Self::IdempotencyConflict => StatusCode::CONFLICT,
            Self::InvalidState => StatusCode::CONFLICT,
            Self::BudgetExhausted => StatusCode::TOO_MANY_REQUESTS,
            Self::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
            Self::JobFailed => StatusCode::INTERNAL_SERVER_ERROR,
            Self::JobAwaitingApproval | Self::JobNeedsAttention => StatusCode::SERVICE_UNAVAILABLE,
            Self::Busy => StatusCode::CONFLICT,
            Self::TimedOut => StatusCode::GATEWAY_TIMEOUT,
            Self::Internal => StatusCode::INTERNAL_SERVER_ERROR,
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

    /// This error, for a route whose path names the bundle
    /// (`/v1/bundles/{name}/…`, `/v1/agui/{bundle}`): a bundle that is not
    /// loaded (or not the key's) is a resource that is not there, a 404
    /// naming the path's `field`, where a body's bundle field is a 422.
    pub fn bundle_in_path(self, field: &str) -> Self {
        match self.code {
            ErrorCode::UnknownBundle => Self::field(ErrorCode::NotFound, field, self.message),
            _ => self,
        }
    }

    /// The answer for a job the caller may not see as well as for one that
    /// does not exist: the two must read the same.
    pub fn job_not_found(id: &crate::queue::JobId) -> Self {
        Self::new(ErrorCode::NotFound, format!("no job with id {id}"))
    }
}

/// How long a client told 503 waits before trying again, in seconds: long
/// enough for a connection or stream slot to free up or a store to come
/// back, short enough that a caller does not give up.
pub const RETRY_AFTER_SECS: u64 = 2;

/// Every error's body: `{"error": {"code", "message", "field"?}}`.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorBody {
    pub error: ErrorDetail,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct ErrorDetail {
    pub code: ErrorCode,
    /// What went wrong and what to do.
    pub message: String,
    /// The request field or parameter the error is about.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let body = ErrorBody {
            error: ErrorDetail {
                code: self.code,
                message: self.message,
                field: self.field,
            },
        };
        let status = self.code.status();
        let mut response = (status, Json(body)).into_response();
        // Every 503 tells when to come back; a 429 says so itself.
        let retry_after = self
            .retry_after
            .or((status == StatusCode::SERVICE_UNAVAILABLE).then_some(RETRY_AFTER_SECS));
        if let Some(seconds) = retry_after {
            response.headers_mut().insert(
                axum::http::header::RETRY_AFTER,
                axum::http::HeaderValue::from(seconds),
            );
        }
        response
    }
}

/// Why a job a synchronous caller waited for has no answer: it failed
/// (500 `job_failed`), or it is parked for a decision or an operator
/// (503 `job_awaiting_approval` / `job_needs_attention`, as chat
/// completions say it), the message naming the job and what to do.
impl From<crate::queue::NoAnswer> for ApiError {
    fn from(why: crate::queue::NoAnswer) -> Self {
        use crate::queue::NoAnswer;
        let code = match why {
            NoAnswer::AwaitingApproval { .. } => ErrorCode::JobAwaitingApproval,
            NoAnswer::NeedsAttention { .. } => ErrorCode::JobNeedsAttention,
            NoAnswer::Ended { .. } => ErrorCode::JobFailed,
        };
        Self::new(code, why.to_string())
    }
}

impl From<crate::queue::QueueError> for ApiError {
    fn from(e: crate::queue::QueueError) -> Self {
        use crate::queue::QueueError;
        if let Some(refused) = decision_refused(&e) {
            return refused;
        }
        match e {
            QueueError::NotFound(_) => ApiError::new(ErrorCode::NotFound, e.to_string()),
            QueueError::NotParked { .. }
            | QueueError::NoCallToSkip(_)
            | QueueError::CallerOutputs { .. } => {
                ApiError::new(ErrorCode::InvalidState, e.to_string())
            }
            QueueError::DailyBudget { refusal, .. } => daily_refusal(refusal),
            QueueError::PushConfigsFull {
                holder: crate::queue::PushHolder::Task(_),
                ..
            } => ApiError::new(ErrorCode::InvalidRequest, e.to_string()),
            QueueError::PushConfigsFull { .. } => {
                ApiError::new(ErrorCode::QuotaExceeded, e.to_string()).retry_after(60)
            }
            e if e.is_unavailable() => {
                // The client gets the rule; the operator the detail.
                tracing::warn!(error = %e, "the queue store cannot serve a request");
                ApiError::new(ErrorCode::Unavailable, e.unavailable_message())
            }
            e => ApiError::internal(e),
        }
    }
}

/// Admission's refusals (`crate::admit::Refusal`) as the API says them:
/// a 422 for a field that is not sound or a bundle that is not loaded, a
/// 429 with `Retry-After` for a key's quota, a 409 for an idempotency key
/// used for another job; each names its field and keeps the rule's words.
impl From<crate::admit::Refusal> for ApiError {
    fn from(refusal: crate::admit::Refusal) -> Self {
        if let crate::admit::Refusal::Store(e) = refusal {
            return e.into();
        }
        let error = Self {
            code: refusal_code(&refusal),
            message: refusal.to_string(),
            field: refusal.field().map(std::borrow::Cow::into_owned),
            retry_after: None,
        };
        match refusal.retry_after() {
            Some(seconds) => error.retry_after(seconds),
            None => error,
        }
    }
}

/// The code of each admission refusal (a store's trouble is the queue's
/// error, mapped above it).
fn refusal_code(refusal: &crate::admit::Refusal) -> ErrorCode {
    use crate::admit::Refusal;
    match refusal {
        Refusal::UnknownBundle { .. } => ErrorCode::UnknownBundle,
        Refusal::Rate { .. } | Refusal::BatchOverRate { .. } | Refusal::InFlight { .. } => {
            ErrorCode::QuotaExceeded
        }
        Refusal::KeyReused { .. } => ErrorCode::IdempotencyConflict,
        Refusal::Nul { .. }
        | Refusal::BlankIdempotencyKey
        | Refusal::Attempts { .. }
        | Refusal::Priority { .. }
        | Refusal::KeyPriority { .. }
        | Refusal::NotHttp { .. }
        | Refusal::Egress { .. }
        | Refusal::Control { .. }
        | Refusal::PlanVariable { .. }
        | Refusal::GroupChatRerun { .. }
        | Refusal::NotAWorkflow { .. }
        | Refusal::OnlyStage { .. }
        | Refusal::ToolsOnComposite { .. }
        | Refusal::UnknownTools { .. }
        | Refusal::UnofferableTools { .. }
        | Refusal::LimitAboveBundle(_) => ErrorCode::InvalidRequest,
        Refusal::Store(_) => ErrorCode::Internal,
    }
}

/// A daily budget with nothing left: a 429 a client retries after the
/// rolling day frees some (the key's quota, or the bundle's budget).
fn daily_refusal(refusal: crate::budget::DailyRefusal) -> ApiError {
    let code = match refusal {
        crate::budget::DailyRefusal::Key { .. } => ErrorCode::QuotaExceeded,
        crate::budget::DailyRefusal::Bundle { .. } => ErrorCode::BudgetExhausted,
    };
    ApiError::new(code, refusal.to_string()).retry_after(RETRY_AFTER_SPENT.as_secs())
}

/// When a client refused for a spent daily budget should ask again: the
/// rolling day frees spend as old jobs age out of it.
pub(super) const RETRY_AFTER_SPENT: std::time::Duration = std::time::Duration::from_secs(60);

/// A decision the queue refused, as the API says it.
fn decision_refused(e: &crate::queue::QueueError) -> Option<ApiError> {
    use crate::approval::DecisionError;
    use crate::queue::QueueError;
    match e {
        QueueError::NotAwaitingApproval { .. } | QueueError::NotTheAwaitedCall { .. } => {
            Some(ApiError::new(ErrorCode::InvalidState, e.to_string()))
        }
        QueueError::Decision {
            source: DecisionError::Stale { .. },
            ..
        } => Some(ApiError::new(ErrorCode::InvalidState, e.to_string())),
        QueueError::Decision {
            source: DecisionError::MissingDigest { .. },
            ..
        } => Some(ApiError::field(
            ErrorCode::InvalidRequest,
            "digest",
            e.to_string(),
        )),
        QueueError::Decision {
            source: DecisionError::BadEdit { .. },
            ..
        } => Some(ApiError::field(
            ErrorCode::InvalidRequest,
            "arguments",
            e.to_string(),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::QueueError;

    #[test]
    fn store_trouble_is_a_503_with_retry_after_and_no_detail() {
        let full = QueueError::Store {
            path: "/var/lib/structured-agents/queue.db".into(),
            detail: "database or disk is full".into(),
        };
        let down = QueueError::Connect {
            url: "postgres://sa@db/sa".into(),
            detail: "connection refused".into(),
        };
        let busy = QueueError::Busy {
            store: "/var/lib/structured-agents/queue.db".into(),
            waiting: 1024,
        };
        for e in [full, down, busy] {
            let error = ApiError::from(e);
            assert_eq!(error.code, ErrorCode::Unavailable);
            assert!(!error.message.contains("disk is full"), "{}", error.message);
            let response = error.into_response();
            assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(
                response.headers()[axum::http::header::RETRY_AFTER],
                RETRY_AFTER_SECS.to_string().as_str()
            );
        }
    }

    #[test]
    fn admission_refusals_keep_their_status_field_and_retry_after() {
        use crate::admit::Refusal;
        let cases = [
            (
                Refusal::Nul {
                    field: "variables.a".into(),
                },
                StatusCode::UNPROCESSABLE_ENTITY,
                Some("variables.a"),
                None,
            ),
            (
                Refusal::UnknownBundle {
                    field: "model".into(),
                    name: "x".into(),
                    loaded: vec!["a".into(), "b".into()],
                },
                StatusCode::UNPROCESSABLE_ENTITY,
                Some("model"),
                None,
            ),
            (
                Refusal::Rate {
                    key: "k".into(),
                    per_minute: 1,
                    wait_secs: 42,
                },
                StatusCode::TOO_MANY_REQUESTS,
                None,
                Some("42"),
            ),
            (
                Refusal::InFlight {
                    key: "k".into(),
                    in_flight: 2,
                    max: 2,
                },
                StatusCode::TOO_MANY_REQUESTS,
                None,
                Some("5"),
            ),
            (
                Refusal::KeyReused {
                    key: "same".into(),
                    job: crate::queue::JobId::from("j1"),
                    differs: "input",
                },
                StatusCode::CONFLICT,
                Some("idempotency_key"),
                None,
            ),
        ];
        for (refusal, status, field, retry) in cases {
            let message = refusal.to_string();
            let error = ApiError::from(refusal);
            assert_eq!(error.message, message);
            assert_eq!(error.field.as_deref(), field, "{message}");
            let response = error.into_response();
            assert_eq!(response.status(), status, "{message}");
            let retry_after = response.headers().get("retry-after");
            assert_eq!(
                retry_after.and_then(|v| v.to_str().ok()),
                retry,
                "{message}"
            );
        }
        let store = Refusal::Store(QueueError::NotFound(crate::queue::JobId::from("j1")));
        assert_eq!(ApiError::from(store).code, ErrorCode::NotFound);
    }

    #[test]
    fn other_queue_errors_keep_their_status() {
        let e = QueueError::NotFound(crate::queue::JobId::from("j1"));
        assert_eq!(ApiError::from(e).code, ErrorCode::NotFound);
        let e = QueueError::Cursor("x".into());
        let response = ApiError::from(e).into_response();
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
        assert!(response.headers().get("retry-after").is_none());
    }
}
