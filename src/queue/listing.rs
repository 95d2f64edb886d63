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
    /// Only jobs whose id, bundle or input contains this text (any case).
    pub search: Option<String>,
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
        if let Some(text) = self.search.as_deref().filter(|t| !t.is_empty()) {
            args.push(format!("%{}%", like_escaped(&text.to_lowercase())));
            sql.push_str(&format!(
                " AND lower(id || ' ' || bundle || ' ' || input) LIKE {} ESCAPE '\\'",
                placeholder(args.len())
            ));
        }
        (sql, args)
    }
}

/// `text` matched literally by LIKE: its wildcards and the escape escaped.
fn like_escaped(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        if matches!(c, '%' | '_' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_search_is_one_literal_case_free_condition() {
        let filter = JobFilter {
            search: Some("50%_Off\\".into()),
            ..Default::default()
        };
        let (sql, args) = filter.conditions(|n| format!("?{n}"));
        assert_eq!(
            sql,
            " AND lower(id || ' ' || bundle || ' ' || input) LIKE ?1 ESCAPE '\\'"
        );
        assert_eq!(args, vec!["%50\\%\\_off\\\\%".to_string()]);
    }
}
