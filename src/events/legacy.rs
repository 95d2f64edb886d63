//! Events recorded in an earlier layout, read in today's. A job's event log
//! outlives the daemon that wrote it, so every reader of stored events
//! (typed or as JSON) upgrades them here, in one place.
//!
//! The one change so far: `ModelResponse` once carried the parsed reply as
//! `content` and `tool_calls_count`, with the server's text and native call
//! count as `raw_content` and `native_tool_calls_count` (or, earlier still,
//! not at all). Today `content` and `tool_calls_count` mean what they meant
//! in the Python kernel (the raw reply, the native calls) and the parsed
//! values are `parsed_content` and `parsed_tool_calls_count`.

use serde_json::Value;

/// Rewrites a stored event (an envelope's JSON) of an earlier layout into
/// today's; any other value is left as it is.
pub fn upgrade(event: &mut Value) {
    let Some(fields) = event.as_object_mut() else {
        return;
    };
    // Today's layout always writes `parsed_tool_calls_count`.
    if fields.get("type").and_then(Value::as_str) != Some("ModelResponse")
        || fields.contains_key("parsed_tool_calls_count")
    {
        return;
    }
    let parsed_content = fields.remove("content").unwrap_or(Value::Null);
    let parsed_calls = fields.remove("tool_calls_count").unwrap_or(Value::from(0));
    // Before `raw_content` existed nothing kept the raw reply: the parsed
    // one is the closest there is (they differ only when the reply wrote
    // its tool calls as text).
    let raw = fields
        .remove("raw_content")
        .unwrap_or_else(|| parsed_content.clone());
    let native = fields
        .remove("native_tool_calls_count")
        .unwrap_or_else(|| parsed_calls.clone());
    fields.insert("content".into(), raw);
    fields.insert("tool_calls_count".into(), native);
    fields.insert("parsed_content".into(), parsed_content);
    fields.insert("parsed_tool_calls_count".into(), parsed_calls);
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_model_response_with_raw_content_gets_todays_names() {
        let mut event = json!({"type": "ModelResponse", "turn": 1, "content": "Adding.",
            "tool_calls_count": 1, "raw_content": "Adding.<tool_call>…", "native_tool_calls_count": 0});
        upgrade(&mut event);
        assert_eq!(
            event,
            json!({"type": "ModelResponse", "turn": 1, "content": "Adding.<tool_call>…",
                "tool_calls_count": 0, "parsed_content": "Adding.", "parsed_tool_calls_count": 1})
        );
    }

    #[test]
    fn an_older_model_response_keeps_its_parsed_values_in_both_places() {
        let mut event = json!({"type": "ModelResponse", "content": "hi", "tool_calls_count": 2});
        upgrade(&mut event);
        assert_eq!(
            event,
            json!({"type": "ModelResponse", "content": "hi", "tool_calls_count": 2,
                "parsed_content": "hi", "parsed_tool_calls_count": 2})
        );
    }

    #[test]
    fn todays_events_and_other_types_are_left_alone() {
        for original in [
            json!({"type": "ModelResponse", "content": "a<x>", "tool_calls_count": 0,
                "parsed_content": "a", "parsed_tool_calls_count": 1}),
            json!({"type": "TurnComplete", "tool_calls_count": 2}),
            json!("not an event"),
        ] {
            let mut event = original.clone();
            upgrade(&mut event);
            assert_eq!(event, original);
        }
    }
}
