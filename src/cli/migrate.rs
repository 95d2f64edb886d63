//! `structured-agents migrate`: brings the configured queue's schema up to
//! this binary's version (the daemon does the same at start), or with
//! `--check` only reports what is pending.

use std::path::Path;

use crate::config::{Config, QueueBackend};
use crate::queue::MigrationStatus;
use crate::queue::postgres::PostgresQueue;
use crate::queue::sqlite::{self, SqliteQueue};

/// Returns the exit code: 1 when `check` finds pending migrations.
pub async fn migrate(config: Option<&Path>, check: bool) -> anyhow::Result<i32> {
    let config = Config::load(config)?;
    let location = crate::queue::location(&config);
    let status: MigrationStatus = match config.queue.backend {
        QueueBackend::Sqlite => {
            let path = config.queue_path();
            let before = sqlite::schema_status(&path).await?;
            if check || before.pending() == 0 {
                before
            } else {
                // Opening the file applies its migrations.
                drop(SqliteQueue::open(&path, Default::default()).await?);
                MigrationStatus {
                    applied: (before.found + 1..=before.supported).collect(),
                    ..before
                }
            }
        }
        QueueBackend::Postgres => {
            let options = crate::queue::postgres_options(&config)?;
            PostgresQueue::migrate(&options, check).await?
        }
    };
    let pending = status.pending();
    if !status.applied.is_empty() {
        println!(
            "{location}: applied migrations {:?}; schema is at version {}",
            status.applied, status.supported
        );
    } else if pending == 0 {
        println!(
            "{location}: schema is at version {}, nothing to do",
            status.found
        );
    } else {
        println!(
            "{location}: schema is at version {}; {pending} migration(s) pending up to version {} (run `structured-agents migrate` to apply)",
            status.found, status.supported
        );
    }
    Ok(if check && pending > 0 { 1 } else { 0 })
}
