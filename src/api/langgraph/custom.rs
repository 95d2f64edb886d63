//! Custom assistants: `POST /assistants`, `PATCH` and `DELETE
//! /assistants/{id}`, `POST /assistants/{id}/latest`. A custom assistant
//! is the key's own name for a bundle with variables set — its config's
//! `configurable` values and its context, which each of its runs starts
//! with — kept in versions by the queue (`queue::assistants`). A bundle
//! permits exactly the overrides its prompts name: a variable it does not
//! read is refused by name, so an assistant never carries a setting its
//! bundle would silently ignore. A bundle's own assistant is its files:
//! it is not changed or deleted here.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::{JsonBody, Path, Query};
use super::super::document::answers;
use super::super::error::{ApiError, ErrorCode};
use super::assistants::{
    Assistant, custom_assistant, found, is_bundles, reads, stored_custom, unread_variable,
};
use crate::access::policy::{Action, Resource};
use crate::queue::{AssistantCreated, AssistantPatch, AssistantSettings, StoredAssistant};

/// The body of `POST /assistants`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct CreateRequest {
    /// The bundle it runs (its name, or its assistant id).
    pub graph_id: String,
    /// Its id (1 to 128 letters, digits, `-`, `_`, `.` or `:`); a fresh
    /// UUID when absent.
    #[serde(default)]
    #[schemars(regex(pattern = crate::types::text::ID_PATTERN))]
    pub assistant_id: Option<String>,
    /// `configurable`: variables its runs start with (only those the
    /// bundle's prompts read).
    #[serde(default)]
    pub config: Option<Map<String, Value>>,
    /// Variables its runs start with, as `configurable`'s.
    #[serde(default)]
    pub context: Option<Map<String, Value>>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// `raise` (the default: an id the key has is a 409) or `do_nothing`
    /// (that assistant is answered as it stands).
    #[serde(default)]
    #[schemars(extend("enum" = ["raise", "do_nothing", null]))]
    pub if_exists: Option<String>,
    /// Its name (default: the bundle's).
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

/// The body of `PATCH /assistants/{id}`: a new version, the latest's
/// fields where absent (`metadata` merged into the latest's).
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct UpdateRequest {
    #[serde(default)]
    pub graph_id: Option<String>,
    #[serde(default)]
    pub config: Option<Map<String, Value>>,
    #[serde(default)]
    pub context: Option<Map<String, Value>>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub description: Option<String>,
}

/// The body of `POST /assistants/{id}/latest`.
#[derive(Debug, Deserialize, JsonSchema)]
pub struct LatestRequest {
    /// The version its runs use from now on.
    #[schemars(range(min = 1))]
    pub version: i64,
}

fn refused(field: &str, why: String) -> ApiError {
    ApiError::field(ErrorCode::InvalidRequest, field, why)
}

fn not_found(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!(
            "no custom assistant {id:?} of this key (POST /assistants makes one; POST /assistants/search lists them)"
        ),
    )
}

/// `settings` with its bundle named by its name, once the key may use the
/// bundle and the bundle reads every variable the settings set.
fn checked(
    caller: &Caller,
    state: &AppState,
    settings: AssistantSettings,
) -> Result<AssistantSettings, ApiError> {
    let snapshot = state.registry.snapshot();
    let unknown = || {
        ApiError::field(
            ErrorCode::NotFound,
            "graph_id",
            format!(
                "no bundle {:?} this key may use: graph_id names a loaded bundle (POST /assistants/search lists them)",
                settings.graph_id
            ),
        )
    };
    let (entry, loaded) = found(&snapshot, caller, &settings.graph_id).map_err(|_| unknown())?;
    caller.authorize(
        Action::WriteAssistant,
        &Resource::bundle(&entry.name),
        unknown,
    )?;
    if let Some((key, takes)) = unread_variable(loaded, &settings) {
        let field = match settings.context.contains_key(&key) {
            true => "context",
            false => "config",
        };
        return Err(refused(
            field,
            format!(
                "variable {key:?}: bundle {:?} {}; an assistant sets only the variables its bundle's prompts read",
                entry.name,
                reads(&takes)
            ),
        ));
    }
    Ok(AssistantSettings {
        graph_id: entry.name.clone(),
        ..settings
    })
}

/// An id a custom assistant may take: the id alphabet, and never a
/// bundle's name or assistant id (those are the bundles').
fn checked_id(state: &AppState, id: &str) -> Result<(), ApiError> {
    if !crate::types::text::is_id(id) {
        return Err(refused(
            "assistant_id",
            format!(
                "invalid assistant id {id:?}: use 1 to 128 letters, digits, `-`, `_`, `.` or `:`"
            ),
        ));
    }
    if is_bundles(state, id) {
        return Err(ApiError::field(
            ErrorCode::InvalidState,
            "assistant_id",
            format!(
                "assistant id {id:?} is a bundle's: pick another, or leave it out for a fresh UUID"
            ),
        ));
    }
    Ok(())
}

/// `POST /assistants` in the API document.
pub(super) fn create_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Make a custom assistant: a bundle with variables its runs start with")
        .description(
            "Its `config.configurable` values and `context` are variables every run of it starts \
             with (a run's own override them); each must be a variable the bundle's prompts \
             read. Versions start at 1; `PATCH` adds one.",
        )
        .response_with::<200, Json<Assistant>, _>(|r| r.description("The assistant"));
    answers(
        op,
        &[
            (404, "graph_id names no bundle the key may use"),
            (
                409,
                "The key has an assistant of that id (`if_exists: raise`), or the id is a bundle's",
            ),
            (
                422,
                "A variable the bundle does not read, or a field invalid, named",
            ),
        ],
    )
}

/// `POST /assistants`.
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(request): JsonBody<CreateRequest>,
) -> Result<Json<Assistant>, ApiError> {
    let raise = match request.if_exists.as_deref() {
        None | Some("raise") => true,
        Some("do_nothing") => false,
        Some(other) => {
            return Err(refused(
                "if_exists",
                format!("if_exists {other:?} is not one of `raise`, `do_nothing`"),
            ));
        }
    };
    let id = match request.assistant_id {
        Some(id) => id,
        None => uuid::Uuid::new_v4().to_string(),
    };
    checked_id(&state, &id)?;
    let settings = checked(
        &caller,
        &state,
        AssistantSettings {
            name: request.name.unwrap_or_else(|| request.graph_id.clone()),
            graph_id: request.graph_id,
            description: request.description.unwrap_or_default(),
            config: request.config.unwrap_or_default(),
            context: request.context.unwrap_or_default(),
            metadata: request.metadata.unwrap_or_default(),
        },
    )?;
    match state
        .queue
        .create_assistant(caller.name(), &id, settings)
        .await?
    {
        AssistantCreated::New(made) => Ok(Json(custom_assistant(&made))),
        AssistantCreated::Existing(kept) if !raise => Ok(Json(custom_assistant(&kept))),
        AssistantCreated::Existing(_) => Err(ApiError::new(
            ErrorCode::InvalidState,
            format!(
                "the key has an assistant {id:?} already: PATCH /assistants/{id} changes it, or send `if_exists: do_nothing`"
            ),
        )),
    }
}

/// The caller's custom assistant `id`, for a change.
async fn own(state: &AppState, caller: &Caller, id: &str) -> Result<StoredAssistant, ApiError> {
    if is_bundles(state, id) {
        return Err(ApiError::new(
            ErrorCode::InvalidState,
            format!(
                "assistant {id:?} is a bundle's, which its files make: change the bundle, or make a custom assistant over it (POST /assistants)"
            ),
        ));
    }
    let stored = stored_custom(state, caller, id)
        .await?
        .ok_or_else(|| not_found(id))?;
    caller.authorize(
        Action::WriteAssistant,
        &Resource::bundle(&stored.settings.graph_id),
        || not_found(id),
    )?;
    Ok(stored)
}

/// `PATCH /assistants/{assistant_id}` in the API document.
pub(super) fn update_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Change a custom assistant: a new version, made the latest")
        .description(
            "A field left out keeps the latest version's; `metadata` is merged into it. The \
             variables are checked as on create.",
        )
        .response_with::<200, Json<Assistant>, _>(|r| r.description("The assistant"));
    answers(
        op,
        &[
            (
                404,
                "The key has no custom assistant of that id, or graph_id no bundle it may use",
            ),
            (409, "The assistant is a bundle's"),
            (
                422,
                "A variable the bundle does not read, or a field invalid, named",
            ),
        ],
    )
}

/// `PATCH /assistants/{assistant_id}`.
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(request): JsonBody<UpdateRequest>,
) -> Result<Json<Assistant>, ApiError> {
    let latest = own(&state, &caller, &id).await?;
    let patch = AssistantPatch {
        graph_id: request.graph_id,
        name: request.name,
        description: request.description,
        config: request.config,
        context: request.context,
        metadata: request.metadata,
    };
    // Checked as it will be stored: the latest's fields with this patch.
    let settings = checked(&caller, &state, patch.applied_to(&latest.settings))?;
    let patch = AssistantPatch {
        graph_id: Some(settings.graph_id),
        ..patch
    };
    let changed = state
        .queue
        .update_assistant(caller.name(), &id, patch)
        .await?
        .ok_or_else(|| not_found(&id))?;
    Ok(Json(custom_assistant(&changed)))
}

/// `DELETE /assistants/{assistant_id}` in the API document.
pub(super) fn delete_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Delete a custom assistant with its versions (its runs stay)")
        .response_with::<204, (), _>(|r| r.description("Deleted"));
    answers(
        op,
        &[
            (404, "The key has no custom assistant of that id"),
            (409, "The assistant is a bundle's"),
            (422, "`delete_threads=true`: a thread is deleted on its own"),
        ],
    )
}

/// `?delete_threads=` of an assistant's delete.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct DeleteQuery {
    /// Only `false`: a thread is deleted on its own (`DELETE /threads/{id}`).
    #[serde(default)]
    #[schemars(extend("enum" = [false, null]))]
    pub delete_threads: Option<bool>,
}

/// `DELETE /assistants/{assistant_id}`.
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    Query(query): Query<DeleteQuery>,
) -> Result<StatusCode, ApiError> {
    if query.delete_threads == Some(true) {
        return Err(refused(
            "delete_threads",
            "an assistant's delete leaves its threads: delete each with DELETE /threads/{thread_id} (or several with POST /threads/prune)".to_string(),
        ));
    }
    own(&state, &caller, &id).await?;
    match state.queue.delete_assistant(caller.name(), &id).await? {
        true => Ok(StatusCode::NO_CONTENT),
        false => Err(not_found(&id)),
    }
}

/// `POST /assistants/{assistant_id}/latest` in the API document.
pub(super) fn latest_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Pick the version of a custom assistant its runs use")
        .response_with::<200, Json<Assistant>, _>(|r| {
            r.description("The assistant at that version")
        });
    answers(
        op,
        &[
            (
                404,
                "The key has no custom assistant of that id, or it no such version",
            ),
            (409, "The assistant is a bundle's"),
        ],
    )
}

/// `POST /assistants/{assistant_id}/latest`.
pub async fn set_latest(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(request): JsonBody<LatestRequest>,
) -> Result<Json<Assistant>, ApiError> {
    own(&state, &caller, &id).await?;
    let version = request.version;
    let picked = state
        .queue
        .set_assistant_latest(caller.name(), &id, version)
        .await?
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotFound,
                format!(
                    "assistant {id:?} has no version {version} (POST /assistants/{id}/versions lists them)"
                ),
            )
        })?;
    Ok(Json(custom_assistant(&picked)))
}
