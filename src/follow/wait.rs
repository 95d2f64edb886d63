//! Waiting for a job's end: what a synchronous caller (a blocking chat
//! completion, the runtime API's run, MCP's `tools/call`, A2A's blocking
//! send) answers with.

use std::time::Duration;

use crate::queue::{Job, JobId, JobQueue, QueueError};

/// Why a wait ended without the job.
#[derive(Debug, thiserror::Error)]
pub enum WaitError {
    #[error(transparent)]
    Queue(#[from] QueueError),
    /// The job was deleted (purged) while it was waited for.
    #[error("job {0} vanished")]
    Vanished(JobId),
}

/// Waits until the job is finished, or parked for a person (which only a
/// resolution or a decision ends): the answer a synchronous caller can get.
/// The store is read again on the queue's notifications for the job, and
/// every `recheck` in case one was lost.
pub async fn wait_finished(
    queue: &dyn JobQueue,
    id: &JobId,
    recheck: Duration,
) -> Result<Job, WaitError> {
    let mut updates = queue.subscribe();
    loop {
        let job = queue
            .get(id)
            .await?
            .ok_or_else(|| WaitError::Vanished(id.clone()))?;
        if job.state.is_terminal() || job.state.is_parked() {
            return Ok(job);
        }
        // Only this job's updates are worth a read; the recheck covers
        // notifications lost while the queue's notifier lagged.
        let recheck = tokio::time::sleep(recheck);
        tokio::pin!(recheck);
        loop {
            tokio::select! {
                update = updates.recv() => match update {
                    Ok(changed) if &changed == id => break,
                    Ok(_) => continue,
                    Err(_) => break,
                },
                _ = &mut recheck => break,
            }
        }
    }
}
