//! Jobs and their artifacts as MCP resources: `sa://jobs/{id}` is a job as
//! `GET /v1/jobs/{id}` shows it, `sa://jobs/{id}/artifacts` its artifacts
//! and `sa://jobs/{id}/artifacts/{name}` one of them. `resources/list`
//! gives the caller's latest jobs; a session can subscribe to a job (and a
//! 2026-07-28 client listen to it, `listen`) and is told
//! (`notifications/resources/updated`) each time it changes, until it ends
//! ([`Watch`], the one rule of both).

use rmcp::ErrorData as McpError;
use rmcp::model::{
    ReadResourceResult, Resource, ResourceContents, ResourceTemplate,
    ResourceUpdatedNotificationParam,
};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};
use std::collections::HashMap;
use std::sync::Arc;
use tokio::sync::Semaphore;
use tokio::sync::broadcast::error::RecvError;

use super::super::AppState;
use super::super::auth::Caller;
use crate::access::policy::Action;
use crate::queue::{Job, JobFilter, JobId};

const JOBS: &str = "sa://jobs/";
/// How many of the caller's latest jobs `resources/list` gives.
const LISTED: usize = 50;

/// Resources are jobs: reading them takes the `read` scope, as
/// `GET /v1/jobs` does.
fn may_read(caller: &Caller) -> Result<(), McpError> {
    caller
        .require(Action::ReadJob)
        .map_err(|e| McpError::invalid_request(e.message, None))
}

/// The caller's latest jobs.
pub async fn list(state: &AppState, caller: &Caller) -> Result<Vec<Resource>, McpError> {
    may_read(caller)?;
    let page = state
        .queue
        .list(JobFilter {
            owner: caller.listing_owner(Action::ListJobs),
            limit: LISTED,
            ..Default::default()
        })
        .await
        .map_err(|e| McpError::internal_error(format!("cannot list jobs: {e}"), None))?;
    Ok(page
        .jobs
        .iter()
        .map(|job| {
            let mut resource =
                Resource::new(format!("{JOBS}{}", job.id), format!("job {}", job.id));
            resource.description = Some(format!(
                "a job of bundle {}, {}",
                job.bundle,
                job.state.as_str()
            ));
            resource.mime_type = Some("application/json".into());
            resource
        })
        .collect())
}

/// The URI templates of a job and its artifacts.
pub fn templates() -> Vec<ResourceTemplate> {
    let mut job = ResourceTemplate::new(format!("{JOBS}{{id}}"), "job");
    job.description = Some("A job: its state, input, answer or error.".into());
    job.mime_type = Some("application/json".into());
    let mut artifact =
        ResourceTemplate::new(format!("{JOBS}{{id}}/artifacts/{{name}}"), "artifact");
    artifact.description =
        Some("One artifact of a workflow job (`…/artifacts` lists them all).".into());
    artifact.mime_type = Some("application/json".into());
    vec![job, artifact]
}

/// What `uri` names: a job, and maybe its artifacts or one of them.
enum Named<'a> {
    Job(&'a str),
    Artifacts(&'a str),
    Artifact(&'a str, &'a str),
}

fn parse(uri: &str) -> Result<Named<'_>, McpError> {
    let rest = uri.strip_prefix(JOBS).unwrap_or_default();
    let mut parts = rest.splitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(id), None, None) if !id.is_empty() => Ok(Named::Job(id)),
        (Some(id), Some("artifacts"), None) if !id.is_empty() => Ok(Named::Artifacts(id)),
        (Some(id), Some("artifacts"), Some(name)) if !id.is_empty() && !name.is_empty() => {
            Ok(Named::Artifact(id, name))
        }
        _ => Err(McpError::resource_not_found(
            format!(
                "no resource {uri}: resources are {JOBS}{{id}}, {JOBS}{{id}}/artifacts and {JOBS}{{id}}/artifacts/{{name}}"
            ),
            None,
        )),
    }
}

/// Whether `uri` names one of these resources (a job, its artifacts or
/// one of them).
pub fn names_a_job(uri: &str) -> bool {
    parse(uri).is_ok()
}

/// The job `uri` names (it, its artifacts or one of them), if the caller
/// may read it.
async fn job_of(state: &AppState, caller: &Caller, uri: &str) -> Result<Job, McpError> {
    may_read(caller)?;
    let (Named::Job(id) | Named::Artifacts(id) | Named::Artifact(id, _)) = parse(uri)?;
    let id = JobId::from(id.to_string());
    let job = state
        .queue
        .get(&id)
        .await
        .map_err(|e| McpError::internal_error(format!("cannot read job {id}: {e}"), None))?;
    caller
        .job(Action::ReadJob, &id, job)
        .map_err(|e| McpError::resource_not_found(format!("{uri}: {}", e.message), None))
}

/// The resource `uri` as JSON text.
pub async fn read(
    state: &AppState,
    caller: &Caller,
    uri: &str,
) -> Result<ReadResourceResult, McpError> {
    may_read(caller)?;
    let not_found = |e: super::super::error::ApiError| {
        McpError::resource_not_found(format!("{uri}: {}", e.message), None)
    };
    let body: Value = match parse(uri)? {
        Named::Job(_) => json!(job_of(state, caller, uri).await?),
        Named::Artifacts(id) => {
            let artifacts =
                super::super::artifacts::read(state, caller, &JobId::from(id.to_string()))
                    .await
                    .map_err(not_found)?;
            json!(super::super::artifacts::Artifacts {
                job_id: id.to_string(),
                artifacts,
            })
        }
        Named::Artifact(id, name) => {
            let artifacts =
                super::super::artifacts::read(state, caller, &JobId::from(id.to_string()))
                    .await
                    .map_err(not_found)?;
            artifacts
                .into_iter()
                .find(|a| a.name == name)
                .map(|a| a.body)
                .ok_or_else(|| {
                    McpError::resource_not_found(
                        format!("job {id} has no artifact {name:?} (see {JOBS}{id}/artifacts)"),
                        None,
                    )
                })?
        }
    };
    let text = serde_json::to_string_pretty(&body).unwrap_or_default();
    Ok(ReadResourceResult::new(vec![
        ResourceContents::text(text, uri).with_mime_type("application/json"),
    ]))
}

/// Subscriptions one session may hold at once, and job resources one
/// `subscriptions/listen` may name.
pub const MAX_SUBSCRIPTIONS: usize = 64;

/// A session's room for subscriptions.
pub fn subscriptions() -> Arc<Semaphore> {
    Arc::new(Semaphore::new(MAX_SUBSCRIPTIONS))
}

/// The jobs a subscription watches, each with the URIs that named it: a
/// job's resources change whenever the job does (a new event, a new
/// state), and a job leaves the watch once it has ended and that last
/// change was told.
pub struct Watch {
    state: AppState,
    updates: tokio::sync::broadcast::Receiver<JobId>,
    jobs: HashMap<JobId, Vec<String>>,
}

impl Watch {
    /// An empty watch, listening to the queue's changes already (so none
    /// is missed between reading a job and watching it).
    pub fn new(state: &AppState) -> Self {
        Self {
            updates: state.queue.subscribe(),
            state: state.clone(),
            jobs: HashMap::new(),
        }
    }

    /// Watches the job `uri` names, if the caller may read it; a job that
    /// has already ended has nothing more to tell and is not watched.
    pub async fn add(&mut self, caller: &Caller, uri: &str) -> Result<(), McpError> {
        let job = job_of(&self.state, caller, uri).await?;
        if !job.state.is_terminal() {
            self.jobs.entry(job.id).or_default().push(uri.to_string());
        }
        Ok(())
    }

    /// Whether no job is left to tell of.
    pub fn is_empty(&self) -> bool {
        self.jobs.is_empty()
    }

    /// Waits for a change of a watched job: the jobs that changed. `None`
    /// once the queue tells of no more changes. Cancel-safe: dropped
    /// before it answers, it has taken no change. The store is also read
    /// now and then (as a job's feed does): a job that ended without this
    /// daemon hearing of it (another daemon's write) still leaves.
    pub async fn changed(&mut self) -> Option<Vec<JobId>> {
        let every = self.state.sse_recheck.max(super::super::feed::MIN_RECHECK);
        loop {
            let heard = tokio::select! {
                heard = self.updates.recv() => heard,
                () = tokio::time::sleep(every) => {
                    let ended = self.ended().await;
                    if ended.is_empty() {
                        continue;
                    }
                    return Some(ended);
                }
            };
            match heard {
                Ok(id) if self.jobs.contains_key(&id) => return Some(vec![id]),
                Ok(_) => continue,
                // Some changes were missed: any watched job may have changed.
                Err(RecvError::Lagged(_)) => return Some(self.jobs.keys().cloned().collect()),
                Err(RecvError::Closed) => return None,
            }
        }
    }

    /// The watched jobs that have ended, as the store has them now.
    async fn ended(&self) -> Vec<JobId> {
        let mut ended = Vec::new();
        for id in self.jobs.keys() {
            if matches!(self.state.queue.get(id).await, Ok(Some(job)) if job.state.is_terminal()) {
                ended.push(id.clone());
            }
        }
        ended
    }

    /// The URIs to tell of a change of `ids`; the jobs among them that
    /// have ended leave the watch (this was their last change).
    pub async fn uris(&mut self, ids: Vec<JobId>) -> Vec<String> {
        let mut uris = Vec::new();
        for id in ids {
            let ended =
                matches!(self.state.queue.get(&id).await, Ok(Some(job)) if job.state.is_terminal());
            let named = if ended {
                self.jobs.remove(&id)
            } else {
                self.jobs.get(&id).cloned()
            };
            uris.extend(named.unwrap_or_default());
        }
        uris
    }
}

/// How long telling a client of one change may take before it counts as
/// gone.
pub const TELL_WITHIN: std::time::Duration = std::time::Duration::from_secs(5);

/// Subscribes `peer` to the job `uri` names: a task tells it of each
/// change of the job until the job ends or the session closes. It holds
/// one of the session's `room` meanwhile.
pub async fn subscribe(
    state: &AppState,
    caller: &Caller,
    peer: Peer<RoleServer>,
    room: &Arc<Semaphore>,
    uri: &str,
) -> Result<(), McpError> {
    parse(uri)?;
    let Ok(held) = room.clone().try_acquire_owned() else {
        return Err(McpError::invalid_request(
            format!(
                "this session already watches {MAX_SUBSCRIPTIONS} jobs; each subscription ends with its job"
            ),
            None,
        ));
    };
    // Only a job the caller sees can be watched.
    let mut watch = Watch::new(state);
    watch.add(caller, uri).await?;
    tokio::spawn(async move {
        let _held = held;
        while !watch.is_empty() {
            let changed = tokio::select! {
                changed = watch.changed() => changed,
                () = peer_closed(&peer) => return,
            };
            let Some(ids) = changed else { return };
            for uri in watch.uris(ids).await {
                let told = tokio::time::timeout(
                    TELL_WITHIN,
                    peer.notify_resource_updated(ResourceUpdatedNotificationParam::new(uri)),
                )
                .await;
                if !matches!(told, Ok(Ok(()))) {
                    return;
                }
            }
        }
    });
    Ok(())
}

/// Resolves once the peer's transport is closed (checked every second).
async fn peer_closed(peer: &Peer<RoleServer>) {
    while !peer.is_transport_closed() {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn uris_name_a_job_its_artifacts_or_one_artifact() {
        assert!(matches!(parse("sa://jobs/j1"), Ok(Named::Job("j1"))));
        assert!(matches!(
            parse("sa://jobs/j1/artifacts"),
            Ok(Named::Artifacts("j1"))
        ));
        assert!(matches!(
            parse("sa://jobs/j1/artifacts/review"),
            Ok(Named::Artifact("j1", "review"))
        ));
        for wrong in [
            "sa://jobs/",
            "sa://jobs/j1/journal",
            "sa://jobs/j1/artifacts/",
            "test://static-text",
        ] {
            let Err(error) = parse(wrong) else {
                panic!("{wrong} named something")
            };
            assert!(error.message.contains(wrong), "{}", error.message);
        }
    }
}
