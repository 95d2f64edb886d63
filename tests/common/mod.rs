//! Shared test support: in-process tools, a recording observer, scripts.
#![allow(dead_code)]

pub mod daemon;
pub mod fake_agent;
pub mod gated;
pub mod langgraph;
pub mod otlp;
pub mod peer;
pub mod postgres;
pub mod routes;
pub mod sample_plugins;
pub mod schemathesis;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};
use structured_agents::events::{Event, EventEnvelope, Observer, ObserverError};
use structured_agents::mock::{MockServer, Script};
use structured_agents::tools::{Tool, ToolContext, ToolError, ToolOutput};
use structured_agents::types::ToolSchema;

/// Records every event it receives, and wakes those waiting for one.
#[derive(Default)]
pub struct Recorder(pub Mutex<Vec<EventEnvelope>>, tokio::sync::Notify);

impl Recorder {
    /// Waits until an event `seen` accepts has been recorded: a test (or a
    /// tool) orders itself after an event instead of guessing how long it
    /// takes.
    pub async fn recorded(&self, seen: impl Fn(&Event) -> bool) {
        loop {
            // Armed before looking, so an event recorded in between still
            // wakes us.
            let next = self.1.notified();
            tokio::pin!(next);
            next.as_mut().enable();
            if self.0.lock().unwrap().iter().any(|e| seen(&e.event)) {
                return;
            }
            next.await;
        }
    }

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
        self.1.notify_waiters();
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
    /// Wait until the recorder holds another call's `ToolResult`, then sleep
    /// and echo: that other call provably ends first, and this one never
    /// ends on its own without one.
    EchoAfterOther(Arc<Recorder>, Duration),
    Fail(String),
    Panic,
    /// Sleep while counted in the tracker's in-flight count.
    Tracked(Arc<Tracker>, Duration),
}

/// Observes how many calls run at the same time. The first two calls wait
/// for each other (for a minute at most) before they sleep, so two of them
/// are provably in flight together however the machine schedules them.
pub struct Tracker {
    in_flight: std::sync::atomic::AtomicUsize,
    pub max_in_flight: std::sync::atomic::AtomicUsize,
    started: std::sync::atomic::AtomicUsize,
    pair: tokio::sync::Barrier,
}

impl Default for Tracker {
    fn default() -> Self {
        Self {
            in_flight: Default::default(),
            max_in_flight: Default::default(),
            started: Default::default(),
            pair: tokio::sync::Barrier::new(2),
        }
    }
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
        ctx: ToolContext<'_>,
    ) -> Result<ToolOutput, ToolError> {
        match &self.behaviour {
            Behaviour::Echo(delay) => {
                tokio::time::sleep(*delay).await;
                Ok(ToolOutput::Json(json!({"echo": arguments})))
            }
            Behaviour::EchoAfterOther(recorder, delay) => {
                recorder
                    .recorded(|e| {
                        matches!(e, Event::ToolResult { call_id, .. } if *call_id != ctx.call.id)
                    })
                    .await;
                tokio::time::sleep(*delay).await;
                Ok(ToolOutput::Json(json!({"echo": arguments})))
            }
            Behaviour::Fail(msg) => Err(ToolError::Failed(msg.clone())),
            Behaviour::Panic => panic!("tool panicked on purpose"),
            Behaviour::Tracked(tracker, delay) => {
                use std::sync::atomic::Ordering::SeqCst;
                let now = tracker.in_flight.fetch_add(1, SeqCst) + 1;
                tracker.max_in_flight.fetch_max(now, SeqCst);
                if tracker.started.fetch_add(1, SeqCst) < 2 {
                    tokio::time::timeout(Duration::from_secs(60), tracker.pair.wait())
                        .await
                        .expect("the first two calls never ran together");
                }
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
    venv_python("SA_PYTHON", ".venv", "ci/requirements.txt")
}

/// The Python with the current majors of the client SDKs (`mcp`, `openai`;
/// ci/requirements-current.txt): `$SA_PYTHON_CURRENT`, else `.venv-current`
/// from `scripts/python-env`; fails loudly when missing.
pub fn python_current() -> std::path::PathBuf {
    venv_python(
        "SA_PYTHON_CURRENT",
        ".venv-current",
        "ci/requirements-current.txt",
    )
}

/// The Python of the vendored A2A TCK (ci/requirements-tck.txt):
/// `$SA_PYTHON_TCK`, else `.venv-tck` from `scripts/python-env`; fails
/// loudly when missing.
pub fn python_tck() -> std::path::PathBuf {
    venv_python("SA_PYTHON_TCK", ".venv-tck", "ci/requirements-tck.txt")
}

/// The Python with LangGraph's SDK (ci/requirements-langgraph.txt):
/// `$SA_PYTHON_LANGGRAPH`, else `.venv-langgraph` from `scripts/python-env`;
/// fails loudly when missing.
pub fn python_langgraph() -> std::path::PathBuf {
    venv_python(
        "SA_PYTHON_LANGGRAPH",
        ".venv-langgraph",
        "ci/requirements-langgraph.txt",
    )
}

fn venv_python(variable: &str, venv: &str, requirements: &str) -> std::path::PathBuf {
    if let Ok(p) = std::env::var(variable) {
        return p.into();
    }
    let p = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join(venv)
        .join("bin/python3");
    assert!(
        p.exists(),
        "the Python peers are missing: run ./scripts/python-env (it installs {requirements} into {venv}), or set {variable}"
    );
    p
}
