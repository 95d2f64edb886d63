//! Command gates: an argv command (never a shell) or a built-in gate
//! (`py_compile`, `pr`, `rebase`, `ci` in `ci`), run in the workflow's working directory
//! through `command` (own process group, cleared environment, deadline,
//! `max_output_bytes`). Each gate yields an event and the report
//! `{pass, failed_files, traceback, suggestions}`.

use std::path::Path;

use super::command::{CommandRun, run_command};
use super::gate::{GateContext, GateReport};
use super::git::{GitError, last_commit_files};
use super::pr_text::{closing_body, pr_number, pr_url, valid_pr_title};
use super::spec::{Builtin, PrSettings, RebaseSettings};

/// Runs the gate and returns its report (whose `event` is the stage's event).
pub async fn run_gate(ctx: &GateContext<'_>) -> GateReport {
    let dir = match ctx.dir() {
        Ok(dir) => dir,
        Err(e) => return GateReport::fail("fail", e, "fix the gate's `working_dir` template"),
    };
    let mut report = match ctx.spec.builtin {
        None => argv_gate(ctx, &dir).await,
        Some(Builtin::PyCompile) => py_compile_gate(ctx, &dir).await,
        Some(Builtin::Pr) => match &ctx.spec.pr {
            Some(pr) => pr_gate(ctx, pr, &dir).await,
            None => GateReport::fail(
                "fail_fixable",
                "the pr gate has no `pr` settings",
                "add `pr: {title: …}`",
            ),
        },
        Some(Builtin::Rebase) => {
            let defaults = RebaseSettings {
                remote: "origin".into(),
                onto: None,
            };
            rebase_gate(ctx, ctx.spec.rebase.as_ref().unwrap_or(&defaults), &dir).await
        }
        Some(Builtin::Ci) => super::ci::ci_gate(ctx, &dir).await,
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
                    e,
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
async fn pr_branch(ctx: &GateContext<'_>, pr: &PrSettings, dir: &Path) -> Result<String, String> {
    if pr.branch.is_some() {
        return ctx.render("pr.branch", ctx.vars);
    }
    let run = ctx.git(dir, &["rev-parse", "--abbrev-ref", "HEAD"]).await;
    if run.success() {
        Ok(run.stdout.trim().to_string())
    } else {
        Err(run.describe("git rev-parse --abbrev-ref HEAD"))
    }
}

async fn pr_gate(ctx: &GateContext<'_>, pr: &PrSettings, dir: &Path) -> GateReport {
    const FIXABLE: &str = "fail_fixable";
    let title = match ctx.render("pr.title", ctx.vars) {
        Ok(t) => t.trim().to_string(),
        Err(e) => {
            return GateReport::fail(
                FIXABLE,
                e,
                "fix the `pr.title` template or define its variables",
            );
        }
    };
    if !valid_pr_title(&title) {
        let mut report = GateReport::fail(
            FIXABLE,
            format!("PR title {title:?} does not read `[tag][#N] text`"),
            "make the `pr.title` template (or the data it reads) give `[tag][#N] summary`, e.g. `[fix][#13] Handle empty input`",
        );
        // The title comes from the bundle's template and data, which no
        // implementation iteration changes.
        report.fatal = true;
        return report;
    }
    let body = match pr_body(ctx, pr, dir) {
        Ok(b) => closing_body(&title, &b),
        Err(e) => return GateReport::fail(FIXABLE, e, "fix the `pr.body` template"),
    };
    let base = match ctx.base(dir, "pr.base", pr.base.as_ref(), &pr.remote).await {
        Ok(base) => base,
        Err(e) => return GateReport::fail(FIXABLE, e, "set `pr.base` on the pr stage"),
    };
    let branch = pr_branch(ctx, pr, dir).await;
    let branch = match branch {
        Ok(b) if !b.is_empty() && b != "HEAD" => b,
        Ok(_) => {
            return GateReport::fail(
                FIXABLE,
                "HEAD is detached: no branch to push",
                "check out a branch or set `pr.branch`",
            );
        }
        Err(e) => return GateReport::fail(FIXABLE, e, "set `pr.branch`"),
    };
    let refspec = format!("HEAD:refs/heads/{branch}");
    let mut push: Vec<&str> = vec!["push"];
    push.extend(pr.push_args.iter().map(String::as_str));
    push.extend([pr.remote.as_str(), refspec.as_str()]);
    let run = ctx.git(dir, &push).await;
    if !run.success() {
        let (event, hint) = if needs_rebase(&run) {
            (
                "fail_need_rebase",
                "the remote branch moved: rebase onto it, then push again",
            )
        } else {
            (FIXABLE, "fix what made the push fail")
        };
        return GateReport::fail(
            event,
            run.describe(&format!("git {}", push.join(" "))),
            hint,
        );
    }
    let argv = match create_argv(
        ctx,
        pr,
        [
            ("title", &title),
            ("body", &body),
            ("branch", &branch),
            ("base", &base),
        ],
    ) {
        Ok(argv) => argv,
        Err(e) => return GateReport::fail(FIXABLE, e, "fix the `pr.create_command` template"),
    };
    let created = run_command(&argv, dir, ctx.timeout(), ctx.spec.max_output_bytes, &[]).await;
    // A re-run after a crash finds its own PR: that is success, not a failure.
    if !created.success() && !created.output().contains("already exists") {
        return GateReport::fail(
            FIXABLE,
            created.describe(&argv.join(" ")),
            "fix what made creating the PR fail",
        );
    }
    let mut report = GateReport::new("pass", true);
    report.details.insert("title".into(), title.into());
    report.details.insert("branch".into(), branch.into());
    report.details.insert("base".into(), base.into());
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
fn pr_body(ctx: &GateContext<'_>, pr: &PrSettings, dir: &Path) -> Result<String, String> {
    if pr.body_file.is_some() {
        let file = dir.join(ctx.render("pr.body_file", ctx.vars)?);
        match std::fs::read_to_string(&file) {
            Ok(text) if !text.trim().is_empty() => return Ok(text),
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                return Err(format!(
                    "cannot read the PR body file {}: {e}",
                    file.display()
                ));
            }
        }
    }
    ctx.render("pr.body", ctx.vars)
}

/// The create-PR argv, rendered with the PR's facts on top of the workflow variables.
fn create_argv(
    ctx: &GateContext<'_>,
    pr: &PrSettings,
    facts: [(&str, &String); 4],
) -> Result<Vec<String>, String> {
    let mut vars = ctx.vars.clone();
    for (k, v) in facts.into_iter().chain([("remote", &pr.remote)]) {
        vars.insert(k.into(), v.as_str().into());
    }
    (0..pr.create_command.len())
        .map(|i| ctx.render(&format!("pr.create_command[{i}]"), &vars))
        .collect()
}

async fn rebase_gate(ctx: &GateContext<'_>, settings: &RebaseSettings, dir: &Path) -> GateReport {
    const CONFLICT: &str = "conflict";
    let fetch = ctx.git(dir, &["fetch", &settings.remote]).await;
    if !fetch.success() {
        return GateReport::fail(
            CONFLICT,
            fetch.describe(&format!("git fetch {}", settings.remote)),
            "check that the remote is reachable",
        );
    }
    let onto = ctx
        .base(dir, "rebase.onto", settings.onto.as_ref(), &settings.remote)
        .await;
    let onto = match onto {
        Ok(onto) => onto,
        Err(e) => return GateReport::fail(CONFLICT, e, "set `rebase.onto` on the rebase stage"),
    };
    let upstream = format!("{}/{onto}", settings.remote);
    let rebase = ctx.git(dir, &["rebase", &upstream]).await;
    if rebase.success() {
        let mut report = GateReport::new("ok", true);
        report.details.insert("onto".into(), upstream.into());
        return report;
    }
    // Which files conflict is only known before the abort.
    let conflicted = ctx
        .git(dir, &["diff", "--name-only", "--diff-filter=U"])
        .await;
    let abort = ctx.git(dir, &["rebase", "--abort"]).await;
    let mut report = GateReport::fail(
        CONFLICT,
        rebase.describe(&format!("git rebase {upstream}")),
        format!("resolve the conflicts with {upstream} by hand"),
    );
    report.failed_files = conflicted.stdout.lines().map(String::from).collect();
    if !abort.success() {
        report
            .traceback
            .push_str(&format!("\n{}", abort.describe("git rebase --abort")));
    }
    report
}
