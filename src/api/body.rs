//! The request extractors: a JSON body, path and query parameters, whose
//! errors are the API's error shape (`error.rs`) and name the offending
//! field (axum's own rejections are plain text).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::de::DeserializeOwned;

use super::error::{ApiError, ErrorCode};

pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = Bytes::from_request(request, state).await.map_err(|e| {
            if e.status() == axum::http::StatusCode::PAYLOAD_TOO_LARGE {
                ApiError::new(
                    ErrorCode::PayloadTooLarge,
                    "request body exceeds server.max_body_bytes",
                )
            } else {
                ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!("cannot read the body: {e}"),
                )
            }
        })?;
        parse(&bytes).map(JsonBody)
    }
}

/// A JSON body as `T`, or the 422 naming the field that is wrong. No body
/// at all (a body-less POST: `client.responses.cancel(id)`, a tool run
/// without arguments) is the empty object, so a route whose fields are all
/// optional takes it and one with required fields names the first missing.
pub(super) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bytes = match bytes.trim_ascii().is_empty() {
        true => b"{}".as_slice(),
        false => bytes,
    };
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    serde_path_to_error::deserialize(de).map_err(|e| {
        let message = format!("invalid JSON body: {}", e.inner());
        match field_of(&e) {
            Some(field) => ApiError::field(ErrorCode::InvalidRequest, field, message),
            None => ApiError::new(ErrorCode::InvalidRequest, message),
        }
    })
}

/// The field an error is about: its path, or the field serde names in a
/// missing- or unknown-field error at the top level. Never an empty name
/// (`{"": 1}` is an unknown field without one: the message says so).
fn field_of(e: &serde_path_to_error::Error<serde_json::Error>) -> Option<String> {
    named_field(e).filter(|field| !field.is_empty())
}

fn named_field(e: &serde_path_to_error::Error<serde_json::Error>) -> Option<String> {
    let path = e.path().to_string();
    let named = |text: &str| {
        let inner = e.inner().to_string();
        let rest = inner.split_once(text)?.1;
        Some(rest.split('`').next()?.to_string())
    };
    let field = named("missing field `").or_else(|| named("unknown field `"));
    match (path.as_str(), field) {
        (".", field) => field,
        // An unknown field's path already ends with it.
        (_, Some(field)) if path != field && !path.ends_with(&format!(".{field}")) => {
            Some(format!("{path}.{field}"))
        }
        _ => Some(path),
    }
}

/// Path parameters. A segment that cannot be one (not UTF-8 once
/// percent-decoded) names no resource: a 404 saying which segment.
pub struct Path<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned + Send> FromRequestParts<S> for Path<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Path::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Path(value)| Path(value))
            .map_err(|e| {
                ApiError::new(
                    ErrorCode::NotFound,
                    format!(
                        "no such resource: {}; path segments must be percent-encoded UTF-8",
                        e.body_text()
                    ),
                )
            })
    }
}

/// Query parameters: a 422 naming the parameter that is unknown or does
/// not parse.
pub struct Query<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for Query<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Self::Rejection> {
        axum::extract::Query::<T>::from_request_parts(parts, state)
            .await
            .map(|axum::extract::Query(value)| Query(value))
            .map_err(|e| {
                let text = e.body_text();
                let detail = text
                    .strip_prefix("Failed to deserialize query string: ")
                    .unwrap_or(&text);
                let message = format!("invalid query string: {detail}");
                // serde names the parameter first: `limit: invalid digit…`.
                match detail.split_once(": ") {
                    Some((name, _))
                        if !name.is_empty()
                            && name
                                .chars()
                                .all(|c| c.is_ascii_alphanumeric() || "_-.[]".contains(c)) =>
                    {
                        ApiError::field(ErrorCode::InvalidRequest, name, message)
                    }
                    _ => ApiError::new(ErrorCode::InvalidRequest, message),
                }
            })
    }
}

/// A JSON body of `T` that the handler reads itself ([`WireBody::read`]),
/// so that its refusals are in its wire's own shape (OpenAI's, on the
/// OpenAI wires) rather than the API's; the API document describes `T`.
pub struct WireBody<T> {
    bytes: Bytes,
    of: std::marker::PhantomData<fn() -> T>,
}

impl<T: DeserializeOwned> WireBody<T> {
    /// The body as `T`, or serde's reason why it is not one.
    pub fn read(&self) -> Result<T, serde_json::Error> {
        serde_json::from_slice(&self.bytes)
    }
}

impl<S: Send + Sync, T> FromRequest<S> for WireBody<T> {
    type Rejection = <Bytes as FromRequest<S>>::Rejection;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        Ok(Self {
            bytes: Bytes::from_request(request, state).await?,
            of: std::marker::PhantomData,
        })
    }
}
