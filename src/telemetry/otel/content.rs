//! Message content, when opted in, as the GenAI conventions' log-based
//! event: one `gen_ai.client.inference.operation.details` log record per
//! model call, in the call's `chat` span's trace context, carrying the call's
//! attributes and its input and output messages in structured form (the
//! conventions' message schema: `role` and `parts`). Exported over OTLP logs
//! by the SDK's batch processor from its own thread (`logs`).

use std::time::SystemTime;

use opentelemetry::logs::{AnyValue, LogRecord, Logger, Severity};
use opentelemetry::trace::SpanContext;
use opentelemetry::{Key, KeyValue, Value as AttrValue};
use opentelemetry_sdk::logs::SdkLogger;
use serde_json::{Value, json};

/// The event's name, as the conventions fix it.
pub const EVENT_NAME: &str = "gen_ai.client.inference.operation.details";

/// The exporter of content events and the logger the span thread emits with.
pub(super) struct ContentEvents {
    logger: SdkLogger,
}

/// A model call's details, gathered from its request until its response.
pub(super) struct ChatDetails {
    /// The call's span attributes (request, then response).
    pub attributes: Vec<KeyValue>,
    input: AnyValue,
    output: Option<AnyValue>,
}

impl ChatDetails {
    pub fn new(attributes: Vec<KeyValue>, messages: &Value) -> Self {
        Self {
            attributes,
            input: any_value(&input_messages(messages)),
            output: None,
        }
    }

    /// The answer, as the one output message.
    pub fn answered(&mut self, text: Option<&str>, finish_reason: Option<&str>) {
        let parts = text
            .filter(|t| !t.is_empty())
            .map(|t| vec![json!({"type": "text", "content": t})])
            .unwrap_or_default();
        let message = json!([{
            "role": "assistant",
            "parts": parts,
            "finish_reason": finish_reason.unwrap_or("stop"),
        }]);
        self.output = Some(any_value(&message));
    }
}

impl ContentEvents {
    /// Content events through `logger` (the OTLP logs pipeline, `logs`).
    pub fn new(logger: SdkLogger) -> Self {
        Self { logger }
    }

    /// One call's details event, in its span's trace context.
    pub fn emit(&self, details: ChatDetails, span: &SpanContext, at: SystemTime) {
        let mut record = self.logger.create_log_record();
        record.set_event_name(EVENT_NAME);
        record.set_timestamp(at);
        record.set_observed_timestamp(SystemTime::now());
        record.set_severity_number(Severity::Info);
        record.set_trace_context(span.trace_id(), span.span_id(), Some(span.trace_flags()));
        for kv in details.attributes {
            record.add_attribute(kv.key, attribute(kv.value));
        }
        record.add_attribute("gen_ai.input.messages", details.input);
        if let Some(output) = details.output {
            record.add_attribute("gen_ai.output.messages", output);
        }
        self.logger.emit(record);
    }
}

/// A span attribute's value as a log attribute's.
fn attribute(value: AttrValue) -> AnyValue {
    match value {
        AttrValue::Bool(b) => AnyValue::Boolean(b),
        AttrValue::I64(i) => AnyValue::Int(i),
        AttrValue::F64(f) => AnyValue::Double(f),
        AttrValue::String(s) => AnyValue::String(s),
        AttrValue::Array(array) => match array {
            opentelemetry::Array::String(items) => items.into_iter().collect(),
            opentelemetry::Array::I64(items) => items.into_iter().collect(),
            opentelemetry::Array::F64(items) => items.into_iter().collect(),
            opentelemetry::Array::Bool(items) => items.into_iter().collect(),
            other => AnyValue::String(other.to_string().into()),
        },
        other => AnyValue::String(other.to_string().into()),
    }
}

/// JSON in the log data model's structured form (nulls left out).
fn any_value(value: &Value) -> AnyValue {
    match value {
        Value::Null => AnyValue::String("".into()),
        Value::Bool(b) => AnyValue::Boolean(*b),
        Value::Number(n) => match n.as_i64() {
            Some(i) => AnyValue::Int(i),
            None => AnyValue::Double(n.as_f64().unwrap_or_default()),
        },
        Value::String(s) => AnyValue::String(s.clone().into()),
        Value::Array(items) => AnyValue::ListAny(Box::new(items.iter().map(any_value).collect())),
        Value::Object(map) => AnyValue::Map(Box::new(
            map.iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (Key::from(k.clone()), any_value(v)))
                .collect(),
        )),
    }
}

/// The chat messages as sent (the OpenAI wire form) in the conventions'
/// input message schema: each a `role` with `parts` (text, tool calls,
/// tool call responses; other content parts as they are).
fn input_messages(messages: &Value) -> Value {
    let Some(messages) = messages.as_array() else {
        return json!([]);
    };
    let converted = messages.iter().map(|message| {
        let role = message["role"].as_str().unwrap_or("user");
        let mut parts = Vec::new();
        if role == "tool" {
            parts.push(json!({
                "type": "tool_call_response",
                "id": message["tool_call_id"],
                "response": message["content"],
            }));
        } else {
            match &message["content"] {
                Value::String(text) if !text.is_empty() => {
                    parts.push(json!({"type": "text", "content": text}))
                }
                Value::Array(items) => parts.extend(items.iter().map(content_part)),
                _ => {}
            }
        }
        for call in message["tool_calls"].as_array().into_iter().flatten() {
            let function = &call["function"];
            let arguments = match &function["arguments"] {
                Value::String(text) => serde_json::from_str(text).unwrap_or_else(|_| json!(text)),
                other => other.clone(),
            };
            parts.push(json!({
                "type": "tool_call",
                "id": call["id"],
                "name": function["name"],
                "arguments": arguments,
            }));
        }
        let mut converted = json!({"role": role, "parts": parts});
        if let Some(name) = message["name"].as_str() {
            converted["name"] = json!(name);
        }
        converted
    });
    Value::Array(converted.collect())
}

/// One part of a message's content array: text as a text part, anything
/// else kept (the schema's generic part is any object with a `type`).
fn content_part(part: &Value) -> Value {
    match (part["type"].as_str(), part["text"].as_str()) {
        (Some("text"), Some(text)) => json!({"type": "text", "content": text}),
        _ => part.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openai_messages_become_role_and_parts() {
        let sent = json!([
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": [{"type": "text", "text": "hi"}, {"type": "image_url", "image_url": {"url": "u"}}]},
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{\"a\": 1}"}}
            ]},
            {"role": "tool", "tool_call_id": "c1", "content": "2"},
        ]);
        assert_eq!(
            input_messages(&sent),
            json!([
                {"role": "system", "parts": [{"type": "text", "content": "be brief"}]},
                {"role": "user", "parts": [
                    {"type": "text", "content": "hi"},
                    {"type": "image_url", "image_url": {"url": "u"}},
                ]},
                {"role": "assistant", "parts": [
                    {"type": "tool_call", "id": "c1", "name": "add", "arguments": {"a": 1}}
                ]},
                {"role": "tool", "parts": [{"type": "tool_call_response", "id": "c1", "response": "2"}]},
            ])
        );
    }
}
