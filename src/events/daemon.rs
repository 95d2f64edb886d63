//! What happened in the daemon, as opposed to inside a run: reloads, plugins
//! coming and going, the queue's reachability, purges, lost leases, drains.
//!
//! One enum, published once per occurrence on one [`DaemonBus`]; logs,
//! metrics, spans, observer plugins, MCP `list_changed` and sd_notify are
//! subscribers, so none of them can disagree with another about what
//! happened. Publishing is synchronous and must stay cheap: a subscriber
//! that has slow work to do (an HTTP notification) spawns it.
//!
//! This module knows the shapes only, never who subscribes.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use schemars::JsonSchema;
use serde::Serialize;

use super::EventEnvelope;

/// One happening of the daemon.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum DaemonEvent {
    /// A reload began (systemd hears RELOADING=1).
    ReloadStarted { trigger: ReloadTrigger },
    /// A reload finished: applied, partially applied or rejected.
    Reload(Arc<ReloadOutcome>),
    /// A job was accepted by the API.
    JobSubmitted { bundle: String },
    /// An operator's request ended a job that no worker held (a cancelled
    /// queued or parked job, a failed resolve): its final event.
    JobEndedByRequest { event: Box<EventEnvelope> },
    /// A plugin library was loaded (or a changed one loaded again).
    PluginLoaded {
        name: String,
        kind: String,
        sha256: String,
    },
    /// A plugin library is no longer called (removed, or replaced).
    PluginUnloaded { name: String },
    /// A bundle's last edit is broken; its last good version keeps serving.
    BundleDegraded(Degraded),
    /// One queue operation and whether it reached the store.
    QueueOperation {
        operation: &'static str,
        worked: bool,
    },
    /// The queue answers again after failing.
    QueueUp { location: String },
    /// The queue stopped answering.
    QueueDown {
        location: String,
        operation: &'static str,
    },
    /// A decision on a call awaiting approval was taken (by a person, or
    /// by the approval timeout): the job runs again.
    ApprovalDecided {
        job: String,
        bundle: String,
        /// `approve`, `deny` or `edit`.
        decision: &'static str,
        /// Who decided (an API key's name, `local`, `token` or `timeout`).
        by: String,
    },
    /// Retention deleted finished jobs.
    JobsPurged { count: u64 },
    /// A newer attempt of a job took it over; this attempt's outcome is dropped.
    LeaseLost { job: String, attempt: u32 },
    /// The front door refused a request before any handler (`host`,
    /// `origin` or `media_type`): a web page, or a misconfigured client.
    RequestRefused { reason: &'static str },
    /// Admission refused a job (every way in): the API key that asked
    /// (`local`, `token` or a keys-file name) and why (`forbidden`,
    /// `invalid`, `unknown_bundle`, `quota`, `budget`, `conflict`, …).
    SubmissionRefused { key: String, reason: &'static str },
    /// After a reload, a bundle that declares `on_new_version: move` moved
    /// its waiting and parked jobs to its new version: how many moved, and
    /// the jobs that could not, with why.
    JobsMoved {
        bundle: String,
        version: String,
        moved: usize,
        refused: Vec<(String, String)>,
    },
    /// The scheduler handled a schedule's due fire(s): what it did
    /// (`submitted`, `missed`, `skipped_overlap`, `refused`) and how late
    /// after the fire's time.
    ScheduleFired {
        schedule: String,
        /// The bundle it fires: the metrics' label (schedule ids are made
        /// by keys without bound, so they are never a label).
        bundle: String,
        /// `submitted` or `refused` (one fire), `skipped_overlap` (fires
        /// dropped for a running job), `missed` (late fires passed over).
        outcome: &'static str,
        /// How many fires had that outcome.
        count: u64,
        lateness: std::time::Duration,
    },
    /// A bundle's own schedule was taken out of the store by this daemon:
    /// a reload of it removed the bundle (`bundle_removed`) or the
    /// bundle's `schedule:` (`schedule_removed_from_bundle`).
    ScheduleRemoved {
        schedule: String,
        /// Which daemon removed it (host and process id).
        daemon: String,
        reason: &'static str,
    },
    /// A webhook delivery attempt ended: `delivered`, `retry` or `dead`.
    WebhookDelivery { outcome: &'static str },
    /// The release gate moved a version of a bundle: `held` (a new
    /// version loaded as a candidate, `serving` keeps serving),
    /// `promoted` (it serves from the next reload) or `rejected` (it
    /// stays a candidate), by the gate's eval (`by` `gate`) or an
    /// operator's key, and why.
    Release {
        bundle: String,
        version: String,
        state: &'static str,
        serving: String,
        by: String,
        reason: String,
    },
    /// An eval run stored its report (`worker/eval`).
    EvalRan(Box<EvalRan>),
    /// A claim's settle came too late and changed nothing: another holder
    /// took the claim after this one's lease ran out (a job's newer
    /// attempt, a delivery re-claimed by another sender), or settled it
    /// first (a schedule's fire recorded by another daemon).
    StaleSettle { claim: StaleClaim },
    /// Shutdown began: no new job is leased; running ones get the drain timeout.
    DrainStarted,
    /// Every running job finished or was released.
    DrainDone,
    /// Load-aware admission of one endpoint (docs/models.md).
    EndpointLoad {
        endpoint: String,
        change: LoadChange,
    },
    /// One HTTP attempt of a model call failed (each retry's, and the
    /// last one's when the call fails): `error_type` is the client's kind
    /// (`http_5xx`, `timeout`, …), `model` the name the request asked for.
    ModelAttemptFailed {
        endpoint: String,
        model: String,
        error_type: &'static str,
    },
}

/// An eval run's report, as the daemon tells of it (its log line, its
/// metrics, and each grade as an OTel `gen_ai.evaluation.result` event).
#[derive(Debug, Clone, Serialize)]
pub struct EvalRan {
    /// The eval job's id.
    pub job: String,
    pub report: crate::evals::RunReport,
}

/// What kind of claim a stale settle held (a bounded metric label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StaleClaim {
    /// A job's lease: an attempt's finish after a newer attempt took the
    /// job (its attempt number is stale).
    Job,
    /// An outbox delivery (a webhook or an A2A push).
    Delivery,
    /// A schedule's due fire.
    ScheduleFire,
}

impl StaleClaim {
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Job => "job",
            Self::Delivery => "delivery",
            Self::ScheduleFire => "schedule_fire",
        }
    }
}

/// What an endpoint's load-aware admission saw or did.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "change", rename_all = "snake_case")]
pub enum LoadChange {
    /// A read of the server's load page (an unset value: not on the page).
    Signals {
        waiting: Option<f64>,
        kv_cache: Option<f64>,
    },
    /// A model call waits for the server's load to drop.
    Held { first_call: bool },
    /// A held call goes ahead.
    Released { first_call: bool },
    /// A held call was given up (its job cancelled or stopped) before release.
    Abandoned { first_call: bool },
    /// The server answered 503 or 529: calls wait for the next reading.
    Refused { status: u16 },
    /// The load page cannot be read: only the fixed permit applies now (a warning).
    Fallback { reason: String },
    /// The load page reads again after a fallback.
    Recovered,
}

impl DaemonEvent {
    /// A short, stable name (metric label, log field).
    pub fn kind(&self) -> &'static str {
        match self {
            DaemonEvent::ReloadStarted { .. } => "reload_started",
            DaemonEvent::Reload(_) => "reload",
            DaemonEvent::JobSubmitted { .. } => "job_submitted",
            DaemonEvent::JobEndedByRequest { .. } => "job_ended_by_request",
            DaemonEvent::PluginLoaded { .. } => "plugin_loaded",
            DaemonEvent::PluginUnloaded { .. } => "plugin_unloaded",
            DaemonEvent::BundleDegraded(_) => "bundle_degraded",
            DaemonEvent::QueueOperation { .. } => "queue_operation",
            DaemonEvent::QueueUp { .. } => "queue_up",
            DaemonEvent::QueueDown { .. } => "queue_down",
            DaemonEvent::ApprovalDecided { .. } => "approval_decided",
            DaemonEvent::JobsPurged { .. } => "jobs_purged",
            DaemonEvent::LeaseLost { .. } => "lease_lost",
            DaemonEvent::RequestRefused { .. } => "request_refused",
            DaemonEvent::SubmissionRefused { .. } => "submission_refused",
            DaemonEvent::JobsMoved { .. } => "jobs_moved",
            DaemonEvent::ScheduleFired { .. } => "schedule_fired",
            DaemonEvent::ScheduleRemoved { .. } => "schedule_removed",
            DaemonEvent::WebhookDelivery { .. } => "webhook_delivery",
            DaemonEvent::Release { .. } => "release",
            DaemonEvent::EvalRan(_) => "eval_ran",
            DaemonEvent::StaleSettle { .. } => "stale_settle",
            DaemonEvent::DrainStarted => "drain_started",
            DaemonEvent::DrainDone => "drain_done",
            DaemonEvent::EndpointLoad { .. } => "endpoint_load",
            DaemonEvent::ModelAttemptFailed { .. } => "model_attempt_failed",
        }
    }
}

/// How a reload ended. The whole reload is one of these; its `report` says
/// what changed, kind by kind.
#[derive(Debug, Clone, Serialize)]
pub struct ReloadOutcome {
    /// The snapshot generation now serving (unchanged when rejected).
    pub generation: u64,
    pub result: ReloadResult,
    /// What asked for it.
    pub trigger: ReloadTrigger,
    /// Added / changed / removed, per kind of input (empty when rejected).
    pub changes: Vec<KindChanges>,
    /// Bundles whose last edit failed (they keep their last good version,
    /// or are not served at all).
    pub failed: Vec<String>,
    /// The failed bundles that keep serving their last good version.
    pub degraded: Vec<Degraded>,
    /// What the registry serves after it, by status.
    pub bundles: BundleCounts,
    /// Every error, located (file:line: key: message).
    pub errors: Vec<String>,
}

/// Bundle directories by status: `ok` serve their current content,
/// `degraded` their last good version, `invalid` nothing.
#[derive(Debug, Clone, Copy, Default, Serialize, JsonSchema)]
pub struct BundleCounts {
    pub ok: usize,
    pub degraded: usize,
    pub invalid: usize,
}

/// A bundle whose last edit is broken, with that edit's errors.
#[derive(Debug, Clone, Serialize)]
pub struct Degraded {
    pub name: String,
    pub errors: Vec<String>,
}

impl ReloadOutcome {
    /// The changes of one kind, if any.
    pub fn of(&self, kind: InputKind) -> Option<&KindChanges> {
        self.changes.iter().find(|c| c.kind == kind)
    }

    /// Whether the set of runnable bundles or their content changed.
    pub fn bundles_changed(&self) -> bool {
        self.of(InputKind::Bundle).is_some_and(|c| !c.is_empty())
    }

    /// The names of one kind that were added, changed or removed.
    pub fn names(&self, kind: InputKind, change: Change) -> &[String] {
        match (self.of(kind), change) {
            (None, _) => &[],
            (Some(c), Change::Added) => &c.added,
            (Some(c), Change::Changed) => &c.changed,
            (Some(c), Change::Removed) => &c.removed,
        }
    }
}

/// `applied`, `partial` (some bundles failed; the rest applied) or `rejected`
/// (nothing changed: the last good state keeps serving).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReloadResult {
    Applied,
    Partial,
    Rejected,
}

impl ReloadResult {
    pub fn as_str(self) -> &'static str {
        match self {
            ReloadResult::Applied => "applied",
            ReloadResult::Partial => "partial",
            ReloadResult::Rejected => "rejected",
        }
    }
}

/// What asked for a reload.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum ReloadTrigger {
    /// The daemon's first load.
    Start,
    /// A file changed under a watched directory.
    Watcher,
    /// SIGHUP (`systemctl reload` sends it through `structured-agents reload`).
    Signal,
    /// `POST /v1/reload`.
    Api,
    /// An MCP server announced that its tools changed.
    ToolsChanged,
    /// The release gate (or an operator) promoted or rejected a version.
    Release,
}

/// One kind of input a reload reads.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, JsonSchema,
)]
#[serde(rename_all = "snake_case")]
pub enum InputKind {
    #[default]
    Bundle,
    ModelConfig,
    ToolPlugin,
    ObserverPlugin,
    ModelPlugin,
    Endpoint,
    Agent,
    Observer,
    Runtime,
    Auth,
    LogFilter,
}

impl InputKind {
    pub const ALL: [InputKind; 11] = [
        InputKind::Bundle,
        InputKind::ModelConfig,
        InputKind::ToolPlugin,
        InputKind::ObserverPlugin,
        InputKind::ModelPlugin,
        InputKind::Endpoint,
        InputKind::Agent,
        InputKind::Observer,
        InputKind::Runtime,
        InputKind::Auth,
        InputKind::LogFilter,
    ];
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Added,
    Changed,
    Removed,
}

/// Added / changed / removed names of one kind of input (a list left out
/// is empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, JsonSchema)]
pub struct KindChanges {
    pub kind: InputKind,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(default)]
    pub added: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(default)]
    pub changed: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    #[schemars(default)]
    pub removed: Vec<String>,
}

impl KindChanges {
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.changed.is_empty() && self.removed.is_empty()
    }
}

/// A subscriber of the daemon's events.
pub trait DaemonObserver: Send + Sync {
    /// Must not block: spawn slow work.
    fn on_daemon_event(&self, event: &DaemonEvent);
}

/// The one bus every daemon event is published on.
#[derive(Clone, Default)]
pub struct DaemonBus {
    subscribers: Arc<RwLock<Vec<Arc<dyn DaemonObserver>>>>,
}

impl DaemonBus {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn subscribe(&self, subscriber: Arc<dyn DaemonObserver>) {
        self.subscribers
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .push(subscriber);
    }

    /// Hands `event` to every subscriber, once each, in subscription order.
    pub fn publish(&self, event: DaemonEvent) {
        let subscribers = self
            .subscribers
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        for subscriber in subscribers {
            subscriber.on_daemon_event(&event);
        }
    }
}

/// Tracks whether the queue answers: every operation is published, and each
/// change between reachable and unreachable once more as up / down.
pub struct QueueHealth {
    bus: DaemonBus,
    location: String,
    up: AtomicBool,
}

impl QueueHealth {
    pub fn new(bus: DaemonBus, location: String) -> Arc<Self> {
        Arc::new(Self {
            bus,
            location,
            up: AtomicBool::new(true),
        })
    }

    /// Whether the last report said the queue worked.
    pub fn is_up(&self) -> bool {
        self.up.load(Ordering::SeqCst)
    }

    pub fn report(&self, operation: &'static str, worked: bool) {
        self.bus
            .publish(DaemonEvent::QueueOperation { operation, worked });
        if self.up.swap(worked, Ordering::SeqCst) != worked {
            let location = self.location.clone();
            self.bus.publish(if worked {
                DaemonEvent::QueueUp { location }
            } else {
                DaemonEvent::QueueDown {
                    location,
                    operation,
                }
            });
        }
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use std::sync::Mutex;

    /// Records every event's kind (for tests that count what fired).
    #[derive(Default)]
    pub struct Recorder(pub Mutex<Vec<&'static str>>);

    impl DaemonObserver for Recorder {
        fn on_daemon_event(&self, event: &DaemonEvent) {
            self.0.lock().unwrap().push(event.kind());
        }
    }

    #[test]
    fn every_subscriber_sees_each_event_once_in_order() {
        let bus = DaemonBus::new();
        let (a, b) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
        bus.subscribe(a.clone());
        bus.subscribe(b.clone());
        bus.publish(DaemonEvent::DrainStarted);
        bus.publish(DaemonEvent::JobsPurged { count: 3 });
        bus.publish(DaemonEvent::DrainDone);
        for r in [a, b] {
            assert_eq!(
                *r.0.lock().unwrap(),
                ["drain_started", "jobs_purged", "drain_done"]
            );
        }
    }

    #[test]
    fn queue_health_publishes_each_transition_once() {
        let bus = DaemonBus::new();
        let recorder = Arc::new(Recorder::default());
        bus.subscribe(recorder.clone());
        let health = QueueHealth::new(bus, "q.db".into());
        health.report("lease", true);
        health.report("lease", false);
        health.report("lease", false);
        health.report("ping", true);
        let kinds = recorder.0.lock().unwrap().clone();
        assert_eq!(
            kinds,
            [
                "queue_operation",
                "queue_operation",
                "queue_down",
                "queue_operation",
                "queue_operation",
                "queue_up"
            ]
        );
    }
}
