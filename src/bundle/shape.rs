//! How a bundle's model settings become what each turn's request says about
//! tools: `tool_choice` and the grammar keys for the endpoint's server family.
//! Built once at load from the bundle's own tool schemas (so `validate` and
//! `grammar` see it) and again at bind from the bound engine's schemas, which
//! include the tools MCP servers announce.

use std::collections::BTreeMap;

use crate::kernel::TurnShape;
use crate::model::{GrammarError, GrammarMode, ResolvedModel, ServerKind, ToolChoice, WireKey};
use crate::types::ToolSchema;

use super::schema::ModelSection;

/// The shapes of a bundle's requests: one for every turn, and overrides.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestShapes {
    pub default: TurnShape,
    pub turns: BTreeMap<u32, TurnShape>,
}

/// Where grammars of a bundle go: its server family and the wire that follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    pub server: ServerKind,
    pub wire: WireKey,
}

/// A problem at a key path of `bundle.yaml`.
pub(super) type Problem = (String, String);

/// Checks that the grammar mode the bundle asks for (or its model's default)
/// can be built by the plugin and carried to this server; names the bundle,
/// the endpoint and the mode.
fn check_mode(
    bundle: &str,
    section: &ModelSection,
    model: &ResolvedModel,
    target: Target,
) -> Vec<Problem> {
    let explicit = section.grammar.as_ref().and_then(|g| g.mode);
    let (key, mode) = match (explicit, model.default_grammar) {
        (Some(mode), _) => ("model.grammar.mode", mode),
        (None, Some(mode)) => ("model.plugin", mode),
        (None, None) => return Vec::new(),
    };
    if !model.plugin.grammar_modes().contains(&mode) {
        return vec![(key.into(), model.plugin.unsupported(mode).to_string())];
    }
    if target.wire.carries(mode) {
        return Vec::new();
    }
    let carried: Vec<&str> = target.wire.modes().iter().map(|m| m.as_str()).collect();
    let origin = if explicit.is_some() {
        String::new()
    } else {
        format!(" (the default of model `{}`)", model.name)
    };
    vec![(
        key.into(),
        format!(
            "bundle `{bundle}`: grammar mode `{}`{origin} cannot be sent to endpoint `{}` (server `{}`, wire `{}`, which carries: {}); choose `model.grammar.mode` from those, or set `wire` in the model config",
            mode.as_str(),
            section.endpoint,
            target.server.as_str(),
            target.wire.as_str(),
            carried.join(", "),
        ),
    )]
}

/// The request shapes for `tools`, once [`check_mode`] found the mode
/// fits `target`. `strict` is false at load when some tools are still
/// unknown (MCP servers are asked at bind): then a named tool that is
/// missing, or a grammar that needs tools, is left for bind to judge.
pub(super) fn for_target(
    bundle: &str,
    section: &ModelSection,
    model: &ResolvedModel,
    target: Target,
    tools: &[ToolSchema],
    strict: bool,
) -> Result<RequestShapes, Vec<Problem>> {
    let problems = check_mode(bundle, section, model, target);
    if !problems.is_empty() {
        return Err(problems);
    }
    let mode: Option<GrammarMode> = section.grammar.as_ref().and_then(|g| g.mode);
    let parallel = section
        .grammar
        .as_ref()
        .is_none_or(|g| g.allow_parallel_calls);
    let mut problems = Vec::new();
    let mut shape = |key: String, choice: &ToolChoice| -> Option<TurnShape> {
        if let ToolChoice::Tool(name) = choice
            && !tools.iter().any(|t| &t.name == name)
        {
            if strict {
                let names: Vec<&str> = tools.iter().map(|t| t.name.as_str()).collect();
                problems.push((
                    key,
                    format!(
                        "no tool named {name:?} (tools: {}; or use auto, required, none)",
                        names.join(", ")
                    ),
                ));
            }
            return None;
        }
        let list_tools = model
            .effective_mode(mode, &choice.offered(tools), choice)
            .is_none_or(|mode| target.wire.lists_tools_with(mode));
        match model.request_fragment(target.wire, mode, tools, choice, parallel) {
            Ok(fragment) => Some(TurnShape {
                tool_choice: choice.clone(),
                fragment,
                list_tools,
            }),
            Err(GrammarError::NoTools { .. }) if !strict => None,
            Err(e) => {
                problems.push(("model.grammar".into(), e.to_string()));
                None
            }
        }
    };
    let default = shape("model.tool_choice".into(), &section.tool_choice);
    let turns: BTreeMap<u32, TurnShape> = section
        .turn_tool_choice
        .iter()
        .filter_map(|(turn, choice)| {
            shape(format!("model.turn_tool_choice.{turn}"), choice).map(|s| (*turn, s))
        })
        .collect();
    if !problems.is_empty() {
        return Err(problems);
    }
    Ok(RequestShapes {
        default: default.unwrap_or_default(),
        turns,
    })
}
