//! Connection settings and versioned migrations of the PostgreSQL queue.
//!
//! Migrations run at start inside one transaction that holds a
//! transaction-scoped advisory lock keyed by the schema: several daemons
//! starting at once migrate once, the others wait and then find nothing to
//! do. The applied versions are rows of `schema_migrations`; a binary that
//! finds a version it does not know refuses to run against it.

use std::time::Duration;

use deadpool_postgres::Pool;
use tokio_postgres::error::SqlState;

use super::{describe, pool_error};
use crate::queue::{MigrationStatus, QueueError};

/// Ordered schema migrations; version N is `MIGRATIONS[N - 1]`.
///
/// Text columns that are sorted or compared (`id`, the journal's `scope` and
/// `step`) use the "C" collation so they order byte-wise, exactly as SQLite
/// orders them, whatever the database's locale.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_jobs_events_journal.sql"),
    include_str!("migrations/0002_finished_and_parked.sql"),
    include_str!("migrations/0003_messages_conversations.sql"),
    include_str!("migrations/0004_crash_resumes.sql"),
    include_str!("migrations/0005_awaiting_approval.sql"),
    include_str!("migrations/0006_budgets.sql"),
    include_str!("migrations/0007_nested_spend.sql"),
    include_str!("migrations/0008_owners.sql"),
    include_str!("migrations/0009_outcomes.sql"),
    include_str!("migrations/0010_forks.sql"),
    include_str!("migrations/0011_schedules_outbox.sql"),
    include_str!("migrations/0012_a2a_push.sql"),
    include_str!("migrations/0013_delivery_claims.sql"),
    include_str!("migrations/0014_conversation_owners.sql"),
    include_str!("migrations/0015_budget_reservations.sql"),
    include_str!("migrations/0016_job_kind_controls.sql"),
    include_str!("migrations/0017_conversations_per_key.sql"),
    include_str!("migrations/0018_schedule_missed_fires.sql"),
    include_str!("migrations/0019_fair_lease.sql"),
    include_str!("migrations/0020_lease_cursor.sql"),
    include_str!("migrations/0021_refused.sql"),
    include_str!("migrations/0022_keyed_jobs.sql"),
    include_str!("migrations/0023_tracestate.sql"),
    include_str!("migrations/0024_release_decisions.sql"),
    include_str!("migrations/0025_thread_metadata.sql"),
    include_str!("migrations/0026_run_meta.sql"),
    include_str!("migrations/0027_store_items.sql"),
    include_str!("migrations/0028_queued_turns.sql"),
    include_str!("migrations/0029_assistants.sql"),
];

/// The schema version this binary writes.
pub const SCHEMA_VERSION: u32 = MIGRATIONS.len() as u32;

/// How to reach the queue's database.
#[derive(Clone)]
pub struct PostgresOptions {
    /// `postgres://user@host:port/db` or `host=… user=… dbname=…`, without
    /// a password.
    pub url: String,
    /// Read by the daemon from the variable `queue.password_env` names.
    pub password: Option<String>,
    /// The schema holding the queue's tables (created when missing).
    pub schema: String,
    /// Connections kept by this daemon (the LISTEN connection is extra).
    pub pool_size: usize,
}

impl std::fmt::Debug for PostgresOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresOptions")
            .field("url", &self.url)
            .field("password", &self.password.as_ref().map(|_| "<redacted>"))
            .field("schema", &self.schema)
            .field("pool_size", &self.pool_size)
            .finish()
    }
}

impl PostgresOptions {
    /// Options for `url` with the defaults (`public`,
    /// `config::default_pool_size` connections).
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            password: None,
            schema: "public".into(),
            pool_size: crate::config::default_pool_size(),
        }
    }

    /// Where errors say the queue lives.
    pub(super) fn label(&self) -> String {
        format!("{} (schema {})", self.url, self.schema)
    }

    /// The driver's settings: the URL, the password, and every connection's
    /// `search_path` set to the schema at connection start.
    pub(super) fn connect_config(&self) -> Result<tokio_postgres::Config, QueueError> {
        check_schema_name(&self.schema)?;
        if self.pool_size == 0 {
            return Err(QueueError::Setting {
                key: "queue.pool_size",
                message: "must be at least 1 (the default is 4 per CPU core, 8 to 32)".into(),
            });
        }
        let mut config: tokio_postgres::Config =
            self.url.parse().map_err(|e| QueueError::Setting {
                key: "queue.url",
                // Not echoed: a malformed string may still hold a password.
                message: format!(
                    "not a PostgreSQL connection string: {e}; write it as postgres://USER@HOST:PORT/DATABASE"
                ),
            })?;
        if config.get_password().is_some() {
            return Err(QueueError::Setting {
                key: "queue.url",
                message: "contains a password; remove it and name an environment variable holding it in queue.password_env".into(),
            });
        }
        if let Some(password) = &self.password {
            config.password(password.as_bytes());
        }
        // The schema name was checked to be a plain identifier, so it needs
        // no quoting inside the startup options. (The hot path's planner
        // settings are set per transaction, `sql::BEGIN_HOT`, not here:
        // other statements keep PostgreSQL's defaults.)
        let search_path = format!("-c search_path={}", self.schema);
        let options = match config.get_options() {
            Some(existing) if !existing.trim().is_empty() => format!("{existing} {search_path}"),
            _ => search_path,
        };
        config.options(options);
        if config.get_application_name().is_none() {
            config.application_name("structured-agents");
        }
        config.connect_timeout(Duration::from_secs(10));
        // Notice a vanished peer within about a minute rather than hours.
        config.keepalives_idle(Duration::from_secs(30));
        Ok(config)
    }
}

/// Only plain lowercase identifiers: they need no quoting in `search_path`,
/// in SQL and in the notification channel name, and PostgreSQL does not fold
/// them to another name.
fn check_schema_name(schema: &str) -> Result<(), QueueError> {
    let mut chars = schema.chars();
    let plain = matches!(chars.next(), Some('a'..='z' | '_'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
        && schema.len() <= 48;
    if plain {
        Ok(())
    } else {
        Err(QueueError::Setting {
            key: "queue.schema",
            message: format!(
                "{schema:?} is not a plain schema name: use lowercase letters, digits and _, starting with a letter or _, at most 48 characters"
            ),
        })
    }
}

/// Brings the schema up to [`SCHEMA_VERSION`] (or with `check_only` only
/// reports where it stands), holding the schema's advisory lock.
pub(super) async fn migrate(
    pool: &Pool,
    options: &PostgresOptions,
    check_only: bool,
) -> Result<MigrationStatus, QueueError> {
    let mut client = pool.get().await.map_err(|e| pool_error(options, e))?;
    let tx = client.transaction().await.map_err(|e| store(options, &e))?;
    match migrate_in(&tx, options, check_only).await {
        Ok(status) if status.applied.is_empty() => {
            // Nothing written: end the transaction and free the lock.
            tx.rollback().await.map_err(|e| store(options, &e))?;
            Ok(status)
        }
        Ok(status) => {
            tx.commit().await.map_err(|e| store(options, &e))?;
            Ok(status)
        }
        Err(e) => {
            // At once, so the lock is not held until the pool closes the
            // connection; a failure here means the connection is gone, which
            // ends the transaction too.
            let _ = tx.rollback().await;
            Err(e)
        }
    }
}

fn store(options: &PostgresOptions, e: &tokio_postgres::Error) -> QueueError {
    QueueError::Store {
        path: options.label(),
        detail: format!("migrating the schema: {}", describe(e)),
    }
}

/// Migrates (or, `check_only`, checks) the schema inside `tx`, under the
/// advisory lock that makes concurrent starts queue up.
async fn migrate_in(
    tx: &deadpool_postgres::Transaction<'_>,
    options: &PostgresOptions,
    check_only: bool,
) -> Result<MigrationStatus, QueueError> {
    let store = |e: tokio_postgres::Error| store(options, &e);
    // Held until commit or rollback: concurrent starts queue up here.
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))",
        &[&format!(
            "structured-agents queue migrations {}",
            options.schema
        )],
    )
    .await
    .map_err(store)?;
    let (schema_exists, found) = stored_version(tx, options).await?;
    if found > SCHEMA_VERSION {
        return Err(QueueError::SchemaTooNew {
            location: options.label(),
            found,
            supported: SCHEMA_VERSION,
        });
    }
    let mut status = MigrationStatus {
        found,
        supported: SCHEMA_VERSION,
        applied: Vec::new(),
    };
    if check_only || found == SCHEMA_VERSION {
        return Ok(status);
    }
    status.applied = apply_migrations(tx, options, schema_exists, found).await?;
    Ok(status)
}

/// Whether the schema exists, and the version of its newest migration (0
/// without a `schema_migrations` table).
async fn stored_version(
    tx: &deadpool_postgres::Transaction<'_>,
    options: &PostgresOptions,
) -> Result<(bool, u32), QueueError> {
    let store = |e: tokio_postgres::Error| store(options, &e);
    let schema_exists = tx
        .query_opt(
            "SELECT 1 FROM pg_namespace WHERE nspname = $1",
            &[&options.schema],
        )
        .await
        .map_err(store)?
        .is_some();
    let table_exists: bool = tx
        .query_one("SELECT to_regclass('schema_migrations') IS NOT NULL", &[])
        .await
        .map_err(store)?
        .try_get(0)
        .map_err(store)?;
    let found: u32 = if table_exists {
        let v: i32 = tx
            .query_one(
                "SELECT COALESCE(MAX(version), 0) FROM schema_migrations",
                &[],
            )
            .await
            .map_err(store)?
            .try_get(0)
            .map_err(store)?;
        v.max(0) as u32
    } else {
        0
    };
    Ok((schema_exists, found))
}

/// Creates the schema (unless it exists) and `schema_migrations`, then
/// applies every migration after `found`, each recorded; the versions
/// applied.
async fn apply_migrations(
    tx: &deadpool_postgres::Transaction<'_>,
    options: &PostgresOptions,
    schema_exists: bool,
    found: u32,
) -> Result<Vec<u32>, QueueError> {
    if !schema_exists {
        // Checked first because CREATE SCHEMA IF NOT EXISTS needs the CREATE
        // privilege on the database even when the schema exists.
        tx.batch_execute(&format!("CREATE SCHEMA {}", options.schema))
            .await
            .map_err(|e| create_error(options, &e))?;
    }
    tx.batch_execute(
        "CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY, applied_at TIMESTAMPTZ NOT NULL DEFAULT now())",
    )
    .await
    .map_err(|e| create_error(options, &e))?;
    let mut applied = Vec::new();
    for (i, migration) in MIGRATIONS.iter().enumerate().skip(found as usize) {
        let version = (i + 1) as u32;
        tx.batch_execute(migration)
            .await
            .map_err(|e| QueueError::Store {
                path: options.label(),
                detail: format!("migration {version} failed: {}", describe(&e)),
            })?;
        tx.execute(
            "INSERT INTO schema_migrations (version) VALUES ($1)",
            &[&(version as i32)],
        )
        .await
        .map_err(|e| store(options, &e))?;
        applied.push(version);
    }
    Ok(applied)
}

fn create_error(options: &PostgresOptions, e: &tokio_postgres::Error) -> QueueError {
    let hint = if e.code() == Some(&SqlState::INSUFFICIENT_PRIVILEGE) {
        format!(
            "; grant the user CREATE on the database (or on schema {}), or have an owner run `structured-agents migrate` once",
            options.schema
        )
    } else {
        String::new()
    };
    QueueError::Store {
        path: options.label(),
        detail: format!("cannot create the queue tables: {}{hint}", describe(e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_must_be_plain_identifiers() {
        for ok in ["public", "sa_1", "_x"] {
            assert!(check_schema_name(ok).is_ok(), "{ok}");
        }
        for bad in ["", "1a", "Public", "a-b", "a b", "x\"y", &"a".repeat(49)] {
            let err = check_schema_name(bad).unwrap_err().to_string();
            assert!(err.starts_with("queue.schema: "), "{err}");
        }
    }

    #[test]
    fn a_password_in_the_url_is_refused() {
        let err = PostgresOptions::new("postgres://u:secret@localhost/db")
            .connect_config()
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("queue.url") && err.contains("queue.password_env"),
            "{err}"
        );
        assert!(!err.contains("secret"), "{err}");
        let config = PostgresOptions {
            password: Some("pw".into()),
            schema: "s1".into(),
            ..PostgresOptions::new("postgres://u@localhost/db")
        }
        .connect_config()
        .unwrap();
        assert_eq!(config.get_password(), Some(&b"pw"[..]));
        assert_eq!(config.get_options(), Some("-c search_path=s1"));
    }
}
