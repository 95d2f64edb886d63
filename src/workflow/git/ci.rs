//! The built-in `ci` gate, as `lol impl --wait-for-ci`: after the PR
//! stage, wait for the PR's checks (`gh pr checks N --watch` by default);
//! failing checks are a `fail` whose output the next agent stage reads once
//! as `ci_failure` (kept in the details of its report, whence the
//! checkpoint's git section takes it; the original's "CI failure context" prompt section).

use std::path::Path;

use serde_json::Value;

use super::CI_FAILURE;
use crate::workflow::command::{run_command, tail};
use crate::workflow::gate::{GateContext, GateReport};

/// How much of the checks command's output `ci_failure` keeps (the tail:
/// the failing checks are listed last).
const CI_FAILURE_CHARS: usize = 4000;

/// Runs the checks command for the PR in `pr_url`/`pr_number`.
pub(crate) async fn ci_gate(ctx: &GateContext<'_>, dir: &Path) -> GateReport {
    let pr_url = ctx.vars.get("pr_url").and_then(Value::as_str);
    let has_number = ctx.vars.get("pr_number").is_some_and(|n| !n.is_null());
    if pr_url.is_none() && !has_number {
        return fatal(
            "ImplError: no PR to wait for: the `ci` gate waits for the checks of the PR a passing `pr` gate made (or `pr_url`/`pr_number` in `workflow.data`)",
            "put the `ci` stage after the `pr` stage (`pr: {pass: ci}`)",
        );
    }
    // Unset `ci`: the default command, whose templates compile under the same keys.
    let count = ctx.spec.ci.clone().unwrap_or_default().command.len();
    let mut argv = Vec::with_capacity(count);
    for i in 0..count {
        match ctx.render(&format!("ci.command[{i}]"), ctx.vars) {
            Ok(arg) => argv.push(arg),
            Err(e) => {
                return fatal(
                    e.to_string(),
                    "fix the `ci.command` template or define its variables",
                );
            }
        }
    }
    let run = run_command(&argv, dir, ctx.timeout(), ctx.spec.max_output_bytes, &[]).await;
    let shown = argv.join(" ");
    match run.code {
        Some(0) => {
            let mut report = GateReport::new("pass", true);
            report.details.insert("exit_code".into(), 0.into());
            report
        }
        Some(code) => {
            let mut report = GateReport::fail(
                "fail",
                run.describe(&shown),
                "fix what makes the PR's checks fail",
            );
            report.details.insert("exit_code".into(), code.into());
            let context = failure_context(pr_url, run.output().trim());
            report.details.insert(CI_FAILURE.into(), context.into());
            report
        }
        // The original stopped with an error when `gh pr checks` did not
        // answer pass or fail: no agent iteration fixes a missing `gh`.
        None => fatal(
            format!(
                "the `ci` gate's checks command did not finish: {}\n{}",
                run.error.as_deref().unwrap_or("killed by a signal"),
                run.describe(&shown)
            ),
            "make the checks command runnable (installed, authenticated) and give the stage a `timeout` longer than the checks take",
        ),
    }
}

/// The `ci_failure` text: the PR, then the failing checks as the command
/// listed them (as `lol impl` wrote "PR: …" and "Failing checks:").
fn failure_context(pr_url: Option<&str>, output: &str) -> String {
    let mut lines = Vec::new();
    if let Some(url) = pr_url {
        lines.push(format!("PR: {url}"));
    }
    if output.is_empty() {
        lines.push("CI checks failed. Review PR checks for details.".into());
    } else {
        lines.push("Failing checks:".into());
        lines.push(tail(output, CI_FAILURE_CHARS));
    }
    lines.join("\n")
}

fn fatal(traceback: impl Into<String>, suggestion: &str) -> GateReport {
    let mut report = GateReport::fail("fail", traceback, suggestion);
    report.fatal = true;
    report
}
