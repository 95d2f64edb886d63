//! A2A push notifications: the `…TaskPushNotificationConfig` methods over
//! the queue's push configs, the config a `SendMessage` carries (written
//! with its job, so no change of the job goes unpushed), and the format of
//! an `a2a_push` delivery for the outbox's one sender: each state change of
//! the job as a `StreamResponse` holding a `statusUpdate` (the task's status
//! as `GetTask` shows it then, and at the end the answer as its message:
//! `task::push_status`), the config's `token` as
//! `X-A2A-Notification-Token` and its `authentication` as `Authorization:
//! {scheme} {credentials}`. What gets a delivery, and when, is the outbox's
//! rule (`queue::outbox::state_changed`); retries, ordering and dead
//! letters are the sender's.

use std::collections::HashMap;

use a2a::{
    A2AError, AuthenticationInfo, DeleteTaskPushNotificationConfigRequest,
    GetTaskPushNotificationConfigRequest, ListTaskPushNotificationConfigsRequest,
    ListTaskPushNotificationConfigsResponse, StreamResponse, TaskPushNotificationConfig,
    TaskStatusUpdateEvent, error_code,
};
use serde_json::{Value, json};

use super::super::AppState;
use super::super::admission::check_callback;
use super::{Call, RpcError, params, task};

use crate::access::policy::Action;
use crate::queue::{Delivery, Job, JobId, PushAuth, PushCaps, PushConfig, PushPayload};
use crate::webhook::{Format, FormatError, Outgoing};

/// The most push configs one task holds.
pub const MAX_CONFIGS: usize = 16;
/// The longest token or credentials kept.
const MAX_SECRET_BYTES: usize = 4096;

/// The header the config's token travels in (as the Python SDK sends it).
pub const TOKEN_HEADER: &str = "X-A2A-Notification-Token";

/// `GetTaskPushNotificationConfig`: one config of a task.
pub async fn get(call: &Call, raw: Value) -> Result<Value, RpcError> {
    call.caller.require(Action::ReadJob)?;
    let request: GetTaskPushNotificationConfigRequest =
        params("GetTaskPushNotificationConfig", raw)?;
    let job = task(call, Action::ReadJob, &request.task_id).await?;
    let id = job.id.clone();
    let configs = call.state.queue.push_configs(&id).await?;
    let config = configs
        .iter()
        .find(|c| c.id == request.id)
        .ok_or_else(|| unknown_config(&id, &request.id))?;
    Ok(json!(shown(call, &job, config)))
}

/// `DeleteTaskPushNotificationConfig`: idempotent, deleting a config that
/// is gone is no error.
pub async fn delete(call: &Call, raw: Value) -> Result<Value, RpcError> {
    call.caller.require(Action::ReadJob)?;
    let request: DeleteTaskPushNotificationConfigRequest =
        params("DeleteTaskPushNotificationConfig", raw)?;
    let id = task(call, Action::WritePushConfig, &request.task_id)
        .await?
        .id;
    call.state
        .queue
        .delete_push_config(&id, &request.id)
        .await?;
    Ok(Value::Null)
}

/// `ListTaskPushNotificationConfigs` (also as the specification's table
/// spells it, `…Config`): a task's configs, in one page.
pub async fn list(call: &Call, raw: Value) -> Result<Value, RpcError> {
    call.caller.require(Action::ReadJob)?;
    let request: ListTaskPushNotificationConfigsRequest =
        params("ListTaskPushNotificationConfigs", raw)?;
    let job = task(call, Action::ReadJob, &request.task_id).await?;
    let configs = call.state.queue.push_configs(&job.id).await?;
    Ok(json!(ListTaskPushNotificationConfigsResponse {
        configs: configs.iter().map(|c| shown(call, &job, c)).collect(),
        next_page_token: None,
    }))
}

/// `CreateTaskPushNotificationConfig`: adds (or, with the id of one it
/// has, replaces) a config of a task that has not ended.
pub async fn create(call: &Call, raw: Value) -> Result<Value, RpcError> {
    call.caller.require(Action::ReadJob)?;
    let request: TaskPushNotificationConfig = params("CreateTaskPushNotificationConfig", raw)?;
    let job = task(call, Action::WritePushConfig, &request.task_id).await?;
    if job.state.is_terminal() {
        return Err(A2AError::unsupported_operation(format!(
            "task {} has ended ({}): no change of it is left to push; read it with GetTask",
            job.id, job.state
        ))
        .into());
    }
    let config = accepted(&call.state, &request)?;
    call.state
        .queue
        .put_push_config(&job.id, config.clone(), caps(&call.state))
        .await?;
    Ok(json!(wire(&job.id, &config)))
}

/// The caps push configs are held to: a task's, a key's share, the
/// daemon's (`server.max_push_configs*`).
pub fn caps(state: &AppState) -> PushCaps {
    let server = &state.registry.snapshot().config.server;
    PushCaps {
        per_task: MAX_CONFIGS,
        per_key: server.push_configs_per_key(),
        all: server.max_push_configs,
    }
}

/// A config a client asks for, as stored: an http(s) URL within
/// `egress.allow` (as a webhook's), bounded secrets, an id (a new one
/// when it has none).
pub fn accepted(
    state: &AppState,
    config: &TaskPushNotificationConfig,
) -> Result<PushConfig, RpcError> {
    check_callback(state, "url", &config.url)?;
    let secrets = [
        ("token", config.token.as_deref()),
        (
            "authentication.credentials",
            config
                .authentication
                .as_ref()
                .and_then(|a| a.credentials.as_deref()),
        ),
    ];
    for (field, value) in secrets {
        if value.is_some_and(|v| v.len() > MAX_SECRET_BYTES || v.contains(['\0', '\r', '\n'])) {
            return Err(A2AError::invalid_params(format!(
                "push notification config: {field} must be at most {MAX_SECRET_BYTES} bytes of one line"
            ))
            .into());
        }
    }
    let scheme = config.authentication.as_ref().map(|a| a.scheme.trim());
    if scheme
        .is_some_and(|s| s.is_empty() || !s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-'))
    {
        return Err(A2AError::invalid_params(
            "push notification config: authentication.scheme must be an HTTP auth scheme such as \"Bearer\" or \"Basic\"",
        )
        .into());
    }
    Ok(PushConfig {
        id: config
            .id
            .clone()
            .filter(|id| !id.trim().is_empty())
            .unwrap_or_else(|| uuid::Uuid::now_v7().to_string()),
        url: config.url.clone(),
        token: config.token.clone().filter(|t| !t.is_empty()),
        authentication: config.authentication.as_ref().map(|a| PushAuth {
            scheme: a.scheme.trim().to_string(),
            credentials: a.credentials.clone().filter(|c| !c.is_empty()),
        }),
    })
}

/// The task a config method names, if the policy lets the caller do
/// `action` on it: reading a config is reading the task (its token and
/// credentials are the task owner's), writing one is changing the task.
async fn task(call: &Call, action: Action, task: &str) -> Result<Job, RpcError> {
    if task.trim().is_empty() {
        return Err(
            A2AError::invalid_params("taskId is missing: name the task the config is for").into(),
        );
    }
    let id = JobId::from(task.to_string());
    Ok(call
        .caller
        .job(action, &id, call.state.queue.get(&id).await?)?)
}

fn unknown_config(task: &JobId, config: &str) -> RpcError {
    A2AError::new(
        error_code::TASK_NOT_FOUND,
        format!(
            "task {task} has no push notification config {config:?}; ListTaskPushNotificationConfigs shows its configs"
        ),
    )
    .into()
}

/// A stored config as the wire shows it.
/// A config as the caller may see it: the task's own key sees the secrets
/// it set; a key that reads every key's tasks sees where they go, not the
/// token or credentials another key gave.
fn shown(call: &Call, job: &Job, config: &PushConfig) -> TaskPushNotificationConfig {
    let mut wire = wire(&job.id, config);
    if job.owner.as_deref() != Some(call.caller.name()) {
        wire.token = wire.token.map(|_| REDACTED.to_string());
        if let Some(auth) = wire.authentication.as_mut() {
            auth.credentials = auth.credentials.as_ref().map(|_| REDACTED.to_string());
        }
    }
    wire
}

/// What another key's push secret reads as.
const REDACTED: &str = "[redacted]";

fn wire(task: &JobId, config: &PushConfig) -> TaskPushNotificationConfig {
    TaskPushNotificationConfig {
        url: config.url.clone(),
        id: Some(config.id.clone()),
        task_id: task.to_string(),
        token: config.token.clone(),
        authentication: config.authentication.as_ref().map(|a| AuthenticationInfo {
            scheme: a.scheme.clone(),
            credentials: a.credentials.clone(),
        }),
        tenant: None,
    }
}

/// The format of `a2a_push` deliveries (see the module's documentation).
pub struct PushFormat;

impl Format for PushFormat {
    fn format(&self, delivery: &Delivery) -> Result<Outgoing, FormatError> {
        let payload: PushPayload = serde_json::from_str(&delivery.payload).map_err(|source| {
            FormatError::UnreadablePayload {
                what: "A2A push",
                delivery: delivery.id.clone(),
                job: delivery.job_id.clone(),
                source,
            }
        })?;
        let job = &payload.job;
        let mut metadata = HashMap::from([
            ("bundle".to_string(), json!(job.bundle)),
            ("job_state".to_string(), json!(job.state)),
            // The same change sent again (after a crash) has the same id.
            ("delivery_id".to_string(), json!(delivery.id)),
            ("sequence".to_string(), json!(delivery.seq)),
        ]);
        if payload.truncated {
            metadata.insert("truncated".to_string(), json!(true));
        }
        let update = StreamResponse::StatusUpdate(TaskStatusUpdateEvent {
            task_id: job.id.to_string(),
            context_id: task::context_of(job),
            status: task::push_status(job),
            metadata: Some(metadata),
        });
        let body = serde_json::to_string(&update).map_err(|source| FormatError::Encode {
            what: "A2A push",
            delivery: delivery.id.clone(),
            source,
        })?;
        let config = &payload.config;
        let mut headers = Vec::new();
        if let Some(token) = &config.token {
            headers.push((TOKEN_HEADER.to_string(), token.clone()));
        }
        if let Some(PushAuth {
            scheme,
            credentials: Some(credentials),
        }) = &config.authentication
        {
            headers.push((
                "authorization".to_string(),
                format!("{scheme} {credentials}"),
            ));
        }
        Ok(Outgoing { body, headers })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::queue::JobState;

    fn job(state: &str) -> Job {
        serde_json::from_value(json!({
            "id": "j1", "bundle": "b", "bundle_version": null, "bundle_digest": null,
            "input": "hi", "variables": {}, "priority": 0, "state": state,
            "attempts": 1, "max_attempts": 3, "idempotency_key": null, "traceparent": null,
            "cancel_requested": false, "result": {"output": "hello"}, "error": null,
            "pending_call": null, "run_at": "2026-01-01T00:00:00Z", "conversation_id": "c1",
            "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:01Z",
            "started_at": null, "finished_at": null, "lease_expires_at": null
        }))
        .unwrap()
    }

    #[test]
    fn a_push_is_a_status_update_with_the_token_and_the_credentials() {
        let config = PushConfig {
            id: "p1".into(),
            url: "http://127.0.0.1:9/hook".into(),
            token: Some("tok".into()),
            authentication: Some(PushAuth {
                scheme: "Bearer".into(),
                credentials: Some("secret".into()),
            }),
        };
        let delivery = Delivery {
            id: "msg_1".into(),
            kind: crate::queue::outbox::A2A_PUSH.into(),
            target: config.url.clone(),
            job_id: "j1".into(),
            seq: 3,
            event: "job.succeeded".into(),
            payload: crate::queue::outbox::push_payload(&job("succeeded"), config),
            attempts: 0,
            claim: 1,
        };
        let out = PushFormat.format(&delivery).unwrap();
        let body: StreamResponse = serde_json::from_str(&out.body).unwrap();
        let StreamResponse::StatusUpdate(update) = body else {
            panic!("a status update: {}", out.body)
        };
        assert_eq!(update.task_id, "j1");
        assert_eq!(update.context_id, "c1");
        assert_eq!(update.status.state, task::task_state(JobState::Succeeded));
        // A push has no artifact beside it: the answer rides in its status.
        let answer = update.status.message.as_ref().map(|m| m.parts[0].as_text());
        assert_eq!(answer, Some(Some("hello")), "{}", out.body);
        assert_eq!(update.metadata.unwrap()["delivery_id"], "msg_1");
        assert!(out.headers.contains(&(TOKEN_HEADER.into(), "tok".into())));
        assert!(
            out.headers
                .contains(&("authorization".into(), "Bearer secret".into()))
        );
        let bad = Delivery {
            payload: "{".into(),
            ..delivery
        };
        assert!(
            PushFormat
                .format(&bad)
                .unwrap_err()
                .to_string()
                .contains("job j1")
        );
    }
}
