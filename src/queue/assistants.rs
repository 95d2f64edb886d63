//! Custom assistants: a key's named settings over a bundle, as LangGraph's
//! server keeps assistants — the bundle (`graph_id`), a name, a
//! description, the variables a run starts with (`config.configurable`
//! and `context`) and metadata — in numbered versions, one of them the
//! latest, which runs use. Each key's assistants are its own: every
//! statement names the owner. Whether a bundle takes those variables is
//! the API's to check (`api/langgraph/custom.rs`); the queue stores them.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use super::tx::{Columns, Res};

/// The most assistants a key's listing looks at: its newest this many.
pub const ASSISTANTS_SCANNED: usize = 10_000;

/// The most versions one assistant keeps answering for: its newest this
/// many (a listing of versions reads no more).
pub const VERSIONS_LISTED: usize = 1_000;

/// What one version of an assistant sets.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct AssistantSettings {
    /// The bundle it runs.
    pub graph_id: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    /// LangGraph's `config` (its `configurable` values are variables).
    #[serde(default)]
    pub config: Map<String, Value>,
    /// Variables every run starts with.
    #[serde(default)]
    pub context: Map<String, Value>,
    #[serde(default)]
    pub metadata: Map<String, Value>,
}

/// An assistant as stored, at its latest version.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredAssistant {
    pub id: String,
    /// Its latest version's number (1 the first).
    pub version: i64,
    pub settings: AssistantSettings,
    /// Milliseconds since the epoch: when it was made, and last changed.
    pub created_at: i64,
    pub updated_at: i64,
}

/// One version of an assistant.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredAssistantVersion {
    pub version: i64,
    pub settings: AssistantSettings,
    pub created_at: i64,
}

/// What a create did.
#[derive(Debug, Clone, PartialEq)]
pub enum AssistantCreated {
    New(StoredAssistant),
    /// The key already had an assistant of that id: unchanged.
    Existing(StoredAssistant),
}

/// What an update sets; an absent field keeps the latest version's, and
/// `metadata` is merged into it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct AssistantPatch {
    pub graph_id: Option<String>,
    pub name: Option<String>,
    pub description: Option<String>,
    pub config: Option<Map<String, Value>>,
    pub context: Option<Map<String, Value>>,
    pub metadata: Option<Map<String, Value>>,
}

impl AssistantPatch {
    /// `latest` with this patch's fields.
    pub fn applied_to(&self, latest: &AssistantSettings) -> AssistantSettings {
        let mut metadata = latest.metadata.clone();
        metadata.extend(self.metadata.clone().unwrap_or_default());
        AssistantSettings {
            graph_id: self.graph_id.clone().unwrap_or(latest.graph_id.clone()),
            name: self.name.clone().unwrap_or(latest.name.clone()),
            description: self
                .description
                .clone()
                .unwrap_or(latest.description.clone()),
            config: self.config.clone().unwrap_or(latest.config.clone()),
            context: self.context.clone().unwrap_or(latest.context.clone()),
            metadata,
        }
    }
}

/// The columns [`assistant_from_row`] reads, over `assistants a` joined
/// with its latest version `v`.
pub(crate) const ASSISTANT_COLUMNS: &str = "a.id, a.latest, v.settings, a.created_at, a.updated_at";

/// Written only by this module: anything else there reads as empty
/// settings rather than failing every listing of the key.
fn settings_of(text: Option<String>) -> AssistantSettings {
    text.and_then(|text| serde_json::from_str(&text).ok())
        .unwrap_or_default()
}

pub(crate) fn assistant_from_row(row: &impl Columns) -> Res<StoredAssistant> {
    Ok(StoredAssistant {
        id: row.req_text(0)?,
        version: row.req_int(1)?,
        settings: settings_of(row.text(2)?),
        created_at: row.req_int(3)?,
        updated_at: row.req_int(4)?,
    })
}

/// The columns [`version_from_row`] reads, over `assistant_versions`.
pub(crate) const VERSION_COLUMNS: &str = "version, settings, created_at";

pub(crate) fn version_from_row(row: &impl Columns) -> Res<StoredAssistantVersion> {
    Ok(StoredAssistantVersion {
        version: row.req_int(0)?,
        settings: settings_of(row.text(1)?),
        created_at: row.req_int(2)?,
    })
}

/// The assistant statements of a dialect (one statement each, no rule).
pub(crate) trait AssistantStatements {
    /// Makes `owner`'s assistant `id` at version 1, unless it has one
    /// (then nothing changes): whether it made it.
    fn insert_assistant(
        &mut self,
        owner: &str,
        id: &str,
        now: i64,
    ) -> impl Future<Output = Res<bool>> + Send;
    fn insert_assistant_version(
        &mut self,
        owner: &str,
        id: &str,
        version: i64,
        settings: &str,
        now: i64,
    ) -> impl Future<Output = Res<()>> + Send;
    /// Makes `version` the latest of `owner`'s assistant `id`, if it has
    /// that version: whether it did.
    fn set_assistant_latest(
        &mut self,
        owner: &str,
        id: &str,
        version: i64,
        now: i64,
    ) -> impl Future<Output = Res<bool>> + Send;
    /// `owner`'s assistant `id` at its latest version. `lock`: keep other
    /// writers off it until commit (PostgreSQL).
    fn assistant(
        &mut self,
        owner: &str,
        id: &str,
        lock: bool,
    ) -> impl Future<Output = Res<Option<StoredAssistant>>> + Send;
    /// `owner`'s newest `limit` assistants.
    fn assistants(
        &mut self,
        owner: &str,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<StoredAssistant>>> + Send;
    /// The newest `limit` versions of `owner`'s assistant `id`.
    fn assistant_versions(
        &mut self,
        owner: &str,
        id: &str,
        limit: usize,
    ) -> impl Future<Output = Res<Vec<StoredAssistantVersion>>> + Send;
    /// Deletes `owner`'s assistant `id` with its versions: whether there
    /// was one.
    fn delete_assistant(&mut self, owner: &str, id: &str)
    -> impl Future<Output = Res<bool>> + Send;
}

fn settings_text(settings: &AssistantSettings) -> String {
    serde_json::to_string(settings).unwrap_or_else(|_| "{}".to_string())
}

/// Makes `owner`'s assistant `id` with `settings` as its version 1; an id
/// the key has already is answered as it stands.
pub(crate) async fn create(
    tx: &mut (impl super::statements::JobStatements + AssistantStatements),
    owner: &str,
    id: &str,
    settings: &AssistantSettings,
) -> Res<AssistantCreated> {
    let now = tx.now().await?;
    let new = tx.insert_assistant(owner, id, now).await?;
    if new {
        tx.insert_assistant_version(owner, id, 1, &settings_text(settings), now)
            .await?;
    }
    let stored = tx.assistant(owner, id, false).await?.ok_or_else(|| {
        super::tx::Fail::Db(format!(
            "assistant {id:?} was not found in the write that made it"
        ))
    })?;
    Ok(if new {
        AssistantCreated::New(stored)
    } else {
        AssistantCreated::Existing(stored)
    })
}

/// A new version of `owner`'s assistant `id`, `patch` over its latest, made
/// the latest; none when the key has no such assistant.
pub(crate) async fn update(
    tx: &mut (impl super::statements::JobStatements + AssistantStatements),
    owner: &str,
    id: &str,
    patch: &AssistantPatch,
) -> Res<Option<StoredAssistant>> {
    let Some(latest) = tx.assistant(owner, id, true).await? else {
        return Ok(None);
    };
    let now = tx.now().await?;
    let newest = tx
        .assistant_versions(owner, id, 1)
        .await?
        .first()
        .map_or(latest.version, |v| v.version);
    let version = newest + 1;
    let settings = patch.applied_to(&latest.settings);
    tx.insert_assistant_version(owner, id, version, &settings_text(&settings), now)
        .await?;
    tx.set_assistant_latest(owner, id, version, now).await?;
    tx.assistant(owner, id, false).await
}

/// Makes `version` the latest of `owner`'s assistant `id`: the assistant
/// then, none when the key has no such assistant or it no such version.
pub(crate) async fn set_latest(
    tx: &mut (impl super::statements::JobStatements + AssistantStatements),
    owner: &str,
    id: &str,
    version: i64,
) -> Res<Option<StoredAssistant>> {
    let now = tx.now().await?;
    if !tx.set_assistant_latest(owner, id, version, now).await? {
        return Ok(None);
    }
    tx.assistant(owner, id, false).await
}
