//! Where a job whose workers kept dying was when it died: the first step
//! its journal has no record of, named so the operator parking it as a
//! poison pill knows which tool or model call to look at.

use crate::events::{Event, EventEnvelope};
use crate::journal::{JournalEntry, RecordedReply};

/// Where a run whose worker died was: the first step its journal has no
/// record of ("in tool `charge` (call c1 of turn 2)", "in the model call of
/// turn 3"), in the deepest nested run that was unfinished; else, for a job
/// with no agent run journaled (a workflow, a group chat, or none yet),
/// after the last event its log holds. The journal, not the log, decides:
/// a run's events are held until its next journal write, so the log's last
/// event can be steps behind (a call's `ToolCall` is stored with its result).
pub(crate) fn where_it_died(journal: &[JournalEntry], last_event: Option<&str>) -> String {
    if let Some(step) = unfinished_step(journal, "") {
        return format!("in {step}");
    }
    match last_event {
        Some(event) => format!("after {}", describe_event(event)),
        None => "before it recorded anything".into(),
    }
}

/// The first step of the run journaled under `scope` without a record,
/// descending into the nested run of an unfinished call; `None` when that
/// run journaled nothing.
fn unfinished_step(journal: &[JournalEntry], scope: &str) -> Option<String> {
    let steps: Vec<&JournalEntry> = journal.iter().filter(|e| e.scope == scope).collect();
    if steps.is_empty() {
        return None;
    }
    let run = if scope.is_empty() {
        String::new()
    } else {
        format!(", nested run {scope}")
    };
    let Some(reply) = steps
        .iter()
        .filter(|e| e.step == "reply")
        .max_by_key(|e| e.turn)
    else {
        return Some(format!("the model call of turn 1{run}"));
    };
    let turn = reply.turn;
    let Ok(recorded) = serde_json::from_str::<RecordedReply>(&reply.body) else {
        return Some(format!("turn {turn}{run}"));
    };
    let has = |step: &str| steps.iter().any(|e| e.turn == turn && e.step == step);
    for (position, call) in recorded.assistant.tool_calls.iter().enumerate() {
        if has(&JournalEntry::result_key(position)) {
            continue;
        }
        if let Some(deeper) = unfinished_step(journal, &format!("{scope}{turn}:{position}/")) {
            return Some(deeper);
        }
        let started = if has(&JournalEntry::start_key(position)) {
            ", started"
        } else {
            ""
        };
        return Some(format!(
            "tool `{}` (call {} of turn {turn}{run}{started})",
            call.name, call.id
        ));
    }
    Some(format!("the model call of turn {}{run}", turn + 1))
}

/// A stored event, as people read where a run was: `event 12 (ToolCall
/// charge, turn 2, run <job>/1:0)`.
pub(crate) fn describe_event(stored: &str) -> String {
    let Ok(event) = serde_json::from_str::<EventEnvelope>(stored) else {
        return "an event this version cannot read".into();
    };
    let mut what = event.event.kind().to_string();
    if let Event::ToolCall {
        tool_name, turn, ..
    }
    | Event::ToolResult {
        tool_name, turn, ..
    } = &event.event
    {
        what = format!("{what} {tool_name}, turn {turn}");
    }
    format!("event {} ({what}, run {})", event.seq, event.run_id)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn entry(scope: &str, turn: u32, step: &str, body: String) -> JournalEntry {
        JournalEntry::new(scope, turn, step, body)
    }

    fn reply(calls: &[(&str, &str)]) -> String {
        let calls = calls
            .iter()
            .map(|(id, name)| crate::types::ToolCall {
                id: id.to_string(),
                name: name.to_string(),
                arguments: Value::Null,
                raw_arguments: None,
            })
            .collect();
        serde_json::to_string(&RecordedReply {
            assistant: crate::types::Message::assistant(None, calls),
            parse_errors: vec![],
            usage: Default::default(),
            model: "m".into(),
            response_model: None,
            response_id: None,
            finish_reason: None,
        })
        .unwrap()
    }

    /// The step a poison pill died in comes from its journal, not from the
    /// last stored event (which can be a step behind): the unfinished tool
    /// call of the last reply, in the deepest unfinished nested run, else
    /// the next model call; the last event only when no agent run was
    /// journaled.
    #[test]
    fn a_poison_pill_is_said_to_have_died_in_its_first_unrecorded_step() {
        let event = r#"{"run_id":"j","bundle":"b","bundle_version":"1","seq":3,"timestamp":"t","type":"ModelRequest","turn":1,"messages_count":1,"tools_count":1,"model":"m"}"#;
        assert_eq!(
            where_it_died(&[], Some(event)),
            "after event 3 (ModelRequest, run j)"
        );
        assert_eq!(where_it_died(&[], None), "before it recorded anything");
        let input = entry("", 0, "input", "[]".into());
        assert_eq!(
            where_it_died(std::slice::from_ref(&input), Some(event)),
            "in the model call of turn 1"
        );
        let two_calls = entry("", 1, "reply", reply(&[("c1", "lookup"), ("c2", "charge")]));
        let first_done = entry("", 1, "result@0", "{}".into());
        let mut journal = vec![input, two_calls, first_done];
        assert_eq!(
            where_it_died(&journal, Some(event)),
            "in tool `charge` (call c2 of turn 1)"
        );
        journal.push(entry("", 1, "start@1", "{}".into()));
        assert_eq!(
            where_it_died(&journal, Some(event)),
            "in tool `charge` (call c2 of turn 1, started)"
        );
        journal.push(entry("1:1/", 0, "input", "[]".into()));
        journal.push(entry("1:1/", 1, "reply", reply(&[("n1", "pay")])));
        assert_eq!(
            where_it_died(&journal, Some(event)),
            "in tool `pay` (call n1 of turn 1, nested run 1:1/)"
        );
        journal.push(entry("", 1, "result@1", "{}".into()));
        assert_eq!(
            where_it_died(&journal, Some(event)),
            "in the model call of turn 2"
        );
        let workflow = [entry("workflow/", 1, "checkpoint", "{}".into())];
        assert!(where_it_died(&workflow, Some(event)).starts_with("after event 3"));
    }
}
