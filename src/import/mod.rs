//! The converter of bundles written for the Python agent kernel: its
//! `bundle.yaml` turned into this daemon's format, with a report of what
//! changed and what could not be carried over (`structured-agents import`).
//! It lives outside the core: only the CLI reaches it, and the loader knows
//! the original keys alone (`bundle::original`), to name them in a load
//! error.
//!
//! The original format (its `BundleManifest`): `name`, `version` (default
//! "1.0"), `model.plugin` / `model.adapter` / `model.grammar.{mode,
//! allow_parallel_calls, args_format}`, `initial_context.system_prompt` /
//! `initial_context.user_template` (default `{{ input }}`), `max_turns`
//! (default 20), `termination_tool` (default `submit_result`),
//! `tools[]` of `{name, registry (default grail), description,
//! inputs_override, context_providers}` and `registries` (default
//! `[grail]`; grail tools are `tools/<name>.pym` in the bundle).
//!
//! - `convert`: one file's text into the new file and its report;
//! - `dir`: a bundle directory converted in place or into a copy.

mod convert;
mod dir;
#[cfg(test)]
mod tests;

use std::path::PathBuf;

pub use convert::convert;
pub use dir::{Imported, ORIGINAL_BACKUP, Written, import_dir};

/// Where the original kernel's server was when the bundle does not say
/// (its `KernelConfig.base_url`, set in code): vLLM's default address.
pub const DEFAULT_ENDPOINT: &str = "http://localhost:8000/v1";

/// What the converter is told beyond the file: the original took the
/// server and (without `model.adapter`) the model name from code.
#[derive(Debug, Clone)]
pub struct ImportOptions {
    /// `model.endpoint` of the result.
    pub endpoint: String,
    /// `model.name` of the result; `model.adapter` when absent.
    pub model: Option<String>,
}

impl Default for ImportOptions {
    fn default() -> Self {
        Self {
            endpoint: DEFAULT_ENDPOINT.into(),
            model: None,
        }
    }
}

/// One line of the import report: an original key path (with its line in
/// the original file) and what became of it.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportItem {
    pub key: String,
    pub line: Option<usize>,
    pub note: String,
}

/// A converted bundle file and its report.
#[derive(Debug, Clone)]
pub struct Conversion {
    /// The new `bundle.yaml`.
    pub yaml: String,
    /// Keys carried over, each with what it became.
    pub changed: Vec<ReportItem>,
    /// Keys that have no equivalent here and were left out, each with why
    /// and what to do instead.
    pub not_converted: Vec<ReportItem>,
}

/// Why a bundle could not be converted at all.
#[derive(Debug, thiserror::Error)]
pub enum ImportError {
    #[error("{}: no bundle.yaml (or bundle.yml) in this directory: give the directory of an original bundle", .0.display())]
    NoBundleFile(PathBuf),
    #[error("{}: cannot read: {source}", file.display())]
    Read {
        file: PathBuf,
        source: std::io::Error,
    },
    #[error("{}{}: not valid YAML: {message}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Yaml {
        file: PathBuf,
        line: Option<usize>,
        message: String,
    },
    #[error("{}: the file is not a mapping of keys (an original bundle.yaml has `name`, `initial_context` and `tools`)", .0.display())]
    NotAMapping(PathBuf),
    #[error("{}: not an original bundle: it has none of the Python agent kernel's keys (`initial_context`, `max_turns`, `termination_tool`, `registries`, `tools[].registry`); `structured-agents validate` checks a bundle of this format", .0.display())]
    NotOriginal(PathBuf),
    #[error("{}{}: {key}: {message}", file.display(), line.map(|l| format!(":{l}")).unwrap_or_default())]
    Key {
        file: PathBuf,
        line: Option<usize>,
        key: String,
        message: String,
    },
    #[error("{}: cannot write: {source}", path.display())]
    Write {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{}: already exists: the original file is kept under this name when converting in place; move it away, or convert with --out DIR", .0.display())]
    BackupExists(PathBuf),
    #[error("{}: is not empty: give --out a new or empty directory", .0.display())]
    OutNotEmpty(PathBuf),
    #[error("{}: is inside the bundle being converted ({}): give --out a directory outside it", out.display(), dir.display())]
    OutInside { out: PathBuf, dir: PathBuf },
    #[error("the converted bundle cannot be written as YAML: {0}")]
    Serialize(String),
}
