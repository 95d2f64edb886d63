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
//! - **JSON only** (415): a POST, PUT or PATCH must say
//!   `Content-Type: application/json`, even with an empty body. Browsers send
//!   `text/plain` and form posts cross-origin without asking; a JSON request
//!   needs a CORS preflight, which the daemon never grants.
//!
//! `/healthz` and `/v1/openapi.json` reveal nothing and stay open to all.

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
    pub fn check(&self, method: &Method, path: &str, headers: &HeaderMap) -> Result<(), ApiError> {
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
        self.check_origin(headers, host)?;
        let changes = [Method::POST, Method::PUT, Method::PATCH].contains(method);
        if changes && !is_json(header_str(headers, header::CONTENT_TYPE)) {
            return Err(ApiError::new(
                ErrorCode::UnsupportedMediaType,
                "send the request with Content-Type: application/json (even with an empty body)",
            ));
        }
        Ok(())
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
    match door.check(request.method(), request.uri().path(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(refusal) => {
            let reason = match refusal.code {
                ErrorCode::MisdirectedHost => "host",
                ErrorCode::ForbiddenOrigin => "origin",
                _ => "media_type",
            };
            door.bus.publish(DaemonEvent::RequestRefused { reason });
            refusal.into_response()
        }
    }
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

    #[test]
    fn a_simple_cross_site_post_is_refused_and_a_json_client_is_not() {
        let door = FrontDoor::default();
        let json = [
            ("host", "127.0.0.1:7860"),
            ("content-type", "application/json"),
        ];
        assert_eq!(
            code(door.check(&Method::POST, "/v1/jobs", &headers(&json))),
            None
        );
        // A page's text/plain "simple request" (no preflight in browsers).
        let plain = [("host", "127.0.0.1:7860"), ("content-type", "text/plain")];
        assert_eq!(
            code(door.check(&Method::POST, "/v1/jobs", &headers(&plain))),
            Some("media")
        );
        // No body, no content type: still refused (an empty reload or cancel).
        let bare = [("host", "localhost:7860")];
        assert_eq!(
            code(door.check(&Method::POST, "/v1/reload", &headers(&bare))),
            Some("media")
        );
        assert_eq!(
            code(door.check(&Method::GET, "/v1/jobs", &headers(&bare))),
            None
        );
        let vendor = [
            ("host", "localhost"),
            (
                "content-type",
                "application/merge-patch+json; charset=utf-8",
            ),
        ];
        assert_eq!(
            code(door.check(&Method::PATCH, "/x", &headers(&vendor))),
            None
        );
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
                code(door.check(&Method::GET, "/v1/jobs", &headers(&[("host", host)]))),
                None,
                "{host}"
            );
        }
        for host in ["evil.example:7860", "localhost.evil.example", "example.com"] {
            assert_eq!(
                code(door.check(&Method::GET, "/v1/jobs", &headers(&[("host", host)]))),
                Some("host"),
                "{host}"
            );
        }
        // Health and the API description stay open.
        assert_eq!(
            code(door.check(
                &Method::GET,
                "/healthz",
                &headers(&[("host", "evil.example")])
            )),
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
            code(door.check(&Method::GET, "/v1/jobs", &headers(&pairs)))
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
