//! What verify found: for each crash point and each tool call of the
//! reference run, how often the call really ran over the crashed attempt
//! and its resumption, judged against the tool's declared `effect`:
//!
//! | effect | `once` | `twice` | `never`, the job parked on it | `never`, not parked |
//! |---|---|---|---|---|
//! | `unsafe` | kept | broken: the effect repeated | kept: an operator decides | broken: lost |
//! | `idempotent` | kept | kept: repeated with the same idempotency key | broken: it promised a repeat is safe | broken: lost |
//! | `read_only` | kept | kept | broken | broken: lost |
//!
//! A call after the one the resumed job parked on is `not_reached` (it
//! runs once an operator resolves the job), and a resumed job that fails
//! where the reference run did not is broken too.

use std::collections::{BTreeMap, HashMap};

use schemars::JsonSchema;
use serde::Serialize;

use super::crash::{CrashAt, Moment};
use super::{Attempt, CrashPoint, End};
use crate::approval::ParkedKind;
use crate::journal::{JournalEntry, RecordedReply};
use crate::tools::Effect;

/// The whole matrix (`--json` prints it as it is).
#[derive(Debug, Serialize, JsonSchema)]
pub struct Report {
    pub bundle: String,
    pub version: String,
    /// How the uninterrupted run ended.
    pub reference: String,
    /// The reference run's journal writes: the crash points, in order.
    pub writes: Vec<String>,
    pub calls: Vec<CallSite>,
    pub crash_points: Vec<PointReport>,
    pub tools: Vec<ToolSummary>,
    /// Calls (at a crash point) that broke their declared effect, plus
    /// resumed jobs that failed where the reference run did not.
    pub violations: usize,
    /// Whether the bundle's tools really ran, side effects and all.
    pub real_tools: bool,
    /// The tools a stand-in answered instead (every tool whose effect is not
    /// `read_only`, unless the real tools were asked for).
    pub stand_ins: Vec<String>,
}

/// A tool call of the reference run: the `position`-th call of `turn`'s reply.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct CallSite {
    pub turn: u32,
    pub position: usize,
    pub tool: String,
    #[schemars(with = "Effect")]
    pub effect: &'static str,
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct PointReport {
    pub write: usize,
    pub moment: Moment,
    /// The step the write recorded.
    pub step: String,
    /// How the resumed job ended (or why there was nothing to resume).
    pub outcome: String,
    /// The resumed job failed where the reference run did not.
    pub failed: bool,
    pub calls: Vec<CallRun>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum Ran {
    Once,
    Twice,
    Never,
    NotReached,
}

impl Ran {
    pub fn as_str(self) -> &'static str {
        match self {
            Ran::Once => "once",
            Ran::Twice => "twice",
            Ran::Never => "never",
            Ran::NotReached => "not_reached",
        }
    }
}

#[derive(Debug, Serialize, JsonSchema)]
pub struct CallRun {
    pub turn: u32,
    pub position: usize,
    pub tool: String,
    #[schemars(with = "Effect")]
    pub effect: &'static str,
    /// Real executions over both attempts.
    pub runs: usize,
    pub ran: Ran,
    /// The resumed job parked in needs_attention on this call.
    pub parked: bool,
    /// What broke the declared effect, if anything did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub violation: Option<String>,
}

/// One call of the reference run over all crash points.
#[derive(Debug, Serialize, JsonSchema)]
pub struct ToolSummary {
    pub tool: String,
    #[schemars(with = "Effect")]
    pub effect: &'static str,
    pub turn: u32,
    pub position: usize,
    pub once: usize,
    pub twice: usize,
    pub never: usize,
    pub never_parked: usize,
    pub not_reached: usize,
    pub violations: usize,
}

impl Report {
    pub(super) fn new(
        bundle: &str,
        version: &str,
        reference: &Attempt,
        points: &[CrashPoint],
    ) -> Self {
        let writes = &reference.writes;
        let calls: Vec<CallSite> =
            replies(writes)
                .into_iter()
                .flat_map(|(turn, reply)| {
                    let tools = &reference.loaded.tools;
                    reply.assistant.tool_calls.into_iter().enumerate().map(
                        move |(position, call)| CallSite {
                            turn,
                            position,
                            effect: tools.effect(&call.name).as_str(),
                            tool: call.name,
                        },
                    )
                })
                .collect();
        let crash_points: Vec<PointReport> = points
            .iter()
            .map(|point| judge(point, writes, &calls, &reference.end))
            .collect();
        let tools = summarize(&calls, &crash_points);
        let violations = crash_points
            .iter()
            .map(|p| {
                usize::from(p.failed) + p.calls.iter().filter(|c| c.violation.is_some()).count()
            })
            .sum();
        Self {
            bundle: bundle.to_string(),
            version: version.to_string(),
            reference: outcome(&reference.end),
            writes: writes.iter().map(|w| describe(w, &calls)).collect(),
            calls,
            crash_points,
            tools,
            violations,
            // Set by the matrix, which knows how the tools were answered.
            real_tools: false,
            stand_ins: Vec::new(),
        }
    }
}

/// The model replies of the job's own run, by turn.
fn replies(writes: &[Vec<JournalEntry>]) -> BTreeMap<u32, RecordedReply> {
    writes
        .iter()
        .flatten()
        .filter(|e| e.scope.is_empty() && e.step == "reply")
        .filter_map(|e| Some((e.turn, serde_json::from_str(&e.body).ok()?)))
        .collect()
}

/// What a write recorded, for people: its last entry (the step the kernel
/// waited for; deferred entries ride along with it).
fn describe(write: &[JournalEntry], calls: &[CallSite]) -> String {
    let Some(entry) = write.last() else {
        return "an empty write".into();
    };
    let scope = if entry.scope.is_empty() {
        String::new()
    } else {
        format!("run {} ", entry.scope.trim_end_matches('/'))
    };
    let call = |position: &str| {
        let position: usize = position.parse().unwrap_or(usize::MAX);
        calls
            .iter()
            .find(|c| c.turn == entry.turn && c.position == position && scope.is_empty())
            .map_or(format!("call #{position}"), |c| {
                format!("{} #{position}", c.tool)
            })
    };
    let what = if entry.step == "reply" {
        "the model's reply".to_string()
    } else if let Some(position) = entry.step.strip_prefix("start@") {
        format!("start of {}", call(position))
    } else if let Some(position) = entry.step.strip_prefix("result@") {
        format!("result of {}", call(position))
    } else {
        entry.step.clone()
    };
    format!("{scope}turn {}: {what}", entry.turn)
}

/// How an attempt ended, for people and for `--json`.
fn outcome(end: &End) -> String {
    match end {
        End::Crashed => "crashed".into(),
        End::Finished(result) => result.termination_reason.to_string(),
        End::Parked(parked) => {
            let state = match parked.kind {
                ParkedKind::UnknownOutcome | ParkedKind::CallerCall => "needs_attention",
                ParkedKind::Approval => "awaiting_approval",
            };
            format!(
                "{state} on {} (turn {} #{})",
                parked.tool,
                parked.turn,
                parked.position.map_or("?".into(), |p| p.to_string())
            )
        }
        End::Failed(why) => format!("failed: {why}"),
    }
}

/// The calls' verdicts at one crash point.
fn judge(
    point: &CrashPoint,
    writes: &[Vec<JournalEntry>],
    calls: &[CallSite],
    reference: &End,
) -> PointReport {
    let CrashAt { write, moment } = point.crash;
    let step = writes
        .get(write - 1)
        .map_or_else(String::new, |w| describe(w, calls));
    let Some(resumed) = &point.resumed else {
        return PointReport {
            write,
            moment,
            step,
            outcome: format!(
                "not reached: the job ended {} before this write",
                outcome(&point.first.end)
            ),
            failed: false,
            calls: Vec::new(),
        };
    };
    let runs = executions(&[&point.first, resumed]);
    let parked_at = match &resumed.end {
        End::Parked(parked) if parked.scope.is_empty() => {
            Some((parked.turn, parked.position.unwrap_or(usize::MAX)))
        }
        _ => None,
    };
    let failed = matches!(resumed.end, End::Failed(_)) && !matches!(reference, End::Failed(_));
    let calls = calls
        .iter()
        .map(|site| {
            let runs = runs.get(&(site.turn, site.position)).copied().unwrap_or(0);
            let here = (site.turn, site.position);
            let parked = parked_at == Some(here);
            let ran = match runs {
                0 if parked_at.is_some_and(|at| at < here) => Ran::NotReached,
                0 => Ran::Never,
                1 => Ran::Once,
                _ => Ran::Twice,
            };
            CallRun {
                turn: site.turn,
                position: site.position,
                tool: site.tool.clone(),
                effect: site.effect,
                runs,
                ran,
                parked,
                violation: violation(site.effect, ran, parked),
            }
        })
        .collect();
    PointReport {
        write,
        moment,
        step,
        outcome: outcome(&resumed.end),
        failed,
        calls,
    }
}

/// Real executions per call (turn, position) over the attempts of one job;
/// a call is known by its position in its turn's reply, whichever attempt
/// journaled that reply.
fn executions(attempts: &[&Attempt]) -> HashMap<(u32, usize), usize> {
    let mut positions = HashMap::new();
    for attempt in attempts {
        for (turn, reply) in replies(&attempt.writes) {
            for (position, call) in reply.assistant.tool_calls.into_iter().enumerate() {
                positions.entry((turn, call.id)).or_insert(position);
            }
        }
    }
    let mut runs = HashMap::new();
    for execution in attempts.iter().flat_map(|a| &a.executions) {
        if let Some(position) = positions.get(&(execution.turn, execution.call_id.clone())) {
            *runs.entry((execution.turn, *position)).or_insert(0) += 1;
        }
    }
    runs
}

/// What broke the declared effect (see the table above), if anything did.
fn violation(effect: &str, ran: Ran, parked: bool) -> Option<String> {
    let unsafe_ = effect == Effect::Unsafe.as_str();
    match ran {
        Ran::Once | Ran::NotReached => None,
        Ran::Twice if unsafe_ => Some("an unsafe call ran twice".into()),
        Ran::Twice => None,
        Ran::Never if parked && unsafe_ => None,
        Ran::Never if parked => Some(format!(
            "the job parked on a call declared {effect}, which promises a repeat is safe"
        )),
        Ran::Never => Some("the call was lost: it never ran and the job did not park".into()),
    }
}

fn summarize(calls: &[CallSite], points: &[PointReport]) -> Vec<ToolSummary> {
    calls
        .iter()
        .map(|site| {
            let runs = points
                .iter()
                .flat_map(|p| &p.calls)
                .filter(|c| (c.turn, c.position) == (site.turn, site.position));
            let mut summary = ToolSummary {
                tool: site.tool.clone(),
                effect: site.effect,
                turn: site.turn,
                position: site.position,
                once: 0,
                twice: 0,
                never: 0,
                never_parked: 0,
                not_reached: 0,
                violations: 0,
            };
            for run in runs {
                match run.ran {
                    Ran::Once => summary.once += 1,
                    Ran::Twice => summary.twice += 1,
                    Ran::Never => summary.never += 1,
                    Ran::NotReached => summary.not_reached += 1,
                }
                summary.never_parked += usize::from(run.ran == Ran::Never && run.parked);
                summary.violations += usize::from(run.violation.is_some());
            }
            summary
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn verdicts_follow_the_declared_effect() {
        assert!(violation("unsafe", Ran::Twice, false).is_some());
        assert!(violation("unsafe", Ran::Never, true).is_none());
        assert!(violation("unsafe", Ran::Never, false).is_some());
        assert!(violation("idempotent", Ran::Twice, false).is_none());
        assert!(violation("idempotent", Ran::Never, true).is_some());
        assert!(violation("read_only", Ran::Never, false).is_some());
        for effect in ["unsafe", "idempotent", "read_only"] {
            assert!(violation(effect, Ran::Once, false).is_none());
            assert!(violation(effect, Ran::NotReached, false).is_none());
        }
    }
}
