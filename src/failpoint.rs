//! Named failpoints for crash tests: places where the daemon kills itself
//! with SIGKILL, exactly as `kill -9` would, so a test can prove a job ends
//! exactly once whatever the moment of the crash.
//!
//! Inert unless `SA_FAILPOINTS` is set: a comma-separated list of
//! `name` (fire on the first hit) or `name@N` (fire on the N-th hit), each
//! optionally followed by `:panic` to panic there instead of dying (to prove
//! a panic is contained). The names, in the order a job meets them:
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
//! | `steps_reply_lost` | a journal write committed, and its answer is then lost (the write returns an error; never kills) |

use std::collections::HashMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// What a firing failpoint does.
#[derive(Clone, Copy, PartialEq)]
enum Action {
    Kill,
    Panic,
}

struct Point {
    /// Fire on this hit (1-based).
    at: u64,
    hits: AtomicU64,
    action: Action,
}

struct Armed {
    points: HashMap<String, Point>,
}

fn parse(item: &str) -> (String, Point) {
    let (spec, action) = match item.strip_suffix(":panic") {
        Some(spec) => (spec, Action::Panic),
        None => (item, Action::Kill),
    };
    let (name, at) = match spec.split_once('@') {
        Some((name, n)) => (name, n.parse().unwrap_or(1)),
        None => (spec, 1),
    };
    (
        name.to_string(),
        Point {
            at,
            hits: AtomicU64::new(0),
            action,
        },
    )
}

fn armed() -> Option<&'static Armed> {
    static ARMED: OnceLock<Option<Armed>> = OnceLock::new();
    ARMED
        .get_or_init(|| {
            let spec = std::env::var("SA_FAILPOINTS").ok()?;
            let points = spec
                .split(',')
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .map(parse)
                .collect();
            Some(Armed { points })
        })
        .as_ref()
}

/// What this hit of `name` does, if it is the one that fires.
fn fires(name: &str) -> Option<Action> {
    let point = armed()?.points.get(name)?;
    (point.hits.fetch_add(1, Ordering::SeqCst) + 1 == point.at).then_some(point.action)
}

fn kill_self(name: &str) -> ! {
    eprintln!("failpoint {name}: killing the process");
    // SIGKILL to ourselves: no destructor, flush or atexit handler runs, as with `kill -9`.
    let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
    std::process::abort()
}

/// Whether `name` fires on this hit, for failpoints that inject an error
/// instead of killing (a lost reply).
pub fn fails(name: &str) -> bool {
    fires(name).is_some()
}

/// Kills the process (or panics) here when `name` is armed for this hit.
pub fn hit(name: &str) {
    match fires(name) {
        Some(Action::Kill) => kill_self(name),
        Some(Action::Panic) => panic!("failpoint {name}: injected panic"),
        None => {}
    }
}

/// Kills the process `after` from now when `name` is armed for this hit
/// (for "while something runs").
pub fn hit_after(name: &'static str, after: Duration) {
    if fires(name).is_some() {
        std::thread::spawn(move || {
            std::thread::sleep(after);
            kill_self(name);
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_name_hit_and_action() {
        let (name, point) = parse("tool_running@4");
        assert_eq!((name.as_str(), point.at), ("tool_running", 4));
        assert!(point.action == Action::Kill);
        let (name, point) = parse("before_model_call:panic");
        assert_eq!((name.as_str(), point.at), ("before_model_call", 1));
        assert!(point.action == Action::Panic);
        let (_, point) = parse("x@2:panic");
        assert!(point.at == 2 && point.action == Action::Panic);
    }
}
