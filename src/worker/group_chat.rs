//! Group-chat jobs: the worker runs a job's [`Plan`] — each agent answers
//! in order, round after round, until the plan's termination strategy says
//! stop. Every reply (and every selector verdict) is a journal entry, so a
//! resumed job never asks an agent again; each is also a `ToolCall` /
//! `ToolResult` pair of events named after the agent (log, SSE, metrics,
//! spans). An agent that fails answers with its error text: the chat goes on.

use std::time::{Duration, Instant};

use serde_json::{Map, Value, json};

use crate::events::{Event, preview};
use crate::group_chat::{Ended, Participant, Place, Plan, Reply, transcript};
use crate::journal::RunJournal;
use crate::kernel::RunFailure;
use crate::queue::{LeasedJob, Outcome};
use crate::registry::LoadedBundle;
use crate::runner::{RunOptions, RunScope, Runner};
use crate::tools::http_agent::{self, Envelope};
use crate::types::TerminationReason;

/// Whoever speaks for the group chat to remote agents.
const SENDER: &str = "agent-runtime";
/// How long a remote agent may take when the host bundle sets no timeout.
const DEFAULT_AGENT_TIMEOUT: Duration = Duration::from_secs(120);

/// One attempt of a group-chat job.
pub(super) struct GroupChatJob<'a> {
    pub runner: &'a Runner,
    pub loaded: &'a LoadedBundle,
    pub job: &'a LeasedJob,
    /// The job's plan (its kind's).
    pub plan: &'a Plan,
    pub scope: &'a RunScope,
    /// The conversation's earlier turns (question, answer), oldest first.
    pub earlier: Vec<(String, String)>,
}

/// Runs (or resumes) the chat; the queue decides what the outcome means.
pub(super) async fn run(run: GroupChatJob<'_>) -> Outcome {
    let plan = run.plan;
    let chat = Chat {
        replies_journal: run.scope.journal.named("group"),
        http: reqwest::Client::new(),
        timeout: run
            .loaded
            .bundle
            .raw
            .limits
            .timeout
            .map_or(DEFAULT_AGENT_TIMEOUT, Into::into),
        run: &run,
    };
    let started = Instant::now();
    run.scope
        .sink
        .emit(Event::KernelStart {
            max_turns: plan.max_iterations,
            tools_count: plan.agents.len(),
            initial_messages_count: 0,
        })
        .await;
    let chatted = chat.rounds(plan).await;
    let (reason, error) = match &chatted {
        Ok((_, Ended::MaxIterations, _)) => (TerminationReason::MaxTurns, None),
        // The strategy decided, as a termination tool would.
        Ok(_) => (TerminationReason::TerminationTool, None),
        Err(Outcome::Failed { error, .. }) if run.scope.cancel.is_cancelled() => {
            (TerminationReason::Cancelled, Some(error.clone()))
        }
        Err(Outcome::Failed { error, .. }) => (TerminationReason::Error, Some(error.clone())),
        Err(_) => (TerminationReason::Error, None),
    };
    run.scope
        .sink
        .emit(Event::KernelEnd {
            turn_count: chatted.as_ref().map_or(0, |(_, _, rounds)| *rounds),
            termination_reason: reason,
            total_duration_ms: started.elapsed().as_millis() as u64,
            error_type: error.as_ref().map(|_| "group_chat".to_string()),
            error,
        })
        .await;
    let (replies, ended, rounds) = match chatted {
        Ok(chatted) => chatted,
        Err(outcome) => return outcome,
    };
    Outcome::Succeeded(chat_output(&replies, ended, rounds, run.loaded.version()))
}

/// A finished chat's answer: the replies joined (`output`, as the runtime
/// API has always answered), the last one, the transcript of who said
/// what, the agents used, the rounds held and why it ended.
fn chat_output(replies: &[Reply], ended: Ended, rounds: u32, version: &str) -> Value {
    let mut agents_used: Vec<&str> = Vec::new();
    for reply in replies {
        if !agents_used.contains(&reply.agent_id.as_str()) {
            agents_used.push(&reply.agent_id);
        }
    }
    let output = replies
        .iter()
        .map(|r| r.response.as_str())
        .collect::<Vec<_>>()
        .join(" ");
    let responses: Vec<Value> = replies
        .iter()
        .map(
            |r| json!({"agent_id": r.agent_id, "agent_name": r.agent_name, "response": r.response}),
        )
        .collect();
    // Who said what, in order: the answer as a transcript. `output` keeps
    // the replies joined, as the runtime API has always answered.
    let transcript: Vec<Value> = replies
        .iter()
        .map(|r| {
            json!({"speaker": r.agent_name, "agent_id": r.agent_id, "round": r.round,
                   "text": r.response, "is_error": r.is_error})
        })
        .collect();
    let final_text = replies.last().map(|r| r.response.as_str());
    json!({
        "output": output,
        "final_text": final_text,
        "transcript": transcript,
        "agent_responses": responses,
        "agents_used": agents_used,
        "rounds": rounds,
        "terminated_by": ended,
        "bundle_version": version,
    })
}

/// What an agent answered: its text, or the error it failed with (which
/// the chat goes on with, as the agent's reply).
enum Answer {
    Said(String),
    Failed(String),
}

impl Answer {
    fn of<E: std::fmt::Display>(answer: Result<String, E>) -> Self {
        match answer {
            Ok(text) => Answer::Said(text),
            Err(e) => Answer::Failed(e.to_string()),
        }
    }
}

struct Chat<'a> {
    run: &'a GroupChatJob<'a>,
    replies_journal: RunJournal,
    http: reqwest::Client,
    timeout: Duration,
}

impl Chat<'_> {
    /// Every round until the plan's strategy (or its round limit) ends
    /// the chat: the replies, why it ended, and the rounds held.
    async fn rounds(&self, plan: &Plan) -> Result<(Vec<Reply>, Ended, u32), Outcome> {
        let mut replies: Vec<Reply> = Vec::new();
        let mut ended = Ended::MaxIterations;
        let mut rounds = 0;
        'rounds: for round in 1..=plan.max_iterations {
            rounds = round;
            for agent in &plan.agents {
                let prompt = transcript(&self.run.earlier, &self.run.job.input, &replies);
                let key = format!("reply-{}", replies.len());
                let reply = self.ask(agent, round, &key, prompt).await?;
                let stop = plan.stops_after_reply(&reply);
                replies.push(reply);
                if stop {
                    ended = Ended::StopPhrase;
                    break 'rounds;
                }
            }
            if let (Some(selector), true) = (&plan.selector, round < plan.max_iterations) {
                let prompt = plan.selector_prompt(&transcript(
                    &self.run.earlier,
                    &self.run.job.input,
                    &replies,
                ));
                let verdict = self
                    .ask(selector, round, &format!("verdict-{round}"), prompt)
                    .await?;
                if !verdict.is_error && plan.selector_stops(&verdict.response) {
                    ended = Ended::Selector;
                    break;
                }
            }
        }
        Ok((replies, ended, rounds))
    }

    /// The agent's reply recorded under `key`, or asked for now and
    /// recorded before the chat acts on it. `Err` ends the attempt
    /// (cancelled, or the journal cannot be written).
    async fn ask(
        &self,
        agent: &Participant,
        round: u32,
        key: &str,
        prompt: String,
    ) -> Result<Reply, Outcome> {
        let job = self.run.job;
        let storage = |e: crate::journal::JournalError| Outcome::Failed {
            error: format!("job {}: group chat journal: {e}", job.id),
            retryable: true,
        };
        if let Some(reply) = self
            .replies_journal
            .latest_value::<Reply>(key)
            .map_err(storage)?
        {
            return Ok(reply);
        }
        let sink = &self.run.scope.sink;
        sink.emit(Event::ToolCall {
            turn: round,
            tool_name: agent.id.clone(),
            call_id: key.to_string(),
            arguments: json!({"content": prompt}),
        })
        .await;
        let started = Instant::now();
        let answer = self.answer(agent, round, key, prompt).await?;
        if self.run.scope.cancel.is_cancelled() {
            return Err(Outcome::Failed {
                error: "cancelled by request".into(),
                retryable: false,
            });
        }
        let reply = Reply {
            agent_id: agent.id.clone(),
            agent_name: agent.name.clone(),
            is_error: matches!(answer, Answer::Failed(_)),
            response: match answer {
                Answer::Said(text) => text,
                Answer::Failed(e) => format!("Error: agent {} failed: {e}", agent.id),
            },
            round,
        };
        self.replies_journal
            .record_value(round, key, &reply)
            .await
            .map_err(storage)?;
        crate::failpoint::hit(crate::failpoint::Failpoint::AfterGroupReplyRecorded);
        sink.emit(Event::ToolResult {
            turn: round,
            tool_name: agent.id.clone(),
            call_id: key.to_string(),
            is_error: reply.is_error,
            duration_ms: started.elapsed().as_millis() as u64,
            output_preview: preview(&reply.response, crate::events::OUTPUT_PREVIEW),
            error_type: reply.is_error.then(|| "tool_error".to_string()),
        })
        .await;
        Ok(reply)
    }

    /// What `agent` answers `prompt`. `Err` ends the attempt: an unknown
    /// outcome inside a local agent parks the whole job.
    async fn answer(
        &self,
        agent: &Participant,
        round: u32,
        key: &str,
        prompt: String,
    ) -> Result<Answer, Outcome> {
        let job = self.run.job;
        Ok(match &agent.place {
            Place::Local { bundle } => match self.ask_local(bundle, round, key, prompt).await {
                // An unknown outcome inside the agent parks the whole job:
                // never a reply that hides it.
                Err(failure) if failure.ends_job() => return Err(failure.into()),
                answer => Answer::of(answer),
            },
            Place::Remote {
                endpoint,
                max_response_bytes,
                message_type,
                timeout_ms,
            } => {
                let message = Envelope {
                    conversation_id: job.conversation_id.as_deref().unwrap_or(job.id.as_str()),
                    sender: SENDER.to_string(),
                    content: prompt,
                    idempotency_key: self.replies_journal.idempotency_key(round, key),
                    // The agent's own timeout, as for the router's calls.
                    timeout: timeout_ms.map_or(self.timeout, Duration::from_millis),
                    max_response_bytes: max_response_bytes
                        .unwrap_or(http_agent::DEFAULT_MAX_RESPONSE_BYTES),
                    message_type: message_type.clone().unwrap_or_default(),
                };
                tokio::select! {
                    sent = http_agent::send(&self.http, endpoint, &agent.id, message) => {
                        Answer::of(sent.map(answer_text))
                    }
                    _ = self.run.scope.cancel.cancelled() => Answer::Failed("cancelled".into()),
                }
            }
        })
    }

    /// A loaded bundle's answer, run inside this job with its own journal
    /// scope (a resumed reply replays its model and tool steps).
    async fn ask_local(
        &self,
        bundle: &str,
        round: u32,
        key: &str,
        prompt: String,
    ) -> Result<String, RunFailure> {
        let scope = self.run.scope.nested(round, key, bundle);
        let run = self
            .run
            .runner
            .run_nested_bundle(bundle, &prompt, &Map::new(), &RunOptions::default(), scope)
            .await?;
        Ok(run
            .final_output
            .or(run.final_message.content)
            .unwrap_or_default())
    }
}

/// A remote agent's answer as text.
fn answer_text(output: crate::tools::ToolOutput) -> String {
    match output {
        crate::tools::ToolOutput::Text(text) => text,
        other => other.into_json_string(),
    }
}
