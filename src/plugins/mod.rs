//! Dynamic plugins: loading tool, observer, model and history libraries through the
//! versioned C ABI of `plugins/sdk`, and the registry of what is loaded.
//!
//! Loading rules: a library that is group- or world-writable (or sits in such
//! a directory) is refused; every library is copied to a content-addressed
//! path before `dlopen` (dlopen returns the old handle for a reused path, so
//! a rebuilt library would otherwise not really load); libraries are opened
//! with RTLD_NOW | RTLD_LOCAL | RTLD_NODELETE and never closed (a Rust cdylib
//! with thread-locals must not be unloaded); the ABI version is checked first.
//!
//! This module must not know about bundles or the kernel.

mod library;
pub mod observer;
pub mod pool;

pub use library::{Instance, Plugin, PluginCallError};
pub use observer::PluginObserver;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::types::ToolSchema;

/// What a plugin says about itself.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub name: String,
    pub version: String,
    /// `tool`, `observer`, `model` or `history`.
    pub kind: String,
    #[serde(default)]
    pub tools: Vec<ToolSchema>,
    /// What a model plugin offers (`kind: model` only).
    #[serde(default)]
    pub model: Option<ModelManifest>,
}

/// A model plugin's part of its manifest.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct ModelManifest {
    /// Text that opens a tool call in the model's output.
    #[serde(default)]
    pub call_markers: Vec<String>,
    /// The operations `sa_model_call` answers: `parse_reply` always,
    /// `format_tools` and `declare_tools` when the plugin has them.
    #[serde(default)]
    pub ops: Vec<String>,
}

/// A loaded plugin, for listings.
#[derive(Debug, Clone, Serialize)]
pub struct PluginInfo {
    pub name: String,
    pub version: String,
    pub kind: String,
    pub abi: u32,
    pub file: PathBuf,
    pub sha256: String,
    pub tools: Vec<String>,
}

impl PluginInfo {
    /// How an error names the plugin: its name, then its file.
    pub fn label(&self) -> String {
        format!("{} ({})", self.name, self.file.display())
    }
}

/// Why a plugin was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum PluginLoadError {
    #[error(
        "{file}: is group- or world-writable (mode {mode:o}); anyone could replace the code the daemon runs. Fix: chmod go-w {file}"
    )]
    Writable { file: PathBuf, mode: u32 },
    #[error(
        "{file}: ABI version {found}, but this daemon speaks ABI {expected}; rebuild the plugin against structured-agents-plugin-sdk {expected}"
    )]
    AbiMismatch {
        file: PathBuf,
        found: u32,
        expected: u32,
    },
    #[error("{file}: {detail}")]
    Load { file: PathBuf, detail: String },
    #[error("{file}: plugin name {name:?} is already used by {other}")]
    Duplicate {
        file: PathBuf,
        name: String,
        other: PathBuf,
    },
}

/// Every plugin loaded from the plugins directory.
#[derive(Default)]
pub struct PluginRegistry {
    plugins: Vec<Arc<Plugin>>,
}

impl PluginRegistry {
    /// Loads every `lib*.so` in `dir`; one bad plugin does not stop the
    /// others. A missing directory is an empty registry. A library whose
    /// content `previous` already loaded from the same file is reused as it
    /// is (no second init, no second log line). Blocking.
    pub fn load_dir(
        dir: &Path,
        cache_dir: &Path,
        previous: &PluginRegistry,
    ) -> (PluginRegistry, Vec<PluginLoadError>) {
        let mut registry = PluginRegistry::default();
        let mut errors = Vec::new();
        let Ok(entries) = std::fs::read_dir(dir) else {
            return (registry, errors);
        };
        let mut files: Vec<PathBuf> = entries
            .filter_map(Result::ok)
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "so") && p.is_file())
            .collect();
        files.sort();
        if let Err(e) = check_not_writable(dir) {
            errors.push(e);
            return (registry, errors);
        }
        for file in files {
            let reused = previous.plugins.iter().find(|p| {
                p.info.file == file && file_sha256(&file).is_some_and(|sha| sha == p.info.sha256)
            });
            if let Some(same) = reused.filter(|_| check_not_writable(&file).is_ok()) {
                registry.plugins.push(same.clone());
                continue;
            }
            match load_file(&file, cache_dir) {
                Ok(plugin) => {
                    if let Some(other) = registry
                        .plugins
                        .iter()
                        .find(|p| p.info.name == plugin.info.name)
                    {
                        errors.push(PluginLoadError::Duplicate {
                            file,
                            name: plugin.info.name.clone(),
                            other: other.info.file.clone(),
                        });
                    } else {
                        tracing::info!(plugin = %plugin.info.name, version = %plugin.info.version, file = %file.display(), sha256 = %plugin.info.sha256, "plugin loaded");
                        registry.plugins.push(Arc::new(plugin));
                    }
                }
                Err(e) => {
                    tracing::error!(error = %e, "plugin refused");
                    errors.push(e);
                }
            }
        }
        (registry, errors)
    }

    pub fn list(&self) -> Vec<PluginInfo> {
        self.plugins.iter().map(|p| p.info.clone()).collect()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<Plugin>> {
        self.plugins.iter().find(|p| p.info.name == name)
    }

    pub fn names(&self) -> Vec<&str> {
        self.plugins.iter().map(|p| p.info.name.as_str()).collect()
    }

    /// The libraries of `kind` (model, history), each wrapped once as a
    /// `T`: one that `kept` still has for the same file content (its
    /// name and SHA-256) is reused as it is, the others go through `wrap`.
    /// A library named like one of `builtins` is refused into `errors`, as
    /// is one `wrap` refuses; `label` names the kind in those errors
    /// (`model plugin`), `builtin` the thing it would shadow (`a built-in
    /// model plugin`). Blocking when `wrap` runs plugin code.
    pub fn wrapped<T: ?Sized, E: std::fmt::Display>(
        &self,
        kind: &str,
        (label, builtin, builtins): (&str, &str, &[&str]),
        kept: impl Fn(&str, &str) -> Option<Arc<T>>,
        wrap: impl Fn(Arc<Plugin>) -> Result<Arc<T>, E>,
        errors: &mut Vec<String>,
    ) -> Vec<Arc<T>> {
        let mut out = Vec::new();
        for plugin in self.plugins.iter().filter(|p| p.info.kind == kind) {
            let info = &plugin.info;
            if builtins.contains(&info.name.as_str()) {
                errors.push(format!(
                    "{label} not loaded: {}: it is named {:?} like {builtin}; give it another name",
                    info.file.display(),
                    info.name
                ));
                continue;
            }
            match kept(&info.name, &info.sha256) {
                Some(kept) => out.push(kept),
                None => match wrap(plugin.clone()) {
                    Ok(wrapped) => out.push(wrapped),
                    Err(e) => errors.push(format!("{label} not loaded: {e}")),
                },
            }
        }
        out
    }
}

fn check_not_writable(path: &Path) -> Result<(), PluginLoadError> {
    let meta = std::fs::metadata(path).map_err(|e| PluginLoadError::Load {
        file: path.to_path_buf(),
        detail: e.to_string(),
    })?;
    let mode = meta.permissions().mode();
    if mode & 0o022 != 0 {
        return Err(PluginLoadError::Writable {
            file: path.to_path_buf(),
            mode: mode & 0o7777,
        });
    }
    Ok(())
}

/// Loads one library from its content-addressed copy.
pub fn load_file(file: &Path, cache_dir: &Path) -> Result<Plugin, PluginLoadError> {
    check_not_writable(file)?;
    let err = |detail: String| PluginLoadError::Load {
        file: file.to_path_buf(),
        detail,
    };
    let bytes = std::fs::read(file).map_err(|e| err(format!("cannot read: {e}")))?;
    let sha256 = crate::hex::sha256_hex(&bytes);
    std::fs::create_dir_all(cache_dir).map_err(|e| {
        err(format!(
            "cannot create plugin cache {}: {e}",
            cache_dir.display()
        ))
    })?;
    let _ = std::fs::set_permissions(cache_dir, std::fs::Permissions::from_mode(0o700));
    let copy = cache_dir.join(format!("{sha256}.so"));
    if !copy.exists() {
        let tmp = cache_dir.join(format!(".{sha256}.tmp"));
        std::fs::write(&tmp, &bytes)
            .map_err(|e| err(format!("cannot copy to {}: {e}", tmp.display())))?;
        let _ = std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o500));
        std::fs::rename(&tmp, &copy)
            .map_err(|e| err(format!("cannot copy to {}: {e}", copy.display())))?;
    }
    Plugin::open(file, &copy, sha256)
}

/// The content hash of a library file, if it can be read.
fn file_sha256(file: &Path) -> Option<String> {
    std::fs::read(file)
        .ok()
        .map(|bytes| crate::hex::sha256_hex(&bytes))
}

/// Serializes a plugin's init config.
fn config_text(config: &Value) -> String {
    if config.is_null() {
        "{}".to_string()
    } else {
        config.to_string()
    }
}
