//! LISTEN/NOTIFY between daemons sharing one queue.
//!
//! Every write that changes a job sends `NOTIFY` on the schema's channel
//! inside its transaction, so the notification goes out exactly when the
//! change commits. Each queue handle keeps one dedicated connection that
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
use tokio::sync::{broadcast, mpsc};
use tokio_postgres::{AsyncMessage, Client, NoTls, Notification};
use tokio_util::sync::CancellationToken;

use super::describe;
use crate::queue::JobId;

const MIN_BACKOFF: Duration = Duration::from_millis(100);
const MAX_BACKOFF: Duration = Duration::from_secs(10);
/// How often an idle LISTEN connection is checked (a half-open TCP
/// connection would otherwise go unnoticed until keepalives give up).
const PING_EVERY: Duration = Duration::from_secs(15);
const PING_TIMEOUT: Duration = Duration::from_secs(10);

/// What a notification tells the other daemons.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Change {
    /// The job may be leased now (submitted, released, resolved).
    Runnable,
    /// Its state or its event log changed.
    Updated,
}

/// The payload: `<sender instance> <r|u> <job id>`.
pub(super) fn payload(instance: &str, change: Change, id: &JobId) -> String {
    let kind = match change {
        Change::Runnable => 'r',
        Change::Updated => 'u',
    };
    format!("{instance} {kind} {id}")
}

/// Where notifications from other daemons go.
#[derive(Clone)]
pub(super) struct Sinks {
    /// This handle's id; its own notifications are dropped.
    pub instance: String,
    pub changes: broadcast::Sender<JobId>,
    pub runnable: broadcast::Sender<JobId>,
}

impl Sinks {
    /// Tells this handle's subscribers about a change (also used at commit
    /// for the handle's own writes).
    pub(super) fn publish(&self, change: Change, id: &JobId) {
        // No subscriber is not an error.
        let _ = self.changes.send(id.clone());
        if change == Change::Runnable {
            let _ = self.runnable.send(id.clone());
        }
    }

    fn deliver(&self, notification: &Notification) {
        let mut parts = notification.payload().splitn(3, ' ');
        let (Some(sender), Some(kind), Some(id)) = (parts.next(), parts.next(), parts.next())
        else {
            tracing::debug!(
                payload = notification.payload(),
                "ignoring a malformed queue notification"
            );
            return;
        };
        if sender == self.instance {
            return;
        }
        let change = if kind == "r" {
            Change::Runnable
        } else {
            Change::Updated
        };
        self.publish(change, &JobId::from(id));
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
                Some(n) => sinks.deliver(&n),
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
