//! Listing jobs: the filter, order and page of `JobQueue::list` (and what
//! `JobQueue::count` counts), and a conversation's earlier turns read
//! through it.

use std::fmt;
use std::time::UNIX_EPOCH;

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
    /// Only jobs last updated at or after this time (ms since the epoch).
    pub updated_since: Option<i64>,
    /// Only jobs created at or after this time (ms since the epoch).
    pub created_from: Option<i64>,
    /// Only jobs created before this time (ms since the epoch).
    pub created_to: Option<i64>,
    /// Only jobs that ended in an error ([`JobState::ERRORED`]).
    pub errored: bool,
    /// Which way the pages run; `cursor` is of this order.
    pub order: JobOrder,
    /// Only jobs of this kind: the `type` of their [`JobKind`]
    /// (`super::JobKind`), such as `eval` or `verify`.
    pub kind: Option<String>,
}

/// Which way a listing runs, and so what its cursor holds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum JobOrder {
    /// Newest first by creation (ids are UUIDv7): the cursor is the last
    /// job's id. A job's place never changes.
    #[default]
    Created,
    /// Oldest first by creation: the cursor is the last job's id.
    CreatedAsc,
    /// Most recently updated first (`updated_at`; jobs updated in the same
    /// millisecond newest id first): the cursor is an [`UpdateCursor`]. A
    /// job's update moves it to the front, ahead of every cursor given
    /// before (update times grow with the clock): a walk of the pages
    /// shows each job at most once, and misses one that was updated after
    /// the walk began and before its page came (it is at the front of the
    /// next walk).
    Updated,
}

impl JobOrder {
    /// The listing's `ORDER BY`: both orders end on the id, so the order is
    /// total and a cursor names one place in it.
    pub(crate) fn sql(self) -> &'static str {
        match self {
            JobOrder::Created => "id DESC",
            JobOrder::CreatedAsc => "id ASC",
            JobOrder::Updated => "updated_at DESC, id DESC",
        }
    }

    /// The cursor that continues after `job` in this order.
    fn cursor_after(self, job: &Job) -> Result<String, QueueError> {
        match self {
            JobOrder::Created | JobOrder::CreatedAsc => Ok(job.id.0.clone()),
            JobOrder::Updated => UpdateCursor::after(job).map(|c| c.to_string()),
        }
    }
}

/// Where a listing by last update continues: after the job updated at
/// `updated_ms` (ms since the epoch) with id `id`. Written `<ms>.<id>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateCursor {
    pub updated_ms: i64,
    pub id: String,
}

impl UpdateCursor {
    /// The cursor after `job`: its stored update time, read back to the
    /// millisecond the store holds.
    pub fn after(job: &Job) -> Result<Self, QueueError> {
        let unreadable = || {
            QueueError::Cursor(format!(
                "job {} has an update time {:?} that is not an RFC 3339 time after 1970",
                job.id, job.updated_at
            ))
        };
        let at = humantime::parse_rfc3339(&job.updated_at).map_err(|_| unreadable())?;
        let ms = at.duration_since(UNIX_EPOCH).map_err(|_| unreadable())?;
        Ok(Self {
            updated_ms: i64::try_from(ms.as_millis()).map_err(|_| unreadable())?,
            id: job.id.0.clone(),
        })
    }

    /// A cursor as [`fmt::Display`] writes it; `None` for any other text.
    pub fn parse(text: &str) -> Option<Self> {
        let (ms, id) = text.split_once('.')?;
        let digits = !ms.is_empty() && ms.bytes().all(|b| b.is_ascii_digit());
        Some(Self {
            updated_ms: ms.parse().ok().filter(|_| digits)?,
            id: Some(id).filter(|id| !id.is_empty())?.to_string(),
        })
    }
}

impl fmt::Display for UpdateCursor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", self.updated_ms, self.id)
    }
}

/// A placeholder read as a number: each argument is bound as text (one
/// list of arguments serves every condition), so the number is spelt out
/// by casts PostgreSQL and SQLite both read.
fn number(placeholder: String) -> String {
    format!("CAST(CAST({placeholder} AS TEXT) AS BIGINT)")
}

impl JobFilter {
    /// The filter as SQL conditions (` AND …`, each value a placeholder
    /// that `placeholder(n)` spells for the n-th argument) and their
    /// arguments, shared by the backends' listings and counts. `kind_type`
    /// is the dialect's expression for the `type` of the `kind` column's
    /// JSON (the one thing the two spell differently). A cursor of
    /// [`JobOrder::Updated`] that [`UpdateCursor::parse`] does not read is
    /// [`QueueError::Cursor`].
    pub(crate) fn conditions(
        &self,
        placeholder: impl Fn(usize) -> String,
        kind_type: &str,
    ) -> Result<(String, Vec<String>), QueueError> {
        let by_id = (self.order != JobOrder::Updated)
            .then(|| self.cursor.clone())
            .flatten();
        // Ids are UUIDv7: a page continues below (newest first) or above
        // (oldest first) the cursor.
        let after = match self.order {
            JobOrder::CreatedAsc => ">",
            JobOrder::Created | JobOrder::Updated => "<",
        };
        let (mut sql, mut args) = comparisons(
            [
                ("state", "=", self.state.map(|s| s.as_str().to_string())),
                ("bundle", "=", self.bundle.clone()),
                ("conversation_id", "=", self.conversation_id.clone()),
                ("COALESCE(owner, '')", "=", self.conversation_owner.clone()),
                ("owner", "=", self.owner.clone()),
                ("id", after, by_id),
                (kind_type, "=", self.kind.clone()),
            ],
            &placeholder,
        );
        for (column, op, ms) in [
            ("updated_at", ">=", self.updated_since),
            ("created_at", ">=", self.created_from),
            ("created_at", "<", self.created_to),
        ] {
            if let Some(ms) = ms {
                args.push(ms.to_string());
                let ms = number(placeholder(args.len()));
                sql.push_str(&format!(" AND {column} {op} {ms}"));
            }
        }
        if let (JobOrder::Updated, Some(text)) = (self.order, &self.cursor) {
            let cursor = UpdateCursor::parse(text).ok_or_else(|| {
                QueueError::Cursor(format!(
                    "{text} (a listing by last update continues from `<ms>.<id>`, as its page gave it)"
                ))
            })?;
            args.push(cursor.updated_ms.to_string());
            let at = number(placeholder(args.len()));
            args.push(cursor.id);
            let id = placeholder(args.len());
            // The page continues below the cursor in (updated_at, id) order.
            sql.push_str(&format!(" AND (updated_at, id) < ({at}, {id})"));
        }
        if self.unfinished {
            sql.push_str(&state_in(
                JobState::ALL.into_iter().filter(|s| !s.is_terminal()),
            ));
        }
        if self.errored {
            sql.push_str(&state_in(JobState::ERRORED));
        }
        if let Some(text) = self.search.as_deref().filter(|t| !t.is_empty()) {
            args.push(format!("%{}%", like_escaped(&text.to_lowercase())));
            sql.push_str(&format!(
                " AND lower(id || ' ' || bundle || ' ' || input) LIKE {} ESCAPE '\\'",
                placeholder(args.len())
            ));
        }
        Ok((sql, args))
    }
}

/// ` AND state IN (…)` of `states`: they are the enum's own names, never
/// input, so they are written into the SQL.
fn state_in(states: impl IntoIterator<Item = JobState>) -> String {
    let states: Vec<String> = states
        .into_iter()
        .map(|s| format!("'{}'", s.as_str()))
        .collect();
    format!(" AND state IN ({})", states.join(", "))
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
    rows: Vec<T>,
    asked: usize,
    id: impl Fn(&T) -> String,
) -> (Vec<T>, Option<String>) {
    let (rows, last) = cut(rows, asked);
    let next_cursor = last.map(|i| id(&rows[i]));
    (rows, next_cursor)
}

/// A page of jobs fetched with `page_limit(asked) + 1` in `order`, with
/// the cursor after its last job when more follow.
pub(crate) fn paged_jobs(
    rows: Vec<Job>,
    asked: usize,
    order: JobOrder,
) -> Result<Page, QueueError> {
    let (jobs, last) = cut(rows, asked);
    let next_cursor = last.map(|i| order.cursor_after(&jobs[i])).transpose()?;
    Ok(Page { jobs, next_cursor })
}

/// The rows a page shows, and the index of its last one when more follow.
fn cut<T>(mut rows: Vec<T>, asked: usize) -> (Vec<T>, Option<usize>) {
    let limit = page_limit(asked);
    let more = rows.len() > limit;
    rows.truncate(limit);
    let last = rows.len().checked_sub(1).filter(|_| more);
    (rows, last)
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

    /// A dialect's spelling of the kind's type, as the tests read it.
    const KIND: &str = "kind_type";

    #[test]
    fn a_kind_is_a_condition_on_the_dialects_spelling_of_its_type() {
        let filter = JobFilter {
            bundle: Some("calc".into()),
            kind: Some("eval".into()),
            ..Default::default()
        };
        let (sql, args) = filter.conditions(|n| format!("?{n}"), KIND).unwrap();
        assert_eq!(sql, " AND bundle = ?1 AND kind_type = ?2");
        assert_eq!(args, ["calc", "eval"]);
    }

    #[test]
    fn a_search_is_one_literal_case_free_condition() {
        let filter = JobFilter {
            search: Some("50%_Off\\".into()),
            ..Default::default()
        };
        let (sql, args) = filter.conditions(|n| format!("?{n}"), KIND).unwrap();
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
        let (sql, args) = filter.conditions(|n| format!("?{n}"), KIND).unwrap();
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

    #[test]
    fn created_bounds_and_errored_are_conditions_on_their_columns() {
        let filter = JobFilter {
            created_from: Some(1000),
            created_to: Some(2000),
            errored: true,
            owner: Some("k".into()),
            ..Default::default()
        };
        let (sql, args) = filter.conditions(|n| format!("?{n}"), KIND).unwrap();
        assert_eq!(
            sql,
            " AND owner = ?1 AND created_at >= CAST(CAST(?2 AS TEXT) AS BIGINT) \
             AND created_at < CAST(CAST(?3 AS TEXT) AS BIGINT) AND state IN ('failed', 'dead')"
        );
        assert_eq!(args, ["k", "1000", "2000"]);
    }

    #[test]
    fn an_update_cursor_reads_back_what_it_writes_and_nothing_else() {
        let cursor = UpdateCursor {
            updated_ms: 1_767_225_600_123,
            id: "019b7c1e-0000-7000-8000-000000000000".into(),
        };
        let text = cursor.to_string();
        assert_eq!(text, "1767225600123.019b7c1e-0000-7000-8000-000000000000");
        assert_eq!(UpdateCursor::parse(&text), Some(cursor));
        for other in [
            "", ".", "12.", ".id", "-1.id", "+1.id", "1e3.id", "x.id", "id",
        ] {
            assert_eq!(UpdateCursor::parse(other), None, "{other:?}");
        }
    }

    #[test]
    fn a_listing_by_update_continues_below_its_cursor_in_update_then_id_order() {
        let filter = JobFilter {
            order: JobOrder::Updated,
            cursor: Some("1700.j9".into()),
            updated_since: Some(1500),
            bundle: Some("b".into()),
            ..Default::default()
        };
        let (sql, args) = filter.conditions(|n| format!("${n}"), KIND).unwrap();
        assert_eq!(
            sql,
            " AND bundle = $1 AND updated_at >= CAST(CAST($2 AS TEXT) AS BIGINT) \
             AND (updated_at, id) < (CAST(CAST($3 AS TEXT) AS BIGINT), $4)"
        );
        assert_eq!(args, ["b", "1500", "1700", "j9"]);
        assert_eq!(JobOrder::Updated.sql(), "updated_at DESC, id DESC");
        let unread = JobFilter {
            cursor: Some("j9".into()),
            ..filter
        };
        let Err(QueueError::Cursor(says)) = unread.conditions(|n| format!("${n}"), KIND) else {
            panic!("an id is no cursor of a listing by update");
        };
        assert!(says.contains("<ms>.<id>"), "{says}");
    }
}
