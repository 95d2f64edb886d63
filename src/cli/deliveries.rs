//! `structured-agents deliveries list|redrive`: the outbox's webhook
//! deliveries over `/v1/deliveries` — the dead letters, and sending one
//! again once its receiver is fixed.

use clap::Subcommand;
use serde_json::{Value, json};

use super::client::{Client, ServerArgs};

#[derive(Debug, Subcommand)]
pub enum DeliveriesCommand {
    /// Deliveries of your key's jobs (every job's with `operate_all`), newest first.
    List {
        /// pending, delivered or dead.
        #[arg(long)]
        state: Option<String>,
        /// Only this job's.
        #[arg(long = "job")]
        job_id: Option<String>,
        #[arg(long, default_value_t = 50)]
        limit: usize,
        #[arg(long)]
        json: bool,
    },
    /// Send a dead delivery again: pending, attempts reset, due now.
    Redrive { id: String },
}

pub async fn run(server: &ServerArgs, command: DeliveriesCommand) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    match command {
        DeliveriesCommand::List {
            state,
            job_id,
            limit,
            json,
        } => {
            let mut query = vec![format!("limit={limit}")];
            if let Some(state) = state {
                query.push(format!("state={state}"));
            }
            if let Some(job) = job_id {
                query.push(format!("job_id={job}"));
            }
            let page = client
                .get(&format!("/v1/deliveries?{}", query.join("&")))
                .await?;
            if json {
                println!("{page}");
                return Ok(0);
            }
            let empty = Vec::new();
            let list = page["deliveries"].as_array().unwrap_or(&empty);
            if list.is_empty() {
                println!("no deliveries");
            }
            for delivery in list {
                println!("{}", line(delivery));
            }
        }
        DeliveriesCommand::Redrive { id } => {
            let delivery = client
                .post(&format!("/v1/deliveries/{id}/redrive"), json!({}))
                .await?;
            println!("{}", line(&delivery));
        }
    }
    Ok(0)
}

/// One delivery on one line.
fn line(delivery: &Value) -> String {
    let text = |key: &str| delivery[key].as_str().unwrap_or("-").to_string();
    format!(
        "{} · {} · job {} · {} · {} · {} · {}",
        text("id"),
        text("state"),
        text("job_id"),
        text("event"),
        super::words::count(delivery["attempts"].as_u64().unwrap_or(0), "attempt"),
        text("target"),
        text("last_error"),
    )
}
