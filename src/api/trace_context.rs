//! W3C trace context from a wire: a `traceparent` a caller sends (the
//! HTTP header, or where the wire has one, its body's metadata) becomes the
//! job's `traceparent`, so the caller's trace continues into the job's
//! spans. One rule for every way in that reads it.

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use serde_json::Value;

/// Whether `tp` is a W3C `traceparent` (version, a non-zero trace id and
/// span id, flags).
pub(super) fn valid_traceparent(tp: &str) -> bool {
    let parts: Vec<&str> = tp.split('-').collect();
    let hex = |s: &str, n: usize| s.len() == n && s.chars().all(|c| c.is_ascii_hexdigit());
    parts.len() == 4
        && hex(parts[0], 2)
        && hex(parts[1], 32)
        && hex(parts[2], 16)
        && hex(parts[3], 2)
        && parts[1] != "0".repeat(32)
        && parts[2] != "0".repeat(16)
}

/// The caller's trace context as its request's headers carry it, read
/// once for every way in (this extractor is the one reader of the
/// `traceparent` header): OpenTelemetry's HTTP instrumentation and
/// Temporal's interceptor send only the header. A wire whose body carries
/// one too (`traceparent` in the `metadata` of Responses and A2A,
/// `forwardedProps` of AG-UI, `_meta` of MCP, the job's own field) hands it
/// to [`CallerTrace::or_body`]. `tracestate` is not kept: the job stores one
/// traceparent, and its spans start a fresh vendor state.
#[derive(Debug, Clone, Default)]
pub struct CallerTrace {
    header: Option<String>,
}

impl CallerTrace {
    pub fn of(headers: &HeaderMap) -> Self {
        let header = headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_string());
        Self { header }
    }

    /// The job's traceparent: the header's, else the one the wire's body
    /// carries. One that is not a W3C traceparent is left out, as the W3C
    /// recommends (the job starts a trace of its own).
    pub fn or_body(&self, from_body: Option<&str>) -> Option<String> {
        let tp = self
            .header
            .clone()
            .or_else(|| from_body.map(str::to_string))?;
        if valid_traceparent(&tp) {
            Some(tp)
        } else {
            tracing::debug!(traceparent = %tp, "ignoring a traceparent that is not W3C trace context");
            None
        }
    }

    /// [`Self::or_body`] with a wire's metadata object (its `traceparent`).
    pub fn or_metadata(&self, metadata: Option<&Value>) -> Option<String> {
        self.or_body(
            metadata
                .and_then(|m| m.get("traceparent"))
                .and_then(Value::as_str),
        )
    }
}

impl<S: Send + Sync> FromRequestParts<S> for CallerTrace {
    type Rejection = std::convert::Infallible;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        Ok(Self::of(&parts.headers))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn traceparents() {
        assert!(valid_traceparent(TP));
        assert!(!valid_traceparent(
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"
        ));
        assert!(!valid_traceparent(
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01"
        ));
    }

    #[test]
    fn the_header_wins_over_metadata_and_bad_ones_are_left_out() {
        let mut headers = HeaderMap::new();
        let metadata = serde_json::json!({"traceparent": TP});
        let trace = |headers: &HeaderMap| CallerTrace::of(headers);
        assert_eq!(
            trace(&headers).or_metadata(Some(&metadata)).as_deref(),
            Some(TP)
        );
        headers.insert("traceparent", HeaderValue::from_static("garbage"));
        assert_eq!(trace(&headers).or_metadata(Some(&metadata)), None);
        headers.insert("traceparent", HeaderValue::from_static(TP));
        assert_eq!(trace(&headers).or_body(None).as_deref(), Some(TP));
    }
}
