//! Tests of `telemetry::run_metrics`.

use super::*;

fn result(bundle: &str, tool: &str, error_type: Option<&str>) -> EventEnvelope {
    EventEnvelope {
        run_id: "r".into(),
        bundle: bundle.into(),
        bundle_version: "1".into(),
        parent: None,
        seq: 1,
        timestamp: String::new(),
        event: Event::ToolResult {
            turn: 1,
            tool_name: tool.into(),
            call_id: "c".into(),
            is_error: error_type.is_some(),
            duration_ms: 1,
            output_preview: String::new(),
            error_type: error_type.map(str::to_string),
        },
    }
}

/// The `tool` label values of the tool-call counter.
fn tool_labels(metrics: &Metrics) -> Vec<String> {
    let mut out: Vec<String> = metrics
        .render()
        .lines()
        .filter(|l| l.starts_with("structured_agents_tool_calls_total{"))
        .filter_map(|l| {
            let start = l.find("tool=\"")? + 6;
            let end = start + l[start..].find('"')?;
            Some(l[start..end].to_string())
        })
        .collect();
    out.sort();
    out.dedup();
    out
}

#[tokio::test]
async fn invented_tool_names_never_become_label_values() {
    let metrics = Metrics::new().unwrap();
    let observer = MetricsObserver::new(metrics.clone(), "openai");
    observer.on_event(&result("b", "add", None)).await.unwrap();
    for invented in ["rm -rf /", "tool_0001", "tool_0002"] {
        observer
            .on_event(&result("b", invented, Some("unknown_tool")))
            .await
            .unwrap();
    }
    assert_eq!(tool_labels(&metrics), ["add", UNKNOWN_TOOL_LABEL]);
}

#[tokio::test]
async fn with_declared_tools_only_declared_names_are_labels() {
    let metrics = Metrics::new().unwrap();
    let declared: DeclaredTools = [
        (
            "b".to_string(),
            std::collections::HashSet::from(["add".to_string()]),
        ),
        (
            "other".to_string(),
            std::collections::HashSet::from(["search".to_string()]),
        ),
    ]
    .into();
    let observer =
        MetricsObserver::new(metrics.clone(), "openai").with_declared_tools(Arc::new(declared));
    observer.on_event(&result("b", "add", None)).await.unwrap();
    // Whatever the engine said, an undeclared name is not a label.
    observer
        .on_event(&result("b", "made_up", Some("tool_error")))
        .await
        .unwrap();
    // A nested run of another bundle keeps its own declared names…
    observer
        .on_event(&result("other", "search", None))
        .await
        .unwrap();
    // …and a name the model invented there is not a label either.
    observer
        .on_event(&result("other", "invented_in_a_nested_run", None))
        .await
        .unwrap();
    // Nor is anything of a bundle that is not loaded.
    observer
        .on_event(&result("gone", "search", None))
        .await
        .unwrap();
    assert_eq!(tool_labels(&metrics), ["add", "search", UNKNOWN_TOOL_LABEL]);
}
