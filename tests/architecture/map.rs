//! The prose of the map, checked as its rules block is: the floors picture
//! (a ```` ```floors ```` block) and the list of what each module owns.
//!
//! The floors block reads, one floor a line, highest first:
//!
//! ```text
//! floor 12  daemon            # what the floor holds (optional)
//!           more modules      # an indented line continues the floor above it
//! exception: A -> B           # reason: an arrow allowed to stay on or climb a floor
//!                             # (must still occur)
//! ```
//!
//! A module's floor is true when every module it imports stands on a lower
//! floor. Its description is a top-level bullet of "What each module owns"
//! that names it in backticks before the bullet's first colon.

use std::collections::{BTreeMap, BTreeSet};

use super::{DOC, Reference, fail, load, root};

const FLOORS: &str = "```floors";
const OWNS: &str = "## What each module owns";

/// The floors block: each module's floor and the arrows excused from it.
#[derive(Debug, Default)]
struct Floors {
    /// Module → (floor, line of the document).
    floor: BTreeMap<String, (u32, usize)>,
    /// A module named on two floors, with the second line.
    twice: Vec<(String, usize)>,
    /// (from, to, reason).
    exceptions: Vec<(String, String, String)>,
}

fn parse_floors(doc: &str) -> Floors {
    let mut floors = Floors::default();
    let mut lines = doc.lines().enumerate();
    assert!(
        lines.by_ref().any(|(_, l)| l.trim() == FLOORS),
        "{DOC} has no {FLOORS} block: the floors picture lives there"
    );
    let mut current: Option<u32> = None;
    for (n, raw) in lines {
        let n = n + 1;
        if raw.trim_start().starts_with("```") {
            return floors;
        }
        let (body, reason) = match raw.split_once('#') {
            Some((b, r)) => (b, r.trim()),
            None => (raw, ""),
        };
        if body.trim().is_empty() {
            continue;
        }
        if let Some(rest) = body.trim().strip_prefix("exception:") {
            let (a, b) = rest.split_once("->").unwrap_or_else(|| bad(n, raw));
            floors.exceptions.push((
                a.trim().to_string(),
                b.trim().to_string(),
                format!("{DOC}:{n}: {reason}"),
            ));
            continue;
        }
        let names = if let Some(rest) = body.trim().strip_prefix("floor ") {
            let rest = rest.trim_start();
            let (number, names) = rest.split_once(char::is_whitespace).unwrap_or((rest, ""));
            current = Some(number.parse().unwrap_or_else(|_| bad(n, raw)));
            names
        } else if body.starts_with(char::is_whitespace) && current.is_some() {
            body
        } else {
            bad(n, raw)
        };
        let floor = current.unwrap_or_else(|| bad(n, raw));
        for name in names.split_whitespace() {
            if floors.floor.insert(name.to_string(), (floor, n)).is_some() {
                floors.twice.push((name.to_string(), n));
            }
        }
    }
    panic!("{DOC}: the {FLOORS} block is not closed");
}

fn bad(n: usize, raw: &str) -> ! {
    panic!("{DOC}:{n}: cannot read this floors line: {raw}")
}

/// What is wrong with the picture: a module missing or unknown, a module on
/// two floors, an arrow that does not point down (unless excused), an
/// exception that no longer occurs.
fn floor_problems(floors: &Floors, modules: &BTreeSet<String>, refs: &[Reference]) -> Vec<String> {
    let mut problems = Vec::new();
    for m in modules {
        if !floors.floor.contains_key(m) {
            problems.push(format!("module `{m}` (src/) stands on no floor of {DOC}"));
        }
    }
    for (m, (_, n)) in &floors.floor {
        if !modules.contains(m) {
            problems.push(format!("{DOC}:{n}: `{m}` is not a module under src/"));
        }
    }
    for (m, n) in &floors.twice {
        problems.push(format!("{DOC}:{n}: `{m}` stands on two floors"));
    }
    let mut excused = vec![false; floors.exceptions.len()];
    let mut seen = BTreeSet::new();
    for r in refs {
        let (Some((from, _)), Some((to, _))) = (floors.floor.get(&r.from), floors.floor.get(&r.to))
        else {
            continue;
        };
        if to < from {
            continue;
        }
        let exception = floors
            .exceptions
            .iter()
            .position(|(a, b, _)| *a == r.from && *b == r.to);
        if let Some(k) = exception {
            excused[k] = true;
        } else if seen.insert((r.from.clone(), r.to.clone())) {
            problems.push(format!(
                "{}: `{}` (floor {from}) imports `{}` (floor {to}), which is not below it",
                r.place(),
                r.from,
                r.to
            ));
        }
    }
    for (seen, (a, b, reason)) in excused.iter().zip(&floors.exceptions) {
        if !seen {
            problems.push(format!(
                "the floor exception `{a} -> {b}` no longer occurs ({reason}): delete its line from {DOC}"
            ));
        }
    }
    problems
}

/// The lowest floor each module can stand on: one above the highest module
/// it imports (for the failure message, so a fix can be copied).
fn lowest_floors(modules: &BTreeSet<String>, refs: &[Reference]) -> String {
    let mut imports: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for r in refs {
        imports.entry(&r.from).or_default().insert(&r.to);
    }
    let mut floor: BTreeMap<&str, u32> = BTreeMap::new();
    // A module's floor is known once its imports' are; with no circle
    // between modules (its own test) every module gets one.
    while floor.len() < modules.len() {
        let before = floor.len();
        for m in modules {
            if floor.contains_key(m.as_str()) {
                continue;
            }
            let below: Option<Vec<u32>> = imports
                .get(m.as_str())
                .into_iter()
                .flatten()
                .map(|t| floor.get(t).copied())
                .collect();
            if let Some(below) = below {
                floor.insert(m, below.iter().map(|f| f + 1).max().unwrap_or(0));
            }
        }
        if floor.len() == before {
            break;
        }
    }
    let mut by_floor: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    for (m, f) in floor {
        by_floor.entry(f).or_default().push(m);
    }
    by_floor
        .iter()
        .rev()
        .map(|(f, ms)| format!("floor {f:>2}  {}", ms.join("  ")))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every module stands on one floor of the picture, above every module it
/// imports.
#[test]
fn the_floors_picture_is_true() {
    let doc =
        std::fs::read_to_string(root().join(DOC)).unwrap_or_else(|e| panic!("read {DOC}: {e}"));
    let (_, modules, refs) = load();
    let problems = floor_problems(&parse_floors(&doc), &modules, &refs);
    if !problems.is_empty() {
        let lowest = lowest_floors(&modules, &refs);
        fail(
            &problems,
            &format!(
                "the floors of {DOC} (each module on its lowest floor would read:\n{lowest}\n)"
            ),
        );
    }
}

/// The modules "What each module owns" describes: the backticked names
/// before the first colon of each of its top-level bullets, with the line.
fn described(doc: &str) -> Vec<(String, usize)> {
    let mut out = Vec::new();
    let mut inside = false;
    for (n, line) in doc.lines().enumerate() {
        if line.starts_with("## ") {
            inside = line.trim() == OWNS;
            continue;
        }
        let Some(bullet) = line.strip_prefix("- ").filter(|_| inside) else {
            continue;
        };
        let head = bullet.split_once(':').map_or(bullet, |(h, _)| h);
        for (k, name) in head.split('`').enumerate() {
            if k % 2 == 1 {
                out.push((name.to_string(), n + 1));
            }
        }
    }
    out
}

/// Every module under `src/` is described once, and only modules are.
#[test]
fn every_module_is_described() {
    let doc =
        std::fs::read_to_string(root().join(DOC)).unwrap_or_else(|e| panic!("read {DOC}: {e}"));
    let (_, modules, _) = load();
    let names = described(&doc);
    assert!(!names.is_empty(), "{DOC} has no `{OWNS}` section");
    let mut problems = Vec::new();
    let mut seen = BTreeSet::new();
    for (name, n) in &names {
        if !modules.contains(name) {
            problems.push(format!(
                "{DOC}:{n}: `{name}` is described, but is no module under src/"
            ));
        } else if !seen.insert(name.as_str()) {
            problems.push(format!("{DOC}:{n}: `{name}` is described twice"));
        }
    }
    for m in modules.iter().filter(|m| !seen.contains(m.as_str())) {
        problems.push(format!(
            "module `{m}` (src/) is not described under `{OWNS}` in {DOC}: add a `- `{m}`: …` bullet"
        ));
    }
    fail(&problems, "the module descriptions of docs/ARCHITECTURE.md");
}

/// The floors check can fail: a module missing, one on its import's floor,
/// and an exception that excuses an arrow until the arrow is gone.
#[test]
fn a_module_on_the_wrong_floor_is_reported() {
    let arrow = |from: &str, to: &str| Reference {
        file: format!("src/{from}.rs"),
        line: 1,
        from: from.to_string(),
        to: to.to_string(),
        text: format!("use crate::{to};"),
    };
    let modules: BTreeSet<String> = ["a", "b", "c"].map(String::from).into();
    let refs = [arrow("b", "a"), arrow("c", "b")];
    let doc = "```floors\nfloor 1  b  c  # b and c\nfloor 0  a\n```\n";
    let problems = floor_problems(&parse_floors(doc), &modules, &refs);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with(
            "src/c.rs:1: `use crate::b;` (c -> b): `c` (floor 1) imports `b` (floor 1)"
        ),
        "{}",
        problems[0]
    );
    let doc =
        "```floors\nfloor 1  b\n         c\nfloor 0  a\nexception: c -> b  # being fixed\n```\n";
    assert_eq!(
        floor_problems(&parse_floors(doc), &modules, &refs),
        Vec::<String>::new()
    );
    let problems = floor_problems(&parse_floors(doc), &modules, &refs[..1]);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("`c -> b` no longer occurs")),
        "{problems:?}"
    );
    let doc = "```floors\nfloor 1  b\nfloor 0  a\n```\n";
    let problems = floor_problems(&parse_floors(doc), &modules, &refs);
    assert!(
        problems
            .iter()
            .any(|p| p == &format!("module `c` (src/) stands on no floor of {DOC}")),
        "{problems:?}"
    );
    assert_eq!(
        lowest_floors(&modules, &refs),
        "floor  2  c\nfloor  1  b\nfloor  0  a"
    );
}

/// The description check reads only the bullets' heads of its own section.
#[test]
fn descriptions_are_read_from_bullet_heads() {
    let doc = "## The modules\n- `x`: not here\n## What each module owns\n\n\
               - `hex`, `duration`: one hex spelling; `HumanDuration`\n  - `nested`: no\n\
               - `api`: axum routes (`sse.rs`)\n## Data flows\n- `y`: no\n";
    let names: Vec<String> = described(doc).into_iter().map(|(n, _)| n).collect();
    assert_eq!(names, ["hex", "duration", "api"]);
}
