//! Announcing committed changes to the other daemons: one task per queue
//! handle takes the changes of every write that committed meanwhile and
//! sends them in as few `NOTIFY`s as fit (one statement, outside the
//! writes' transactions).
//!
//! Why not `pg_notify` inside each write: a transaction that notifies holds
//! the database-wide notify lock from before its commit until after it, WAL
//! flush included, so notifying commits run one at a time and PostgreSQL
//! cannot group them. Measured on this project's 2-core machine with
//! `pgbench -c 8` (a one-row `UPDATE` a transaction): 6,077 commits/s
//! without a notification, 1,300 with one in each. With writes on a pool,
//! every lease, journal step and finish would pay that; here only the
//! notifier's own statements do, a batch at a time.
//!
//! A change is announced just after its write committed, never before; a
//! daemon that dies between the two leaves it unannounced, which the
//! listeners already live with (a lost LISTEN connection misses
//! notifications too): workers and followers also recheck on their own.

use deadpool_postgres::Pool;
use tokio::sync::mpsc;

use super::describe;
use super::listen;
use crate::queue::JobId;
use crate::queue::tx::Change;

/// Changes one `NOTIFY` statement carries at most (its payloads are split
/// to fit PostgreSQL's limit by `listen::payloads`).
const MAX_BATCH: usize = 4096;

/// Where committed changes go to be announced.
#[derive(Clone)]
pub(super) struct Notifier {
    sender: mpsc::UnboundedSender<Vec<(Change, JobId)>>,
}

impl Notifier {
    /// Starts the task (on the current Tokio runtime); it ends when every
    /// `Notifier` is dropped.
    pub(super) fn start(pool: Pool, channel: String, instance: String, label: String) -> Self {
        let (sender, receiver) = mpsc::unbounded_channel();
        tokio::spawn(announce(receiver, pool, channel, instance, label));
        Self { sender }
    }

    /// Announces the changes of a write that committed.
    pub(super) fn send(&self, changes: &[(Change, JobId)]) {
        if changes.is_empty() {
            return;
        }
        // The task ends only with the handle: nothing is lost but at shutdown.
        let _ = self.sender.send(changes.to_vec());
    }
}

async fn announce(
    mut receiver: mpsc::UnboundedReceiver<Vec<(Change, JobId)>>,
    pool: Pool,
    channel: String,
    instance: String,
    label: String,
) {
    let mut batch: Vec<Vec<(Change, JobId)>> = Vec::new();
    while receiver.recv_many(&mut batch, MAX_BATCH).await > 0 {
        let changes: Vec<(Change, JobId)> = batch.drain(..).flatten().collect();
        let payloads = listen::payloads(&instance, &changes);
        let sent = match pool.get().await {
            Ok(client) => {
                let sql = "SELECT pg_notify($1, p) FROM unnest($2::text[]) AS p";
                client
                    .execute(sql, &[&channel, &payloads])
                    .await
                    .map(|_| ())
                    .map_err(|e| describe(&e))
            }
            Err(e) => Err(e.to_string()),
        };
        if let Err(error) = sent {
            // The changes are committed; other daemons see them when they
            // next recheck.
            tracing::warn!(
                queue = %label,
                error,
                changes = changes.len(),
                "could not announce committed changes to the other daemons; they see them when they next recheck"
            );
        }
    }
}
