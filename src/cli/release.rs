//! `structured-agents promote NAME VERSION` and `reject NAME VERSION`: the
//! operator's word on a version the release gate holds
//! (`POST /v1/bundles/{name}/promote`, `…/reject`; scope `operate`).

use clap::Args;
use serde_json::json;

use super::client::{Client, ServerArgs};

#[derive(Debug, Args)]
pub struct ReleaseArgs {
    /// The bundle's name.
    pub bundle: String,
    /// The version the release gate holds.
    #[arg(id = "bundle_version", value_name = "VERSION")]
    pub version: String,
    /// Why (recorded with the decision).
    #[arg(long)]
    pub reason: Option<String>,
}

/// Sends the decision (`promote` or `reject`) and prints what serves now.
pub async fn decide(server: &ServerArgs, args: ReleaseArgs, word: &str) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    let mut body = json!({"version": args.version});
    if let Some(reason) = args.reason {
        body["reason"] = json!(reason);
    }
    let answer = client
        .post(&format!("/v1/bundles/{}/{word}", args.bundle), body)
        .await?;
    println!(
        "{} version {} {}; serving {}",
        args.bundle,
        args.version,
        answer["verdict"].as_str().unwrap_or(word),
        answer["serving"].as_str().unwrap_or("nothing")
    );
    Ok(0)
}
