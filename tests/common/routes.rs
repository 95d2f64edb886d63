//! The routes the API's router is built from, read from its source: every
//! `.route("path", …)` and `.api_route("path", …)` under `src/api/`. The
//! policy test checks each declares its action; the document test that
//! each is described.

use std::fs;
use std::path::{Path, PathBuf};

pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The text of the call whose `(` is at `open`, up to its matching `)`.
fn call_text(source: &str, open: usize) -> &str {
    let mut depth = 0usize;
    for (i, c) in source[open..].char_indices() {
        match c {
            '(' => depth += 1,
            ')' => {
                depth -= 1;
                if depth == 0 {
                    return &source[open..open + i + 1];
                }
            }
            _ => {}
        }
    }
    &source[open..]
}

/// Every `.route("path", …)` and `.api_route("path", …)` under src/api:
/// (path, the call's text, file).
pub fn routes() -> Vec<(String, String, String)> {
    let mut files = Vec::new();
    rust_files(&root().join("src/api"), &mut files);
    let mut found = Vec::new();
    for file in files {
        let source = fs::read_to_string(&file).unwrap();
        let name = file.strip_prefix(root()).unwrap().display().to_string();
        // `.api_route(`: a route the API document describes (aide).
        let calls = [".route(", ".api_route("].map(|call| {
            source
                .match_indices(call)
                .map(move |(at, _)| at + call.len() - 1)
        });
        for open in calls.into_iter().flatten() {
            let text = call_text(&source, open);
            let path = text
                .split('"')
                .nth(1)
                .unwrap_or_else(|| panic!("{name}: a route without a literal path: {text}"));
            found.push((path.to_string(), text.to_string(), name.clone()));
        }
    }
    found
}
