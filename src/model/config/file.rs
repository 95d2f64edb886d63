//! One model config file read: its TOML (an error located by its line
//! and key), the plugin it configures, and its models — its own and each
//! variant's on top of it — each with its plugin's parser options, its
//! wire and a default grammar the plugin can build and the wire carry.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::Path;
use std::sync::Arc;

use serde::Deserialize;
use toml::Spanned;

use super::{ModelConfigError, ResolvedModel};
use crate::model::{
    BUILTIN_PLUGINS, FunctionGemmaOptions, FunctionGemmaPlugin, GrammarMode, ModelPlugin,
    OpenAiPlugin, QwenOptions, QwenPlugin, WireKey,
};

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

/// The models one file configures: its own, named after the file, and one
/// per `[variants.NAME]`, each on top of the file's settings.
pub(super) fn parse_file(
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
    let raw = read_file(&ctx)?;
    let plugin = plugin_name(&ctx, &raw, &stem)?;
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

/// The file's TOML, an error naming the key on the line it points at.
fn read_file(ctx: &Ctx) -> Result<RawFile, ModelConfigError> {
    let text = ctx.text;
    toml::from_str(text).map_err(|e| {
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
    })
}

/// The plugin the file configures: its `plugin`, else the one it is named
/// after; a built-in one or a loaded library.
fn plugin_name(ctx: &Ctx, raw: &RawFile, stem: &str) -> Result<String, ModelConfigError> {
    let plugin = match &raw.plugin {
        Some(p) => p.get_ref().clone(),
        None if BUILTIN_PLUGINS.contains(&stem) || ctx.library(stem).is_some() => stem.to_string(),
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
            .chain(ctx.libraries.iter().map(|p| p.name()))
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
    Ok(plugin)
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

/// One model: its plugin with its parser options, its wire, its default
/// grammar (one the plugin can build and the wire can carry) and stops.
fn build(
    ctx: &Ctx,
    name: &str,
    plugin_name: &str,
    raw: &RawSettings,
    prefix: &str,
) -> Result<ResolvedModel, ModelConfigError> {
    let plugin = plugin_with_options(ctx, plugin_name, raw, prefix)?;
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
        Some(g) => Some(grammar_mode(
            ctx,
            g,
            prefix,
            plugin.as_ref(),
            plugin_name,
            wire,
        )?),
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

/// The plugin `plugin_name` names, built with the `parser` options (only
/// the built-in qwen and function_gemma take any): a built-in one, a
/// loaded library, else the OpenAI one.
fn plugin_with_options(
    ctx: &Ctx,
    plugin_name: &str,
    raw: &RawSettings,
    prefix: &str,
) -> Result<Arc<dyn ModelPlugin>, ModelConfigError> {
    let parser = raw.parser.clone().unwrap_or_default();
    let parser_span = ctx.header(&format!("{prefix}parser"));
    let parser_err = |e: toml::de::Error| {
        ctx.err(
            parser_span.clone(),
            &format!("{prefix}parser"),
            e.message().to_string(),
        )
    };
    Ok(match plugin_name {
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
    })
}

/// The `default_grammar` `g` names, refused when the plugin cannot build
/// it or the wire cannot carry it.
fn grammar_mode(
    ctx: &Ctx,
    g: &Spanned<String>,
    prefix: &str,
    plugin: &dyn ModelPlugin,
    plugin_name: &str,
    wire: Option<WireKey>,
) -> Result<GrammarMode, ModelConfigError> {
    let key = format!("{prefix}default_grammar");
    let mode: GrammarMode = enum_value(ctx, g, &key, "none, ebnf, structural_tag, json_schema")?;
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
    Ok(mode)
}
