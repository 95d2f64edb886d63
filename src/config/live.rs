//! Which settings a reload applies live, and the located refusal of a
//! reload that changes any other (they need a restart). The settings a
//! bundle's binding reads are declared with the binding's other inputs
//! (`registry::inputs`, which joins them to [`LIVE_BESIDE_BINDINGS`]): one
//! declaration says both what a binding depends on and whether it may change.

use std::path::Path;

use super::{Config, ConfigError, locate};

/// The settings a reload applies live that no bundle's binding reads: the
/// daemon serves them itself (keys, observers, prices, the log filter, the
/// router). With the live inputs of a binding, every other setting needs a
/// restart.
pub const LIVE_BESIDE_BINDINGS: &[&str] = &[
    "observers",
    "runtime.router",
    "runtime.group_chat",
    "runtime.router_reach",
    "runtime.router_allow",
    "runtime.router_deny",
    "runtime.router_functions",
    "prices",
    "server.token_file",
    "server.token_env",
    "auth",
    "telemetry.log_filter",
];

/// The dotted keys whose values differ between `a` and `b`, each with its
/// value in `a` (the running one).
fn differing_keys(
    a: &serde_json::Value,
    b: &serde_json::Value,
    prefix: String,
    out: &mut Vec<(String, String)>,
) {
    use serde_json::Value;
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for key in keys {
                let path = if prefix.is_empty() {
                    key.clone()
                } else {
                    format!("{prefix}.{key}")
                };
                differing_keys(
                    x.get(key).unwrap_or(&Value::Null),
                    y.get(key).unwrap_or(&Value::Null),
                    path,
                    out,
                );
            }
        }
        _ if a != b => out.push((prefix, a.to_string())),
        _ => {}
    }
}

impl Config {
    /// The settings that differ between `self` (running) and `next` but
    /// are not among the `live` keys (`section` or `section.leaf`): they
    /// cannot change while the daemon runs (the listen address, the state
    /// directory, the queue, the workers, telemetry export…). Each is
    /// located in `file` with its key. Empty when `next` can be applied live.
    pub fn restart_only_changes(
        &self,
        next: &Config,
        live: &[&str],
        file: Option<&Path>,
    ) -> Vec<ConfigError> {
        let strip = |config: &Config| {
            let mut value = serde_json::to_value(config).unwrap_or_default();
            for key in live {
                let (section, leaf) = key.split_once('.').unwrap_or((key, ""));
                if let Some(table) = value.as_object_mut() {
                    if leaf.is_empty() {
                        table.remove(section);
                    } else if let Some(inner) =
                        table.get_mut(section).and_then(|v| v.as_object_mut())
                    {
                        inner.remove(leaf);
                    }
                }
            }
            value
        };
        let mut keys = Vec::new();
        differing_keys(&strip(self), &strip(next), String::new(), &mut keys);
        keys.into_iter()
            .map(|(key, running)| {
                locate::invalid(
                    file,
                    &key,
                    format!(
                        "cannot change while the daemon runs (it runs with {running}); restart the daemon to apply it, or put the running value back to reload the rest"
                    ),
                )
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The live keys this test changes.
    const LIVE: &[&str] = &["endpoints", "runtime.router", "telemetry.log_filter"];

    #[test]
    fn restart_only_changes_are_located_and_live_ones_are_not_listed() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("config.toml");
        let running_text = "[server]\nlisten = \"127.0.0.1:7000\"\n\n[endpoints.local]\nbase_url = \"http://127.0.0.1:1/v1\"\n";
        std::fs::write(&file, running_text).unwrap();
        let running = Config::load(Some(&file)).unwrap();
        // Only live keys change: nothing to refuse.
        std::fs::write(&file, "[server]\nlisten = \"127.0.0.1:7000\"\n\n[endpoints.local]\nbase_url = \"http://127.0.0.1:2/v1\"\n\n[runtime]\nrouter = \"r2\"\n[telemetry]\nlog_filter = \"debug\"\n").unwrap();
        let live = Config::load(Some(&file)).unwrap();
        assert!(
            running
                .restart_only_changes(&live, LIVE, Some(&file))
                .is_empty()
        );
        // The listen address cannot change live: file, line and key.
        std::fs::write(&file, "[server]\nlisten = \"127.0.0.1:7001\"\n").unwrap();
        let moved = Config::load(Some(&file)).unwrap();
        let errors = running.restart_only_changes(&moved, LIVE, Some(&file));
        assert_eq!(errors.len(), 1, "{errors:?}");
        let text = errors[0].to_string();
        assert!(
            text.contains("config.toml:2")
                && text.contains("server.listen")
                && text.contains("restart"),
            "{text}"
        );
    }
}
