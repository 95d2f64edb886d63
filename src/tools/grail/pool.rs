//! The pool of grail host processes: at most `size` hosts per pool, each
//! a Python process running `host.py` (one call at a time), started on
//! demand, reused while healthy, killed on a timeout, a cancellation or a
//! protocol fault, and replaced by a fresh one at the next checkout when it
//! died.

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, ChildStdin, ChildStdout};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::tools::process::{GroupGuard, isolated_command};

/// The host program, shipped inside the binary so it always speaks this
/// daemon's protocol.
pub const HOST_SOURCE: &str = include_str!("host.py");

/// How a pool starts its hosts.
#[derive(Debug, Clone)]
pub struct HostLaunch {
    /// The Python interpreter (a name looked up on `PATH`, or a path).
    pub python: String,
    pub working_dir: PathBuf,
    pub env_allowlist: Vec<String>,
    pub env: Vec<(String, String)>,
}

/// Why a host could not be had or could not finish a conversation.
#[derive(Debug, thiserror::Error)]
pub enum HostError {
    #[error("cannot start the grail host with `{python}` in {dir}: {source}")]
    Spawn {
        python: String,
        dir: String,
        source: std::io::Error,
    },
    #[error(
        "grail is not importable in `{python}` ({detail}): install Grail into that interpreter, or set the tool's `grail.python` to one that has it"
    )]
    NoGrail { python: String, detail: String },
    #[error("the grail host (`{python}`) {what}{stderr}")]
    Died {
        python: String,
        what: String,
        stderr: String,
    },
    #[error("the grail host sent {what}")]
    Protocol { what: String },
    #[error("the grail host's answer exceeds {cap} bytes")]
    TooLarge { cap: usize },
}

/// One running host.
pub struct Host {
    child: Child,
    stdin: ChildStdin,
    stdout: BufReader<ChildStdout>,
    stderr: Arc<Mutex<Vec<u8>>>,
    python: String,
    _group: GroupGuard,
}

/// The most of a host's stderr kept for error messages.
const STDERR_TAIL: usize = 4096;

impl Host {
    async fn start(launch: &HostLaunch, startup: Duration) -> Result<Host, HostError> {
        let args = ["-u".to_string(), "-c".to_string(), HOST_SOURCE.to_string()];
        let mut command = isolated_command(
            &launch.python,
            &args,
            &launch.working_dir,
            launch.env_allowlist.iter().map(String::as_str),
            launch.env.iter().map(|(k, v)| (k.as_str(), v.as_str())),
        );
        command
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command.spawn().map_err(|source| HostError::Spawn {
            python: launch.python.clone(),
            dir: launch.working_dir.display().to_string(),
            source,
        })?;
        let group = GroupGuard::of(child.id());
        let (Some(stdin), Some(stdout), Some(stderr)) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take())
        else {
            return Err(HostError::Protocol {
                what: "no pipes (cannot happen: all three are piped)".into(),
            });
        };
        let tail = Arc::new(Mutex::new(Vec::new()));
        tokio::spawn(keep_tail(stderr, tail.clone()));
        let mut host = Host {
            child,
            stdin,
            stdout: BufReader::new(stdout),
            stderr: tail,
            python: launch.python.clone(),
            _group: group,
        };
        let hello = match tokio::time::timeout(startup, host.receive(64 * 1024)).await {
            Ok(hello) => hello?,
            Err(_) => {
                return Err(HostError::Died {
                    python: launch.python.clone(),
                    what: format!("did not start within {startup:?}"),
                    stderr: host.stderr_note(),
                });
            }
        };
        match hello.get("op").and_then(Value::as_str) {
            Some("ready") => Ok(host),
            Some("fatal") => Err(HostError::NoGrail {
                python: launch.python.clone(),
                detail: hello["error"]
                    .as_str()
                    .unwrap_or("unknown error")
                    .to_string(),
            }),
            _ => Err(HostError::Protocol {
                what: format!("{hello} instead of its ready line"),
            }),
        }
    }

    /// Whether the process is still running.
    fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Writes one request line.
    pub async fn send(&mut self, message: &Value) -> Result<(), HostError> {
        let mut line = message.to_string();
        line.push('\n');
        let written = async {
            self.stdin.write_all(line.as_bytes()).await?;
            self.stdin.flush().await
        }
        .await;
        match written {
            Ok(()) => Ok(()),
            Err(e) => Err(self
                .died(format!("stopped reading its requests ({e})"))
                .await),
        }
    }

    /// Reads one answer line of at most `cap` bytes.
    pub async fn receive(&mut self, cap: usize) -> Result<Value, HostError> {
        let mut line = Vec::new();
        let read = (&mut self.stdout)
            .take(cap as u64 + 1)
            .read_until(b'\n', &mut line)
            .await;
        match read {
            Ok(0) => return Err(self.died("exited".into()).await),
            Ok(_) => {}
            Err(e) => return Err(self.died(format!("broke its answer pipe ({e})")).await),
        }
        if line.last() != Some(&b'\n') {
            if line.len() > cap {
                return Err(HostError::TooLarge { cap });
            }
            return Err(self.died("exited in the middle of an answer".into()).await);
        }
        serde_json::from_slice(&line).map_err(|e| HostError::Protocol {
            what: format!(
                "a line that is not JSON ({e}): {}",
                crate::events::preview(String::from_utf8_lossy(&line).trim(), 200)
            ),
        })
    }

    /// The error of a host that is gone, with how it ended and the tail of
    /// its stderr.
    async fn died(&mut self, what: String) -> HostError {
        let status = tokio::time::timeout(Duration::from_secs(1), self.child.wait()).await;
        let how = match status {
            Ok(Ok(status)) => match (
                status.code(),
                std::os::unix::process::ExitStatusExt::signal(&status),
            ) {
                (Some(code), _) => format!(" (exit code {code})"),
                (None, Some(signal)) => format!(" (killed by signal {signal})"),
                _ => String::new(),
            },
            _ => String::new(),
        };
        HostError::Died {
            python: self.python.clone(),
            what: format!("{what}{how}"),
            stderr: self.stderr_note(),
        }
    }

    fn stderr_note(&self) -> String {
        let tail = self.stderr.lock().map(|t| t.clone()).unwrap_or_default();
        let text = String::from_utf8_lossy(&tail).trim().to_string();
        if text.is_empty() {
            String::new()
        } else {
            format!("; its stderr: {}", crate::events::preview(&text, 1000))
        }
    }
}

/// Keeps the last `STDERR_TAIL` bytes a host wrote to stderr.
async fn keep_tail<R: AsyncRead + Unpin>(mut reader: R, tail: Arc<Mutex<Vec<u8>>>) {
    let mut chunk = [0u8; 4096];
    while let Ok(n) = reader.read(&mut chunk).await {
        if n == 0 {
            return;
        }
        if let Ok(mut tail) = tail.lock() {
            tail.extend_from_slice(&chunk[..n]);
            let excess = tail.len().saturating_sub(STDERR_TAIL);
            tail.drain(..excess);
        }
    }
}

/// A bounded set of hosts started the same way.
pub struct HostPool {
    launch: HostLaunch,
    slots: Arc<Semaphore>,
    idle: Mutex<Vec<Host>>,
}

/// A host lent out by the pool; give it back with [`HostPool::give_back`]
/// after a clean conversation, or drop it to kill it.
pub struct Lease {
    pub host: Host,
    _slot: OwnedSemaphorePermit,
}

impl HostPool {
    pub fn new(launch: HostLaunch, size: usize) -> Self {
        Self {
            launch,
            slots: Arc::new(Semaphore::new(size.max(1))),
            idle: Mutex::new(Vec::new()),
        }
    }

    /// A host for one call: an idle one still alive, else a new one
    /// (started within `startup`). Waits while all `size` are busy.
    pub async fn checkout(&self, startup: Duration) -> Result<Lease, HostError> {
        let slot = self
            .slots
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| HostError::Protocol {
                what: "nothing: its pool is closed".into(),
            })?;
        loop {
            let idle = self.idle.lock().ok().and_then(|mut idle| idle.pop());
            match idle {
                Some(mut host) => {
                    if host.alive() {
                        return Ok(Lease { host, _slot: slot });
                    }
                    // Died while idle (killed from outside): dropped, and replaced.
                }
                None => break,
            }
        }
        let host = Host::start(&self.launch, startup).await?;
        Ok(Lease { host, _slot: slot })
    }

    /// Returns a host after a clean conversation, for the next call.
    pub fn give_back(&self, lease: Lease) {
        let Lease { host, _slot } = lease;
        if let Ok(mut idle) = self.idle.lock() {
            idle.push(host);
        }
    }
}
