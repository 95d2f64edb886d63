//! Assistants are bundles: `POST /assistants/search` and `…/count`,
//! `GET /assistants/{id}`, `POST /assistants/{id}/versions`. Every loaded
//! bundle the key may read is an assistant — its graph id its name, its id
//! the name or LangGraph's UUID of it (`ids`) — whose versions are the
//! versions of the bundle the daemon served since it started. The key's
//! custom assistants (`custom`: a bundle with variables set, in versions)
//! are listed and read beside them; [`resolve`] says what a run of either
//! runs.

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::response::Response;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::{JsonBody, Path};
use super::super::document::answers;
use super::super::error::{ApiError, ErrorCode};
use super::ids;
use super::listing::{self, SortOrder, has_metadata, page};
use crate::access::policy::{Action, Resource};
use crate::queue::{AssistantSettings, StoredAssistant, rfc3339};
use crate::registry::{BundleEntry, LoadedBundle, Snapshot};

/// An assistant: a loaded bundle as LangGraph's clients see it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Assistant {
    /// LangGraph's UUID of the bundle's name (the name is taken too).
    pub assistant_id: String,
    /// The bundle's name.
    pub graph_id: String,
    /// A bundle's `{}` (its settings are its files); a custom assistant's
    /// config (`configurable`: variables its runs start with).
    pub config: Map<String, Value>,
    /// A bundle's `{}` (variables come with each run); a custom
    /// assistant's variables.
    pub context: Map<String, Value>,
    /// When the version serving was loaded, or the custom assistant made
    /// (RFC 3339).
    pub created_at: String,
    pub updated_at: String,
    /// A bundle's [`AssistantMetadata`]; a custom assistant's own.
    pub metadata: Map<String, Value>,
    /// The version serving's place among the versions the daemon served
    /// since it started (1 the first).
    pub version: u32,
    /// The bundle's name.
    pub name: String,
    /// The bundle's description (empty when it has none).
    pub description: String,
}

/// What an assistant says of the bundle behind it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AssistantMetadata {
    /// `system`: every assistant is a bundle the operator dropped.
    pub created_by: &'static str,
    /// The bundle's own `version:`.
    pub bundle_version: String,
    /// The binding's identity (`GET /v1/bundles/{name}`'s `digest`).
    pub digest: String,
    /// The digest of the bundle's files alone.
    pub content_digest: String,
    /// `ok`, or `degraded` while the last good version serves a broken edit.
    pub status: String,
}

/// What a search keeps (the body of `POST /assistants/count`).
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(rename = "AssistantFilters")]
pub struct Filters {
    /// Only assistants whose metadata has each of these keys at exactly
    /// this value.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// Only the bundle of this name.
    #[serde(default)]
    pub graph_id: Option<String>,
    /// Only bundles whose name holds this text (any case).
    #[serde(default)]
    pub name: Option<String>,
}

/// The body of `POST /assistants/search`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(rename = "AssistantSearch")]
pub struct SearchRequest {
    #[serde(flatten)]
    pub filters: Filters,
    /// At most this many (1 to 1000; default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    /// After skipping this many.
    #[serde(default)]
    pub offset: Option<usize>,
    #[serde(default)]
    pub sort_by: Option<SortBy>,
    #[serde(default)]
    pub sort_order: Option<SortOrder>,
    /// Only these fields of each assistant.
    #[serde(default)]
    pub select: Option<Vec<Field>>,
}

/// What a search sorts by (default `created_at`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum SortBy {
    AssistantId,
    GraphId,
    Name,
    CreatedAt,
    UpdatedAt,
}

/// A field of an assistant a search may select.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Field {
    AssistantId,
    GraphId,
    Config,
    Context,
    CreatedAt,
    UpdatedAt,
    Metadata,
    Version,
    Name,
    Description,
}

impl Field {
    fn key(self) -> &'static str {
        match self {
            Field::AssistantId => "assistant_id",
            Field::GraphId => "graph_id",
            Field::Config => "config",
            Field::Context => "context",
            Field::CreatedAt => "created_at",
            Field::UpdatedAt => "updated_at",
            Field::Metadata => "metadata",
            Field::Version => "version",
            Field::Name => "name",
            Field::Description => "description",
        }
    }
}

/// The body of `POST /assistants/{id}/versions`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
pub struct VersionsRequest {
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// At most this many (1 to 1000; default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    #[serde(default)]
    pub offset: Option<usize>,
}

/// One version of an assistant: a version of its bundle the daemon served
/// since it started, or the one the release gate holds.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct AssistantVersion {
    pub assistant_id: String,
    pub graph_id: String,
    pub config: Map<String, Value>,
    pub context: Map<String, Value>,
    /// When this daemon loaded it (RFC 3339), for the version serving and
    /// the one held; `null` for one that served before. When a custom
    /// assistant's version was made.
    pub created_at: Option<String>,
    /// A bundle's [`VersionMetadata`]; a custom assistant's own.
    pub metadata: Map<String, Value>,
    /// Its place among the versions (1 the first served).
    pub version: u32,
    pub name: String,
    pub description: String,
}

/// What a version says of the bundle's content.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct VersionMetadata {
    pub created_by: &'static str,
    pub bundle_version: String,
    /// Its identity, when the daemon still knows it.
    pub digest: Option<String>,
    /// `serving`, `served` (before the one serving) or `candidate` (held
    /// by the release gate).
    pub status: &'static str,
}

/// The loaded bundles `caller` may read, by name.
fn readable<'s>(
    snapshot: &'s Snapshot,
    caller: &'s Caller,
) -> impl Iterator<Item = (&'s BundleEntry, &'s std::sync::Arc<LoadedBundle>)> {
    snapshot
        .bundles
        .values()
        .filter(|entry| caller.allows(Action::ReadBundle, &Resource::bundle(&entry.name)))
        .filter_map(|entry| Some((entry, entry.current.as_ref()?)))
}

/// The bundle assistant `id` names, among those `caller` may read; else
/// a 404 (another key's bundle is as unknown as a missing one).
pub(super) fn found<'s>(
    snapshot: &'s Snapshot,
    caller: &'s Caller,
    id: &str,
) -> Result<(&'s BundleEntry, &'s std::sync::Arc<LoadedBundle>), ApiError> {
    readable(snapshot, caller)
        .find(|(entry, _)| ids::names(id, &entry.name))
        .ok_or_else(|| no_assistant(id))
}

fn no_assistant(id: &str) -> ApiError {
    ApiError::new(
        ErrorCode::NotFound,
        format!(
            "no assistant {id:?}: an assistant is a loaded bundle the key may read, named by its name or its assistant_id, or one of the key's custom assistants (POST /assistants/search lists them)"
        ),
    )
}

/// The versions of bundle `name` the daemon knows, oldest first, with the
/// place of the one serving.
fn versions(state: &AppState, entry: &BundleEntry) -> (Vec<(String, &'static str)>, u32) {
    let serving = entry.current.as_ref().map(|b| b.version().to_string());
    let held = entry
        .candidate
        .as_ref()
        .map(|c| c.loaded.version().to_string());
    // Newest first: serving, held, then those served before, newest first.
    let known = state.registry.versions_of(&entry.name);
    let mut served: Vec<(String, &'static str)> = known
        .into_iter()
        .filter(|v| Some(v) != serving.as_ref() && Some(v) != held.as_ref())
        .map(|v| (v, "served"))
        .collect();
    served.reverse();
    served.extend(serving.map(|v| (v, "serving")));
    let place = served.len() as u32;
    served.extend(held.map(|v| (v, "candidate")));
    (served, place.max(1))
}

/// A typed metadata as the map an assistant shows.
fn as_map(metadata: &impl Serialize) -> Map<String, Value> {
    match serde_json::to_value(metadata) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// The assistant of a loaded bundle.
pub(super) fn assistant(state: &AppState, entry: &BundleEntry, loaded: &LoadedBundle) -> Assistant {
    let (_, version) = versions(state, entry);
    let metadata = AssistantMetadata {
        created_by: "system",
        bundle_version: loaded.version().to_string(),
        digest: loaded.identity.to_string(),
        content_digest: loaded.bundle.content_digest.to_string(),
        status: serde_json::to_value(entry.status)
            .ok()
            .and_then(|v| v.as_str().map(String::from))
            .unwrap_or_default(),
    };
    Assistant {
        assistant_id: ids::assistant_id(&entry.name),
        graph_id: entry.name.clone(),
        config: Map::new(),
        context: Map::new(),
        created_at: loaded.loaded_at.clone(),
        updated_at: loaded.loaded_at.clone(),
        metadata: as_map(&metadata),
        version,
        name: entry.name.clone(),
        description: loaded.bundle.raw.description.clone(),
    }
}

/// The assistant of the key's custom assistant `stored`.
pub(super) fn custom_assistant(stored: &StoredAssistant) -> Assistant {
    let settings = &stored.settings;
    Assistant {
        assistant_id: stored.id.clone(),
        graph_id: settings.graph_id.clone(),
        config: settings.config.clone(),
        context: settings.context.clone(),
        created_at: rfc3339(stored.created_at),
        updated_at: rfc3339(stored.updated_at),
        metadata: settings.metadata.clone(),
        version: u32::try_from(stored.version).unwrap_or(u32::MAX),
        name: settings.name.clone(),
        description: settings.description.clone(),
    }
}

/// The assistants `caller` may read that a search's filters keep: the
/// loaded bundles, then the key's custom assistants over them.
pub(super) async fn matching(
    state: &AppState,
    caller: &Caller,
    filters: &Filters,
) -> Result<Vec<Assistant>, ApiError> {
    let snapshot = state.registry.snapshot();
    let mut all: Vec<Assistant> = readable(&snapshot, caller)
        .map(|(entry, loaded)| assistant(state, entry, loaded))
        .collect();
    all.extend(
        state
            .queue
            .assistants(caller.name())
            .await?
            .iter()
            .filter(|stored| {
                caller.allows(
                    Action::ReadBundle,
                    &Resource::bundle(&stored.settings.graph_id),
                )
            })
            .map(custom_assistant),
    );
    let (metadata, graph_id) = (filters.metadata.as_ref(), filters.graph_id.as_deref());
    let name = filters.name.as_deref().map(str::to_lowercase);
    Ok(all
        .into_iter()
        .filter(|a| graph_id.is_none_or(|id| id == a.graph_id))
        .filter(|a| {
            name.as_ref()
                .is_none_or(|part| a.name.to_lowercase().contains(part))
        })
        .filter(|a| has_metadata(&Value::Object(a.metadata.clone()), metadata))
        .collect())
}

/// What a run of an assistant runs.
pub(super) struct Target {
    /// The bundle.
    pub bundle: String,
    /// The assistant's id as its runs show it.
    pub assistant_id: String,
    /// The variables its runs start with (a custom assistant's; a run's
    /// own override them).
    pub variables: Map<String, Value>,
    /// The key's custom assistant, when it is one.
    pub custom: Option<StoredAssistant>,
}

/// What assistant `id` runs, for `caller`: a loaded bundle it may read, or
/// its own custom assistant over one; else a 404 (another key's assistant
/// is as unknown as a missing one).
pub(super) async fn resolve(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Target, ApiError> {
    let snapshot = state.registry.snapshot();
    if let Ok((entry, _)) = found(&snapshot, caller, id) {
        return Ok(Target {
            bundle: entry.name.clone(),
            assistant_id: ids::assistant_id(&entry.name),
            variables: Map::new(),
            custom: None,
        });
    }
    let Some(stored) = stored_custom(state, caller, id).await? else {
        return Err(no_assistant(id));
    };
    let bundle = stored.settings.graph_id.clone();
    let (_, loaded) = found(&snapshot, caller, &bundle).map_err(|_| {
        ApiError::new(
            ErrorCode::NotFound,
            format!(
                "assistant {id:?} runs bundle {bundle:?}, which is not loaded or not one this key may read: load the bundle again, or point the assistant at another (PATCH /assistants/{id} with `graph_id`)"
            ),
        )
    })?;
    // Checked when it was made; the bundle may have changed since, or an
    // older version of the assistant been made its latest.
    if let Some((key, takes)) = unread_variable(loaded, &stored.settings) {
        return Err(ApiError::field(
            ErrorCode::InvalidRequest,
            "assistant_id",
            format!(
                "assistant {id:?} (version {}) sets variable {key:?}, but bundle {bundle:?} as loaded now {}: change the assistant (PATCH /assistants/{id}) or make a version that fits its latest (POST /assistants/{id}/latest)",
                stored.version,
                reads(&takes)
            ),
        ));
    }
    Ok(Target {
        bundle,
        assistant_id: stored.id.clone(),
        variables: preset_variables(&stored.settings),
        custom: Some(stored),
    })
}

/// The first variable `settings` sets that bundle `loaded`'s prompts do
/// not read, with what they read: what a custom assistant may not set.
pub(super) fn unread_variable(
    loaded: &LoadedBundle,
    settings: &AssistantSettings,
) -> Option<(String, Vec<String>)> {
    let takes = loaded.bundle.prompts.variables();
    let key = preset_variables(settings)
        .into_iter()
        .map(|(key, _)| key)
        .find(|key| !takes.contains(key))?;
    Some((key, takes))
}

/// What a bundle whose prompts read `takes` permits, said to a client.
pub(super) fn reads(takes: &[String]) -> String {
    match takes.is_empty() {
        true => "reads no variable, so it permits no override".to_string(),
        false => format!("reads only {}", takes.join(", ")),
    }
}

/// The variables a custom assistant's runs start with: its config's
/// `configurable` values (LangGraph's own keys aside), then its context.
pub(super) fn preset_variables(settings: &AssistantSettings) -> Map<String, Value> {
    ids::configured_variables(settings.config.get("configurable"), Some(&settings.context))
}

/// Whether `id` names a loaded bundle (its name or assistant id): such an
/// id is never a custom assistant's.
pub(super) fn is_bundles(state: &AppState, id: &str) -> bool {
    let snapshot = state.registry.snapshot();
    snapshot
        .bundles
        .values()
        .any(|entry| ids::names(id, &entry.name))
}

/// `caller`'s custom assistant `id`, if it has one.
pub(super) async fn stored_custom(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Option<StoredAssistant>, ApiError> {
    if !crate::types::text::is_id(id) {
        return Ok(None);
    }
    Ok(state.queue.assistant(caller.name(), id).await?)
}

/// `POST /assistants/search` in the API document.
pub(super) fn search_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Search the assistants: the loaded bundles the key may read")
        .description(
            "Filters by `graph_id` (the bundle's name), `name` (a part of it, any case) and \
             `metadata` (each key at its value); sorted by `sort_by` (default `created_at`) in \
             `sort_order` (default `desc`); `select` keeps only those fields. When more \
             assistants follow the page, the header `X-Pagination-Next` holds the next offset.",
        )
        .response_with::<200, Json<Vec<Value>>, _>(|r| {
            r.description("The assistants of the page (objects of the `Assistant` shape)")
        });
    answers(op, &[(422, "A field is out of range or unknown")])
}

/// `POST /assistants/search`.
pub async fn search(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(request): JsonBody<SearchRequest>,
) -> Result<Response, ApiError> {
    let (limit, offset) = page(request.limit, request.offset)?;
    let mut found = matching(&state, &caller, &request.filters).await?;
    let by = request.sort_by.unwrap_or(SortBy::CreatedAt);
    found.sort_by(|a, b| {
        let key = |x: &Assistant| match by {
            SortBy::AssistantId => x.assistant_id.clone(),
            SortBy::GraphId => x.graph_id.clone(),
            SortBy::Name => x.name.clone(),
            SortBy::CreatedAt => x.created_at.clone(),
            SortBy::UpdatedAt => x.updated_at.clone(),
        };
        key(a).cmp(&key(b)).then_with(|| a.name.cmp(&b.name))
    });
    if request.sort_order.unwrap_or_default() == SortOrder::Desc {
        found.reverse();
    }
    let select: Vec<&str> = request.select.iter().flatten().map(|f| f.key()).collect();
    let (shown, next) = listing::paged(found, (limit, offset));
    Ok(listing::answer(shown, next, &select))
}

/// `POST /assistants/count` in the API document.
pub(super) fn count_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary("Count the assistants a search with these filters finds")
        .response_with::<200, Json<usize>, _>(|r| r.description("How many"))
}

/// `POST /assistants/count`.
pub async fn count(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(filters): JsonBody<Filters>,
) -> Result<Json<usize>, ApiError> {
    Ok(Json(matching(&state, &caller, &filters).await?.len()))
}

// Shaped as `jobs.rs`'s `get_doc` and handler, as every route's doc
// function and extractors are: each states its own summary and answer.
/// `GET /assistants/{assistant_id}` in the API document.
pub(super) fn get_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("An assistant, by its id or its bundle's name")
        .response_with::<200, Json<Assistant>, _>(|r| r.description("The assistant"));
    answers(
        op,
        &[(404, "No loaded bundle the key may read is named so")],
    )
}

/// `GET /assistants/{assistant_id}`.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Assistant>, ApiError> {
    Ok(Json(assistant_named(&state, &caller, &id).await?))
}

/// Assistant `id` as `caller` sees it: a bundle's, or its own custom one.
pub(super) async fn assistant_named(
    state: &AppState,
    caller: &Caller,
    id: &str,
) -> Result<Assistant, ApiError> {
    let target = resolve(state, caller, id).await?;
    if let Some(custom) = &target.custom {
        return Ok(custom_assistant(custom));
    }
    let snapshot = state.registry.snapshot();
    let (entry, loaded) = found(&snapshot, caller, &target.bundle)?;
    Ok(assistant(state, entry, loaded))
}

/// `POST /assistants/{assistant_id}/versions` in the API document.
pub(super) fn versions_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary(
            "An assistant's versions: the bundle's versions this daemon served since it \
             started, and the one the release gate holds, the newest first",
        )
        .response_with::<200, Json<Vec<AssistantVersion>>, _>(|r| r.description("The versions"));
    answers(
        op,
        &[(404, "No loaded bundle the key may read is named so")],
    )
}

/// `POST /assistants/{assistant_id}/versions`.
pub async fn list_versions(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
    JsonBody(request): JsonBody<VersionsRequest>,
) -> Result<Json<Vec<AssistantVersion>>, ApiError> {
    let (limit, offset) = page(request.limit, request.offset)?;
    let target = resolve(&state, &caller, &id).await?;
    if let Some(custom) = &target.custom {
        let stored = state
            .queue
            .assistant_versions(caller.name(), &custom.id)
            .await?;
        let versions: Vec<AssistantVersion> = stored
            .into_iter()
            .map(|v| AssistantVersion {
                assistant_id: custom.id.clone(),
                graph_id: v.settings.graph_id,
                config: v.settings.config,
                context: v.settings.context,
                created_at: Some(rfc3339(v.created_at)),
                metadata: v.settings.metadata,
                version: u32::try_from(v.version).unwrap_or(u32::MAX),
                name: v.settings.name,
                description: v.settings.description,
            })
            .filter(|v| {
                has_metadata(
                    &Value::Object(v.metadata.clone()),
                    request.metadata.as_ref(),
                )
            })
            .collect();
        return Ok(Json(
            versions.into_iter().skip(offset).take(limit).collect(),
        ));
    }
    let snapshot = state.registry.snapshot();
    let (entry, loaded) = found(&snapshot, &caller, &target.bundle)?;
    let (known, _) = versions(&state, entry);
    let held = entry.candidate.as_ref().map(|c| &c.loaded);
    let mut all: Vec<AssistantVersion> = known
        .into_iter()
        .enumerate()
        .map(|(place, (version, status))| {
            let bound = match status {
                "serving" => Some(loaded),
                "candidate" => held,
                _ => None,
            };
            AssistantVersion {
                assistant_id: ids::assistant_id(&entry.name),
                graph_id: entry.name.clone(),
                config: Map::new(),
                context: Map::new(),
                created_at: bound.map(|b| b.loaded_at.clone()),
                metadata: as_map(&VersionMetadata {
                    created_by: "system",
                    digest: bound
                        .map(|b| b.identity.clone())
                        .or_else(|| state.registry.identity_of(&entry.name, &version))
                        .map(|identity| identity.to_string()),
                    bundle_version: version,
                    status,
                }),
                version: place as u32 + 1,
                name: entry.name.clone(),
                description: bound
                    .map(|b| b.bundle.raw.description.clone())
                    .unwrap_or_default(),
            }
        })
        .filter(|v| {
            has_metadata(
                &Value::Object(v.metadata.clone()),
                request.metadata.as_ref(),
            )
        })
        .collect();
    all.reverse();
    Ok(Json(all.into_iter().skip(offset).take(limit).collect()))
}
