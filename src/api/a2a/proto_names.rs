//! ProtoJSON's field names on input: a ProtoJSON parser accepts a field by
//! its proto name (`page_size`, `task_id`) as well as by its JSON name
//! (`pageSize`, `taskId`), and clients generated from the proto (the A2A
//! TCK among them) send either. The wire types (`a2a-lf`) know the JSON
//! names, so a call's parameters are renamed to them before they are read.
//! Knows nothing of the methods: a rename of keys, nothing more.

use serde_json::{Map, Value};

/// Fields whose values are the client's own objects (`google.protobuf.Struct`
/// or `Value`): their keys are data, never renamed.
const OPAQUE: [&str; 2] = ["metadata", "data"];

/// `value` with every proto field name (`snake_case`) renamed to its JSON
/// name (`lowerCamelCase`), at every depth except inside [`OPAQUE`] fields.
/// A field sent under both names keeps the JSON name's value.
pub fn json_names(value: Value) -> Value {
    match value {
        Value::Object(fields) => {
            let mut renamed = Map::new();
            for (key, value) in &fields {
                let name = lower_camel(key);
                if name != *key && fields.contains_key(&name) {
                    continue;
                }
                let value = match OPAQUE.contains(&key.as_str()) {
                    true => value.clone(),
                    false => json_names(value.clone()),
                };
                renamed.insert(name, value);
            }
            Value::Object(renamed)
        }
        Value::Array(items) => Value::Array(items.into_iter().map(json_names).collect()),
        other => other,
    }
}

/// `page_size` → `pageSize`; a name that is not a proto field name
/// (no inner `_`, capitals, a leading `_`) is left as it is.
fn lower_camel(name: &str) -> String {
    let proto_name = name.contains('_')
        && !name.starts_with('_')
        && name
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if !proto_name {
        return name.to_string();
    }
    let mut out = String::with_capacity(name.len());
    let mut upper = false;
    for c in name.chars() {
        match (c, upper) {
            ('_', _) => upper = true,
            (c, true) => {
                out.push(c.to_ascii_uppercase());
                upper = false;
            }
            (c, false) => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn proto_names_become_json_names_except_in_the_clients_own_objects() {
        // The expected value below repeats `sent` in its other names, kept
        // so: the two side by side are the rule.
        let sent = json!({
            "page_size": 5,
            "context_id": "c",
            "message": {"message_id": "m", "task_id": "t", "parts": [{"text": "x", "media_type": "text/plain"}],
                        "metadata": {"trace_parent": "kept"}},
            "history_length": 2,
            "pageToken": "p",
        });
        assert_eq!(
            json_names(sent),
            json!({
                "pageSize": 5,
                "contextId": "c",
                "message": {"messageId": "m", "taskId": "t", "parts": [{"text": "x", "mediaType": "text/plain"}],
                            "metadata": {"trace_parent": "kept"}},
                "historyLength": 2,
                "pageToken": "p",
            })
        );
        // Both names: the JSON name's value.
        assert_eq!(
            json_names(json!({"page_size": 1, "pageSize": 2})),
            json!({"pageSize": 2})
        );
    }
}
