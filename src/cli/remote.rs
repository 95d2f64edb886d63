//! Client subcommands that talk to a running daemon over its HTTP API:
//! submit, jobs, job, watch, cancel, bundles, reload.

use std::time::Duration;

use anyhow::{Context, bail};
use clap::Args;
use serde_json::{Value, json};

use super::client::{Client, ServerArgs};
use super::printer::Format;

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
