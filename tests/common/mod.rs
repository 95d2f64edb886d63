//! Shared test support: in-process tools, a recording observer, scripts.
#![allow(dead_code)]

pub mod daemon;
pub mod otlp;
pub mod postgres;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use structured_agents::events::{EventEnvelope, Observer, ObserverError};
use structured_agents::mock::{MockServer, Script};
use structured_agents::tools::{Tool, ToolContext, ToolError, ToolOutput};
use structured_agents::types::ToolSchema;

/// Records every event it receives.
#[derive(Default)]
pub struct Recorder(pub Mutex<Vec<EventEnvelope>>);

impl Recorder {
    pub fn events(&self) -> Vec<EventEnvelope> {
        self.0.lock().unwrap().clone()
    }

    pub fn kinds(&self) -> Vec<String> {
        self.events()
            .iter()
            .map(|e| e.event.kind().to_string())
            .collect()
    }
}

#[async_trait]
impl Observer for Recorder {
    async fn on_event(&self, event: &EventEnvelope) -> Result<(), ObserverError> {
        self.0.lock().unwrap().push(event.clone());
        Ok(())
    }
}

pub fn schema(name: &str) -> ToolSchema {
    ToolSchema {
        name: name.into(),
        description: format!("the {name} tool"),
        parameters: json!({"type": "object"}),
    }
}

pub enum Behaviour {
    /// Sleep, then return the arguments back as `{"echo": args}`.
    Echo(Duration),
    Fail(String),
    Panic,
    /// Sleep while counted in the tracker's in-flight count.
    Tracked(Arc<Tracker>, Duration),
}

/// Observes how many calls run at the same time.
#[derive(Default)]
pub struct Tracker {
    in_flight: std::sync::atomic::AtomicUsize,
    pub max_in_flight: std::sync::atomic::AtomicUsize,
}

/// An in-process tool with scripted behaviour.
pub struct TestTool {
    pub schema: ToolSchema,
    pub behaviour: Behaviour,
}

impl TestTool {
    pub fn arc(name: &str, behaviour: Behaviour) -> Arc<dyn Tool> {
        Arc::new(Self {
            schema: schema(name),
            behaviour,
        })
    }
}

#[async_trait]
impl Tool for TestTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn kind(&self) -> &'static str {
        "test"
    }

    async fn invoke(
        &self,
        arguments: Value,
        _ctx: ToolContext<'_>,
    ) -> Result<ToolOutput, ToolError> {
        match &self.behaviour {
            Behaviour::Echo(delay) => {
                tokio::time::sleep(*delay).await;
                Ok(ToolOutput::Json(json!({"echo": arguments})))
            }
            Behaviour::Fail(msg) => Err(ToolError::Failed(msg.clone())),
            Behaviour::Panic => panic!("tool panicked on purpose"),
            Behaviour::Tracked(tracker, delay) => {
                use std::sync::atomic::Ordering::SeqCst;
                let now = tracker.in_flight.fetch_add(1, SeqCst) + 1;
                tracker.max_in_flight.fetch_max(now, SeqCst);
                tokio::time::sleep(*delay).await;
                tracker.in_flight.fetch_sub(1, SeqCst);
                Ok(ToolOutput::Null)
            }
        }
    }
}

pub fn script(yaml: &str) -> Script {
    Script::parse(yaml, "test script").unwrap()
}

/// A mock model server playing the script `yaml`.
pub async fn mock_server(yaml: &str) -> MockServer {
    MockServer::start(script(yaml)).await.unwrap()
}

/// A path inside the repository (relative to its root).
pub fn repo(path: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)
}

/// The Python with the peers the tests use (`mcp`, `openai`, `xgrammar`):
/// `$SA_PYTHON`, else `.venv` from `scripts/python-env`; fails loudly when missing.
pub fn python() -> std::path::PathBuf {
    if let Ok(p) = std::env::var("SA_PYTHON") {
        return p.into();
    }
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python3");
    assert!(
        p.exists(),
        "the Python peers are missing: run ./scripts/python-env (it installs mcp, openai and xgrammar into .venv)"
    );
    p
}
