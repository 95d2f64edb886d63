//! The built-in `pr` gate, as `lol impl`'s PR stage: push the branch
//! (a refused push because the remote moved is `fail_need_rebase`), create
//! the PR with `pr.create_command` (a PR that already exists is success),
//! and report its URL and number, which the git section of the checkpoint
//! keeps for the `ci` gate and every later template.

use std::path::Path;

use super::ops::{GateInputError, GitError};
use super::pr_text::{closing_body, pr_number, pr_url, valid_pr_title};
use crate::workflow::command::{CommandRun, run_command};
use crate::workflow::compile::RenderError;
use crate::workflow::gate::{GateContext, GateReport};
use crate::workflow::spec::PrSettings;

/// Whether a failed push was refused because the remote moved.
fn needs_rebase(run: &CommandRun) -> bool {
    let out = run.output();
    [
        "non-fast-forward",
        "fetch first",
        "stale info",
        "[rejected]",
    ]
    .iter()
    .any(|m| out.contains(m))
}

/// The branch to push: `pr.branch` rendered, else the checked-out one.
async fn pr_branch(
    ctx: &GateContext<'_>,
    pr: &PrSettings,
    dir: &Path,
) -> Result<String, GateInputError> {
    if pr.branch.is_some() {
        return Ok(ctx.render("pr.branch", ctx.vars)?);
    }
    let run = ctx.git(dir, &["rev-parse", "--abbrev-ref", "HEAD"]).await;
    if run.success() {
        Ok(run.stdout.trim().to_string())
    } else {
        Err(GitError::Failed(run.describe("git rev-parse --abbrev-ref HEAD")).into())
    }
}

const FIXABLE: &str = "fail_fixable";

/// The gate: the PR's facts rendered, the branch pushed, the PR created,
/// and a passing report with its URL and number; else the failing step's
/// report.
pub(crate) async fn pr_gate(ctx: &GateContext<'_>, pr: &PrSettings, dir: &Path) -> GateReport {
    let facts = match pr_facts(ctx, pr, dir).await {
        Ok(facts) => facts,
        Err(report) => return *report,
    };
    if let Some(refused) = push_branch(ctx, pr, dir, &facts.branch).await {
        return refused;
    }
    match create_pr(ctx, pr, dir, &facts).await {
        Ok(created) => passed(facts, &created),
        Err(report) => *report,
    }
}

/// What the PR is made of, rendered before anything is pushed.
struct PrFacts {
    title: String,
    body: String,
    base: String,
    branch: String,
}

/// The PR's title (which must read `[tag][#N] text`: a title that does not
/// is fatal), body, base and branch; or the report of the first that
/// cannot be had.
async fn pr_facts(
    ctx: &GateContext<'_>,
    pr: &PrSettings,
    dir: &Path,
) -> Result<PrFacts, Box<GateReport>> {
    let fail = |message: String, hint: &str| Box::new(GateReport::fail(FIXABLE, message, hint));
    let title = match ctx.render("pr.title", ctx.vars) {
        Ok(t) => t.trim().to_string(),
        Err(e) => {
            return Err(fail(
                e.to_string(),
                "fix the `pr.title` template or define its variables",
            ));
        }
    };
    if !valid_pr_title(&title) {
        let mut report = fail(
            format!("PR title {title:?} does not read `[tag][#N] text`"),
            "make the `pr.title` template (or the data it reads) give `[tag][#N] summary`, e.g. `[fix][#13] Handle empty input`",
        );
        // The title comes from the bundle's template and data, which no
        // implementation iteration changes.
        report.fatal = true;
        return Err(report);
    }
    let body = match pr_body(ctx, pr, dir) {
        Ok(b) => closing_body(&title, &b),
        Err(e) => return Err(fail(e.to_string(), "fix the `pr.body` template")),
    };
    let base = match ctx.base(dir, "pr.base", pr.base.as_ref(), &pr.remote).await {
        Ok(base) => base,
        Err(e) => return Err(fail(e.to_string(), "set `pr.base` on the pr stage")),
    };
    let branch = pr_branch(ctx, pr, dir).await;
    let branch = match branch {
        Ok(b) if !b.is_empty() && b != "HEAD" => b,
        Ok(_) => {
            return Err(fail(
                "HEAD is detached: no branch to push".into(),
                "check out a branch or set `pr.branch`",
            ));
        }
        Err(e) => return Err(fail(e.to_string(), "set `pr.branch`")),
    };
    Ok(PrFacts {
        title,
        body,
        base,
        branch,
    })
}

/// Pushes HEAD to `branch` on the PR's remote; the failing report when the
/// push is refused (`fail_need_rebase` when the remote moved).
async fn push_branch(
    ctx: &GateContext<'_>,
    pr: &PrSettings,
    dir: &Path,
    branch: &str,
) -> Option<GateReport> {
    let refspec = format!("HEAD:refs/heads/{branch}");
    let mut push: Vec<&str> = vec!["push"];
    push.extend(pr.push_args.iter().map(String::as_str));
    push.extend([pr.remote.as_str(), refspec.as_str()]);
    let run = ctx.git(dir, &push).await;
    if run.success() {
        return None;
    }
    let (event, hint) = if needs_rebase(&run) {
        (
            "fail_need_rebase",
            "the remote branch moved: rebase onto it, then push again",
        )
    } else {
        (FIXABLE, "fix what made the push fail")
    };
    Some(GateReport::fail(
        event,
        run.describe(&format!("git {}", push.join(" "))),
        hint,
    ))
}

/// Runs `pr.create_command` with the PR's facts; a PR that already exists
/// (a re-run after a crash) is success too.
async fn create_pr(
    ctx: &GateContext<'_>,
    pr: &PrSettings,
    dir: &Path,
    facts: &PrFacts,
) -> Result<CommandRun, Box<GateReport>> {
    let argv = match create_argv(
        ctx,
        pr,
        [
            ("title", &facts.title),
            ("body", &facts.body),
            ("branch", &facts.branch),
            ("base", &facts.base),
        ],
    ) {
        Ok(argv) => argv,
        Err(e) => {
            return Err(Box::new(GateReport::fail(
                FIXABLE,
                e.to_string(),
                "fix the `pr.create_command` template",
            )));
        }
    };
    let created = run_command(&argv, dir, ctx.timeout(), ctx.spec.max_output_bytes, &[]).await;
    // A re-run after a crash finds its own PR: that is success, not a failure.
    if !created.success() && !created.output().contains("already exists") {
        return Err(Box::new(GateReport::fail(
            FIXABLE,
            created.describe(&argv.join(" ")),
            "fix what made creating the PR fail",
        )));
    }
    Ok(created)
}

/// The passing report: the PR's title, branch and base, and the URL and
/// number the create command printed.
fn passed(facts: PrFacts, created: &CommandRun) -> GateReport {
    let mut report = GateReport::new("pass", true);
    report.details.insert("title".into(), facts.title.into());
    report.details.insert("branch".into(), facts.branch.into());
    report.details.insert("base".into(), facts.base.into());
    // `gh` prints the URL of the PR it made on stdout, and of the one that
    // already exists inside its error on stderr.
    let url = pr_url(&created.stdout)
        .or_else(|| pr_url(&created.stderr))
        .map(String::from);
    let printed = created.stdout.trim();
    let pr_url = url
        .clone()
        .or_else(|| (!printed.is_empty()).then(|| printed.to_string()));
    if let Some(number) = pr_url.as_deref().and_then(pr_number) {
        report.details.insert("pr_number".into(), number.into());
    }
    report.details.insert("url".into(), printed.into());
    report.details.insert("pr_url".into(), pr_url.into());
    report
}

/// The PR body: the file `pr.body_file` names (the agent's finalize file,
/// as in `lol impl`) when it exists and is not blank, else the `body`
/// template.
fn pr_body(ctx: &GateContext<'_>, pr: &PrSettings, dir: &Path) -> Result<String, GateInputError> {
    if pr.body_file.is_some() {
        let file = dir.join(ctx.render("pr.body_file", ctx.vars)?);
        match std::fs::read_to_string(&file) {
            Ok(text) if !text.trim().is_empty() => return Ok(text),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => return Err(GateInputError::BodyFile { path: file, source }),
        }
    }
    Ok(ctx.render("pr.body", ctx.vars)?)
}

/// The create-PR argv, rendered with the PR's facts on top of the workflow variables.
fn create_argv(
    ctx: &GateContext<'_>,
    pr: &PrSettings,
    facts: [(&str, &String); 4],
) -> Result<Vec<String>, RenderError> {
    let mut vars = ctx.vars.clone();
    for (k, v) in facts.into_iter().chain([("remote", &pr.remote)]) {
        vars.insert(k.into(), v.as_str().into());
    }
    (0..pr.create_command.len())
        .map(|i| ctx.render(&format!("pr.create_command[{i}]"), &vars))
        .collect()
}
