//! Prompt templates: minijinja with strict undefined variables, compiled when
//! the bundle loads and rendered per job with `input` and the job's variables.

use minijinja::{Environment, UndefinedBehavior};
use serde_json::{Map, Value};

use super::schema::PromptsSection;
use crate::types::Message;

/// A template that does not compile or render.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("prompts.{key}: {message}")]
pub struct PromptError {
    /// `system` or `user`.
    pub key: &'static str,
    pub message: String,
}

/// The bundle's compiled prompts.
pub struct Prompts {
    env: Environment<'static>,
    has_system: bool,
}

impl Prompts {
    pub fn compile(section: &PromptsSection) -> Result<Self, PromptError> {
        let mut env = Environment::new();
        env.set_undefined_behavior(UndefinedBehavior::Strict);
        if let Some(system) = &section.system {
            env.add_template_owned("system", system.clone())
                .map_err(|e| PromptError {
                    key: "system",
                    message: describe(&e),
                })?;
        }
        env.add_template_owned("user", section.user.clone())
            .map_err(|e| PromptError {
                key: "user",
                message: describe(&e),
            })?;
        Ok(Self {
            env,
            has_system: section.system.is_some(),
        })
    }

    /// The variables the templates use besides `input`, in name order (an
    /// MCP client shows them as the bundle's prompt arguments).
    pub fn variables(&self) -> Vec<String> {
        let mut names: Vec<String> = ["system", "user"]
            .iter()
            .filter_map(|key| self.env.get_template(key).ok())
            .flat_map(|template| template.undeclared_variables(false))
            .filter(|name| name != "input")
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// The opening messages for a job.
    pub fn render(
        &self,
        input: &str,
        variables: &Map<String, Value>,
    ) -> Result<Vec<Message>, PromptError> {
        self.render_with(input, variables, Vec::new(), None)
    }

    /// The opening messages of a job that continues a conversation: the
    /// system prompt, the `earlier` turns, then the user prompt.
    pub fn render_continuing(
        &self,
        input: &str,
        variables: &Map<String, Value>,
        earlier: Vec<Message>,
    ) -> Result<Vec<Message>, PromptError> {
        self.render_with(input, variables, earlier, None)
    }

    /// The opening messages for a job that brings its own conversation
    /// (`/v1/chat/completions`): the system prompt, then `chat` instead of
    /// the user prompt.
    pub fn render_over(
        &self,
        input: &str,
        variables: &Map<String, Value>,
        chat: Vec<Message>,
    ) -> Result<Vec<Message>, PromptError> {
        self.render_with(input, variables, Vec::new(), Some(chat))
    }

    fn render_with(
        &self,
        input: &str,
        variables: &Map<String, Value>,
        earlier: Vec<Message>,
        chat: Option<Vec<Message>>,
    ) -> Result<Vec<Message>, PromptError> {
        let mut context = variables.clone();
        context.insert("input".into(), Value::String(input.to_string()));
        let context = minijinja::Value::from(minijinja::value::Serde(&context));
        let render = |key: &'static str| -> Result<String, PromptError> {
            let template = self.env.get_template(key).map_err(|e| PromptError {
                key,
                message: describe(&e),
            })?;
            template.render(&context).map_err(|e| PromptError {
                key,
                message: describe(&e),
            })
        };
        let mut messages = Vec::new();
        if self.has_system {
            messages.push(Message::system(render("system")?));
        }
        messages.extend(earlier);
        match chat {
            Some(chat) => messages.extend(chat),
            None => messages.push(Message::user(render("user")?)),
        }
        Ok(messages)
    }
}

fn describe(e: &minijinja::Error) -> String {
    let mut text = e.to_string();
    if e.kind() == minijinja::ErrorKind::UndefinedError {
        text.push_str(" (pass it with --var NAME=VALUE or the job's `variables`)");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn variables_are_what_the_templates_use_besides_input() {
        let prompts = Prompts::compile(&PromptsSection {
            system: Some("You greet {{ name }} in {{ lang }}.".into()),
            user: "{{ input }} {{ name }}".into(),
        })
        .unwrap();
        assert_eq!(prompts.variables(), ["lang", "name"]);
    }

    #[test]
    fn renders_input_and_variables_and_rejects_undefined() {
        let p = Prompts::compile(&PromptsSection {
            system: Some("You help {{ who }}.".into()),
            user: "{{ input }}!".into(),
        })
        .unwrap();
        let mut vars = Map::new();
        vars.insert("who".into(), Value::String("Ada".into()));
        let msgs = p.render("hi", &vars).unwrap();
        assert_eq!(msgs[0].content.as_deref(), Some("You help Ada."));
        assert_eq!(msgs[1].content.as_deref(), Some("hi!"));
        let err = p.render("hi", &Map::new()).unwrap_err();
        assert_eq!(err.key, "system");
        assert!(err.message.contains("undefined"), "{}", err.message);
    }

    #[test]
    fn syntax_errors_name_the_prompt() {
        let err = Prompts::compile(&PromptsSection {
            system: None,
            user: "{{ input ".into(),
        })
        .err()
        .unwrap();
        assert_eq!(err.key, "user");
    }
}
