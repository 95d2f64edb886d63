//! The HTTP client of the subcommands that talk to a running daemon: where
//! it is and its token (`--server`, `--token`), requests with the daemon's
//! errors made readable, following a job's event stream to its end, the
//! spinner shown meanwhile, and the one-line outcome of a finished job.

use std::io::{IsTerminal, Write};
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use clap::Args;
use eventsource_stream::Eventsource;
use futures::StreamExt;
use serde_json::{Value, json};

use super::printer::{Format, Printer};
use super::words::count;
use crate::events::{EventEnvelope, Observer, TokenDelta};

/// Where the daemon is.
#[derive(Debug, Clone, Args)]
pub struct ServerArgs {
    /// The daemon's base URL.
    #[arg(
        long,
        global = true,
        env = "STRUCTURED_AGENTS_SERVER",
        default_value = "http://127.0.0.1:7860"
    )]
    pub server: String,
    /// Bearer token for the API.
    #[arg(
        long,
        global = true,
        env = "STRUCTURED_AGENTS_TOKEN",
        hide_env_values = true
    )]
    pub token: Option<String>,
}

pub struct Client {
    pub(super) base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Client {
    pub fn new(args: &ServerArgs) -> anyhow::Result<Self> {
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .build()?;
        Ok(Self {
            base: args.server.trim_end_matches('/').to_string(),
            token: args.token.clone(),
            http,
        })
    }

    pub(super) fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut builder = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            builder = builder.bearer_auth(token);
        }
        builder
    }

    /// Sends and decodes JSON; API errors become readable messages.
    // The error body is read as a plugin's error answer is (tools/plugin.rs)
    // by shape only: two wires, each its own keys and defaults.
    async fn call(&self, builder: reqwest::RequestBuilder) -> anyhow::Result<Value> {
        let response = builder.timeout(Duration::from_secs(30)).send().await.with_context(|| {
            format!("cannot reach the daemon at {} (is `structured-agents serve` running? see --server)", self.base)
        })?;
        let status = response.status();
        let body: Value = response.json().await.unwrap_or(Value::Null);
        if !status.is_success() {
            let message = body
                .pointer("/error/message")
                .and_then(Value::as_str)
                .unwrap_or("no details");
            let field = body
                .pointer("/error/field")
                .and_then(Value::as_str)
                .map(|f| format!(" (field `{f}`)"))
                .unwrap_or_default();
            bail!("the daemon answered HTTP {status}: {message}{field}");
        }
        Ok(body)
    }

    pub async fn get(&self, path: &str) -> anyhow::Result<Value> {
        self.call(self.request(reqwest::Method::GET, path)).await
    }

    pub async fn delete(&self, path: &str) -> anyhow::Result<Value> {
        self.call(self.request(reqwest::Method::DELETE, path)).await
    }

    pub async fn post(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.call(self.request(reqwest::Method::POST, path).json(&body))
            .await
    }

    pub async fn put(&self, path: &str, body: Value) -> anyhow::Result<Value> {
        self.call(self.request(reqwest::Method::PUT, path).json(&body))
            .await
    }

    /// POSTs `body` to `path` and yields the `data:` of each SSE frame of
    /// the answer (the runtime API's streams).
    pub async fn post_frames(
        &self,
        path: &str,
        body: Value,
    ) -> anyhow::Result<impl futures::Stream<Item = anyhow::Result<String>> + use<>> {
        let response = self
            .request(reqwest::Method::POST, path)
            .json(&body)
            .send()
            .await
            .with_context(|| {
                format!("cannot reach the daemon at {} (is `structured-agents serve` running? see --server)", self.base)
            })?;
        let status = response.status();
        if !status.is_success() {
            let body: Value = response.json().await.unwrap_or(Value::Null);
            bail!(
                "the daemon answered HTTP {status}: {}",
                body.pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("no details")
            );
        }
        Ok(response.bytes_stream().eventsource().map(|event| {
            event.map(|e| e.data).context(
                "the stream was interrupted (the job runs on: see `structured-agents jobs`)",
            )
        }))
    }

    /// POSTs `body` to an agent's endpoint: a path of this daemon (with the
    /// token) or another server's URL (without it).
    pub async fn post_to(&self, endpoint: &str, body: Value) -> anyhow::Result<Value> {
        if endpoint.starts_with('/') {
            return self.post(endpoint, body).await;
        }
        self.call(self.http.post(endpoint).json(&body)).await
    }

    /// Follows a job's event stream to its end, reconnecting with
    /// `Last-Event-ID` when the connection drops, printing it in `format`.
    /// Returns the final state.
    pub async fn follow(&self, job_id: &str, format: Format) -> anyhow::Result<String> {
        let printer = Printer::new(format).streaming();
        let spinner = Spinner::new(format == Format::Human && std::io::stdout().is_terminal());
        let on_token = |token: &Value| match format {
            Format::Json => println!("{}", json!({"type": "token", "token": token})),
            Format::Human => printer.on_token(TokenDelta {
                run_id: token["run_id"].as_str().unwrap_or_default(),
                turn: token["turn"].as_u64().unwrap_or_default() as u32,
                text: token["text"].as_str().unwrap_or_default(),
            }),
        };
        let end = self
            .follow_with(
                job_id,
                &printer,
                &on_token,
                &spinner,
                format == Format::Json,
            )
            .await?;
        let state = end["state"].as_str().unwrap_or("unknown").to_string();
        match format {
            Format::Json => println!("{}", json!({"type": "end", "job": end})),
            Format::Human => {
                println!("job {job_id} {}", outcome_line(&end));
                if let Some(output) = end.pointer("/result/output").and_then(Value::as_str) {
                    println!("\n{output}");
                }
                if let Some(error) = end["error"].as_str() {
                    println!("error: {error}");
                }
            }
        }
        Ok(state)
    }

    /// Follows a job's event stream to its end, handing each durable event
    /// to `observer` and each streamed token to `on_token`; returns the
    /// `end` event (the job's final state, result and error). A broken
    /// stream is opened again after the last event read.
    pub async fn follow_with(
        &self,
        job_id: &str,
        observer: &dyn Observer,
        on_token: &dyn Fn(&Value),
        spinner: &Spinner,
        raw_unreadable: bool,
    ) -> anyhow::Result<Value> {
        let mut last_seq: Option<u64> = None;
        let mut failures = 0;
        loop {
            let Some(response) = self
                .open_events(job_id, last_seq, &mut failures, spinner)
                .await?
            else {
                continue;
            };
            let reader = EventReader {
                observer,
                on_token,
                spinner,
                raw_unreadable,
            };
            if let Some(end) = reader.read(response, &mut last_seq).await {
                return Ok(end);
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The job's event stream from after `last_seq`; `None` after a second
    /// waited out on an unreachable daemon (one unreachable for a minute,
    /// an unknown job and an error answer are errors).
    async fn open_events(
        &self,
        job_id: &str,
        last_seq: Option<u64>,
        failures: &mut u32,
        spinner: &Spinner,
    ) -> anyhow::Result<Option<reqwest::Response>> {
        let mut builder = self.request(reqwest::Method::GET, &format!("/v1/jobs/{job_id}/events"));
        if let Some(seq) = last_seq {
            builder = builder.header("Last-Event-ID", seq.to_string());
        }
        let response = match builder.send().await {
            Ok(r) if r.status().is_success() => r,
            Ok(r) if r.status() == reqwest::StatusCode::NOT_FOUND => {
                bail!("no job with id {job_id}")
            }
            Ok(r) => {
                let status = r.status();
                let body: Value = r.json().await.unwrap_or(Value::Null);
                let message = body
                    .pointer("/error/message")
                    .and_then(Value::as_str)
                    .unwrap_or("no details");
                bail!("the daemon answered HTTP {status}: {message}")
            }
            Err(e) => {
                *failures += 1;
                if *failures > 60 {
                    return Err(e).context("the event stream stayed unreachable for a minute");
                }
                spinner.tick(&format!("reconnecting to {} ({e})", self.base));
                tokio::time::sleep(Duration::from_secs(1)).await;
                return Ok(None);
            }
        };
        *failures = 0;
        Ok(Some(response))
    }
}

/// Where a followed job's events go: durable events to `observer` (or,
/// `raw_unreadable`, printed as they came when unreadable), tokens to
/// `on_token`, waits to the spinner.
struct EventReader<'a> {
    observer: &'a dyn Observer,
    on_token: &'a dyn Fn(&Value),
    spinner: &'a Spinner,
    raw_unreadable: bool,
}

impl EventReader<'_> {
    /// Reads one opened stream, keeping `last_seq` at the last durable
    /// event: the `end` event, or `None` when the stream broke off first.
    async fn read(&self, response: reqwest::Response, last_seq: &mut Option<u64>) -> Option<Value> {
        let spinner = self.spinner;
        let mut events = response.bytes_stream().eventsource();
        loop {
            let next = tokio::time::timeout(Duration::from_millis(250), events.next()).await;
            let event = match next {
                Err(_) => {
                    spinner.tick("waiting for the job");
                    continue;
                }
                Ok(None) => return None,
                Ok(Some(Err(e))) => {
                    spinner.tick(&format!("stream interrupted ({e}); resuming"));
                    return None;
                }
                Ok(Some(Ok(event))) => event,
            };
            spinner.clear();
            match event.event.as_str() {
                "end" => return Some(serde_json::from_str(&event.data).unwrap_or(Value::Null)),
                // The answer as it streams; the durable events follow.
                "token" => {
                    (self.on_token)(&serde_json::from_str(&event.data).unwrap_or(Value::Null));
                    continue;
                }
                // Live progress (no id): the printer tells the story
                // from the stored events, which follow.
                "progress" => continue,
                _ => {}
            }
            if let Ok(seq) = event.id.parse::<u64>() {
                *last_seq = Some(seq);
            }
            match serde_json::from_str::<EventEnvelope>(&event.data) {
                Ok(envelope) => {
                    let _ = self.observer.on_event(&envelope).await;
                }
                Err(_) if self.raw_unreadable => println!("{}", event.data),
                Err(e) => eprintln!("(unreadable event {}: {e})", event.id),
            }
        }
    }
}

/// A one-line progress indicator on terminals; plain lines elsewhere.
pub struct Spinner {
    terminal: bool,
    started: Instant,
    shown: std::cell::Cell<bool>,
    last_plain: std::cell::Cell<Option<Instant>>,
}

impl Spinner {
    pub fn new(terminal: bool) -> Self {
        Self {
            terminal,
            started: Instant::now(),
            shown: false.into(),
            last_plain: None.into(),
        }
    }

    fn tick(&self, what: &str) {
        const FRAMES: [&str; 10] = ["⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"];
        let elapsed = self.started.elapsed();
        if self.terminal {
            let frame = FRAMES[(elapsed.as_millis() / 100) as usize % FRAMES.len()];
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\r\x1b[2K{frame} {what} ({}s)", elapsed.as_secs());
            let _ = out.flush();
            self.shown.set(true);
        } else if self
            .last_plain
            .get()
            .is_none_or(|t| t.elapsed() >= Duration::from_secs(10))
        {
            eprintln!("… {what} ({}s)", elapsed.as_secs());
            self.last_plain.set(Some(Instant::now()));
        }
    }

    fn clear(&self) {
        if self.shown.replace(false) {
            let mut out = std::io::stdout().lock();
            let _ = write!(out, "\r\x1b[2K");
            let _ = out.flush();
        }
    }
}

/// A finished job's state and what happened: why it ended, its failed tool
/// calls, tokens and cost (`succeeded · no_tool_calls · 0 tool errors ·
/// 312 tokens · cost 0.0004`).
pub fn outcome_line(job: &Value) -> String {
    let mut parts = vec![job["state"].as_str().unwrap_or("unknown").to_string()];
    if let Some(reason) = job["termination_reason"].as_str() {
        parts.push(reason.to_string());
    }
    parts.push(count(
        job["tool_errors"].as_u64().unwrap_or(0),
        "tool error",
    ));
    parts.push(count(job["tokens_spent"].as_u64().unwrap_or(0), "token"));
    if let Some(cost) = job["cost_spent"].as_f64().filter(|c| *c > 0.0) {
        parts.push(format!("cost {cost}"));
    }
    parts.join(" · ")
}
