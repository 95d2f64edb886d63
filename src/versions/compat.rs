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

/// Whether one recorded call of `name` replays on `to`.
fn call_replays(
    from: &LoadedBundle,
    to: &LoadedBundle,
    name: &str,
    arguments: &serde_json::Value,
) -> Result<(), String> {
    let Some(parameters) = to.tools.parameters(name) else {
        return Err(format!(
            "which version {} of bundle {:?} does not have",
            to.version(),
            to.name()
        ));
    };
    crate::approval::check_arguments(parameters, arguments).map_err(|why| {
        format!(
            "whose recorded arguments version {} of bundle {:?} refuses: {why}",
            to.version(),
            to.name()
        )
    })?;
    let (was, is) = (nested_bundle(from, name), nested_bundle(to, name));
    if was != is {
        let runs = |nested: Option<&str>| match nested {
            Some(bundle) => format!("runs bundle {bundle:?}"),
            None => "runs no nested bundle".to_string(),
        };
        return Err(format!(
            "which {} and in version {} {}",
            runs(was),
            to.version(),
            runs(is)
        ));
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
