//! The request extractors: a JSON body, path and query parameters, whose
//! errors are the API's error shape (`error.rs`) and name the offending
//! field (axum's own rejections are plain text).

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, Request};
use axum::http::request::Parts;
use serde::Deserialize;
use serde::de::DeserializeOwned;

use super::error::{ApiError, ErrorCode};

pub struct JsonBody<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonBody<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        parse(&body_bytes(request, state).await?).map(JsonBody)
    }
}

/// A request's body, within `server.max_body_bytes`.
async fn body_bytes<S: Send + Sync>(request: Request, state: &S) -> Result<Bytes, ApiError> {
    Bytes::from_request(request, state).await.map_err(|e| {
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
    })
}

/// A JSON body that is an array of `T`s (LangGraph's `/runs/batch`, the one
/// route that takes a list whole), each item read as [`JsonBody`] reads an
/// object; a 422 naming the item and its field that is wrong (`[2].input`).
pub struct JsonList<T>(pub Vec<T>);

impl<S: Send + Sync, T: DeserializeOwned> FromRequest<S> for JsonList<T> {
    type Rejection = ApiError;

    async fn from_request(request: Request, state: &S) -> Result<Self, Self::Rejection> {
        let bytes = body_bytes(request, state).await?;
        // No body at all is the empty list, which the route refuses by its
        // own rule (a batch of none), as a body-less object route reads `{}`.
        let bytes = match bytes.is_empty() {
            true => Bytes::from_static(b"[]"),
            false => bytes,
        };
        if bytes.trim_ascii_start().first() != Some(&b'[') {
            return Err(ApiError::new(
                ErrorCode::InvalidRequest,
                "invalid JSON body: the body must be a JSON array of objects (`[{…}, …]`, as the API document describes it)",
            ));
        }
        from_json(&bytes).map(JsonList).map_err(|e| {
            let message = format!("invalid JSON body at {}: {}", e.path, e.error);
            match field_of(&e) {
                Some(field) => ApiError::field(ErrorCode::InvalidRequest, field, message),
                None => ApiError::new(ErrorCode::InvalidRequest, message),
            }
        })
    }
}

/// A JSON body as `T`, or the 422 naming the field that is wrong. No body
/// at all (a body-less POST: `client.responses.cancel(id)`, a tool run
/// without arguments) is the empty object, so a route whose fields are all
/// optional takes it and one with required fields names the first missing.
/// Every body the API reads is a JSON object: an array (which serde would
/// read into a struct's fields by position), a scalar or blank text is
/// refused.
/// Reads a count or a place a client sends as a JSON whole number from 0:
/// an integer, also one written as a float (`1e3`), and one past
/// `u64::MAX` read as `u64::MAX` (past the end of anything it counts).
pub fn whole_number<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    let Some(number) = Option::<serde_json::Number>::deserialize(d)? else {
        return Ok(None);
    };
    if let Some(n) = number.as_u64() {
        return Ok(Some(n));
    }
    match number.as_f64() {
        Some(f) if f >= 0.0 && f.fract() == 0.0 => Ok(Some(if f >= u64::MAX as f64 {
            u64::MAX
        } else {
            f as u64
        })),
        _ => Err(serde::de::Error::custom(format!(
            "{number} is not a whole number from 0"
        ))),
    }
}

pub(super) fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let bytes = match bytes.is_empty() {
        true => b"{}".as_slice(),
        false => bytes,
    };
    if bytes.trim_ascii_start().first() != Some(&b'{') {
        return Err(ApiError::new(
            ErrorCode::InvalidRequest,
            "invalid JSON body: the body must be a JSON object (`{…}`, as the API document describes it), or no body at all",
        ));
    }
    from_json(bytes).map_err(|e| {
        let message = format!("invalid JSON body: {}", e.error);
        match field_of(&e) {
            Some(field) => ApiError::field(ErrorCode::InvalidRequest, field, message),
            None => ApiError::new(ErrorCode::InvalidRequest, message),
        }
    })
}

/// Why a body does not read as the type asked for: serde's error, and the
/// path in the body where it failed (`jobs[3].run_at`; empty at the top).
pub(super) struct Unread {
    pub path: String,
    pub error: serde_json::Error,
}

/// `T` from JSON text, naming where it fails. A whole number written as a
/// float (`54.0`, `5.4e1`) is the integer it spells, as JSON Schema counts
/// it (the API document says `integer`), where serde alone wants digits:
/// when the text does not read as `T`, it is read again with such numbers
/// as integers (so text that reads as it is stays exactly as sent).
pub(super) fn from_json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, Unread> {
    let unread = |e: serde_path_to_error::Error<serde_json::Error>| Unread {
        path: e.path().to_string(),
        error: e.into_inner(),
    };
    let de = &mut serde_json::Deserializer::from_slice(bytes);
    let first = match serde_path_to_error::deserialize(&mut *de) {
        // Nothing may follow the value (`{} x`).
        Ok(value) => match de.end() {
            Ok(()) => return Ok(value),
            Err(error) => Unread {
                path: ".".into(),
                error,
            },
        },
        Err(e) => unread(e),
    };
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(bytes) else {
        return Err(first);
    };
    if !whole_floats_as_integers(&mut value) {
        return Err(first);
    }
    serde_path_to_error::deserialize(value).map_err(|_| first)
}

/// Writes each whole float of `value` (one an `i64` or `u64` holds) as
/// that integer; whether it changed any.
fn whole_floats_as_integers(value: &mut serde_json::Value) -> bool {
    use serde_json::Value;
    match value {
        Value::Number(number) if number.is_f64() => {
            let Some(float) = number.as_f64().filter(|f| f.fract() == 0.0) else {
                return false;
            };
            // Past 2^63 an f64 is no exact integer of either type.
            let integer = if (0.0..18_446_744_073_709_551_616.0).contains(&float) {
                serde_json::Number::from(float as u64)
            } else if (-9_223_372_036_854_775_808.0..0.0).contains(&float) {
                serde_json::Number::from(float as i64)
            } else {
                return false;
            };
            *number = integer;
            true
        }
        // Every item is rewritten (no short cut at the first change).
        Value::Array(items) => items
            .iter_mut()
            .map(whole_floats_as_integers)
            .fold(false, |any, changed| any | changed),
        Value::Object(map) => map
            .values_mut()
            .map(whole_floats_as_integers)
            .fold(false, |any, changed| any | changed),
        _ => false,
    }
}

/// The field an error is about: its path, or the field serde names in a
/// missing- or unknown-field error at the top level. Never an empty name
/// (`{"": 1}` is an unknown field without one: the message says so).
fn field_of(e: &Unread) -> Option<String> {
    named_field(e).filter(|field| !field.is_empty())
}

fn named_field(e: &Unread) -> Option<String> {
    let path = e.path.clone();
    let named = |text: &str| {
        let inner = e.error.to_string();
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

/// Query parameters read as LangGraph's clients send lists: a key
/// repeated (`a=x&a=y`) is a list, so is a value that is a JSON list of
/// texts (`a=["x","y"]`), and every other value is text; `T` takes each
/// parameter as [`Texts`] or text. An empty value is kept as `""` (a
/// client's "none"). A 422 when `T` does not take what came.
pub struct ListQuery<T>(pub T);

impl<S: Send + Sync, T: DeserializeOwned> FromRequestParts<S> for ListQuery<T> {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Self, Self::Rejection> {
        let raw = parts.uri.query().unwrap_or_default();
        let mut params = serde_json::Map::new();
        for (key, value) in url::form_urlencoded::parse(raw.as_bytes()) {
            let listed = value
                .starts_with('[')
                .then(|| serde_json::from_str::<Vec<String>>(&value).ok())
                .flatten();
            let mut values: Vec<serde_json::Value> = match listed {
                Some(list) => list.into_iter().map(serde_json::Value::String).collect(),
                None => vec![serde_json::Value::String(value.into_owned())],
            };
            match params.remove(&*key) {
                Some(serde_json::Value::Array(mut before)) => {
                    before.append(&mut values);
                    params.insert(key.into_owned(), serde_json::Value::Array(before));
                }
                Some(before) => {
                    values.insert(0, before);
                    params.insert(key.into_owned(), serde_json::Value::Array(values));
                }
                None if values.len() == 1 => {
                    params.insert(key.into_owned(), values.remove(0));
                }
                None => {
                    params.insert(key.into_owned(), serde_json::Value::Array(values));
                }
            }
        }
        serde_json::from_value(serde_json::Value::Object(params))
            .map(ListQuery)
            .map_err(|e| {
                ApiError::new(
                    ErrorCode::InvalidRequest,
                    format!("invalid query string: {e}"),
                )
            })
    }
}

/// A query parameter given once or as a list ([`ListQuery`]).
#[derive(Debug, Clone, serde::Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum Texts {
    One(String),
    Many(Vec<String>),
}

impl Texts {
    pub fn iter(&self) -> impl Iterator<Item = &str> {
        let many: &[String] = match self {
            Self::One(one) => std::slice::from_ref(one),
            Self::Many(many) => many,
        };
        many.iter().map(String::as_str)
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
    /// The body as `T` (read as [`from_json`] reads it), or serde's
    /// reason why it is not one.
    pub fn read(&self) -> Result<T, serde_json::Error> {
        from_json(&self.bytes).map_err(|e| e.error)
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
