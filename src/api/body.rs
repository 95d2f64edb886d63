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
                let field = e.path().to_string();
                let message = format!("invalid JSON body: {}", e.inner());
                if field == "." {
                    ApiError::new(ErrorCode::InvalidRequest, message)
                } else {
                    ApiError::field(ErrorCode::InvalidRequest, field, message)
                }
            })
    }
}
