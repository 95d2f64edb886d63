//! Property tests: for each plugin, random tool schemas and argument values
//! written as the model would write them parse back unchanged, with the
//! text around the calls kept as content.

#![allow(clippy::unwrap_used, clippy::expect_used)] // tests: a panic is the failure report

#[path = "support/model_gen.rs"]
mod model_gen;

use proptest::prelude::*;
use structured_agents::model::{
    FunctionGemmaPlugin, ModelPlugin, QwenCallStyle, QwenOptions, QwenPlugin,
};
use structured_agents::types::{Message, ToolCall, ToolSchema};

fn plugins() -> Vec<Box<dyn ModelPlugin>> {
    vec![
        Box::new(QwenPlugin::new(QwenOptions {
            call_style: QwenCallStyle::Hermes,
            ..Default::default()
        })),
        Box::new(QwenPlugin::new(QwenOptions {
            call_style: QwenCallStyle::Xml,
            ..Default::default()
        })),
        Box::new(FunctionGemmaPlugin::default()),
    ]
}

fn round_trip(
    plugin: &dyn ModelPlugin,
    tools: &[ToolSchema],
    calls: &[ToolCall],
    before: &str,
    after: &str,
) {
    let rendered: Vec<String> = calls
        .iter()
        .map(|c| plugin.render_call(c).expect("renderable"))
        .collect();
    let text = format!("{before}{}{after}", rendered.join("\n"));
    let parsed = plugin.parse_reply(&Message::assistant(Some(text.clone()), vec![]), tools);
    assert_eq!(
        parsed.calls.len(),
        calls.len(),
        "{}: {text:?} -> {parsed:?}",
        plugin.name()
    );
    for (want, got) in calls.iter().zip(&parsed.calls) {
        assert_eq!(got.error, None, "{}: {text:?}", plugin.name());
        assert_eq!(got.call.name, want.name);
        assert_eq!(
            got.call.arguments,
            want.arguments,
            "{}: {text:?}",
            plugin.name()
        );
        assert!(
            got.call.id.len() >= "call_".len() + 24,
            "id too short: {}",
            got.call.id
        );
    }
    let outside = format!(
        "{before}{}{after}",
        "\n".repeat(calls.len().saturating_sub(1))
    );
    let outside = outside.trim();
    assert_eq!(
        parsed.content.as_deref(),
        (!outside.is_empty()).then_some(outside),
        "{}: {text:?}",
        plugin.name()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn every_plugin_reads_back_what_it_writes(
        pairs in proptest::collection::vec(model_gen::tool_and_call(), 1..4),
        before in "[a-zA-Z .,!?\n]{0,20}",
        after in "[a-zA-Z .,!?\n]{0,20}",
    ) {
        let tools: Vec<ToolSchema> = pairs.iter().map(|(t, _)| t.clone()).collect();
        let calls: Vec<ToolCall> = pairs.iter().map(|(_, c)| c.clone()).collect();
        for plugin in plugins() {
            round_trip(plugin.as_ref(), &tools, &calls, &before, &after);
        }
    }
}
