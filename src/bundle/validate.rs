//! What a bundle must hold beyond its schema, part by part: a valid name
//! and version, a model endpoint the daemon has (or a script that exists),
//! sane limits, each tool's names, schema, guardrails, approval and backend
//! keys, where its grammar goes, and its workflow compiled. Each problem
//! names the key path it is at; the loader locates it in the file.

use std::collections::HashSet;
use std::path::Path;

use serde_json::Value;

use super::*;

/// A problem of a bundle file: the key path it is at, and what is wrong.
pub(super) type Problem = (String, String);

/// The release gate's settings, and the suite it runs: a gate whose suite
/// cannot run would hold every new version for ever.
pub(super) fn release_problems(raw: &RawBundle, dir: &Path) -> Vec<Problem> {
    let Some(release) = &raw.release else {
        return Vec::new();
    };
    let mut problems = Vec::new();
    if let Some(min) = release.min_score.filter(|m| !(0.0..=1.0).contains(m)) {
        problems.push((
            "release.min_score".into(),
            format!("{min} is out of range: a score is 0 to 1"),
        ));
    }
    if let Some(n) = release.concurrency.filter(|n| !(1..=64).contains(n)) {
        problems.push((
            "release.concurrency".into(),
            format!("{n} is out of range: 1 to 64 case jobs at once"),
        ));
    }
    if let Some(canary) = &release.canary {
        problems.extend(canary_problems(canary));
    }
    let commands = raw.command_stages();
    if !release.real_tools && !commands.is_empty() {
        problems.push((
            "release.real_tools".into(),
            format!(
                "the workflow runs commands (stages {}), which no stand-in answers, so its gate's cases cannot run: set `real_tools: true` to run them for real in the gate",
                commands.join(", ")
            ),
        ));
    }
    if let Err(e) = crate::evals::Suite::cases_to_run(&dir.join("evals"), &release.tags) {
        problems.push((
            "release.gate".into(),
            format!("the gate runs the bundle's eval suite, which cannot run: {e}"),
        ));
    }
    problems
}

/// A canary's settings.
fn canary_problems(canary: &crate::bundle::CanarySection) -> Vec<Problem> {
    let mut problems = Vec::new();
    if !(canary.share > 0.0 && canary.share < 1.0) {
        problems.push((
            "release.canary.share".into(),
            format!(
                "{} is out of range: a share of new jobs above 0 and below 1 (0.1 sends one job in ten)",
                canary.share
            ),
        ));
    }
    if canary.min_jobs == 0 {
        problems.push((
            "release.canary.min_jobs".into(),
            "0 judges a canary on no job: at least 1".into(),
        ));
    }
    for (key, margin) in [
        ("failure_margin", canary.failure_margin),
        ("cost_margin", canary.cost_margin),
    ] {
        if !(margin >= 0.0 && margin.is_finite()) {
            problems.push((
                format!("release.canary.{key}"),
                format!("{margin} is out of range: 0 or more"),
            ));
        }
    }
    problems
}

/// The bundle's name and version.
pub(super) fn identity_problems(raw: &RawBundle) -> Vec<Problem> {
    let mut problems = Vec::new();
    if !is_valid_name(&raw.name) {
        problems.push((
            "name".into(),
            format!(
                "invalid bundle name {:?} (use letters, digits, `-` and `_`)",
                raw.name
            ),
        ));
    }
    if raw.version.trim().is_empty() {
        problems.push(("version".into(), "must not be empty".into()));
    }
    problems
}

/// Where the model is: a script that exists, an endpoint the daemon has.
pub(super) fn endpoint_problems(
    raw: &RawBundle,
    endpoint: &EndpointRef,
    ctx: &LoadContext<'_>,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    match (endpoint, ctx.endpoints) {
        (EndpointRef::Scripted(path), _) if !path.is_file() => {
            problems.push((
                "model.endpoint".into(),
                format!("script file {} does not exist", path.display()),
            ));
        }
        (EndpointRef::Named(name), Some(known)) if !known.contains_key(name) => {
            let known: Vec<_> = known.keys().map(String::as_str).collect();
            problems.push((
                "model.endpoint".into(),
                format!(
                    "unknown endpoint {name:?} (configured: {}; or give a URL or `scripted:<file>`)",
                    known.join(", ")
                ),
            ));
        }
        _ => {}
    }
    if raw.model.name.trim().is_empty() {
        problems.push(("model.name".into(), "must not be empty".into()));
    }
    problems
}

/// Limits and a group chat's rounds and stop word.
pub(super) fn limit_problems(raw: &RawBundle) -> Vec<Problem> {
    let mut problems = Vec::new();
    let limits = &raw.limits;
    for (key, value) in [
        ("limits.max_turns", limits.max_turns as usize),
        ("limits.max_concurrency", limits.max_concurrency),
        ("limits.max_history_messages", limits.max_history_messages),
    ] {
        if value == 0 {
            problems.push((key.into(), "must be at least 1".into()));
        }
    }
    if let Some(caller) = &raw.caller_tools
        && !(1..=schema::MAX_CALLER_TOOLS).contains(&caller.max)
    {
        problems.push((
            "caller_tools.max".into(),
            format!(
                "must be between 1 and {} (it is {})",
                schema::MAX_CALLER_TOOLS,
                caller.max
            ),
        ));
    }
    if let Some(chat) = &raw.group_chat {
        if chat.max_rounds == 0 {
            problems.push(("group_chat.max_rounds".into(), "must be at least 1".into()));
        }
        if chat.stop_word.trim().is_empty() {
            problems.push((
                "group_chat.stop_word".into(),
                "must not be empty: it is the word a selector answers to end a chat".into(),
            ));
        }
    }
    problems
}

/// Each tool (names, schema, guardrails, approval, its backend's keys), the
/// bundle's approval default and its termination tool.
pub(super) fn tool_problems(raw: &RawBundle, dir: &Path) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut names = HashSet::new();
    for (i, tool) in raw.tools.iter().enumerate() {
        let at = |key: &str| format!("tools[{i}].{key}");
        if tool.kind != ToolKind::Mcp && !names.insert(tool.name.clone()) {
            problems.push((at("name"), format!("duplicate tool name {:?}", tool.name)));
        }
        if tool.name.is_empty()
            || !tool
                .name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            problems.push((
                at("name"),
                format!(
                    "invalid tool name {:?} (use letters, digits, `-`, `_`, `.`)",
                    tool.name
                ),
            ));
        }
        if tool.parameters.get("type").and_then(Value::as_str) != Some("object") {
            problems.push((
                at("parameters"),
                "must be a JSON Schema with `type: object`".into(),
            ));
        } else if let Err(e) = jsonschema::meta::validate(&tool.parameters) {
            problems.push((at("parameters"), format!("not a valid JSON Schema: {e}")));
        }
        if let Some(guards) = &tool.guardrails
            && let Err(e) = crate::tools::guardrails::Guardrails::compile(guards)
        {
            problems.push((
                at(&format!("guardrails.{}", e.key)),
                format!("invalid regex {:?}: {}", e.pattern, e.detail),
            ));
        }
        if let Some(approval) = &tool.approval
            && let Err(e) = approval.compile()
        {
            problems.push((at("approval"), e.to_string()));
        }
        for (problem_key, problem) in bind::check_spec(tool, dir) {
            problems.push((at(problem_key), problem));
        }
        for problem in bind::grail_external_problems(tool, &raw.tools) {
            problems.push((at("grail.externals"), problem));
        }
    }
    if let Some(approval) = &raw.approval
        && let Err(e) = approval.compile()
    {
        problems.push(("approval".into(), e.to_string()));
    }
    if let Some(schedule) = &raw.schedule
        && let Err(e) = schedule.compile()
    {
        let text = e.to_string();
        let (key, detail) = text.split_once(": ").unwrap_or(("schedule", &text));
        problems.push((key.into(), detail.into()));
    }
    if let Some(term) = &raw.termination
        && !raw
            .tools
            .iter()
            .any(|t| t.name == term.tool || t.kind == ToolKind::Mcp)
    {
        problems.push((
            "termination.tool".into(),
            format!("no tool named {:?} in `tools`", term.tool),
        ));
    }
    problems
}

/// Where the grammar goes (the bundle's `server`, else the named endpoint's,
/// else vLLM's wire: URLs and scripts declare none) and the request shapes
/// its model plugin builds for it.
pub(super) fn request_target(
    raw: &RawBundle,
    endpoint: &EndpointRef,
    ctx: &LoadContext<'_>,
    model: Option<&crate::model::ResolvedModel>,
    problems: &mut Vec<Problem>,
) -> (Target, RequestShapes) {
    let server = raw
        .model
        .server
        .or_else(|| match (endpoint, ctx.endpoints) {
            (EndpointRef::Named(name), Some(known)) => known.get(name).copied(),
            _ => None,
        })
        .unwrap_or_default();
    let mut target = Target {
        server,
        wire: server.default_wire(),
    };
    let mut shapes = RequestShapes::default();
    if let Some(model) = model {
        target.wire = model.wire_for(server);
        // MCP tools are known only once bound; until then a grammar that
        // needs them is not judged.
        let has_mcp = raw.tools.iter().any(|t| t.kind == ToolKind::Mcp);
        let schemas: Vec<_> = raw
            .tools
            .iter()
            .filter(|t| t.kind != ToolKind::Mcp)
            .map(bind::schema_of)
            .collect();
        match shape::for_target(&raw.name, &raw.model, model, target, &schemas, !has_mcp) {
            Ok(built) => shapes = built,
            Err(found) => problems.extend(found),
        }
    }
    (target, shapes)
}

/// The bundle's workflow, compiled; its problems' paths start at `workflow`.
pub(super) fn compile_workflow(
    raw: &RawBundle,
    problems: &mut Vec<Problem>,
) -> Option<std::sync::Arc<crate::workflow::Workflow>> {
    let spec = raw.workflow.as_ref()?;
    // Checkpoints carry this version: a job never resumes a checkpoint of a
    // different workflow definition.
    let version = serde_json::to_string(spec)
        .map(|t| digest(&t))
        .unwrap_or_default();
    match crate::workflow::Workflow::compile(spec.clone(), version) {
        Ok(w) => Some(std::sync::Arc::new(w)),
        Err(crate::workflow::SpecErrors(found)) => {
            for p in found {
                let path = if p.path.is_empty() {
                    "workflow".to_string()
                } else {
                    p.path
                };
                problems.push((path, p.message));
            }
            None
        }
    }
}
