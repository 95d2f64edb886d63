//! W3C trace context from a wire: a `traceparent` a caller sends (the
//! HTTP header, or where the wire has one, its body's metadata) becomes the
//! job's `traceparent`, so the caller's trace continues into the job's
//! spans. One rule for every way in that reads it.

use axum::http::HeaderMap;
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

/// The caller's trace context: the `traceparent` header, else
/// `traceparent` in the body's `metadata`. One that is not a W3C
/// traceparent is left out, as the W3C recommends (the job starts a trace
/// of its own).
pub(super) fn traceparent(headers: &HeaderMap, metadata: Option<&Value>) -> Option<String> {
    let from_header = headers
        .get("traceparent")
        .and_then(|v| v.to_str().ok())
        .map(|v| v.trim().to_string());
    let from_body = || {
        metadata
            .and_then(|m| m.get("traceparent"))
            .and_then(Value::as_str)
            .map(str::to_string)
    };
    let tp = from_header.or_else(from_body)?;
    if valid_traceparent(&tp) {
        Some(tp)
    } else {
        tracing::debug!(traceparent = %tp, "ignoring a traceparent that is not W3C trace context");
        None
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
        assert_eq!(traceparent(&headers, Some(&metadata)).as_deref(), Some(TP));
        headers.insert("traceparent", HeaderValue::from_static("garbage"));
        assert_eq!(traceparent(&headers, Some(&metadata)), None);
        headers.insert("traceparent", HeaderValue::from_static(TP));
        assert_eq!(traceparent(&headers, None).as_deref(), Some(TP));
    }
}
