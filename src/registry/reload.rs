//! The one reload pipeline. Every trigger — the first load, the file
//! watcher, SIGHUP, `POST /v1/reload`, an MCP server's `list_changed` — is a
//! request on one channel into one [`Reloader`], saying what changed if it
//! knows (the watcher's paths; nothing on disk for new MCP tools). The
//! reloader reads the daemon config file, rejects settings that cannot
//! change live, applies the rest through [`Registry::apply`] (which loads
//! only what changed) and publishes the typed outcome once on the daemon
//! bus. Requests that arrive while a reload runs are answered by the next
//! one, together, their changed paths merged.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{mpsc, oneshot};
use tokio_util::sync::CancellationToken;

use super::inputs;
use super::watch::{self, Changed, DirWatcher};
use super::{Applied, Registry, Snapshot};
use crate::config::Config;
use crate::events::daemon::{
    DaemonBus, DaemonEvent, Degraded, InputKind, ReloadOutcome, ReloadResult, ReloadTrigger,
};

/// How long the watcher waits for a burst of file changes to end.
const DEBOUNCE: Duration = Duration::from_millis(50);

struct Request {
    trigger: ReloadTrigger,
    changed: Changed,
    reply: Option<oneshot::Sender<Arc<ReloadOutcome>>>,
}

/// Asks the reloader for reloads; cheap to clone.
#[derive(Clone)]
pub struct ReloadHandle {
    // Unbounded: a request must never be dropped (its changed paths would
    // be lost), and the reloader takes every waiting request at once.
    requests: mpsc::UnboundedSender<Request>,
}

impl ReloadHandle {
    /// Asks for a reload and waits for its outcome; `None` once the daemon
    /// is shutting down.
    pub async fn reload(&self, trigger: ReloadTrigger) -> Option<Arc<ReloadOutcome>> {
        let (reply, outcome) = oneshot::channel();
        self.requests
            .send(Request {
                trigger,
                changed: Changed::Everything,
                reply: Some(reply),
            })
            .ok()?;
        outcome.await.ok()
    }

    /// Asks for a reload of everything without waiting.
    pub fn request(&self, trigger: ReloadTrigger) {
        self.request_changed(trigger, Changed::Everything);
    }

    /// Asks for a reload of what `changed` names without waiting (once the
    /// daemon is shutting down, no one is asked).
    fn request_changed(&self, trigger: ReloadTrigger, changed: Changed) {
        let _ = self.requests.send(Request {
            trigger,
            changed,
            reply: None,
        });
    }
}

/// What the daemon does once a reload changed bundles (given their names:
/// the ones whose content changed), before the reload is answered: bundles
/// that declare `on_new_version: move` move their jobs there. The registry
/// knows no queue; the daemon supplies this.
pub type AfterReload =
    Arc<dyn Fn(Vec<String>) -> futures::future::BoxFuture<'static, ()> + Send + Sync>;

/// Owns the reloads of one daemon.
pub struct Reloader {
    registry: Arc<Registry>,
    /// `--config`, read again by every reload but the first.
    config_file: Option<PathBuf>,
    bus: DaemonBus,
    requests: mpsc::UnboundedReceiver<Request>,
    handle: ReloadHandle,
    after: Option<AfterReload>,
}

/// The registry (holding `config`, nothing loaded yet), the handle that
/// asks for reloads, and the reloader to run.
pub fn pipeline(
    config: Arc<Config>,
    config_file: Option<PathBuf>,
    bus: DaemonBus,
) -> (Arc<Registry>, ReloadHandle, Reloader) {
    let (tx, requests) = mpsc::unbounded_channel();
    let handle = ReloadHandle { requests: tx };
    let tools = handle.clone();
    // New MCP tools change nothing on disk: only the stale binds are redone.
    let tools_changed: crate::tools::mcp::OnToolsChanged =
        Arc::new(move || tools.request_changed(ReloadTrigger::ToolsChanged, Changed::nothing()));
    let registry = Registry::new(config, Some(tools_changed), bus.clone());
    let reloader = Reloader {
        registry: registry.clone(),
        config_file,
        bus,
        requests,
        handle: handle.clone(),
        after: None,
    };
    (registry, handle, reloader)
}

impl Reloader {
    /// Runs `after` once each reload that changed bundles is applied.
    pub fn after_reload(mut self, after: AfterReload) -> Self {
        self.after = Some(after);
        self
    }

    /// Serves reload requests until `stop`.
    pub async fn run(mut self, stop: CancellationToken) {
        let mut watched = Watched::default();
        // Watching starts before the first load reads anything: a change
        // the watcher does not report has been read by the load.
        watched.follow(&self.registry.snapshot().config, &self.handle);
        // What a rejected reload was asked to look at, for the next one.
        let mut carried = None;
        loop {
            let first = tokio::select! {
                Some(request) = self.requests.recv() => request,
                _ = stop.cancelled() => return,
            };
            let trigger = first.trigger;
            let mut changed = first.changed;
            changed.merge(carried.take().unwrap_or_else(Changed::nothing));
            let mut replies: Vec<_> = first.reply.into_iter().collect();
            while let Ok(more) = self.requests.try_recv() {
                changed.merge(more.changed);
                replies.extend(more.reply);
            }
            let outcome = Arc::new(self.reload(trigger, changed).await);
            if outcome.result == ReloadResult::Rejected {
                // Nothing was applied: the changed paths must not be lost.
                carried = Some(Changed::Everything);
            }
            self.publish(&outcome);
            if let (Some(after), Some(bundles)) = (&self.after, outcome.of(InputKind::Bundle)) {
                let changed: Vec<String> = bundles.changed.clone();
                if !changed.is_empty() {
                    after(changed).await;
                }
            }
            for reply in replies {
                let _ = reply.send(outcome.clone());
            }
            watched.follow(&self.registry.snapshot().config, &self.handle);
        }
    }

    /// The outcome, then what it did to plugins and bundles, each once.
    fn publish(&self, outcome: &Arc<ReloadOutcome>) {
        self.bus.publish(DaemonEvent::Reload(outcome.clone()));
        let snapshot = self.registry.snapshot();
        for kind in [
            InputKind::ToolPlugin,
            InputKind::ObserverPlugin,
            InputKind::ModelPlugin,
        ] {
            let Some(changes) = outcome.of(kind) else {
                continue;
            };
            for name in changes.changed.iter().chain(&changes.removed) {
                self.bus
                    .publish(DaemonEvent::PluginUnloaded { name: name.clone() });
            }
            for name in changes.added.iter().chain(&changes.changed) {
                if let Some(plugin) = snapshot.plugins.get(name) {
                    self.bus.publish(DaemonEvent::PluginLoaded {
                        name: name.clone(),
                        kind: plugin.info.kind.clone(),
                        sha256: plugin.info.sha256.clone(),
                    });
                }
            }
        }
        for degraded in &outcome.degraded {
            self.bus
                .publish(DaemonEvent::BundleDegraded(degraded.clone()));
        }
    }

    /// One reload: read, check, apply what `changed`.
    async fn reload(&self, trigger: ReloadTrigger, changed: Changed) -> ReloadOutcome {
        self.bus.publish(DaemonEvent::ReloadStarted { trigger });
        let running = self.registry.snapshot();
        let config = if trigger == ReloadTrigger::Start {
            running.config.clone()
        } else {
            match read_config(self.config_file.clone()).await {
                Ok(config) => config,
                Err(error) => return rejected(trigger, &running, vec![error.to_string()]),
            }
        };
        let refused = running.config.restart_only_changes(
            &config,
            &inputs::live_keys(),
            self.config_file.as_deref(),
        );
        if !refused.is_empty() {
            let errors = refused.iter().map(ToString::to_string).collect();
            return rejected(trigger, &running, errors);
        }
        // The old snapshot must not outlive the swap here: the versions it
        // holds are dropped (their MCP servers stopped) only once unheld.
        drop(running);
        let mut outcome = match self.registry.apply(config, changed).await {
            Ok(applied) => outcome(trigger, applied),
            Err(e) => rejected(trigger, &self.registry.snapshot(), vec![e.to_string()]),
        };
        outcome.bundles = self.registry.snapshot().bundle_counts();
        outcome
    }
}

/// Why a reload could not read the daemon config: the config's own error
/// (which names the file, key and fix), or the task that read it died.
#[derive(Debug, thiserror::Error)]
enum ConfigUnread {
    #[error("reading the config failed: {0}")]
    Task(#[from] tokio::task::JoinError),
    #[error("{0}")]
    Config(#[from] crate::config::ConfigError),
}

async fn read_config(file: Option<PathBuf>) -> Result<Arc<Config>, ConfigUnread> {
    let config = tokio::task::spawn_blocking(move || Config::load(file.as_deref())).await??;
    Ok(Arc::new(config))
}

fn rejected(trigger: ReloadTrigger, running: &Snapshot, errors: Vec<String>) -> ReloadOutcome {
    ReloadOutcome {
        generation: running.generation,
        result: ReloadResult::Rejected,
        trigger,
        changes: Vec::new(),
        failed: Vec::new(),
        degraded: Vec::new(),
        bundles: running.bundle_counts(),
        errors,
    }
}

fn outcome(trigger: ReloadTrigger, applied: Applied) -> ReloadOutcome {
    ReloadOutcome {
        generation: applied.generation,
        result: if applied.failed.is_empty() && applied.errors.is_empty() {
            ReloadResult::Applied
        } else {
            ReloadResult::Partial
        },
        trigger,
        changes: applied.changes,
        failed: applied.failed,
        degraded: applied
            .degraded
            .into_iter()
            .map(|(name, errors)| Degraded { name, errors })
            .collect(),
        bundles: Default::default(),
        errors: applied.errors,
    }
}

/// The directories being watched, following the config as it changes.
#[derive(Default)]
struct Watched {
    dirs: Vec<PathBuf>,
    watcher: Option<DirWatcher>,
}

impl Watched {
    fn follow(&mut self, config: &Config, handle: &ReloadHandle) {
        let mut dirs = vec![
            config.paths.bundles_dir.clone(),
            config.paths.models_dir.clone(),
        ];
        // Plugins are optional and the default config names a directory
        // that does not exist: no plugins, nothing to watch and nothing to
        // warn about. Once it is made, the next reload watches it (the list
        // of directories changes).
        if config.paths.plugins_dir.is_dir() {
            dirs.push(config.paths.plugins_dir.clone());
        }
        if dirs == self.dirs && self.watcher.is_some() {
            return;
        }
        let sender = handle.clone();
        let changed = move |changed| sender.request_changed(ReloadTrigger::Watcher, changed);
        match watch::watch(&dirs, DEBOUNCE, changed) {
            Ok(watcher) => {
                let moved = self.watcher.replace(watcher).is_some();
                self.dirs = dirs;
                if moved {
                    // What changed between the last load and this watch
                    // began was seen by no one: the stamps will tell.
                    handle.request_changed(ReloadTrigger::Watcher, Changed::Everything);
                }
            }
            Err(e) => tracing::error!(error = %e, "not watching for changes; reload with SIGHUP"),
        }
    }
}
