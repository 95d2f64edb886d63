//! Example history plugin `last_user_turn`: each request sends the first
//! message (the system prompt, or the task when there is none), the last
//! user message and everything after it — the turn being worked on, not the
//! earlier turns of a conversation — capped by `max_history_messages`
//! (the oldest of the turn's messages go first, never leaving a tool result
//! without its call).
//!
//! Build-time variants for the daemon's tests: `SA_HISTORY_VARIANT=no_first`
//! leaves the first message out (a visibly different library);
//! `SA_HISTORY_VARIANT=bad` also chooses an index past the end (the daemon
//! must fail the turn, naming the plugin).

use structured_agents_plugin_sdk::{HistoryPluginDef, PluginError, Value, export_history_plugin};

fn select(input: &Value) -> Result<Vec<usize>, PluginError> {
    let messages = input["messages"]
        .as_array()
        .ok_or("`messages` is not a list")?;
    if messages.is_empty() {
        return Err("the conversation has no message".into());
    }
    let max = input["max_history_messages"]
        .as_u64()
        .map_or(usize::MAX, |m| usize::try_from(m).unwrap_or(usize::MAX))
        .max(1);
    let role = |i: usize| messages[i]["role"].as_str().unwrap_or_default();
    let last_user = (0..messages.len()).rev().find(|&i| role(i) == "user");
    // The turn: from the last user message on (never the first message
    // again, which is always sent).
    let mut start = last_user.unwrap_or(0).max(1);
    let room = max - 1;
    start = start.max(messages.len().saturating_sub(room));
    // A tool result whose assistant call was cut away would be refused.
    while start < messages.len() && role(start) == "tool" {
        start += 1;
    }
    let mut indices: Vec<usize> = std::iter::once(0).chain(start..messages.len()).collect();
    match option_env!("SA_HISTORY_VARIANT") {
        Some("no_first") if indices.len() > 1 => {
            indices.remove(0);
        }
        Some("bad") => indices.push(messages.len()),
        _ => {}
    }
    Ok(indices)
}

static LAST_USER_TURN: HistoryPluginDef = HistoryPluginDef {
    name: "last_user_turn",
    version: env!("CARGO_PKG_VERSION"),
    select,
};

export_history_plugin!(LAST_USER_TURN);

#[cfg(test)]
mod tests {
    use super::*;
    use structured_agents_plugin_sdk::json;

    fn ask(roles: &[&str], max: usize) -> Vec<usize> {
        let messages: Vec<Value> = roles.iter().map(|r| json!({"role": r})).collect();
        select(&json!({"messages": messages, "max_history_messages": max, "model": "m"})).unwrap()
    }

    #[test]
    fn keeps_the_first_message_and_the_last_user_turn() {
        let chat = [
            "system",
            "user",
            "assistant",
            "user",
            "assistant",
            "tool",
            "assistant",
        ];
        assert_eq!(ask(&chat, 50), [0, 3, 4, 5, 6]);
        // Capped: the oldest of the turn go first, and with them the orphan tool result.
        assert_eq!(ask(&chat, 3), [0, 6]);
        assert_eq!(ask(&chat, 4), [0, 4, 5, 6]);
        assert_eq!(ask(&chat, 1), [0]);
        // Without a system prompt the first message is the task itself.
        assert_eq!(ask(&["user", "assistant", "tool"], 50), [0, 1, 2]);
        assert_eq!(ask(&["user"], 50), [0]);
    }

    #[test]
    fn refuses_what_is_not_a_conversation() {
        assert!(select(&json!({"messages": []})).is_err());
        assert!(select(&json!({"messages": "no"})).is_err());
    }
}
