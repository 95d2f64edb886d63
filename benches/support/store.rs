//! The PostgreSQL a benchmark measures against (`SA_BENCH_POSTGRES_URL`,
//! default the local test server): its URL, a connection, a daemon's
//! environment for a schema of its own, and dropping that schema after.
//! Shared by the benchmarks so each talks to the store the same way.
// Each benchmark binary includes this file and uses only part of it.
#![allow(dead_code)]

pub fn postgres_url() -> String {
    std::env::var("SA_BENCH_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

pub async fn connect() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&postgres_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client
}

/// A fresh schema's name for one run.
pub fn fresh_schema() -> String {
    format!("sa_bench_{}", uuid::Uuid::new_v4().simple())
}

/// A daemon's queue settings for `schema`, through its environment.
pub fn postgres_env(schema: &str) -> Vec<(&'static str, String)> {
    vec![
        ("STRUCTURED_AGENTS_QUEUE__BACKEND", "postgres".to_string()),
        ("STRUCTURED_AGENTS_QUEUE__URL", postgres_url()),
        ("STRUCTURED_AGENTS_QUEUE__SCHEMA", schema.to_string()),
    ]
}

pub async fn drop_schema(schema: &str) {
    connect()
        .await
        .batch_execute(&format!("DROP SCHEMA IF EXISTS {schema} CASCADE"))
        .await
        .unwrap();
}
