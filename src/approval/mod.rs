//! Approvals: a person decides before some tool calls run. A tool's policy
//! says which calls need a decision; such a call is journaled with the
//! digest of its arguments and the job parks in `awaiting_approval`. A
//! decision (approve, deny with a reason, or edit the arguments) is bound to
//! that digest, journaled before the run acts on it, and consumed once: the
//! resumed run finds it in the journal.
//!
//! This module is a seam like the journal's: the kernel asks it whether a
//! call needs approval and what a recorded decision says; the queue checks a
//! decision against the request it parked on. It knows neither.

use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

mod parked;

pub use parked::{ApprovalTerms, CallerCall, ParkedCall, ParkedKind};

/// Which calls of a tool need a person's decision.
#[derive(Clone, Default)]
pub enum ApprovalRule {
    /// None (the default).
    #[default]
    Never,
    /// Every call.
    Always,
    /// Calls for which a minijinja expression over `args` is true, e.g.
    /// `args.amount > 100`.
    When {
        source: String,
        expression: Arc<minijinja::Expression<'static, 'static>>,
    },
    /// Calls whose arguments match a JSON Schema.
    Matches {
        schema: Value,
        validator: Arc<jsonschema::Validator>,
    },
}

impl std::fmt::Debug for ApprovalRule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Never => f.write_str("never"),
            Self::Always => f.write_str("always"),
            Self::When { source, .. } => write!(f, "when {source:?}"),
            Self::Matches { schema, .. } => write!(f, "matches {schema}"),
        }
    }
}

/// A tool's approval rule and how long a request waits for a decision
/// before it is denied.
#[derive(Debug, Clone, Default)]
pub struct ApprovalPolicy {
    pub rule: ApprovalRule,
    pub timeout: Option<Duration>,
    /// Who may decide.
    pub approver: Approver,
}

impl ApprovalPolicy {
    /// The rule as the bundle states it (`always`, `when "args.amount >
    /// 100"`, `matches {…}`): what a bundle's tool shows and a parked
    /// request names.
    pub fn describe(&self) -> String {
        format!("{:?}", self.rule)
    }
}

/// Who may decide on a call: any key with the `approve` scope that may
/// operate on the job, or only one that did not submit it (four eyes).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum Approver {
    #[default]
    Anyone,
    /// Not the API key that submitted the job.
    Others,
}

impl Approver {
    /// The key that may not decide on a call of a job submitted by key
    /// `owner`: the submitter, when the tool wants four eyes. The one place
    /// the rule is written: the HTTP and MCP decisions refuse by it, and a
    /// job's `pending_call.not_by` (which the console draws) says it.
    pub fn barred(self, owner: Option<&str>) -> Option<&str> {
        match self {
            Self::Anyone => None,
            Self::Others => owner,
        }
    }
}

/// What a bundle says about approvals, as written (`approval:` on a tool or
/// at the top of the bundle).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(untagged)]
pub enum ApprovalSpec {
    /// `never` or `always`.
    Keyword(ApprovalKeyword),
    /// `{when: "args.amount > 100"}` or `{matches: <JSON Schema>}`, with an
    /// optional `timeout` ("1h") after which the call is denied.
    Rule(ApprovalRuleSpec),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalKeyword {
    Never,
    Always,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ApprovalRuleSpec {
    /// A minijinja expression over the call's arguments (`args`): the call
    /// needs approval when it is true.
    #[serde(default)]
    pub when: Option<String>,
    /// A JSON Schema: the call needs approval when its arguments match.
    #[serde(default)]
    #[schemars(with = "Option<Value>")]
    pub matches: Option<Value>,
    /// `always` without `when` or `matches`: every call.
    #[serde(default)]
    pub always: bool,
    /// How long a request waits before it is denied ("30m"); none: forever.
    #[serde(default)]
    pub timeout: Option<crate::duration::HumanDuration>,
    /// Who may decide: `anyone` (default) with the `approve` scope, or
    /// `others`: not the API key that submitted the job.
    #[serde(default)]
    pub by: Approver,
}

/// What is wrong with an `approval:` setting. The caller names where (the
/// bundle key, e.g. `tools.pay.approval`); each message says what to write.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApprovalSpecError {
    /// `matches` holds something that is no JSON Schema.
    #[error("matches is not a valid JSON Schema: {0}")]
    SchemaInvalid(String),
    /// `when` does not parse as a minijinja expression.
    #[error("when {expression:?} is not a valid expression: {detail}")]
    ExpressionInvalid { expression: String, detail: String },
    /// None, or more than one, of `when`, `matches` and `always` was given.
    #[error(
        "give exactly one of `when` (an expression), `matches` (a JSON Schema) or `always: true`"
    )]
    NotExactlyOneRule,
}

/// Why a call's arguments do not fit its tool's parameters.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ArgumentsError {
    /// The arguments are a JSON value other than an object.
    #[error("arguments must be a JSON object")]
    NotAnObject,
    /// The tool's own parameter schema is broken: the tool's author fixes it.
    #[error("the tool's parameter schema does not compile: {0}")]
    SchemaInvalid(String),
    /// The arguments break the schema: up to five violations, each with
    /// where in the arguments it is.
    #[error("{}", .0.join("; "))]
    Violations(Vec<String>),
}

impl ApprovalSpec {
    /// The policy this spec says, or what is wrong with it.
    pub fn compile(&self) -> Result<ApprovalPolicy, ApprovalSpecError> {
        let rule = match self {
            Self::Keyword(ApprovalKeyword::Never) => return Ok(ApprovalPolicy::default()),
            Self::Keyword(ApprovalKeyword::Always) => {
                return Ok(ApprovalPolicy {
                    rule: ApprovalRule::Always,
                    timeout: None,
                    approver: Approver::Anyone,
                });
            }
            Self::Rule(rule) => rule,
        };
        let timeout = rule.timeout.map(Duration::from);
        let compiled = match (&rule.when, &rule.matches, rule.always) {
            (Some(source), None, false) => compile_expression(source)?,
            (None, Some(schema), false) => ApprovalRule::Matches {
                validator: Arc::new(
                    jsonschema::validator_for(schema)
                        .map_err(|e| ApprovalSpecError::SchemaInvalid(e.to_string()))?,
                ),
                schema: schema.clone(),
            },
            (None, None, true) => ApprovalRule::Always,
            _ => return Err(ApprovalSpecError::NotExactlyOneRule),
        };
        Ok(ApprovalPolicy {
            rule: compiled,
            timeout,
            approver: rule.by,
        })
    }
}

/// The environment rules are compiled in: it only parses, and one shared
/// environment lets an expression live as long as its bundle.
static EXPRESSIONS: std::sync::LazyLock<minijinja::Environment<'static>> =
    std::sync::LazyLock::new(minijinja::Environment::new);

fn compile_expression(source: &str) -> Result<ApprovalRule, ApprovalSpecError> {
    let expression = EXPRESSIONS
        .compile_expression_owned(source.to_string())
        .map_err(|e| ApprovalSpecError::ExpressionInvalid {
            expression: source.to_string(),
            detail: e.to_string(),
        })?;
    Ok(ApprovalRule::When {
        source: source.to_string(),
        expression: Arc::new(expression),
    })
}

impl ApprovalPolicy {
    pub fn is_never(&self) -> bool {
        matches!(self.rule, ApprovalRule::Never)
    }

    /// Whether a call with `arguments` needs a decision. A rule that cannot
    /// be evaluated on these arguments asks for one: when in doubt, a person
    /// decides.
    pub fn needs_approval(&self, arguments: &Value) -> bool {
        match &self.rule {
            ApprovalRule::Never => false,
            ApprovalRule::Always => true,
            ApprovalRule::When { expression, .. } => expression
                .eval(minijinja::context! { args => minijinja::Value::from(minijinja::value::Serde(arguments)) })
                .map(|value| value.is_true())
                .unwrap_or(true),
            ApprovalRule::Matches { validator, .. } => validator.is_valid(arguments),
        }
    }
}

/// The digest a decision is bound to: SHA-256 of the arguments' JSON text.
pub fn digest(arguments: &Value) -> String {
    format!(
        "sha256:{}",
        crate::hex::sha256_hex(arguments.to_string().as_bytes())
    )
}

/// A person's answer to a request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
#[serde(tag = "decision", rename_all = "snake_case")]
pub enum Verdict {
    /// Run the call as the model asked.
    Approve,
    /// Do not run it; the model gets a tool error with the reason.
    Deny {
        #[serde(default)]
        reason: Option<String>,
    },
    /// Run it with these arguments instead (checked against the tool's schema).
    Edit { arguments: Value },
}

impl Verdict {
    pub fn kind(&self) -> &'static str {
        match self {
            Verdict::Approve => "approve",
            Verdict::Deny { .. } => "deny",
            Verdict::Edit { .. } => "edit",
        }
    }
}

/// A decision as submitted: the verdict and the digest of the arguments the
/// person saw (a decision for other arguments is stale). The digest is
/// required; it is optional here only so that its absence is refused by
/// `Decision::accept` with a message saying where to get it, rather than
/// by the JSON reader.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct Decision {
    #[serde(flatten)]
    pub verdict: Verdict,
    #[serde(default)]
    pub digest: Option<String>,
}

/// A decision as journaled: what was decided, on which arguments, by whom.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RecordedDecision {
    #[serde(flatten)]
    pub verdict: Verdict,
    /// The digest of the arguments the decision is bound to.
    pub digest: String,
    /// Who decided: an API key's name, `local`, or `timeout`.
    pub by: String,
    pub decided_at: String,
}

/// Why a decision cannot be taken.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DecisionError {
    #[error(
        "the decision on call {call} of tool `{tool}` has no `digest`: every decision names the digest of the arguments it decides on; read it from the job's approvals (GET /v1/jobs/<job id>/approvals, or `structured-agents approvals <job id>`) and send it with the decision"
    )]
    MissingDigest { call: String, tool: String },
    #[error(
        "the decision is for arguments with digest {given}, but call {call} of tool `{tool}` waits with arguments of digest {current}: fetch the pending approval again and decide on what it shows"
    )]
    Stale {
        call: String,
        tool: String,
        given: String,
        current: String,
    },
    #[error(
        "call {call} of tool `{tool}` does not wait for a decision (its job is parked on an unknown outcome): resolve the job instead (`structured-agents resolve`)"
    )]
    NotAwaited { call: String, tool: String },
    #[error(
        "the edited arguments for call {call} of tool `{tool}` do not match the tool's parameters: {detail}"
    )]
    BadEdit {
        call: String,
        tool: String,
        detail: ArgumentsError,
    },
}

impl Decision {
    /// Checks the decision against the parked call it answers, and
    /// records it.
    pub fn accept(
        self,
        request: &ParkedCall,
        by: &str,
        decided_at: String,
    ) -> Result<RecordedDecision, DecisionError> {
        let call = || request.call_id.clone();
        let tool = || request.tool.clone();
        let Some(given) = &self.digest else {
            return Err(DecisionError::MissingDigest {
                call: call(),
                tool: tool(),
            });
        };
        let Some(terms) = &request.approval else {
            return Err(DecisionError::NotAwaited {
                call: call(),
                tool: tool(),
            });
        };
        if given != &terms.digest {
            return Err(DecisionError::Stale {
                call: call(),
                tool: tool(),
                given: given.clone(),
                current: terms.digest.clone(),
            });
        }
        if let Verdict::Edit { arguments } = &self.verdict {
            check_arguments(&terms.parameters, arguments).map_err(|detail| {
                DecisionError::BadEdit {
                    call: call(),
                    tool: tool(),
                    detail,
                }
            })?;
        }
        Ok(RecordedDecision {
            verdict: self.verdict,
            digest: terms.digest.clone(),
            by: by.to_string(),
            decided_at,
        })
    }
}

pub(crate) fn check_arguments(parameters: &Value, arguments: &Value) -> Result<(), ArgumentsError> {
    if !arguments.is_object() {
        return Err(ArgumentsError::NotAnObject);
    }
    if parameters.is_null() {
        return Ok(());
    }
    let validator = jsonschema::validator_for(parameters)
        .map_err(|e| ArgumentsError::SchemaInvalid(e.to_string()))?;
    let errors: Vec<String> = validator
        .iter_errors(arguments)
        .map(|e| format!("{} at {}", e, e.instance_path()))
        .take(5)
        .collect();
    if errors.is_empty() {
        Ok(())
    } else {
        Err(ArgumentsError::Violations(errors))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn policy(yaml: Value) -> ApprovalPolicy {
        serde_json::from_value::<ApprovalSpec>(yaml)
            .unwrap()
            .compile()
            .unwrap()
    }

    #[test]
    fn four_eyes_bars_the_submitter_and_nobody_else() {
        assert_eq!(Approver::Others.barred(Some("ops")), Some("ops"));
        assert_eq!(Approver::Others.barred(None), None);
        assert_eq!(Approver::Anyone.barred(Some("ops")), None);
        let mut call = request();
        if let Some(terms) = call.approval.as_mut() {
            terms.approver = Approver::Others;
        }
        let served = call.for_job("j1", Some("ops"));
        assert_eq!(served.not_by.as_deref(), Some("ops"));
    }

    #[test]
    fn rules_decide_which_calls_need_approval() {
        assert!(!policy(json!("never")).needs_approval(&json!({})));
        assert!(policy(json!("always")).needs_approval(&json!({})));
        let when = policy(json!({"when": "args.amount > 100", "timeout": "5m"}));
        assert_eq!(when.timeout, Some(Duration::from_secs(300)));
        assert!(when.needs_approval(&json!({"amount": 101})));
        assert!(!when.needs_approval(&json!({"amount": 100})));
        let matches = policy(json!({"matches": {
            "type": "object", "properties": {"to": {"const": "offshore"}}, "required": ["to"]
        }}));
        assert!(matches.needs_approval(&json!({"to": "offshore"})));
        assert!(!matches.needs_approval(&json!({"to": "home"})));
    }

    #[test]
    fn a_rule_that_cannot_be_evaluated_asks_a_person() {
        let when = policy(json!({"when": "args.amount > 100"}));
        assert!(when.needs_approval(&json!({"amount": "lots"})));
    }

    #[test]
    fn bad_specs_say_what_is_wrong() {
        let spec = |v| serde_json::from_value::<ApprovalSpec>(v).unwrap().compile();
        let err = spec(json!({"when": "args.amount >"}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("not a valid expression"), "{err}");
        let err = spec(json!({"when": "true", "matches": {}}))
            .unwrap_err()
            .to_string();
        assert!(err.contains("exactly one"), "{err}");
        assert!(
            serde_json::from_value::<ApprovalSpec>(json!({"always": true, "timeout": "soon"}))
                .is_err()
        );
    }

    fn request() -> ParkedCall {
        let arguments = json!({"amount": 500});
        ParkedCall {
            kind: ParkedKind::Approval,
            scope: String::new(),
            bundle: None,
            turn: 1,
            position: Some(0),
            call_id: "call_1".into(),
            tool: "wire_money".into(),
            approval: Some(ApprovalTerms {
                digest: digest(&arguments),
                rule: None,
                parameters: json!({"type": "object", "properties": {"amount": {"type": "integer"}}, "required": ["amount"]}),
                timeout_ms: None,
                approver: Approver::Anyone,
                requested_at: None,
                expires_at: None,
            }),
            arguments,
            effect: "unsafe".into(),
            idempotency_key: "j:1:0".into(),
            decide: None,
            not_by: None,
            caller_calls: Vec::new(),
        }
    }

    #[test]
    fn decisions_are_bound_to_the_digest_and_edits_to_the_schema() {
        let request = request();
        let approve = Decision {
            verdict: Verdict::Approve,
            digest: Some(request.digest().to_string()),
        };
        let recorded = approve.accept(&request, "local", "t".into()).unwrap();
        assert_eq!(recorded.digest, request.digest());
        let stale = Decision {
            verdict: Verdict::Approve,
            digest: Some(digest(&json!({"amount": 5}))),
        };
        assert!(matches!(
            stale.accept(&request, "local", "t".into()),
            Err(DecisionError::Stale { .. })
        ));
        let bad_edit = Decision {
            verdict: Verdict::Edit {
                arguments: json!({"amount": "all"}),
            },
            digest: Some(request.digest().to_string()),
        };
        let err = bad_edit
            .accept(&request, "local", "t".into())
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("wire_money") && err.contains("amount"),
            "{err}"
        );
        let edit = Decision {
            verdict: Verdict::Edit {
                arguments: json!({"amount": 50}),
            },
            digest: Some(request.digest().to_string()),
        };
        assert!(edit.accept(&request, "local", "t".into()).is_ok());
    }

    #[test]
    fn a_decision_without_a_digest_is_refused_saying_where_to_get_one() {
        let request = request();
        let unbound = Decision {
            verdict: Verdict::Approve,
            digest: None,
        };
        let err = unbound.accept(&request, "local", "t".into()).unwrap_err();
        assert!(matches!(err, DecisionError::MissingDigest { .. }));
        let message = err.to_string();
        assert!(
            message.contains("`digest`")
                && message.contains("call_1")
                && message.contains("GET /v1/jobs/<job id>/approvals"),
            "{message}"
        );
    }

    #[test]
    fn decisions_read_as_the_api_writes_them() {
        let deny: Decision =
            serde_json::from_value(json!({"decision": "deny", "reason": "too much"})).unwrap();
        assert_eq!(
            deny.verdict,
            Verdict::Deny {
                reason: Some("too much".into())
            }
        );
        assert!(serde_json::from_value::<Decision>(json!({"decision": "maybe"})).is_err());
    }
}
