//! How a request names its idempotency key, as every route that takes one
//! reads it: a body field, else the `Idempotency-Key` header, and how the
//! API document describes that header.

use aide::transform::TransformOperation;
use axum::http::HeaderMap;

use super::document::reads_header;
use super::error::{ApiError, ErrorCode};
use crate::types::text;

/// The idempotency key from the body field or, failing that, the
/// `Idempotency-Key` header. A blank key would silently make unrelated
/// submissions share one job, so it is refused rather than ignored; a
/// header that is no key is refused even where the body's wins (a request
/// the document calls invalid is refused, whatever else it carries).
pub(super) fn idempotency_key(
    body: Option<String>,
    headers: &HeaderMap,
) -> Result<Option<String>, ApiError> {
    let header = idempotency_header(headers)?;
    if let Some(key) = body {
        if text::is_blank(&key) {
            return Err(ApiError::field(
                ErrorCode::InvalidRequest,
                "idempotency_key",
                "the idempotency key is empty; send a non-blank key or leave the field out",
            ));
        }
        return Ok(Some(key));
    }
    Ok(header)
}

/// The `Idempotency-Key` header, as every route that reads it reads it: a
/// token of visible ASCII ([`text::TOKEN_PATTERN`]), or a 422 naming it.
pub(super) fn idempotency_header(headers: &HeaderMap) -> Result<Option<String>, ApiError> {
    let Some(value) = headers.get("idempotency-key") else {
        return Ok(None);
    };
    match std::str::from_utf8(value.as_bytes()) {
        Ok(key) if text::is_token(key) => Ok(Some(key.to_string())),
        _ => Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "Idempotency-Key",
            "the Idempotency-Key header is empty or not visible ASCII (letters, digits and \
             punctuation, no spaces); send a token such as a UUID, or leave the header out",
        )),
    }
}

/// The `Idempotency-Key` header in the API document, described by `what`
/// it names on the route.
pub(super) fn reads_idempotency_key<'t>(
    op: TransformOperation<'t>,
    what: &str,
) -> TransformOperation<'t> {
    reads_header(op, "Idempotency-Key", what, text::TOKEN_PATTERN)
}
