//! The one shape of a call a job is parked on, whatever parked it: a call
//! waiting for a person's decision (`approval`), an `unsafe` call an
//! earlier attempt started whose outcome is unknown (`unknown_outcome`), or
//! the calls of the caller's own tools the client runs (`caller_call`).
//! The kernel makes it, the journal keeps an approval request in it, the
//! queue stores it as the job's `pending_call` and every reader (API, MCP,
//! CLI) reads it. Rows stored before this shape (an approval's `call`, a
//! crash park's `tool_name`, no `kind`) are read into it.

use schemars::{JsonSchema, Schema};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::Approver;

/// What parked a job on a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ParkedKind {
    /// The call waits for a person's decision (`awaiting_approval`).
    Approval,
    /// An `unsafe` call was started by an earlier attempt and has no
    /// recorded result (`needs_attention`).
    UnknownOutcome,
    /// The model called tools the request brought (caller tools): the
    /// client runs them and sends their outputs back, which resume the job
    /// (`needs_attention` until then; see the call's `caller_calls`).
    CallerCall,
}

/// One call of a caller's tool a job waits on: what the client is asked
/// to run, and where its output goes in the journal (the turn of the
/// parked call, this position).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct CallerCall {
    pub position: usize,
    pub call_id: String,
    pub tool: String,
    pub arguments: Value,
}

/// A call a job is parked on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(from = "StoredParkedCall")]
pub struct ParkedCall {
    pub kind: ParkedKind,
    /// The run scope (`""` for the job's own run).
    pub scope: String,
    /// The bundle whose tool it is: the job's own, or the one a nested run
    /// (an `agent` tool's) runs; `None` on calls parked before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
    pub turn: u32,
    /// The call's position in its turn's reply: with the turn, its journal
    /// key. `None` on calls parked before 0.2, whose key was the call id.
    pub position: Option<usize>,
    /// The model's id of the call: what a decision names.
    pub call_id: String,
    pub tool: String,
    pub arguments: Value,
    /// `read_only`, `idempotent` or `unsafe`.
    pub effect: String,
    pub idempotency_key: String,
    /// What an approval adds: the digest a decision is bound to, the
    /// tool's parameters, the timeout and who may decide.
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    pub approval: Option<ApprovalTerms>,
    /// Where a decision goes (`POST /v1/jobs/<id>/approvals/<call_id>`),
    /// on an approval only; filled in as the job is read (`for_job`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub decide: Option<String>,
    /// The key that may not decide on it: the job's submitter, when the
    /// tool wants four eyes (`approval.by: others`); filled in as the job
    /// is read (`for_job`), so a client can tell before it asks.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_by: Option<String>,
    /// Of a `caller_call` park: every call of the turn the client must
    /// answer (this call first), so one answer carries all their outputs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub caller_calls: Vec<CallerCall>,
}

/// The approval part of a parked call.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
pub struct ApprovalTerms {
    /// The digest of the arguments a decision must name (`sha256:…`).
    pub digest: String,
    /// The rule that asked, as its bundle states it (`when "args.amount >
    /// 100"`); `None` on requests recorded before it was kept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rule: Option<String>,
    /// The tool's parameter schema, which edited arguments must satisfy.
    #[serde(default)]
    pub parameters: Value,
    /// How long the request waits before it is denied (milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeout_ms: Option<u64>,
    /// Who may decide (the tool's `approval.by`).
    #[serde(default)]
    pub approver: Approver,
    /// Stamped by the queue when the job parks (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
}

/// A parked call as stored by any version: today's names, or an approval
/// request's `call` and a crash park's `tool_name`, without `kind`. Its
/// schema is what a `ParkedCall` reads (schemars takes serde's `from`).
#[derive(Deserialize, JsonSchema)]
#[schemars(transform = old_names)]
struct StoredParkedCall {
    #[serde(default)]
    kind: Option<ParkedKind>,
    #[serde(default)]
    scope: String,
    #[serde(default)]
    bundle: Option<String>,
    turn: u32,
    #[serde(default)]
    position: Option<usize>,
    #[serde(alias = "call")]
    call_id: String,
    #[serde(alias = "tool_name")]
    tool: String,
    #[serde(default)]
    arguments: Value,
    effect: String,
    #[serde(default)]
    idempotency_key: String,
    #[serde(flatten)]
    approval: Option<ApprovalTerms>,
    #[serde(default)]
    decide: Option<String>,
    #[serde(default)]
    not_by: Option<String>,
    #[serde(default)]
    caller_calls: Vec<CallerCall>,
}

/// The names serde's `alias` also reads, which schemars does not see:
/// each field is named once, by either name (both is a duplicate field).
fn old_names(schema: &mut Schema) {
    for (name, alias) in [("call_id", "call"), ("tool", "tool_name")] {
        if let Some(Value::Object(properties)) = schema.get_mut("properties")
            && let Some(field) = properties.get(name).cloned()
        {
            properties.insert(alias.to_string(), field);
        }
        if let Some(Value::Array(required)) = schema.get_mut("required") {
            required.retain(|field| field != name);
        }
        let either = json!({"oneOf": [{"required": [name]}, {"required": [alias]}]});
        match schema.get_mut("allOf") {
            Some(Value::Array(all)) => all.push(either),
            _ => {
                schema.insert("allOf".into(), json!([either]));
            }
        }
    }
}

impl From<StoredParkedCall> for ParkedCall {
    fn from(stored: StoredParkedCall) -> Self {
        // Only approvals carry a digest: that tells old rows apart.
        let kind = stored.kind.unwrap_or(match stored.approval {
            Some(_) => ParkedKind::Approval,
            None => ParkedKind::UnknownOutcome,
        });
        Self {
            kind,
            scope: stored.scope,
            bundle: stored.bundle,
            turn: stored.turn,
            position: stored.position,
            call_id: stored.call_id,
            tool: stored.tool,
            arguments: stored.arguments,
            effect: stored.effect,
            idempotency_key: stored.idempotency_key,
            approval: stored.approval.filter(|_| kind == ParkedKind::Approval),
            decide: stored.decide,
            not_by: stored.not_by,
            caller_calls: stored.caller_calls,
        }
    }
}

impl ParkedCall {
    /// The digest a decision must name (empty for a call not awaiting one).
    pub fn digest(&self) -> &str {
        self.approval.as_ref().map_or("", |terms| &terms.digest)
    }

    /// The call as job `job`, submitted by key `owner`, shows it: an
    /// approval names where a decision goes and who may not decide.
    pub fn for_job(mut self, job: &str, owner: Option<&str>) -> Self {
        self.decide = (self.kind == ParkedKind::Approval)
            .then(|| format!("POST /v1/jobs/{job}/approvals/{}", self.call_id));
        self.not_by = self.barred(owner).map(str::to_string);
        self
    }

    /// The key that may not decide on this call of a job submitted by
    /// `owner` ([`Approver::barred`]), if any.
    pub fn barred<'a>(&self, owner: Option<&'a str>) -> Option<&'a str> {
        self.approval
            .as_ref()
            .and_then(|terms| terms.approver.barred(owner))
    }

    /// The other caller calls of the turn, said after the first.
    fn others(&self) -> String {
        match self.caller_calls.len() {
            0 | 1 => String::new(),
            n => format!(" (with {} more of the same turn)", n - 1),
        }
    }

    /// Which call it is: its tool, call id, turn and nested run.
    fn place(&self) -> String {
        let scope = if self.scope.is_empty() {
            String::new()
        } else {
            format!(", nested run {}", self.scope)
        };
        format!(
            "tool `{}` (call {} of turn {}{scope})",
            self.tool, self.call_id, self.turn
        )
    }

    /// What the job waits for and what to do, naming job `job` in the
    /// commands.
    pub fn describe(&self, job: &str) -> String {
        let place = self.place();
        match self.kind {
            ParkedKind::Approval => format!(
                "{place} waits for a person's decision before it runs: `structured-agents approve {job} {call}`, `structured-agents deny {job} {call} --reason R`, or POST /v1/jobs/{job}/approvals/{call}",
                call = self.call_id
            ),
            ParkedKind::UnknownOutcome => format!(
                "{place} was started by an earlier attempt and has no recorded result; its effect is `{}`, so it is not run again on its own: `structured-agents resolve {job} --retry`, `--skip RESULT` or `--fail`",
                self.effect
            ),
            ParkedKind::CallerCall => format!(
                "{place} is a tool of the caller's{}: the client runs it and sends its output (`function_call_output` with previous_response_id resp_{job}, or a `tool` message), which resumes the job; `structured-agents resolve {job} --fail` ends it",
                self.others()
            ),
        }
    }
}

/// Without a job id (a local run): what the call waits for.
impl std::fmt::Display for ParkedCall {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let place = self.place();
        match self.kind {
            ParkedKind::Approval => write!(f, "{place} needs approval before it runs"),
            ParkedKind::UnknownOutcome => write!(
                f,
                "{place} was started by an earlier attempt and has no recorded result; its effect is `{}`, so it is not run again on its own: resolve the job with retry, skip (supplying the result) or fail",
                self.effect
            ),
            ParkedKind::CallerCall => write!(
                f,
                "{place} is a tool of the caller's{}: the client runs it and sends its output back",
                self.others()
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn old_approval_requests_and_crash_parks_read_into_one_shape() {
        let approval: ParkedCall = serde_json::from_value(json!({
            "scope": "", "turn": 2, "position": 0, "call": "call_7", "tool": "refund",
            "arguments": {"amount": 5}, "digest": "sha256:ab", "parameters": {"type": "object"},
            "effect": "unsafe", "idempotency_key": "j:2:0", "timeout_ms": 60000,
            "requested_at": "2026-01-01T00:00:00.000Z"
        }))
        .unwrap();
        assert_eq!(approval.kind, ParkedKind::Approval);
        assert_eq!(
            (approval.call_id.as_str(), approval.tool.as_str()),
            ("call_7", "refund")
        );
        assert_eq!(approval.digest(), "sha256:ab");
        let crash: ParkedCall = serde_json::from_value(json!({
            "scope": "", "turn": 1, "position": 1, "call_id": "c1", "tool_name": "charge",
            "arguments": {}, "effect": "unsafe", "idempotency_key": "j:1:1"
        }))
        .unwrap();
        assert_eq!(crash.kind, ParkedKind::UnknownOutcome);
        assert_eq!(
            (crash.call_id.as_str(), crash.tool.as_str()),
            ("c1", "charge")
        );
        assert!(crash.approval.is_none());
    }

    #[test]
    fn both_kinds_serve_the_same_common_fields() {
        let crash: ParkedCall = serde_json::from_value(json!({
            "scope": "", "turn": 1, "call_id": "c1", "tool_name": "charge",
            "arguments": {}, "effect": "unsafe", "idempotency_key": "k"
        }))
        .unwrap();
        let approval: ParkedCall = serde_json::from_value(json!({
            "kind": "approval", "scope": "", "turn": 1, "position": 0, "call_id": "c2",
            "tool": "refund", "arguments": {}, "digest": "sha256:00", "effect": "unsafe",
            "idempotency_key": "k"
        }))
        .unwrap();
        let common = [
            "kind",
            "scope",
            "turn",
            "position",
            "call_id",
            "tool",
            "arguments",
            "effect",
            "idempotency_key",
        ];
        for parked in [&crash, &approval] {
            let served = serde_json::to_value(parked.clone().for_job("j1", Some("ops"))).unwrap();
            for key in common {
                assert!(served.get(key).is_some(), "{key} missing in {served}");
            }
            assert!(served.get("call").is_none() && served.get("tool_name").is_none());
        }
        let served = serde_json::to_value(approval.for_job("j1", Some("ops"))).unwrap();
        assert_eq!(served["kind"], "approval");
        assert_eq!(served["digest"], "sha256:00");
        assert_eq!(served["decide"], "POST /v1/jobs/j1/approvals/c2");
        let served = serde_json::to_value(crash.for_job("j1", Some("ops"))).unwrap();
        assert_eq!(served["kind"], "unknown_outcome");
        assert!(served.get("decide").is_none() && served.get("digest").is_none());
        // Read back as served: the same call.
        let again: ParkedCall = serde_json::from_value(served).unwrap();
        assert_eq!(again.kind, ParkedKind::UnknownOutcome);
    }

    #[test]
    fn a_description_names_the_job_never_a_placeholder() {
        let parked: ParkedCall = serde_json::from_value(json!({
            "kind": "approval", "scope": "", "turn": 1, "position": 0, "call_id": "c2",
            "tool": "refund", "arguments": {}, "digest": "sha256:00", "effect": "unsafe",
            "idempotency_key": "k"
        }))
        .unwrap();
        let said = parked.describe("0190-job");
        assert!(
            said.contains("approve 0190-job c2") && !said.contains("JOB"),
            "{said}"
        );
        assert!(!parked.to_string().contains("JOB"));
    }
}
