//! The rules of a job's own fields, the same for every way in (and the
//! fuzz targets): no NUL byte anywhere (PostgreSQL cannot store one,
//! SQLite would cut the text short), a non-blank idempotency key, attempts
//! and priority in range, and a priority within the key's `max_priority`.

use serde_json::Value;

use super::refusal::Refusal;
use crate::access::Principal;
use crate::queue::NewJob;
use crate::types::text::has_no_nul;

/// The priorities a job may ask for (higher runs first); a key's
/// `max_priority` lowers the top.
pub const PRIORITY_RANGE: std::ops::RangeInclusive<i32> = PRIORITY_MIN..=PRIORITY_MAX;
/// The lowest priority a job may ask for.
pub const PRIORITY_MIN: i32 = -1000;
/// The highest priority a job may ask for (a key's `max_priority` may
/// lower it).
pub const PRIORITY_MAX: i32 = 1000;
/// The most attempts a submitter may give a job.
pub const MAX_ATTEMPTS: u32 = 100;

/// Refuses a job whose own fields break a rule: the first one broken.
pub fn check_fields(job: &NewJob) -> Result<(), Refusal> {
    no_nul("input", &job.input)?;
    no_nul_in("variables", &Value::Object(job.variables.clone()))?;
    if let Some(messages) = &job.messages {
        no_nul_in("messages", &Value::Array(messages.clone()))?;
    }
    // A job's trace context needs no check: `TraceContext::parse` keeps
    // only printable ASCII.
    for (field, value) in [
        ("idempotency_key", &job.idempotency_key),
        ("conversation_id", &job.conversation_id),
        ("bundle_version", &job.bundle_version),
    ] {
        if let Some(value) = value {
            no_nul(field, value)?;
        }
    }
    if job
        .idempotency_key
        .as_ref()
        .is_some_and(|k| k.trim().is_empty())
    {
        return Err(Refusal::BlankIdempotencyKey);
    }
    if let Some(asked) = job.max_attempts
        && !(1..=MAX_ATTEMPTS).contains(&asked)
    {
        return Err(Refusal::Attempts {
            asked,
            max: MAX_ATTEMPTS,
        });
    }
    if !PRIORITY_RANGE.contains(&job.priority) {
        return Err(Refusal::Priority {
            asked: job.priority,
            lowest: *PRIORITY_RANGE.start(),
            highest: *PRIORITY_RANGE.end(),
        });
    }
    Ok(())
}

/// Refuses a text field (named `field`) that holds a NUL byte.
pub fn no_nul(field: &str, text: &str) -> Result<(), Refusal> {
    if has_no_nul(text) {
        return Ok(());
    }
    Err(Refusal::Nul {
        field: field.to_string(),
    })
}

/// [`no_nul`] over every string and object key of a JSON value, naming the
/// path (`variables.user.name`).
fn no_nul_in(path: &str, value: &Value) -> Result<(), Refusal> {
    match value {
        Value::String(text) => no_nul(path, text),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .try_for_each(|(i, item)| no_nul_in(&format!("{path}[{i}]"), item)),
        Value::Object(map) => map.iter().try_for_each(|(key, item)| {
            let inner = format!("{path}.{key}");
            no_nul(&inner, key)?;
            no_nul_in(&inner, item)
        }),
        _ => Ok(()),
    }
}

/// Refuses a priority above the key's `max_priority`.
pub fn key_priority(key: &Principal, priority: i32) -> Result<(), Refusal> {
    match key.max_priority {
        Some(max) if priority > max => Err(Refusal::KeyPriority {
            key: key.name.clone(),
            max,
            asked: priority,
        }),
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(input: &str) -> NewJob {
        NewJob {
            bundle: "b".into(),
            input: input.into(),
            ..Default::default()
        }
    }

    fn field(job: &NewJob) -> Option<String> {
        check_fields(job)
            .unwrap_err()
            .field()
            .map(std::borrow::Cow::into_owned)
    }

    #[test]
    fn nul_bytes_are_refused_naming_the_field() {
        assert_eq!(field(&job("a\0b")).as_deref(), Some("input"));
        let mut with_vars = job("ok");
        with_vars
            .variables
            .insert("user".into(), serde_json::json!({"names": ["x", "y\0"]}));
        assert_eq!(
            field(&with_vars).as_deref(),
            Some("variables.user.names[1]")
        );
        let mut keyed = job("ok");
        keyed.idempotency_key = Some("k\0".into());
        assert_eq!(field(&keyed).as_deref(), Some("idempotency_key"));
        let refusal = check_fields(&keyed).unwrap_err();
        assert!(
            refusal
                .to_string()
                .contains("`idempotency_key` contains a NUL"),
            "{refusal}"
        );
    }

    #[test]
    fn priority_and_attempts_are_capped() {
        let mut j = job("ok");
        j.priority = i32::MAX;
        assert_eq!(field(&j).as_deref(), Some("priority"));
        assert!(
            check_fields(&j)
                .unwrap_err()
                .to_string()
                .ends_with("priorities go from -1000 to 1000")
        );
        j.priority = 5;
        j.max_attempts = Some(u32::MAX);
        assert_eq!(field(&j).as_deref(), Some("max_attempts"));
        j.max_attempts = Some(0);
        assert!(check_fields(&j).is_err());
        j.max_attempts = Some(3);
        assert!(check_fields(&j).is_ok());
        j.idempotency_key = Some("  ".into());
        assert!(matches!(
            check_fields(&j),
            Err(Refusal::BlankIdempotencyKey)
        ));
        let mut key = Principal::unrestricted("k");
        key.max_priority = Some(10);
        assert!(key_priority(&key, 10).is_ok());
        assert!(matches!(
            key_priority(&key, 11),
            Err(Refusal::KeyPriority {
                max: 10,
                asked: 11,
                ..
            })
        ));
    }
}
