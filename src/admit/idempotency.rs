//! The rule of a repeated idempotency key: it must describe the same job
//! (bundle, input, variables, kind and controls), or the caller would
//! believe a different job had been queued. The queue finds the job a key
//! names (namespaced by the API key); this decides whether it answers.

use super::refusal::Refusal;
use crate::queue::{Job, NewJob};

/// Refuses `asked` when the job its idempotency key found (`existing`)
/// differs from it, naming the first difference.
pub fn same_job(existing: &Job, asked: &NewJob) -> Result<(), Refusal> {
    let differs = if existing.bundle != asked.bundle {
        "bundle"
    } else if existing.input != asked.input {
        "input"
    } else if existing.variables != asked.variables {
        "variables"
    } else if existing.kind != asked.kind || existing.controls != asked.controls {
        "kind or controls"
    } else {
        return Ok(());
    };
    Err(Refusal::KeyReused {
        key: existing.idempotency_key.clone().unwrap_or_default(),
        job: existing.id.clone(),
        differs,
    })
}
