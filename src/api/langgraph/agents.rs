//! The Agent Protocol's agents: `POST /agents/search`, `GET /agents/{id}`
//! and `GET /agents/{id}/schemas`. An agent is an assistant seen through
//! the protocol's narrower shape — the same loaded bundles the key may
//! read and its custom assistants (`assistants::matching`,
//! `assistants::resolve`), the same ids, the same schemas
//! (`graph::schemas_of`).

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
use super::super::error::ApiError;
use super::assistants::{self, Assistant, Filters, found, resolve};
use super::graph::schemas_of;
use super::listing::{self, page};

/// An agent: a loaded bundle as the Agent Protocol shows it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Agent {
    /// The assistant's id (LangGraph's UUID of the bundle's name; the
    /// name is taken too).
    pub agent_id: String,
    /// The bundle's name.
    pub name: String,
    /// The bundle's description (empty when it has none).
    pub description: String,
    /// The assistant's metadata: the bundle's version and digests.
    pub metadata: Map<String, Value>,
    pub capabilities: Capabilities,
}

/// What every agent supports of the protocol.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct Capabilities {
    /// `true`: input, output and state are `messages`.
    #[serde(rename = "ap.io.messages")]
    pub messages: bool,
    /// `true`: its runs stream.
    #[serde(rename = "ap.io.streaming")]
    pub streaming: bool,
}

impl From<Assistant> for Agent {
    fn from(assistant: Assistant) -> Self {
        Agent {
            agent_id: assistant.assistant_id,
            name: assistant.name,
            description: assistant.description,
            metadata: assistant.metadata,
            capabilities: Capabilities {
                messages: true,
                streaming: true,
            },
        }
    }
}

/// The body of `POST /agents/search`.
#[derive(Debug, Default, Deserialize, JsonSchema)]
#[schemars(rename = "AgentSearch")]
pub struct SearchRequest {
    /// Only bundles whose name holds this text (any case).
    #[serde(default)]
    pub name: Option<String>,
    /// Only agents whose metadata has each of these keys at exactly this
    /// value.
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    /// At most this many (1 to 1000; default 10).
    #[serde(default)]
    #[schemars(range(min = 1, max = 1000))]
    pub limit: Option<usize>,
    /// After skipping this many.
    #[serde(default)]
    pub offset: Option<usize>,
}

/// `POST /agents/search` in the API document.
pub(super) fn search_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("Search the agents: the loaded bundles the key may read, by name")
        .description(
            "The Agent Protocol's view of `POST /assistants/search`: `name` keeps bundles \
             whose name holds it (any case), `metadata` those whose metadata has each key at \
             its value. When more agents follow the page, the header `X-Pagination-Next` holds \
             the next offset.",
        )
        .response_with::<200, Json<Vec<Agent>>, _>(|r| r.description("The agents of the page"));
    answers(op, &[(422, "A field is out of range or unknown")])
}

/// `POST /agents/search`.
pub async fn search(
    State(state): State<AppState>,
    caller: Caller,
    JsonBody(request): JsonBody<SearchRequest>,
) -> Result<Response, ApiError> {
    let bounds = page(request.limit, request.offset)?;
    let filters = Filters {
        metadata: request.metadata,
        graph_id: None,
        name: request.name,
    };
    let mut found = assistants::matching(&state, &caller, &filters).await?;
    found.sort_by(|a, b| a.name.cmp(&b.name));
    let agents: Vec<Agent> = found.into_iter().map(Agent::from).collect();
    let (shown, next) = listing::paged(agents, bounds);
    Ok(listing::answer(shown, next, &[]))
}

/// `GET /agents/{agent_id}` in the API document.
pub(super) fn get_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("An agent, by its id or its bundle's name")
        .response_with::<200, Json<Agent>, _>(|r| r.description("The agent"));
    answers(
        op,
        &[(404, "No loaded bundle the key may read is named so")],
    )
}

/// `GET /agents/{agent_id}`.
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Agent>, ApiError> {
    let assistant = assistants::assistant_named(&state, &caller, &id).await?;
    Ok(Json(assistant.into()))
}

/// An agent's schemas, as the Agent Protocol names them.
#[derive(Debug, Serialize, JsonSchema)]
pub struct AgentSchema {
    pub agent_id: String,
    pub input_schema: Value,
    pub output_schema: Value,
    pub state_schema: Value,
    /// `configurable`'s values: the variables the prompts use.
    pub config_schema: Value,
}

/// `GET /agents/{agent_id}/schemas` in the API document.
pub(super) fn schemas_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("An agent's input, output, state and config schemas")
        .response_with::<200, Json<AgentSchema>, _>(|r| r.description("The schemas"));
    answers(
        op,
        &[(404, "No loaded bundle the key may read is named so")],
    )
}

/// `GET /agents/{agent_id}/schemas`.
pub async fn schemas(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<AgentSchema>, ApiError> {
    let target = resolve(&state, &caller, &id).await?;
    let snapshot = state.registry.snapshot();
    let (entry, loaded) = found(&snapshot, &caller, &target.bundle)?;
    let schemas = schemas_of(&entry.name, loaded);
    Ok(Json(AgentSchema {
        agent_id: target.assistant_id,
        input_schema: schemas.input_schema,
        output_schema: schemas.output_schema,
        state_schema: schemas.state_schema,
        config_schema: schemas.config_schema,
    }))
}
