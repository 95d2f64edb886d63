//! What an assistant's graph and schemas are for a bundle:
//! `GET /assistants/{id}/graph`, `…/schemas` and `…/subgraphs`. An agent
//! bundle is LangChain's agent graph (`model` ⇄ `tools`, the tools named
//! in the `tools` node); a workflow one node a stage, its transitions the
//! edges; a group chat one node. Its state, input and output are the
//! `messages` of its thread; its context and configurable values, the
//! variables its prompts use.

use std::collections::BTreeMap;

use aide::transform::TransformOperation;
use axum::Json;
use axum::extract::State;
use schemars::JsonSchema;
use serde::Serialize;
use serde_json::{Value, json};

use super::super::AppState;
use super::super::auth::Caller;
use super::super::body::Path;
use super::super::document::answers;
use super::super::error::ApiError;
use super::assistants::{found, resolve};
use crate::registry::LoadedBundle;

/// An assistant's graph, as LangGraph's server draws one.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Graph {
    pub nodes: Vec<Node>,
    pub edges: Vec<Edge>,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Node {
    pub id: String,
    /// `schema` (`__start__`, `__end__`) or `runnable`.
    #[serde(rename = "type")]
    pub kind: &'static str,
    /// The node's name, or what it runs (`tools`: the tool names).
    pub data: Value,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct Edge {
    pub source: String,
    pub target: String,
    /// Taken on a condition (the model's reply, a stage's event).
    pub conditional: bool,
}

const START: &str = "__start__";
const END: &str = "__end__";

fn schema_node(id: &str) -> Node {
    Node {
        id: id.into(),
        kind: "schema",
        data: json!(id),
    }
}

fn runnable(id: &str, data: Value) -> Node {
    Node {
        id: id.into(),
        kind: "runnable",
        data,
    }
}

fn edge(source: &str, target: &str, conditional: bool) -> Edge {
    Edge {
        source: source.into(),
        target: target.into(),
        conditional,
    }
}

/// The graph of `loaded`.
fn graph_of(loaded: &LoadedBundle) -> Graph {
    let raw = &loaded.bundle.raw;
    if let Some(workflow) = &raw.workflow {
        let mut nodes = vec![schema_node(START)];
        nodes.extend(
            workflow
                .stages
                .keys()
                .map(|stage| runnable(stage, json!({"name": stage}))),
        );
        nodes.push(schema_node(END));
        let mut edges = vec![edge(START, &workflow.start, false)];
        for (stage, next) in &workflow.transitions {
            let targets: BTreeMap<&str, ()> = next
                .values()
                .map(|target| match target.as_str() {
                    "finish" | "fatal" => (END, ()),
                    other => (other, ()),
                })
                .collect();
            let conditional = targets.len() > 1;
            edges.extend(
                targets
                    .keys()
                    .map(|target| edge(stage, target, conditional)),
            );
        }
        return Graph { nodes, edges };
    }
    if raw.group_chat.is_some() {
        return Graph {
            nodes: vec![
                schema_node(START),
                runnable("group_chat", json!({"name": "group_chat"})),
                schema_node(END),
            ],
            edges: vec![
                edge(START, "group_chat", false),
                edge("group_chat", END, false),
            ],
        };
    }
    let model = runnable("model", json!({"name": "model"}));
    let tools: Vec<&str> = loaded
        .tools
        .schemas()
        .iter()
        .map(|schema| schema.name.as_str())
        .collect();
    if tools.is_empty() {
        return Graph {
            nodes: vec![schema_node(START), model, schema_node(END)],
            edges: vec![edge(START, "model", false), edge("model", END, false)],
        };
    }
    Graph {
        nodes: vec![
            schema_node(START),
            model,
            runnable("tools", json!({"name": "tools", "tools": tools})),
            schema_node(END),
        ],
        edges: vec![
            edge(START, "model", false),
            edge("model", "tools", true),
            edge("model", END, true),
            edge("tools", "model", false),
        ],
    }
}

/// `GET /assistants/{assistant_id}/graph` in the API document.
pub(super) fn graph_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("An assistant's graph: its bundle's model and tools, or its workflow's stages")
        .response_with::<200, Json<Graph>, _>(|r| r.description("The graph"));
    answers(
        op,
        &[(404, "No loaded bundle the key may read is named so")],
    )
}

/// `GET /assistants/{assistant_id}/graph` (`xray` is taken and changes
/// nothing: no node of a bundle's graph is a graph; an agent tool's bundle
/// is called from `tools`, and its run streams as a subgraph).
pub async fn graph(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<Graph>, ApiError> {
    let bundle = resolve(&state, &caller, &id).await?.bundle;
    let snapshot = state.registry.snapshot();
    let (_, loaded) = found(&snapshot, &caller, &bundle)?;
    Ok(Json(graph_of(loaded)))
}

/// An assistant's schemas, as LangGraph's server gives a graph's.
#[derive(Debug, Serialize, JsonSchema)]
pub struct GraphSchema {
    pub graph_id: String,
    pub input_schema: Value,
    pub output_schema: Value,
    pub state_schema: Value,
    /// `configurable`'s values: the variables the prompts use.
    pub config_schema: Value,
    /// The context's values: the same variables.
    pub context_schema: Value,
}

/// The `messages` of a thread, as every assistant's state, input and
/// output.
fn messages_schema(title: &str) -> Value {
    json!({
        "title": title,
        "type": "object",
        "properties": {
            "messages": {
                "type": "array",
                "items": {
                    "type": "object",
                    "properties": {
                        "type": {"type": "string", "enum": ["human", "ai", "system", "tool"]},
                        "content": {"anyOf": [
                            {"type": "string"},
                            {"type": "array", "items": {"type": "object"}}
                        ]},
                        "id": {"type": "string"},
                        "name": {"type": "string"},
                        "tool_call_id": {"type": "string"},
                        "tool_calls": {"type": "array", "items": {"type": "object"}}
                    },
                    "required": ["content"]
                }
            }
        },
        "required": ["messages"]
    })
}

pub(super) fn schemas_of(name: &str, loaded: &LoadedBundle) -> GraphSchema {
    let variables: serde_json::Map<String, Value> = loaded
        .bundle
        .prompts
        .variables()
        .into_iter()
        .map(|variable| (variable, json!({"type": "string"})))
        .collect();
    let values = json!({"title": "Context", "type": "object", "properties": variables});
    GraphSchema {
        graph_id: name.to_string(),
        input_schema: messages_schema("Input"),
        output_schema: messages_schema("Output"),
        state_schema: messages_schema("State"),
        config_schema: json!({"title": "Configurable", "type": "object", "properties": values["properties"]}),
        context_schema: values,
    }
}

/// `GET /assistants/{assistant_id}/schemas` in the API document.
pub(super) fn schemas_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("An assistant's input, output, state, config and context schemas")
        .response_with::<200, Json<GraphSchema>, _>(|r| r.description("The schemas"));
    answers(
        op,
        &[(404, "No loaded bundle the key may read is named so")],
    )
}

/// `GET /assistants/{assistant_id}/schemas`.
pub async fn schemas(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<GraphSchema>, ApiError> {
    let bundle = resolve(&state, &caller, &id).await?.bundle;
    let snapshot = state.registry.snapshot();
    let (entry, loaded) = found(&snapshot, &caller, &bundle)?;
    Ok(Json(schemas_of(&entry.name, loaded)))
}

/// `GET /assistants/{assistant_id}/subgraphs` in the API document.
pub(super) fn subgraphs_doc(op: TransformOperation<'_>) -> TransformOperation<'_> {
    let op = op
        .summary("An assistant's subgraphs: none (no node of a bundle's graph is a graph)")
        .response_with::<200, Json<BTreeMap<String, GraphSchema>>, _>(|r| {
            r.description("No subgraphs: `{}`")
        });
    answers(
        op,
        &[(404, "No loaded bundle the key may read is named so")],
    )
}

/// `GET /assistants/{assistant_id}/subgraphs`: `{}` for a bundle the key
/// may read.
pub async fn subgraphs(
    State(state): State<AppState>,
    caller: Caller,
    Path(id): Path<String>,
) -> Result<Json<BTreeMap<String, GraphSchema>>, ApiError> {
    resolve(&state, &caller, &id).await?;
    Ok(Json(BTreeMap::new()))
}
