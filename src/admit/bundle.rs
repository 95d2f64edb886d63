//! What a submission names outside itself: the bundle it runs (loaded now,
//! in the registry's snapshot) and the URL its changes are POSTed to (its
//! webhook, or an A2A push config's), which the egress rule must allow.

use std::sync::Arc;

use super::refusal::Refusal;
use crate::access::Principal;
use crate::egress::Egress;
use crate::queue::NewJob;
use crate::registry::{LoadedBundle, Snapshot};

/// The bundle `name` (sent in `field`) as loaded in `snapshot`, or a
/// refusal naming the bundles that are.
pub fn loaded_bundle(
    snapshot: &Snapshot,
    name: &str,
    field: &str,
) -> Result<Arc<LoadedBundle>, Refusal> {
    if let Some(loaded) = snapshot.bundle(name) {
        return Ok(loaded.clone());
    }
    Err(Refusal::UnknownBundle {
        field: field.to_string(),
        name: name.to_string(),
        loaded: snapshot.loaded().map(|b| b.name().to_string()).collect(),
    })
}

/// The job's webhook: its own, else its key's, else its bundle's; within
/// `egress.allow`.
pub fn webhook(
    snapshot: &Snapshot,
    key: &Principal,
    job: &NewJob,
) -> Result<Option<String>, Refusal> {
    let url = job
        .webhook
        .clone()
        .or_else(|| key.webhook.clone())
        .or_else(|| {
            snapshot
                .bundle(&job.bundle)
                .and_then(|b| b.bundle.raw.webhook.clone())
        });
    let Some(url) = url else {
        return Ok(None);
    };
    check_callback(&snapshot.egress, "webhook", &url)?;
    Ok(Some(url))
}

/// A URL the daemon is to POST a job's changes to (a webhook, an A2A push
/// config's `url`, named `field`): http(s), and within the egress rule,
/// which the sender applies again to each delivery and to the address it
/// connects to.
pub fn check_callback(egress: &Egress, field: &str, url: &str) -> Result<(), Refusal> {
    crate::access::file::check_webhook(url).map_err(|source| Refusal::NotHttp {
        field: field.to_string(),
        source,
    })?;
    egress
        .check(url)
        .map(drop)
        .map_err(|source| Refusal::Egress {
            field: field.to_string(),
            source,
        })
}
