//! One loaded plugin library: its exported functions, resolved once, and safe
//! wrappers around them. The only place the daemon crosses the C ABI.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_void};
use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use serde_json::Value;
use structured_agents_plugin_sdk::ABI_VERSION;

use super::pool::{CallPool, PLUGIN_CALL_THREADS, PoolError};
use super::{Manifest, PluginInfo, PluginLoadError};

type AbiVersionFn = unsafe extern "C" fn() -> u32;
type ManifestFn = unsafe extern "C" fn() -> *const c_char;
type InitFn = unsafe extern "C" fn(*const c_char) -> *mut c_void;
type InvokeFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> *mut c_char;
type OnEventFn = unsafe extern "C" fn(*mut c_void, *const c_char) -> i32;
type FreeFn = unsafe extern "C" fn(*mut c_char);
type ShutdownFn = unsafe extern "C" fn(*mut c_void);

/// A plugin library that stays loaded for the life of the process.
pub struct Plugin {
    pub info: PluginInfo,
    pub manifest: Manifest,
    init: InitFn,
    invoke: InvokeFn,
    on_event: OnEventFn,
    free: FreeFn,
    shutdown: ShutdownFn,
    /// `sa_model_call`, in a model plugin only.
    model_call: Option<InvokeFn>,
    /// `sa_history_select`, in a history plugin only.
    history_select: Option<InvokeFn>,
    /// The threads its tool and model calls run on, started at the first call.
    calls: OnceLock<CallPool>,
}

/// A plugin call that did not produce a result.
#[derive(Debug, thiserror::Error)]
pub enum PluginCallError {
    #[error(
        "plugin {0} could not create an instance (sa_plugin_init returned null; check its config)"
    )]
    Init(String),
    #[error("plugin {plugin} returned an unreadable result: {detail}")]
    Protocol { plugin: String, detail: String },
}

/// An instance created by `sa_plugin_init`, shut down on drop.
pub struct Instance {
    handle: *mut c_void,
    shutdown: ShutdownFn,
}

// SAFETY: the SDK's instances are immutable after init (tool plugins) or
// guarded by a mutex inside the plugin (observers), so they may be used from
// any thread; the daemon serializes observer calls anyway.
unsafe impl Send for Instance {}
// SAFETY: see above.
unsafe impl Sync for Instance {}

impl Drop for Instance {
    fn drop(&mut self) {
        // SAFETY: the handle came from this library's sa_plugin_init and is dropped once.
        unsafe { (self.shutdown)(self.handle) }
    }
}

fn symbol<T: Copy>(
    lib: &libloading::os::unix::Library,
    name: &[u8],
    file: &Path,
) -> Result<T, PluginLoadError> {
    // SAFETY: the symbol types match the SDK's ABI for this ABI version (checked first).
    unsafe { lib.get::<T>(name) }
        .map(|s| *s)
        .map_err(|e| PluginLoadError::Load {
            file: file.to_path_buf(),
            detail: format!(
                "missing export {}: {e} (is this a structured-agents plugin?)",
                String::from_utf8_lossy(name)
            ),
        })
}

/// The library's manifest, read from `sa_plugin_manifest`.
fn read_manifest(
    lib: &libloading::os::unix::Library,
    file: &Path,
) -> Result<Manifest, PluginLoadError> {
    let manifest_fn: ManifestFn = symbol(lib, b"sa_plugin_manifest", file)?;
    // SAFETY: the manifest is a static NUL-terminated string owned by the plugin.
    let raw = unsafe { manifest_fn() };
    if raw.is_null() {
        return Err(PluginLoadError::Load {
            file: file.to_path_buf(),
            detail: "sa_plugin_manifest returned null".into(),
        });
    }
    // SAFETY: non-null and NUL-terminated per the ABI.
    let text = unsafe { CStr::from_ptr(raw) }
        .to_string_lossy()
        .into_owned();
    serde_json::from_str(&text).map_err(|e| PluginLoadError::Load {
        file: file.to_path_buf(),
        detail: format!("invalid manifest: {e}"),
    })
}

/// The entry points of the manifest's kind: `sa_model_call` in a model
/// plugin, `sa_history_select` in a history plugin.
fn kind_entry_points(
    lib: &libloading::os::unix::Library,
    manifest: &Manifest,
    file: &Path,
) -> Result<(Option<InvokeFn>, Option<InvokeFn>), PluginLoadError> {
    // Only a model plugin has (and must have) the model entry point: a
    // tool or observer library built before it existed loads as before.
    let model_call = if manifest.kind == "model" {
        if manifest.model.is_none() {
            return Err(PluginLoadError::Load {
                file: file.to_path_buf(),
                detail: "a model plugin whose manifest has no `model` section; rebuild it with export_model_plugin!".into(),
            });
        }
        Some(symbol(lib, b"sa_model_call", file)?)
    } else {
        None
    };
    // Likewise the history entry point, in a history plugin only.
    let history_select = if manifest.kind == "history" {
        Some(symbol(lib, b"sa_history_select", file)?)
    } else {
        None
    };
    Ok((model_call, history_select))
}

impl Plugin {
    /// Opens the content-addressed `copy` of `file` and checks its ABI.
    pub(super) fn open(
        file: &Path,
        copy: &Path,
        sha256: String,
    ) -> Result<Plugin, PluginLoadError> {
        let flags =
            libloading::os::unix::RTLD_NOW | libloading::os::unix::RTLD_LOCAL | libc::RTLD_NODELETE;
        // SAFETY: loading runs the library's initializers; plugins are trusted
        // code that passed the permission checks.
        let lib =
            unsafe { libloading::os::unix::Library::open(Some(copy), flags) }.map_err(|e| {
                PluginLoadError::Load {
                    file: file.to_path_buf(),
                    detail: format!("dlopen failed: {e}"),
                }
            })?;
        let abi: AbiVersionFn = symbol(&lib, b"sa_plugin_abi_version", file)?;
        // SAFETY: a plain function without arguments.
        let found = unsafe { abi() };
        if found != ABI_VERSION {
            std::mem::forget(lib);
            return Err(PluginLoadError::AbiMismatch {
                file: file.to_path_buf(),
                found,
                expected: ABI_VERSION,
            });
        }
        let manifest = read_manifest(&lib, file)?;
        let (model_call, history_select) = kind_entry_points(&lib, &manifest, file)?;
        let plugin = Plugin {
            info: PluginInfo {
                name: manifest.name.clone(),
                version: manifest.version.clone(),
                kind: manifest.kind.clone(),
                abi: found,
                file: file.to_path_buf(),
                sha256,
                tools: manifest.tools.iter().map(|t| t.name.clone()).collect(),
            },
            init: symbol(&lib, b"sa_plugin_init", file)?,
            invoke: symbol(&lib, b"sa_tool_invoke", file)?,
            on_event: symbol(&lib, b"sa_observer_on_event", file)?,
            free: symbol(&lib, b"sa_plugin_free", file)?,
            shutdown: symbol(&lib, b"sa_plugin_shutdown", file)?,
            model_call,
            history_select,
            calls: OnceLock::new(),
            manifest,
        };
        // Never dlclose: the function pointers above stay valid forever.
        std::mem::forget(lib);
        Ok(plugin)
    }

    /// Creates an instance with `config`. Blocking (runs plugin code).
    pub fn instantiate(&self, config: &Value) -> Result<Instance, PluginCallError> {
        let text = CString::new(super::config_text(config)).unwrap_or_default();
        // SAFETY: the string lives for the call; init follows the SDK ABI.
        let handle = unsafe { (self.init)(text.as_ptr()) };
        if handle.is_null() {
            return Err(PluginCallError::Init(self.info.name.clone()));
        }
        Ok(Instance {
            handle,
            shutdown: self.shutdown,
        })
    }

    /// Calls a tool. Blocking (runs plugin code): call it off the runtime threads.
    pub fn invoke(&self, instance: &Instance, call: &Value) -> Result<Value, PluginCallError> {
        let text = CString::new(call.to_string()).unwrap_or_default();
        // SAFETY: the handle belongs to this library; the string lives for the call.
        let out = unsafe { (self.invoke)(instance.handle, text.as_ptr()) };
        self.take_result(out, "sa_tool_invoke")
    }

    /// Runs `call`, one of the blocking exports ([`Plugin::invoke`],
    /// [`Plugin::call_model`], [`Plugin::select_history`]), on the plugin's
    /// own call threads (never the runtime's blocking pool); `timeout`
    /// covers waiting for a free thread and the call. A call that times out
    /// keeps its thread until it returns.
    pub async fn pooled(
        self: &Arc<Self>,
        call: fn(&Self, &Instance, &Value) -> Result<Value, PluginCallError>,
        instance: Arc<Instance>,
        request: Value,
        timeout: Duration,
    ) -> Result<Result<Value, PluginCallError>, PoolError> {
        let plugin = self.clone();
        self.pool()?
            .run(timeout, move || call(&plugin, &instance, &request))
            .await
    }

    /// Asks a model plugin `request` (`{op, input}`), answered `{"ok": …}`
    /// or `{"error": {kind, message}}`. Blocking (runs plugin code).
    pub fn call_model(
        &self,
        instance: &Instance,
        request: &Value,
    ) -> Result<Value, PluginCallError> {
        self.call_export(self.model_call, "model", "sa_model_call", instance, request)
    }

    /// Asks a history plugin which messages to send (`request` =
    /// `{messages, max_history_messages, model}`), answered `{"ok":
    /// {"indices": […]}}` or `{"error": {kind, message}}`. Blocking.
    pub fn select_history(
        &self,
        instance: &Instance,
        request: &Value,
    ) -> Result<Value, PluginCallError> {
        self.call_export(
            self.history_select,
            "history",
            "sa_history_select",
            instance,
            request,
        )
    }

    /// Calls `export` (named `name`, which only a `kind` plugin has) with
    /// `request`. Blocking (runs plugin code).
    fn call_export(
        &self,
        export: Option<InvokeFn>,
        kind: &str,
        name: &str,
        instance: &Instance,
        request: &Value,
    ) -> Result<Value, PluginCallError> {
        let Some(export) = export else {
            return Err(PluginCallError::Protocol {
                plugin: self.info.name.clone(),
                detail: format!("it is a {} plugin, not a {kind} plugin", self.info.kind),
            });
        };
        let text = CString::new(request.to_string()).unwrap_or_default();
        // SAFETY: the handle belongs to this library; the string lives for the call.
        let out = unsafe { export(instance.handle, text.as_ptr()) };
        self.take_result(out, name)
    }

    /// The plugin's call threads, started at the first call.
    fn pool(&self) -> Result<&CallPool, PoolError> {
        if let Some(pool) = self.calls.get() {
            return Ok(pool);
        }
        // Two first calls may race; the loser's pool is dropped and its
        // idle threads exit.
        let pool = CallPool::new(&self.info.name, PLUGIN_CALL_THREADS)?;
        let _ = self.calls.set(pool);
        self.calls.get().ok_or_else(|| PoolError::Lost {
            plugin: self.info.name.clone(),
        })
    }

    /// Reads and frees a JSON answer the plugin returned from `export`.
    fn take_result(&self, out: *mut c_char, export: &str) -> Result<Value, PluginCallError> {
        if out.is_null() {
            return Err(PluginCallError::Protocol {
                plugin: self.info.name.clone(),
                detail: format!("{export} returned null"),
            });
        }
        // SAFETY: non-null, NUL-terminated, allocated by the plugin.
        let result = unsafe { CStr::from_ptr(out) }
            .to_string_lossy()
            .into_owned();
        // SAFETY: the buffer came from this plugin and is freed once, by it.
        unsafe { (self.free)(out) };
        serde_json::from_str(&result).map_err(|e| PluginCallError::Protocol {
            plugin: self.info.name.clone(),
            detail: e.to_string(),
        })
    }

    /// Delivers an event to an observer instance: 0 ok, 1 error, 2 panic. Blocking.
    pub fn on_event(&self, instance: &Instance, event_json: &str) -> i32 {
        let Ok(text) = CString::new(event_json) else {
            return 1;
        };
        // SAFETY: the handle belongs to this library; the string lives for the call.
        unsafe { (self.on_event)(instance.handle, text.as_ptr()) }
    }
}
