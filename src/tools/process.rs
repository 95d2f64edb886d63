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
}

/// Kills the child's whole process group when dropped, so a timed-out or
/// cancelled call never leaves grandchildren behind.
struct GroupGuard(Option<Pid>);

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if let Some(pgid) = self.0.take() {
            // ESRCH (already gone) is fine.
            let _ = killpg(pgid, Signal::SIGKILL);
        }
    }
}

async fn read_capped<R: AsyncRead + Unpin>(
    mut reader: R,
    cap: usize,
) -> std::io::Result<(Vec<u8>, bool)> {
    let mut out = Vec::new();
    let mut chunk = [0u8; 8192];
    let mut truncated = false;
    loop {
        let n = reader.read(&mut chunk).await?;
        if n == 0 {
            break;
        }
        if out.len() + n > cap {
            out.extend_from_slice(&chunk[..cap - out.len()]);
            truncated = true;
            // Keep draining so the child never blocks on a full pipe.
            continue;
        }
        out.extend_from_slice(&chunk[..n]);
    }
    Ok((out, truncated))
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
        let name = &self.schema.name;
        let (program, args) = self.spec.command.split_first().ok_or_else(|| {
            ToolError::Failed(format!("process tool `{name}` has an empty command"))
        })?;
        let mut command = Command::new(program);
        command
            .args(args)
            .current_dir(&self.spec.working_dir)
            .env_clear()
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .process_group(0)
            .kill_on_drop(true);
        for key in &self.spec.env_allowlist {
            if let Ok(value) = std::env::var(key) {
                command.env(key, value);
            }
        }
        for (key, value) in &self.spec.env {
            command.env(key, value);
        }
        let mut child = command.spawn().map_err(|e| {
            ToolError::Failed(format!(
                "cannot start `{program}` for tool `{name}` in {}: {e}",
                self.spec.working_dir.display()
            ))
        })?;
        let guard = GroupGuard(child.id().map(|id| Pid::from_raw(id as i32)));

        let input = serde_json::to_vec(&arguments).unwrap_or_default();
        let mut stdin = child.stdin.take();
        let stdout = child.stdout.take();
        let stderr = child.stderr.take();
        let cap = self.spec.max_output_bytes;
        let run = async {
            if let Some(stdin) = stdin.as_mut() {
                // A tool that ignores stdin may close it early; that is not an error.
                let _ = stdin.write_all(&input).await;
                let _ = stdin.shutdown().await;
            }
            drop(stdin);
            let out = async {
                match stdout {
                    Some(s) => read_capped(s, cap).await,
                    None => Ok((Vec::new(), false)),
                }
            };
            let err = async {
                match stderr {
                    Some(s) => read_capped(s, 16 * 1024).await,
                    None => Ok((Vec::new(), false)),
                }
            };
            let (out, err) = tokio::join!(out, err);
            let status = child.wait().await;
            (out, err, status)
        };
        let timeout = self
            .spec
            .timeout
            .min(ctx.remaining().max(Duration::from_millis(1)));
        let (out, err, status) = tokio::select! {
            r = tokio::time::timeout(timeout, run) => match r {
                Ok(r) => r,
                Err(_) => return Err(ToolError::Failed("timeout".into())),
            },
            _ = ctx.cancel.cancelled() => return Err(ToolError::Failed("cancelled".into())),
        };
        // The child has exited; kill any grandchildren it left in its group.
        drop(guard);

        let status =
            status.map_err(|e| ToolError::Failed(format!("waiting for `{program}`: {e}")))?;
        let (stdout, truncated) =
            out.map_err(|e| ToolError::Failed(format!("reading stdout of `{program}`: {e}")))?;
        let stderr_text = err
            .map(|(b, _)| String::from_utf8_lossy(&b).trim().to_string())
            .unwrap_or_default();
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::events::{EventSink, NullObserver, RunContext};
    use crate::types::ToolCall;
    use serde_json::json;
    use std::sync::Arc;
    use std::time::Instant;

    fn tool(command: &[&str], timeout: Duration) -> ProcessTool {
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
                max_output_bytes: 1024,
                timeout,
            },
        )
    }

    async fn call(tool: &ProcessTool, args: Value) -> Result<ToolOutput, ToolError> {
        let sink = EventSink::new(RunContext::default(), 1, Arc::new(NullObserver));
        let call = ToolCall::new("c", "t", args.clone());
        let ctx = ToolContext {
            call: &call,
            turn: 1,
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
        let script = format!("sleep 30 & echo $! > {}; wait", pidfile.display());
        let t = tool(&["sh", "-c", &script], Duration::from_millis(300));
        let err = call(&t, json!({})).await.unwrap_err();
        assert_eq!(err, ToolError::Failed("timeout".into()));
        let pid: i32 = std::fs::read_to_string(&pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        // The grandchild must be gone (or a zombie about to be reaped by init).
        let mut alive = true;
        for _ in 0..50 {
            let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            if state.is_empty() || state.split_whitespace().nth(2) == Some("Z") {
                alive = false;
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(!alive, "grandchild {pid} survived the timeout");
    }
}
