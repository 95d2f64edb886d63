//! The map cannot drift: the dependency rules of `docs/ARCHITECTURE.md`
//! (its ```` ```rules ```` block, the only copy of them) checked against the
//! `crate::` paths of every file under `src/`.
//!
//! A reference is counted at module granularity: `use crate::queue::Job`,
//! `crate::queue::Job::new(..)`, an entry of `use crate::{queue, kernel::{..}}`
//! and a `super::` chain that climbs out of its top-level module all count as
//! an arrow to the top-level module named (`queue`, `kernel`). `src/main.rs`
//! reaches the library as `structured_agents::`. Comments, doc comments,
//! strings and character literals are blanked before the scan, so prose that
//! mentions `crate::x` is not an arrow.
//!
//! The block's lines (see the document for what each means):
//!
//! ```text
//! MODULE may: A B C        # the modules MODULE may import ("-": none);
//!                          # each must stand on an earlier line
//! MODULE never: A B        # reason: a rule stated for its own sake
//! MODULE only-from: A B    # reason: only these may import MODULE
//! known: A -> B in FILE    # reason: a violation being fixed (must still occur)
//! circle: A B              # reason: a circle being fixed (must still occur):
//!                          # between top-level modules (`circle: a b`) or
//!                          # between the parts of one module (`circle: a/x a/y`)
//! ```
//!
//! Inside a module the same scan gives the file-level arrows: a part of a
//! module is a child file or a child folder, and a path that leaves its part
//! for a sibling (`super::identity::X`, `crate::registry::identity::X`) is an
//! arrow between the two; no circle may join them either.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::fs;
use std::path::{Path, PathBuf};

// The floors picture and the module descriptions: the map's prose.
#[path = "architecture/map.rs"]
mod map;

// No `Result<_, String>` in product code.
#[path = "architecture/errors.rs"]
mod errors;

const DOC: &str = "docs/ARCHITECTURE.md";
const FENCE: &str = "```rules";

/// One arrow as written: the file and line it is on, the module it points at
/// and the source line it was read from.
#[derive(Debug, Clone)]
struct Reference {
    file: String,
    line: usize,
    from: String,
    to: String,
    text: String,
}

impl Reference {
    fn place(&self) -> String {
        format!(
            "{}:{}: `{}` ({} -> {})",
            self.file, self.line, self.text, self.from, self.to
        )
    }
}

/// The rules of the document's ```` ```rules ```` block.
#[derive(Debug, Default)]
struct Rules {
    /// Module → what it may import, in the block's order.
    may: Vec<(String, BTreeSet<String>)>,
    /// (module, forbidden target, reason).
    never: Vec<(String, String, String)>,
    /// (module, the only modules that may import it, reason).
    only_from: Vec<(String, BTreeSet<String>, String)>,
    /// (from, to, file, reason).
    known: Vec<(String, String, String, String)>,
    /// (members, reason).
    circles: Vec<(BTreeSet<String>, String)>,
}

impl Rules {
    fn may(&self, module: &str) -> Option<&BTreeSet<String>> {
        self.may.iter().find(|(m, _)| m == module).map(|(_, s)| s)
    }
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The block's text, with each line's number in the document.
fn rules_block(doc: &str) -> Vec<(usize, String)> {
    let mut lines = doc.lines().enumerate();
    let mut found = false;
    let mut out = Vec::new();
    for (_, line) in lines.by_ref() {
        if line.trim() == FENCE {
            found = true;
            break;
        }
    }
    assert!(
        found,
        "{DOC} has no {FENCE} block: the dependency rules live there"
    );
    for (n, line) in lines {
        if line.trim_start().starts_with("```") {
            return out;
        }
        out.push((n + 1, line.to_string()));
    }
    panic!("{DOC}: the {FENCE} block is not closed");
}

fn words(s: &str) -> BTreeSet<String> {
    s.split_whitespace()
        .filter(|w| *w != "-")
        .map(str::to_string)
        .collect()
}

fn parse_rules(doc: &str) -> Rules {
    let mut rules = Rules::default();
    for (n, raw) in rules_block(doc) {
        let (body, reason) = match raw.split_once('#') {
            Some((b, r)) => (b.trim(), r.trim().to_string()),
            None => (raw.trim(), String::new()),
        };
        if body.is_empty() {
            continue;
        }
        let reason = if reason.is_empty() {
            format!("{DOC}:{n}: {}", body)
        } else {
            format!("{DOC}:{n}: {}", reason)
        };
        let bad = || panic!("{DOC}:{n}: cannot read this rules line: {raw}");
        if let Some(rest) = body.strip_prefix("known:") {
            // known: A -> B in FILE
            let (arrow, file) = rest.split_once(" in ").unwrap_or_else(bad);
            let (a, b) = arrow.split_once("->").unwrap_or_else(bad);
            rules.known.push((
                a.trim().to_string(),
                b.trim().to_string(),
                file.trim().to_string(),
                reason,
            ));
        } else if let Some(rest) = body.strip_prefix("circle:") {
            rules.circles.push((words(rest), reason));
        } else if let Some((module, rest)) = body.split_once(" may:") {
            rules.may.push((module.trim().to_string(), words(rest)));
        } else if let Some((module, rest)) = body.split_once(" never:") {
            for target in words(rest) {
                rules
                    .never
                    .push((module.trim().to_string(), target, reason.clone()));
            }
        } else if let Some((module, rest)) = body.split_once(" only-from:") {
            rules
                .only_from
                .push((module.trim().to_string(), words(rest), reason));
        } else {
            bad();
        }
    }
    rules
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<_> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// The module path of a file under `src/`, from the crate root:
/// `src/kernel/mod.rs` is `kernel`, `src/kernel/gates.rs` `kernel::gates`,
/// `src/registry/store/durable.rs` `registry::store::durable`; `None` for
/// `src/lib.rs`, the crate root. (`src/main.rs` is `main`.)
fn module_path(rel: &Path) -> Option<Vec<String>> {
    let mut parts: Vec<String> = rel
        .iter()
        .map(|p| p.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if parts == ["lib"] {
        return None;
    }
    if parts.len() > 1 && parts.last().is_some_and(|l| l == "mod") {
        parts.pop();
    }
    Some(parts)
}

/// The text with comments, strings and character literals blanked (newlines
/// kept, so line numbers stay right).
fn strip(src: &str) -> String {
    let s: Vec<char> = src.chars().collect();
    let n = s.len();
    let mut out = String::with_capacity(src.len());
    let blank = |out: &mut String, from: usize, to: usize| {
        for &c in &s[from..to.min(n)] {
            out.push(if c == '\n' { '\n' } else { ' ' });
        }
    };
    let ident = |c: char| c.is_alphanumeric() || c == '_';
    let mut i = 0;
    while i < n {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            let mut j = i;
            while j < n && s[j] != '\n' {
                j += 1;
            }
            blank(&mut out, i, j);
            i = j;
        } else if c == '/' && next == Some('*') {
            let (mut j, mut depth) = (i + 2, 1);
            while j < n && depth > 0 {
                if s[j] == '/' && s.get(j + 1) == Some(&'*') {
                    depth += 1;
                    j += 2;
                } else if s[j] == '*' && s.get(j + 1) == Some(&'/') {
                    depth -= 1;
                    j += 2;
                } else {
                    j += 1;
                }
            }
            blank(&mut out, i, j);
            i = j;
        } else if c == 'r'
            && (i == 0 || s[i - 1] == 'b' || !ident(s[i - 1]))
            && matches!(next, Some('"' | '#'))
            && {
                let mut j = i + 1;
                while j < n && s[j] == '#' {
                    j += 1;
                }
                j < n && s[j] == '"'
            }
        {
            // r"…", r#"…"#, br"…": ends at `"` followed by as many `#`.
            let mut j = i + 1;
            let mut hashes = 0;
            while s[j] == '#' {
                hashes += 1;
                j += 1;
            }
            j += 1;
            while j < n && !(s[j] == '"' && (1..=hashes).all(|k| s.get(j + k) == Some(&'#'))) {
                j += 1;
            }
            let end = j + 1 + hashes;
            blank(&mut out, i, end);
            i = end;
        } else if c == '"' {
            let mut j = i + 1;
            while j < n && s[j] != '"' {
                if s[j] == '\\' {
                    j += 1;
                }
                j += 1;
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if c == '\'' && next == Some('\\') {
            // '\n', '\'', '\u{..}'
            let mut j = i + 3;
            while j < n && s[j] != '\'' {
                j += 1;
            }
            blank(&mut out, i, j + 1);
            i = j + 1;
        } else if c == '\'' && s.get(i + 2) == Some(&'\'') {
            blank(&mut out, i, i + 3);
            i += 3;
        } else {
            // Anything else, lifetimes and labels included.
            out.push(c);
            i += 1;
        }
    }
    out
}

#[derive(Debug, PartialEq)]
enum Tok {
    Ident(String),
    Path, // `::`
    Open,
    Close,
    Comma,
    Other,
}

fn tokens(text: &str) -> Vec<(Tok, usize)> {
    let s: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let (mut i, mut line) = (0, 1);
    while i < s.len() {
        let c = s[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphabetic() || c == '_' {
            let start = i;
            while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
                i += 1;
            }
            out.push((Tok::Ident(s[start..i].iter().collect()), line));
        } else if c.is_ascii_digit() {
            while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
                i += 1;
            }
            out.push((Tok::Other, line));
        } else if c == ':' && s.get(i + 1) == Some(&':') {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((
                match c {
                    '{' => Tok::Open,
                    '}' => Tok::Close,
                    ',' => Tok::Comma,
                    _ => Tok::Other,
                },
                line,
            ));
            i += 1;
        }
    }
    out
}

fn is_ident(t: Option<&(Tok, usize)>, name: &str) -> bool {
    matches!(t, Some((Tok::Ident(s), _)) if s == name)
}

/// The paths a path starting at `toks[at]` names, each as its segments
/// with the line of its first one: `a::b::{c, d::e}` names `a::b::c` and
/// `a::b::d::e`; a `self` entry names the group's own prefix.
fn paths_at(toks: &[(Tok, usize)], at: usize) -> Vec<(Vec<String>, usize)> {
    let mut out = Vec::new();
    walk_path(toks, at, Vec::new(), None, &mut out);
    out
}

fn walk_path(
    toks: &[(Tok, usize)],
    mut i: usize,
    mut prefix: Vec<String>,
    mut line: Option<usize>,
    out: &mut Vec<(Vec<String>, usize)>,
) {
    loop {
        match toks.get(i) {
            Some((Tok::Ident(name), l)) => {
                let line = *line.get_or_insert(*l);
                if name != "self" {
                    prefix.push(name.clone());
                }
                if toks.get(i + 1).is_some_and(|t| t.0 == Tok::Path) {
                    i += 2;
                    continue;
                }
                out.push((prefix, line));
                return;
            }
            Some((Tok::Open, _)) => {
                let mut j = i + 1;
                while let Some((tok, _)) = toks.get(j) {
                    match tok {
                        Tok::Close => return,
                        Tok::Comma => j += 1,
                        _ => {
                            walk_path(toks, j, prefix.clone(), line, out);
                            j = entry_end(toks, j);
                        }
                    }
                }
                return;
            }
            _ => {
                if let Some(line) = line.filter(|_| !prefix.is_empty()) {
                    out.push((prefix, line));
                }
                return;
            }
        }
    }
}

/// Where the group entry starting at `toks[j]` ends: its `,` or the
/// group's `}`.
fn entry_end(toks: &[(Tok, usize)], mut j: usize) -> usize {
    let mut depth = 0usize;
    while let Some((tok, _)) = toks.get(j) {
        match tok {
            Tok::Open => depth += 1,
            Tok::Close if depth == 0 => return j,
            Tok::Close => depth -= 1,
            Tok::Comma if depth == 0 => return j,
            _ => {}
        }
        j += 1;
    }
    j
}

/// Every path out of one file (of module path `module`), made absolute —
/// its segments from the crate root — with its line: `crate::` paths, the
/// binary's `structured_agents::` and `super::` chains that climb out of
/// the file. `self::` paths and a module's plain child paths stay inside the
/// file's own module and are not listed.
fn absolute_paths(module: &[String], src: &str) -> Vec<(Vec<String>, usize)> {
    let toks = tokens(&strip(src));
    let mut out = Vec::new();
    // Brace depths at which an inline `mod name {` opened.
    let (mut braces, mut inline_mods) = (0usize, Vec::<usize>::new());
    let mut i = 0;
    while i < toks.len() {
        let prev_is_path = i > 0 && toks[i - 1].0 == Tok::Path;
        match &toks[i].0 {
            Tok::Open => {
                braces += 1;
                if i >= 2 && is_ident(toks.get(i - 2), "mod") {
                    inline_mods.push(braces);
                }
            }
            Tok::Close => {
                if inline_mods.last() == Some(&braces) {
                    inline_mods.pop();
                }
                braces = braces.saturating_sub(1);
            }
            Tok::Ident(name)
                if (name == "crate" || name == "structured_agents")
                    && !prev_is_path
                    && toks.get(i + 1).is_some_and(|t| t.0 == Tok::Path) =>
            {
                out.extend(paths_at(&toks, i + 2));
            }
            Tok::Ident(name) if name == "super" && !prev_is_path => {
                // `super::super::x`: each `super` climbs one module, the
                // inline ones (`mod tests { .. }`) first.
                let mut k = i;
                let mut climbs = 0usize;
                while is_ident(toks.get(k), "super")
                    && toks.get(k + 1).is_some_and(|t| t.0 == Tok::Path)
                {
                    climbs += 1;
                    k += 2;
                }
                if let Some(up) = climbs.checked_sub(inline_mods.len()).filter(|up| *up > 0)
                    && up <= module.len()
                {
                    let base = &module[..module.len() - up];
                    for (path, line) in paths_at(&toks, k) {
                        out.push(([base, path.as_slice()].concat(), line));
                    }
                }
                i = k.max(i + 1);
                continue;
            }
            _ => {}
        }
        i += 1;
    }
    out
}

/// Every arrow out of one file to another top-level module (one per module
/// a path names, however many items of it a group names).
fn references(file: &str, module: &[String], src: &str) -> Vec<Reference> {
    let lines: Vec<&str> = src.lines().collect();
    let mut out: Vec<Reference> = Vec::new();
    for (path, line) in absolute_paths(module, src) {
        let Some(to) = path.first().filter(|to| **to != module[0]) else {
            continue;
        };
        if out.last().is_some_and(|r| r.to == *to && r.line == line) {
            continue;
        }
        out.push(Reference {
            file: file.to_string(),
            line,
            from: module[0].clone(),
            to: to.clone(),
            text: lines.get(line - 1).map_or("", |l| l.trim()).to_string(),
        });
    }
    out
}

/// One file under `src/`: its path as shown, its module path and its text.
struct SourceFile {
    file: String,
    module: Vec<String>,
    text: String,
}

fn source_files() -> Vec<SourceFile> {
    let src = root().join("src");
    let mut paths = Vec::new();
    rust_files(&src, &mut paths);
    let mut files = Vec::new();
    for path in paths {
        let rel = path.strip_prefix(&src).expect("under src/");
        let Some(module) = module_path(rel) else {
            continue;
        };
        let text =
            fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
        files.push(SourceFile {
            file: format!("src/{}", rel.display()),
            module,
            text,
        });
    }
    files
}

/// The top-level modules under `src/` (`main` for the binary) and every arrow
/// between two different ones.
fn scan() -> (BTreeSet<String>, Vec<Reference>) {
    let mut modules = BTreeSet::new();
    let mut refs = Vec::new();
    for f in source_files() {
        modules.insert(f.module[0].clone());
        refs.extend(references(&f.file, &f.module, &f.text));
    }
    (modules, refs)
}

/// The strongly connected components with more than one module (Tarjan).
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    struct State<'a> {
        graph: &'a BTreeMap<String, BTreeSet<String>>,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        found: Vec<BTreeSet<String>>,
    }
    fn visit<'a>(st: &mut State<'a>, v: &'a str) {
        let n = st.index.len();
        st.index.insert(v, n);
        st.low.insert(v, n);
        st.stack.push(v);
        let graph = st.graph;
        for w in graph.get(v).into_iter().flatten() {
            let w = w.as_str();
            if !st.index.contains_key(w) {
                visit(st, w);
                let lw = st.low[w];
                let lv = st.low.get_mut(v).expect("visited");
                *lv = (*lv).min(lw);
            } else if st.stack.contains(&w) {
                let iw = st.index[w];
                let lv = st.low.get_mut(v).expect("visited");
                *lv = (*lv).min(iw);
            }
        }
        if st.low[v] == st.index[v] {
            let mut component = BTreeSet::new();
            while let Some(w) = st.stack.pop() {
                component.insert(w.to_string());
                if w == v {
                    break;
                }
            }
            if component.len() > 1 {
                st.found.push(component);
            }
        }
    }
    let mut st = State {
        graph,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        found: Vec::new(),
    };
    for v in graph.keys() {
        if !st.index.contains_key(v.as_str()) {
            visit(&mut st, v);
        }
    }
    st.found
}

fn fail(problems: &[String], what: &str) {
    if !problems.is_empty() {
        let mut msg = format!("{what} ({} problems):\n", problems.len());
        for p in problems {
            let _ = writeln!(msg, "  - {p}");
        }
        panic!("{msg}");
    }
}

fn load() -> (Rules, BTreeSet<String>, Vec<Reference>) {
    let doc = fs::read_to_string(root().join(DOC)).unwrap_or_else(|e| panic!("read {DOC}: {e}"));
    let (modules, refs) = scan();
    (parse_rules(&doc), modules, refs)
}

/// The block itself: one `may:` line per module, in an order where every
/// module imports only modules above it (so the allowed graph has no circle),
/// and no `never:` / `only-from:` rule contradicted by a `may:` line.
#[test]
fn the_map_names_every_module_in_layer_order() {
    let (rules, modules, _) = load();
    let mut problems = Vec::new();
    let listed: BTreeSet<String> = rules.may.iter().map(|(m, _)| m.clone()).collect();
    for m in modules.difference(&listed) {
        problems.push(format!(
            "module `{m}` (src/) has no `{m} may: …` line in {DOC}: add it where its imports allow"
        ));
    }
    for m in listed.difference(&modules) {
        problems.push(format!(
            "{DOC} names `{m}`, which is not a module under src/"
        ));
    }
    let mut above = BTreeSet::new();
    for (m, may) in &rules.may {
        for t in may {
            if !above.contains(t) {
                problems.push(format!(
                    "`{m} may: {t}`: `{t}` must stand on an earlier line (the order is the layering)"
                ));
            }
        }
        if !above.insert(m.clone()) {
            problems.push(format!("`{m}` has two `may:` lines"));
        }
    }
    for (m, t, reason) in &rules.never {
        if rules.may(m).is_some_and(|s| s.contains(t)) {
            problems.push(format!(
                "`{m} may: {t}` contradicts the rule `{m} never: {t}` ({reason})"
            ));
        }
    }
    for (t, allowed, reason) in &rules.only_from {
        for (m, may) in &rules.may {
            if may.contains(t) && !allowed.contains(m) {
                problems.push(format!(
                    "`{m} may: {t}` contradicts the rule `{t} only-from` ({reason})"
                ));
            }
        }
    }
    fail(&problems, "the rules block of docs/ARCHITECTURE.md");
}

/// Every arrow in `src/` is one the map allows.
#[test]
fn every_import_follows_the_rules() {
    let (rules, _, refs) = load();
    fail(
        &import_problems(&rules, &refs),
        "imports that break the dependency rules of docs/ARCHITECTURE.md",
    );
}

/// What is wrong with these arrows under these rules: a `never:` or
/// `only-from:` rule broken, an arrow missing from its module's `may:` line,
/// a `known:` violation that no longer occurs.
fn import_problems(rules: &Rules, refs: &[Reference]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut known_seen = vec![false; rules.known.len()];
    for r in refs {
        let known = rules
            .known
            .iter()
            .position(|(a, b, file, _)| *a == r.from && *b == r.to && *file == r.file);
        if let Some(k) = known {
            known_seen[k] = true;
            continue;
        }
        let mut broken = false;
        for (m, t, reason) in &rules.never {
            if *m == r.from && *t == r.to {
                problems.push(format!("{}: breaks `{m} never: {t}` ({reason})", r.place()));
                broken = true;
            }
        }
        for (t, allowed, reason) in &rules.only_from {
            if *t == r.to && !allowed.contains(&r.from) {
                problems.push(format!(
                    "{}: breaks `{t} only-from: …` ({reason})",
                    r.place()
                ));
                broken = true;
            }
        }
        if broken {
            continue;
        }
        match rules.may(&r.from) {
            Some(may) if may.contains(&r.to) => {}
            Some(may) => problems.push(format!(
                "{}: `{}` may import only: {} (its `may:` line in {DOC}; add `{}` there if this arrow belongs in the design)",
                r.place(),
                r.from,
                may.iter().cloned().collect::<Vec<_>>().join(" "),
                r.to,
            )),
            None => problems.push(format!("{}: `{}` has no `may:` line in {DOC}", r.place(), r.from)),
        }
    }
    for (seen, (a, b, file, reason)) in known_seen.iter().zip(&rules.known) {
        if !seen {
            problems.push(format!(
                "the known violation `{a} -> {b} in {file}` no longer occurs ({reason}): delete its line from {DOC}"
            ));
        }
    }
    problems
}

/// No import circle between top-level modules, but those the map lists.
#[test]
fn no_circle_between_modules() {
    let (rules, _, refs) = load();
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for r in &refs {
        graph
            .entry(r.from.clone())
            .or_default()
            .insert(r.to.clone());
    }
    let found = circles(&graph);
    let listed: Vec<&(BTreeSet<String>, String)> = rules
        .circles
        .iter()
        .filter(|(members, _)| !is_inner(members))
        .collect();
    let mut problems = Vec::new();
    for c in &found {
        if listed.iter().any(|(members, _)| members == c) {
            continue;
        }
        let ties: Vec<String> = refs
            .iter()
            .filter(|r| c.contains(&r.from) && c.contains(&r.to))
            .map(Reference::place)
            .collect();
        problems.push(format!(
            "circle between {}: {}",
            c.iter().cloned().collect::<Vec<_>>().join(", "),
            ties.join("; ")
        ));
    }
    for (members, reason) in listed {
        if !found.contains(members) {
            problems.push(format!(
                "the listed circle `{}` no longer occurs ({reason}): delete its line from {DOC}",
                members.iter().cloned().collect::<Vec<_>>().join(" ")
            ));
        }
    }
    fail(&problems, "import circles between top-level modules");
}

/// Whether a `circle:` line is one inside a module (its members are paths,
/// `queue/outbox`), not one between top-level modules.
fn is_inner(members: &BTreeSet<String>) -> bool {
    members.iter().any(|m| m.contains('/'))
}

/// An arrow between two parts of one module, as a path names it.
#[derive(Debug)]
struct InnerArrow {
    from: String,
    to: String,
    place: String,
}

/// The arrows between the parts of each module: a part of module `m` is a
/// child file of it or a child folder with its files (`registry/build`,
/// `registry/store`); a path in part `a` that names something in another
/// part `b` is the arrow `m/a -> m/b`. The module's own root file (`mod.rs`)
/// is no part, and items it defines or re-exports are not followed into the
/// part that holds them: a helper two parts share belongs in the lower one.
fn inner_arrows(files: &[SourceFile]) -> Vec<InnerArrow> {
    let parts: BTreeSet<&[String]> = files
        .iter()
        .flat_map(|f| (1..=f.module.len()).map(|n| &f.module[..n]))
        .collect();
    let mut arrows = Vec::new();
    for f in files {
        let lines: Vec<&str> = f.text.lines().collect();
        for (path, line) in absolute_paths(&f.module, &f.text) {
            let common = f
                .module
                .iter()
                .zip(&path)
                .take_while(|(a, b)| a == b)
                .count();
            // Inside one top-level module, from one of its parts to another.
            if common == 0 || common >= f.module.len() || common >= path.len() {
                continue;
            }
            let to = &path[..=common];
            if !parts.contains(to) {
                continue;
            }
            arrows.push(InnerArrow {
                from: f.module[..=common].join("/"),
                to: to.join("/"),
                place: format!(
                    "{}:{line}: `{}`",
                    f.file,
                    lines.get(line - 1).map_or("", |l| l.trim())
                ),
            });
        }
    }
    arrows
}

/// The circles among these arrows that the rules do not list, and the listed
/// ones that no longer occur.
fn inner_circle_problems(rules: &Rules, arrows: &[InnerArrow]) -> Vec<String> {
    let mut graph: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for a in arrows {
        graph
            .entry(a.from.clone())
            .or_default()
            .insert(a.to.clone());
    }
    let found = circles(&graph);
    let listed: Vec<&(BTreeSet<String>, String)> = rules
        .circles
        .iter()
        .filter(|(members, _)| is_inner(members))
        .collect();
    let mut problems = Vec::new();
    for c in &found {
        if listed.iter().any(|(members, _)| members == c) {
            continue;
        }
        let ties: Vec<&str> = arrows
            .iter()
            .filter(|a| c.contains(&a.from) && c.contains(&a.to))
            .map(|a| a.place.as_str())
            .collect();
        problems.push(format!(
            "circle between {}: {} (a helper both need belongs in the lower one)",
            c.iter().cloned().collect::<Vec<_>>().join(", "),
            ties.join("; ")
        ));
    }
    for (members, reason) in listed {
        if !found.contains(members) {
            problems.push(format!(
                "the listed circle `{}` no longer occurs ({reason}): delete its line from {DOC}",
                members.iter().cloned().collect::<Vec<_>>().join(" ")
            ));
        }
    }
    problems
}

/// No import circle between the files (or sub-folders) of one module, but
/// those the map lists.
#[test]
fn no_circle_inside_a_module() {
    let doc = fs::read_to_string(root().join(DOC)).unwrap_or_else(|e| panic!("read {DOC}: {e}"));
    let arrows = inner_arrows(&source_files());
    fail(
        &inner_circle_problems(&parse_rules(&doc), &arrows),
        "import circles inside modules",
    );
}

/// The diagram draws only arrows the rules allow: each `A --> B` (or
/// `A -->|label| B & C`) line of the document's ```` ```mermaid ```` block.
#[test]
fn the_diagram_draws_only_allowed_arrows() {
    let doc = fs::read_to_string(root().join(DOC)).unwrap_or_else(|e| panic!("read {DOC}: {e}"));
    let rules = parse_rules(&doc);
    let mut problems = Vec::new();
    let mut inside = false;
    let mut arrows = 0;
    for (n, line) in doc.lines().enumerate() {
        let line = line.trim();
        if line == "```mermaid" {
            inside = true;
            continue;
        }
        if !inside {
            continue;
        }
        if line.starts_with("```") {
            break;
        }
        let nodes: Vec<Vec<&str>> = line
            .split("-->")
            .map(|part| {
                let part = part.trim();
                // Drop a `|label|` that opens the part.
                let part = match part.strip_prefix('|') {
                    Some(rest) => rest.split_once('|').map_or(rest, |(_, after)| after),
                    None => part,
                };
                part.split('&')
                    .map(str::trim)
                    .filter(|w| !w.is_empty())
                    .collect()
            })
            .collect();
        for pair in nodes.windows(2) {
            for from in &pair[0] {
                for to in &pair[1] {
                    arrows += 1;
                    if !rules.may(from).is_some_and(|may| may.contains(*to)) {
                        problems.push(format!(
                            "{DOC}:{}: the diagram draws {from} --> {to}, which no `may:` line allows",
                            n + 1
                        ));
                    }
                }
            }
        }
    }
    assert!(arrows > 0, "{DOC} has no ```mermaid module diagram");
    fail(&problems, "the module diagram of docs/ARCHITECTURE.md");
}

/// The scanner sees what it must: groups, nested groups, paths in
/// expressions, `super::` out of a module, and nothing in comments or strings.
#[test]
fn the_scanner_reads_paths_not_prose() {
    let src = r##"
//! Mentions crate::api in a doc comment.
use crate::{kernel::{Step, Turn}, queue,
    self, events::Event};
use crate::types::Message;
fn f() -> crate::worker::Pool { let _ = "crate::cli"; let _ = '"'; let _ = r#"crate::daemon"#; todo!() }
/* crate::telemetry */
mod tests {
    use super::super::registry::Snapshot;
}
fn g<'a>(x: &'a str) { super::super::api::x(); super::sibling(); }
"##;
    let got: Vec<(String, usize)> = references("src/x/y.rs", &module("x::y"), src)
        .into_iter()
        .map(|r| (r.to, r.line))
        .collect();
    let want: Vec<(String, usize)> = [
        ("kernel", 3),
        ("queue", 3),
        ("events", 4),
        ("types", 5),
        ("worker", 6),
        ("api", 11),
    ]
    .into_iter()
    .map(|(m, l)| (m.to_string(), l))
    .collect();
    assert_eq!(got, want);
    // Inside the inline `mod tests`, `super::super` only reaches `x`; three
    // levels would be needed to leave it.
    let deeper = "mod tests { use super::super::super::queue::Job; }";
    let got: Vec<String> = references("src/x/y.rs", &module("x::y"), deeper)
        .into_iter()
        .map(|r| r.to)
        .collect();
    assert_eq!(got, ["queue"]);
}

/// The rules can fail: a forbidden arrow is named with its file, line,
/// import and rule.
#[test]
fn a_forbidden_arrow_is_reported() {
    let doc = "```rules\ntypes may: -\nqueue may: types\nkernel may: types\n\
               kernel never: queue  # the kernel knows only traits\n```\n";
    let rules = parse_rules(doc);
    let src = "use crate::types::Message;\nuse crate::queue::JobQueue;\n";
    let refs = references("src/kernel/mod.rs", &module("kernel"), src);
    assert_eq!(refs.len(), 2);
    let problems = import_problems(&rules, &refs);
    assert_eq!(problems.len(), 1, "{problems:?}");
    let p = &problems[0];
    assert!(
        p.starts_with("src/kernel/mod.rs:2: `use crate::queue::JobQueue;` (kernel -> queue): breaks `kernel never: queue`"),
        "{p}"
    );
    assert!(p.contains("the kernel knows only traits"), "{p}");
    // Without the `never:` line, the `may:` line refuses it all the same.
    let doc = doc.replace("kernel never: queue", "");
    let problems = import_problems(&parse_rules(&doc), &refs);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].contains("`kernel` may import only: types"),
        "{}",
        problems[0]
    );
}

fn module(path: &str) -> Vec<String> {
    path.split("::").map(str::to_string).collect()
}

/// Two files of one module that import each other are a circle, named with
/// the lines that tie it; listed in the rules, it passes until it is gone.
#[test]
fn a_circle_between_two_files_of_a_module_is_reported() {
    let file = |path: &str, module_path: &str, text: &str| SourceFile {
        file: path.to_string(),
        module: module(module_path),
        text: text.to_string(),
    };
    let files = [
        file(
            "src/x/mod.rs",
            "x",
            "mod a;\nmod b;\nmod c;\npub use a::g;\n",
        ),
        file(
            "src/x/a.rs",
            "x::a",
            "use super::b::Thing;\npub fn g() {}\n",
        ),
        file(
            "src/x/b.rs",
            "x::b",
            "pub struct Thing;\nfn f() { crate::x::a::g(); }\n",
        ),
        // An item of the module's root is no part; `c` only uses `a`.
        file(
            "src/x/c.rs",
            "x::c",
            "use super::{Root, a::g};\nmod tests { use super::super::b::Thing; }\n",
        ),
    ];
    let arrows = inner_arrows(&files);
    let pairs: Vec<(&str, &str)> = arrows
        .iter()
        .map(|a| (a.from.as_str(), a.to.as_str()))
        .collect();
    assert_eq!(
        pairs,
        [
            ("x/a", "x/b"),
            ("x/b", "x/a"),
            ("x/c", "x/a"),
            ("x/c", "x/b")
        ]
    );
    let problems = inner_circle_problems(&Rules::default(), &arrows);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("circle between x/a, x/b: src/x/a.rs:1: `use super::b::Thing;`"),
        "{}",
        problems[0]
    );
    let listed = parse_rules("```rules\ncircle: x/a x/b  # being fixed\n```\n");
    assert_eq!(
        inner_circle_problems(&listed, &arrows),
        Vec::<String>::new()
    );
    let gone = parse_rules("```rules\ncircle: x/a x/c  # fixed already\n```\n");
    let problems = inner_circle_problems(&gone, &arrows);
    assert!(
        problems
            .iter()
            .any(|p| p.contains("`x/a x/c` no longer occurs")),
        "{problems:?}"
    );
}
