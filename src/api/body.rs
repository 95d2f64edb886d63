//! A JSON body extractor whose errors name the offending field.

use axum::body::Bytes;
use axum::extract::{FromRequest, Request};
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
        let de = &mut serde_json::Deserializer::from_slice(&bytes);
        serde_path_to_error::deserialize(de)
            .map(JsonBody)
            .map_err(|e| {
                let message = format!("invalid JSON body: {}", e.inner());
                match field_of(&e) {
                    Some(field) => ApiError::field(ErrorCode::InvalidRequest, field, message),
                    None => ApiError::new(ErrorCode::InvalidRequest, message),
                }
            })
    }
}

/// The field an error is about: its path, or the field serde names in a
/// missing- or unknown-field error at the top level.
fn field_of(e: &serde_path_to_error::Error<serde_json::Error>) -> Option<String> {
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
