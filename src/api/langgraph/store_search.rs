//! What a store search and a namespace listing keep, as LangGraph's store
//! does: a `filter` on an item's value (a field equal to a value, or
//! compared by `$eq`, `$ne`, `$gt`, `$gte`, `$lt`, `$lte`), a text `query`
//! ranking items by the share of its words their indexed fields hold (the
//! daemon keeps no embeddings: this is its text search), and namespaces
//! matched by prefix and suffix (`*` any one label) and cut to a depth.
//! Pure: the routes (`store`) read the items and ask these.

use std::cmp::Ordering;
use std::collections::BTreeSet;

use serde_json::{Map, Value};

use crate::queue::StoredItem;

/// Why a filter cannot be used, naming its field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    #[error(
        "filter.{field}: {operator:?} is not an operator; use $eq, $ne, $gt, $gte, $lt or $lte (or the value itself for equality)"
    )]
    Operator { field: String, operator: String },
    #[error(
        "filter.{field}: an object mixes operators and fields; write either {{\"$gt\": 1}} or the object to compare with"
    )]
    Mixed { field: String },
}

#[derive(Debug, Clone, PartialEq)]
enum Condition {
    Eq(Value),
    Ne(Value),
    /// The value compares as this ordering (`$gt`: Greater) or as one of
    /// two (`$gte`: Greater or Equal).
    Order(Ordering, Option<Ordering>, Value),
}

/// A search's `filter`, checked.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Filter(Vec<(String, Condition)>);

impl Filter {
    /// Reads LangGraph's filter: each field equal to a value, or an object
    /// of operators.
    pub fn parse(filter: &Map<String, Value>) -> Result<Self, FilterError> {
        let mut conditions = Vec::new();
        for (field, wanted) in filter {
            let operators = match wanted {
                Value::Object(object) if object.keys().any(|k| k.starts_with('$')) => object,
                other => {
                    conditions.push((field.clone(), Condition::Eq(other.clone())));
                    continue;
                }
            };
            for (operator, operand) in operators {
                if !operator.starts_with('$') {
                    return Err(FilterError::Mixed {
                        field: field.clone(),
                    });
                }
                let operand = operand.clone();
                let condition = match operator.as_str() {
                    "$eq" => Condition::Eq(operand),
                    "$ne" => Condition::Ne(operand),
                    "$gt" => Condition::Order(Ordering::Greater, None, operand),
                    "$gte" => Condition::Order(Ordering::Greater, Some(Ordering::Equal), operand),
                    "$lt" => Condition::Order(Ordering::Less, None, operand),
                    "$lte" => Condition::Order(Ordering::Less, Some(Ordering::Equal), operand),
                    _ => {
                        return Err(FilterError::Operator {
                            field: field.clone(),
                            operator: operator.clone(),
                        });
                    }
                };
                conditions.push((field.clone(), condition));
            }
        }
        Ok(Self(conditions))
    }

    /// Whether it keeps every item.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether `value` meets every condition. A field is found by its
    /// name, else by a dotted path into nested objects (`author.name`).
    pub fn matches(&self, value: &Map<String, Value>) -> bool {
        self.0.iter().all(|(field, condition)| {
            let found = field_of(value, field);
            match condition {
                Condition::Eq(wanted) => found == Some(wanted),
                Condition::Ne(unwanted) => found != Some(unwanted),
                Condition::Order(one, other, operand) => found
                    .and_then(|found| compare(found, operand))
                    .is_some_and(|order| order == *one || Some(order) == *other),
            }
        })
    }
}

fn field_of<'v>(value: &'v Map<String, Value>, field: &str) -> Option<&'v Value> {
    if let Some(found) = value.get(field) {
        return Some(found);
    }
    let mut parts = field.split('.');
    let mut found = value.get(parts.next()?)?;
    for part in parts {
        found = found.as_object()?.get(part)?;
    }
    Some(found)
}

/// Numbers with numbers, texts with texts; anything else is incomparable.
fn compare(found: &Value, operand: &Value) -> Option<Ordering> {
    match (found, operand) {
        (Value::Number(a), Value::Number(b)) => a.as_f64()?.partial_cmp(&b.as_f64()?),
        (Value::String(a), Value::String(b)) => Some(a.cmp(b)),
        _ => None,
    }
}

/// The words of `text`, lower-cased: runs of letters and digits.
fn words(text: &str) -> BTreeSet<String> {
    text.split(|c: char| !c.is_alphanumeric())
        .filter(|word| !word.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// The texts of `value` at `path` (`a.b`, `a[*].b`, `a[0]`), every text
/// and number beneath it.
fn texts_at(value: &Value, path: &str, out: &mut Vec<String>) {
    if path.is_empty() {
        return leaves(value, out);
    }
    let (head, rest) = path.split_once('.').unwrap_or((path, ""));
    let (name, index) = match head.split_once('[') {
        Some((name, index)) => (name, Some(index.trim_end_matches(']'))),
        None => (head, None),
    };
    let Some(field) = value.get(name) else {
        return;
    };
    match (index, field) {
        (None, field) => texts_at(field, rest, out),
        (Some("*"), Value::Array(items)) => {
            for item in items {
                texts_at(item, rest, out);
            }
        }
        (Some(at), Value::Array(items)) => {
            if let Some(item) = at.parse::<usize>().ok().and_then(|at| items.get(at)) {
                texts_at(item, rest, out);
            }
        }
        _ => {}
    }
}

fn leaves(value: &Value, out: &mut Vec<String>) {
    match value {
        Value::String(text) => out.push(text.clone()),
        Value::Number(number) => out.push(number.to_string()),
        Value::Bool(flag) => out.push(flag.to_string()),
        Value::Array(items) => items.iter().for_each(|item| leaves(item, out)),
        Value::Object(fields) => fields.values().for_each(|field| leaves(field, out)),
        Value::Null => {}
    }
}

/// How well `item` answers `query`: the share of the query's words its
/// indexed fields hold (0 to 1), or none for an item put with
/// `index: false` (never searched by text).
pub fn score(query: &str, item: &StoredItem) -> Option<f64> {
    let asked = words(query);
    let value = Value::Object(item.value.clone());
    let mut texts = Vec::new();
    match &item.index {
        Value::Bool(false) => return None,
        Value::Array(paths) => {
            for path in paths.iter().filter_map(Value::as_str) {
                texts_at(&value, path, &mut texts);
            }
        }
        _ => leaves(&value, &mut texts),
    }
    if asked.is_empty() {
        return Some(0.0);
    }
    let held: BTreeSet<String> = texts.iter().flat_map(|text| words(text)).collect();
    let found = asked.iter().filter(|word| held.contains(*word)).count();
    Some(found as f64 / asked.len() as f64)
}

/// A namespace listing's conditions.
#[derive(Debug, Clone, Default)]
pub struct NamespaceMatch<'a> {
    pub prefix: &'a [String],
    pub suffix: &'a [String],
    pub max_depth: Option<usize>,
}

fn label_matches(pattern: &str, label: &str) -> bool {
    pattern == "*" || pattern == label
}

/// The namespaces (`stored`: labels joined by `separator`, in order) that
/// meet `conditions`, each cut to `max_depth` labels, once each, in order.
pub fn namespaces(
    stored: &[String],
    separator: char,
    conditions: &NamespaceMatch<'_>,
) -> Vec<Vec<String>> {
    let mut kept = BTreeSet::new();
    for namespace in stored {
        let labels: Vec<&str> = namespace.split(separator).collect();
        let prefixed = labels.len() >= conditions.prefix.len()
            && conditions
                .prefix
                .iter()
                .zip(&labels)
                .all(|(pattern, label)| label_matches(pattern, label));
        let suffixed = labels.len() >= conditions.suffix.len()
            && conditions
                .suffix
                .iter()
                .rev()
                .zip(labels.iter().rev())
                .all(|(pattern, label)| label_matches(pattern, label));
        if prefixed && suffixed {
            let depth = conditions.max_depth.unwrap_or(usize::MAX).min(labels.len());
            kept.insert(
                labels[..depth]
                    .iter()
                    .map(|l| l.to_string())
                    .collect::<Vec<_>>(),
            );
        }
    }
    kept.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn object(value: Value) -> Map<String, Value> {
        value.as_object().cloned().unwrap_or_default()
    }

    fn item(value: Value, index: Value) -> StoredItem {
        StoredItem {
            namespace: "docs".into(),
            key: "k".into(),
            value: object(value),
            index,
            created_at: 0,
            updated_at: 0,
            ttl_ms: None,
        }
    }

    #[test]
    fn a_filter_compares_fields_by_value_and_by_operator() {
        let doc = object(json!({"author": {"name": "Ada"}, "year": 1843, "kind": "note"}));
        let holds = |filter: Value| Filter::parse(&object(filter)).unwrap().matches(&doc);
        assert!(holds(json!({"kind": "note"})));
        assert!(!holds(json!({"kind": "book"})));
        assert!(holds(json!({"author": {"name": "Ada"}})));
        assert!(holds(json!({"author.name": "Ada"})));
        assert!(holds(json!({"year": {"$gte": 1843, "$lt": 1900}})));
        assert!(!holds(json!({"year": {"$gt": 1843}})));
        assert!(holds(json!({"kind": {"$ne": "book"}})));
        assert!(holds(json!({"missing": {"$ne": 1}})));
        assert!(
            !holds(json!({"kind": {"$gt": 3}})),
            "a text is not above a number"
        );
        assert!(holds(json!({})));
    }

    #[test]
    fn a_filter_with_an_unknown_operator_or_mixed_keys_is_refused_by_name() {
        let refused = |filter: Value| Filter::parse(&object(filter)).unwrap_err().to_string();
        assert!(refused(json!({"year": {"$in": [1]}})).contains("filter.year: \"$in\""));
        assert!(refused(json!({"year": {"$gt": 1, "x": 2}})).contains("filter.year"));
    }

    #[test]
    fn a_query_ranks_by_the_share_of_its_words_the_indexed_fields_hold() {
        let doc = json!({"title": "Durable agents", "body": "Jobs end once", "tags": ["rust"]});
        let all = item(doc.clone(), Value::Null);
        assert_eq!(score("durable RUST", &all), Some(1.0));
        assert_eq!(score("durable python", &all), Some(0.5));
        let titled = item(doc.clone(), json!(["title"]));
        assert_eq!(score("durable rust", &titled), Some(0.5));
        let tagged = item(doc.clone(), json!(["tags[*]"]));
        assert_eq!(score("rust", &tagged), Some(1.0));
        assert_eq!(score("rust", &item(doc, json!(false))), None);
    }

    #[test]
    fn namespaces_are_matched_by_prefix_and_suffix_and_cut_to_a_depth() {
        let stored: Vec<String> = ["a.b.c", "a.b.d", "a.x", "b.b.c"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let list = |prefix: &[&str], suffix: &[&str], max_depth| {
            let prefix: Vec<String> = prefix.iter().map(|s| s.to_string()).collect();
            let suffix: Vec<String> = suffix.iter().map(|s| s.to_string()).collect();
            let conditions = NamespaceMatch {
                prefix: &prefix,
                suffix: &suffix,
                max_depth,
            };
            namespaces(&stored, '.', &conditions)
                .into_iter()
                .map(|labels| labels.join("."))
                .collect::<Vec<_>>()
        };
        assert_eq!(list(&["a"], &[], None), ["a.b.c", "a.b.d", "a.x"]);
        assert_eq!(list(&["a"], &[], Some(2)), ["a.b", "a.x"]);
        assert_eq!(list(&["*", "b"], &["c"], None), ["a.b.c", "b.b.c"]);
        assert_eq!(list(&[], &[], Some(1)), ["a", "b"]);
        assert!(list(&["a", "b", "c", "d"], &[], None).is_empty());
    }
}
