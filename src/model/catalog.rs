//! The model catalog: built-in plugins by name, resolved for bundles.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{BUILTIN_PLUGINS, GrammarError, GrammarMode, ModelPlugin, builtin};
use crate::types::ToolSchema;

#[derive(Debug, thiserror::Error)]
pub enum ModelConfigError {
    #[error("unknown model plugin {name:?} (available: {available})")]
    Unknown { name: String, available: String },
}

#[derive(Clone, Default)]
pub struct ModelCatalog;

impl ModelCatalog {
    pub fn builtin() -> Self {
        Self
    }

    /// Built-ins plus the model configs in `dir`.
    pub fn load(_dir: &std::path::Path) -> Result<Self, ModelConfigError> {
        Ok(Self)
    }

    pub fn resolve(&self, name: &str) -> Result<ResolvedModel, ModelConfigError> {
        let plugin = builtin(name).ok_or_else(|| ModelConfigError::Unknown {
            name: name.to_string(),
            available: BUILTIN_PLUGINS.join(", "),
        })?;
        Ok(ResolvedModel {
            plugin,
            default_grammar: None,
            stop: Vec::new(),
        })
    }
}

#[derive(Clone)]
pub struct ResolvedModel {
    pub plugin: Arc<dyn ModelPlugin>,
    pub default_grammar: Option<GrammarMode>,
    pub stop: Vec<String>,
}

impl ResolvedModel {
    pub fn supports(&self, mode: GrammarMode) -> bool {
        self.plugin.grammar_modes().contains(&mode)
    }

    pub fn request_fragment(
        &self,
        mode: Option<GrammarMode>,
        tools: &[ToolSchema],
        allow_parallel_calls: bool,
    ) -> Result<Map<String, Value>, GrammarError> {
        match mode.or(self.default_grammar) {
            Some(mode) => self.plugin.grammar(mode, tools, allow_parallel_calls),
            None => Ok(Map::new()),
        }
    }
}
