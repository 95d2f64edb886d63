//! The real daemon binary on a benchmark's site directory
//! (`dir/config.toml`): started with `serve`, its address read from the
//! first line it prints, killed when dropped. Shared by the benchmarks so
//! each measures the same start-up.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};

pub struct Daemon {
    pub child: Child,
    pub base: String,
}

impl Drop for Daemon {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

// Each benchmark binary includes this file; `fair` starts every daemon
// with an environment.
#[allow(dead_code)]
pub fn start(dir: &Path) -> Daemon {
    start_env(dir, &[])
}

/// Starts the daemon with `env` added to its environment.
pub fn start_env(dir: &Path, env: &[(&str, &str)]) -> Daemon {
    let mut child = Command::new(env!("CARGO_BIN_EXE_structured-agents"))
        .args(["serve", "--config"])
        .arg(dir.join("config.toml"))
        .env("SA_LOG", "warn")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let stdout = child.stdout.take().unwrap();
    let mut line = String::new();
    BufReader::new(stdout).read_line(&mut line).unwrap();
    let base = line
        .trim()
        .strip_prefix("listening on ")
        .expect("daemon did not start")
        .to_string();
    Daemon { child, base }
}

/// The value of the daemon's metric whose line starts with `name ` (name
/// with its labels); 0 when it has none.
#[allow(dead_code)] // not every benchmark reads metrics
pub async fn metric(http: &reqwest::Client, d: &Daemon, name: &str) -> usize {
    let metrics = http
        .get(format!("{}/metrics", d.base))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    metrics
        .lines()
        .find(|l| {
            l.strip_prefix(name)
                .is_some_and(|rest| rest.starts_with(' '))
        })
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(0.0) as usize
}
