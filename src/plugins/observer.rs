//! Observer plugins: each gets its own bounded queue and OS thread. The
//! kernel's `on_event` only serializes and `try_send`s — a full queue drops
//! the event and counts it, never blocking a job. A plugin that fails or
//! panics is isolated; after `max_failures` in a row it is disabled.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{SyncSender, TrySendError, sync_channel};

use async_trait::async_trait;
use serde_json::Value;

use super::{Plugin, PluginCallError};
use crate::events::{EventEnvelope, Observer, ObserverError};

pub struct PluginObserver {
    name: String,
    queue: SyncSender<String>,
    dropped: Arc<AtomicU64>,
    delivered: Arc<AtomicU64>,
    disabled: Arc<AtomicBool>,
}

impl PluginObserver {
    /// Instantiates the plugin with `config` and starts its thread.
    pub fn start(
        plugin: Arc<Plugin>,
        config: &Value,
        capacity: usize,
        max_failures: u32,
    ) -> Result<Arc<Self>, PluginCallError> {
        let instance = plugin.instantiate(config)?;
        let (queue, events) = sync_channel::<String>(capacity.max(1));
        let name = plugin.info.name.clone();
        let dropped = Arc::new(AtomicU64::new(0));
        let delivered = Arc::new(AtomicU64::new(0));
        let disabled = Arc::new(AtomicBool::new(false));
        let (thread_disabled, thread_delivered, thread_name) =
            (disabled.clone(), delivered.clone(), name.clone());
        let spawned = std::thread::Builder::new().name(format!("observer-{name}")).spawn(move || {
            let mut failures = 0;
            for event in events {
                match plugin.on_event(&instance, &event) {
                    0 => {
                        failures = 0;
                        thread_delivered.fetch_add(1, Ordering::Relaxed);
                    }
                    code => {
                        failures += 1;
                        let what = if code == 2 { "panicked" } else { "failed" };
                        tracing::warn!(observer = %thread_name, failures, "observer plugin {what} on an event");
                        if failures >= max_failures {
                            thread_disabled.store(true, Ordering::SeqCst);
                            tracing::error!(observer = %thread_name, failures, "observer plugin disabled after repeated failures; restart or reload the daemon to enable it again");
                            return;
                        }
                    }
                }
            }
        });
        if let Err(e) = spawned {
            return Err(PluginCallError::Protocol {
                plugin: name,
                detail: format!("cannot start its thread: {e}"),
            });
        }
        Ok(Arc::new(Self {
            name,
            queue,
            dropped,
            delivered,
            disabled,
        }))
    }

    pub fn dropped(&self) -> u64 {
        self.dropped.load(Ordering::Relaxed)
    }

    pub fn delivered(&self) -> u64 {
        self.delivered.load(Ordering::Relaxed)
    }

    pub fn is_disabled(&self) -> bool {
        self.disabled.load(Ordering::SeqCst)
    }

    pub fn plugin_name(&self) -> &str {
        &self.name
    }

    /// Queues one JSON document for the plugin without waiting: a full
    /// queue drops it (counted), a disabled plugin ignores it.
    pub fn send_json(&self, json: String) {
        if self.is_disabled() {
            return;
        }
        match self.queue.try_send(json) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.dropped.fetch_add(1, Ordering::Relaxed);
            }
            // The thread ended (disabled): nothing to deliver to.
            Err(TrySendError::Disconnected(_)) => {}
        }
    }
}

#[async_trait]
impl Observer for PluginObserver {
    async fn on_event(&self, event: &EventEnvelope) -> Result<(), ObserverError> {
        self.send_json(serde_json::to_string(event).unwrap_or_default());
        Ok(())
    }

    fn name(&self) -> &str {
        &self.name
    }
}
