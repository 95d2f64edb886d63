//! Threads are conversations: `POST /threads`, `GET`, `PATCH` and
//! `DELETE /threads/{id}`, `POST /threads/search` and `…/count`. Every
//! conversation of the key is a thread, whatever wire made it (a job's
//! `conversation_id`, AG-UI's `threadId`, A2A's `contextId`), and a thread
//! made here is a conversation the next run continues. A thread is its
//! key's alone: another key's is as unknown as a missing one. Its status
//! and its values are its jobs': busy while one is queued or running, then
//! as its newest job ended; its messages rebuilt from their journals.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::Response;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::{JsonBody, Path};
use super::super::conversations::{check_id, conversation, jobs_of};
use super::super::document::answers;
use super::super::error::{ApiError, ErrorCode};
use super::interrupts;
use super::listing::{self, SortOrder, has_metadata, page};
use super::state;
use crate::access::policy::Action;
use crate::queue::{Created, JobState, StoredThread, THREADS_SCANNED, ThreadDeletion, rfc3339};

/// A thread as LangGraph's clients see it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Thread {
    pub thread_id: String,
    /// RFC 3339 UTC.
    pub created_at: String,
    /// The latest of its metadata's change and its newest job's (RFC 3339).
    pub updated_at: String,
    pub metadata: Map<String, Value>,
    /// Always `{}`: a thread carries no settings; each run brings its own.
    pub config: Map<String, Value>,
    /// Always `{}`, as `config`.
    pub context: Map<String, Value>,
    pub status: ThreadStatus,
    /// `{"messages": […]}` rebuilt from its jobs' journals (`{}` before its
    /// first run).
    pub values: Value,
    /// Always `{}` here: a parked approval is read from the thread's state.
    pub interrupts: Map<String, Value>,
}

/// Where a thread stands, from its jobs.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum ThreadStatus {
    /// No job of it is queued or running, and its newest ended well (or
    /// was cancelled), or it has none.
    Idle,
    /// A job of it is queued or running.
    Busy,
    /// Its newest job is parked: an approval, or an outcome to resolve.
    Interrupted,
    /// Its newest job failed.
    Error,
}

fn status(thread: &StoredThread) -> ThreadStatus {
    if thread.busy {
        return ThreadStatus::Busy;
    }
    match thread.newest {
        Some(state) if state.is_parked() => ThreadStatus::Interrupted,
        Some(state) if JobState::ERRORED.contains(&state) => ThreadStatus::Error,
        _ => ThreadStatus::Idle,
    }
}

/// What to do when the thread exists already.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum IfExists {
    /// Refuse (409).
    #[default]
    Raise,
    /// Answer the thread as it is.
    DoNothing,
}

/// The body of `POST /threads`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct CreateRequest {
    /// The thread's id (1 to 128 letters, digits, `-`, `_`, `.`, `:`); a
    /// new UUID when absent.
    #[serde(default)]
    #[schemars(regex(pattern = crate::types::text::ID_PATTERN))]
    pub thread_id: Option<String>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default)]
    pub if_exists: Option<IfExists>,
    /// Only empty: a thread's state is its jobs' journals.
    #[serde(default)]
    #[schemars(length(max = 0))]
    pub supersteps: Option<Vec<Value>>,
    /// Only `null`: finished jobs are kept as `[retention]` says.
    #[serde(default)]
    #[schemars(with = "Option<()>")]
    pub ttl: Option<Value>,
}

/// The body of `PATCH /threads/{thread_id}`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct PatchRequest {
    /// Merged into the thread's: each key set, a `null` one removed.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Only `null`: finished jobs are kept as `[retention]` says.
    #[serde(default)]
    #[schemars(with = "Option<()>")]
    pub ttl: Option<Value>,
    /// Only empty: a thread's state is its runs' journals, never written
    /// (the Agent Protocol's state merge).
    #[serde(default)]
    #[schemars(extend("maxProperties" = 0))]
    pub values: Option<Map<String, Value>>,
    /// Only empty, as `values`.
    #[serde(default)]
    #[schemars(length(max = 0))]
    pub messages: Option<Vec<Value>>,
    /// Taken, its shape checked, and unused: the Agent Protocol ignores
    /// it for a metadata patch, the only patch a thread takes.
    #[serde(default)]
    #[expect(dead_code, reason = "read only to check its shape; see the doc")]
    pub checkpoint: Option<BranchPoint>,
}

/// A checkpoint a patch names (the Agent Protocol's `ThreadCheckpoint`).
#[derive(Debug, Deserialize, JsonSchema)]
pub struct BranchPoint {
    #[expect(dead_code, reason = "read only to check its shape")]
    pub checkpoint_id: String,
}

/// What a thread search keeps (the body of `POST /threads/count`).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(rename = "ThreadFilters")]
pub struct Filters {
    /// Only threads whose metadata has each of these keys at this value.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Only empty: values are rebuilt from journals, not indexed.
    #[serde(default)]
    #[schemars(extend("maxProperties" = 0))]
    pub values: Option<Map<String, Value>>,
    #[serde(default)]
    pub status: Option<ThreadStatus>,
}

/// The body of `POST /threads/search`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(rename = "ThreadSearch")]
pub struct SearchRequest {
    #[serde(flatten)]
    pub filters: Filters,
    /// Only these threads.
    #[serde(default)]
    pub ids: Option<Vec<String>>,
    /// At most this many (1 to 1000; default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
    #[serde(default)]
    pub sort_by: Option<SortBy>,
    #[serde(default)]
    pub sort_order: Option<SortOrder>,
    /// Only these fields of each thread.
    #[serde(default)]
    pub select: Option<Vec<Field>>,
    /// Only empty: values are rebuilt from journals, not indexed.
    #[serde(default)]
    #[schemars(extend("maxProperties" = 0))]
    pub extract: Option<Map<String, Value>>,
}

/// What a thread search sorts by (default `created_at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SortBy {
    ThreadId,
    Status,
    CreatedAt,
    UpdatedAt,
    /// As `updated_at`: a thread's state changes with its jobs.
    StateUpdatedAt,
}

/// A field of a thread a search may select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    ThreadId,
    CreatedAt,
    UpdatedAt,
    Metadata,
    Config,
    Context,
    Status,
    Values,
    Interrupts,
}

impl Field {
    fn key(self) -> &'static str {
        match self {
            Field::ThreadId => "thread_id",
            Field::CreatedAt => "created_at",
            Field::UpdatedAt => "updated_at",
            Field::Metadata => "metadata",
            Field::Config => "config",
            Field::Context => "context",
            Field::Status => "status",
            Field::Values => "values",
            Field::Interrupts => "interrupts",
        }
    }
}

/// The 404 of a thread the key does not have.
pub(super) fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!(
            "no thread {id:?}: a thread is a conversation of this key (POST /threads makes one, POST /threads/search lists them)"
        ),
    )
}

/// A 422 naming `field`, which the daemon does not take.
fn refused(field: &str, why: &str) -> ApiError {
    ApiError::field(ErrorCode::InvalidRequest, field, why.to_string())
}

/// A refusal of the retention fields: the daemon keeps jobs as its
/// operator says.
fn no_ttl(ttl: Option<&Value>) -> Result<(), ApiError> {
    match ttl {
        Some(ttl) if !ttl.is_null() => Err(refused(
            "ttl",
            "threads take no ttl: finished jobs, and so threads, are kept as the daemon's `[retention]` settings say",
        )),
        _ => Ok(()),
    }
}

/// `thread` as clients see it, its values rebuilt from its jobs.
pub(super) async fn view(
    state: &AppState,
    owner: &str,
    thread: StoredThread,
) -> Result<Thread, ApiError> {
    let status = status(&thread);
    let values = state::values(&state::checkpoints(state, owner, &thread.id).await?);
    // Its interrupts by the task that waits on them.
    let mut interrupts = Map::new();
    if status == ThreadStatus::Interrupted
        && let Some(newest) = jobs_of(state, owner, &thread.id).await?.last()
    {
        let waiting = interrupts::of_job(newest);
        if !waiting.is_empty() {
            let task = interrupts::waiting_task(newest, &waiting);
            interrupts.insert(
                task["id"].as_str().unwrap_or_default().to_string(),
                Value::Array(waiting),
            );
        }
    }
    Ok(Thread {
        thread_id: thread.id,
        created_at: rfc3339(thread.created_at),
        updated_at: rfc3339(thread.updated_at),
        metadata: thread.metadata,
        config: Map::new(),
        context: Map::new(),
        status,
        values,
        interrupts,
    })
}

/// `POST /threads` in the API document.
pub(super) fn create_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Make a thread: a conversation of this key the next run continues")
        .response_with::<200, Json<Thread>, _>(|r| r.description("The thread"));
    answers(
        op,
        &[
            (
                409,
                "The key has a thread of that id (and `if_exists` is `raise`)",
            ),
            (
                422,
                "A field is invalid, or one the daemon does not take (`supersteps`, `ttl`)",
            ),
        ],
    )
}

/// `POST /threads`.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(request): JsonBody<CreateRequest>,
) -> Result<Json<Thread>, ApiError> {
    if request.supersteps.as_ref().is_some_and(|s| !s.is_empty()) {
        return Err(refused(
            "supersteps",
            "a thread's state is its jobs' journals: make the thread, then run the assistant on it (POST /threads/{thread_id}/runs)",
        ));
    }
    no_ttl(request.ttl.as_ref())?;
    let id = match request.thread_id {
        Some(id) => {
            check_id(&id).map_err(|_| {
                refused(
                    "thread_id",
                    &format!("invalid thread id {id:?}: use 1 to 128 letters, digits, `-`, `_`, `.` or `:`"),
                )
            })?;
            id
        }
        None => uuid::Uuid::new_v4().to_string(),
    };
    let owner = caller.name();
    caller.authorize(Action::WriteConversation, &conversation(owner), || {
        not_found(&id)
    })?;
    let metadata = request.metadata.unwrap_or_default();
    let thread = match state.queue.create_thread(owner, &id, metadata).await? {
        Created::New(thread) => thread,
        Created::Existing(thread) if request.if_exists == Some(IfExists::DoNothing) => thread,
        Created::Existing(_) => {
            return Err(ApiError::new(
                ErrorCode::InvalidState,
                format!(
                    "thread {id:?} exists already: GET /threads/{id} reads it; send `if_exists: do_nothing` to be answered with it"
                ),
            ));
        }
    };
    Ok(Json(view(&state, owner, thread).await?))
}

/// `GET /threads/{thread_id}` in the API document.
pub(super) fn get_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("A thread: a conversation of this key, with its status and messages")
        .response_with::<200, Json<Thread>, _>(|r| r.description("The thread"));
    answers(op, &[(404, "The key has no thread of that id")])
}

/// `GET /threads/{thread_id}`.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Thread>, ApiError> {
    let thread = own_thread(&state, &caller, &id).await?;
    Ok(Json(view(&state, caller.name(), thread).await?))
}

/// The caller's thread `id`, once the policy lets it read its
/// conversations; else the 404 of a thread it does not have.
pub(super) async fn own_thread(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<StoredThread, ApiError> {
    let owner = caller.name();
    caller.authorize(Action::ReadConversation, &conversation(owner), || {
        not_found(id)
    })?;
    state
        .queue
        .thread(owner, id)
        .await?
        .ok_or_else(|| not_found(id))
}

/// `PATCH /threads/{thread_id}` in the API document.
pub(super) fn patch_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Merge metadata into a thread (a `null` value removes its key)")
        .response_with::<200, Json<Thread>, _>(|r| r.description("The thread after"));
    answers(
        op,
        &[
            (404, "The key has no thread of that id"),
            (
                422,
                "A field is invalid, or one the daemon does not take (`ttl`)",
            ),
        ],
    )
}

/// `PATCH /threads/{thread_id}`.
pub async fn patch(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(request): JsonBody<PatchRequest>,
) -> Result<Json<Thread>, ApiError> {
    no_ttl(request.ttl.as_ref())?;
    let writes_state = [
        (
            "values",
            request.values.as_ref().is_some_and(|v| !v.is_empty()),
        ),
        (
            "messages",
            request.messages.as_ref().is_some_and(|m| !m.is_empty()),
        ),
    ];
    if let Some((field, _)) = writes_state.into_iter().find(|(_, given)| *given) {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            field,
            format!(
                "thread {id:?}: a thread's state is its runs' journals and is not written: fork a run at a step (POST /v1/jobs/{{id}}/fork) or start a new run on the thread"
            ),
        ));
    }
    let owner = caller.name();
    caller.authorize(Action::WriteConversation, &conversation(owner), || {
        not_found(&id)
    })?;
    let metadata = request.metadata.unwrap_or_default();
    let thread = state
        .queue
        .patch_thread(owner, &id, metadata)
        .await?
        .ok_or_else(|| not_found(&id))?;
    Ok(Json(view(&state, owner, thread).await?))
}

/// `DELETE /threads/{thread_id}` in the API document.
pub(super) fn delete_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Delete a thread with its runs (their events and journals)")
        .response_with::<204, (), _>(|r| r.description("Deleted"));
    answers(
        op,
        &[
            (404, "The key has no thread of that id"),
            (
                409,
                "A run of the thread has not ended (queued, running or parked): nothing was deleted",
            ),
        ],
    )
}

/// `DELETE /threads/{thread_id}`.
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let owner = caller.name();
    caller.authorize(Action::DeleteConversation, &conversation(owner), || {
        not_found(&id)
    })?;
    match state.queue.delete_thread(owner, &id).await? {
        ThreadDeletion::Deleted(_) => Ok(StatusCode::NO_CONTENT),
        ThreadDeletion::Missing => Err(not_found(&id)),
        ThreadDeletion::Unfinished(left) => Err(ApiError::new(
            ErrorCode::InvalidState,
            format!(
                "thread {id:?} has {left} run(s) not ended (queued, running or parked): cancel them (POST /threads/{id}/runs/{{run_id}}/cancel or POST /v1/jobs/{{id}}/cancel) or wait, then DELETE again; nothing was deleted"
            ),
        )),
    }
}

/// The key's threads a search's filters keep, newest first.
async fn matching(
    state: &AppState,
    caller: &Caller,
    filters: &Filters,
) -> Result<Vec<StoredThread>, ApiError> {
    if filters.values.as_ref().is_some_and(|v| !v.is_empty()) {
        return Err(refused(
            "values",
            "threads are not searched by their values (rebuilt from journals, not indexed): search by `metadata` or `status`",
        ));
    }
    let owner = caller.name();
    caller.authorize(Action::ReadConversation, &conversation(owner), || {
        not_found("")
    })?;
    let threads = state.queue.threads(owner, THREADS_SCANNED).await?;
    let wanted = filters.metadata.as_ref();
    Ok(threads
        .into_iter()
        .filter(|t| filters.status.is_none_or(|s| status(t) == s))
        .filter(|t| has_metadata(&Value::Object(t.metadata.clone()), wanted))
        .collect())
}

/// `POST /threads/search` in the API document.
pub(super) fn search_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Search the key's threads")
        .description(
            "Looks at the key's 10,000 newest threads: filters by `ids`, `status` and \
             `metadata` (each key at its value); sorted by `sort_by` (default `created_at`) \
             in `sort_order` (default `desc`); `select` keeps only those fields. When more \
             threads follow the page, the header `X-Pagination-Next` holds the next offset.",
        )
        .response_with::<200, Json<Vec<Value>>, _>(|r| {
            r.description("The threads of the page (objects of the `Thread` shape)")
        });
    answers(
        op,
        &[(
            422,
            "A field is out of range, unknown, or not taken (`values`, `extract`)",
        )],
    )
}

/// `POST /threads/search`.
pub async fn search(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(request): JsonBody<SearchRequest>,
) -> Result<Response, ApiError> {
    if request.extract.as_ref().is_some_and(|e| !e.is_empty()) {
        return Err(refused(
            "extract",
            "threads are not searched by their values: select whole fields with `select`",
        ));
    }
    let bounds = page(request.limit, request.offset)?;
    let mut found = matching(&state, &caller, &request.filters).await?;
    if let Some(ids) = &request.ids {
        found.retain(|t| ids.contains(&t.id));
    }
    let by = request.sort_by.unwrap_or(SortBy::CreatedAt);
    found.sort_by(|a, b| {
        let order = match by {
            SortBy::ThreadId => a.id.cmp(&b.id),
            SortBy::Status => status(a).cmp(&status(b)),
            SortBy::CreatedAt => a.created_at.cmp(&b.created_at),
            SortBy::UpdatedAt | SortBy::StateUpdatedAt => a.updated_at.cmp(&b.updated_at),
        };
        order.then_with(|| a.id.cmp(&b.id))
    });
    if request.sort_order.unwrap_or_default() == SortOrder::Desc {
        found.reverse();
    }
    let (shown, next) = listing::paged(found, bounds);
    let owner = caller.name();
    let mut threads = Vec::with_capacity(shown.len());
    for thread in shown {
        threads.push(view(&state, owner, thread).await?);
    }
    let select: Vec<&str> = request.select.iter().flatten().map(|f| f.key()).collect();
    Ok(listing::answer(threads, next, &select))
}

/// `POST /threads/count` in the API document.
pub(super) fn count_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Count the key's threads a search with these filters finds")
        .response_with::<200, Json<usize>, _>(|r| r.description("How many"));
    answers(op, &[(422, "A field is unknown, or not taken (`values`)")])
}

/// `POST /threads/count`.
pub async fn count(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(filters): JsonBody<Filters>,
) -> Result<Json<usize>, ApiError> {
    Ok(Json(matching(&state, &caller, &filters).await?.len()))
}
