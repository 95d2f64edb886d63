//! Typed errors stay typed: no `Result<_, String>` (nor `Result<_, &str>`)
//! in product code, under `src/` and the plugins' `src/`. An error there is
//! a `thiserror` type owned by its module, whose message says what went
//! wrong, where and what to do; a `String` error says only the last of
//! these and cannot be matched on. Test code (a `tests` folder, a
//! `tests.rs`, an inline `#[cfg(test)]` module) may use what it likes.

use std::fs;
use std::path::{Path, PathBuf};

use super::{fail, root, rust_files, strip};

/// The product files: every `.rs` under `src/` and `plugins/*/src/`, but
/// no test file.
fn product_files() -> Vec<PathBuf> {
    let mut paths = Vec::new();
    rust_files(&root().join("src"), &mut paths);
    let plugins = root().join("plugins");
    let mut crates: Vec<PathBuf> = fs::read_dir(&plugins)
        .unwrap_or_else(|e| panic!("read {}: {e}", plugins.display()))
        .map(|e| e.expect("directory entry").path().join("src"))
        .filter(|src| src.is_dir())
        .collect();
    crates.sort();
    for src in crates {
        rust_files(&src, &mut paths);
    }
    paths.retain(|path| !is_test_file(&root(), path));
    paths
}

fn is_test_file(root: &Path, path: &Path) -> bool {
    let rel = path.strip_prefix(root).unwrap_or(path);
    rel.iter().any(|part| part == "tests") || rel.file_name().is_some_and(|n| n == "tests.rs")
}

/// The text with every inline `#[cfg(test)]` item blanked (newlines kept).
/// `text` is already stripped of comments and strings, so braces count.
fn without_test_items(text: &str) -> String {
    const MARK: &str = "#[cfg(test)]";
    let mut out = text.to_string();
    let mut from = 0;
    while let Some(at) = out[from..].find(MARK).map(|i| i + from) {
        let Some(open) = out[at..].find(['{', ';']).map(|i| i + at) else {
            break;
        };
        let mut end = open + 1;
        if out.as_bytes()[open] == b'{' {
            let mut depth = 1;
            while end < out.len() && depth > 0 {
                match out.as_bytes()[end] {
                    b'{' => depth += 1,
                    b'}' => depth -= 1,
                    _ => {}
                }
                end += 1;
            }
        }
        let blanked: String = out[at..end]
            .chars()
            .map(|c| if c == '\n' { '\n' } else { ' ' })
            .collect();
        out.replace_range(at..end, &blanked);
        from = end;
    }
    out
}

/// Each `Result<T, E>` in `text` whose `E` is `String` or a `str`
/// reference, as (line, the type as written on one line).
fn string_errors(text: &str) -> Vec<(usize, String)> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut from = 0;
    while let Some(at) = text[from..].find("Result<").map(|i| i + from) {
        from = at + "Result<".len();
        // `MyResult<..>` is another type; `io::Result<..>` is this one.
        if at > 0 && (bytes[at - 1].is_ascii_alphanumeric() || bytes[at - 1] == b'_') {
            continue;
        }
        // Angle brackets, and parentheses or brackets (a tuple, an array).
        let (mut depth, mut nested, mut end, mut commas) = (1, 0, from, Vec::new());
        while end < bytes.len() && depth > 0 {
            match bytes[end] {
                b'<' => depth += 1,
                b'>' if bytes[end - 1] != b'-' => depth -= 1,
                b'(' | b'[' => nested += 1,
                b')' | b']' => nested -= 1,
                b',' if depth == 1 && nested == 0 => commas.push(end),
                _ => {}
            }
            end += 1;
        }
        // The error is the second argument (a trailing comma may follow).
        let Some(&comma) = commas.first() else {
            continue;
        };
        let until = commas.get(1).copied().unwrap_or(end - 1);
        let error: String = text[comma + 1..until].split_whitespace().collect();
        let stringly = matches!(error.as_str(), "String" | "std::string::String")
            || (error.starts_with('&') && error.ends_with("str") && !error.contains("::"));
        if stringly {
            let line = text[..at].matches('\n').count() + 1;
            let written = text[at..end]
                .split_whitespace()
                .collect::<Vec<_>>()
                .join(" ");
            found.push((line, written));
        }
    }
    found
}

#[test]
fn no_string_errors_in_product_code() {
    let mut problems = Vec::new();
    for path in product_files() {
        let text =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        let rel = path
            .strip_prefix(root())
            .unwrap_or(&path)
            .display()
            .to_string();
        for (line, written) in string_errors(&without_test_items(&strip(&text))) {
            problems.push(format!(
                "{rel}:{line}: `{written}`: give the module a thiserror type saying what went wrong, where and what to do"
            ));
        }
    }
    fail(&problems, "String errors in product code");
}

#[test]
fn the_error_scan_finds_string_errors_and_only_those() {
    let src = "fn a() -> Result<Vec<u8>, String> { todo!() }\n\
               fn b(\n) -> Result<\n    HashMap<String, Vec<String>>,\n    String,\n> { todo!() }\n\
               fn c(x: Result<(), &'static str>) {}\n\
               fn d() -> Result<String, Error> { todo!() }\n\
               fn e() -> io::Result<String> { todo!() }\n\
               fn f() -> MyResult<u8, String> { todo!() }\n\
               fn g() -> Result<u8, Box<dyn Fn() -> String>> { todo!() }\n\
               fn h() -> Result<(Value, usize), String> { todo!() }\n\
               #[cfg(test)]\nmod tests { fn h() -> Result<(), String> { Ok(()) } }\n";
    let lines: Vec<usize> = string_errors(&without_test_items(src))
        .into_iter()
        .map(|(line, _)| line)
        .collect();
    assert_eq!(lines, [1, 3, 7, 12], "{src}");
}
