//! The output items of a response's calls: those its job runs itself are
//! `mcp_call`, the Responses API's item for a tool the server ran, with
//! its `output`; only a call of one of the caller's own tools (which the
//! job is parked on) is a `function_call`, the item the *client* runs and
//! answers with `function_call_output` — a client such as the OpenAI
//! Agents SDK looks a `function_call`'s tool up among its own and fails
//! ("Tool add not found") for one the daemon ran.

use serde_json::{Value, json};

use crate::approval::CallerCall;

/// The id of the item for call `call_id` (stable across restarts: the
/// call's own id).
pub fn call_item_id(call_id: &str) -> String {
    format!("mcp_{call_id}")
}

/// The item of a call as it starts: `server_label` is the bundle whose
/// tool it is (as approval requests have it), `arguments` its JSON text.
pub fn started(call_id: &str, bundle: &str, tool: &str, arguments: &str) -> Value {
    json!({"type": "mcp_call", "id": call_item_id(call_id), "call_id": call_id,
           "server_label": bundle, "name": tool, "arguments": arguments,
           "output": null, "error": null, "status": "in_progress"})
}

/// Puts a call's result into its item: `output` (the stored preview of
/// the tool's output) when it worked, else `error` in the API's
/// `mcp_tool_execution_error` shape with the same text and the daemon's
/// error kind.
pub fn finish(item: &mut Value, is_error: bool, output: &str, error_type: Option<&str>) {
    if is_error {
        item["status"] = json!("failed");
        item["error"] = json!({"type": "mcp_tool_execution_error",
                               "content": [{"type": "text", "text": output}],
                               "error_type": error_type});
    } else {
        item["status"] = json!("completed");
        item["output"] = json!(output);
    }
}

/// The `function_call` item of a caller's call the job waits on.
pub fn function_call(call: &CallerCall) -> Value {
    json!({"type": "function_call", "id": format!("fc_{}", call.call_id),
           "call_id": call.call_id, "name": call.tool,
           "arguments": call.arguments.to_string(), "status": "completed"})
}

/// A call the job ended without an answer for (cancelled, failed, killed
/// and never resumed): the item is `incomplete`.
pub fn abandon(item: &mut Value) {
    item["status"] = json!("incomplete");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_call_item_ends_completed_or_failed() {
        let mut item = started("c1", "b", "add", "{\"a\":1}");
        assert_eq!(item["type"], "mcp_call");
        assert_eq!(item["status"], "in_progress");
        finish(&mut item, false, "2", None);
        assert_eq!(
            (&item["status"], &item["output"]),
            (&json!("completed"), &json!("2"))
        );
        let mut item = started("c2", "b", "add", "{}");
        finish(&mut item, true, "bad arguments", Some("bad_args"));
        assert_eq!(item["status"], "failed");
        assert_eq!(item["output"], Value::Null);
        assert_eq!(item["error"]["type"], "mcp_tool_execution_error");
    }
}
