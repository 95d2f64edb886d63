//! Integer bounds the document states from the Rust types that read them.
//! schemars says an `u32` field is `{"type": "integer", "format": "uint32",
//! "minimum": 0}`; JSON Schema does not know the format, so a client
//! reading the document may send 2^40 and get a 422 it was never told of.
//! Every integer schema with a sized format gets the type's range (a
//! narrower range a field gives, `#[schemars(range(..))]`, is kept).

use schemars::Schema;
use schemars::transform::{Transform, transform_subschemas};
use serde_json::Value;

/// The transform every schema of the document goes through (`begin()`
/// installs it in the generator; `add_fields_as` runs it on parameters,
/// which aide copies out of their struct before the generator's transforms).
#[derive(Clone, Copy, Debug, Default)]
pub(super) struct IntegerBounds;

impl Transform for IntegerBounds {
    fn transform(&mut self, schema: &mut Schema) {
        bound(schema);
        transform_subschemas(self, schema);
    }
}

/// The range of an integer `format` schemars writes, as JSON numbers.
fn range_of(format: &str) -> Option<(Value, Value)> {
    let (low, high): (i128, i128) = match format {
        "int8" => (i8::MIN.into(), i8::MAX.into()),
        "uint8" => (0, u8::MAX.into()),
        "int16" => (i16::MIN.into(), i16::MAX.into()),
        "uint16" => (0, u16::MAX.into()),
        "int32" => (i32::MIN.into(), i32::MAX.into()),
        "uint32" => (0, u32::MAX.into()),
        "int64" | "int" => (i64::MIN.into(), i64::MAX.into()),
        "uint64" | "uint" => (0, u64::MAX.into()),
        _ => return None,
    };
    let number = |n: i128| match i64::try_from(n) {
        Ok(n) => Value::from(n),
        Err(_) => Value::from(u64::try_from(n).unwrap_or(u64::MAX)),
    };
    Some((number(low), number(high)))
}

fn bound(schema: &mut Schema) {
    let Some(object) = schema.as_object_mut() else {
        return;
    };
    let is_integer = match object.get("type") {
        Some(Value::String(kind)) => kind == "integer",
        Some(Value::Array(kinds)) => kinds.iter().any(|k| k == "integer"),
        _ => false,
    };
    let range = object
        .get("format")
        .and_then(Value::as_str)
        .and_then(range_of);
    let (true, Some((low, high))) = (is_integer, range) else {
        return;
    };
    // A narrower bound the field states stays; a wider one (schemars'
    // `minimum: 0` for an unsigned type is never wider) is replaced.
    let tighter = |existing: Option<&Value>, limit: &Value, keep_if_greater: bool| {
        let (Some(existing), Some(limit)) = (existing.and_then(Value::as_f64), limit.as_f64())
        else {
            return false;
        };
        if keep_if_greater {
            existing >= limit
        } else {
            existing <= limit
        }
    };
    if !tighter(object.get("minimum"), &low, true) {
        object.insert("minimum".into(), low);
    }
    if !tighter(object.get("maximum"), &high, false) {
        object.insert("maximum".into(), high);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use schemars::json_schema;

    fn bounded(mut schema: Schema) -> Value {
        IntegerBounds.transform(&mut schema);
        schema.to_value()
    }

    #[test]
    fn an_integer_gets_its_types_range() {
        let schema = bounded(json_schema!({"type": "integer", "format": "uint32", "minimum": 0}));
        assert_eq!(schema["minimum"], 0);
        assert_eq!(schema["maximum"], u32::MAX);
        let schema = bounded(json_schema!({"type": ["integer", "null"], "format": "int64"}));
        assert_eq!(schema["minimum"], i64::MIN);
        assert_eq!(schema["maximum"], i64::MAX);
    }

    #[test]
    fn a_narrower_range_stays_and_nested_schemas_are_bounded() {
        let schema = bounded(json_schema!({
            "type": "object",
            "properties": {
                "limit": {"type": "integer", "format": "uint32", "minimum": 1, "maximum": 1000},
                "at": {"type": "integer", "format": "uint16"}
            }
        }));
        assert_eq!(schema["properties"]["limit"]["minimum"], 1);
        assert_eq!(schema["properties"]["limit"]["maximum"], 1000);
        assert_eq!(schema["properties"]["at"]["maximum"], u16::MAX);
    }

    #[test]
    fn other_formats_and_types_are_left_alone() {
        let schema = bounded(json_schema!({"type": "number", "format": "double"}));
        assert!(schema.get("maximum").is_none());
        let schema = bounded(json_schema!({"type": "string", "format": "uint32"}));
        assert!(schema.get("maximum").is_none());
    }
}
