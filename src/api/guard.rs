//! The front door: which requests may reach a handler at all, before any
//! token is looked at. A web page the operator opens must never drive or
//! read the daemon, even the default one (loopback, no token):
//!
//! - **Host allowlist** (421): the loopback names, IP literals and
//!   `server.public_hosts`. A DNS-rebinding page's requests carry its own
//!   domain name as `Host`, so they never get through.
//! - **Origin** (403): a request from a page (`Origin`, or
//!   `Sec-Fetch-Site: same-site / cross-site`) is refused unless its origin is
//!   the daemon's own or listed in `server.allowed_origins`.
//!
//! `/healthz` and `/v1/openapi.json` reveal nothing and stay open to all.
//!
//! The door's third rule, **JSON only** ([`json_only`], 415), is asked
//! behind it, once the route is known and its caller authenticated (a
//! caller without a key learns 401 first, a method the route does not serve
//! is 405): a POST, PUT, PATCH or DELETE that carries a body must say
//! `Content-Type: application/json`. Browsers send `text/plain`, form posts
//! and untyped blobs cross-origin without asking; a JSON request needs a
//! CORS preflight, which the daemon never grants. A request without a body
//! (no `Content-Length` or `Content-Length: 0`, no `Transfer-Encoding`),
//! as `client.responses.cancel(id)` of the `openai` package sends, is an
//! empty body and passes: it carries nothing to be read as another type.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use super::error::{ApiError, ErrorCode};
use crate::events::daemon::{DaemonBus, DaemonEvent};

/// Who may knock: built once from `[server]`. Each refusal is published
/// on the daemon bus (counted, logged).
#[derive(Clone, Default)]
pub struct FrontDoor {
    bus: DaemonBus,
    /// Host names accepted besides loopback names and IP literals
    /// (lowercase, without port).
    public_hosts: Arc<[String]>,
    /// Origins (`scheme://host[:port]`, lowercase) whose pages may call.
    allowed_origins: Arc<[String]>,
}

impl FrontDoor {
    pub fn new(bus: DaemonBus, public_hosts: &[String], allowed_origins: &[String]) -> Self {
        let lower = |v: &[String], trim: fn(&str) -> &str| {
            v.iter()
                .map(|s| trim(s.trim()).to_ascii_lowercase())
                .collect::<Vec<_>>()
                .into()
        };
        Self {
            bus,
            public_hosts: lower(public_hosts, |s| s),
            allowed_origins: lower(allowed_origins, |s| s.trim_end_matches('/')),
        }
    }

    /// Why a request may not come in, if it may not.
    pub fn check(&self, path: &str, headers: &HeaderMap) -> Result<(), ApiError> {
        if path == "/healthz" || path == "/v1/openapi.json" {
            return Ok(());
        }
        let host = header_str(headers, header::HOST);
        if let Some(host) = host
            && !self.host_allowed(host)
        {
            return Err(ApiError::new(
                ErrorCode::MisdirectedHost,
                format!(
                    "Host {host:?} is not served here; add it to server.public_hosts if clients really reach the daemon by that name"
                ),
            ));
        }
        self.check_origin(headers, host)
    }

    fn host_allowed(&self, host: &str) -> bool {
        let name = host_name(host);
        name == "localhost"
            || name.parse::<IpAddr>().is_ok()
            || self.public_hosts.iter().any(|h| *h == name || *h == host)
    }

    fn check_origin(&self, headers: &HeaderMap, host: Option<&str>) -> Result<(), ApiError> {
        let origin = header_str(headers, header::ORIGIN).map(|o| o.trim_end_matches('/'));
        let from_a_page = matches!(
            header_str(headers, "sec-fetch-site"),
            Some("cross-site" | "same-site")
        );
        if origin.is_none() && !from_a_page {
            return Ok(());
        }
        let allowed = origin.is_some_and(|origin| {
            let origin = origin.to_ascii_lowercase();
            let own = host.is_some_and(|h| {
                let h = h.to_ascii_lowercase();
                origin == format!("http://{h}") || origin == format!("https://{h}")
            });
            own || self.allowed_origins.contains(&origin)
        });
        if allowed {
            return Ok(());
        }
        Err(ApiError::new(
            ErrorCode::ForbiddenOrigin,
            format!(
                "requests from web pages ({}) are refused; add the page's origin to server.allowed_origins if it should drive the daemon",
                origin.unwrap_or("another site")
            ),
        ))
    }
}

/// Refuses what the front door does not let in.
pub async fn front_door(State(door): State<FrontDoor>, request: Request, next: Next) -> Response {
    match door.check(request.uri().path(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            let reason = match refusal.code {
                ErrorCode::MisdirectedHost => "host",
                _ => "origin",
            };
            door.bus.publish(DaemonEvent::RequestRefused { reason });
            refusal.into_response()
        }
    }
}

/// Refuses a request whose body is not JSON (415): a POST, PUT, PATCH or
/// DELETE (LangGraph's store deletes by a body) with a body must say `Content-Type: application/json` (or a `+json`
/// type); one without a body is an empty body, whatever it says. Asked by
/// the authentication layer once the key is known (`auth::authenticate`),
/// so every authenticated route gets the one rule.
pub(super) fn json_only(method: &Method, headers: &HeaderMap) -> Result<(), ApiError> {
    let changes = [Method::POST, Method::PUT, Method::PATCH, Method::DELETE].contains(method);
    if !changes || !has_body(headers) || is_json(header_str(headers, header::CONTENT_TYPE)) {
        return Ok(());
    }
    Err(ApiError::new(
        ErrorCode::UnsupportedMediaType,
        "send the body with Content-Type: application/json (or send no body at all)",
    ))
}

/// Whether a request carries a body: a `Transfer-Encoding` (chunked: its
/// length is unknown until read) or a `Content-Length` other than 0.
fn has_body(headers: &HeaderMap) -> bool {
    headers.contains_key(header::TRANSFER_ENCODING)
        || header_str(headers, header::CONTENT_LENGTH).is_some_and(|n| n.trim() != "0")
}

fn header_str(headers: &HeaderMap, name: impl header::AsHeaderName) -> Option<&str> {
    headers.get(name).and_then(|v| v.to_str().ok())
}

/// `application/json` or `application/<something>+json`, any parameters.
fn is_json(content_type: Option<&str>) -> bool {
    let Some(value) = content_type else {
        return false;
    };
    let essence = value.split(';').next().unwrap_or_default().trim();
    let essence = essence.to_ascii_lowercase();
    essence == "application/json"
        || essence
            .strip_prefix("application/")
            .is_some_and(|s| s.ends_with("+json"))
}

/// The host part of a `Host` value, lowercase, without port or brackets.
fn host_name(host: &str) -> String {
    let host = host.trim().to_ascii_lowercase();
    if let Some(rest) = host.strip_prefix('[') {
        return rest.split(']').next().unwrap_or_default().to_string();
    }
    match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name.to_string(),
        _ => host,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.insert(*name, value.parse().unwrap());
        }
        map
    }

    fn code(result: Result<(), ApiError>) -> Option<&'static str> {
        result.err().map(|e| match e.code {
            ErrorCode::MisdirectedHost => "host",
            ErrorCode::ForbiddenOrigin => "origin",
            ErrorCode::UnsupportedMediaType => "media",
            _ => "other",
        })
    }

    fn media(method: Method, pairs: &[(&'static str, &str)]) -> Option<&'static str> {
        code(json_only(&method, &headers(pairs)))
    }

    #[test]
    fn a_body_that_is_not_json_is_refused_and_no_body_at_all_is_not() {
        let json = [
            ("content-type", "application/json"),
            ("content-length", "2"),
        ];
        assert_eq!(media(Method::POST, &json), None);
        // A page's text/plain "simple request" (no preflight in browsers),
        // and an untyped blob.
        let plain = [("content-type", "text/plain"), ("content-length", "9")];
        assert_eq!(media(Method::POST, &plain), Some("media"));
        assert_eq!(
            media(Method::POST, &[("content-length", "9")]),
            Some("media")
        );
        let chunked = [("transfer-encoding", "chunked")];
        assert_eq!(media(Method::PUT, &chunked), Some("media"));
        // No body: an empty one, whatever it says (`responses.cancel(id)`).
        assert_eq!(media(Method::POST, &[]), None);
        assert_eq!(media(Method::POST, &[("content-length", "0")]), None);
        let empty_plain = [("content-type", "text/plain"), ("content-length", "0")];
        assert_eq!(media(Method::POST, &empty_plain), None);
        assert_eq!(media(Method::GET, &plain), None);
        // LangGraph's store deletes by a body: JSON too.
        assert_eq!(media(Method::DELETE, &plain), Some("media"));
        assert_eq!(media(Method::DELETE, &json), None);
        assert_eq!(media(Method::DELETE, &[]), None);
        let vendor = [
            (
                "content-type",
                "application/merge-patch+json; charset=utf-8",
            ),
            ("content-length", "2"),
        ];
        assert_eq!(media(Method::PATCH, &vendor), None);
    }

    #[test]
    fn a_rebinding_host_is_misdirected_unless_listed() {
        let door = FrontDoor::new(DaemonBus::new(), &["agents.example.com".into()], &[]);
        for host in [
            "localhost:7860",
            "127.0.0.1",
            "[::1]:7860",
            "10.0.0.5:80",
            "agents.example.com:7860",
        ] {
            assert_eq!(
                code(door.check("/v1/jobs", &headers(&[("host", host)]))),
                None,
                "{host}"
            );
        }
        for host in ["evil.example:7860", "localhost.evil.example", "example.com"] {
            assert_eq!(
                code(door.check("/v1/jobs", &headers(&[("host", host)]))),
                Some("host"),
                "{host}"
            );
        }
        // Health and the API description stay open.
        assert_eq!(
            code(door.check("/healthz", &headers(&[("host", "evil.example")]))),
            None
        );
    }

    #[test]
    fn pages_of_other_origins_are_refused_and_the_daemons_own_or_listed_ones_are_not() {
        let door = FrontDoor::new(DaemonBus::new(), &[], &["http://localhost:3000/".into()]);
        let from = |origin: &str, site: &str| {
            let mut pairs = vec![("host", "127.0.0.1:7860")];
            if !origin.is_empty() {
                pairs.push(("origin", origin));
            }
            if !site.is_empty() {
                pairs.push(("sec-fetch-site", site));
            }
            code(door.check("/v1/jobs", &headers(&pairs)))
        };
        assert_eq!(from("http://127.0.0.1:9999", "same-site"), Some("origin"));
        assert_eq!(from("https://evil.example", "cross-site"), Some("origin"));
        assert_eq!(from("null", ""), Some("origin"));
        assert_eq!(
            from("", "cross-site"),
            Some("origin"),
            "a cross-site navigation"
        );
        assert_eq!(
            from("http://127.0.0.1:7860", "same-origin"),
            None,
            "the daemon's own pages"
        );
        assert_eq!(from("http://localhost:3000", "same-site"), None, "listed");
        assert_eq!(from("", "none"), None, "typed into the address bar");
        assert_eq!(from("", ""), None, "curl, the CLI, SDKs");
    }
}
