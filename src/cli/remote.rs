//! Client subcommands that talk to a running daemon over its HTTP API:
//! submit, jobs, job, watch, cancel, bundles, reload.

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
    base: String,
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

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let mut builder = self.http.request(method, format!("{}{path}", self.base));
        if let Some(token) = &self.token {
            builder = builder.bearer_auth(token);
        }
        builder
    }

    /// Sends and decodes JSON; API errors become readable messages.
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
    /// `end` event (the job's final state, result and error).
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
            let mut builder =
                self.request(reqwest::Method::GET, &format!("/v1/jobs/{job_id}/events"));
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
                    failures += 1;
                    if failures > 60 {
                        return Err(e).context("the event stream stayed unreachable for a minute");
                    }
                    spinner.tick(&format!("reconnecting to {} ({e})", self.base));
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    continue;
                }
            };
            failures = 0;
            let mut events = response.bytes_stream().eventsource();
            loop {
                let next = tokio::time::timeout(Duration::from_millis(250), events.next()).await;
                let event = match next {
                    Err(_) => {
                        spinner.tick("waiting for the job");
                        continue;
                    }
                    Ok(None) => break,
                    Ok(Some(Err(e))) => {
                        spinner.tick(&format!("stream interrupted ({e}); resuming"));
                        break;
                    }
                    Ok(Some(Ok(event))) => event,
                };
                spinner.clear();
                match event.event.as_str() {
                    "end" => return Ok(serde_json::from_str(&event.data).unwrap_or(Value::Null)),
                    // The answer as it streams; the durable events follow.
                    "token" => {
                        on_token(&serde_json::from_str(&event.data).unwrap_or(Value::Null));
                        continue;
                    }
                    // Live progress (no id): the printer tells the story
                    // from the stored events, which follow.
                    "progress" => continue,
                    _ => {}
                }
                if let Ok(seq) = event.id.parse::<u64>() {
                    last_seq = Some(seq);
                }
                match serde_json::from_str::<EventEnvelope>(&event.data) {
                    Ok(envelope) => {
                        let _ = observer.on_event(&envelope).await;
                    }
                    Err(_) if raw_unreadable => println!("{}", event.data),
                    Err(e) => eprintln!("(unreadable event {}: {e})", event.id),
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
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

#[derive(Debug, Args)]
pub struct SubmitArgs {
    /// The bundle's name.
    pub bundle: String,
    #[arg(long, short)]
    pub input: String,
    /// A template variable, NAME=VALUE (repeatable).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    #[arg(long, default_value_t = 0)]
    pub priority: i32,
    /// Run no earlier than this RFC 3339 time.
    #[arg(long)]
    pub run_at: Option<String>,
    /// A second submit with the same key returns the first job.
    #[arg(long)]
    pub idempotency_key: Option<String>,
    /// Follow the job's events until it ends.
    #[arg(long, short)]
    pub follow: bool,
    #[arg(long)]
    pub json: bool,
}

pub async fn submit(server: &ServerArgs, args: SubmitArgs) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    let mut body = json!({
        "bundle": args.bundle,
        "input": args.input,
        "variables": super::parse_vars(&args.vars)?,
        "priority": args.priority,
    });
    if let Some(t) = args.run_at {
        body["run_at"] = json!(t);
    }
    if let Some(k) = args.idempotency_key {
        body["idempotency_key"] = json!(k);
    }
    let job = client.post("/v1/jobs", body).await?;
    created(&client, &job, args.follow, args.json).await
}

/// `rerun ID`: the job again, as a new job (`POST /v1/jobs/{id}/rerun`).
pub async fn rerun(
    server: &ServerArgs,
    id: String,
    follow: bool,
    json: bool,
) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    let job = client
        .post(&format!("/v1/jobs/{id}/rerun"), json!({}))
        .await?;
    created(&client, &job, follow, json).await
}

/// Prints a job just created and, with `follow`, its events until it ends
/// (the exit code says how it ended).
pub(super) async fn created(
    client: &Client,
    job: &Value,
    follow: bool,
    json: bool,
) -> anyhow::Result<i32> {
    let id = job["id"].as_str().unwrap_or_default().to_string();
    if json && !follow {
        println!("{job}");
    } else if !json {
        println!(
            "job {id} {} (bundle {})",
            job["state"].as_str().unwrap_or("?"),
            job["bundle"].as_str().unwrap_or("?")
        );
    }
    if !follow {
        return Ok(0);
    }
    let format = if json { Format::Json } else { Format::Human };
    let state = client.follow(&id, format).await?;
    Ok(exit_code(&state))
}

fn exit_code(state: &str) -> i32 {
    match state {
        "succeeded" => 0,
        "cancelled" => 4,
        _ => 1,
    }
}

pub async fn watch(server: &ServerArgs, id: String, json: bool) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    let state = client
        .follow(&id, if json { Format::Json } else { Format::Human })
        .await?;
    Ok(exit_code(&state))
}

pub async fn jobs(
    server: &ServerArgs,
    state: Option<String>,
    bundle: Option<String>,
    limit: usize,
    json: bool,
) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    let mut query = vec![format!("limit={limit}")];
    if let Some(s) = state {
        query.push(format!("state={s}"));
    }
    if let Some(b) = bundle {
        query.push(format!("bundle={b}"));
    }
    let page = client.get(&format!("/v1/jobs?{}", query.join("&"))).await?;
    if json {
        println!("{page}");
        return Ok(0);
    }
    println!(
        "{:<38} {:<10} {:<20} {:>7}  updated",
        "id", "state", "bundle", "attempt"
    );
    for job in page["jobs"].as_array().into_iter().flatten() {
        println!(
            "{:<38} {:<10} {:<20} {:>7}  {}",
            job["id"].as_str().unwrap_or(""),
            job["state"].as_str().unwrap_or(""),
            job["bundle"].as_str().unwrap_or(""),
            job["attempts"],
            job["updated_at"].as_str().unwrap_or("")
        );
    }
    Ok(0)
}

pub async fn job(server: &ServerArgs, id: String) -> anyhow::Result<i32> {
    let job = Client::new(server)?.get(&format!("/v1/jobs/{id}")).await?;
    println!("{}", serde_json::to_string_pretty(&job)?);
    Ok(0)
}

pub async fn artifacts(
    server: &ServerArgs,
    id: String,
    name: Option<String>,
) -> anyhow::Result<i32> {
    let path = match &name {
        Some(name) => format!("/v1/jobs/{id}/artifacts/{name}"),
        None => format!("/v1/jobs/{id}/artifacts"),
    };
    let body = Client::new(server)?.get(&path).await?;
    println!("{}", serde_json::to_string_pretty(&body)?);
    Ok(0)
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

pub async fn cancel(server: &ServerArgs, id: String) -> anyhow::Result<i32> {
    let job = Client::new(server)?
        .post(&format!("/v1/jobs/{id}/cancel"), json!({}))
        .await?;
    println!("job {id} {}", job["state"].as_str().unwrap_or("?"));
    Ok(0)
}

pub async fn resolve(server: &ServerArgs, id: String, body: Value) -> anyhow::Result<i32> {
    let job = Client::new(server)?
        .post(&format!("/v1/jobs/{id}/resolve"), body)
        .await?;
    println!("job {id} {}", job["state"].as_str().unwrap_or("?"));
    Ok(0)
}

pub async fn bundles(server: &ServerArgs, json: bool) -> anyhow::Result<i32> {
    let list = Client::new(server)?.get("/v1/bundles").await?;
    if json {
        println!("{list}");
        return Ok(0);
    }
    for b in list["bundles"].as_array().into_iter().flatten() {
        println!(
            "{:<24} {:<10} {:<9} {}",
            b["name"].as_str().unwrap_or(""),
            b["version"].as_str().unwrap_or("-"),
            b["status"].as_str().unwrap_or(""),
            b["last_error"].as_str().unwrap_or("")
        );
    }
    for r in list["rejected"].as_array().into_iter().flatten() {
        println!(
            "{:<24} {:<10} {:<9} {} ({})",
            r["name"].as_str().unwrap_or(""),
            "-",
            "rejected",
            r["last_error"].as_str().unwrap_or(""),
            r["dir"].as_str().unwrap_or("")
        );
    }
    Ok(0)
}

pub async fn reload(server: &ServerArgs, config: Option<&std::path::Path>) -> anyhow::Result<i32> {
    let client = reload_client(server, config)?;
    let response = client
        .request
        .timeout(Duration::from_secs(120))
        .send()
        .await
        .with_context(|| {
            format!(
                "cannot reach the daemon at {} (is it running?)",
                client.base
            )
        })?;
    let status = response.status();
    let outcome: Value = response.json().await.unwrap_or(Value::Null);
    if outcome["generation"].is_null() {
        bail!(
            "the daemon at {} answered HTTP {status} without a reload outcome: {outcome}",
            client.base
        );
    }
    println!("{}", serde_json::to_string_pretty(&outcome)?);
    for error in outcome["errors"].as_array().into_iter().flatten() {
        eprintln!("error: {}", error.as_str().unwrap_or_default());
    }
    Ok(match outcome["result"].as_str().unwrap_or_default() {
        "applied" => 0,
        "partial" => 1,
        _ => {
            eprintln!(
                "error: reload rejected; generation {} keeps serving unchanged",
                outcome["generation"]
            );
            2
        }
    })
}

/// The reload request and where it goes. With `--config`, the daemon is
/// found through the control file in that config's state directory (its
/// real address, and a reload key that works even when the edit being
/// applied changes the token or the address); without a control file, at
/// the config's address with its token.
struct ReloadClient {
    base: String,
    request: reqwest::RequestBuilder,
}

fn reload_client(
    server: &ServerArgs,
    config: Option<&std::path::Path>,
) -> anyhow::Result<ReloadClient> {
    let http = reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .build()?;
    let Some(file) = config else {
        let client = Client::new(server)?;
        return Ok(ReloadClient {
            request: client
                .request(reqwest::Method::POST, "/v1/reload")
                .json(&json!({})),
            base: client.base,
        });
    };
    let config = crate::config::Config::load(Some(file))?;
    if let Some(control) = crate::control::Control::read(&config.paths.state_dir) {
        let base = format!("http://{}", control.address);
        let request = http
            .post(format!("{base}/v1/reload"))
            .json(&json!({}))
            .header(crate::control::RELOAD_KEY_HEADER, control.reload_key);
        return Ok(ReloadClient { base, request });
    }
    let base = format!("http://{}", crate::control::reachable(config.server.listen));
    let mut request = http.post(format!("{base}/v1/reload")).json(&json!({}));
    if let Some(token) = config.read_token()?.or_else(|| server.token.clone()) {
        request = request.bearer_auth(token);
    }
    Ok(ReloadClient { base, request })
}
