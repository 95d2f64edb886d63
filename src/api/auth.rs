//! Who is asking, and may they: the API key a request presents (a bearer
//! token, or `X-Api-Key`: [`presented_key`]) is looked up in the
//! registry snapshot's key ring (so a reload that changes the keys applies
//! at once) and the request carries the key as a [`Caller`]; each route
//! declares its action, whose scope it requires ([`require`]). Which
//! job, conversation or decision a key may touch is asked of the one
//! authorization policy (`crate::access::policy`) through [`Caller`]:
//! someone else's job is a 404, as an unknown one is.

use std::sync::Arc;

use axum::extract::{FromRequestParts, Request, State};
use axum::http::header::AUTHORIZATION;
use axum::http::request::Parts;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use subtle::ConstantTimeEq;

use super::error::{ApiError, ErrorCode};
use crate::access::Principal;
use crate::access::policy::{self, Action, Refusal, Resource};
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

    /// Asks the authorization policy whether this key may do `action` on
    /// `resource`; a refusal is the API's answer for it (an object that
    /// does not exist for the key is `unknown`'s answer).
    pub fn authorize(
        &self,
        action: Action,
        resource: &Resource,
        unknown: impl FnOnce() -> ApiError,
    ) -> Result<(), ApiError> {
        policy::authorize(&self.0, action, resource).map_err(|refusal| refused(refusal, unknown))
    }

    /// Whether the policy lets this key do `action` on `resource` (for
    /// filtering listings: what it may not touch is not listed).
    pub fn allows(&self, action: Action, resource: &Resource) -> bool {
        policy::authorize(&self.0, action, resource).is_ok()
    }

    /// Refuses a key without `action`'s scope (what a route declares).
    pub fn require(&self, action: Action) -> Result<(), ApiError> {
        self.authorize(action, &Resource::daemon(), || {
            ApiError::internal("the daemon itself was not found")
        })
    }

    /// Refuses `action` on a request that names `bundle` (in `field`): a
    /// bundle outside the key's globs gets the same 422 as an unknown
    /// bundle, so a key learns nothing of bundles it may not use.
    pub fn on_bundle(&self, action: Action, bundle: &str, field: &str) -> Result<(), ApiError> {
        policy::authorize(&self.0, action, &Resource::bundle(bundle)).map_err(|refusal| {
            let message = refusal.to_string();
            match refusal {
                Refusal::Bundle { .. } => ApiError::field(ErrorCode::UnknownBundle, field, message),
                other => refused(other, || ApiError::internal("a bundle request was unknown")),
            }
        })
    }

    /// `job` if this key may do `action` on it, else the policy's refusal:
    /// another key's job it may not read is the 404 an unknown id gets.
    pub fn job(&self, action: Action, id: &JobId, job: Option<Job>) -> Result<Job, ApiError> {
        let job = job.ok_or_else(|| ApiError::job_not_found(id))?;
        self.authorize(action, &job_resource(&job), || ApiError::job_not_found(id))?;
        Ok(job)
    }

    /// Job `id` as the queue has it, if this key may do `action` on it
    /// ([`job`](Self::job)): the prologue of every route on one job.
    pub async fn stored_job(
        &self,
        state: &super::AppState,
        action: Action,
        id: &JobId,
    ) -> Result<Job, ApiError> {
        self.job(action, id, state.queue.get(id).await?)
    }

    /// Whether this key may do `action` on `job`.
    pub fn allows_job(&self, action: Action, job: &Job) -> bool {
        self.allows(action, &job_resource(job))
    }

    /// The owner a listing of `action`'s objects is narrowed to: the key's
    /// own, unless its scopes extend the action to every key's.
    pub fn listing_owner(&self, action: Action) -> Option<String> {
        (!self.0.can(action.scope_for_others())).then(|| self.name().to_string())
    }
}

/// A job as the policy sees it.
pub fn job_resource(job: &Job) -> Resource<'_> {
    Resource::owned("job", job.owner.as_deref(), Some(&job.bundle))
}

/// The API's answer to a refusal.
fn refused(refusal: Refusal, unknown: impl FnOnce() -> ApiError) -> ApiError {
    match refusal {
        Refusal::Unknown { .. } => unknown(),
        Refusal::Bundle { .. } => {
            ApiError::field(ErrorCode::UnknownBundle, "bundle", refusal.to_string())
        }
        Refusal::Scope { .. } | Refusal::Foreign { .. } => {
            ApiError::new(ErrorCode::Forbidden, refusal.to_string())
        }
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

/// The header LangGraph's SDKs (and many API gateways) send an API key
/// in, beside `Authorization: Bearer`.
pub const API_KEY_HEADER: &str = "x-api-key";

/// The API key `headers` present, if any: the token of `Authorization:
/// Bearer <token>`, else the value of `X-Api-Key`. A Bearer token wins when
/// both are sent (a proxy may add one of its own). Every way in reads the
/// key here (the agent cards too, which read it without requiring it).
pub(super) fn presented_key(headers: &axum::http::HeaderMap) -> Option<&str> {
    let text = |name| headers.get(name).and_then(|v| v.to_str().ok());
    text(AUTHORIZATION.as_str())
        .and_then(|v| v.strip_prefix("Bearer "))
        .or_else(|| text(API_KEY_HEADER))
        .map(str::trim)
}

/// The request layer of every authenticated route: the key is looked up
/// (a missing or unknown token is a 401), then the body must be JSON or
/// absent (415, [`super::guard::json_only`]), in that order, so a caller
/// without a key learns nothing about the route's content.
pub async fn authenticate(State(auth): State<Auth>, request: Request, next: Next) -> Response {
    match known_key(&auth, &request) {
        Ok(caller) => admitted(&auth, caller, request, next).await,
        Err(refusal) => refusal.into_response(),
    }
}

/// [`authenticate`] for a JSON-RPC interface (A2A), which answers a body
/// that is not JSON with a JSON-RPC error of its own.
pub async fn authenticate_rpc(
    State(auth): State<Auth>,
    mut request: Request,
    next: Next,
) -> Response {
    match known_key(&auth, &request) {
        Ok(caller) => {
            request.extensions_mut().insert(caller);
            next.run(request).await
        }
        Err(refusal) => refusal.into_response(),
    }
}

/// The caller the request's key names ([`presented_key`]), or the 401
/// (told on the daemon bus).
fn known_key(auth: &Auth, request: &Request) -> Result<Caller, ApiError> {
    let keys = auth.registry.snapshot().keys.clone();
    keys.authenticate(presented_key(request.headers()))
        .map(Caller)
        .map_err(|e| {
            auth.bus.publish(DaemonEvent::RequestRefused {
                reason: "unauthorized",
            });
            ApiError::new(ErrorCode::Unauthorized, e.to_string())
        })
}

/// A request whose key is known goes on if its body may be read.
async fn admitted(auth: &Auth, caller: Caller, mut request: Request, next: Next) -> Response {
    if let Err(refusal) = super::guard::json_only(request.method(), request.headers()) {
        auth.bus.publish(DaemonEvent::RequestRefused {
            reason: "media_type",
        });
        return refusal.into_response();
    }
    request.extensions_mut().insert(caller);
    next.run(request).await
}

/// `POST /v1/reload` also takes the control file's reload key, so a local
/// operator can apply an edit that changes the keys themselves.
pub async fn authenticate_or_reload_key(
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
        let operator = Principal::unrestricted(crate::access::LOCAL);
        return admitted(&auth, Caller(Arc::new(operator)), request, next).await;
    }
    authenticate(State(auth), request, next).await
}

/// A layer that refuses callers without the scope of the route's declared
/// `action` (after [`authenticate`]).
pub async fn require(action: Action, request: Request, next: Next) -> Response {
    let allowed = match request.extensions().get::<Caller>() {
        Some(caller) => caller.require(action),
        None => Err(ApiError::internal("a scoped route without authentication")),
    };
    match allowed {
        Ok(()) => next.run(request).await,
        Err(e) => e.into_response(),
    }
}

/// Ends the open event streams and MCP listens of every key a reload
/// revoked, within the reload: a revoked key hears nothing more.
pub struct RevokedStreams {
    registry: Arc<crate::registry::Registry>,
    streams: super::limits::StreamPermits,
}

impl RevokedStreams {
    pub fn new(state: &super::AppState) -> Self {
        Self {
            registry: state.registry.clone(),
            streams: state.streams.clone(),
        }
    }
}

impl crate::events::daemon::DaemonObserver for RevokedStreams {
    fn on_daemon_event(&self, event: &DaemonEvent) {
        if !matches!(event, DaemonEvent::Reload(_)) {
            return;
        }
        let keys = self.registry.snapshot().keys.clone();
        for key in self
            .streams
            .end_unknown(|name| keys.by_name(name).is_some())
        {
            tracing::info!(key = %key, "the key was revoked: its open event streams and listens were ended");
        }
    }
}
