//! Which bundle an assistant id names: the bundle's name, or the UUID
//! LangGraph's server derives from a graph's id (version 5, in its own
//! namespace), so a client that kept either finds the bundle; which of a
//! config's `configurable` keys are LangGraph's own ids, never a variable;
//! and so the variables a config and a context give a run.

use serde_json::{Map, Value};
use uuid::Uuid;

/// The namespace LangGraph's server derives a graph's default assistant id
/// in (`uuid5(NAMESPACE, graph_id)`).
const NAMESPACE: Uuid = Uuid::from_u128(0x6ba7b821_9dad_11d1_80b4_00c04fd430c8);

/// The assistant id of bundle `name`.
pub(super) fn assistant_id(name: &str) -> String {
    Uuid::new_v5(&NAMESPACE, name.as_bytes()).to_string()
}

/// Whether `id` names bundle `name`: its name, or its assistant id (any
/// case, as UUIDs are compared).
pub(super) fn names(id: &str, name: &str) -> bool {
    id == name
        || Uuid::parse_str(id).is_ok_and(|uuid| uuid == Uuid::new_v5(&NAMESPACE, name.as_bytes()))
}

/// The keys of `config.configurable` that are LangGraph's own, never a
/// variable of the job.
pub(super) fn langgraphs_own(key: &str) -> bool {
    matches!(
        key,
        "thread_id"
            | "checkpoint_id"
            | "checkpoint_ns"
            | "checkpoint_map"
            | "run_id"
            | "assistant_id"
            | "graph_id"
            | "user_id"
    ) || key.starts_with("langgraph_")
        || key.starts_with("__")
}

/// The variables a config's `configurable` values (LangGraph's own keys
/// aside) and then a context give a run: a run request's and a custom
/// assistant's alike.
pub(super) fn configured_variables(
    configurable: Option<&Value>,
    context: Option<&Map<String, Value>>,
) -> Map<String, Value> {
    let mut variables: Map<String, Value> = match configurable {
        Some(Value::Object(configurable)) => configurable
            .iter()
            .filter(|(key, _)| !langgraphs_own(key))
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect(),
        _ => Map::new(),
    };
    variables.extend(context.cloned().unwrap_or_default());
    variables
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The ids LangGraph's server gives the default assistants of graphs
    /// `agent` and `calc` (`uuid5(UUID("6ba7b821-…"), graph_id)` in
    /// Python).
    #[test]
    fn assistant_ids_are_langgraphs() {
        assert_eq!(
            assistant_id("agent"),
            "fe096781-5601-53d2-b2f6-0d3403f7e9ca"
        );
        assert!(names("agent", "agent"));
        assert!(names("FE096781-5601-53D2-B2F6-0D3403F7E9CA", "agent"));
        assert!(!names(&assistant_id("calc"), "agent"));
        assert!(!names("not-a-uuid", "agent"));
    }
}
