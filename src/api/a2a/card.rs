//! Agent cards: `/.well-known/agent-card.json` describes the daemon (one
//! skill per bundle, its JSON-RPC interface at `/a2a`, where a message names
//! its bundle in `metadata.bundle`; also served beside that interface, at
//! `/a2a/.well-known/agent-card.json`), and
//! `/a2a/{bundle}/.well-known/agent-card.json` describes one bundle as an
//! agent of its own (its interface at `/a2a/{bundle}`). A card shows only
//! the bundles the presented key may use; without a key, on a daemon that
//! has keys, the daemon's card shows how to authenticate and, in place of
//! the bundles, one skill saying how to see them; a bundle's card is
//! refused (401).

use std::collections::HashMap;

use a2a::{
    AgentCapabilities, AgentCard, AgentInterface, AgentSkill, HttpAuthSecurityScheme,
    SecurityScheme, TRANSPORT_PROTOCOL_JSONRPC,
};
use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::http::header::HOST;

use super::super::AppState;
use super::super::auth::presented_key;
use super::super::body::Path;
use super::super::document::{self, answers};
use super::super::error::{ApiError, ErrorCode};
use crate::access::Principal;
use crate::access::policy::{self, Action, Resource};
use crate::registry::LoadedBundle;

/// The security scheme's name in the cards (and in the API document).
const BEARER: &str = document::BEARER;

/// An agent card as it is served: A2A's `AgentCard`.
#[derive(serde::Serialize)]
#[serde(transparent)]
pub struct Card(pub AgentCard);

/// The A2A 1.0 `AgentCard` as the daemon writes it (the `a2a-lf` types
/// carry no schema): a test holds served cards to it
/// (`tests/api_document.rs`).
impl schemars::JsonSchema for Card {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "A2aAgentCard".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        let strings = serde_json::json!({"type": "array", "items": {"type": "string"}});
        schemars::json_schema!({
            "description": "An A2A 1.0 AgentCard (see the A2A specification): the agent, its JSON-RPC interface, its skills (one per bundle) and how to authenticate.",
            "type": "object",
            "required": ["name", "description", "version", "supportedInterfaces", "capabilities",
                         "defaultInputModes", "defaultOutputModes", "skills"],
            "properties": {
                "name": {"type": "string"},
                "description": {"type": "string"},
                "version": {"type": "string"},
                "supportedInterfaces": {"type": "array", "items": {
                    "type": "object",
                    "required": ["url", "protocolBinding"],
                    "properties": {
                        "url": {"type": "string"},
                        "protocolBinding": {"type": "string", "enum": ["JSONRPC"]},
                        "protocolVersion": {"type": "string"},
                    },
                }},
                "capabilities": {"type": "object", "properties": {
                    "streaming": {"type": "boolean"},
                    "pushNotifications": {"type": "boolean"},
                    "extendedAgentCard": {"type": "boolean"},
                }},
                "defaultInputModes": strings,
                "defaultOutputModes": strings,
                "skills": {"type": "array", "items": {
                    "type": "object",
                    "required": ["id", "name", "description", "tags"],
                    "properties": {
                        "id": {"type": "string"},
                        "name": {"type": "string"},
                        "description": {"type": "string"},
                        "tags": strings,
                    },
                }},
                "securitySchemes": {"type": "object"},
                "securityRequirements": {"type": "array"},
            },
        })
    }
}

pub(super) fn daemon_card_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    op.summary("The daemon's A2A 1.0 agent card")
        .description(
            "One skill per bundle the presented key may use (without a key on a daemon with keys, \
             or when no such bundle is loaded, one skill `bundles` saying how to see them); its \
             JSON-RPC interface is /a2a.",
        )
        // A key is optional: it decides which skills the card shows.
        .security_requirement(BEARER)
        .security_requirement_multi([])
        .response_with::<200, Json<Card>, _>(|r| r.description("An A2A AgentCard"))
}

/// `GET /.well-known/agent-card.json`.
pub async fn daemon_card(State(state): State<AppState>, headers: HeaderMap) -> Json<Card> {
    let viewer = viewer(&state, &headers);
    Json(Card(for_daemon(
        &state,
        &base_url(&headers),
        viewer.as_deref(),
    )))
}

pub(super) fn interface_card_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    daemon_card_doc(op).summary(
        "The daemon's A2A 1.0 agent card, beside its interface /a2a (as a bundle's card is beside /a2a/{bundle})",
    )
}

pub(super) fn bundle_card_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("One bundle's A2A 1.0 agent card")
        .description("The bundle as an agent of its own; its JSON-RPC interface is /a2a/{bundle}.")
        .security_requirement(BEARER)
        .response_with::<200, Json<Card>, _>(|r| r.description("An A2A AgentCard"));
    answers(
        op,
        &[(
            401,
            "No API key, or one the daemon does not know (on a daemon with keys)",
        )],
    )
}

// This doc function's tail and the handler's extractors are alike in shape
// to other routes' (`job_list.rs`), as axum and aide write every route.
/// `GET /a2a/{bundle}/.well-known/agent-card.json`: a 401 without a key
/// the daemon knows, a 404 for a bundle the key may not use (as for one
/// that is not loaded).
pub async fn bundle_card(
    State(state): State<AppState>,
    headers: HeaderMap,
    Path(bundle): Path<String>,
) -> Result<Json<Card>, ApiError> {
    let keys = state.registry.snapshot().keys.clone();
    let viewer = keys
        .authenticate(presented_key(&headers))
        .map_err(|e| ApiError::new(ErrorCode::Unauthorized, e.to_string()))?;
    for_bundle(&state, &base_url(&headers), &viewer, &bundle)
        .map(|card| Json(Card(card)))
        .ok_or_else(|| {
            ApiError::new(
                ErrorCode::NotFound,
                format!(
                    "no agent card for bundle {bundle:?}: it is not loaded, or API key {:?} may not use it; GET /.well-known/agent-card.json lists the bundles as skills",
                    viewer.name
                ),
            )
        })
}

/// The key of the request, if it presents one the daemon knows (every
/// request does on a daemon without keys).
fn viewer(state: &AppState, headers: &HeaderMap) -> Option<std::sync::Arc<Principal>> {
    let keys = state.registry.snapshot().keys.clone();
    keys.authenticate(presented_key(headers)).ok()
}

/// Where the client reached the daemon (`http://<Host>`): the front door
/// has already checked the Host header against the allowed names.
pub fn base_url(headers: &HeaderMap) -> String {
    let host = headers
        .get(HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("127.0.0.1");
    format!("http://{host}")
}

/// The daemon's card for `viewer` (none: only how to authenticate).
pub fn for_daemon(state: &AppState, base: &str, viewer: Option<&Principal>) -> AgentCard {
    let snapshot = state.registry.snapshot();
    let mut skills: Vec<AgentSkill> = snapshot
        .loaded()
        .filter(|b| viewer.is_some_and(|v| readable(v, b.name())))
        .map(|b| skill(b))
        .collect();
    if skills.is_empty() {
        skills.push(no_bundle_skill(viewer.is_some()));
    }
    card(
        state,
        "structured-agents".into(),
        "The bundles of a structured-agents daemon as A2A agents: one skill per bundle. Name the bundle in the message's `metadata.bundle`, or talk to one bundle at its own card's interface (/a2a/<bundle>).".into(),
        env!("CARGO_PKG_VERSION").into(),
        format!("{base}/a2a"),
        skills,
    )
}

/// Bundle `name`'s card, if it is loaded and `viewer` may use it.
pub fn for_bundle(
    state: &AppState,
    base: &str,
    viewer: &Principal,
    name: &str,
) -> Option<AgentCard> {
    let snapshot = state.registry.snapshot();
    let loaded = snapshot.bundle(name).filter(|_| readable(viewer, name))?;
    Some(card(
        state,
        loaded.name().to_string(),
        description(loaded),
        loaded.bundle.version().to_string(),
        format!("{base}/a2a/{name}"),
        vec![skill(loaded)],
    ))
}

fn card(
    state: &AppState,
    name: String,
    description: String,
    version: String,
    url: String,
    skills: Vec<AgentSkill>,
) -> AgentCard {
    let open = state.registry.snapshot().keys.is_open();
    let security_schemes = (!open).then(|| {
        HashMap::from([(
            BEARER.to_string(),
            SecurityScheme::HttpAuth(HttpAuthSecurityScheme {
                scheme: "Bearer".into(),
                description: Some(
                    "An API key of the daemon (`structured-agents keys new`), as `Authorization: Bearer <key>`".into(),
                ),
                bearer_format: Some("API key".into()),
            }),
        )])
    });
    AgentCard {
        name,
        description,
        version,
        supported_interfaces: vec![AgentInterface::new(url, TRANSPORT_PROTOCOL_JSONRPC)],
        capabilities: AgentCapabilities {
            streaming: Some(true),
            // Each state change of a task, to its configs (`push`).
            push_notifications: Some(true),
            extensions: None,
            // With keys, the card a client reads without one lists no
            // skill: `GetExtendedAgentCard` gives the key's.
            extended_agent_card: Some(!open),
        },
        default_input_modes: vec!["text/plain".into(), "application/json".into()],
        default_output_modes: vec!["text/plain".into()],
        skills,
        provider: None,
        documentation_url: None,
        icon_url: None,
        security_requirements: security_schemes
            .as_ref()
            .map(|_| vec![HashMap::from([(BEARER.to_string(), Vec::new())])]),
        security_schemes,
        signatures: None,
    }
}

/// The one skill of a card that shows no bundle: A2A 1.0 requires a
/// card's `skills` to hold at least one ("Arrays marked as required MUST
/// contain at least one element", §5.7), and a card read without a key
/// must not name the bundles. It says how to see them.
fn no_bundle_skill(with_key: bool) -> AgentSkill {
    let description = if with_key {
        "No bundle that this caller may use is loaded: each one becomes a skill of this card once it is."
    } else {
        "This daemon's bundles, one skill each, are shown to an API key: read this card with `Authorization: Bearer <key>`, or call GetExtendedAgentCard with it."
    };
    AgentSkill {
        id: "bundles".into(),
        name: "bundles".into(),
        description: description.into(),
        tags: vec!["structured-agents".into()],
        examples: None,
        input_modes: None,
        output_modes: None,
        security_requirements: None,
    }
}

/// A bundle as a skill: its description, its tools as tags (and named in
/// the description, with theirs).
fn skill(loaded: &LoadedBundle) -> AgentSkill {
    AgentSkill {
        id: loaded.name().to_string(),
        name: loaded.name().to_string(),
        description: description(loaded),
        tags: loaded
            .tools
            .schemas()
            .iter()
            .map(|t| t.name.clone())
            .collect(),
        examples: None,
        input_modes: None,
        output_modes: None,
        security_requirements: None,
    }
}

fn description(loaded: &LoadedBundle) -> String {
    let own = loaded.bundle.raw.description.trim();
    let mut text = if own.is_empty() {
        format!("Bundle {}.", loaded.name())
    } else {
        own.to_string()
    };
    let tools: Vec<String> = loaded
        .tools
        .schemas()
        .iter()
        .map(|t| match t.description.trim() {
            "" => t.name.clone(),
            d => format!("{} ({d})", t.name),
        })
        .collect();
    if !tools.is_empty() {
        text.push_str(&format!(" Tools: {}.", tools.join(", ")));
    }
    text
}

/// Whether `viewer` may see bundle `name` on a card: a skill it may call
/// (`submit_job`) or read (`read_bundle`).
fn readable(viewer: &Principal, name: &str) -> bool {
    let bundle = Resource::bundle(name);
    [Action::SubmitJob, Action::ReadBundle]
        .into_iter()
        .any(|action| policy::authorize(viewer, action, &bundle).is_ok())
}
