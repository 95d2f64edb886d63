//! `docs/differences.md` promises that every behaviour of the originals it
//! calls matched is held by a test it names. This holds the page to it: each
//! row of a `### Matched` table names at least one test function (or
//! inherits its row above's with `same`), and every file and function it
//! names exists — a renamed or deleted test fails here, not silently in the
//! document.
//!
//! A test cell is read as its backticked spans in order: a span with a `/`
//! is a file (relative to the repository), a span that is an identifier is
//! a test function in the file named before it. `same` at the start of a
//! cell brings the row above's tests.

use std::fs;
use std::path::Path;

const DOC: &str = "docs/differences.md";

/// One test reference: a file and, when named, a function in it.
#[derive(Debug, Clone)]
struct TestRef {
    file: String,
    function: Option<String>,
}

/// A matched row: its line number, its behaviour cell and its tests.
struct Row {
    line: usize,
    behaviour: String,
    tests: Vec<TestRef>,
}

#[test]
fn every_matched_behaviour_names_a_test_that_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let doc = fs::read_to_string(root.join(DOC)).expect("docs/differences.md is readable");
    let rows = matched_rows(&doc);
    assert!(
        rows.len() >= 20,
        "{DOC}: found only {} matched rows; did the tables' format change?",
        rows.len()
    );
    let mut problems = Vec::new();
    for row in &rows {
        let where_ = format!("{DOC}:{} ({})", row.line, row.behaviour);
        if !row.tests.iter().any(|t| t.function.is_some()) {
            problems.push(format!("{where_}: names no test function"));
        }
        for test in &row.tests {
            let path = root.join(&test.file);
            let Ok(source) = fs::read_to_string(&path) else {
                problems.push(format!("{where_}: `{}` does not exist", test.file));
                continue;
            };
            match &test.function {
                Some(name) if !defines_fn(&source, name) => problems.push(format!(
                    "{where_}: `{}` has no function `{name}`",
                    test.file
                )),
                None if !source.contains("#[test]") && !source.contains("#[tokio::test") => {
                    problems.push(format!("{where_}: `{}` holds no test", test.file))
                }
                _ => {}
            }
        }
    }
    assert!(
        problems.is_empty(),
        "matched rows whose tests are missing (name the test that holds the behaviour, or move the row to `Different`):\n{}",
        problems.join("\n")
    );
}

fn defines_fn(source: &str, name: &str) -> bool {
    source.match_indices(&format!("fn {name}")).any(|(at, m)| {
        let next = source[at + m.len()..].chars().next();
        matches!(next, Some('(') | Some('<'))
    })
}

/// The rows of every `### Matched` table, in order.
fn matched_rows(doc: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut in_matched = false;
    let mut previous: Vec<TestRef> = Vec::new();
    for (index, line) in doc.lines().enumerate() {
        if line.starts_with('#') {
            in_matched = line.trim() == "### Matched";
            previous.clear();
            continue;
        }
        if !in_matched || !line.starts_with('|') || line.starts_with("|---") {
            continue;
        }
        let cells = cells(line);
        let (Some(behaviour), Some(tests)) = (cells.first(), cells.last()) else {
            continue;
        };
        if tests.trim() == "test" {
            continue; // the header
        }
        let mut refs = if tests.trim_start().starts_with("same") {
            previous.clone()
        } else {
            Vec::new()
        };
        refs.extend(test_refs(tests));
        previous = refs.clone();
        rows.push(Row {
            line: index + 1,
            behaviour: behaviour.trim().chars().take(60).collect(),
            tests: refs,
        });
    }
    rows
}

/// A table row's cells, split at `|` outside backticks.
fn cells(line: &str) -> Vec<String> {
    let mut cells = Vec::new();
    let mut cell = String::new();
    let mut in_code = false;
    for c in line.trim().trim_matches('|').chars() {
        match c {
            '`' => {
                in_code = !in_code;
                cell.push(c);
            }
            '|' if !in_code => cells.push(std::mem::take(&mut cell)),
            _ => cell.push(c),
        }
    }
    cells.push(cell);
    cells
}

fn test_refs(cell: &str) -> Vec<TestRef> {
    let mut refs: Vec<TestRef> = Vec::new();
    let mut file: Option<String> = None;
    for (index, span) in cell.split('`').enumerate() {
        if index % 2 == 0 {
            continue; // outside backticks
        }
        if span.contains('/') {
            file = Some(span.to_string());
            refs.push(TestRef {
                file: span.to_string(),
                function: None,
            });
        } else if is_identifier(span)
            && let Some(file) = &file
        {
            if let Some(last) = refs.last_mut()
                && last.file == *file
                && last.function.is_none()
            {
                last.function = Some(span.to_string());
            } else {
                refs.push(TestRef {
                    file: file.clone(),
                    function: Some(span.to_string()),
                });
            }
        }
    }
    refs
}

fn is_identifier(span: &str) -> bool {
    !span.is_empty()
        && span
            .chars()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
        && span.chars().next().is_some_and(|c| c.is_ascii_lowercase())
}

#[test]
fn a_test_cell_reads_files_functions_and_same() {
    let refs = test_refs("`tests/a.rs` `one`, `two`; `src/b.rs` tests");
    let described: Vec<String> = refs
        .iter()
        .map(|r| format!("{}:{}", r.file, r.function.as_deref().unwrap_or("-")))
        .collect();
    assert_eq!(
        described,
        ["tests/a.rs:one", "tests/a.rs:two", "src/b.rs:-"]
    );
    let doc = "### Matched\n| b | h | test |\n|---|---|---|\n| x | y | `tests/a.rs` `one` |\n| z | `p | q` | same; `tests/c.rs` |\n### Different\n| n | m | `tests/d.rs` `skip` |\n";
    let rows = matched_rows(doc);
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[1].tests.len(), 2, "same brings the row above's test");
    assert_eq!(rows[1].tests[0].function.as_deref(), Some("one"));
    assert!(!defines_fn("fn one_more() {}", "one"));
    assert!(defines_fn("async fn one() {}", "one"));
}
