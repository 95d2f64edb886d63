//! Listing jobs: the filter and page of `JobQueue::list`, and a
//! conversation's earlier turns read through it.

use serde::Serialize;

use super::{Job, JobQueue, JobState, QueueError};

#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub state: Option<JobState>,
    pub bundle: Option<String>,
    pub conversation_id: Option<String>,
    /// Only the jobs this API key submitted.
    pub owner: Option<String>,
    pub limit: usize,
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
}

impl JobFilter {
    /// The filter as SQL conditions (` AND …`, each value a placeholder
    /// that `placeholder(n)` spells for the n-th argument) and their
    /// arguments, shared by the backends' listings.
    pub(crate) fn conditions(
        &self,
        placeholder: impl Fn(usize) -> String,
    ) -> (String, Vec<String>) {
        let mut sql = String::new();
        let mut args = Vec::new();
        for (column, op, value) in [
            ("state", "=", self.state.map(|s| s.as_str().to_string())),
            ("bundle", "=", self.bundle.clone()),
            ("conversation_id", "=", self.conversation_id.clone()),
            ("owner", "=", self.owner.clone()),
            // Newest first: ids are UUIDv7, so a page continues below the cursor.
            ("id", "<", self.cursor.clone()),
        ] {
            if let Some(value) = value {
                args.push(value);
                sql.push_str(&format!(" AND {column} {op} {}", placeholder(args.len())));
            }
        }
        (sql, args)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Page {
    pub jobs: Vec<Job>,
    pub next_cursor: Option<String>,
}

/// The conversation's earlier finished turns before `job`, oldest first, at
/// most `limit` of them: what the job starts from.
pub async fn conversation_history(
    queue: &dyn JobQueue,
    job: &Job,
    limit: usize,
) -> Result<Vec<Job>, QueueError> {
    let Some(conversation) = &job.conversation_id else {
        return Ok(Vec::new());
    };
    let mut jobs: Vec<Job> = queue
        .list(JobFilter {
            conversation_id: Some(conversation.clone()),
            cursor: Some(job.id.to_string()),
            limit: limit.max(1),
            ..Default::default()
        })
        .await?
        .jobs
        .into_iter()
        .filter(|j| j.state == JobState::Succeeded)
        .collect();
    jobs.reverse();
    Ok(jobs)
}
