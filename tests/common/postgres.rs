//! The local PostgreSQL for tests: where it is, a fresh schema per test
//! (dropped, with everything in it, when the test ends) and what to do when
//! the server is missing — the tests fail saying so; they never skip.

/// How to get a server for the PostgreSQL tests.
pub const START_POSTGRES: &str = "run the tests through `scripts/test` or `scripts/with-postgres cargo nextest run …` (they start a throwaway cluster when none answers), start the local one with `pg_ctlcluster --skip-systemctl-redirect 15 main start` (trust auth, database `test`), or point SA_TEST_POSTGRES_URL at a server";

pub fn postgres_url() -> String {
    std::env::var("SA_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// A connection to the test server's database; fails with how to start the
/// server when it is not reachable.
pub async fn server_client() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&postgres_url(), tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| {
            panic!(
                "PostgreSQL at {} is not reachable: {e}\n{START_POSTGRES}",
                postgres_url()
            )
        });
    tokio::spawn(connection);
    client
}

/// A uniquely named schema, dropped (with everything in it) when the test ends.
pub struct Schema {
    pub name: String,
}

impl Schema {
    pub fn fresh() -> Self {
        Self {
            name: format!("sa_test_{}", uuid::Uuid::new_v4().simple()),
        }
    }

    /// A daemon's queue settings for this schema, through the environment
    /// (a test site's config file already has a [queue] table).
    pub fn daemon_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("STRUCTURED_AGENTS_QUEUE__BACKEND", "postgres".into()),
            ("STRUCTURED_AGENTS_QUEUE__URL", postgres_url()),
            ("STRUCTURED_AGENTS_QUEUE__SCHEMA", self.name.clone()),
            ("STRUCTURED_AGENTS_QUEUE__POOL_SIZE", "4".into()),
        ]
    }

    /// A direct connection to the server; fails with how to start it when it
    /// is not reachable.
    pub async fn client(&self) -> tokio_postgres::Client {
        server_client().await
    }
}

impl Drop for Schema {
    fn drop(&mut self) {
        // Bounded: a connection the test left inside a transaction must not
        // hang the test here.
        let sql = format!(
            "SET lock_timeout = '10s'; DROP SCHEMA IF EXISTS {} CASCADE",
            self.name
        );
        if !execute_while_dropping(sql) {
            eprintln!("could not drop test schema {}", self.name);
        }
    }
}

/// Runs `sql` on the test server from a thread with its own runtime (Drop is
/// not async); whether it worked. Never panics: it may run while unwinding.
fn execute_while_dropping(sql: String) -> bool {
    let done = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .ok()?;
        runtime.block_on(async {
            let (client, connection) =
                tokio_postgres::connect(&postgres_url(), tokio_postgres::NoTls)
                    .await
                    .ok()?;
            tokio::spawn(connection);
            client.batch_execute(&sql).await.ok()
        })
    })
    .join();
    matches!(done, Ok(Some(())))
}

/// `url` with its database replaced by `database` (the query string kept).
fn with_database(url: &str, database: &str) -> String {
    let (base, query) = match url.split_once('?') {
        Some((base, query)) => (base, format!("?{query}")),
        None => (url, String::new()),
    };
    let (scheme, rest) = base.split_once("://").unwrap_or(("postgres", base));
    let authority = rest.split('/').next().unwrap_or(rest);
    format!("{scheme}://{authority}/{database}{query}")
}

/// A database of its own, for a test that reads database-wide counters
/// (`pg_stat_database.deadlocks`), which other tests' schemas in the shared
/// database would disturb. Dropped (its connections ended) when the test
/// ends.
pub struct Database {
    pub name: String,
    pub url: String,
}

impl Database {
    pub async fn fresh() -> Self {
        let name = format!("sa_test_db_{}", uuid::Uuid::new_v4().simple());
        let client = server_client().await;
        client
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .unwrap_or_else(|e| panic!("creating database {name}: {e}\n{START_POSTGRES}"));
        let url = with_database(&postgres_url(), &name);
        Self { name, url }
    }

    /// The deadlocks PostgreSQL detected in this database, read once every
    /// other connection to it has gone: a backend reports its counters when
    /// it exits, so the figure then includes every deadlock of the test.
    /// Drop the queues first.
    pub async fn deadlocks_once_idle(&self) -> i64 {
        let client = server_client().await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
        loop {
            let others: i64 = client
                .query_one(
                    "SELECT COUNT(*) FROM pg_stat_activity WHERE datname = $1",
                    &[&self.name],
                )
                .await
                .unwrap_or_else(|e| panic!("reading pg_stat_activity: {e}"))
                .get(0);
            if others == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{others} connections to {} never closed",
                self.name
            );
            tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        }
        client
            .batch_execute("SELECT pg_stat_clear_snapshot()")
            .await
            .unwrap_or_else(|e| panic!("clearing the stats snapshot: {e}"));
        client
            .query_one(
                "SELECT deadlocks FROM pg_stat_database WHERE datname = $1",
                &[&self.name],
            )
            .await
            .unwrap_or_else(|e| panic!("reading pg_stat_database: {e}"))
            .get(0)
    }
}

impl Drop for Database {
    fn drop(&mut self) {
        let sql = format!("DROP DATABASE IF EXISTS {} WITH (FORCE)", self.name);
        if !execute_while_dropping(sql) {
            eprintln!("could not drop test database {}", self.name);
        }
    }
}
