//! What a reload changed, as a pure function of two inventories.
//!
//! An [`Inventory`] names every input a snapshot was built from, kind by
//! kind, each with a fingerprint (a digest, or a canonical rendering of the
//! setting); [`diff`] compares two of them. Nothing here reads files or
//! touches the running daemon, so every kind of change is unit-tested.

use std::collections::BTreeMap;

use crate::events::daemon::{InputKind, KindChanges};

/// Every input of a snapshot: kind → name → fingerprint.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Inventory {
    kinds: BTreeMap<InputKind, BTreeMap<String, String>>,
}

impl Inventory {
    pub fn insert(&mut self, kind: InputKind, name: impl Into<String>, fingerprint: String) {
        self.kinds
            .entry(kind)
            .or_default()
            .insert(name.into(), fingerprint);
    }

    /// The fingerprint of one input, if present.
    pub fn get(&self, kind: InputKind, name: &str) -> Option<&str> {
        self.kinds
            .get(&kind)
            .and_then(|names| names.get(name))
            .map(String::as_str)
    }
}

/// The non-empty changes from `before` to `after`, in [`InputKind`] order,
/// names sorted.
pub fn diff(before: &Inventory, after: &Inventory) -> Vec<KindChanges> {
    let empty = BTreeMap::new();
    InputKind::ALL
        .iter()
        .filter_map(|&kind| {
            let old = before.kinds.get(&kind).unwrap_or(&empty);
            let new = after.kinds.get(&kind).unwrap_or(&empty);
            let mut changes = KindChanges {
                kind,
                ..Default::default()
            };
            for (name, fingerprint) in new {
                match old.get(name) {
                    None => changes.added.push(name.clone()),
                    Some(previous) if previous != fingerprint => changes.changed.push(name.clone()),
                    Some(_) => {}
                }
            }
            changes.removed = old
                .keys()
                .filter(|name| !new.contains_key(*name))
                .cloned()
                .collect();
            (!changes.is_empty()).then_some(changes)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inventory(entries: &[(InputKind, &str, &str)]) -> Inventory {
        let mut inventory = Inventory::default();
        for (kind, name, fingerprint) in entries {
            inventory.insert(*kind, *name, fingerprint.to_string());
        }
        inventory
    }

    /// For each kind on its own: one input added, one changed, one removed,
    /// one untouched — and no other kind reported.
    #[test]
    fn every_kind_reports_added_changed_and_removed() {
        for kind in InputKind::ALL {
            let before = inventory(&[
                (kind, "same", "1"),
                (kind, "edited", "1"),
                (kind, "gone", "1"),
            ]);
            let after = inventory(&[
                (kind, "same", "1"),
                (kind, "edited", "2"),
                (kind, "new", "1"),
            ]);
            assert_eq!(
                diff(&before, &after),
                vec![KindChanges {
                    kind,
                    added: vec!["new".into()],
                    changed: vec!["edited".into()],
                    removed: vec!["gone".into()],
                }],
                "{kind:?}"
            );
        }
    }

    #[test]
    fn identical_inventories_have_no_changes() {
        let all: Vec<(InputKind, &str, &str)> =
            InputKind::ALL.iter().map(|k| (*k, "x", "f")).collect();
        assert!(diff(&inventory(&all), &inventory(&all)).is_empty());
        assert!(diff(&Inventory::default(), &Inventory::default()).is_empty());
    }

    #[test]
    fn changes_of_several_kinds_come_in_kind_order() {
        let before = inventory(&[
            (InputKind::LogFilter, "filter", "info"),
            (InputKind::Endpoint, "local", "http://a"),
        ]);
        let after = inventory(&[
            (InputKind::LogFilter, "filter", "debug"),
            (InputKind::Endpoint, "local", "http://b"),
            (InputKind::Bundle, "calc", "d1"),
        ]);
        let kinds: Vec<InputKind> = diff(&before, &after).iter().map(|c| c.kind).collect();
        assert_eq!(
            kinds,
            [InputKind::Bundle, InputKind::Endpoint, InputKind::LogFilter]
        );
    }

    #[test]
    fn the_same_name_in_two_kinds_is_two_inputs() {
        let before = inventory(&[(InputKind::ToolPlugin, "echo", "a")]);
        let after = inventory(&[(InputKind::ObserverPlugin, "echo", "a")]);
        let changes = diff(&before, &after);
        assert_eq!(changes.len(), 2);
        assert_eq!(changes[0].removed, ["echo"]);
        assert_eq!(changes[1].added, ["echo"]);
    }
}
