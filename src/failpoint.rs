//! Named failpoints for crash tests: places where the daemon kills itself
//! with SIGKILL, exactly as `kill -9` would, so a test can prove a job ends
//! exactly once whatever the moment of the crash.
//!
//! Inert unless `SA_FAILPOINTS` is set: a comma-separated list of
//! `name` (fire on the first hit) or `name@N` (fire on the N-th hit), each
//! optionally followed by `:panic` to panic there instead of dying (to prove
//! a panic is contained) or, where the point is reached in async code
//! (`before_completion_commit`, `stream_end_read`), `:pause` to wait there
//! for a second and go on (to prove nothing is told of a write before it
//! commits, or that a stream's reads are not raced). The points are the variants of [`Failpoint`], so
//! a call site cannot name one that does not exist, and `serve` refuses an
//! `SA_FAILPOINTS` naming an unknown one ([`check_env`]): a misspelt name
//! would otherwise never fire and a crash test would prove nothing. The
//! names, in the order a job meets them:
//!
//! | name | where |
//! |---|---|
//! | `after_submit_commit` | a submit is committed, before the HTTP answer |
//! | `before_model_call` | a turn is about to call the model |
//! | `after_reply_recorded` | a model reply is in the journal |
//! | `before_tool_start` | a tool call is about to be recorded as started |
//! | `tool_running` | 300 ms into a tool call (it is still running) |
//! | `after_tool_result_recorded` | a tool result is in the journal |
//! | `after_approval_recorded` | a decision on a call awaiting approval is committed, before the HTTP answer |
//! | `after_checkpoint` | a workflow checkpoint is durable, before its stage runs |
//! | `gate_started` | a workflow command gate's process has started |
//! | `after_group_reply_recorded` | a group chat's reply is in the journal |
//! | `before_completion_commit` | the job's outcome is about to be committed |
//! | `before_delivery_send` | an outbox delivery (a webhook, an A2A push) is claimed, about to be POSTed |
//! | `stream_end_read` | a LangGraph run's stream saw its job end, about to read its last steps |
//! | `steps_reply_lost` | a journal write committed, and its answer is then lost (the write returns an error; never kills) |

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A place where a crash test can kill the daemon (see the table above).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Failpoint {
    AfterSubmitCommit,
    BeforeModelCall,
    AfterReplyRecorded,
    BeforeToolStart,
    ToolRunning,
    AfterToolResultRecorded,
    AfterApprovalRecorded,
    AfterCheckpoint,
    GateStarted,
    AfterGroupReplyRecorded,
    BeforeCompletionCommit,
    BeforeDeliverySend,
    StreamEndRead,
    StepsReplyLost,
}

impl Failpoint {
    /// Every failpoint, in the order a job meets them.
    pub const ALL: [Failpoint; 14] = [
        Failpoint::AfterSubmitCommit,
        Failpoint::BeforeModelCall,
        Failpoint::AfterReplyRecorded,
        Failpoint::BeforeToolStart,
        Failpoint::ToolRunning,
        Failpoint::AfterToolResultRecorded,
        Failpoint::AfterApprovalRecorded,
        Failpoint::AfterCheckpoint,
        Failpoint::GateStarted,
        Failpoint::AfterGroupReplyRecorded,
        Failpoint::BeforeCompletionCommit,
        Failpoint::BeforeDeliverySend,
        Failpoint::StreamEndRead,
        Failpoint::StepsReplyLost,
    ];

    /// The name `SA_FAILPOINTS` and the daemon's log use.
    pub fn name(self) -> &'static str {
        match self {
            Failpoint::AfterSubmitCommit => "after_submit_commit",
            Failpoint::BeforeModelCall => "before_model_call",
            Failpoint::AfterReplyRecorded => "after_reply_recorded",
            Failpoint::BeforeToolStart => "before_tool_start",
            Failpoint::ToolRunning => "tool_running",
            Failpoint::AfterToolResultRecorded => "after_tool_result_recorded",
            Failpoint::AfterApprovalRecorded => "after_approval_recorded",
            Failpoint::AfterCheckpoint => "after_checkpoint",
            Failpoint::GateStarted => "gate_started",
            Failpoint::AfterGroupReplyRecorded => "after_group_reply_recorded",
            Failpoint::BeforeCompletionCommit => "before_completion_commit",
            Failpoint::BeforeDeliverySend => "before_delivery_send",
            Failpoint::StreamEndRead => "stream_end_read",
            Failpoint::StepsReplyLost => "steps_reply_lost",
        }
    }

    fn named(name: &str) -> Option<Failpoint> {
        Failpoint::ALL
            .into_iter()
            .find(|point| point.name() == name)
    }
}

/// An `SA_FAILPOINTS` entry that arms nothing.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum FailpointError {
    #[error(
        "SA_FAILPOINTS names an unknown failpoint {name:?} (in {item:?}); the failpoints are: {}",
        Failpoint::ALL.map(Failpoint::name).join(", ")
    )]
    Unknown { name: String, item: String },
    #[error("SA_FAILPOINTS entry {item:?}: the hit after '@' must be a number from 1 up")]
    BadHit { item: String },
    #[error(
        "SA_FAILPOINTS entry {item:?}: only {} can pause (it is reached in async code); the others kill or panic",
        PAUSABLE.map(Failpoint::name).join(", ")
    )]
    CannotPause { item: String },
}

/// The points reached through [`reached`], where a `:pause` can wait
/// without blocking a runtime thread.
const PAUSABLE: [Failpoint; 2] = [Failpoint::BeforeCompletionCommit, Failpoint::StreamEndRead];

/// How long a `:pause` waits.
const PAUSE: Duration = Duration::from_secs(1);

/// What a firing failpoint does.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Action {
    Kill,
    Panic,
    Pause,
}

#[derive(Debug)]
struct Point {
    /// Fire on this hit (1-based).
    at: u64,
    hits: AtomicU64,
    action: Action,
}

fn parse(item: &str) -> Result<(Failpoint, Point), FailpointError> {
    let (spec, action) = match (item.strip_suffix(":panic"), item.strip_suffix(":pause")) {
        (Some(spec), _) => (spec, Action::Panic),
        (_, Some(spec)) => (spec, Action::Pause),
        _ => (item, Action::Kill),
    };
    let (name, at) = match spec.split_once('@') {
        Some((name, n)) => match n.parse::<u64>() {
            Ok(at) if at >= 1 => (name, at),
            _ => return Err(FailpointError::BadHit { item: item.into() }),
        },
        None => (spec, 1),
    };
    let point = Failpoint::named(name).ok_or_else(|| FailpointError::Unknown {
        name: name.into(),
        item: item.into(),
    })?;
    if action == Action::Pause && !PAUSABLE.contains(&point) {
        return Err(FailpointError::CannotPause { item: item.into() });
    }
    let armed = Point {
        at,
        hits: AtomicU64::new(0),
        action,
    };
    Ok((point, armed))
}

fn parse_all(spec: &str) -> Result<HashMap<Failpoint, Point>, FailpointError> {
    spec.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(parse)
        .collect()
}

/// Refuses an `SA_FAILPOINTS` that names no failpoint, so a crash test with
/// a misspelt name fails at the start instead of proving nothing.
pub fn check_env() -> Result<(), FailpointError> {
    match std::env::var("SA_FAILPOINTS") {
        Ok(spec) => parse_all(&spec).map(drop),
        Err(_) => Ok(()),
    }
}

fn armed() -> Option<&'static HashMap<Failpoint, Point>> {
    static ARMED: OnceLock<Option<HashMap<Failpoint, Point>>> = OnceLock::new();
    ARMED
        .get_or_init(|| parse_all(&std::env::var("SA_FAILPOINTS").ok()?).ok())
        .as_ref()
}

/// What this hit of `point` does, if it is the one that fires.
fn fires(point: Failpoint) -> Option<Action> {
    let armed = armed()?.get(&point)?;
    (armed.hits.fetch_add(1, Ordering::SeqCst) + 1 == armed.at).then_some(armed.action)
}

fn kill_self(point: Failpoint) -> ! {
    eprintln!("failpoint {}: killing the process", point.name());
    // SIGKILL to ourselves: no destructor, flush or atexit handler runs, as with `kill -9`.
    let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
    std::process::abort()
}

/// Whether `point` fires on this hit, for failpoints that inject an error
/// instead of killing (a lost reply).
pub fn fails(point: Failpoint) -> bool {
    let fired = fires(point).is_some();
    if fired {
        eprintln!("failpoint {}: injecting its error", point.name());
    }
    fired
}

/// Kills the process (or panics) here when `point` is armed for this hit.
pub fn hit(point: Failpoint) {
    act(point, fires(point));
}

fn act(point: Failpoint, action: Option<Action>) {
    match action {
        Some(Action::Kill) => kill_self(point),
        Some(Action::Panic) => panic!("failpoint {}: injected panic", point.name()),
        // Refused at parsing for points reached only through `hit`.
        Some(Action::Pause) | None => {}
    }
}

/// [`hit`] for a point reached in async code, which may also pause there
/// ([`PAUSABLE`]).
pub async fn reached(point: Failpoint) {
    match fires(point) {
        Some(Action::Pause) => {
            eprintln!("failpoint {}: pausing {PAUSE:?}", point.name());
            tokio::time::sleep(PAUSE).await;
        }
        action => act(point, action),
    }
}

/// Kills the process `after` from now when `point` is armed for this hit
/// (for "while something runs").
pub fn hit_after(point: Failpoint, after: Duration) {
    if fires(point).is_some() {
        std::thread::spawn(move || {
            std::thread::sleep(after);
            kill_self(point);
        });
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_name_hit_and_action() {
        let (point, armed) = parse("tool_running@4").unwrap();
        assert_eq!((point, armed.at), (Failpoint::ToolRunning, 4));
        assert_eq!(armed.action, Action::Kill);
        let (point, armed) = parse("before_model_call:panic").unwrap();
        assert_eq!((point, armed.at), (Failpoint::BeforeModelCall, 1));
        assert_eq!(armed.action, Action::Panic);
        let (_, armed) = parse("gate_started@2:panic").unwrap();
        assert!(armed.at == 2 && armed.action == Action::Panic);
        let (point, armed) = parse("before_completion_commit@3:pause").unwrap();
        assert_eq!((point, armed.at), (Failpoint::BeforeCompletionCommit, 3));
        assert_eq!(armed.action, Action::Pause);
        assert!(matches!(
            parse("tool_running:pause"),
            Err(FailpointError::CannotPause { .. })
        ));
    }

    #[test]
    fn a_misspelt_name_or_hit_is_refused_naming_the_entry() {
        let e = parse_all("after_reply_recorded, befor_model_call@2").unwrap_err();
        assert_eq!(
            e,
            FailpointError::Unknown {
                name: "befor_model_call".into(),
                item: "befor_model_call@2".into()
            }
        );
        assert!(e.to_string().contains("before_model_call"), "{e}");
        for bad in ["tool_running@0", "tool_running@x", "tool_running@"] {
            assert!(
                matches!(parse(bad), Err(FailpointError::BadHit { .. })),
                "{bad}"
            );
        }
    }

    #[test]
    fn every_name_maps_back_to_its_point() {
        for point in Failpoint::ALL {
            assert_eq!(Failpoint::named(point.name()), Some(point));
        }
    }
}
