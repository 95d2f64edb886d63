//! Who is asking, and may they: the bearer token is looked up in the
//! registry snapshot's key ring (so a reload that changes the keys applies
//! at once) and the request carries the key as a [`Caller`]; each group of
//! routes then requires one scope ([`require`]). Which job, conversation or
//! decision a key may touch is decided by the handlers, with
//! [`Caller::sees`] and [`Caller::operates_on`]: someone else's job is a
//! 404, as an unknown one is.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::{ApiError, ErrorCode};
use crate::access::{Principal, Scope};
use crate::events::daemon::{DaemonBus, DaemonEvent};
use crate::queue::{Job, JobId};

/// Where the key ring is read, per request, and this run's reload key
/// (see `crate::control`).
#[derive(Clone)]
pub struct Auth {
    pub registry: Arc<crate::registry::Registry>,
    pub reload_key: Option<Arc<str>>,
    /// Where refusals are told (metrics, log).
    pub bus: DaemonBus,
}

/// The API key a request presents (set by [`authenticate`]).
#[derive(Clone, Debug)]
pub struct Caller(pub Arc<Principal>);

impl Caller {
    pub fn name(&self) -> &str {
        &self.0.name
    }

    /// Refuses a key without `scope`.
    pub fn require(&self, scope: Scope) -> Result<(), ApiError> {
        if self.0.can(scope) {
            return Ok(());
        }
        let has: Vec<&str> = self.0.scopes().map(Scope::as_str).collect();
        Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "API key {:?} lacks the `{scope}` scope this request needs (it has: {}); ask the operator for a key with it",
                self.0.name,
                has.join(", ")
            ),
        ))
    }

    /// Refuses a bundle outside the key's globs, with the same 422 as an
    /// unknown bundle would get, so a key learns nothing of bundles it may
    /// not use.
    pub fn may_use(&self, bundle: &str, field: &str) -> Result<(), ApiError> {
        if self.0.may_use(bundle) {
            return Ok(());
        }
        Err(ApiError::field(
            ErrorCode::UnknownBundle,
            field,
            format!(
                "API key {:?} may not use bundle {bundle:?} (its bundles: {}); ask the operator to add it to the key's `bundles`",
                self.0.name,
                self.0
                    .bundle_patterns
                    .as_deref()
                    .unwrap_or_default()
                    .join(", ")
            ),
        ))
    }

    /// Whether `job` is this key's to see.
    pub fn sees(&self, job: &Job) -> bool {
        self.0.sees(job.owner.as_deref())
    }

    /// Whether `job` is this key's to cancel, resolve or decide on.
    pub fn operates_on(&self, job: &Job) -> bool {
        self.0.operates_on(job.owner.as_deref())
    }

    /// `job` if this key may see it, else the 404 an unknown id gets.
    pub fn visible(&self, id: &JobId, job: Option<Job>) -> Result<Job, ApiError> {
        job.filter(|job| self.sees(job))
            .ok_or_else(|| ApiError::job_not_found(id))
    }

    /// `job` if this key may operate on it: a job it can neither see nor
    /// touch is a 404, one it sees but may not touch a 403.
    pub fn operable(&self, id: &JobId, job: Option<Job>) -> Result<Job, ApiError> {
        let job = job.ok_or_else(|| ApiError::job_not_found(id))?;
        if self.operates_on(&job) {
            return Ok(job);
        }
        if !self.sees(&job) {
            return Err(ApiError::job_not_found(id));
        }
        Err(ApiError::new(
            ErrorCode::Forbidden,
            format!(
                "job {id} was submitted by another API key; only its own key or one with `operate_all` may change it"
            ),
        ))
    }
}

impl<S: Send + Sync> FromRequestParts<S> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        parts.extensions.get::<Caller>().cloned().ok_or_else(|| {
            ApiError::internal("a route without authentication asked for its caller")
        })
    }
}

/// The token of `Authorization: Bearer <token>`, if any.
fn bearer(request: &Request) -> Option<&str> {
    bearer_of(request.headers())
}

/// The token of `Authorization: Bearer <token>` among `headers`, if any
/// (the agent cards read it without requiring it).
pub(super) fn bearer_of(headers: &axum::http::HeaderMap) -> Option<&str> {
    headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::trim)
}

/// Looks the request's key up; a missing or unknown token is a 401.
pub async fn authenticate(State(auth): State<Auth>, mut request: Request, next: Next) -> Response {
    let keys = auth.registry.snapshot().keys.clone();
    match keys.authenticate(bearer(&request)) {
        Ok(principal) => {
            request.extensions_mut().insert(Caller(principal));
            next.run(request).await
        }
        Err(e) => {
            auth.bus.publish(DaemonEvent::RequestRefused {
                reason: "unauthorized",
            });
            ApiError::new(ErrorCode::Unauthorized, e.to_string()).into_response()
        }
    }
}

/// `POST /v1/reload` also takes the control file's reload key, so a local
/// operator can apply an edit that changes the keys themselves.
pub async fn authenticate_or_reload_key(
    State(auth): State<Auth>,
    mut request: Request,
    next: Next,
) -> Response {
    let key = request
        .headers()
        .get(crate::control::RELOAD_KEY_HEADER)
        .and_then(|v| v.to_str().ok());
    if let (Some(given), Some(expected)) = (key, &auth.reload_key)
        && bool::from(given.as_bytes().ct_eq(expected.as_bytes()))
    {
        let operator = Principal::unrestricted(crate::access::LOCAL);
        request.extensions_mut().insert(Caller(Arc::new(operator)));
        return next.run(request).await;
    }
    authenticate(State(auth), request, next).await
}

/// A layer that refuses callers without `scope` (after [`authenticate`]).
pub async fn require(scope: Scope, request: Request, next: Next) -> Response {
    let allowed = match request.extensions().get::<Caller>() {
        Some(caller) => caller.require(scope),
        None => Err(ApiError::internal("a scoped route without authentication")),
    };
    match allowed {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}
