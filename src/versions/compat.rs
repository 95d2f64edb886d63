//! The replay-compatibility check, the one rule for running a journal on
//! other content than it was recorded with (a fork with `bundle_version:
//! current`, `migrate-jobs`, `on_new_version: move`): every tool called in
//! the replayed turns exists in the new content with a schema the recorded
//! arguments still validate against, and every `agent` tool among them runs
//! the same nested bundle. Only what the replay needs is compared: prompts,
//! the model and tools never called may change freely.

use crate::bundle::schema::ToolKind;
use crate::journal::{JournalEntry, RecordedReply};
use crate::registry::LoadedBundle;

/// Why a journal cannot replay on other content: every reason found.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", .reasons.join("; "))]
pub struct Incompatible {
    pub reasons: Vec<String>,
}

/// Whether the top-level turns of `journal` (recorded on `from`) replay on
/// `to`. Only an agent bundle's jobs can change content: a workflow's or a
/// group chat's journal records stages and replies, not turns.
pub fn check(
    from: &LoadedBundle,
    to: &LoadedBundle,
    journal: &[JournalEntry],
) -> Result<(), Incompatible> {
    let mut reasons = Vec::new();
    for (loaded, which) in [(from, "the job's"), (to, "the new")] {
        let raw = &loaded.bundle.raw;
        if raw.workflow.is_some() || raw.group_chat.is_some() {
            reasons.push(format!(
                "{which} content of bundle {:?} (version {}) is a {}: only an agent bundle's jobs replay on another version",
                loaded.name(),
                loaded.version(),
                if raw.workflow.is_some() {
                    "workflow"
                } else {
                    "group-chat host"
                }
            ));
        }
    }
    if !reasons.is_empty() {
        return Err(Incompatible { reasons });
    }
    for entry in journal
        .iter()
        .filter(|e| e.scope.is_empty() && e.step == "reply")
    {
        let reply: RecordedReply = serde_json::from_str(&entry.body).map_err(|e| Incompatible {
            reasons: vec![format!(
                "the reply of turn {} in the journal cannot be read ({e})",
                entry.turn
            )],
        })?;
        for (position, call) in reply.assistant.tool_calls.iter().enumerate() {
            let unparsed = reply
                .parse_errors
                .get(position)
                .is_some_and(Option::is_some);
            // A call that never ran on the old content (its arguments did
            // not parse, or it named no tool there) replays as the error
            // it got.
            if unparsed || from.tools.tool(&call.name).is_none() {
                continue;
            }
            if let Err(reason) = call_replays(from, to, &call.name, &call.arguments) {
                reasons.push(format!(
                    "turn {} calls tool `{}`, {reason}",
                    entry.turn, call.name
                ));
            }
        }
    }
    reasons.dedup();
    if reasons.is_empty() {
        Ok(())
    } else {
        Err(Incompatible { reasons })
    }
}

/// Why one recorded call does not replay on the new version: the clause
/// after "turn N calls tool `x`, ", naming the version and bundle.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
enum CallNotReplayable {
    #[error("which version {version} of bundle {bundle:?} does not have")]
    ToolGone { version: String, bundle: String },
    #[error("whose recorded arguments version {version} of bundle {bundle:?} refuses: {why}")]
    ArgumentsRefused {
        version: String,
        bundle: String,
        why: crate::approval::ArgumentsError,
    },
    #[error("which {} and in version {version} {}", runs(.was), runs(.is))]
    NestedBundleChanged {
        was: Option<String>,
        version: String,
        is: Option<String>,
    },
}

fn runs(nested: &Option<String>) -> String {
    match nested {
        Some(bundle) => format!("runs bundle {bundle:?}"),
        None => "runs no nested bundle".to_string(),
    }
}

/// Whether one recorded call of `name` replays on `to`.
fn call_replays(
    from: &LoadedBundle,
    to: &LoadedBundle,
    name: &str,
    arguments: &serde_json::Value,
) -> Result<(), CallNotReplayable> {
    let Some(parameters) = to.tools.parameters(name) else {
        return Err(CallNotReplayable::ToolGone {
            version: to.version().to_string(),
            bundle: to.name().to_string(),
        });
    };
    crate::approval::check_arguments(parameters, arguments).map_err(|why| {
        CallNotReplayable::ArgumentsRefused {
            version: to.version().to_string(),
            bundle: to.name().to_string(),
            why,
        }
    })?;
    let (was, is) = (nested_bundle(from, name), nested_bundle(to, name));
    if was != is {
        return Err(CallNotReplayable::NestedBundleChanged {
            was: was.map(str::to_string),
            version: to.version().to_string(),
            is: is.map(str::to_string),
        });
    }
    Ok(())
}

/// The bundle an `agent` tool named `name` runs, if it is one.
fn nested_bundle<'a>(loaded: &'a LoadedBundle, name: &str) -> Option<&'a str> {
    loaded
        .bundle
        .raw
        .tools
        .iter()
        .find(|spec| spec.name == name && spec.kind == ToolKind::Agent)
        .and_then(|spec| spec.bundle.as_deref())
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;

    use serde_json::json;

    use super::*;
    use crate::bundle::{LoadContext, ToolEnv};
    use crate::journal::RecordedReply;
    use crate::model::ModelCatalog;
    use crate::registry::BundleIdentity;
    use crate::types::{Message, TokenUsage, ToolCall};

    /// Bundle `b` at `version`: a process tool `note` whose `text` is of
    /// `text_type` (none when `None`) and an agent tool `helper` running
    /// `nested`.
    fn loaded(version: &str, text_type: Option<&str>, nested: &str) -> LoadedBundle {
        let note = text_type.map_or(String::new(), |t| {
            format!(
                "  - name: note\n    kind: process\n    command: [\"true\"]\n    parameters: {{type: object, properties: {{text: {{type: {t}}}}}, required: [text]}}\n"
            )
        });
        let text = format!(
            "name: b\nversion: \"{version}\"\nmodel: {{endpoint: \"http://127.0.0.1:9/v1\", name: m}}\nprompts: {{user: \"{{{{ input }}}}\"}}\ntools:\n{note}  - name: helper\n    kind: agent\n    bundle: {nested}\n"
        );
        let context = LoadContext {
            endpoints: None,
            models: &ModelCatalog::builtin(),
            histories: &crate::bundle::HistoryPlugins::default(),
        };
        let here = Path::new(".");
        let mut bundle =
            crate::bundle::load_str(&text, here, &here.join("bundle.yaml"), &context).unwrap();
        let env = ToolEnv {
            runs_agents: true,
            ..Default::default()
        };
        let tools = crate::bundle::build_tools(&mut bundle, &env).unwrap();
        let identity = BundleIdentity::unbound(&bundle.content_digest);
        let script = crate::mock::Script::parse("replies: [{content: x}]", "test").unwrap();
        let backend = Arc::new(crate::client::ScriptedBackend::new("m", script));
        LoadedBundle::new(bundle, identity, Arc::new(tools), backend)
    }

    /// Turn 1's reply: `note` with `text`, `helper`, and a call to a tool
    /// no version has whose arguments did not parse.
    fn journal() -> Vec<JournalEntry> {
        let reply = RecordedReply {
            assistant: Message::assistant(
                None,
                vec![
                    ToolCall::new("a", "note", json!({"text": "x"})),
                    ToolCall::new("b", "helper", json!({"input": "hi"})),
                    ToolCall::new("c", "nowhere", json!("{not json")),
                ],
            ),
            parse_errors: vec![None, None, Some("not JSON".into())],
            usage: TokenUsage::default(),
            model: "m".into(),
            response_model: None,
            response_id: None,
            finish_reason: None,
        };
        vec![JournalEntry::new(
            "",
            1,
            "reply",
            serde_json::to_string(&reply).unwrap(),
        )]
    }

    #[test]
    fn a_journal_replays_where_its_calls_still_fit() {
        let from = loaded("1", Some("string"), "child");
        let journal = journal();
        assert!(check(&from, &loaded("2", Some("string"), "child"), &journal).is_ok());

        let schema = check(&from, &loaded("3", Some("integer"), "child"), &journal)
            .unwrap_err()
            .to_string();
        assert!(
            schema.contains("turn 1 calls tool `note`, whose recorded arguments version 3"),
            "{schema}"
        );
        let nested = check(&from, &loaded("4", Some("string"), "other"), &journal)
            .unwrap_err()
            .to_string();
        assert!(
            nested.contains(
                "turn 1 calls tool `helper`, which runs bundle \"child\" and in version 4 runs bundle \"other\""
            ),
            "{nested}"
        );
        let removed = check(&from, &loaded("5", None, "child"), &journal).unwrap_err();
        assert_eq!(
            removed.reasons,
            ["turn 1 calls tool `note`, which version 5 of bundle \"b\" does not have"]
        );
        // Turns not replayed are not checked.
        assert!(check(&from, &loaded("5", None, "child"), &[]).is_ok());
    }
}
