//! What a bundle call tells its client while its job runs: each stored
//! event of the job as a log line (`notifications/message`, at `info`; the
//! run's live steps at `debug`) when the client set a level
//! (`logging/setLevel`, or `_meta` `logLevel` on a 2026-07-28 request),
//! and `notifications/progress` for each step when the call carried a
//! `progressToken`. Both follow the job's feed, as its event stream does.
#![expect(
    deprecated,
    reason = "rmcp marks MCP logging deprecated (SEP-2577); the protocol revisions clients use still have it"
)]

use futures::StreamExt;
use rmcp::model::{
    LoggingLevel, LoggingMessageNotificationParam, ProgressNotificationParam, ProgressToken,
};
use rmcp::{Peer, RoleServer};
use serde_json::{Value, json};

use super::super::AppState;
use super::super::feed::{Item, job_feed};
use crate::queue::JobId;

/// A session's log level (`logging/setLevel`); `None` until one is set.
pub type Level = std::sync::Arc<std::sync::Mutex<Option<LoggingLevel>>>;

/// The level set in `level`.
pub fn level_of(level: &Level) -> Option<LoggingLevel> {
    *level.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sets the session's level.
pub fn set(level: &Level, to: LoggingLevel) {
    *level.lock().unwrap_or_else(|p| p.into_inner()) = Some(to);
}

/// Where and what one call reports.
pub struct Notices {
    pub peer: Peer<RoleServer>,
    /// Log lines at this level or above are sent; `None`: none.
    pub level: Option<LoggingLevel>,
    pub progress: Option<ProgressToken>,
}

impl Notices {
    /// Whether the client asked for anything.
    pub fn wanted(&self) -> bool {
        self.level.is_some() || self.progress.is_some()
    }

    /// Follows job `id`'s feed until it ends (or the client is gone),
    /// reporting as asked. Holds one of the caller's event streams.
    pub async fn follow(self, state: AppState, caller: String, id: JobId) {
        let Ok(permit) = state.streams.acquire(&caller) else {
            tracing::debug!(job = %id, "no event stream left to report an MCP call's progress");
            return;
        };
        let feed = job_feed(state, id.clone(), 0, false, permit);
        futures::pin_mut!(feed);
        let mut steps = 0u32;
        while let Some(item) = feed.next().await {
            let sent = match item {
                Item::Token(_) => true,
                Item::Progress(progress) => {
                    steps += 1;
                    let step = serde_json::to_value(&*progress).unwrap_or_default();
                    let what = step["kind"].as_str().unwrap_or("step").to_string();
                    self.progress(steps, format!("job {id}: {what}")).await
                        && self
                            .log(LoggingLevel::Debug, json!({"job_id": id, "step": step}))
                            .await
                }
                Item::Event { json, .. } => {
                    let event: Value = serde_json::from_str(&json).unwrap_or_default();
                    let kind = event["type"].as_str().unwrap_or("event");
                    self.log(
                        LoggingLevel::Info,
                        json!({"job_id": id, "event": kind, "seq": event["seq"]}),
                    )
                    .await
                }
                Item::End(job) => {
                    self.log(
                        LoggingLevel::Info,
                        json!({"job_id": id, "state": job.state.as_str()}),
                    )
                    .await;
                    return;
                }
            };
            if !sent {
                return;
            }
        }
    }

    /// Sends a log line at `level` if the client wants it; whether the
    /// client is still there.
    async fn log(&self, level: LoggingLevel, data: Value) -> bool {
        let Some(wanted) = self.level else {
            return true;
        };
        if (level as u8) < (wanted as u8) {
            return true;
        }
        let mut line = LoggingMessageNotificationParam::new(level, data);
        line.logger = Some("structured-agents".into());
        sent(self.peer.notify_logging_message(line)).await
    }

    async fn progress(&self, step: u32, message: String) -> bool {
        let Some(token) = &self.progress else {
            return true;
        };
        let mut note = ProgressNotificationParam::new(token.clone(), f64::from(step));
        note.message = Some(message);
        sent(self.peer.notify_progress(note)).await
    }
}

/// Whether a notification went out within a few seconds.
async fn sent<E>(send: impl Future<Output = Result<(), E>>) -> bool {
    matches!(
        tokio::time::timeout(std::time::Duration::from_secs(5), send).await,
        Ok(Ok(()))
    )
}
