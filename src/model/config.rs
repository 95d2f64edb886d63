//! Model-plugin configuration: `config/models/<name>.toml` files turned into
//! one validated, immutable [`ModelCatalog`]. Each file configures a plugin
//! (parser options, default grammar mode, stop sequences, an optional wire
//! key overriding the server family's) and may
//! declare named variants built on it. All loading lives here so that the
//! registry's hot reload swaps a whole catalog or nothing.
//!
//! It knows plugins through [`super::builtin`]'s names and their option
//! types, and the plugin libraries it is handed (the registry loads them);
//! it does not know about bundles or the registry. Reading one file is
//! `config/file.rs`'s.

use std::collections::BTreeMap;
use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};

use super::{
    BUILTIN_PLUGINS, GrammarError, GrammarMode, ModelPlugin, ServerKind, ToolChoice, WireKey,
};
use crate::types::ToolSchema;

mod file;

use file::parse_file;

/// A model configuration that could not be loaded. Every variant names the
/// file and, where there is one, the line and key.
#[derive(Debug, thiserror::Error)]
pub enum ModelConfigError {
    #[error("cannot read model config {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{path}:{line}: key `{key}`: {message}")]
    Invalid {
        path: PathBuf,
        line: usize,
        key: String,
        message: String,
    },
    #[error(
        "model `{name}` is defined twice: in {first} and in {second} (model and variant names share one namespace)"
    )]
    Duplicate {
        name: String,
        first: PathBuf,
        second: PathBuf,
    },
    #[error(
        "unknown model `{name}` (valid: {valid}); define it in the models directory as `{name}.toml` or as a variant"
    )]
    UnknownModel { name: String, valid: String },
}

/// One model configuration, ready to shape requests.
#[derive(Clone)]
pub struct ResolvedModel {
    /// The name a bundle's `model.plugin` uses (a plugin, a file or a variant).
    pub name: String,
    pub plugin: Arc<dyn ModelPlugin>,
    pub default_grammar: Option<GrammarMode>,
    pub stop: Vec<String>,
    /// Where grammars go when set; otherwise the endpoint's server family decides.
    pub wire: Option<WireKey>,
    /// The file it came from; `None` for built-in defaults.
    pub source: Option<PathBuf>,
}

impl fmt::Debug for ResolvedModel {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResolvedModel")
            .field("name", &self.name)
            .field("plugin", &self.plugin.name())
            .field("default_grammar", &self.default_grammar)
            .field("stop", &self.stop)
            .field("wire", &self.wire)
            .field("source", &self.source)
            .finish()
    }
}

impl ResolvedModel {
    /// Whether this model can send grammars of `mode` on `wire`.
    pub fn supports(&self, mode: GrammarMode, wire: WireKey) -> bool {
        self.plugin.grammar_modes().contains(&mode) && wire.carries(mode)
    }

    /// The grammar mode a request uses: none when the turn allows no call;
    /// else `mode`, or the default when tools are offered (with none there
    /// is no call to constrain; an explicit mode always applies).
    pub fn effective_mode(
        &self,
        mode: Option<GrammarMode>,
        offered: &[ToolSchema],
        choice: &ToolChoice,
    ) -> Option<GrammarMode> {
        match choice {
            ToolChoice::None => None,
            _ => mode.or(self.default_grammar.filter(|_| !offered.is_empty())),
        }
    }

    /// The wire grammars go on for a server of `server`'s family.
    pub fn wire_for(&self, server: ServerKind) -> WireKey {
        self.wire.unwrap_or(server.default_wire())
    }

    /// The keys to merge into the request body: the grammar on `wire` (for
    /// `mode`, or the default mode when `None` and tools are offered), plus
    /// `stop` when configured. `choice` narrows the tools the grammar offers
    /// and whether a call is required; `none` sends no grammar. An
    /// unsupported mode is an error, never an unconstrained request.
    pub fn request_fragment(
        &self,
        wire: WireKey,
        mode: Option<GrammarMode>,
        tools: &[ToolSchema],
        choice: &ToolChoice,
        allow_parallel_calls: bool,
    ) -> Result<Map<String, Value>, GrammarError> {
        let offered = choice.offered(tools);
        let mut out = match self.effective_mode(mode, &offered, choice) {
            None => Map::new(),
            Some(mode) => {
                if !self.plugin.grammar_modes().contains(&mode) {
                    return Err(self.plugin.unsupported(mode));
                }
                let grammar = self.plugin.build_grammar(
                    mode,
                    &offered,
                    choice.rules(allow_parallel_calls),
                )?;
                wire.place(&self.name, &grammar)?
            }
        };
        if !self.stop.is_empty() {
            out.insert("stop".into(), json!(self.stop));
        }
        Ok(out)
    }
}

/// Every model configuration by name; immutable once built.
#[derive(Debug, Clone)]
pub struct ModelCatalog {
    models: BTreeMap<String, ResolvedModel>,
    /// SHA-256 over the files it was read from (path and bytes, in name
    /// order): what a reload compares to know the catalog is unchanged
    /// without reading the files twice.
    files_digest: [u8; 32],
}

impl ModelCatalog {
    /// The built-in plugins with their defaults: no grammar, no stop sequences.
    pub fn builtin() -> ModelCatalog {
        let models = BUILTIN_PLUGINS
            .iter()
            .filter_map(|name| {
                let plugin = super::builtin(name)?;
                Some((
                    name.to_string(),
                    ResolvedModel {
                        name: name.to_string(),
                        plugin,
                        default_grammar: None,
                        stop: Vec::new(),
                        wire: None,
                        source: None,
                    },
                ))
            })
            .collect();
        ModelCatalog {
            models,
            files_digest: Sha256::new().finalize().into(),
        }
    }

    /// Built-ins plus every `*.toml` in `dir` (a missing directory means
    /// built-ins only). A file named like a built-in replaces its defaults.
    pub fn load(dir: &Path) -> Result<ModelCatalog, ModelConfigError> {
        Self::load_with(dir, &[])
    }

    /// [`Self::load`] with plugin libraries besides the built-ins: each is
    /// a model by its name (no grammar, no stop sequences) and a plugin a
    /// file may configure (`plugin = "<name>"`). A library named like a
    /// built-in is not offered (the built-in keeps its name): the registry
    /// refuses it before.
    pub fn load_with(
        dir: &Path,
        libraries: &[Arc<dyn ModelPlugin>],
    ) -> Result<ModelCatalog, ModelConfigError> {
        let mut catalog = Self::builtin();
        let libraries: Vec<Arc<dyn ModelPlugin>> = libraries
            .iter()
            .filter(|p| !BUILTIN_PLUGINS.contains(&p.name()))
            .cloned()
            .collect();
        for plugin in &libraries {
            let name = plugin.name().to_string();
            catalog.models.insert(
                name.clone(),
                ResolvedModel {
                    name,
                    plugin: plugin.clone(),
                    default_grammar: None,
                    stop: Vec::new(),
                    wire: None,
                    source: None,
                },
            );
        }
        let entries = match std::fs::read_dir(dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(catalog),
            Err(source) => {
                return Err(ModelConfigError::Read {
                    path: dir.to_path_buf(),
                    source,
                });
            }
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        files.sort();
        let mut from_files: BTreeMap<String, PathBuf> = BTreeMap::new();
        let mut digest = Sha256::new();
        for path in files {
            let text = std::fs::read_to_string(&path).map_err(|source| ModelConfigError::Read {
                path: path.clone(),
                source,
            })?;
            digest.update(path.as_os_str().as_encoded_bytes());
            digest.update([0]);
            digest.update((text.len() as u64).to_le_bytes());
            digest.update(text.as_bytes());
            for model in parse_file(&path, &text, &libraries)? {
                if let Some(first) = from_files.insert(model.name.clone(), path.clone()) {
                    return Err(ModelConfigError::Duplicate {
                        name: model.name,
                        first,
                        second: path,
                    });
                }
                catalog.models.insert(model.name.clone(), model);
            }
        }
        catalog.files_digest = digest.finalize().into();
        Ok(catalog)
    }

    /// SHA-256 over the files the catalog was read from.
    pub fn files_digest(&self) -> &[u8; 32] {
        &self.files_digest
    }

    /// The model a bundle names.
    pub fn resolve(&self, name: &str) -> Result<ResolvedModel, ModelConfigError> {
        self.models
            .get(name)
            .cloned()
            .ok_or_else(|| ModelConfigError::UnknownModel {
                name: name.to_string(),
                valid: self.names().collect::<Vec<_>>().join(", "),
            })
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.models.keys().map(String::as_str)
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
