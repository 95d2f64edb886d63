//! The subset of promptfoo's `promptfooconfig.yaml` read as cases, so a
//! team brings its suite: one prompt template, `tests` (and `defaultTest`)
//! with `vars`, `threshold` and `assert` of the types in [`ASSERTIONS`],
//! each possibly `not-`. Anything else that would change what is run or
//! graded is refused by name, never skipped.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::case::{EvalCase, SuiteFile, check_case};
use super::error::EvalError;
use super::grader::GraderSpec;

/// The assertion types read, as promptfoo spells them.
pub const ASSERTIONS: [&str; 9] = [
    "equals",
    "contains",
    "icontains",
    "regex",
    "is-json",
    "contains-json",
    "cost",
    "latency",
    "llm-rubric",
];

/// Top-level keys that do not change what is run or graded (the daemon's
/// bundle is the provider).
const IGNORED_KEYS: [&str; 7] = [
    "description",
    "providers",
    "outputPath",
    "sharing",
    "env",
    "tags",
    "writeLatestResults",
];

/// The cases of a promptfoo config.
pub(super) fn cases(path: &Path, text: &str, file: &SuiteFile) -> Result<Vec<EvalCase>, EvalError> {
    let reader = Reader { path, file };
    let config: Map<String, Value> = serde_saphyr::from_str(text)
        .map_err(|e| reader.suite(format!("is not a YAML mapping: {e}")))?;
    if let Some(key) = config.keys().find(|k| {
        !IGNORED_KEYS.contains(&k.as_str())
            && !["prompts", "tests", "defaultTest"].contains(&k.as_str())
    }) {
        return Err(reader.unsupported(
            format!("top-level `{key}`"),
            "it would change what runs; remove it",
        ));
    }
    let prompt = reader.prompt(config.get("prompts"))?;
    let default = match config.get("defaultTest") {
        Some(test) => reader.test_fields(test, "defaultTest")?,
        None => TestFields::default(),
    };
    let tests = match config.get("tests") {
        Some(Value::Array(tests)) => tests,
        Some(Value::String(_)) => {
            return Err(reader.unsupported(
                "`tests` from a file".into(),
                "write the tests into the config",
            ));
        }
        _ => return Err(reader.suite("has no `tests` list".into())),
    };
    tests
        .iter()
        .enumerate()
        .map(|(index, test)| reader.case(index, test, &prompt, &default))
        .collect()
}

struct Reader<'a> {
    path: &'a Path,
    file: &'a SuiteFile,
}

/// What a test (or `defaultTest`) says.
#[derive(Default)]
struct TestFields {
    description: Option<String>,
    vars: Map<String, Value>,
    asserts: Vec<Value>,
    threshold: Option<f64>,
}

impl Reader<'_> {
    fn suite(&self, message: String) -> EvalError {
        EvalError::Suite {
            path: self.path.to_path_buf(),
            message,
        }
    }

    fn unsupported(&self, what: String, why: &str) -> EvalError {
        EvalError::Unsupported {
            path: self.path.to_path_buf(),
            what,
            why: why.to_string(),
        }
    }

    /// The one prompt template.
    fn prompt(&self, prompts: Option<&Value>) -> Result<String, EvalError> {
        let prompt = match prompts {
            Some(Value::String(prompt)) => prompt,
            Some(Value::Array(list)) if list.len() == 1 => match &list[0] {
                Value::String(prompt) => prompt,
                _ => {
                    return Err(self.unsupported(
                        "a prompt that is not text".into(),
                        "write the prompt as text",
                    ));
                }
            },
            Some(Value::Array(list)) if list.len() > 1 => {
                return Err(self.unsupported(
                    format!("{} prompts", list.len()),
                    "the bundle is the prompt: keep one template for the user's message",
                ));
            }
            _ => {
                return Err(self.suite(
                    "has no `prompts` template: give one, e.g. `prompts: ['{{question}}']`".into(),
                ));
            }
        };
        if prompt.starts_with("file://") {
            return Err(self.unsupported(
                "a prompt from a file".into(),
                "write the template into the config",
            ));
        }
        Ok(prompt.clone())
    }

    fn test_fields(&self, test: &Value, at: &str) -> Result<TestFields, EvalError> {
        let Value::Object(test) = test else {
            return Err(self.suite(format!("{at} is not a mapping")));
        };
        let mut fields = TestFields::default();
        for (key, value) in test {
            match (key.as_str(), value) {
                ("description", Value::String(text)) => fields.description = Some(text.clone()),
                ("vars", Value::Object(vars)) => fields.vars = self.vars(vars, at)?,
                ("assert", Value::Array(asserts)) => fields.asserts = asserts.clone(),
                ("threshold", Value::Number(n)) => fields.threshold = n.as_f64(),
                ("metadata", _) => {}
                ("description" | "vars" | "assert" | "threshold", _) => {
                    return Err(self.suite(format!(
                        "{at}: `{key}` is {value}, not what promptfoo takes there"
                    )));
                }
                _ => {
                    return Err(self.unsupported(
                        format!("`{key}` in {at}"),
                        "it would change what runs; remove it",
                    ));
                }
            }
        }
        Ok(fields)
    }

    fn vars(&self, vars: &Map<String, Value>, at: &str) -> Result<Map<String, Value>, EvalError> {
        for (name, value) in vars {
            match value {
                Value::Array(_) => {
                    return Err(self.unsupported(
                        format!("the list in {at}'s var `{name}`"),
                        "promptfoo runs one test per item; write the tests out",
                    ));
                }
                Value::String(text) if text.starts_with("file://") => {
                    return Err(self.unsupported(
                        format!("{at}'s var `{name}` from a file"),
                        "write the value in",
                    ));
                }
                _ => {}
            }
        }
        Ok(vars.clone())
    }

    fn case(
        &self,
        index: usize,
        test: &Value,
        prompt: &str,
        default: &TestFields,
    ) -> Result<EvalCase, EvalError> {
        let at = format!("tests[{index}]");
        let own = self.test_fields(test, &at)?;
        let mut vars = default.vars.clone();
        vars.extend(own.vars);
        let render = |template: &str, what: &str| {
            minijinja::Environment::new()
                .render_str(
                    template,
                    minijinja::Value::from(minijinja::value::Serde(&vars)),
                )
                .map_err(|e| {
                    self.suite(format!(
                        "{at}: the {what} does not render with its vars: {e}"
                    ))
                })
        };
        let mut graders = Vec::new();
        for (i, assert) in default.asserts.iter().chain(&own.asserts).enumerate() {
            graders.push(self.grader(assert, &format!("{at}.assert[{i}]"), &render)?);
        }
        let case = EvalCase {
            id: own
                .description
                .unwrap_or_else(|| format!("promptfoo:{}", index + 1)),
            input: render(prompt, "prompt")?,
            variables: vars.clone(),
            messages: None,
            expected: Map::new(),
            tags: Vec::new(),
            // suite.yaml's graders grade every case, as they do JSONL's.
            graders: self.file.graders.iter().cloned().chain(graders).collect(),
            threshold: own.threshold.or(default.threshold).or(self.file.threshold),
            tool_results: self.file.tool_results_with(Default::default()),
        };
        check_case(&case).map_err(|problem| self.suite(format!("{at}: {problem}")))?;
        Ok(case)
    }

    /// One assertion as a grader.
    fn grader(
        &self,
        assert: &Value,
        at: &str,
        render: &dyn Fn(&str, &str) -> Result<String, EvalError>,
    ) -> Result<GraderSpec, EvalError> {
        let Value::Object(assert) = assert else {
            return Err(self.suite(format!("{at} is not a mapping")));
        };
        if let Some(key) = assert
            .keys()
            .find(|k| !["type", "value", "threshold", "weight", "metric"].contains(&k.as_str()))
        {
            return Err(self.unsupported(
                format!("`{key}` in {at}"),
                "it changes how the assertion grades",
            ));
        }
        let kind = assert
            .get("type")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let (not, base) = match kind.strip_prefix("not-") {
            Some(base) => (true, base),
            None => (false, kind),
        };
        if !ASSERTIONS.contains(&base) {
            return Err(self.unsupported(
                format!("the assertion type `{kind}` in {at}"),
                &format!(
                    "the types read are {} (each also as `not-…`)",
                    ASSERTIONS.join(", ")
                ),
            ));
        }
        let value = match assert.get("value") {
            Some(Value::String(text)) => Some(Value::String(render(text, "assertion's value")?)),
            other => other.cloned(),
        };
        let threshold = assert.get("threshold").and_then(Value::as_f64);
        let needs_threshold =
            || self.suite(format!("{at}: a `{base}` assertion needs `threshold`"));
        let mut spec = match base {
            "equals" => json!({"type": "equals", "value": value}),
            "contains" | "icontains" | "regex" => {
                json!({"type": base, "value": value.map(text_of)})
            }
            "is-json" => json!({"type": "is_json", "schema": value}),
            "contains-json" => json!({"type": "contains_json", "schema": value}),
            "cost" => {
                json!({"type": "limits", "max_cost_usd": threshold.ok_or_else(needs_threshold)?})
            }
            "latency" => {
                let ms = threshold.ok_or_else(needs_threshold)?;
                json!({"type": "limits", "max_duration": format!("{}ms", ms.max(0.0).round() as u64)})
            }
            _ => self.judge(value, threshold, at)?,
        };
        spec["name"] = json!(kind);
        spec["not"] = json!(not);
        if let Some(weight) = assert.get("weight") {
            spec["weight"] = weight.clone();
        }
        serde_json::from_value(spec).map_err(|e| self.suite(format!("{at}: {e}")))
    }

    /// `llm-rubric`, graded by the suite's judge bundle.
    fn judge(
        &self,
        rubric: Option<Value>,
        threshold: Option<f64>,
        at: &str,
    ) -> Result<Value, EvalError> {
        let Some(bundle) = &self.file.judge else {
            return Err(self.suite(format!(
                "{at}: an `llm-rubric` assertion needs a judge bundle: set `judge: BUNDLE` in evals/suite.yaml"
            )));
        };
        let rubric = rubric
            .map(text_of)
            .ok_or_else(|| self.suite(format!("{at}: `llm-rubric` needs `value`")))?;
        Ok(
            json!({"type": "judge", "bundle": bundle, "rubric": rubric, "pass_score": threshold.unwrap_or(0.5)}),
        )
    }
}

/// A value as promptfoo compares it as text.
fn text_of(value: Value) -> String {
    match value {
        Value::String(text) => text,
        other => other.to_string(),
    }
}
