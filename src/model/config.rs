//! Model-plugin configuration: `config/models/<name>.toml` files turned into
//! one validated, immutable [`ModelCatalog`]. Each file configures a plugin
//! (parser options, default grammar mode, stop sequences, an optional wire
//! key overriding the server family's) and may
//! declare named variants built on it. All loading lives here so that the
//! registry's hot reload swaps a whole catalog or nothing.
//!
//! It knows plugins through [`super::builtin`]'s names and their option
//! types, and the plugin libraries it is handed (the registry loads them);
//! it does not know about bundles or the registry.

use std::collections::BTreeMap;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::Deserialize;
use serde_json::{Map, Value, json};
use sha2::{Digest, Sha256};
use toml::Spanned;

use super::{
    BUILTIN_PLUGINS, FunctionGemmaOptions, FunctionGemmaPlugin, GrammarError, GrammarMode,
    ModelPlugin, OpenAiPlugin, QwenOptions, QwenPlugin, ServerKind, ToolChoice, WireKey,
};
use crate::types::ToolSchema;

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

/// The top level of a model config file.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFile {
    plugin: Option<Spanned<String>>,
    default_grammar: Option<Spanned<String>>,
    stop: Option<Vec<String>>,
    wire: Option<Spanned<String>>,
    parser: Option<toml::Table>,
    #[serde(default)]
    variants: BTreeMap<String, RawSettings>,
}

/// Settings a file and each of its variants may set.
#[derive(Deserialize, Default, Clone)]
#[serde(deny_unknown_fields)]
struct RawSettings {
    default_grammar: Option<Spanned<String>>,
    stop: Option<Vec<String>>,
    wire: Option<Spanned<String>>,
    parser: Option<toml::Table>,
}

struct Ctx<'a> {
    path: &'a Path,
    text: &'a str,
    /// The model plugin libraries loaded besides the built-ins.
    libraries: &'a [Arc<dyn ModelPlugin>],
}

impl Ctx<'_> {
    /// The plugin library named `name`, if one is loaded.
    fn library(&self, name: &str) -> Option<&Arc<dyn ModelPlugin>> {
        self.libraries.iter().find(|p| p.name() == name)
    }

    /// Where the table `[key]` (or an inline `key = {...}`) starts.
    fn header(&self, key: &str) -> Option<Range<usize>> {
        let last = key.rsplit('.').next().unwrap_or(key);
        self.text
            .find(&format!("[{key}]"))
            .or_else(|| self.text.find(&format!("{last} =")))
            .map(|i| i..i + key.len())
    }

    fn err(
        &self,
        span: Option<Range<usize>>,
        key: &str,
        message: impl Into<String>,
    ) -> ModelConfigError {
        let line = span.map_or(1, |s| {
            self.text[..s.start.min(self.text.len())]
                .matches('\n')
                .count()
                + 1
        });
        ModelConfigError::Invalid {
            path: self.path.to_path_buf(),
            line,
            key: key.to_string(),
            message: message.into(),
        }
    }
}

fn parse_file(
    path: &Path,
    text: &str,
    libraries: &[Arc<dyn ModelPlugin>],
) -> Result<Vec<ResolvedModel>, ModelConfigError> {
    let ctx = Ctx {
        path,
        text,
        libraries,
    };
    let stem = path
        .file_stem()
        .and_then(|s| s.to_str())
        .unwrap_or_default()
        .to_string();
    let raw: RawFile = toml::from_str(text).map_err(|e| {
        let key = e
            .span()
            .map(|s| {
                let start = s.start.min(text.len());
                let line_start = text[..start].rfind('\n').map_or(0, |i| i + 1);
                let line_end = text[start..].find('\n').map_or(text.len(), |i| start + i);
                text[line_start..line_end].to_string()
            })
            .map(|l| {
                l.split('=')
                    .next()
                    .unwrap_or_default()
                    .trim()
                    .trim_matches(['[', ']'])
                    .to_string()
            })
            .unwrap_or_default();
        ctx.err(e.span(), &key, e.message().to_string())
    })?;
    let plugin = match &raw.plugin {
        Some(p) => p.get_ref().clone(),
        None if BUILTIN_PLUGINS.contains(&stem.as_str()) || ctx.library(&stem).is_some() => {
            stem.clone()
        }
        None => {
            return Err(ctx.err(None, "plugin", format!(
                "file `{stem}.toml` is not named after a built-in plugin, so it must say which one it configures (plugin = one of: {})",
                BUILTIN_PLUGINS.join(", ")
            )));
        }
    };
    if !BUILTIN_PLUGINS.contains(&plugin.as_str()) && ctx.library(&plugin).is_none() {
        let span = raw.plugin.as_ref().map(Spanned::span);
        let valid: Vec<&str> = BUILTIN_PLUGINS
            .iter()
            .copied()
            .chain(libraries.iter().map(|p| p.name()))
            .collect();
        return Err(ctx.err(
            span,
            "plugin",
            format!(
                "unknown plugin `{plugin}` (valid: {}; a model plugin library counts once it is in the plugins directory)",
                valid.join(", ")
            ),
        ));
    }
    let settings = RawSettings {
        default_grammar: raw.default_grammar,
        stop: raw.stop,
        wire: raw.wire,
        parser: raw.parser,
    };
    let mut models = vec![build(&ctx, &stem, &plugin, &settings, "")?];
    for (name, variant) in &raw.variants {
        let merged = merge(&settings, variant);
        models.push(build(
            &ctx,
            name,
            &plugin,
            &merged,
            &format!("variants.{name}."),
        )?);
    }
    Ok(models)
}

/// `over` on top of `base`; parser tables merge key by key.
fn merge(base: &RawSettings, over: &RawSettings) -> RawSettings {
    let parser = match (&base.parser, &over.parser) {
        (Some(b), Some(o)) => {
            let mut table = b.clone();
            table.extend(o.clone());
            Some(table)
        }
        (b, o) => o.clone().or_else(|| b.clone()),
    };
    RawSettings {
        default_grammar: over
            .default_grammar
            .clone()
            .or_else(|| base.default_grammar.clone()),
        stop: over.stop.clone().or_else(|| base.stop.clone()),
        wire: over.wire.clone().or_else(|| base.wire.clone()),
        parser,
    }
}

fn enum_value<T: for<'de> Deserialize<'de>>(
    ctx: &Ctx,
    field: &Spanned<String>,
    key: &str,
    valid: &str,
) -> Result<T, ModelConfigError> {
    T::deserialize(toml::Value::String(field.get_ref().clone())).map_err(|_| {
        ctx.err(
            Some(field.span()),
            key,
            format!("`{}` is not one of: {valid}", field.get_ref()),
        )
    })
}

fn build(
    ctx: &Ctx,
    name: &str,
    plugin_name: &str,
    raw: &RawSettings,
    prefix: &str,
) -> Result<ResolvedModel, ModelConfigError> {
    let parser = raw.parser.clone().unwrap_or_default();
    let parser_span = ctx.header(&format!("{prefix}parser"));
    let parser_err = |e: toml::de::Error| {
        ctx.err(
            parser_span.clone(),
            &format!("{prefix}parser"),
            e.message().to_string(),
        )
    };
    let plugin: Arc<dyn ModelPlugin> = match plugin_name {
        "qwen" => Arc::new(QwenPlugin::new(
            QwenOptions::deserialize(toml::Value::Table(parser)).map_err(parser_err)?,
        )),
        "function_gemma" => Arc::new(FunctionGemmaPlugin::new(
            FunctionGemmaOptions::deserialize(toml::Value::Table(parser)).map_err(parser_err)?,
        )),
        other => {
            if let Some(key) = parser.keys().next() {
                return Err(ctx.err(
                    parser_span,
                    &format!("{prefix}parser.{key}"),
                    format!("plugin `{plugin_name}` has no parser options"),
                ));
            }
            match ctx.library(other) {
                Some(library) => library.clone(),
                None => Arc::new(OpenAiPlugin),
            }
        }
    };
    let wire: Option<WireKey> = match &raw.wire {
        Some(w) => Some(enum_value(
            ctx,
            w,
            &format!("{prefix}wire"),
            &WireKey::ALL.map(WireKey::as_str).join(", "),
        )?),
        None => None,
    };
    let default_grammar = match &raw.default_grammar {
        None => None,
        Some(g) if g.get_ref() == "none" => None,
        Some(g) => {
            let key = format!("{prefix}default_grammar");
            let mode: GrammarMode =
                enum_value(ctx, g, &key, "none, ebnf, structural_tag, json_schema")?;
            let supported: Vec<&str> = plugin.grammar_modes().iter().map(|m| m.as_str()).collect();
            if !supported.contains(&mode.as_str()) {
                return Err(ctx.err(
                    Some(g.span()),
                    &key,
                    format!(
                        "plugin `{plugin_name}` cannot build `{}` grammars (supported: {})",
                        mode.as_str(),
                        if supported.is_empty() {
                            "none".into()
                        } else {
                            supported.join(", ")
                        }
                    ),
                ));
            }
            if let Some(wire) = wire.filter(|w| !w.carries(mode)) {
                return Err(ctx.err(
                    Some(g.span()),
                    &key,
                    format!(
                        "wire `{}` cannot carry `{}` grammars",
                        wire.as_str(),
                        mode.as_str()
                    ),
                ));
            }
            Some(mode)
        }
    };
    Ok(ResolvedModel {
        name: name.to_string(),
        plugin,
        default_grammar,
        stop: raw.stop.clone().unwrap_or_default(),
        wire,
        source: Some(ctx.path.to_path_buf()),
    })
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests;
