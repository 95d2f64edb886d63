//! The `process` backend: runs a command (an argv list, never a shell),
//! writes the JSON arguments to its stdin and reads one JSON value from its
//! stdout. The child runs in its own process group with a cleared
//! environment; on timeout, cancellation or drop the whole group is killed.

use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use async_trait::async_trait;
use nix::sys::signal::{Signal, killpg};
use nix::unistd::Pid;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;

use super::{Tool, ToolContext, ToolError, ToolOutput};
use crate::types::ToolSchema;

/// Environment variables a process tool keeps unless configured otherwise.
pub const DEFAULT_ENV_ALLOWLIST: &[&str] = &["PATH", "LANG", "LC_ALL", "TZ", "HOME", "TMPDIR"];

#[derive(Debug, Clone)]
pub struct ProcessSpec {
    pub command: Vec<String>,
    pub working_dir: PathBuf,
    /// Variables passed through from the daemon's environment.
    pub env_allowlist: Vec<String>,
    /// Variables set explicitly.
    pub env: Vec<(String, String)>,
    pub max_output_bytes: usize,
    pub timeout: Duration,
}

pub struct ProcessTool {
    schema: ToolSchema,
    spec: ProcessSpec,
}

impl ProcessTool {
    pub fn new(schema: ToolSchema, spec: ProcessSpec) -> Self {
        Self { schema, spec }
    }

    /// Starts the command (isolated: its own process group, a cleared
    /// environment but the allowed variables) with its pipes, and the
    /// program it runs.
    fn spawn(&self, ctx: &ToolContext<'_>) -> Result<(tokio::process::Child, &str), ToolError> {
        let name = &self.schema.name;
        let (program, args) = self.spec.command.split_first().ok_or_else(|| {
            ToolError::Failed(format!("process tool `{name}` has an empty command"))
        })?;
        let mut command = isolated_command(
            program,
            args,
            &self.spec.working_dir,
            self.spec.env_allowlist.iter().map(String::as_str),
            self.spec.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        );
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        // The same on every attempt of this call: a script can use it to
        // make its side effect happen once.
        command.env("SA_IDEMPOTENCY_KEY", ctx.idempotency_key());
        let child = command.spawn().map_err(|e| {
            ToolError::Failed(format!(
                "cannot start `{program}` for tool `{name}` in {}: {e}",
                self.spec.working_dir.display()
            ))
        })?;
        Ok((child, program))
    }
}

/// Kills the child's whole process group when dropped, so a timed-out or
/// cancelled call never leaves grandchildren behind.
/// Kills a process group when dropped (a tool's child and anything it
/// started).
pub(crate) struct GroupGuard(Option<Pid>);

/// A command for `program` that starts in `dir` in a process group of its
/// own (killed with the group when dropped), with a cleared environment
/// except the `allowlist`ed variables and `env`: how tools, MCP servers
/// and workflow gates start processes.
pub(crate) fn isolated_command<'a>(
    program: &str,
    args: &[String],
    dir: &std::path::Path,
    allowlist: impl IntoIterator<Item = &'a str>,
    env: impl IntoIterator<Item = (&'a str, &'a str)>,
) -> Command {
    let mut command = Command::new(program);
    command
        .args(args)
        .current_dir(dir)
        .env_clear()
        .process_group(0)
        .kill_on_drop(true);
    for key in allowlist {
        if let Ok(value) = std::env::var(key) {
            command.env(key, value);
        }
    }
    command.envs(env);
    command
}

impl GroupGuard {
    /// The guard of a started child's group (its id is the group's).
    pub(crate) fn of(child_id: Option<u32>) -> Self {
        Self(child_id.map(|id| Pid::from_raw(id as i32)))
    }

    pub(crate) fn kill(&self) {
        if let Some(pgid) = self.0 {
            // ESRCH (already gone) is fine.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How long the pipes may stay open after the direct child has exited: long
/// enough to drain what it wrote, short enough that a grandchild holding
/// stdout open (a daemonised helper, `cmd &`) cannot turn a finished call
/// into a timeout.
const PIPE_GRACE: Duration = Duration::from_millis(250);

/// Reads into `out` (kept by the caller, so what was read survives an
/// abandoned read), keeping at most `cap` bytes and draining the rest.
async fn read_capped<R: AsyncRead + Unpin>(
    mut reader: R,
    cap: usize,
    out: &mut Vec<u8>,
    truncated: &mut bool,
) -> std::io::Result<()> {
    let mut chunk = [0u8; 8192];
    loop {
        let n = reader.read(&mut chunk).await?;
        if n == 0 {
            return Ok(());
        }
        if out.len() + n > cap {
            out.extend_from_slice(&chunk[..cap - out.len()]);
            *truncated = true;
            // Keep draining so the child never blocks on a full pipe.
            continue;
        }
        out.extend_from_slice(&chunk[..n]);
    }
}

/// What one run of the child produced.
struct Collected {
    stdout: Vec<u8>,
    truncated: bool,
    stdout_error: Option<std::io::Error>,
    stderr: Vec<u8>,
    status: std::io::Result<std::process::ExitStatus>,
}

/// Feeds `input` to the child while reading its stdout and stderr (a child
/// may write more than a pipe buffer before it reads its input, so writing
/// first would deadlock), and returns once the child has exited and its
/// pipes are drained, or `PIPE_GRACE` after its exit, whichever is first.
async fn collect(
    child: &mut tokio::process::Child,
    input: &[u8],
    cap: usize,
    group: &GroupGuard,
) -> Collected {
    let stdin = child.stdin.take();
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let (mut out, mut truncated, mut err, mut err_truncated) =
        (Vec::new(), false, Vec::new(), false);
    let (pipes_done, status, stdout_result) = {
        let write = async {
            if let Some(mut stdin) = stdin {
                // A tool that ignores stdin may close it early; that is not an error.
                let _ = stdin.write_all(input).await;
                let _ = stdin.shutdown().await;
            }
        };
        let read_out = async {
            match stdout {
                Some(s) => read_capped(s, cap, &mut out, &mut truncated).await,
                None => Ok(()),
            }
        };
        let read_err = async {
            match stderr {
                Some(s) => read_capped(s, 16 * 1024, &mut err, &mut err_truncated)
                    .await
                    .ok(),
                None => None,
            }
        };
        let pipes = async {
            let ((), out, _) = tokio::join!(write, read_out, read_err);
            out
        };
        tokio::pin!(pipes);
        let first = tokio::select! {
            out = &mut pipes => Ok(out),
            status = child.wait() => Err(status),
        };
        match first {
            Ok(stdout_result) => (true, child.wait().await, Some(stdout_result)),
            Err(status) => match tokio::time::timeout(PIPE_GRACE, &mut pipes).await {
                Ok(stdout_result) => (true, status, Some(stdout_result)),
                Err(_) => (false, status, None),
            },
        }
    };
    if !pipes_done {
        // Something the child started still holds a pipe: end the group
        // now; what was read so far is the answer.
        group.kill();
    }
    Collected {
        stdout: out,
        truncated,
        stdout_error: stdout_result.and_then(Result::err),
        stderr: err,
        status,
    }
}

#[async_trait]
impl Tool for ProcessTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn kind(&self) -> &'static str {
        "process"
    }

    async fn invoke(
        &self,
        arguments: Value,
        ctx: ToolContext<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let (mut child, program) = self.spawn(&ctx)?;
        let guard = GroupGuard::of(child.id());

        let input = serde_json::to_vec(&arguments).unwrap_or_default();
        let cap = self.spec.max_output_bytes;
        let timeout = self
            .spec
            .timeout
            .min(ctx.remaining().max(Duration::from_millis(1)));
        let collected = tokio::select! {
            r = tokio::time::timeout(timeout, collect(&mut child, &input, cap, &guard)) => match r {
                Ok(r) => r,
                Err(_) => return Err(ToolError::Failed("timeout".into())),
            },
            _ = ctx.cancel.cancelled() => return Err(ToolError::Failed("cancelled".into())),
        };
        // The child has exited; kill any grandchildren it left in its group.
        drop(guard);
        answer(program, collected, cap)
    }
}

/// The tool's answer from what its run of `program` produced: the one JSON
/// value it printed, as printed; else why not (it failed, its output went
/// past `cap` bytes, or it is not one JSON value), with its stderr.
fn answer(program: &str, collected: Collected, cap: usize) -> Result<ToolOutput, ToolError> {
    let status = collected
        .status
        .map_err(|e| ToolError::Failed(format!("waiting for `{program}`: {e}")))?;
    if let Some(e) = collected.stdout_error {
        return Err(ToolError::Failed(format!(
            "reading stdout of `{program}`: {e}"
        )));
    }
    let (stdout, truncated) = (collected.stdout, collected.truncated);
    let stderr_text = String::from_utf8_lossy(&collected.stderr)
        .trim()
        .to_string();
    if !status.success() {
        let code = status.code().map_or_else(
            || "killed by a signal".to_string(),
            |c| format!("exit code {c}"),
        );
        let detail = if stderr_text.is_empty() {
            String::new()
        } else {
            format!(": {stderr_text}")
        };
        return Err(ToolError::Failed(format!(
            "`{program}` failed with {code}{detail}"
        )));
    }
    if truncated {
        return Err(ToolError::Failed(format!(
            "output of `{program}` exceeds {cap} bytes"
        )));
    }
    let text = String::from_utf8_lossy(&stdout);
    match serde_json::from_str::<Value>(text.trim()) {
        // Keep the text as printed (separators included) so transcripts replay byte for byte.
        Ok(_) => Ok(ToolOutput::Text(text.trim().to_string())),
        Err(e) => {
            let detail = if stderr_text.is_empty() {
                String::new()
            } else {
                format!("; stderr: {stderr_text}")
            };
            Err(ToolError::Failed(format!(
                "`{program}` did not print one JSON value ({e}): {}{detail}",
                crate::events::preview(text.trim(), 200)
            )))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{EventSink, NullObserver, RunContext};
    use crate::tools::CallPlace;
    use crate::types::ToolCall;
    use serde_json::json;
    use std::sync::Arc;
    use std::time::Instant;

    fn tool(command: &[&str], timeout: Duration) -> ProcessTool {
        tool_with_cap(command, timeout, 1024)
    }

    fn tool_with_cap(command: &[&str], timeout: Duration, max_output_bytes: usize) -> ProcessTool {
        ProcessTool::new(
            ToolSchema {
                name: "t".into(),
                description: String::new(),
                parameters: json!({"type": "object"}),
            },
            ProcessSpec {
                command: command.iter().map(|s| s.to_string()).collect(),
                working_dir: std::env::temp_dir(),
                env_allowlist: vec!["PATH".into()],
                env: vec![("EXTRA".into(), "1".into())],
                max_output_bytes,
                timeout,
            },
        )
    }

    async fn call(tool: &ProcessTool, args: Value) -> Result<ToolOutput, ToolError> {
        let sink = EventSink::new(RunContext::default(), 1, Arc::new(NullObserver));
        let call = ToolCall::new("c", "t", args.clone());
        let ctx = ToolContext {
            call: &call,
            place: CallPlace {
                turn: 1,
                ..CallPlace::default()
            },
            cancel: Default::default(),
            deadline: Instant::now() + Duration::from_secs(30),
            events: &sink,
        };
        tool.invoke(args, ctx).await
    }

    #[tokio::test]
    async fn echoes_stdin_json_with_a_cleared_environment() {
        let t = tool(
            &[
                "sh",
                "-c",
                "read x; printf '{\"in\": %s, \"home\": \"%s\", \"extra\": \"%s\"}' \"$x\" \"${SECRET:-none}\" \"$EXTRA\"",
            ],
            Duration::from_secs(5),
        );
        let out = call(&t, json!({"a": 1})).await.unwrap();
        let ToolOutput::Text(text) = out else {
            panic!("{out:?}")
        };
        assert_eq!(
            text, r#"{"in": {"a":1}, "home": "none", "extra": "1"}"#,
            "stdout kept byte for byte"
        );
    }

    #[tokio::test]
    async fn failures_carry_stderr_and_bad_json_is_an_error() {
        let t = tool(
            &["sh", "-c", "echo broken >&2; exit 3"],
            Duration::from_secs(5),
        );
        let err = call(&t, json!({})).await.unwrap_err().to_string();
        assert!(
            err.contains("exit code 3") && err.contains("broken"),
            "{err}"
        );
        let t = tool(&["sh", "-c", "echo not json"], Duration::from_secs(5));
        assert!(
            call(&t, json!({}))
                .await
                .unwrap_err()
                .to_string()
                .contains("did not print one JSON value")
        );
        let t = tool(
            &["sh", "-c", "head -c 5000 /dev/zero | tr '\\0' 'a'"],
            Duration::from_secs(5),
        );
        assert!(
            call(&t, json!({}))
                .await
                .unwrap_err()
                .to_string()
                .contains("exceeds 1024 bytes")
        );
    }

    #[tokio::test]
    async fn timeout_kills_the_whole_process_group() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        // The pid file appears whole (renamed into place) or not at all, and
        // the timeout leaves the shell seconds to write it; `sleep 30` still
        // outlives the timeout, so only the timeout can end the call.
        let script = format!(
            "sleep 30 & echo $! > {0}.tmp && mv {0}.tmp {0}; wait",
            pidfile.display()
        );
        let t = tool(&["sh", "-c", &script], Duration::from_secs(5));
        let err = call(&t, json!({})).await.unwrap_err();
        assert_eq!(err, ToolError::Failed("timeout".into()));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(gone(pid).await, "grandchild {pid} survived the timeout");
    }

    /// Waits until `pid` is gone (or a zombie about to be reaped by init),
    /// for up to a minute: a busy machine may be slow to deliver the kill.
    async fn gone(pid: i32) -> bool {
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if state.is_empty() || state.split_whitespace().nth(2) == Some("Z") {
                return true;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        false
    }

    /// The child writes 300 KB (more than a pipe buffer) before reading any
    /// of its 300 KB of input: writing the input first deadlocked until the
    /// timeout.
    #[tokio::test]
    async fn a_child_that_writes_before_reading_its_input_does_not_deadlock() {
        let t = tool_with_cap(
            &[
                "sh",
                "-c",
                "head -c 300000 /dev/zero | tr '\\0' ' '; wc -c | tr -d ' '",
            ],
            Duration::from_secs(60),
            1024 * 1024,
        );
        let args = json!({"pad": "x".repeat(300_000)});
        let expected = serde_json::to_vec(&args).unwrap().len().to_string();
        let out = call(&t, args).await.unwrap();
        assert_eq!(out, ToolOutput::Text(expected));
    }

    /// The child answers and exits, but a background grandchild keeps its
    /// stdout open: the call returns the answer (instead of waiting for the
    /// grandchild until the timeout) and the grandchild is killed.
    #[tokio::test]
    async fn a_grandchild_holding_stdout_does_not_turn_a_finished_call_into_a_timeout() {
        let dir = tempfile::tempdir().unwrap();
        let pidfile = dir.path().join("grandchild.pid");
        let script = format!(
            "sleep 120 & echo $! > {}; echo '{{\"ok\": 1}}'",
            pidfile.display()
        );
        let t = tool(&["sh", "-c", &script], Duration::from_secs(60));
        let out = call(&t, json!({})).await.unwrap();
        assert_eq!(out, ToolOutput::Text(r#"{"ok": 1}"#.into()));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(gone(pid).await, "grandchild {pid} survived the call");
    }
}
