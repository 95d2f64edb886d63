//! What the kernel tells a run's live watchers while a step runs (never
//! stored; see `events::live`): a model call's HTTP attempts, its backoffs
//! and its waits for an endpoint slot, as the client notes them.

use std::time::SystemTime;

use crate::client::watch::{CallNote, CallWatcher};
use crate::events::LiveOut;
use crate::events::live::{ProgressKind, WaitFor};

/// `model_call_started` for try `attempt` of a model call.
pub(super) fn model_started(model: &str, messages: usize, attempt: u32) -> ProgressKind {
    ProgressKind::ModelCallStarted {
        model: model.to_string(),
        messages,
        attempt,
    }
}

/// The watcher of one model call: each failed HTTP attempt ends its call
/// (`model_call_ended`, not ok) and begins a backoff wait; the next attempt
/// ends the wait and starts the call again with its number; a wait for an
/// endpoint slot is a `model_slot` wait.
pub(super) fn model_call_watcher(
    live: LiveOut,
    turn: u32,
    model: String,
    messages: usize,
) -> CallWatcher {
    std::sync::Arc::new(move |note: CallNote<'_>| {
        for kind in progress_of(&note, &model, messages) {
            live.publish(turn, kind);
        }
    })
}

fn progress_of(note: &CallNote<'_>, model: &str, messages: usize) -> Vec<ProgressKind> {
    match note {
        CallNote::Retrying { error, delay, .. } => {
            let until = humantime::format_rfc3339_millis(SystemTime::now() + *delay);
            vec![
                ProgressKind::ModelCallEnded {
                    ok: false,
                    error: Some(error.to_string()),
                },
                ProgressKind::waiting(WaitFor::Backoff, Some(until.to_string())),
            ]
        }
        CallNote::Attempt(attempt) => vec![
            ProgressKind::WaitingEnded {
                waiting_for: WaitFor::Backoff,
            },
            model_started(model, messages, *attempt),
        ],
        CallNote::WaitingForSlot => vec![ProgressKind::waiting(WaitFor::ModelSlot, None)],
        CallNote::SlotTaken => vec![ProgressKind::WaitingEnded {
            waiting_for: WaitFor::ModelSlot,
        }],
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::client::ClientError;
    use std::time::Duration;

    fn kinds(note: CallNote<'_>) -> Vec<String> {
        progress_of(&note, "m", 4)
            .iter()
            .map(|kind| {
                serde_json::to_value(kind).unwrap()["kind"]
                    .as_str()
                    .unwrap()
                    .to_string()
            })
            .collect()
    }

    #[test]
    fn a_retry_ends_the_try_waits_out_the_backoff_and_starts_the_next_numbered() {
        let error = ClientError::Timeout {
            url: "http://m".into(),
            after: Duration::from_secs(1),
        };
        let retrying = CallNote::Retrying {
            attempt: 1,
            error: &error,
            delay: Duration::from_millis(200),
            model: "m",
        };
        assert_eq!(kinds(retrying), ["model_call_ended", "waiting"]);
        assert_eq!(
            kinds(CallNote::Attempt(2)),
            ["waiting_ended", "model_call_started"]
        );
        let next = progress_of(&CallNote::Attempt(2), "m", 4);
        assert_eq!(next[1], model_started("m", 4, 2));
        let slot =
            serde_json::to_value(&progress_of(&CallNote::WaitingForSlot, "m", 4)[0]).unwrap();
        assert_eq!(slot["for"], "model_slot");
    }
}
