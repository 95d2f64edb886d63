//! Listing jobs: the filter and page of `JobQueue::list`, and a
//! conversation's earlier turns read through it.

use serde::Serialize;

use super::{Job, JobId, JobQueue, JobState, QueueError};

#[derive(Debug, Clone, Default)]
pub struct JobFilter {
    pub state: Option<JobState>,
    pub bundle: Option<String>,
    pub conversation_id: Option<String>,
    /// With `conversation_id`: the key whose conversation it is (`""` for
    /// jobs from before keys). Conversations are per key.
    pub conversation_owner: Option<String>,
    /// Only the jobs this API key submitted.
    pub owner: Option<String>,
    pub limit: usize,
    /// From a previous page's `next_cursor`.
    pub cursor: Option<String>,
    /// Only jobs whose id, bundle or input contains this text (any case).
    pub search: Option<String>,
    /// Only jobs that have not ended, in any of those states. One listing
    /// ordered by id, so a job that moves between them while the pages are
    /// read (parked → queued → running) is still seen exactly once, where a
    /// listing per state could miss it.
    pub unfinished: bool,
}

impl JobFilter {
    /// The filter as SQL conditions (` AND …`, each value a placeholder
    /// that `placeholder(n)` spells for the n-th argument) and their
    /// arguments, shared by the backends' listings.
    pub(crate) fn conditions(
        &self,
        placeholder: impl Fn(usize) -> String,
    ) -> (String, Vec<String>) {
        let (mut sql, mut args) = comparisons(
            [
                ("state", "=", self.state.map(|s| s.as_str().to_string())),
                ("bundle", "=", self.bundle.clone()),
                ("conversation_id", "=", self.conversation_id.clone()),
                ("COALESCE(owner, '')", "=", self.conversation_owner.clone()),
                ("owner", "=", self.owner.clone()),
                // Newest first: ids are UUIDv7, so a page continues below the cursor.
                ("id", "<", self.cursor.clone()),
            ],
            &placeholder,
        );
        if self.unfinished {
            // The states are this enum's own names, never input.
            let states: Vec<String> = JobState::ALL
                .into_iter()
                .filter(|s| !s.is_terminal())
                .map(|s| format!("'{}'", s.as_str()))
                .collect();
            sql.push_str(&format!(" AND state IN ({})", states.join(", ")));
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

/// A listing's filter as SQL conditions: ` AND column op placeholder` for
/// each given value, with the values in placeholder order. Shared by every
/// listing (jobs, the outbox's deliveries).
pub(crate) fn comparisons<const N: usize>(
    filters: [(&str, &str, Option<String>); N],
    placeholder: &impl Fn(usize) -> String,
) -> (String, Vec<String>) {
    let mut sql = String::new();
    let mut args = Vec::new();
    for (column, op, value) in filters {
        if let Some(value) = value {
            args.push(value);
            sql.push_str(&format!(" AND {column} {op} {}", placeholder(args.len())));
        }
    }
    (sql, args)
}

/// The most a page holds; a listing asks for one more than it shows to
/// tell whether another page follows.
pub(crate) fn page_limit(asked: usize) -> usize {
    asked.clamp(1, 1000)
}

/// A page of rows fetched with `page_limit(asked) + 1`, newest first: the
/// rows shown and the cursor (the last shown row's id) when more follow.
pub(crate) fn paged<T>(
    mut rows: Vec<T>,
    asked: usize,
    id: impl Fn(&T) -> String,
) -> (Vec<T>, Option<String>) {
    let limit = page_limit(asked);
    let more = rows.len() > limit;
    rows.truncate(limit);
    let next_cursor = more.then(|| rows.last().map(id)).flatten();
    (rows, next_cursor)
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

/// A job that may continue a conversation (the stored [`Job`], or the
/// [`LeasedJob`](super::LeasedJob) a worker runs).
pub trait InConversation {
    fn job_id(&self) -> &JobId;
    fn conversation(&self) -> Option<&str>;
    /// Its key: a conversation is its key's.
    fn owner(&self) -> Option<&str>;
}

/// Both jobs answer from their fields of the same names.
macro_rules! in_conversation_by_fields {
    ($($job:ty),+) => {$(
        impl InConversation for $job {
            fn job_id(&self) -> &JobId {
                &self.id
            }

            fn conversation(&self) -> Option<&str> {
                self.conversation_id.as_deref()
            }

            fn owner(&self) -> Option<&str> {
                self.owner.as_deref()
            }
        }
    )+};
}

in_conversation_by_fields!(Job, super::LeasedJob);

/// The conversation's earlier finished turns before `job`, oldest first, at
/// most `limit` of them: what the job starts from. A conversation is its
/// key's: only the turns of the job's own key (none for a job from before
/// keys).
pub async fn conversation_history(
    queue: &dyn JobQueue,
    job: &(impl InConversation + Sync),
    limit: usize,
) -> Result<Vec<Job>, QueueError> {
    let Some(conversation) = job.conversation() else {
        return Ok(Vec::new());
    };
    let mut jobs: Vec<Job> = queue
        .list(JobFilter {
            conversation_id: Some(conversation.to_string()),
            conversation_owner: Some(job.owner().unwrap_or_default().to_string()),
            cursor: Some(job.job_id().to_string()),
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

    #[test]
    fn unfinished_is_one_condition_over_every_state_that_has_not_ended() {
        let filter = JobFilter {
            unfinished: true,
            ..Default::default()
        };
        let (sql, args) = filter.conditions(|n| format!("?{n}"));
        let open: Vec<String> = JobState::ALL
            .into_iter()
            .filter(|s| !s.is_terminal())
            .map(|s| format!("'{s}'"))
            .collect();
        assert_eq!(sql, format!(" AND state IN ({})", open.join(", ")));
        assert!(
            sql.contains("'queued'") && !sql.contains("'succeeded'"),
            "{sql}"
        );
        assert!(args.is_empty());
    }
}
