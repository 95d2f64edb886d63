//! `tools` and `grammar`: what a bundle offers the model, after binding its
//! tools (MCP servers are asked, plugins loaded) exactly as the daemon does.

use std::path::{Path, PathBuf};

use serde_json::{Map, Value, json};

use crate::bundle::{Bundle, Target, ToolEnv};
use crate::model::ServerKind;
use crate::tools::ToolEngine;

use super::{run, validate};

/// Loads and binds a bundle off the runtime threads (binding starts MCP
/// servers and loads plugins).
pub(super) async fn bind(
    bundle_dir: &Path,
    models_dir: &Path,
    plugins_dir: Option<PathBuf>,
) -> anyhow::Result<(Bundle, ToolEngine)> {
    let mut bundle = run::load_bundle(bundle_dir, models_dir).await?;
    tokio::task::spawn_blocking(move || {
        let plugins = plugins_dir.map(|dir| {
            let (registry, errors) = validate::load_plugins_transient(&dir);
            for e in &errors {
                eprintln!("error: {e}");
            }
            registry
        });
        let env = ToolEnv {
            plugins,
            ..Default::default()
        };
        let tools = crate::bundle::build_tools(&mut bundle, &env);
        tools.map(|tools| (bundle, tools))
    })
    .await?
    .map_err(|e| anyhow::anyhow!("{e}"))
}

/// `tools`: every resolved tool with its backend and schema.
pub async fn tools(
    bundle_dir: &Path,
    models_dir: &Path,
    plugins_dir: Option<PathBuf>,
) -> anyhow::Result<i32> {
    let (_, tools) = bind(bundle_dir, models_dir, plugins_dir).await?;
    let listing: Vec<Value> = tools
        .schemas()
        .iter()
        .map(|s| {
            let kind = tools.tool(&s.name).map(|t| t.kind()).unwrap_or("unknown");
            json!({"name": s.name, "backend": kind, "description": s.description, "parameters": s.parameters})
        })
        .collect();
    println!("{}", serde_json::to_string_pretty(&listing)?);
    Ok(0)
}

/// `grammar`: the exact keys the bundle's requests carry on each server
/// family (or, with `server`, on that one), or why it cannot go there.
pub async fn grammar(
    bundle_dir: &Path,
    models_dir: &Path,
    plugins_dir: Option<PathBuf>,
    server: Option<ServerKind>,
) -> anyhow::Result<i32> {
    let (bundle, tools) = bind(bundle_dir, models_dir, plugins_dir).await?;
    let offers_tools = !tools.is_empty();
    let body = |shape: &crate::kernel::TurnShape| {
        let mut keys = Map::new();
        if offers_tools {
            keys.insert("tool_choice".into(), shape.tool_choice.to_wire());
        }
        keys.extend(shape.fragment.clone());
        Value::Object(keys)
    };
    let for_server = |server: ServerKind| {
        let target = Target {
            server,
            wire: bundle.model.wire_for(server),
        };
        bundle
            .request_shapes(target, tools.schemas())
            .map(|shapes| {
                let turns: Map<String, Value> = shapes
                    .turns
                    .iter()
                    .map(|(turn, shape)| (turn.to_string(), body(shape)))
                    .collect();
                (target, body(&shapes.default), turns)
            })
    };
    if let Some(server) = server {
        return match for_server(server) {
            Ok((_, default, _)) => {
                println!("{}", serde_json::to_string_pretty(&default)?);
                Ok(0)
            }
            Err(e) => {
                eprintln!("{e}");
                Ok(1)
            }
        };
    }
    let mut servers = Map::new();
    for server in ServerKind::ALL {
        let entry = match for_server(server) {
            Ok((target, default, turns)) if turns.is_empty() => {
                json!({"wire": target.wire.as_str(), "request": default})
            }
            Ok((target, default, turns)) => {
                json!({"wire": target.wire.as_str(), "request": default, "turns": turns})
            }
            Err(e) => json!({"error": e.to_string()}),
        };
        servers.insert(server.as_str().into(), entry);
    }
    let out = json!({
        "bundle": bundle.name(),
        "server": bundle.target.server.as_str(),
        "servers": servers,
    });
    println!("{}", serde_json::to_string_pretty(&out)?);
    Ok(0)
}
