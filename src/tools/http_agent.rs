//! The `http_agent` backend: a remote agent reached over HTTP. Each call
//! POSTs a message envelope `{messageId, conversationId, senderId,
//! recipientId, content, timestamp, type}` (`type` "Text" as the
//! multi-agent runtime sent it, or the agent's `message_type`); the reply's
//! `content` is the tool output. Connection failures and 5xx are retryable; other non-2xx
//! replies and undecodable bodies are failures; the engine's timeout bounds
//! every call, and `max_response_bytes` every reply body (a bigger one is a
//! failure naming the agent and the cap).

use std::time::Duration;

use async_trait::async_trait;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::{Tool, ToolContext, ToolError, ToolOutput};
use crate::duration::HumanDuration;
pub use crate::types::MessageType;
use crate::types::ToolSchema;

/// Who the daemon's envelopes come from unless `[runtime] sender_id` says
/// otherwise (the multi-agent runtime's default).
pub const DEFAULT_SENDER_ID: &str = "runtime";

/// A remote agent as the daemon config lists it (`[[agents]]`).
#[derive(Debug, Clone, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct HttpAgentSpec {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// The URL messages are POSTed to.
    pub endpoint: String,
    /// Example questions clients may offer (`GET /api/agents`).
    #[serde(default)]
    pub conversation_starters: Vec<String>,
    /// The largest reply body accepted from this agent, in bytes (default
    /// 1 MiB): for `http_agent` tools naming it (unless the tool sets its
    /// own) and group chats.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_response_bytes: Option<usize>,
    /// The envelopes' `type` (default "Text"): a string, or a number for
    /// an agent that reads its message type as one (the multi-agent
    /// runtime's .NET agent wanted `0`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message_type: Option<MessageType>,
    /// How long one message to this agent may take when the router reaches
    /// it through the directory (default 300 s, at most 1 h).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout: Option<HumanDuration>,
}

/// The largest reply body an agent may send unless its `[[agents]]` entry
/// or the tool says otherwise.
pub const DEFAULT_MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// How long a message to an agent of the directory may take unless its
/// entry says otherwise: what the multi-agent runtime waited (aiohttp's
/// default total timeout).
pub const DEFAULT_AGENT_TIMEOUT: Duration = Duration::from_secs(300);

/// The longest `timeout` an agent may be given.
pub const MAX_AGENT_TIMEOUT: Duration = Duration::from_secs(3600);

impl HttpAgentSpec {
    /// The `type` of the envelopes sent to this agent.
    pub fn message_type(&self) -> MessageType {
        self.message_type.clone().unwrap_or_default()
    }

    /// How long one message to this agent may take through the directory.
    pub fn timeout(&self) -> Duration {
        self.timeout.map_or(DEFAULT_AGENT_TIMEOUT, Into::into)
    }

    /// The first setting of this entry that cannot work: its key and what
    /// is wrong (the config and the agents file both check with this).
    pub fn problem(&self) -> Option<(&'static str, String)> {
        if self.max_response_bytes == Some(0) {
            return Some((
                "max_response_bytes",
                "must be at least 1 (bytes); leave it out for the default of 1 MiB".into(),
            ));
        }
        if let Some(MessageType::Name(name)) = &self.message_type
            && name.trim().is_empty()
        {
            return Some((
                "message_type",
                "is empty: give a name such as \"Text\" or a number such as 0, or leave it out for \"Text\"".into(),
            ));
        }
        let timeout = self.timeout.map(Duration::from);
        if timeout.is_some_and(|t| t.is_zero() || t > MAX_AGENT_TIMEOUT) {
            return Some((
                "timeout",
                format!(
                    "\"{}\" must be above zero and at most \"1h\"; leave it out for the default of \"5m\"",
                    self.timeout.unwrap_or_default()
                ),
            ));
        }
        None
    }
}

/// One message for a remote agent.
pub struct Envelope<'a> {
    pub conversation_id: &'a str,
    pub sender: String,
    pub content: String,
    /// Sent as `Idempotency-Key`: a repeated message (a resumed job) can be
    /// recognised by the agent.
    pub idempotency_key: String,
    pub timeout: Duration,
    /// The largest reply body accepted, in bytes.
    pub max_response_bytes: usize,
    /// The envelope's `type`.
    pub message_type: MessageType,
}

/// POSTs the message envelope to `endpoint`; the reply's `content` is the
/// answer. Connection failures, 429 and 5xx are retryable.
pub async fn send(
    http: &reqwest::Client,
    endpoint: &str,
    recipient: &str,
    message: Envelope<'_>,
) -> Result<ToolOutput, ToolError> {
    let envelope = json!({
        "messageId": uuid::Uuid::new_v4().to_string(),
        "conversationId": message.conversation_id,
        "senderId": message.sender,
        "recipientId": recipient,
        "content": message.content,
        "timestamp": humantime::format_rfc3339_millis(std::time::SystemTime::now()).to_string(),
        "type": message.message_type,
    });
    let response = http
        .post(endpoint)
        .header("Idempotency-Key", message.idempotency_key)
        .timeout(message.timeout.max(Duration::from_millis(1)))
        .json(&envelope)
        .send()
        .await
        .map_err(|e| not_sent(&e, recipient, endpoint))?;
    let body = reply_body(response, recipient, endpoint, message.max_response_bytes).await?;
    reply_content(&body, recipient)
}

/// Why the envelope did not reach the agent: a timeout or the egress
/// rule's refusal is final; the rest is retryable.
fn not_sent(e: &reqwest::Error, recipient: &str, endpoint: &str) -> ToolError {
    if e.is_timeout() {
        // The engine reports a timeout by this word.
        ToolError::Failed("timeout".into())
    } else if let Some(refused) = crate::egress::refusal(e) {
        // The rule will refuse the next attempt too.
        ToolError::Failed(format!("agent {recipient}: {refused}"))
    } else {
        ToolError::Retryable(format!(
            "agent {recipient} at {endpoint} unreachable: {}",
            crate::egress::describe(e)
        ))
    }
}

/// The body of a successful reply, at most `cap` bytes; an error status is
/// an error with the page's message (retryable for 429 and 5xx).
async fn reply_body(
    response: reqwest::Response,
    recipient: &str,
    endpoint: &str,
    cap: usize,
) -> Result<String, ToolError> {
    let status = response.status();
    let too_large = || {
        ToolError::Failed(format!(
            "agent {recipient} at {endpoint} sent a reply larger than max_response_bytes ({cap} bytes); \
             raise `max_response_bytes` on the http_agent tool or the agent's [[agents]] entry if such replies are expected"
        ))
    };
    if status.is_success() && response.content_length().is_some_and(|n| n > cap as u64) {
        return Err(too_large());
    }
    // Only the message of an error page is wanted: it is cut short.
    let limit = if status.is_success() {
        cap
    } else {
        crate::client::ERROR_BODY_BYTES
    };
    let (bytes, truncated) = crate::client::read_capped(response, limit)
        .await
        .map_err(|e| {
            ToolError::Retryable(format!(
                "agent {recipient} at {endpoint}: the reply broke off: {e}"
            ))
        })?;
    if truncated && status.is_success() {
        return Err(too_large());
    }
    let body = String::from_utf8_lossy(&bytes);
    if !status.is_success() {
        let message = format!(
            "agent {recipient} answered HTTP {status}: {}",
            crate::client::server_message(&body)
        );
        return Err(if status.is_server_error() || status.as_u16() == 429 {
            ToolError::Retryable(message)
        } else {
            ToolError::Failed(message)
        });
    }
    Ok(body.into_owned())
}

/// The answer in a reply: its `content` (text as text, anything else as
/// JSON).
fn reply_content(body: &str, recipient: &str) -> Result<ToolOutput, ToolError> {
    let reply: Value = serde_json::from_str(body).map_err(|e| {
        ToolError::Failed(format!(
            "agent {recipient} sent a reply that is not JSON ({e})"
        ))
    })?;
    match reply.get("content") {
        Some(Value::String(text)) => Ok(ToolOutput::Text(text.clone())),
        Some(other) => Ok(ToolOutput::Json(other.clone())),
        None => Err(ToolError::Failed(format!(
            "agent {recipient} replied without `content`"
        ))),
    }
}

pub struct HttpAgentTool {
    schema: ToolSchema,
    endpoint: String,
    recipient: String,
    /// The envelopes' `senderId` (`[runtime] sender_id`).
    sender: String,
    max_response_bytes: usize,
    /// The envelopes' `type` (the agent's `message_type`).
    message_type: MessageType,
    http: reqwest::Client,
}

impl HttpAgentTool {
    /// `egress`: the rule a URL the bundle names itself is sent under
    /// (its client resolves through it and follows no redirect); `None`
    /// for an agent of the daemon config, which the operator named.
    pub fn new(
        schema: ToolSchema,
        endpoint: String,
        recipient: String,
        max_response_bytes: usize,
        egress: Option<&crate::egress::Egress>,
    ) -> Result<Self, ToolError> {
        let builder = match egress {
            Some(egress) => {
                egress
                    .check(&endpoint)
                    .map_err(|e| ToolError::Failed(format!("agent {recipient}: {e}")))?;
                egress.client()
            }
            None => reqwest::Client::builder(),
        };
        let http = builder
            .connect_timeout(Duration::from_secs(5))
            .build()
            .map_err(|e| ToolError::Failed(format!("cannot build HTTP client: {e}")))?;
        Ok(Self {
            schema,
            endpoint,
            recipient,
            sender: DEFAULT_SENDER_ID.to_string(),
            max_response_bytes,
            message_type: MessageType::default(),
            http,
        })
    }

    /// Sends its envelopes as `sender` instead of the default `runtime`.
    pub fn with_sender(mut self, sender: String) -> Self {
        self.sender = sender;
        self
    }

    /// Sends its envelopes with `type` `message_type` instead of "Text".
    pub fn with_message_type(mut self, message_type: MessageType) -> Self {
        self.message_type = message_type;
        self
    }

    /// The default argument schema: one `content` string.
    pub fn default_parameters() -> Value {
        json!({"type": "object", "properties": {"content": {"type": "string", "description": "The message for the agent"}}, "required": ["content"]})
    }
}

impl HttpAgentTool {
    /// A string argument `key` that the tool's parameters declare (as the
    /// original's `call_agent(query, sender_id, conversation_id)` did):
    /// only then does a call's argument replace what the daemon would send.
    fn declared_text<'a>(&self, arguments: &'a Value, key: &str) -> Option<&'a str> {
        self.schema.parameters["properties"].get(key)?;
        arguments.get(key)?.as_str().filter(|text| !text.is_empty())
    }
}

#[async_trait]
impl Tool for HttpAgentTool {
    fn schema(&self) -> &ToolSchema {
        &self.schema
    }

    fn kind(&self) -> &'static str {
        "http_agent"
    }

    async fn invoke(
        &self,
        arguments: Value,
        ctx: ToolContext<'_>,
    ) -> Result<ToolOutput, ToolError> {
        let content = crate::types::agent_message(&arguments);
        let run = ctx.events.context();
        let message = Envelope {
            conversation_id: self
                .declared_text(&arguments, "conversation_id")
                .unwrap_or(&run.run_id),
            sender: self
                .declared_text(&arguments, "sender_id")
                .map_or_else(|| self.sender.clone(), str::to_string),
            content,
            idempotency_key: ctx.idempotency_key(),
            timeout: ctx.remaining(),
            max_response_bytes: self.max_response_bytes,
            message_type: self.message_type.clone(),
        };
        send(&self.http, &self.endpoint, &self.recipient, message).await
    }
}
