//! Running one command for a gate or the commit step: an argv (never a
//! shell) in its own process group with a cleared environment, a deadline
//! and a cap on the output it may write (`max_output_bytes`).
//!
//! Cancellation is dropping the future: the child's process group is
//! killed then (and on timeout), so no grandchild outlives its command.

use std::path::Path;
use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};

use crate::tools::process::{DEFAULT_ENV_ALLOWLIST, GroupGuard, isolated_command};

/// Variables a gate keeps besides the tool default (git and `gh` need them).
const GATE_EXTRA_ENV: &[&str] = &[
    "GH_TOKEN",
    "GITHUB_TOKEN",
    "SSH_AUTH_SOCK",
    "GIT_SSH_COMMAND",
];

/// How much of a command's output a report keeps (the tail: errors come last).
const TRACEBACK_CHARS: usize = 4000;

/// What one command run produced.
#[derive(Debug)]
pub struct CommandRun {
    /// `None` when killed by a signal, timed out or not started.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Why the command did not finish normally (timeout, cannot start,
    /// output over `max_output_bytes`).
    pub error: Option<String>,
}

impl CommandRun {
    pub fn success(&self) -> bool {
        self.code == Some(0)
    }

    /// stdout and stderr, for output rules and reports.
    pub fn output(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }

    /// A short account of a failure: the error or exit code, then the output's tail.
    pub fn describe(&self, what: &str) -> String {
        let status = match (&self.error, self.code) {
            (Some(e), _) => e.clone(),
            (None, Some(code)) => format!("exit code {code}"),
            (None, None) => "killed by a signal".into(),
        };
        let output = tail(self.output().trim(), TRACEBACK_CHARS);
        if output.is_empty() {
            format!("`{what}` failed: {status}")
        } else {
            format!("`{what}` failed: {status}\n{output}")
        }
    }
}

/// The last `max` characters of `text` (errors come last), marked when cut.
pub(super) fn tail(text: &str, max: usize) -> String {
    let count = text.chars().count();
    if count <= max {
        return text.to_string();
    }
    let skip = text.char_indices().nth(count - max).map_or(0, |(i, _)| i);
    format!("…{}", &text[skip..])
}

/// Reads a pipe to its end keeping at most `cap` bytes, draining the rest
/// so the command never blocks on a full pipe; says whether it wrote more.
async fn read_capped<R: AsyncRead + Unpin>(reader: Option<R>, cap: usize) -> (Vec<u8>, bool) {
    let Some(mut reader) = reader else {
        return (Vec::new(), false);
    };
    let (mut out, mut over) = (Vec::new(), false);
    let mut chunk = [0u8; 8192];
    loop {
        let n = match reader.read(&mut chunk).await {
            Ok(0) | Err(_) => return (out, over),
            Ok(n) => n,
        };
        let room = cap - out.len();
        if n > room {
            out.extend_from_slice(&chunk[..room]);
            over = true;
        } else {
            out.extend_from_slice(&chunk[..n]);
        }
    }
}

/// Runs `argv` in `dir` (own process group, cleared environment except an
/// allowlist plus `env`), killing the group on timeout or when dropped. At
/// most `max_output_bytes` of each of stdout and stderr are kept; more is
/// an error naming the cap.
pub async fn run_command(
    argv: &[String],
    dir: &Path,
    timeout: Duration,
    max_output_bytes: usize,
    env: &[(&str, &str)],
) -> CommandRun {
    run_process(argv, dir, timeout, max_output_bytes, env, true).await
}

/// `run_command`; `gate` says whether the process is a gate's (the
/// `gate_started` failpoint counts those only, not the commit step's git).
pub(crate) async fn run_process(
    argv: &[String],
    dir: &Path,
    timeout: Duration,
    max_output_bytes: usize,
    env: &[(&str, &str)],
    gate: bool,
) -> CommandRun {
    let not_run = |error: String| CommandRun {
        code: None,
        stdout: String::new(),
        stderr: String::new(),
        error: Some(error),
    };
    let Some((program, args)) = argv.split_first() else {
        return not_run("empty command".into());
    };
    let mut command = isolated_command(
        program,
        args,
        dir,
        DEFAULT_ENV_ALLOWLIST.iter().chain(GATE_EXTRA_ENV).copied(),
        env.iter().copied(),
    );
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) => {
            return not_run(format!(
                "cannot start `{program}` in {}: {e}",
                dir.display()
            ));
        }
    };
    // Dropped on every path: kills whatever the command left in its group.
    let _group = GroupGuard::of(child.id());
    if gate {
        crate::failpoint::hit(crate::failpoint::Failpoint::GateStarted);
    }
    let (stdout, stderr) = (child.stdout.take(), child.stderr.take());
    let finished = async {
        let (out, err) = tokio::join!(
            read_capped(stdout, max_output_bytes),
            read_capped(stderr, max_output_bytes)
        );
        (out, err, child.wait().await)
    };
    match tokio::time::timeout(timeout, finished).await {
        Ok(((stdout, out_over), (stderr, err_over), Ok(status))) => {
            let over = [("stdout", out_over), ("stderr", err_over)]
                .into_iter()
                .find(|(_, over)| *over);
            CommandRun {
                code: if over.is_some() { None } else { status.code() },
                stdout: String::from_utf8_lossy(&stdout).into_owned(),
                stderr: String::from_utf8_lossy(&stderr).into_owned(),
                error: over.map(|(stream, _)| {
                    format!(
                        "`{program}` wrote more than {max_output_bytes} bytes on {stream} \
                         (the gate's max_output_bytes); make the command quieter or raise \
                         `max_output_bytes` on its stage"
                    )
                }),
            }
        }
        Ok((_, _, Err(e))) => not_run(format!("waiting for `{program}`: {e}")),
        Err(_) => not_run(format!(
            "timed out after {}",
            humantime::format_duration(timeout)
        )),
    }
}
