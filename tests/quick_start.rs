//! The README's first five minutes, as a newcomer types them: the daemon on
//! embedded defaults (the shipped bundles, answered by their scripted
//! endpoints), then the client commands of the quick start (submit and
//! follow, watch, query, group). Each command's
//! output is compared with the transcript under tests/data/quick_start/,
//! after masking what changes from run to run (job ids, durations): the
//! order of the lines is the point — a turn's answer after its header,
//! never between tool lines.
//!
//! To accept a deliberate change of the output, run the test with
//! `SA_BLESS=1`: it rewrites the transcripts (review the diff).

mod common;

use std::process::Command;

use common::daemon::{Daemon, serve_embedded_defaults};
use regex::Regex;

/// Runs a client command against `daemon`; its stdout.
fn client(daemon: &Daemon, args: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["--server", &daemon.base])
        .args(args)
        .env_remove("STRUCTURED_AGENTS_TOKEN")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).to_string();
    assert!(
        output.status.success(),
        "structured-agents {args:?} failed ({}):\n{stdout}\n{}\ndaemon log:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr),
        daemon.log()
    );
    // What a newcomer sees on the terminal includes stderr: nothing there
    // but the spinner's plain-text ticks (stdout is not a terminal here).
    let stderr = String::from_utf8_lossy(&output.stderr);
    let noise: Vec<&str> = stderr
        .lines()
        .filter(|line| !line.starts_with("… "))
        .collect();
    assert!(
        noise.is_empty(),
        "structured-agents {args:?} wrote to stderr:\n{stderr}"
    );
    stdout
}

/// The output with job and conversation ids and durations replaced, and
/// the results of a turn's concurrent tool calls sorted (they print as the
/// tools finish).
fn masked(text: &str) -> String {
    let uuid = Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").unwrap();
    let duration = Regex::new(r"\b\d+ ms\b").unwrap();
    let seconds = Regex::new(r"\b\d+(\.\d+)?s\)").unwrap();
    let text = uuid.replace_all(text, "<id>");
    let text = duration.replace_all(&text, "<n> ms");
    let text = seconds.replace_all(&text, "<t>s)");
    let mut out: Vec<String> = Vec::new();
    let mut results: Vec<String> = Vec::new();
    for line in text.split_inclusive('\n') {
        if line.starts_with("  ✓ ") || line.starts_with("  ✗ ") {
            results.push(line.to_string());
        } else if line.starts_with("     ↪ ") && !results.is_empty() {
            results.last_mut().unwrap().push_str(line);
        } else {
            results.sort();
            out.append(&mut results);
            out.push(line.to_string());
        }
    }
    results.sort();
    out.append(&mut results);
    out.concat()
}

/// Compares `actual` with the transcript `name`, or rewrites it (`SA_BLESS=1`).
fn assert_transcript(name: &str, actual: &str) {
    let path = common::repo("tests/data/quick_start").join(name);
    if std::env::var_os("SA_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
        return;
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    assert!(
        actual == expected,
        "the output differs from {} (SA_BLESS=1 rewrites it after a deliberate change)\n\
         --- expected\n{expected}\n--- actual\n{actual}",
        path.display()
    );
}

#[test]
fn the_quick_start_reads_as_the_transcripts_say() {
    let state = tempfile::tempdir().unwrap();
    // Private, as the daemon makes `state/` in a fresh clone (a temporary
    // directory is 0755, which the daemon would tighten, saying so).
    std::fs::set_permissions(
        state.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    let daemon = serve_embedded_defaults(state.path());
    let follow = client(
        &daemon,
        &[
            "submit",
            "arithmetic",
            "--input",
            "What is 2+3 and 4*5?",
            "--follow",
        ],
    );
    assert_transcript("submit-follow.txt", &masked(&follow));

    // `watch` replays the finished job the same way (no tokens: the answer
    // comes from the events).
    let job_id = follow
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no job id in {follow:?}"));
    let watch = client(&daemon, &["watch", job_id]);
    let (_, followed) = follow.split_once('\n').unwrap();
    assert_eq!(
        masked(&watch),
        masked(followed),
        "watch replays what --follow printed"
    );

    let query = client(&daemon, &["query", "What is 2+3 and 4*5?"]);
    assert_transcript("query.txt", &masked(&query));

    // The group chat worth showing: the planner drafts, the critic finds
    // gaps, the planner revises, the critic's stop phrase ends the chat.
    let group = client(
        &daemon,
        &[
            "group",
            "Plan a picnic",
            "--agents",
            "planner,critic",
            "--max-iterations",
            "3",
            "--stop-phrase",
            "ready to go",
        ],
    );
    assert_transcript("group.txt", &masked(&group));

    // The first run warns of nothing: the embedded defaults are sound (their
    // plugins directory, which a fresh clone lacks, means no plugins).
    let log = daemon.log();
    let warnings: Vec<&str> = log
        .lines()
        .filter(|line| line.contains(" WARN") || line.contains(" ERROR"))
        .collect();
    assert!(
        warnings.is_empty(),
        "the daemon warned on its defaults:\n{}",
        warnings.join("\n")
    );
}
