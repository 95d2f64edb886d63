//! An eval run's grades as the GenAI conventions' `gen_ai.evaluation.result`
//! log-based event: one record per grade of each case on each version run,
//! with `gen_ai.evaluation.name` (the grader), `gen_ai.evaluation.score.value`,
//! `gen_ai.evaluation.score.label` (`pass` / `fail`) and — only with message
//! content opted in, since a grader's reason quotes the answer —
//! `gen_ai.evaluation.explanation`. The conventions parent the event to the
//! operation evaluated: here the case job's `invoke_agent` span, when this
//! daemon exported it recently (its context is remembered as the run ends);
//! a case job that ran elsewhere, or long ago, gives a record with no
//! parent span, still carrying the case job's id.

use std::collections::{HashMap, VecDeque};
use std::time::SystemTime;

use opentelemetry::logs::{LogRecord, Logger, Severity};
use opentelemetry::trace::SpanContext;
use opentelemetry_sdk::logs::SdkLogger;

use crate::evals::{CaseRun, Grade};
use crate::events::daemon::EvalRan;

/// The event's name, as the conventions fix it.
pub const EVENT_NAME: &str = "gen_ai.evaluation.result";
/// How many jobs' root spans are remembered for their evaluation: an eval
/// grades a case as soon as its job ends, so a recent window is enough.
const REMEMBERED: usize = 4096;
/// The most characters of a grader's reason sent as the explanation.
const EXPLANATION_CHARS: usize = 1_000;

/// Where evaluation events go, and the recent jobs' root spans.
pub(super) struct Evaluations {
    logger: SdkLogger,
    /// Send the graders' reasons (they quote answers: content).
    explain: bool,
    spans: HashMap<String, SpanContext>,
    /// The order `spans` was filled in, oldest first.
    order: VecDeque<String>,
}

/// One version's run of a case, as its events say it.
struct Graded<'a> {
    eval_job: &'a str,
    bundle: &'a str,
    version: &'a str,
    case: &'a str,
    run: &'a CaseRun,
}

impl Evaluations {
    pub fn new(logger: SdkLogger, explain: bool) -> Self {
        Self {
            logger,
            explain,
            spans: HashMap::new(),
            order: VecDeque::new(),
        }
    }

    /// Remembers job `job_id`'s root span (its top run just ended).
    pub fn remember(&mut self, job_id: &str, span: SpanContext) {
        if self.spans.insert(job_id.to_string(), span).is_none() {
            self.order.push_back(job_id.to_string());
        }
        while self.order.len() > REMEMBERED {
            if let Some(oldest) = self.order.pop_front() {
                self.spans.remove(&oldest);
            }
        }
    }

    /// Every grade of `ran`'s report, on the version under test and on
    /// the one compared against.
    pub fn emit(&self, ran: &EvalRan, at: SystemTime) {
        let report = &ran.report;
        for case in &report.cases {
            let mut runs = vec![(report.version.as_str(), &case.run)];
            if let (Some(version), Some(run)) = (&report.against, &case.against) {
                runs.push((version.as_str(), run));
            }
            for (version, run) in runs {
                let graded = Graded {
                    eval_job: &ran.job,
                    bundle: &report.bundle,
                    version,
                    case: &case.case,
                    run,
                };
                for grade in &run.grades {
                    self.grade(&graded, grade, at);
                }
            }
        }
    }

    fn grade(&self, graded: &Graded<'_>, grade: &Grade, at: SystemTime) {
        let mut record = self.logger.create_log_record();
        record.set_event_name(EVENT_NAME);
        record.set_timestamp(at);
        record.set_observed_timestamp(SystemTime::now());
        record.set_severity_number(Severity::Info);
        let span = graded.run.job_id.as_ref().and_then(|id| self.spans.get(id));
        if let Some(span) = span {
            record.set_trace_context(span.trace_id(), span.span_id(), Some(span.trace_flags()));
        }
        let label = if grade.pass { "pass" } else { "fail" };
        record.add_attribute("gen_ai.evaluation.name", grade.grader.clone());
        record.add_attribute("gen_ai.evaluation.score.value", grade.score);
        record.add_attribute("gen_ai.evaluation.score.label", label);
        if self.explain {
            let explanation: String = grade.reason.chars().take(EXPLANATION_CHARS).collect();
            record.add_attribute("gen_ai.evaluation.explanation", explanation);
        }
        record.add_attribute("gen_ai.agent.name", graded.bundle.to_string());
        record.add_attribute("gen_ai.agent.version", graded.version.to_string());
        record.add_attribute("structured_agents.eval.job.id", graded.eval_job.to_string());
        record.add_attribute("structured_agents.eval.case", graded.case.to_string());
        record.add_attribute("structured_agents.eval.case.pass", graded.run.pass);
        record.add_attribute("structured_agents.eval.grader.weight", grade.weight);
        if let Some(job) = &graded.run.job_id {
            record.add_attribute("structured_agents.job.id", job.clone());
        }
        self.logger.emit(record);
    }
}
