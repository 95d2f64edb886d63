//! Group chats: several agents answer one query in turn, round after round,
//! until a termination strategy says stop. This module holds what a
//! group-chat job carries (its [`Plan`]: participants, round limit,
//! strategy), the transcript each participant reads, and the stop rules.
//! The runtime API builds plans from requests; the worker runs them
//! (`worker::group_chat`), journaling every reply.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::types::MessageType;

/// The variable a submitter may not set on the bundle that hosts group
/// chats: a group chat's [`Plan`] is the job's kind (`queue::JobKind`),
/// which only the runtime API builds; jobs stored before kinds carried it
/// under this name.
pub const PLAN_VARIABLE: &str = "group_chat";

/// The `group_chat:` section of the bundle that hosts group chats.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GroupChatSpec {
    /// The largest `max_iterations` (rounds) a request may ask for.
    #[serde(default = "default_max_rounds")]
    pub max_rounds: u32,
    /// A selector reply containing this word (any case) ends the chat.
    #[serde(default = "default_stop_word")]
    pub stop_word: String,
}

impl Default for GroupChatSpec {
    fn default() -> Self {
        Self {
            max_rounds: default_max_rounds(),
            stop_word: default_stop_word(),
        }
    }
}

fn default_max_rounds() -> u32 {
    20
}

fn default_stop_word() -> String {
    "DONE".into()
}

/// When a group chat ends (besides running out of rounds, which bounds
/// every strategy).
#[derive(Debug, Clone, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(tag = "type", rename_all = "snake_case", deny_unknown_fields)]
pub enum Termination {
    /// After `max_iterations` rounds.
    #[default]
    MaxIterations,
    /// Right after a reply that contains the phrase (any case).
    StopPhrase { phrase: String },
    /// After each round the selector reads the transcript; a reply with the
    /// host's stop word ends the chat. No `agent_id`: the host bundle itself.
    Selector {
        #[serde(default)]
        agent_id: Option<String>,
    },
}

/// Where a participant runs.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Place {
    /// A loaded bundle, run inside the group-chat job.
    Local { bundle: String },
    /// A remote agent, sent the message envelope.
    Remote {
        endpoint: String,
        /// The largest reply accepted (the agent's `max_response_bytes`).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        max_response_bytes: Option<usize>,
        /// The envelopes' `type` (the agent's `message_type`; "Text" when unset).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        message_type: Option<MessageType>,
        /// How long one message to it may take, in milliseconds (the
        /// agent's `timeout`); the host bundle's `limits.timeout` when unset.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        timeout_ms: Option<u64>,
    },
}

/// One agent of a group chat (or its selector).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
pub struct Participant {
    pub id: String,
    pub name: String,
    #[serde(flatten)]
    pub place: Place,
}

/// What a group-chat job does.
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[schemars(rename = "GroupChatPlan")]
pub struct Plan {
    /// In speaking order.
    pub agents: Vec<Participant>,
    /// Rounds at most.
    pub max_iterations: u32,
    pub termination: Termination,
    /// Who decides, for the `selector` termination.
    #[serde(default)]
    pub selector: Option<Participant>,
    /// The word a selector answers to end the chat.
    pub stop_word: String,
}

impl Plan {
    /// The loaded bundles the chat runs (its local agents and selector).
    pub fn local_bundles(&self) -> Vec<String> {
        self.agents
            .iter()
            .chain(&self.selector)
            .filter_map(|p| match &p.place {
                Place::Local { bundle } => Some(bundle.clone()),
                Place::Remote { .. } => None,
            })
            .collect()
    }
}

/// One reply of a group chat.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Reply {
    pub agent_id: String,
    pub agent_name: String,
    pub response: String,
    pub round: u32,
    /// The agent failed (down, timed out): `response` is the error text.
    #[serde(default)]
    pub is_error: bool,
}

/// Why a group chat ended (its result's `terminated_by`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
#[schemars(rename = "TerminatedBy")]
pub enum Ended {
    MaxIterations,
    StopPhrase,
    Selector,
}

impl Plan {
    /// Whether the chat ends right after this reply.
    pub fn stops_after_reply(&self, reply: &Reply) -> bool {
        match &self.termination {
            Termination::StopPhrase { phrase } => contains_any_case(&reply.response, phrase),
            _ => false,
        }
    }

    /// Whether the selector's verdict ends the chat.
    pub fn selector_stops(&self, verdict: &str) -> bool {
        contains_any_case(verdict, &self.stop_word)
    }

    /// What the selector is asked after a round.
    pub fn selector_prompt(&self, transcript: &str) -> String {
        format!(
            "{transcript}\n\nShould this group chat end now? Answer {} if it has reached its goal, otherwise CONTINUE.",
            self.stop_word
        )
    }
}

/// The conversation so far as a participant reads it: earlier turns of
/// the conversation, the query, then each reply as `<name>: <reply>`.
pub fn transcript(earlier: &[(String, String)], query: &str, replies: &[Reply]) -> String {
    let mut text = String::new();
    for (asked, answered) in earlier {
        text.push_str(&format!("User: {asked}\nRuntime: {answered}\n"));
    }
    text.push_str(&format!("User: {query}"));
    for reply in replies {
        text.push_str(&format!("\n{}: {}", reply.agent_name, reply.response));
    }
    text
}

fn contains_any_case(text: &str, phrase: &str) -> bool {
    !phrase.is_empty() && text.to_lowercase().contains(&phrase.to_lowercase())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reply(name: &str, response: &str) -> Reply {
        Reply {
            agent_id: name.to_lowercase(),
            agent_name: name.into(),
            response: response.into(),
            round: 1,
            is_error: false,
        }
    }

    fn plan(termination: Termination) -> Plan {
        Plan {
            agents: Vec::new(),
            max_iterations: 3,
            termination,
            selector: None,
            stop_word: "DONE".into(),
        }
    }

    #[test]
    fn termination_parses_each_strategy_and_refuses_unknown_ones() {
        let parse = |v: serde_json::Value| serde_json::from_value::<Termination>(v);
        assert_eq!(
            parse(serde_json::json!({"type": "max_iterations"})).unwrap(),
            Termination::MaxIterations
        );
        assert_eq!(
            parse(serde_json::json!({"type": "stop_phrase", "phrase": "ok"})).unwrap(),
            Termination::StopPhrase {
                phrase: "ok".into()
            }
        );
        assert_eq!(
            parse(serde_json::json!({"type": "selector"})).unwrap(),
            Termination::Selector { agent_id: None }
        );
        assert!(parse(serde_json::json!({"type": "vote"})).is_err());
    }

    #[test]
    fn a_stop_phrase_ends_the_chat_in_any_case_and_only_that_strategy_does() {
        let stop = plan(Termination::StopPhrase {
            phrase: "Approved".into(),
        });
        assert!(stop.stops_after_reply(&reply("Critic", "APPROVED, ship it")));
        assert!(!stop.stops_after_reply(&reply("Critic", "needs work")));
        let rounds = plan(Termination::MaxIterations);
        assert!(!rounds.stops_after_reply(&reply("Critic", "approved")));
    }

    #[test]
    fn the_selector_stops_on_its_stop_word() {
        let p = plan(Termination::Selector { agent_id: None });
        assert!(p.selector_stops("done."));
        assert!(!p.selector_stops("CONTINUE"));
        assert!(p.selector_prompt("User: hi").contains("Answer DONE"));
    }

    #[test]
    fn the_transcript_lists_earlier_turns_the_query_and_replies() {
        let text = transcript(
            &[("hi".into(), "hello".into())],
            "plan a picnic",
            &[reply("Chef", "sandwiches"), reply("Critic", "and fruit")],
        );
        assert_eq!(
            text,
            "User: hi\nRuntime: hello\nUser: plan a picnic\nChef: sandwiches\nCritic: and fruit"
        );
    }
}
