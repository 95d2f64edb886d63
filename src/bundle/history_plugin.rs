//! History plugin libraries (`kind: history`, docs/plugins.md, "History
//! plugins") as the kernel's [`HistoryPlugin`], and `limits.history`
//! resolved against them. The library answers the indices of the messages
//! to send, on the plugin's own call threads within
//! [`HISTORY_PLUGIN_TIMEOUT`]; one that fails, panics, hangs or answers a
//! value of the wrong shape fails the turn that asked, naming itself, and
//! the kernel checks the indices it answers (`kernel::history::chosen`).

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use super::schema::HistorySetting;
use crate::kernel::{History, HistoryPlugin, HistoryPluginError, HistoryStrategy};
use crate::plugins::{Instance, Plugin, PluginRegistry};
use crate::types::Message;

/// How long choosing one turn's messages may take, waiting for a free call
/// thread included. Picking indices is quick work; a library that takes
/// this long is stuck.
pub const HISTORY_PLUGIN_TIMEOUT: Duration = Duration::from_secs(10);

/// The built-in strategies by the names `limits.history` gives them.
const BUILTINS: [(&str, HistoryStrategy); 2] = [
    ("sliding_window", HistoryStrategy::SlidingWindow),
    ("keep_all", HistoryStrategy::KeepAll),
];

/// The history plugin libraries loaded, each wrapped once.
#[derive(Clone, Default)]
pub struct HistoryPlugins(Vec<Arc<dyn HistoryPlugin>>);

impl HistoryPlugins {
    /// The history libraries of `plugins`: one `previous` already wrapped
    /// (the same file content) is reused as it is. A library named like a
    /// built-in strategy is refused into `errors`. Blocking (runs plugin code).
    pub fn of(
        plugins: &PluginRegistry,
        previous: &HistoryPlugins,
        errors: &mut Vec<String>,
    ) -> HistoryPlugins {
        let builtins = BUILTINS.map(|(name, _)| name);
        HistoryPlugins(plugins.wrapped(
            "history",
            ("history plugin", "a built-in history strategy", &builtins),
            |name, sha256| {
                previous
                    .get(name)
                    .filter(|p| p.library_digest() == Some(sha256))
                    .cloned()
            },
            |plugin| {
                DynamicHistoryPlugin::new(plugin)
                    .map(|wrapped| Arc::new(wrapped) as Arc<dyn HistoryPlugin>)
            },
            errors,
        ))
    }

    pub fn get(&self, name: &str) -> Option<&Arc<dyn HistoryPlugin>> {
        self.0.iter().find(|p| p.name() == name)
    }

    fn names(&self) -> String {
        if self.0.is_empty() {
            return "none (put a `kind: history` library in paths.plugins_dir)".into();
        }
        let names: Vec<&str> = self.0.iter().map(|p| p.name()).collect();
        names.join(", ")
    }

    /// The strategy `setting` names, or why there is none (for the key
    /// `limits.history`).
    pub fn resolve(&self, setting: &HistorySetting) -> Result<History, UnknownHistory> {
        let (name, builtins_too) = match setting {
            HistorySetting::Name(name) => (name, true),
            HistorySetting::Plugin(r) => (&r.plugin, false),
        };
        if builtins_too && let Some((_, strategy)) = BUILTINS.iter().find(|(n, _)| n == name) {
            return Ok(History::Builtin(*strategy));
        }
        if let Some(plugin) = self.get(name) {
            return Ok(History::Plugin(plugin.clone()));
        }
        Err(UnknownHistory {
            name: name.clone(),
            builtins: if builtins_too {
                "built-in: sliding_window, keep_all; "
            } else {
                ""
            },
            loaded: self.names(),
        })
    }
}

/// `limits.history` names no strategy: the name, and every name it could be.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("unknown history strategy {name:?} ({builtins}history plugins loaded: {loaded})")]
pub struct UnknownHistory {
    pub name: String,
    /// The built-in names, when the setting may name one.
    builtins: &'static str,
    /// The loaded libraries, or how to load one.
    loaded: String,
}

/// What was wrong with a `sa_history_select` answer. Where: the caller
/// names the plugin ([`HistoryPluginError`]).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum SelectionError {
    #[error("it panicked: {0}")]
    Panicked(String),
    /// It failed and said why.
    #[error("{0}")]
    Failed(String),
    #[error("it answered neither `ok` nor `error`: {0}")]
    NeitherOkNorError(String),
    #[error(
        "it answered a value of the wrong shape ({detail}): {answer}; expected {{\"indices\": [number]}}"
    )]
    WrongShape { detail: String, answer: String },
}

/// A history plugin library, bound to one instance of it.
pub struct DynamicHistoryPlugin {
    plugin: Arc<Plugin>,
    instance: Arc<Instance>,
}

/// A `sa_history_select` answer as the ABI defines it.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Selection {
    indices: Vec<usize>,
}

impl DynamicHistoryPlugin {
    /// Wraps `plugin`, creating its instance. Blocking (runs plugin code).
    pub fn new(plugin: Arc<Plugin>) -> Result<Self, crate::plugins::PluginCallError> {
        let instance = Arc::new(plugin.instantiate(&Value::Null)?);
        Ok(Self { plugin, instance })
    }

    fn error(&self, detail: String, retryable: bool) -> HistoryPluginError {
        HistoryPluginError {
            plugin: self.plugin.info.label(),
            detail,
            retryable,
        }
    }
}

/// The indices in a `sa_history_select` answer, or what was wrong with it.
fn selection(mut answer: Value) -> Result<Vec<usize>, SelectionError> {
    let Some(ok) = answer.get_mut("ok").map(Value::take) else {
        let message = answer
            .pointer("/error/message")
            .and_then(Value::as_str)
            .unwrap_or("no message");
        return Err(
            match answer.pointer("/error/kind").and_then(Value::as_str) {
                Some("panic") => SelectionError::Panicked(message.to_string()),
                Some(_) => SelectionError::Failed(message.to_string()),
                None => SelectionError::NeitherOkNorError(shown(&answer)),
            },
        );
    };
    serde_json::from_value::<Selection>(ok.clone())
        .map(|s| s.indices)
        .map_err(|e| SelectionError::WrongShape {
            detail: e.to_string(),
            answer: shown(&ok),
        })
}

/// An answer as an error message shows it: its first 200 characters.
fn shown(answer: &Value) -> String {
    let text = answer.to_string();
    match text.char_indices().nth(200) {
        None => text,
        Some((cut, _)) => format!("{}…", &text[..cut]),
    }
}

impl HistoryPlugin for DynamicHistoryPlugin {
    fn name(&self) -> &str {
        &self.plugin.info.name
    }

    fn select<'a>(
        &'a self,
        messages: &'a [Message],
        max_messages: usize,
        model: &'a str,
    ) -> BoxFuture<'a, Result<Vec<usize>, HistoryPluginError>> {
        Box::pin(async move {
            let request = json!({
                "messages": messages,
                "max_history_messages": max_messages,
                "model": model,
            });
            let answer = self
                .plugin
                .pooled(
                    Plugin::select_history,
                    self.instance.clone(),
                    request,
                    HISTORY_PLUGIN_TIMEOUT,
                )
                .await
                .map_err(|e| self.error(e.to_string(), e.is_retryable()))?
                .map_err(|e| self.error(e.to_string(), false))?;
            selection(answer).map_err(|e| self.error(e.to_string(), false))
        })
    }

    fn library_digest(&self) -> Option<&str> {
        Some(&self.plugin.info.sha256)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bundle::schema::HistoryPluginRef;

    #[test]
    fn an_answer_is_indices_or_a_failure_saying_what_it_was() {
        assert_eq!(
            selection(json!({"ok": {"indices": [0, 2]}})).unwrap(),
            [0, 2]
        );
        let wrong = selection(json!({"ok": [0, 2]})).unwrap_err().to_string();
        assert!(
            wrong.contains("wrong shape") && wrong.contains("[0,2]"),
            "{wrong}"
        );
        let negative = selection(json!({"ok": {"indices": [-1]}}))
            .unwrap_err()
            .to_string();
        assert!(negative.contains("wrong shape"), "{negative}");
        let panicked =
            selection(json!({"error": {"kind": "panic", "message": "boom"}})).unwrap_err();
        assert_eq!(panicked.to_string(), "it panicked: boom");
        let failed = selection(json!({"error": {"kind": "failed", "message": "no"}})).unwrap_err();
        assert_eq!(failed.to_string(), "no");
        let neither = selection(json!({"fine": true})).unwrap_err().to_string();
        assert!(neither.contains("neither `ok` nor `error`"), "{neither}");
    }

    #[test]
    fn built_in_names_resolve_and_unknown_ones_name_what_is_loaded() {
        let none = HistoryPlugins::default();
        let name = |n: &str| HistorySetting::Name(n.into());
        assert!(matches!(
            none.resolve(&name("keep_all")),
            Ok(History::Builtin(HistoryStrategy::KeepAll))
        ));
        assert!(matches!(
            none.resolve(&HistorySetting::default()),
            Ok(History::Builtin(HistoryStrategy::SlidingWindow))
        ));
        let err = none.resolve(&name("recent")).unwrap_err().to_string();
        assert!(
            err.contains("\"recent\"")
                && err.contains("sliding_window, keep_all")
                && err.contains("history plugins loaded: none"),
            "{err}"
        );
        // `{plugin: …}` names a library only, never a built-in.
        let plugin = HistorySetting::Plugin(HistoryPluginRef {
            plugin: "keep_all".into(),
        });
        let err = none.resolve(&plugin).unwrap_err().to_string();
        assert!(!err.contains("built-in"), "{err}");
    }
}
