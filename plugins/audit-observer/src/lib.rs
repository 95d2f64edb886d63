//! Example observer plugin: appends every event, as one JSON line, to the
//! file named by its config (`{"path": "/var/lib/structured-agents/audit.jsonl"}`).
//! Config `{"panic_on": "<event type>"}` makes it panic on that event type
//! and `{"delay_ms": N}` makes it slow (both for tests).

use std::fs::{File, OpenOptions};
use std::io::Write;

use structured_agents_plugin_sdk::{
    ObserverPlugin, ObserverPluginDef, PluginError, Value, export_observer_plugin,
};

struct Audit {
    file: File,
    panic_on: Option<String>,
    delay: std::time::Duration,
}

impl ObserverPlugin for Audit {
    fn on_event(&mut self, event: &Value) -> Result<(), PluginError> {
        if self.panic_on.as_deref().is_some_and(|t| event["type"] == t) {
            panic!("audit observer asked to panic on {}", event["type"]);
        }
        std::thread::sleep(self.delay);
        Ok(writeln!(self.file, "{event}")?)
    }
}

fn create(config: &Value) -> Result<Box<dyn ObserverPlugin>, PluginError> {
    let path = config["path"].as_str().ok_or("config needs `path`")?;
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| format!("{path}: {e}"))?;
    Ok(Box::new(Audit {
        file,
        panic_on: config["panic_on"].as_str().map(str::to_string),
        delay: std::time::Duration::from_millis(config["delay_ms"].as_u64().unwrap_or(0)),
    }))
}

static AUDIT: ObserverPluginDef = ObserverPluginDef {
    name: "audit",
    version: env!("CARGO_PKG_VERSION"),
    create,
};

export_observer_plugin!(AUDIT);
