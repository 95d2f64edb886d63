//! A case's graders on what its job did: the checks `crate::evals` runs
//! itself, a judge grader by a job of its judge bundle (submitted as the
//! eval's owner, found again by its idempotency key on a resume, its cost
//! counted with the case's), a process grader by its program — run in the
//! bundle copy's `evals/` directory with a process tool's environment
//! (the daemon's cleared but for `PATH`, `LANG`, …), given the case and
//! what the job did as JSON on stdin, killed at its timeout, its output
//! capped.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::EvalJob;
use super::case::{self, Ended, Interrupted, Side};
use crate::evals::{
    CaseRun, EvalCase, External, Grade, GraderSpec, Judgement, JudgementProblem, Observed, Verdict,
    judge_input, read_judgement,
};
use crate::queue::{JobState, NewJob};
use crate::tools::process::DEFAULT_ENV_ALLOWLIST;

/// The most a process grader may write on stdout (and what of stderr a
/// failure shows).
const MAX_OUTPUT: u64 = 64 << 10;

/// The grades of `case` on what its job did (`observed`); a judge's cost
/// is added to `run`.
pub(super) async fn grades(
    e: &EvalJob<'_>,
    case: &EvalCase,
    side: Side,
    observed: &Observed,
    run: &mut CaseRun,
) -> Result<Vec<Grade>, Interrupted> {
    let mut grades = Vec::new();
    for (index, grader) in case.graders.iter().enumerate() {
        let external = match grader.grade(&case.expected, observed) {
            Verdict::Skip => continue,
            Verdict::Done(grade) => {
                grades.push(grade);
                continue;
            }
            Verdict::External(external) => external,
        };
        let judged = match external {
            External::Judge { bundle, rubric } => {
                let at = JudgeAt { side, index };
                judge(e, case, at, &bundle, &rubric, observed, run).await?
            }
            External::Process { command, timeout } => {
                match process(e, case, observed, &command, timeout.into()).await {
                    Ok(judgement) => Scored::Judged(judgement),
                    Err(why) => Scored::Not(format!("its program: {why}")),
                }
            }
        };
        grades.push(external_grade(grader, judged));
    }
    Ok(grades)
}

/// What an external grader gave.
enum Scored {
    Judged(Judgement),
    /// No judgement: why (it grades 0).
    Not(String),
}

/// An external grader's grade: its score, or 0 with why it gave none.
fn external_grade(grader: &GraderSpec, scored: Scored) -> Grade {
    match scored {
        Scored::Judged(judgement) => grader.external_grade(judgement.score, judgement.reason),
        Scored::Not(why) => grader.external_grade(0.0, why),
    }
}

/// Which judge of which case: its job's idempotency key.
#[derive(Clone, Copy)]
struct JudgeAt {
    side: Side,
    index: usize,
}

/// The judge bundle's judgement of the case's answer (its job's cost
/// added to `run`), or why there is none.
async fn judge(
    e: &EvalJob<'_>,
    case: &EvalCase,
    at: JudgeAt,
    bundle: &str,
    rubric: &str,
    observed: &Observed,
    run: &mut CaseRun,
) -> Result<Scored, Interrupted> {
    let Some(answer) = &observed.answer else {
        return Ok(Scored::Not(
            "no answer to judge: the case's job did not finish".into(),
        ));
    };
    let (input, variables) = judge_input(rubric, &case.input, answer);
    let job = NewJob {
        bundle: bundle.to_string(),
        input,
        variables,
        idempotency_key: Some(case::job_key(e, at.side, &case.id, Some(at.index))),
        priority: e.job.priority,
        trace: e.job.trace.clone(),
        controls: case::controls(e, &Default::default()),
        ..NewJob::default()
    };
    let id = match case::submit(e, job).await? {
        Ok(id) => id,
        Err(refused) => {
            return Ok(Scored::Not(format!(
                "the judge's job was not admitted: {refused}"
            )));
        }
    };
    let judged = match case::ended(e, &id).await? {
        Ended::Done(judged) => judged,
        Ended::Parked(why) => return Ok(Scored::Not(format!("the judge: {why}"))),
    };
    run.judge_cost_usd += judged.cost_spent;
    let Some(text) = judged
        .answer()
        .filter(|_| judged.state == JobState::Succeeded)
    else {
        return Ok(Scored::Not(format!(
            "the judge's job {id} ended {} without an answer: {}",
            judged.state.as_str(),
            judged.error.as_deref().unwrap_or("no error recorded")
        )));
    };
    Ok(match read_judgement(text) {
        Ok(judgement) => Scored::Judged(judgement),
        Err(why) => Scored::Not(format!("the judge bundle {bundle:?} (job {id}): {why}")),
    })
}

/// Why a process grader gave no judgement.
#[derive(Debug, thiserror::Error)]
enum ProcessFailed {
    #[error(
        "cannot start {program}: {source}; the command is run in the bundle's `evals/` directory"
    )]
    Spawn {
        program: String,
        source: std::io::Error,
    },
    #[error("did not finish within {0:?} and was killed")]
    TimedOut(Duration),
    #[error("talking to it failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("exited with {status}: {stderr}")]
    Exit { status: String, stderr: String },
    #[error(transparent)]
    Output(#[from] JudgementProblem),
}

/// Runs a process grader: the case and `observed` on its stdin, its
/// judgement from its stdout.
async fn process(
    e: &EvalJob<'_>,
    case: &EvalCase,
    observed: &Observed,
    command: &[String],
    timeout: Duration,
) -> Result<Judgement, ProcessFailed> {
    let dir = e.loaded.bundle.dir.join("evals");
    let Some((program, args)) = command.split_first() else {
        // A grader without a command is refused when the suite is read.
        return Err(ProcessFailed::Exit {
            status: "no command".into(),
            stderr: String::new(),
        });
    };
    // As a process tool's: the daemon's environment is not the grader's,
    // but for the variables a program needs to run.
    let kept = DEFAULT_ENV_ALLOWLIST
        .iter()
        .filter_map(|name| std::env::var_os(name).map(|value| (*name, value)));
    let mut child = tokio::process::Command::new(program_path(&dir, program))
        .args(args)
        .current_dir(&dir)
        .env_clear()
        .envs(kept)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .map_err(|source| ProcessFailed::Spawn {
            program: program.clone(),
            source,
        })?;
    let input = json!({
        "case": {
            "id": case.id,
            "input": case.input,
            "variables": case.variables,
            "expected": case.expected,
        },
        "observed": observed,
    });
    let talk = async {
        let (mut stdin, stdout, stderr) =
            (child.stdin.take(), child.stdout.take(), child.stderr.take());
        if let Some(stdin) = stdin.as_mut() {
            stdin.write_all(input.to_string().as_bytes()).await?;
        }
        drop(stdin);
        let (out, err) = tokio::try_join!(capped(stdout), capped(stderr))?;
        let status = child.wait().await?;
        Ok::<_, std::io::Error>((status, out, err))
    };
    let (status, out, err) = tokio::time::timeout(timeout, talk)
        .await
        .map_err(|_| ProcessFailed::TimedOut(timeout))??;
    if !status.success() {
        return Err(ProcessFailed::Exit {
            status: status.to_string(),
            stderr: String::from_utf8_lossy(&err).trim().to_string(),
        });
    }
    Ok(read_judgement(&String::from_utf8_lossy(&out))?)
}

/// A program named by a relative path (`./grade.py`) is the bundle's own,
/// in its `evals/` directory; a bare name is looked up on `PATH`.
fn program_path(dir: &Path, program: &str) -> PathBuf {
    let path = Path::new(program);
    match path.is_relative() && program.contains('/') {
        true => dir.join(path),
        false => path.to_path_buf(),
    }
}

/// What a child wrote on one of its outputs, up to [`MAX_OUTPUT`] (the
/// rest is read and dropped, so the child is not blocked on a full pipe).
async fn capped(output: Option<impl tokio::io::AsyncRead + Unpin>) -> std::io::Result<Vec<u8>> {
    let Some(mut output) = output else {
        return Ok(Vec::new());
    };
    let mut kept = Vec::new();
    (&mut output)
        .take(MAX_OUTPUT)
        .read_to_end(&mut kept)
        .await?;
    tokio::io::copy(&mut output, &mut tokio::io::sink()).await?;
    Ok(kept)
}
