//! `structured-agents simplify [BUNDLE]`: one stage of a workflow bundle
//! (default the `simplify` stage of `implement-review`) as a job of the
//! daemon, as `lol simp` ran the simplifier on its own: the job names the
//! stage in its `only_stage` variable, so it starts there and ends after it
//! (finished when the stage's event passes, else fatal). The files to work
//! on are the last commit's (the stage's `max_files`) unless `--file` names
//! them; `--focus` says what to simplify. The repository is the one the
//! bundle's workflow works in (`workflow.working_dir`): a job never moves it.

use anyhow::Context;
use clap::Args;
use serde_json::{Value, json};

use super::client::{Client, ServerArgs};
use super::remote::created;
use crate::queue::ONLY_STAGE_VARIABLE;

#[derive(Debug, Args)]
pub struct SimplifyArgs {
    /// The workflow bundle's name (as the daemon loaded it).
    #[arg(default_value = "implement-review")]
    pub bundle: String,
    /// The stage to run alone.
    #[arg(long, default_value = "simplify")]
    pub stage: String,
    /// A file to simplify, relative to the repository (repeatable); the
    /// stage's `files` variable. Default: the files of the last commit.
    #[arg(long = "file", value_name = "PATH")]
    pub files: Vec<String>,
    /// What to focus on; the stage's `focus` variable and the job's input.
    #[arg(long)]
    pub focus: Option<String>,
    /// Another template variable, NAME=VALUE (repeatable).
    #[arg(long = "var", value_name = "NAME=VALUE")]
    pub vars: Vec<String>,
    /// Follow the job's events until it ends (exit 0 finished, 1 fatal).
    #[arg(long, short)]
    pub follow: bool,
    #[arg(long)]
    pub json: bool,
}

pub async fn simplify(server: &ServerArgs, args: SimplifyArgs) -> anyhow::Result<i32> {
    let client = Client::new(server)?;
    let job = client
        .post("/v1/jobs", request(&args)?)
        .await
        .with_context(|| {
            format!(
                "cannot run stage {:?} of bundle {:?}",
                args.stage, args.bundle
            )
        })?;
    created(&client, &job, args.follow, args.json).await
}

/// The submit request of the one-stage job.
fn request(args: &SimplifyArgs) -> anyhow::Result<Value> {
    let mut variables = super::parse_vars(&args.vars)?;
    variables.insert(ONLY_STAGE_VARIABLE.into(), json!(args.stage));
    if !args.files.is_empty() {
        variables.insert("files".into(), json!(args.files));
    }
    if let Some(focus) = &args.focus {
        variables.insert("focus".into(), json!(focus));
    }
    Ok(json!({
        "bundle": args.bundle,
        "input": args.focus.clone().unwrap_or_default(),
        "variables": variables,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        args: SimplifyArgs,
    }

    fn parse(argv: &[&str]) -> Value {
        let cli = Cli::try_parse_from(std::iter::once("simplify").chain(argv.iter().copied()))
            .unwrap_or_else(|e| panic!("{e}"));
        request(&cli.args).unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn the_defaults_run_the_simplify_stage_of_implement_review() {
        let body = parse(&[]);
        assert_eq!(body["bundle"], "implement-review");
        assert_eq!(body["variables"], json!({"only_stage": "simplify"}));
    }

    #[test]
    fn files_focus_and_variables_become_the_jobs_variables() {
        let body = parse(&[
            "mine", "--stage", "tidy", "--file", "a.py", "--file", "b.py", "--focus", "loops",
            "--var", "issue=7",
        ]);
        assert_eq!(body["bundle"], "mine");
        assert_eq!(body["input"], "loops");
        assert_eq!(
            body["variables"],
            json!({"only_stage": "tidy", "files": ["a.py", "b.py"], "focus": "loops", "issue": "7"})
        );
    }
}
