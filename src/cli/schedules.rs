//! `structured-agents schedules list|create|edit|pause|resume|delete|run`:
//! the daemon's schedules over `/v1/schedules`.

use clap::Subcommand;
use serde_json::{Map, Value, json};

use super::client::{Client, ServerArgs};

// `schedules edit`'s arguments (no doc comment: the variant's is the
// subcommand's help).
#[derive(Debug, clap::Args)]
pub struct EditArgs {
    id: String,
    /// The bundle its fires submit.
    #[arg(long)]
    bundle: Option<String>,
    /// Five fields (minute hour day month weekday) or six with seconds first.
    #[arg(long)]
    cron: Option<String>,
    /// The IANA time zone the cron is read in.
    #[arg(long)]
    timezone: Option<String>,
    #[arg(long)]
    input: Option<String>,
    /// Job variables as a JSON object.
    #[arg(long, value_name = "JSON")]
    variables: Option<String>,
    /// Fires missed while no daemon ran: skip, run_once or run_all.
    #[arg(long)]
    missed: Option<String>,
    /// A fire while the last job still runs: skip, queue or cancel_previous.
    #[arg(long)]
    overlap: Option<String>,
    #[arg(long)]
    json: bool,
}

#[derive(Debug, Subcommand)]
pub enum SchedulesCommand {
    /// Every schedule your key may see, with its next and last fire.
    List {
        #[arg(long)]
        json: bool,
    },
    /// Make a schedule that submits BUNDLE's job on CRON.
    Create {
        bundle: String,
        /// Five fields (minute hour day month weekday) or six with seconds first.
        cron: String,
        /// The schedule's id (default: a fresh one).
        #[arg(long)]
        id: Option<String>,
        /// The IANA time zone the cron is read in.
        #[arg(long, default_value = "UTC")]
        timezone: String,
        #[arg(long, default_value = "")]
        input: String,
        /// Job variables as a JSON object.
        #[arg(long, value_name = "JSON")]
        variables: Option<String>,
        /// Fires missed while no daemon ran: skip, run_once or run_all.
        #[arg(long, default_value = "skip")]
        missed: String,
        /// A fire while the last job still runs: skip, queue or cancel_previous.
        #[arg(long, default_value = "skip")]
        overlap: String,
        #[arg(long)]
        json: bool,
    },
    /// Change a schedule made over the API: only the fields given change;
    /// its id, pause and history stay, its next fire follows the new cron.
    Edit(EditArgs),
    /// Submit no fire until resumed.
    Pause { id: String },
    /// Fire again from now on; fires while paused are passed over (counted
    /// as missed) unless `--catch-up` runs them by the schedule's `missed`
    /// policy.
    Resume {
        id: String,
        #[arg(long)]
        catch_up: bool,
    },
    /// Delete a schedule made over the API (a bundle's goes with its `schedule:`).
    Delete { id: String },
    /// Submit one job of the schedule now.
    Run { id: String },
}

pub async fn run(server: &ServerArgs, command: SchedulesCommand) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    match command {
        SchedulesCommand::List { json } => {
            let schedules = client.get("/v1/schedules").await?;
            if json {
                println!("{schedules}");
                return Ok(0);
            }
            let empty = Vec::new();
            let list = schedules.as_array().unwrap_or(&empty);
            if list.is_empty() {
                println!("no schedules");
            }
            for schedule in list {
                println!("{}", line(schedule));
            }
        }
        SchedulesCommand::Create {
            bundle,
            cron,
            id,
            timezone,
            input,
            variables,
            missed,
            overlap,
            json,
        } => {
            let variables = parse_variables(variables.as_deref())?.unwrap_or_default();
            let mut body = json!({
                "bundle": bundle, "cron": cron, "timezone": timezone, "input": input,
                "variables": variables, "missed": missed, "overlap": overlap,
            });
            if let Some(id) = id {
                body["id"] = json!(id);
            }
            let made = client.post("/v1/schedules", body).await?;
            show(&made, json);
        }
        SchedulesCommand::Edit(args) => return edit(&client, args).await,
        SchedulesCommand::Pause { id } => {
            let schedule = client
                .post(&format!("/v1/schedules/{id}/pause"), json!({}))
                .await?;
            println!("{}", line(&schedule));
        }
        SchedulesCommand::Resume { id, catch_up } => {
            let query = if catch_up { "?catch_up=true" } else { "" };
            let schedule = client
                .post(&format!("/v1/schedules/{id}/resume{query}"), json!({}))
                .await?;
            println!("{}", line(&schedule));
        }
        SchedulesCommand::Delete { id } => {
            client.delete(&format!("/v1/schedules/{id}")).await?;
            println!("schedule {id} deleted");
        }
        SchedulesCommand::Run { id } => {
            let job = client
                .post(&format!("/v1/schedules/{id}/run"), json!({}))
                .await?;
            println!("{}", job["id"].as_str().unwrap_or_default());
        }
    }
    Ok(0)
}

/// `--variables`, a JSON object, when given.
fn parse_variables(text: Option<&str>) -> anyhow::Result<Option<Map<String, Value>>> {
    text.map(|text| {
        serde_json::from_str(text)
            .map_err(|e| anyhow::anyhow!("--variables is not a JSON object: {e}"))
    })
    .transpose()
}

fn show(schedule: &Value, json: bool) {
    if json {
        println!("{schedule}");
    } else {
        println!("{}", line(schedule));
    }
}

/// `schedules edit`: the schedule's spec as the daemon has it, with the
/// fields given changed, put back whole (`PUT /v1/schedules/{id}`).
// Its fields are `Create`'s again, kept apart: a create's have defaults
// and are sent whole, an edit's are optional and change only what is given.
async fn edit(client: &Client, args: EditArgs) -> anyhow::Result<i32> {
    let EditArgs {
        id,
        bundle,
        cron,
        timezone,
        input,
        variables,
        missed,
        overlap,
        json,
    } = args;
    let path = format!("/v1/schedules/{id}");
    let current = client.get(&path).await?;
    let mut body = match current["spec"].clone() {
        Value::Object(spec) => spec,
        other => anyhow::bail!("the daemon answered schedule {id} without a spec: {other}"),
    };
    body.insert("bundle".into(), current["bundle"].clone());
    let given = [
        ("bundle", bundle.map(Value::String)),
        ("cron", cron.map(Value::String)),
        ("timezone", timezone.map(Value::String)),
        ("input", input.map(Value::String)),
        ("missed", missed.map(Value::String)),
        ("overlap", overlap.map(Value::String)),
        (
            "variables",
            parse_variables(variables.as_deref())?.map(Value::Object),
        ),
    ];
    for (field, value) in given {
        if let Some(value) = value {
            body.insert(field.into(), value);
        }
    }
    let edited = client.put(&path, Value::Object(body)).await?;
    show(&edited, json);
    Ok(0)
}

/// One schedule on one line.
fn line(schedule: &Value) -> String {
    let text = |key: &str| schedule[key].as_str().unwrap_or("-").to_string();
    format!(
        "{} · {} · {} ({}) · {} · next {} · last {} {}",
        text("id"),
        text("bundle"),
        schedule["spec"]["cron"].as_str().unwrap_or("?"),
        schedule["spec"]["timezone"].as_str().unwrap_or("UTC"),
        if schedule["paused"].as_bool() == Some(true) {
            "paused"
        } else {
            "active"
        },
        text("next_fire"),
        text("last_fire"),
        schedule["last_outcome"]
            .as_str()
            .map(|o| format!("({o})"))
            .unwrap_or_default(),
    )
}
