//! systemd readiness protocol (sd_notify): READY, RELOADING with
//! MONOTONIC_USEC, STATUS, STOPPING and WATCHDOG pings. A no-op when
//! `NOTIFY_SOCKET` is not set.

use std::time::Duration;

use sd_notify::NotifyState;

fn send(states: &[NotifyState<'_>]) {
    if let Err(e) = sd_notify::notify(states) {
        tracing::warn!(error = %e, "sd_notify failed");
    }
}

pub fn ready(status: &str) {
    send(&[NotifyState::Ready, NotifyState::Status(status)]);
}

pub fn reloading() {
    match NotifyState::monotonic_usec_now() {
        Ok(now) => send(&[NotifyState::Reloading, now]),
        Err(e) => {
            tracing::warn!(error = %e, "cannot read the monotonic clock for RELOADING");
            send(&[NotifyState::Reloading]);
        }
    }
}

pub fn stopping() {
    send(&[NotifyState::Stopping, NotifyState::Status("draining jobs")]);
}

pub fn status(text: &str) {
    send(&[NotifyState::Status(text)]);
}

/// Pings the watchdog at half its interval while `stop` is not cancelled.
pub fn spawn_watchdog(stop: tokio_util::sync::CancellationToken) {
    let Some(interval) = sd_notify::watchdog_enabled() else {
        return;
    };
    let every = (interval / 2).max(Duration::from_millis(100));
    tokio::spawn(async move {
        loop {
            tokio::select! {
                _ = tokio::time::sleep(every) => send(&[NotifyState::Watchdog]),
                _ = stop.cancelled() => return,
            }
        }
    });
}
