//! Reads an endpoint's load page every `poll_interval`, each read bounded by
//! `poll_timeout` and `max_page_bytes`, and tells its gate what it read —
//! or that it could not read it. Starting a gate with its poller is here
//! too ([`LoadGate::start`]): the poller calls the gate, the gate knows no
//! poller.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::gate::LoadGate;
use super::signals::{self, PageError};
use crate::config::{LoadConfig, LoadKind};
use crate::events::daemon::DaemonBus;

impl LoadGate {
    /// A gate for `endpoint`, its poller started (it stops when the gate is
    /// dropped, e.g. replaced by a reload).
    pub fn start(endpoint: String, config: LoadConfig, bus: DaemonBus) -> Arc<Self> {
        let gate = Arc::new(Self::new(endpoint, config, bus));
        spawn(&gate);
        gate
    }
}

/// Starts polling for `gate`; the task ends once the gate is dropped. With
/// no runtime (or no page to read) the gate is told it falls back.
fn spawn(gate: &Arc<LoadGate>) {
    let config = gate.config();
    let Some(url) = config
        .metrics_url
        .clone()
        .filter(|_| config.kind != LoadKind::Fixed)
    else {
        gate.unreadable("no metrics_url to read".into());
        return;
    };
    let client = reqwest::Client::builder()
        .timeout(config.poll_timeout.into())
        .connect_timeout(config.poll_timeout.into())
        .build();
    let (client, runtime) = match (client, tokio::runtime::Handle::try_current()) {
        (Ok(client), Ok(runtime)) => (client, runtime),
        (Err(e), _) => return gate.unreadable(format!("cannot build an HTTP client: {e}")),
        (_, Err(e)) => return gate.unreadable(format!("no runtime to poll on: {e}")),
    };
    let weak = Arc::downgrade(gate);
    runtime.spawn(poll(weak, client, url));
}

async fn poll(gate: Weak<LoadGate>, client: reqwest::Client, url: String) {
    let Some(interval) = gate.upgrade().map(|g| g.config().poll_interval.into()) else {
        return;
    };
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(gate) = gate.upgrade() else {
            return;
        };
        let config = gate.config();
        let limit = config.max_page_bytes;
        let timeout: Duration = config.poll_timeout.into();
        // The client's timeout covers the whole exchange; this one also
        // bounds a body that trickles in.
        let read = tokio::time::timeout(timeout, read_page(&client, &url, limit)).await;
        let outcome = match read {
            Ok(Ok(page)) => signals::parse(config.kind, &page),
            Ok(Err(why)) => Err(why),
            Err(_) => Err(PageError::Timeout(timeout)),
        };
        match outcome {
            Ok(signals) => gate.read(signals),
            Err(why) => gate.unreadable(format!("{url}: {why}")),
        }
    }
}

async fn read_page(client: &reqwest::Client, url: &str, limit: usize) -> Result<String, PageError> {
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|e| PageError::Request(e.to_string()))?;
    if !response.status().is_success() {
        return Err(PageError::Status(response.status()));
    }
    let (bytes, more) = crate::client::read_capped(response, limit)
        .await
        .map_err(|e| PageError::Request(e.to_string()))?;
    if more {
        return Err(PageError::TooLarge(limit));
    }
    String::from_utf8(bytes).map_err(|_| PageError::NotText)
}
