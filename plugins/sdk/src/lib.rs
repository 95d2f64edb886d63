//! The structured-agents plugin SDK: the versioned C ABI shared by the daemon
//! and plugins, and macros that export ordinary Rust functions safely.
//!
//! The ABI (all strings are NUL-terminated UTF-8 JSON):
//!
//! | export | |
//! |---|---|
//! | `sa_plugin_abi_version() -> u32` | must equal [`ABI_VERSION`] |
//! | `sa_plugin_manifest() -> *const c_char` | `{name, version, kind: "tool"\|"observer"\|"model", tools: [{name, description, parameters}], model?: {call_markers, ops}}`, owned by the plugin |
//! | `sa_plugin_init(config) -> *mut c_void` | an instance for a config object; null on failure |
//! | `sa_tool_invoke(handle, call) -> *mut c_char` | call = `{name, arguments, call_id}`; result = `{"ok": value}` or `{"error": {"kind": "retryable"\|"validation"\|"failed"\|"panic", "message"}}` |
//! | `sa_observer_on_event(handle, event) -> i32` | 0 ok, 1 error, 2 panic |
//! | `sa_model_call(handle, request) -> *mut c_char` | model plugins only: request = `{op, input}`; result = `{"ok": value}` or `{"error": {"kind": "failed"\|"panic", "message"}}` (the ops: [`ModelPluginDef`]) |
//! | `sa_history_select(handle, request) -> *mut c_char` | history plugins only: request = `{messages, max_history_messages, model}`; result = `{"ok": {"indices": [n]}}` or `{"error": {"kind": "failed"\|"panic", "message"}}` ([`HistoryPluginDef`]) |
//! | `sa_plugin_free(buf)` | frees a buffer this plugin returned |
//! | `sa_plugin_shutdown(handle)` | drops an instance |
//!
//! Each side frees what it allocated; no panic unwinds across the boundary
//! (every export runs inside `catch_unwind`). `sa_model_call` was added to
//! ABI 1 without changing its number: the daemon looks it up only in a
//! library whose manifest says `kind: "model"`, so tool and observer
//! plugins built before it load as they did. `sa_history_select` was added
//! the same way, looked up only for `kind: "history"`.
#![allow(unsafe_code)]

use std::ffi::{CStr, CString, c_char, c_void};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Mutex;

pub use serde_json::{self, Value, json};

/// The ABI version this SDK speaks. The daemon refuses other versions.
pub const ABI_VERSION: u32 = 1;

/// How a tool failed; decides whether the daemon retries it.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolFailure {
    /// Worth retrying.
    Retryable(String),
    /// The arguments are wrong; the model should change them.
    Validation(String),
    /// Anything else.
    Failed(String),
}

/// A tool's body: arguments and the instance config in, a JSON value out.
pub type ToolFn = fn(&Value, &Value) -> Result<Value, ToolFailure>;

/// One tool of a plugin.
pub struct ToolDef {
    pub name: &'static str,
    pub description: &'static str,
    /// JSON Schema of the arguments.
    pub parameters: fn() -> Value,
    pub run: ToolFn,
}

/// A tool plugin: its name, version and tools.
pub struct ToolPlugin {
    pub name: &'static str,
    pub version: &'static str,
    pub tools: Vec<ToolDef>,
}

/// Why an observer, model or history plugin's operation failed: any error
/// type of the plugin's own, its message what the daemon reports (naming
/// the plugin). `"text".into()` makes one from a message, and `?` takes any
/// error type.
pub type PluginError = Box<dyn std::error::Error + Send + Sync>;

/// An observer plugin instance: receives every event as JSON.
pub trait ObserverPlugin: Send {
    fn on_event(&mut self, event: &Value) -> Result<(), PluginError>;
}

/// Describes an observer plugin and creates instances from a config.
pub struct ObserverPluginDef {
    pub name: &'static str,
    pub version: &'static str,
    pub create: fn(&Value) -> Result<Box<dyn ObserverPlugin>, PluginError>,
}

/// One operation of a model plugin: its input in, its answer out (both JSON;
/// the shapes are on [`ModelPluginDef`]'s fields). An `Err` is a failure of
/// the turn it was asked for, with this message.
pub type ModelOpFn = fn(&Value) -> Result<Value, PluginError>;

/// A model plugin: how one family of models writes tool calls in its text.
/// The daemon formats the request and the plugin reads the reply; the
/// optional operations replace the daemon's defaults (OpenAI `tools`,
/// a Hermes-style `<tools>` block in the system prompt).
///
/// Tool schemas travel in their OpenAI wire form
/// (`{"type": "function", "function": {name, description, parameters}}`).
pub struct ModelPluginDef {
    pub name: &'static str,
    pub version: &'static str,
    /// Text that opens a tool call in the model's output (`[TOOL_CALLS]`).
    /// While a reply streams, the daemon holds back text from the first
    /// marker (or what may grow into one) on, so markup never reaches a
    /// reader as answer text. Empty: every token is answer text.
    pub call_markers: &'static [&'static str],
    /// Required. Input `{"content": string|null, "tool_calls": [{id, name,
    /// arguments}], "tools": [schema]}` (the assistant message as the server
    /// returned it); answer `{"content": string|null, "calls": [{"id"?,
    /// "name", "arguments": object, "error"?: string}]}` — the text outside
    /// the calls and the calls in order. A call with `error` was malformed:
    /// the model is told so instead of the tool running. A missing `id` is
    /// minted by the daemon.
    pub parse_reply: ModelOpFn,
    /// Optional. Input `{"tools": [schema]}`; answer the request's `tools`
    /// value (an array) or `null` to send none.
    pub format_tools: Option<ModelOpFn>,
    /// Optional. Input `{"tools": [schema]}`; answer the text that declares
    /// the tools in the system prompt, for servers that take no `tools`
    /// beside a grammar (the daemon adds it to the system message).
    pub declare_tools: Option<ModelOpFn>,
}

/// What a history strategy answers: the indices of the conversation's
/// messages to send, or why it cannot choose (the turn fails with it).
pub type HistorySelectFn = fn(&Value) -> Result<Vec<usize>, PluginError>;

/// A history plugin: which messages of the conversation each model request
/// sends (the built-in strategies are `sliding_window` and `keep_all`).
pub struct HistoryPluginDef {
    pub name: &'static str,
    pub version: &'static str,
    /// Input `{"messages": [message], "max_history_messages": number,
    /// "model": string}` — the whole conversation in the daemon's message
    /// form (`{role, content?, tool_calls?: [{id, name, arguments}],
    /// tool_call_id?, name?}`), the bundle's cap and the turn's model.
    /// Answer the indices of the messages to send, increasing; the daemon
    /// refuses an index out of range, out of order, or a tool message whose
    /// assistant call is not sent (the turn fails naming the plugin).
    pub select: HistorySelectFn,
}

#[doc(hidden)]
pub mod ffi {
    //! The generic bodies of the exports; the macros instantiate them.
    use super::*;

    fn panic_text(panic: &(dyn std::any::Any + Send)) -> String {
        panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into())
    }

    fn to_c(value: &Value) -> *mut c_char {
        // JSON text never holds an interior NUL (it would be escaped).
        CString::new(value.to_string())
            .map(CString::into_raw)
            .unwrap_or(std::ptr::null_mut())
    }

    /// Why a string the daemon passed is not a JSON value.
    #[derive(Debug)]
    enum BadJson {
        NotUtf8(std::str::Utf8Error),
        NotJson(serde_json::Error),
    }

    impl std::fmt::Display for BadJson {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            match self {
                BadJson::NotUtf8(e) => write!(f, "not UTF-8: {e}"),
                BadJson::NotJson(e) => write!(f, "not JSON: {e}"),
            }
        }
    }

    /// # Safety
    /// `ptr` is null or a NUL-terminated string valid for the call.
    unsafe fn read_json(ptr: *const c_char) -> Result<Value, BadJson> {
        if ptr.is_null() {
            return Ok(Value::Null);
        }
        // SAFETY: the caller passes a NUL-terminated string it owns for the call.
        let text = unsafe { CStr::from_ptr(ptr) }
            .to_str()
            .map_err(BadJson::NotUtf8)?;
        serde_json::from_str(text).map_err(BadJson::NotJson)
    }

    pub fn manifest_tool(plugin: &ToolPlugin) -> CString {
        let tools: Vec<Value> = plugin
            .tools
            .iter()
            .map(|t| json!({"name": t.name, "description": t.description, "parameters": (t.parameters)()}))
            .collect();
        let m = json!({"name": plugin.name, "version": plugin.version, "kind": "tool", "abi": ABI_VERSION, "tools": tools});
        CString::new(m.to_string()).unwrap_or_default()
    }

    pub fn manifest_observer(def: &ObserverPluginDef) -> CString {
        let m = json!({"name": def.name, "version": def.version, "kind": "observer", "abi": ABI_VERSION, "tools": []});
        CString::new(m.to_string()).unwrap_or_default()
    }

    pub struct ToolInstance {
        plugin: ToolPlugin,
        config: Value,
    }

    /// # Safety
    /// `config` is null or a valid NUL-terminated string.
    pub unsafe fn tool_init(make: fn() -> ToolPlugin, config: *const c_char) -> *mut c_void {
        catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: forwarded from the caller's contract.
            let config = unsafe { read_json(config) }.unwrap_or(Value::Null);
            Box::into_raw(Box::new(ToolInstance {
                plugin: make(),
                config,
            })) as *mut c_void
        }))
        .unwrap_or(std::ptr::null_mut())
    }

    /// # Safety
    /// `handle` came from `tool_init` and is not shut down; `call` is a valid string.
    pub unsafe fn tool_invoke(handle: *mut c_void, call: *const c_char) -> *mut c_char {
        let result = catch_unwind(AssertUnwindSafe(|| {
            if handle.is_null() {
                return json!({"error": {"kind": "failed", "message": "null plugin handle"}});
            }
            // SAFETY: the handle is a live ToolInstance (caller's contract); shared use is read-only.
            let instance = unsafe { &*(handle as *const ToolInstance) };
            // SAFETY: forwarded from the caller's contract.
            let call = match unsafe { read_json(call) } {
                Ok(c) => c,
                Err(e) => {
                    return json!({"error": {"kind": "failed", "message": format!("bad call: {e}")}});
                }
            };
            let name = call["name"].as_str().unwrap_or_default();
            let Some(tool) = instance.plugin.tools.iter().find(|t| t.name == name) else {
                return json!({"error": {"kind": "failed", "message": format!("plugin {} has no tool {name:?}", instance.plugin.name)}});
            };
            match (tool.run)(&call["arguments"], &instance.config) {
                Ok(value) => json!({"ok": value}),
                Err(ToolFailure::Retryable(m)) => {
                    json!({"error": {"kind": "retryable", "message": m}})
                }
                Err(ToolFailure::Validation(m)) => {
                    json!({"error": {"kind": "validation", "message": m}})
                }
                Err(ToolFailure::Failed(m)) => json!({"error": {"kind": "failed", "message": m}}),
            }
        }));
        let value = result.unwrap_or_else(
            |panic| json!({"error": {"kind": "panic", "message": panic_text(panic.as_ref())}}),
        );
        to_c(&value)
    }

    /// # Safety
    /// `handle` came from `tool_init` and is not used afterwards.
    pub unsafe fn tool_shutdown(handle: *mut c_void) {
        if !handle.is_null() {
            // SAFETY: the handle was created by Box::into_raw in tool_init.
            let _ = catch_unwind(AssertUnwindSafe(|| {
                drop(unsafe { Box::from_raw(handle as *mut ToolInstance) })
            }));
        }
    }

    pub struct ObserverInstance(Mutex<Box<dyn ObserverPlugin>>);

    /// # Safety
    /// `config` is null or a valid NUL-terminated string.
    pub unsafe fn observer_init(def: &ObserverPluginDef, config: *const c_char) -> *mut c_void {
        catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: forwarded from the caller's contract.
            let config = unsafe { read_json(config) }.unwrap_or(Value::Null);
            match (def.create)(&config) {
                Ok(plugin) => {
                    Box::into_raw(Box::new(ObserverInstance(Mutex::new(plugin)))) as *mut c_void
                }
                Err(_) => std::ptr::null_mut(),
            }
        }))
        .unwrap_or(std::ptr::null_mut())
    }

    /// # Safety
    /// `handle` came from `observer_init`; `event` is a valid string.
    pub unsafe fn observer_on_event(handle: *mut c_void, event: *const c_char) -> i32 {
        catch_unwind(AssertUnwindSafe(|| {
            if handle.is_null() {
                return 1;
            }
            // SAFETY: the handle is a live ObserverInstance (caller's contract).
            let instance = unsafe { &*(handle as *const ObserverInstance) };
            // SAFETY: forwarded from the caller's contract.
            let Ok(event) = (unsafe { read_json(event) }) else {
                return 1;
            };
            let mut plugin = instance.0.lock().unwrap_or_else(|p| p.into_inner());
            i32::from(plugin.on_event(&event).is_err())
        }))
        .unwrap_or(2)
    }

    /// # Safety
    /// `handle` came from `observer_init` and is not used afterwards.
    pub unsafe fn observer_shutdown(handle: *mut c_void) {
        if !handle.is_null() {
            // SAFETY: the handle was created by Box::into_raw in observer_init.
            let _ = catch_unwind(AssertUnwindSafe(|| {
                drop(unsafe { Box::from_raw(handle as *mut ObserverInstance) })
            }));
        }
    }

    pub fn manifest_model(def: &ModelPluginDef) -> CString {
        let mut ops = vec!["parse_reply"];
        if def.format_tools.is_some() {
            ops.push("format_tools");
        }
        if def.declare_tools.is_some() {
            ops.push("declare_tools");
        }
        let m = json!({"name": def.name, "version": def.version, "kind": "model", "abi": ABI_VERSION, "tools": [],
            "model": {"call_markers": def.call_markers, "ops": ops}});
        CString::new(m.to_string()).unwrap_or_default()
    }

    /// A model plugin holds no state: its instance is a marker the daemon
    /// passes back (never dereferenced).
    pub fn model_init() -> *mut c_void {
        std::ptr::NonNull::<u8>::dangling().as_ptr() as *mut c_void
    }

    /// # Safety
    /// `request` is null or a valid NUL-terminated string.
    pub unsafe fn model_call(def: &ModelPluginDef, request: *const c_char) -> *mut c_char {
        let result = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: forwarded from the caller's contract.
            let request = match unsafe { read_json(request) } {
                Ok(r) => r,
                Err(e) => {
                    return json!({"error": {"kind": "failed", "message": format!("bad request: {e}")}});
                }
            };
            let op = request["op"].as_str().unwrap_or_default();
            let run = match op {
                "parse_reply" => Some(def.parse_reply),
                "format_tools" => def.format_tools,
                "declare_tools" => def.declare_tools,
                _ => None,
            };
            let Some(run) = run else {
                return json!({"error": {"kind": "failed", "message": format!("model plugin {} has no operation {op:?}", def.name)}});
            };
            match run(&request["input"]) {
                Ok(value) => json!({"ok": value}),
                Err(e) => json!({"error": {"kind": "failed", "message": e.to_string()}}),
            }
        }));
        let value = result.unwrap_or_else(
            |panic| json!({"error": {"kind": "panic", "message": panic_text(panic.as_ref())}}),
        );
        to_c(&value)
    }

    pub fn manifest_history(def: &HistoryPluginDef) -> CString {
        let m = json!({"name": def.name, "version": def.version, "kind": "history", "abi": ABI_VERSION, "tools": []});
        CString::new(m.to_string()).unwrap_or_default()
    }

    /// # Safety
    /// `request` is null or a valid NUL-terminated string.
    pub unsafe fn history_select(def: &HistoryPluginDef, request: *const c_char) -> *mut c_char {
        let result = catch_unwind(AssertUnwindSafe(|| {
            // SAFETY: forwarded from the caller's contract.
            let request = match unsafe { read_json(request) } {
                Ok(r) => r,
                Err(e) => {
                    return json!({"error": {"kind": "failed", "message": format!("bad request: {e}")}});
                }
            };
            match (def.select)(&request) {
                Ok(indices) => json!({"ok": {"indices": indices}}),
                Err(e) => json!({"error": {"kind": "failed", "message": e.to_string()}}),
            }
        }));
        let value = result.unwrap_or_else(
            |panic| json!({"error": {"kind": "panic", "message": panic_text(panic.as_ref())}}),
        );
        to_c(&value)
    }

    /// # Safety
    /// `buf` came from this plugin's `sa_tool_invoke`, `sa_model_call` or
    /// `sa_history_select` and is freed once.
    pub unsafe fn free(buf: *mut c_char) {
        if !buf.is_null() {
            // SAFETY: buf was produced by CString::into_raw in this library.
            drop(unsafe { CString::from_raw(buf) });
        }
    }
}

/// Exports a tool plugin. `$make` is a `fn() -> ToolPlugin`.
#[macro_export]
macro_rules! export_tool_plugin {
    ($make:path) => {
        static __SA_MANIFEST: ::std::sync::OnceLock<::std::ffi::CString> =
            ::std::sync::OnceLock::new();

        #[unsafe(no_mangle)]
        pub extern "C" fn sa_plugin_abi_version() -> u32 {
            $crate::ABI_VERSION
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn sa_plugin_manifest() -> *const ::std::ffi::c_char {
            let manifest = ::std::panic::catch_unwind(|| {
                __SA_MANIFEST
                    .get_or_init(|| $crate::ffi::manifest_tool(&$make()))
                    .as_ptr()
            });
            manifest.unwrap_or(::std::ptr::null())
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_plugin_init(
            config: *const ::std::ffi::c_char,
        ) -> *mut ::std::ffi::c_void {
            unsafe { $crate::ffi::tool_init($make, config) }
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_tool_invoke(
            handle: *mut ::std::ffi::c_void,
            call: *const ::std::ffi::c_char,
        ) -> *mut ::std::ffi::c_char {
            unsafe { $crate::ffi::tool_invoke(handle, call) }
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_observer_on_event(
            _handle: *mut ::std::ffi::c_void,
            _event: *const ::std::ffi::c_char,
        ) -> i32 {
            1
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_plugin_free(buf: *mut ::std::ffi::c_char) {
            unsafe { $crate::ffi::free(buf) }
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_plugin_shutdown(handle: *mut ::std::ffi::c_void) {
            unsafe { $crate::ffi::tool_shutdown(handle) }
        }
    };
}

/// Exports an observer plugin. `$def` is a `static ObserverPluginDef`.
#[macro_export]
macro_rules! export_observer_plugin {
    ($def:path) => {
        static __SA_MANIFEST: ::std::sync::OnceLock<::std::ffi::CString> =
            ::std::sync::OnceLock::new();

        #[unsafe(no_mangle)]
        pub extern "C" fn sa_plugin_abi_version() -> u32 {
            $crate::ABI_VERSION
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn sa_plugin_manifest() -> *const ::std::ffi::c_char {
            let manifest = ::std::panic::catch_unwind(|| {
                __SA_MANIFEST
                    .get_or_init(|| $crate::ffi::manifest_observer(&$def))
                    .as_ptr()
            });
            manifest.unwrap_or(::std::ptr::null())
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_plugin_init(
            config: *const ::std::ffi::c_char,
        ) -> *mut ::std::ffi::c_void {
            unsafe { $crate::ffi::observer_init(&$def, config) }
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_tool_invoke(
            _handle: *mut ::std::ffi::c_void,
            _call: *const ::std::ffi::c_char,
        ) -> *mut ::std::ffi::c_char {
            ::std::ptr::null_mut()
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_observer_on_event(
            handle: *mut ::std::ffi::c_void,
            event: *const ::std::ffi::c_char,
        ) -> i32 {
            unsafe { $crate::ffi::observer_on_event(handle, event) }
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_plugin_free(buf: *mut ::std::ffi::c_char) {
            unsafe { $crate::ffi::free(buf) }
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_plugin_shutdown(handle: *mut ::std::ffi::c_void) {
            unsafe { $crate::ffi::observer_shutdown(handle) }
        }
    };
}

/// Exports a model plugin. `$def` is a `static ModelPluginDef`.
#[macro_export]
macro_rules! export_model_plugin {
    ($def:path) => {
        $crate::__export_stateless_plugin!($crate::ffi::manifest_model(&$def));

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_model_call(
            _handle: *mut ::std::ffi::c_void,
            request: *const ::std::ffi::c_char,
        ) -> *mut ::std::ffi::c_char {
            unsafe { $crate::ffi::model_call(&$def, request) }
        }
    };
}

/// Exports a history plugin. `$def` is a `static HistoryPluginDef`.
#[macro_export]
macro_rules! export_history_plugin {
    ($def:path) => {
        $crate::__export_stateless_plugin!($crate::ffi::manifest_history(&$def));

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_history_select(
            _handle: *mut ::std::ffi::c_void,
            request: *const ::std::ffi::c_char,
        ) -> *mut ::std::ffi::c_char {
            unsafe { $crate::ffi::history_select(&$def, request) }
        }
    };
}

/// The exports every stateless plugin (model, history) shares besides its
/// own call: the ABI version, the manifest `$manifest` builds, one marker
/// instance, the tool and observer entry points answering "not mine", and
/// freeing. Not part of the SDK's API: use the `export_*` macros.
#[doc(hidden)]
#[macro_export]
macro_rules! __export_stateless_plugin {
    ($manifest:expr) => {
        static __SA_MANIFEST: ::std::sync::OnceLock<::std::ffi::CString> =
            ::std::sync::OnceLock::new();

        #[unsafe(no_mangle)]
        pub extern "C" fn sa_plugin_abi_version() -> u32 {
            $crate::ABI_VERSION
        }

        #[unsafe(no_mangle)]
        pub extern "C" fn sa_plugin_manifest() -> *const ::std::ffi::c_char {
            let manifest =
                ::std::panic::catch_unwind(|| __SA_MANIFEST.get_or_init(|| $manifest).as_ptr());
            manifest.unwrap_or(::std::ptr::null())
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_plugin_init(
            _config: *const ::std::ffi::c_char,
        ) -> *mut ::std::ffi::c_void {
            // Stateless: the same marker instance for every init.
            $crate::ffi::model_init()
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_tool_invoke(
            _handle: *mut ::std::ffi::c_void,
            _call: *const ::std::ffi::c_char,
        ) -> *mut ::std::ffi::c_char {
            ::std::ptr::null_mut()
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_observer_on_event(
            _handle: *mut ::std::ffi::c_void,
            _event: *const ::std::ffi::c_char,
        ) -> i32 {
            1
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_plugin_free(buf: *mut ::std::ffi::c_char) {
            unsafe { $crate::ffi::free(buf) }
        }

        /// # Safety
        /// See the SDK's ABI documentation.
        #[unsafe(no_mangle)]
        pub unsafe extern "C" fn sa_plugin_shutdown(_handle: *mut ::std::ffi::c_void) {}
    };
}
