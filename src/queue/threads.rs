//! Threads: a key's conversations as LangGraph's clients keep them — made
//! before any job names them, carrying the client's metadata, searched and
//! deleted whole. A thread is its conversation's row; what it holds (its
//! turns) and where it stands (busy, interrupted, …) are its jobs, read
//! with the row in one statement so a listing never asks twice.

use serde_json::{Map, Value};

use super::JobState;
use super::statements::JobStatements;
use super::tx::{Columns, Conversation, Fail, Res};

/// The most threads a search looks at: a key's newest this many (a search
/// filters and sorts them; the API document says so).
pub const THREADS_SCANNED: usize = 10_000;

/// One thread as stored, with what its jobs say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredThread {
    pub id: String,
    /// Milliseconds since the epoch.
    pub created_at: i64,
    /// The latest of its metadata's change and its newest job's.
    pub updated_at: i64,
    /// The client's metadata: a JSON object.
    pub metadata: Map<String, Value>,
    /// Its newest job's state (none before its first job).
    pub newest: Option<JobState>,
    /// Whether a job of it is queued or running.
    pub busy: bool,
}

/// The jobs of the thread at `c` (a `conversations` row as `c`).
const OF_THREAD: &str =
    "FROM jobs j WHERE j.conversation_id = c.id AND COALESCE(j.owner, '') = c.owner";

/// The columns [`thread_from_row`] reads, over `conversations c` (the same
/// text in both dialects: no parameters).
pub(crate) fn thread_columns() -> String {
    format!(
        "c.id, c.created_at, COALESCE(c.updated_at, c.created_at), c.metadata, \
         (SELECT MAX(j.updated_at) {OF_THREAD}), \
         (SELECT j.state {OF_THREAD} ORDER BY j.created_at DESC, j.id DESC LIMIT 1), \
         EXISTS (SELECT 1 {OF_THREAD} AND j.state IN ('queued', 'running'))"
    )
}

pub(crate) fn thread_from_row(row: &impl Columns) -> Res<StoredThread> {
    let changed = row.req_int(2)?;
    // Metadata is written only by `metadata_text`: anything else there
    // reads as none rather than failing every listing of the key.
    let metadata = row
        .text(3)?
        .and_then(|text| serde_json::from_str::<Map<String, Value>>(&text).ok())
        .unwrap_or_default();
    Ok(StoredThread {
        id: row.req_text(0)?,
        created_at: row.req_int(1)?,
        updated_at: row.int(4)?.map_or(changed, |job| job.max(changed)),
        metadata,
        newest: row.text(5)?.as_deref().and_then(JobState::parse),
        busy: row.int(6)?.unwrap_or(0) != 0,
    })
}

/// What a thread's create found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Created {
    /// It made the thread.
    New(StoredThread),
    /// The key has a thread of that id already (as it stands).
    Existing(StoredThread),
}

/// What a thread's delete did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadDeletion {
    /// The thread and its jobs are gone: how many jobs.
    Deleted(usize),
    /// A job of it has not ended: nothing was deleted.
    Unfinished(usize),
    /// The key has no such thread.
    Missing,
}

/// What a thread's copy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThreadCopy {
    /// The new thread, holding the thread's ended runs.
    Copied(StoredThread),
    /// The thread has more ended runs than one copy takes (how many):
    /// nothing was written. A copy is one write, which on SQLite holds
    /// the database's one writer for its whole length.
    TooLong(usize),
    /// The key has no such thread.
    Missing,
}

/// The most ended runs one thread copy takes ([`ThreadCopy::TooLong`]
/// past it): a copy writes every run's row, events and journal in one
/// transaction.
pub const MAX_COPIED_RUNS: usize = 1_000;

/// The thread statements of a dialect (one statement each, no rule).
pub(crate) trait ThreadStatements {
    /// Makes thread `c` with `metadata` unless the key has it: whether it
    /// was made.
    fn insert_thread(
        &mut self,
        c: &Conversation<'_>,
        metadata: &str,
        now: i64,
    ) -> impl Future<Output = Res<bool>> + Send;
    /// Thread `c` as it stands; `lock`: keep other writers off its row
    /// until the transaction ends.
    fn thread(
        &mut self,
        c: &Conversation<'_>,
        lock: bool,
    ) -> impl Future<Output = Res<Option<StoredThread>>> + Send;
    /// Replaces thread `c`'s metadata.
    fn set_thread_metadata(
        &mut self,
        c: &Conversation<'_>,
        metadata: &str,
        now: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    /// `owner`'s newest `limit` threads, newest first.
    fn threads(
        &mut self,
        owner: &str,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<StoredThread>>> + Send;
    /// Copies ended job `from` as job `to` of conversation `conversation`
    /// (the same key's): its row (by [`copy_job_sql`]), then its events
    /// and journal, the job's id in them made the copy's: three
    /// statements.
    fn copy_job(
        &mut self,
        from: &str,
        to: &str,
        conversation: &str,
    ) -> impl Future<Output = Res<()>> + Send;
}

/// The statement copying ended job `from` as job `to` of conversation
/// `conversation`, its placeholders from `placeholder` in that order:
/// every column the queue reads but the job's id, its conversation, its
/// idempotency key (a copy is not the submit the key named) and its spend
/// (the copy spent nothing: a key's daily budget counts a run once).
pub(crate) fn copy_job_sql(placeholder: impl Fn(usize) -> String) -> String {
    let kept: Vec<&str> = super::tx::JOB_COLUMNS
        .split(", ")
        .filter(|column| {
            !matches!(
                *column,
                "id" | "conversation_id" | "idempotency_key" | "tokens_spent" | "cost_micros"
            )
        })
        .collect();
    let kept = kept.join(", ");
    format!(
        "INSERT INTO jobs (id, conversation_id, {kept}) SELECT {}, {}, {kept} FROM jobs WHERE id = {}",
        placeholder(2),
        placeholder(3),
        placeholder(1),
    )
}

fn metadata_text(metadata: &Map<String, Value>) -> String {
    Value::Object(metadata.clone()).to_string()
}

/// Makes thread `c` with `metadata`, or finds the one the key has.
pub(crate) async fn create(
    tx: &mut (impl JobStatements + ThreadStatements),
    c: &Conversation<'_>,
    metadata: &Map<String, Value>,
) -> Res<Created> {
    let now = tx.now().await?;
    let made = tx.insert_thread(c, &metadata_text(metadata), now).await?;
    let Some(thread) = tx.thread(c, false).await? else {
        // Inside the write that made (or found) it: only a broken store
        // loses it.
        return Err(Fail::Db(format!(
            "thread {:?} is missing right after its create",
            c.id
        )));
    };
    Ok(if made {
        Created::New(thread)
    } else {
        Created::Existing(thread)
    })
}

/// Merges `metadata` into thread `c`'s (a key set to `null` is removed, as
/// LangGraph's server does): the thread as it stands after, or none when
/// the key has no such thread.
pub(crate) async fn patch(
    tx: &mut (impl JobStatements + ThreadStatements),
    c: &Conversation<'_>,
    metadata: &Map<String, Value>,
) -> Res<Option<StoredThread>> {
    let Some(thread) = tx.thread(c, true).await? else {
        return Ok(None);
    };
    let mut merged = thread.metadata;
    for (key, value) in metadata {
        if value.is_null() {
            merged.remove(key);
        } else {
            merged.insert(key.clone(), value.clone());
        }
    }
    let now = tx.now().await?;
    tx.set_thread_metadata(c, &metadata_text(&merged), now)
        .await?;
    tx.thread(c, false).await
}

/// Deletes thread `c` with its jobs, unless one of them has not ended.
pub(crate) async fn delete(
    tx: &mut (impl JobStatements + ThreadStatements),
    c: &Conversation<'_>,
) -> Res<ThreadDeletion> {
    if tx.thread(c, true).await?.is_none() {
        return Ok(ThreadDeletion::Missing);
    }
    let total = tx.count_in_conversation(c).await?;
    let ended = tx.finished_in_conversation(c).await?;
    let unfinished = usize::try_from(total)
        .unwrap_or(0)
        .saturating_sub(ended.len());
    if unfinished > 0 {
        return Ok(ThreadDeletion::Unfinished(unfinished));
    }
    tx.delete_jobs(&ended).await?;
    tx.delete_conversation(c).await?;
    Ok(ThreadDeletion::Deleted(ended.len()))
}

/// Copies thread `from` as thread `to` of the same key: its metadata, and
/// its ended jobs (with their events and journals) under new ids, so the
/// copy's state and history are the thread's as its ended runs left it. A
/// run not ended (queued, running or parked) is not copied; a thread of
/// more than `max_runs` ended runs is not copied at all.
pub(crate) async fn copy(
    tx: &mut (impl JobStatements + ThreadStatements),
    from: &Conversation<'_>,
    to: &Conversation<'_>,
    max_runs: usize,
) -> Res<ThreadCopy> {
    let Some(source) = tx.thread(from, true).await? else {
        return Ok(ThreadCopy::Missing);
    };
    let mut ended = tx.finished_in_conversation(from).await?;
    if ended.len() > max_runs {
        return Ok(ThreadCopy::TooLong(ended.len()));
    }
    let now = tx.now().await?;
    if !tx
        .insert_thread(to, &metadata_text(&source.metadata), now)
        .await?
    {
        return Err(Fail::Db(format!(
            "the copy's new thread id {:?} is taken",
            to.id
        )));
    }
    // Job ids are UUIDv7: sorted, they are the order the runs came in, and
    // the copies' fresh ids keep it.
    ended.sort();
    for job in &ended {
        let copy = super::JobId::default();
        tx.copy_job(job, copy.as_str(), to.id).await?;
    }
    let copied = tx.thread(to, false).await?;
    copied.map(ThreadCopy::Copied).ok_or_else(|| {
        Fail::Db(format!(
            "the copy's new thread {:?} was not found in the write that made it",
            to.id
        ))
    })
}
