//! W3C trace context from a wire: a `traceparent` a caller sends (the
//! HTTP header, or where the wire has one, its body's metadata), with the
//! `tracestate` sent beside it, becomes the job's [`TraceContext`], so the
//! caller's trace continues into the job's spans. One rule for every way in
//! that reads it; what is kept of the two is [`TraceContext::parse`]'s.

use axum::extract::FromRequestParts;
use axum::http::HeaderMap;
use axum::http::request::Parts;
use serde_json::Value;

pub use crate::trace_context::TraceContext;
pub(super) use crate::trace_context::valid_traceparent;

/// The caller's trace context as its request's headers carry it, read
/// once for every way in (this extractor is the one reader of the
/// `traceparent` and `tracestate` headers): OpenTelemetry's HTTP
/// instrumentation and Temporal's interceptor send only the headers. A wire
/// whose body carries them too (`traceparent` and `tracestate` in the
/// `metadata` of Responses and A2A, `forwardedProps` of AG-UI, `_meta` of
/// MCP) hands them to [`CallerTrace::or_body`].
#[derive(Debug, Clone, Default)]
pub struct CallerTrace {
    traceparent: Option<String>,
    tracestate: Option<String>,
}

impl CallerTrace {
    pub fn of(headers: &HeaderMap) -> Self {
        let traceparent = headers
            .get("traceparent")
            .and_then(|v| v.to_str().ok())
            .map(|v| v.trim().to_string());
        // A tracestate may come as several header lines: together they are
        // one list, in their order (W3C Trace Context, §3.3.1.1).
        let lines: Vec<&str> = headers
            .get_all("tracestate")
            .iter()
            .filter_map(|v| v.to_str().ok())
            .collect();
        let tracestate = (!lines.is_empty()).then(|| lines.join(","));
        Self {
            traceparent,
            tracestate,
        }
    }

    /// The job's trace context: the headers' pair, else the pair the wire's
    /// body carries; a tracestate only ever goes with the traceparent it
    /// came beside. A traceparent that is not W3C trace context is left
    /// out, as the W3C recommends (the job starts a trace of its own), and
    /// so is a tracestate that breaks the rules.
    pub fn or_body(
        &self,
        traceparent: Option<&str>,
        tracestate: Option<&str>,
    ) -> Option<TraceContext> {
        match &self.traceparent {
            Some(header) => TraceContext::parse(header, self.tracestate.as_deref()),
            None => TraceContext::parse(traceparent?, tracestate),
        }
    }

    /// [`Self::or_body`] with a wire's metadata object (its `traceparent`
    /// and `tracestate`).
    pub fn or_metadata(&self, metadata: Option<&Value>) -> Option<TraceContext> {
        let field = |name| metadata.and_then(|m| m.get(name)).and_then(Value::as_str);
        self.or_body(field("traceparent"), field("tracestate"))
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
    const BODY_TP: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

    fn pair(context: Option<TraceContext>) -> Option<(String, Option<String>)> {
        context.map(|c| {
            (
                c.traceparent().to_string(),
                c.tracestate().map(str::to_string),
            )
        })
    }

    #[test]
    fn the_header_wins_over_metadata_and_bad_ones_are_left_out() {
        let mut headers = HeaderMap::new();
        let metadata = serde_json::json!({"traceparent": TP});
        let trace = |headers: &HeaderMap| CallerTrace::of(headers);
        assert_eq!(
            pair(trace(&headers).or_metadata(Some(&metadata))),
            Some((TP.to_string(), None))
        );
        headers.insert("traceparent", HeaderValue::from_static("garbage"));
        assert_eq!(pair(trace(&headers).or_metadata(Some(&metadata))), None);
        headers.insert("traceparent", HeaderValue::from_static(TP));
        assert_eq!(
            pair(trace(&headers).or_body(None, None)),
            Some((TP.to_string(), None))
        );
    }

    #[test]
    fn a_tracestate_goes_with_the_traceparent_it_came_beside() {
        let metadata = serde_json::json!({"traceparent": BODY_TP, "tracestate": "body=1"});
        let mut headers = HeaderMap::new();
        assert_eq!(
            pair(CallerTrace::of(&headers).or_metadata(Some(&metadata))),
            Some((BODY_TP.to_string(), Some("body=1".to_string())))
        );
        // A header traceparent brings the header's tracestate, never the body's.
        headers.insert("traceparent", HeaderValue::from_static(TP));
        assert_eq!(
            pair(CallerTrace::of(&headers).or_metadata(Some(&metadata))),
            Some((TP.to_string(), None))
        );
        headers.append("tracestate", HeaderValue::from_static("rojo=1"));
        headers.append("tracestate", HeaderValue::from_static("congo=2"));
        assert_eq!(
            pair(CallerTrace::of(&headers).or_metadata(Some(&metadata))),
            Some((TP.to_string(), Some("rojo=1,congo=2".to_string())))
        );
        // An invalid tracestate is dropped, the traceparent kept.
        headers.insert("tracestate", HeaderValue::from_static("Not Valid"));
        assert_eq!(
            pair(CallerTrace::of(&headers).or_body(None, None)),
            Some((TP.to_string(), None))
        );
        // A tracestate with no traceparent is dropped.
        let lone = serde_json::json!({"tracestate": "body=1"});
        assert_eq!(
            pair(CallerTrace::of(&HeaderMap::new()).or_metadata(Some(&lone))),
            None
        );
    }
}
