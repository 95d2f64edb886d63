//! Command gates: an argv command (never a shell) or a built-in gate
//! (`py_compile` here; `pr`, `rebase` and `ci`, the git stage kinds, in
//! `git`), run in the workflow's working directory
//! through `command` (own process group, cleared environment, deadline,
//! `max_output_bytes`). Each gate yields an event and the report
//! `{pass, failed_files, traceback, suggestions}`.

use std::path::Path;

use super::command::run_command;
use super::gate::{GateContext, GateReport};
use super::git::{self, GitError, last_commit_files};
use super::spec::Builtin;

/// Runs the gate and returns its report (whose `event` is the stage's event).
pub async fn run_gate(ctx: &GateContext<'_>) -> GateReport {
    let dir = match ctx.dir() {
        Ok(dir) => dir,
        Err(e) => {
            return GateReport::fail(
                "fail",
                e.to_string(),
                "fix the gate's `working_dir` template",
            );
        }
    };
    let mut report = match ctx.spec.builtin {
        None => argv_gate(ctx, &dir).await,
        Some(Builtin::PyCompile) => py_compile_gate(ctx, &dir).await,
        Some(Builtin::Pr) => git::pr_gate(ctx, &dir).await,
        Some(Builtin::Rebase) => git::rebase_gate(ctx, &dir).await,
        Some(Builtin::Ci) => git::ci_gate(ctx, &dir).await,
    };
    report.pass = match &ctx.spec.pass_events {
        Some(events) => events.contains(&report.event),
        None => ctx.workflow_pass_default(&report.event),
    };
    report
}

impl GateContext<'_> {
    fn workflow_pass_default(&self, event: &str) -> bool {
        match self.spec.builtin {
            Some(Builtin::Rebase) => event == "ok",
            _ => event == "pass",
        }
    }
}

async fn argv_gate(ctx: &GateContext<'_>, dir: &Path) -> GateReport {
    let mut argv = Vec::with_capacity(ctx.spec.argv.len());
    for i in 0..ctx.spec.argv.len() {
        match ctx.render(&format!("argv[{i}]"), ctx.vars) {
            Ok(arg) => argv.push(arg),
            Err(e) => {
                return GateReport::fail(
                    "fail",
                    e.to_string(),
                    "fix the gate's argv template or define its variables",
                );
            }
        }
    }
    let run = run_command(&argv, dir, ctx.timeout(), ctx.spec.max_output_bytes, &[]).await;
    let output = run.output();
    let by_output = ctx.spec.output.iter().enumerate().find_map(|(i, rule)| {
        let regex = ctx
            .workflow
            .regex(&format!("{}.output[{i}].regex", ctx.at))?;
        regex.is_match(&output).then(|| rule.event.clone())
    });
    let event = by_output
        .or_else(|| {
            let code = run.code?;
            ctx.spec
                .exit_codes
                .iter()
                .find(|(k, _)| k.trim().parse::<i32>() == Ok(code))
                .map(|(_, e)| e.clone())
        })
        .unwrap_or_else(|| {
            if run.success() {
                "pass".into()
            } else {
                "fail".into()
            }
        });
    let mut report = GateReport::new(&event, run.success());
    report.details.insert("exit_code".into(), run.code.into());
    if !run.success() {
        report.traceback = run.describe(&argv.join(" "));
    }
    report
}

/// The files changed by the last commit (all files of a first commit).
async fn changed_files(ctx: &GateContext<'_>, dir: &Path) -> Result<Vec<String>, GitError> {
    last_commit_files(dir, ctx.timeout(), ctx.spec.max_output_bytes).await
}

async fn py_compile_gate(ctx: &GateContext<'_>, dir: &Path) -> GateReport {
    let files = match changed_files(ctx, dir).await {
        Ok(files) => files,
        Err(e) => {
            return GateReport::fail(
                "fail",
                e.to_string(),
                "make the working directory a git repository with at least one commit",
            );
        }
    };
    // Deleted files are in the diff too; there is nothing to compile there.
    let python: Vec<String> = files
        .into_iter()
        .filter(|f| f.ends_with(".py") && dir.join(f).is_file())
        .collect();
    let mut report = GateReport::new("pass", true);
    report
        .details
        .insert("checked_files".into(), python.clone().into());
    // Keep bytecode out of the repository.
    let cache = std::env::temp_dir().join("structured-agents-pycache");
    let cache = cache.to_string_lossy().into_owned();
    let mut tracebacks = Vec::new();
    for file in &python {
        let argv = ["python3", "-m", "py_compile", file.as_str()].map(String::from);
        let run = run_command(
            &argv,
            dir,
            ctx.timeout(),
            ctx.spec.max_output_bytes,
            &[("PYTHONPYCACHEPREFIX", &cache)],
        )
        .await;
        if !run.success() {
            report.failed_files.push(file.clone());
            report
                .suggestions
                .push(format!("fix the syntax error in {file}"));
            tracebacks.push(run.describe(&format!("python3 -m py_compile {file}")));
        }
    }
    if !report.failed_files.is_empty() {
        report.event = "fail".into();
        report.pass = false;
        report.traceback = tracebacks.join("\n\n");
    }
    report
}
