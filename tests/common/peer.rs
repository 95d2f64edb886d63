//! Peers: a client of another language or the CLI (a Python SDK script, a
//! node client, the binary itself) run against a daemon to its end, off
//! the async threads; its stdout read as one JSON document or as a JSON
//! value a line. A peer that fails panics with its stderr and the
//! daemon's log, so the failure says which side went wrong.
#![allow(dead_code)]

use std::process::Command;

use serde_json::Value;

use super::daemon::Daemon;

/// Runs `command` to its end and returns its stdout; panics, with its
/// stderr and `daemon`'s log, unless it exits 0.
pub async fn run(daemon: &Daemon, mut command: Command) -> String {
    let peer = format!("{command:?}");
    let out = tokio::task::spawn_blocking(move || command.output())
        .await
        .unwrap_or_else(|e| panic!("the thread running {peer} failed: {e}"))
        .unwrap_or_else(|e| panic!("cannot start {peer}: {e}"));
    assert!(
        out.status.success(),
        "{peer} ended with {}:\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        daemon.log()
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// [`run`], its stdout one JSON document.
pub async fn json(daemon: &Daemon, command: Command) -> Value {
    let stdout = run(daemon, command).await;
    serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("the peer's stdout is not one JSON document ({e}):\n{stdout}"))
}

/// [`run`], each line of its stdout a JSON value.
pub async fn json_lines(daemon: &Daemon, command: Command) -> Vec<Value> {
    let stdout = run(daemon, command).await;
    stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line)
                .unwrap_or_else(|e| panic!("a line of the peer's stdout is not JSON ({e}): {line}"))
        })
        .collect()
}
