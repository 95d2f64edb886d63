//! Tool benchmarks (`cargo bench --bench tools`), each against a direct call
//! of the same logic measured in the same run:
//! 1. the tool engine's overhead per call (cache miss, no guardrails, trace
//!    events to a null observer) vs calling the Tool directly;
//! 2. a plugin tool call's round trip (C ABI, JSON both ways, blocking pool)
//!    vs the same arithmetic as a Rust function.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use async_trait::async_trait;
use serde_json::{Value, json};
use structured_agents::events::{EventSink, NullObserver, RunContext};
use structured_agents::plugins::PluginRegistry;
use structured_agents::tools::ToolPolicy;
use structured_agents::tools::plugin::PluginTool;
use structured_agents::tools::{CallPlace, Tool, ToolContext, ToolEngine, ToolError, ToolOutput};
use structured_agents::types::{ToolCall, ToolSchema};
use tokio_util::sync::CancellationToken;

#[path = "support/plugin.rs"]
mod plugin;

struct Add(ToolSchema);

#[async_trait]
impl Tool for Add {
    fn schema(&self) -> &ToolSchema {
        &self.0
    }
    fn kind(&self) -> &'static str {
        "bench"
    }
    async fn invoke(&self, args: Value, _ctx: ToolContext<'_>) -> Result<ToolOutput, ToolError> {
        Ok(ToolOutput::Json(
            json!({"result": args["a"].as_f64().unwrap_or(0.0) + args["b"].as_f64().unwrap_or(0.0)}),
        ))
    }
}

fn schema() -> ToolSchema {
    ToolSchema {
        name: "add".into(),
        description: String::new(),
        parameters: json!({"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}}, "required": ["a", "b"]}),
    }
}

async fn per_call<F, Fut>(n: u32, mut f: F) -> Duration
where
    F: FnMut(u32) -> Fut,
    Fut: std::future::Future<Output = ()>,
{
    let start = Instant::now();
    for i in 0..n {
        f(i).await;
    }
    start.elapsed() / n
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let sink = EventSink::new(RunContext::default(), 1, Arc::new(NullObserver));
        let cancel = CancellationToken::new();
        let n = 50_000;

        // 1. engine overhead
        let direct = Add(schema());
        let mut engine = ToolEngine::new();
        engine.add(Arc::new(Add(schema())), ToolPolicy::default());
        let call = |i: u32| ToolCall {
            id: "c".into(),
            name: "add".into(),
            arguments: Value::Null,
            raw_arguments: Some(format!("{{\"a\": {i}, \"b\": 1}}")),
        };
        let direct_time = per_call(n, |i| {
            let c = call(i);
            let direct = &direct;
            let sink = &sink;
            async move {
                let args: Value =
                    serde_json::from_str(c.raw_arguments.as_deref().unwrap()).unwrap();
                let ctx = ToolContext {
                    call: &c,
                    place: CallPlace {
                        turn: 1,
                        ..CallPlace::default()
                    },
                    cancel: CancellationToken::new(),
                    deadline: Instant::now() + Duration::from_secs(5),
                    events: sink,
                };
                black_box(direct.invoke(args, ctx).await.unwrap().into_json_string());
            }
        })
        .await;
        let engine_time = per_call(n, |i| {
            let c = call(i);
            let (engine, sink, cancel) = (&engine, &sink, &cancel);
            async move {
                black_box(engine.execute(&c, 1, cancel, sink).await);
            }
        })
        .await;
        println!("tool engine, {n} calls (cache miss, no guardrails, trace events on)");
        println!("  direct Tool::invoke (parse + call + normalize)  {direct_time:?}/call");
        println!("  through the engine                              {engine_time:?}/call");
        println!(
            "  engine overhead                                 {:?}/call",
            engine_time.saturating_sub(direct_time)
        );

        // 2. plugin round trip
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(plugin::calculator(), dir.path().join("libcalc.so")).unwrap();
        let cache = tempfile::tempdir().unwrap();
        let (registry, errors) =
            PluginRegistry::load_dir(dir.path(), cache.path(), &Default::default());
        assert!(errors.is_empty(), "{errors:?}");
        let plugin = registry.get("calculator").unwrap().clone();
        let instance = Arc::new(plugin.instantiate(&Value::Null).unwrap());
        let tool = PluginTool::new(schema(), plugin.clone(), instance.clone(), "add".into());
        let m = 20_000;
        let rust_fn = |a: f64, b: f64| json!({"result": a + b});
        let start = Instant::now();
        for i in 0..m {
            black_box(rust_fn(black_box(i as f64), 1.0));
        }
        let fn_time = start.elapsed() / m;
        let start = Instant::now();
        for i in 0..m {
            black_box(
                plugin
                    .invoke(
                        &instance,
                        &json!({"name": "add", "arguments": {"a": i, "b": 1}}),
                    )
                    .unwrap(),
            );
        }
        let abi_time = start.elapsed() / m;
        let tool_time = per_call(m, |i| {
            let c = ToolCall::new("c", "add", json!({"a": i, "b": 1}));
            let (tool, sink) = (&tool, &sink);
            async move {
                let ctx = ToolContext {
                    call: &c,
                    place: CallPlace {
                        turn: 1,
                        ..CallPlace::default()
                    },
                    cancel: CancellationToken::new(),
                    deadline: Instant::now() + Duration::from_secs(5),
                    events: sink,
                };
                black_box(tool.invoke(json!({"a": i, "b": 1}), ctx).await.unwrap());
            }
        })
        .await;
        println!("plugin calls, {m} calls of calculator.add");
        println!("  direct Rust function                  {fn_time:?}/call");
        println!("  through the C ABI (JSON both ways)    {abi_time:?}/call");
        println!("  as a Tool (ABI + blocking pool hop)   {tool_time:?}/call");
    });
}
