//! `fork` and `migrate-jobs`: a job forked from one of its turns, and a
//! bundle's waiting and parked jobs moved to its current version, through
//! the daemon's API (`POST /v1/jobs/{id}/fork`,
//! `POST /v1/bundles/{name}/migrate-jobs`).

use clap::Args;
use serde_json::{Value, json};

use super::client::{Client, ServerArgs};
use super::remote::created;

#[derive(Debug, Args)]
pub struct ForkArgs {
    /// The job to fork.
    pub id: String,
    /// The first turn the fork runs live; earlier turns replay the job's
    /// journal (no model call, no tool call). Default: its last turn.
    #[arg(long = "at", value_name = "TURN")]
    pub at: Option<u32>,
    /// A new input: the prompts are rendered again with it, and the turns
    /// before TURN replay as recorded.
    #[arg(long, value_name = "TEXT")]
    pub edit_input: Option<String>,
    /// `pinned` (default): the content the job ran; `current`: the
    /// bundle's current version, if the replayed turns replay there.
    #[arg(long, value_name = "pinned|current", default_value = "pinned")]
    pub bundle_version: String,
    /// Follow the new job's events until it ends.
    #[arg(long, short)]
    pub follow: bool,
    #[arg(long)]
    pub json: bool,
}

pub async fn fork(server: &ServerArgs, args: ForkArgs) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    let mut body = json!({"bundle_version": args.bundle_version});
    if let Some(turn) = args.at {
        body["at_turn"] = json!(turn);
    }
    if let Some(input) = args.edit_input {
        body["input"] = json!(input);
    }
    let job = client
        .post(&format!("/v1/jobs/{}/fork", args.id), body)
        .await?;
    created(&client, &job, args.follow, args.json).await
}

#[derive(Debug, Args)]
pub struct MigrateJobsArgs {
    /// The bundle whose jobs move to its current version.
    pub bundle: String,
    /// Only jobs in this state (repeatable): queued, needs_attention,
    /// awaiting_approval. Default: all three.
    #[arg(long = "state", value_name = "STATE")]
    pub states: Vec<String>,
    /// List which jobs would move and why the others cannot; move none.
    #[arg(long)]
    pub dry_run: bool,
    #[arg(long)]
    pub json: bool,
}

pub async fn migrate_jobs(server: &ServerArgs, args: MigrateJobsArgs) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    let body = json!({"states": args.states, "dry_run": args.dry_run});
    let plan = client
        .post(&format!("/v1/bundles/{}/migrate-jobs", args.bundle), body)
        .await?;
    if args.json {
        println!("{plan}");
        return Ok(0);
    }
    let verb = if args.dry_run { "would move" } else { "moved" };
    let version = plan["version"].as_str().unwrap_or("?");
    for job in list(&plan["moves"]) {
        println!(
            "{verb} {} ({}) from version {} to {version}",
            job["job_id"].as_str().unwrap_or("?"),
            job["state"].as_str().unwrap_or("?"),
            job["from_version"].as_str().unwrap_or("?"),
        );
    }
    for job in list(&plan["refused"]) {
        println!(
            "cannot move {} ({}, version {}): {}",
            job["job_id"].as_str().unwrap_or("?"),
            job["state"].as_str().unwrap_or("?"),
            job["from_version"].as_str().unwrap_or("?"),
            job["reason"].as_str().unwrap_or("no reason given"),
        );
    }
    println!(
        "bundle {}: {} {verb}, {} cannot move",
        args.bundle,
        list(&plan["moves"]).len(),
        list(&plan["refused"]).len()
    );
    Ok(0)
}

fn list(value: &Value) -> &[Value] {
    value.as_array().map(Vec::as_slice).unwrap_or_default()
}
