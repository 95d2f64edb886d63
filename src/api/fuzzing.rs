//! Fuzz entry points for the request-body parsers of `POST /v1/jobs` (the
//! JSON extractor, then the checks that need no loaded bundle) and of
//! `POST /v1/chat/completions`. The `fuzz/` crate (cargo-fuzz) calls these,
//! and `tests/api_fuzz_smoke.rs` drives them with random input on the
//! stable toolchain. Each panics when an invariant breaks: a refusal must
//! be a 4xx in its documented shape with a message, and an accepted request
//! must hold what the checks promise. Any other panic is a bug too.
//!
//! Not part of the daemon's behaviour; public only so the fuzz crate can
//! reach the parsers.

use super::error::ErrorCode;

/// `POST /v1/jobs` (and each job of a batch): bytes → `SubmitRequest` →
/// the job to queue.
pub fn submit_body(data: &[u8]) {
    let request: super::jobs::SubmitRequest = match super::body::parse(data) {
        Ok(request) => request,
        Err(e) => return refused(&e),
    };
    let key = request.idempotency_key.clone();
    // The wire's checks, then admission's own rules on the job's fields.
    let checked = super::jobs::validated(request, &Default::default()).and_then(|job| {
        crate::admit::check_fields(&job)
            .map(|()| job)
            .map_err(super::error::ApiError::from)
    });
    match checked {
        Ok(job) => {
            assert!(
                job.idempotency_key
                    .as_deref()
                    .is_none_or(|k| !k.trim().is_empty()),
                "accepted a blank idempotency key"
            );
            assert_eq!(job.idempotency_key, key, "the key changed");
            assert_ne!(job.max_attempts, Some(0), "accepted max_attempts 0");
            assert!(!job.input.contains('\0'), "accepted a NUL byte");
        }
        Err(e) => refused(&e),
    }
    // A batch of such jobs goes through the same extractor.
    if let Err(e) = super::body::parse::<super::jobs::BatchRequest>(data) {
        refused(&e);
    }
}

/// `POST /v1/chat/completions`: bytes → the bundle and input of its job,
/// or a refusal in OpenAI's shape.
pub fn chat_completions_body(data: &[u8]) {
    match super::openai::parse(data) {
        Ok(_) => {
            // JSON is UTF-8: bytes that are not were never a request.
            assert!(
                std::str::from_utf8(data).is_ok(),
                "accepted a body that is not UTF-8"
            );
        }
        Err(e) => {
            assert!(e.status().is_client_error(), "{e:?} is not a 4xx");
            let body = e.body();
            assert!(
                body["error"]["message"]
                    .as_str()
                    .is_some_and(|m| !m.is_empty()),
                "no message: {body}"
            );
            assert!(
                body["error"]["code"]
                    .as_str()
                    .is_some_and(|c| !c.is_empty()),
                "no code: {body}"
            );
            assert!(body["error"]["type"].is_string(), "no type: {body}");
        }
    }
}

/// A refusal of the native API: a 4xx with a message, never internal.
fn refused(e: &super::error::ApiError) {
    assert_ne!(e.code, ErrorCode::Internal, "an internal error: {e:?}");
    assert!(!e.message.is_empty(), "an empty message: {e:?}");
    assert!(
        e.field.as_deref().is_none_or(|f| !f.is_empty()),
        "an empty field name: {e:?}"
    );
    let status = e.code.status();
    assert!(status.is_client_error(), "{e:?} answers {status}");
}
