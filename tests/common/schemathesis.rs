//! Schemathesis (from `.venv`, see `scripts/python-env`) run against the
//! real daemon: one way to run it, for the daemon's own document
//! (tests/fuzz_api.rs) and a protocol's vendored one
//! (tests/agent_protocol.rs). A missing Schemathesis is a failure, never a
//! skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use super::daemon::Daemon;
use super::repo;

/// Generated requests per operation and phase: enough to reach the
/// extractors' error paths, few enough that the run stays within a few
/// minutes on a loaded 2-core machine (about 40 s when it is quiet, under
/// 3 min beside two other builds).
pub const EXAMPLES: &str = "50";

/// The same requests on every run: a failure reproduces. `SA_FUZZ_SEED`
/// runs another seed (to look further than the suite does).
const SEED: &str = "20261124";

pub fn seed() -> String {
    std::env::var("SA_FUZZ_SEED").unwrap_or_else(|_| SEED.to_string())
}

fn schemathesis() -> PathBuf {
    let st = repo(".venv/bin/st");
    assert!(
        st.exists(),
        "Schemathesis is missing ({}): run ./scripts/python-env, which installs the version pinned in ci/requirements.txt into .venv",
        st.display()
    );
    st
}

/// One run's settings.
pub struct Run<'a> {
    /// The document: a URL of the daemon's, or a file.
    pub schema: String,
    /// Its per-operation exceptions (`st --config-file`).
    pub config: PathBuf,
    /// Its checks (`SCHEMATHESIS_HOOKS`).
    pub hooks: PathBuf,
    pub phases: &'a str,
    /// Operations left out, each `METHOD /path`.
    pub excluded: &'a [&'a str],
    /// Built-in checks left out (the hooks run them in their place).
    pub excluded_checks: &'a [&'a str],
    /// Where its cache and report go.
    pub dir: &'a Path,
}

/// Runs Schemathesis with `token` against `daemon` under every check it
/// has (`--checks all`), with the fixed seed: what it printed and how it
/// exited.
pub async fn run(daemon: &Daemon, token: &str, run: Run<'_>) -> Output {
    let st = schemathesis();
    let mut command = Command::new(st);
    command
        .arg("--config-file")
        .arg(&run.config)
        .arg("run")
        .arg(&run.schema)
        .args(["--url", &daemon.base])
        .args(["--header", &format!("Authorization: Bearer {token}")])
        .args(["--checks", "all"])
        .args(["--phases", run.phases])
        .args(["--max-examples", EXAMPLES, "--seed", &seed()])
        // One worker: under load, two of its threads raced in CPython 3.11's
        // `ast.parse` (Hypothesis describing a strategy: "SystemError: AST
        // constructor recursion depth mismatch"), a Runtime Error that failed
        // the run; one costs ~10 % more time.
        .args(["--workers", "1", "--request-timeout", "20"])
        .args(["--generation-database", "none"])
        .args(["--suppress-health-check", "all"])
        .args(["--no-color", "--output-truncate", "false"])
        .arg("--report-dir")
        .arg(run.dir.join("schemathesis-report"))
        // Its cache (`.schemathesis/`) goes with the site, not the repository.
        .current_dir(run.dir)
        .env("SCHEMATHESIS_HOOKS", &run.hooks);
    for operation in run.excluded {
        command.args(["--exclude-name", operation]);
    }
    if !run.excluded_checks.is_empty() {
        command.args(["--exclude-checks", &run.excluded_checks.join(",")]);
    }
    tokio::task::spawn_blocking(move || command.output().unwrap())
        .await
        .unwrap()
}

/// How many operations a run selected, of how many, and tested, as it
/// printed them (0 for one it did not print).
pub fn counts(stdout: &str) -> (usize, usize, usize) {
    let number_after = |label: &str| -> usize {
        let rest = stdout.split(label).nth(1).unwrap_or_default().trim_start();
        let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
        digits.parse().unwrap_or(0)
    };
    (
        number_after("Operations:"),
        number_after("selected /"),
        number_after("Tested:"),
    )
}

/// The operations of an OpenAPI document, counted.
pub fn operations(document: &serde_json::Value) -> usize {
    document["paths"]
        .as_object()
        .unwrap()
        .values()
        .map(|path| {
            path.as_object()
                .unwrap()
                .keys()
                .filter(|k| ["get", "post", "put", "patch", "delete"].contains(&k.as_str()))
                .count()
        })
        .sum()
}

pub fn tail(text: &str, lines: usize) -> String {
    let all: Vec<&str> = text.lines().collect();
    all[all.len().saturating_sub(lines)..].join("\n")
}
