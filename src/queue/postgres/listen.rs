//! LISTEN/NOTIFY between daemons sharing one queue.
//!
//! The changes of every committed write are sent with `NOTIFY` on the
//! schema's channel just after they commit (`notify`, batched, never
//! before the commit). Each queue handle keeps one dedicated connection that
//! `LISTEN`s on that channel and feeds the handle's broadcast channels, so a
//! job submitted or advanced on daemon B wakes SSE clients (and, when wired,
//! workers) on daemon A. A handle hears its own notifications too; it drops
//! them, because it already told its own subscribers at commit.
//!
//! The connection is reopened with backoff when it is lost. Notifications
//! sent while it was down are not replayed: subscribers must (and do)
//! recheck periodically, so a gap delays them but never loses work.

use std::time::Duration;

use futures::StreamExt;
use tokio::sync::mpsc;
use tokio_postgres::{AsyncMessage, Client, NoTls, Notification};
use tokio_util::sync::CancellationToken;

use super::describe;
use crate::queue::JobId;
use crate::queue::tx::{Change, Wakeups};

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How often an idle LISTEN connection is checked (a half-open TCP
/// connection would otherwise go unnoticed until keepalives give up).
const PING_EVERY: Duration = Duration::from_secs(15);
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// Largest payload of one notification (PostgreSQL refuses 8000 bytes and
/// more): a transaction's changes go out in as few notifications as fit.
const MAX_PAYLOAD: usize = 7900;

/// The payloads announcing a transaction's changes, coalesced:
/// `<sender instance> <r|u|c> <job id> [<r|u|c> <job id>]...`, each job once
/// (a cancel request wins, then runnable, then updated).
pub(super) fn payloads(instance: &str, changes: &[(Change, JobId)]) -> Vec<String> {
    let mut seen: Vec<(Change, &JobId)> = Vec::new();
    for (change, id) in changes {
        match seen.iter_mut().find(|(_, seen)| *seen == id) {
            // A cancel request wins (the worker must hear it), then runnable.
            Some(entry) if entry.0 != Change::CancelRequested && *change != Change::Updated => {
                entry.0 = *change
            }
            Some(_) => {}
            None => seen.push((*change, id)),
        }
    }
    let mut out: Vec<String> = Vec::new();
    for (change, id) in seen {
        let kind = match change {
            Change::Runnable => 'r',
            Change::Updated => 'u',
            Change::CancelRequested => 'c',
        };
        let item = format!(" {kind} {id}");
        match out.last_mut() {
            Some(last) if last.len() + item.len() <= MAX_PAYLOAD => last.push_str(&item),
            _ => out.push(format!("{instance}{item}")),
        }
    }
    out
}

/// Where notifications from other daemons go.
#[derive(Clone)]
pub(super) struct Sinks {
    /// This handle's id; its own notifications are dropped.
    pub instance: String,
    pub wake: Wakeups,
}

impl Sinks {
    fn deliver(&self, payload: &str) {
        let mut parts = payload.split(' ');
        let Some(sender) = parts.next() else {
            return;
        };
        if sender == self.instance {
            return;
        }
        while let (Some(kind), Some(id)) = (parts.next(), parts.next()) {
            let change = match kind {
                "r" => Change::Runnable,
                "c" => Change::CancelRequested,
                _ => Change::Updated,
            };
            self.wake.publish(change, &JobId::from(id));
        }
    }
}

/// An open LISTEN connection.
pub(super) struct Listening {
    client: Client,
    notifications: mpsc::UnboundedReceiver<Notification>,
}

/// Opens a connection and `LISTEN`s on `channel` (a plain identifier).
pub(super) async fn listen(
    config: &tokio_postgres::Config,
    channel: &str,
) -> Result<Listening, tokio_postgres::Error> {
    let (client, mut connection) = config.connect(NoTls).await?;
    let (sender, notifications) = mpsc::unbounded_channel();
    // Drives the connection and hands notifications over; it ends when the
    // connection fails or the client is dropped.
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| connection.poll_message(cx));
        while let Some(message) = messages.next().await {
            match message {
                Ok(AsyncMessage::Notification(n)) => {
                    if sender.send(n).is_err() {
                        return;
                    }
                }
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %describe(&e), "queue LISTEN connection failed");
                    return;
                }
            }
        }
    });
    client.batch_execute(&format!("LISTEN {channel}")).await?;
    Ok(Listening {
        client,
        notifications,
    })
}

/// Forwards notifications until `stop`, reconnecting with backoff.
pub(super) async fn run(
    mut first: Option<Listening>,
    config: tokio_postgres::Config,
    channel: String,
    sinks: Sinks,
    stop: CancellationToken,
    label: String,
) {
    let mut backoff = MIN_BACKOFF;
    loop {
        let listening = match first.take() {
            Some(l) => l,
            None => {
                tokio::select! {
                    _ = stop.cancelled() => return,
                    _ = tokio::time::sleep(backoff) => {}
                }
                match listen(&config, &channel).await {
                    Ok(l) => {
                        tracing::info!(queue = %label, "queue LISTEN connection restored");
                        backoff = MIN_BACKOFF;
                        l
                    }
                    Err(e) => {
                        tracing::warn!(
                            queue = %label,
                            error = %describe(&e),
                            retry_in = ?backoff,
                            "cannot reopen the queue LISTEN connection; other daemons' changes reach this one only by polling meanwhile"
                        );
                        backoff = (backoff * 2).min(MAX_BACKOFF);
                        continue;
                    }
                }
            }
        };
        match forward(listening, &sinks, &stop).await {
            None => return,
            Some(reason) => tracing::warn!(
                queue = %label,
                reason,
                "queue LISTEN connection lost; reconnecting"
            ),
        }
    }
}

/// Forwards until the connection is lost (→ why) or `stop` (→ `None`).
async fn forward(
    mut listening: Listening,
    sinks: &Sinks,
    stop: &CancellationToken,
) -> Option<String> {
    let mut ping = tokio::time::interval(PING_EVERY);
    ping.tick().await;
    loop {
        tokio::select! {
            _ = stop.cancelled() => return None,
            received = listening.notifications.recv() => match received {
                Some(n) => sinks.deliver(n.payload()),
                None => return Some("the connection closed".into()),
            },
            _ = ping.tick() => {
                match tokio::time::timeout(PING_TIMEOUT, listening.client.simple_query("SELECT 1")).await {
                    Ok(Ok(_)) => {}
                    Ok(Err(e)) => return Some(describe(&e)),
                    Err(_) => return Some(format!("no answer to a ping within {PING_TIMEOUT:?}")),
                }
            }
        }
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;

    /// What one daemon announces, another delivers to its own channels: a
    /// cancel request reaches the workers of every daemon, once per job,
    /// winning over the other changes of the same transaction.
    #[test]
    fn a_cancel_request_travels_between_daemons_and_wins_over_other_changes() {
        let (a, b, c) = (JobId::from("a"), JobId::from("b"), JobId::from("c"));
        let changes = [
            (Change::Updated, a.clone()),
            (Change::CancelRequested, a.clone()),
            (Change::Runnable, a.clone()),
            (Change::Runnable, b.clone()),
            (Change::Updated, b.clone()),
            (Change::Updated, c.clone()),
        ];
        let sent = payloads("one", &changes);
        assert_eq!(sent, vec!["one c a r b u c".to_string()]);

        let other = Sinks {
            instance: "two".into(),
            wake: Wakeups::new(),
        };
        let mut cancels = other.wake.cancels.subscribe();
        let mut runnable = other.wake.runnable.subscribe();
        let mut changed = other.wake.changes.subscribe();
        for payload in &sent {
            other.deliver(payload);
        }
        assert_eq!(cancels.try_recv().unwrap(), a);
        assert!(cancels.try_recv().is_err());
        assert_eq!(runnable.try_recv().unwrap(), b);
        assert!(runnable.try_recv().is_err());
        let all: Vec<JobId> = std::iter::from_fn(|| changed.try_recv().ok()).collect();
        assert_eq!(all, vec![a, b, c]);

        // A daemon drops its own announcements (it told its subscribers at commit).
        let own = Sinks {
            instance: "one".into(),
            wake: Wakeups::new(),
        };
        let mut own_cancels = own.wake.cancels.subscribe();
        own.deliver(&sent[0]);
        assert!(own_cancels.try_recv().is_err());
    }
}
