//! The events' original names (`lol impl`'s `impl_done`, `parse_fail`,
//! `pr_fail_need_rebase`): `<event_prefix>_<event>`, computed when the
//! workflow compiles, accepted in `transitions` and reported beside our
//! events.

use std::collections::BTreeMap;

use super::{Compiler, StageInfo, Workflow};
use crate::workflow::spec::{FATAL, StageSpec, WorkflowSpec};

/// The event of a stage run that failed in a way no retry fixes (a
/// template that does not render, an `ImplError`): it always leads to `fatal`.
pub(crate) const ERROR_EVENT: &str = "error";

/// `<prefix>_<event>`, or the event itself under an empty prefix.
fn prefixed(prefix: &str, event: &str) -> String {
    if prefix.is_empty() {
        event.to_string()
    } else {
        format!("{prefix}_{event}")
    }
}

impl Workflow {
    /// The original name of `event` at `stage` (`impl_done` for `done` at a
    /// stage with `event_prefix: impl`); `fatal` for the engine's `error`
    /// (a problem no retry fixes), which `lol impl` reported as `fatal`.
    pub fn original_event(&self, stage: &str, event: &str) -> String {
        if let Some(name) = self
            .stages
            .get(stage)
            .and_then(|info| info.original.get(event))
        {
            return name.clone();
        }
        if event == ERROR_EVENT {
            return FATAL.to_string();
        }
        let prefix = self
            .spec
            .stages
            .get(stage)
            .and_then(StageSpec::event_prefix)
            .unwrap_or(stage);
        prefixed(prefix, event)
    }
}

impl Compiler {
    /// Names each event of a stage as `lol impl` did: `<prefix>_<event>`
    /// (`event_prefix`, default the stage name), except the failure event of
    /// an agent stage's gate, which already names its gate (`parse_fail`),
    /// unless it is also one of the agent's result events.
    pub(super) fn original_names(
        &mut self,
        name: &str,
        stage: &StageSpec,
        info: &mut StageInfo,
        at: &str,
    ) {
        let prefix = stage.event_prefix().unwrap_or(name);
        if !prefix
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || "-_".contains(ch))
        {
            self.problem(
                &format!("{at}.event_prefix"),
                format!(
                    "invalid prefix {prefix:?} (use letters, digits, `-` and `_`, or \"\" for none)"
                ),
            );
        }
        // A gate failure event that is not also a result event.
        let gate_fail = match stage {
            StageSpec::Agent(agent) => agent
                .gate
                .as_ref()
                .map(|g| g.fail_event())
                .filter(|e| !agent.result.events.contains(e) && agent.result.otherwise != *e),
            _ => None,
        };
        let mut seen: BTreeMap<String, &String> = BTreeMap::new();
        for event in &info.events {
            let original = if gate_fail.as_ref() == Some(event) {
                event.clone()
            } else {
                prefixed(prefix, event)
            };
            if let Some(other) = seen.insert(original.clone(), event) {
                self.problem(
                    &format!("{at}.event_prefix"),
                    format!("events {other:?} and {event:?} would both be named {original:?}; choose another prefix"),
                );
            }
            info.original.insert(event.clone(), original);
        }
    }

    /// Renames events given by their original names in the transition table
    /// (`impl_done`, `pr_pass`, …) to the stage's own; a row that names an
    /// event both ways is a problem.
    pub(super) fn canonical_events(
        &mut self,
        spec: &mut WorkflowSpec,
        stages: &BTreeMap<String, StageInfo>,
    ) {
        for (stage, row) in spec.transitions.iter_mut() {
            let Some(info) = stages.get(stage) else {
                continue;
            };
            let aliased: Vec<(String, String)> = row
                .keys()
                .filter(|key| !info.events.contains(*key))
                .filter_map(|key| {
                    let (event, _) = info
                        .original
                        .iter()
                        .find(|(_, original)| *original == key)?;
                    Some((key.clone(), event.clone()))
                })
                .collect();
            for (alias, event) in aliased {
                if row.contains_key(&event) {
                    self.problem(
                        &format!("workflow.transitions.{stage}.{alias}"),
                        format!("{alias:?} is another name of {event:?}, which the row also has; keep one"),
                    );
                } else if let Some(target) = row.remove(&alias) {
                    row.insert(event, target);
                }
            }
        }
    }
}
