//! `approvals`, `approve` and `deny`: a person's side of a call awaiting
//! approval. A decision names the digest of the arguments shown, so it can
//! only apply to what the person saw.

use anyhow::bail;
use serde_json::{Value, json};

use super::client::{Client, ServerArgs};

/// The pending approval of job `id` (there is at most one).
async fn pending(client: &Client, id: &str) -> anyhow::Result<Vec<Value>> {
    let body = client.get(&format!("/v1/jobs/{id}/approvals")).await?;
    Ok(body["approvals"].as_array().cloned().unwrap_or_default())
}

/// `structured-agents approvals ID`: what the job waits for.
pub async fn list(server: &ServerArgs, id: String, as_json: bool) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    let approvals = pending(&client, &id).await?;
    if as_json {
        println!("{}", json!({"job_id": id, "approvals": approvals}));
        return Ok(0);
    }
    if approvals.is_empty() {
        println!("job {id} awaits no approval");
    }
    for approval in &approvals {
        println!("{}", describe(approval));
    }
    Ok(0)
}

/// The id of the call an approval is for (`call` from daemons before the
/// parked call had one shape).
fn call_id(approval: &Value) -> &str {
    approval["call_id"]
        .as_str()
        .or_else(|| approval["call"].as_str())
        .unwrap_or("?")
}

/// One request as a person reads it before deciding.
pub fn describe(approval: &Value) -> String {
    format!(
        "call {} · tool `{}` ({}) wants to run with {}{}",
        call_id(approval),
        approval["tool"].as_str().unwrap_or("?"),
        approval["effect"].as_str().unwrap_or("?"),
        approval["arguments"],
        approval["expires_at"]
            .as_str()
            .map(|at| format!(" · denied at {at} unless decided"))
            .unwrap_or_default()
    )
}

/// `approve ID [CALL] [--edit JSON]` and `deny ID [CALL] --reason R`: the
/// decision, bound to the digest of the arguments the daemon shows now.
pub async fn decide(
    server: &ServerArgs,
    id: String,
    call: Option<String>,
    mut decision: Value,
) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    let approvals = pending(&client, &id).await?;
    let approval = match &call {
        Some(call) => approvals.iter().find(|a| call_id(a) == call.as_str()),
        None => approvals.first(),
    };
    let Some(approval) = approval else {
        bail!(
            "job {id} awaits no approval{}; see `structured-agents job {id}`",
            call.map(|c| format!(" of call {c}")).unwrap_or_default()
        );
    };
    let call = call_id(approval).to_string();
    decision["digest"] = approval["digest"].clone();
    let answer = client
        .post(&format!("/v1/jobs/{id}/approvals/{call}"), decision)
        .await?;
    println!(
        "job {id}: call {call} of tool `{}` {}; the job is {}",
        approval["tool"].as_str().unwrap_or("?"),
        match answer["decision"].as_str() {
            Some("approve") => "approved",
            Some("deny") => "denied",
            Some("edit") => "approved with edited arguments",
            _ => "decided",
        },
        answer["job"]["state"].as_str().unwrap_or("?")
    );
    Ok(0)
}

/// The body of an `approve` (with `--edit`, an edit) or a `deny`.
pub fn decision(
    approve: bool,
    edit: Option<&str>,
    reason: Option<String>,
) -> anyhow::Result<Value> {
    Ok(match (approve, edit) {
        (true, None) => json!({"decision": "approve"}),
        (true, Some(arguments)) => {
            let arguments: Value = serde_json::from_str(arguments).map_err(|e| {
                anyhow::anyhow!("--edit must be the new arguments as a JSON object: {e}")
            })?;
            json!({"decision": "edit", "arguments": arguments})
        }
        (false, _) => json!({"decision": "deny", "reason": reason}),
    })
}
