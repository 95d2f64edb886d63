//! What PostgreSQL did during a bench run, to say which limit binds: WAL
//! records and flushes from `pg_stat_wal` (before and after), and what the
//! database's client backends were doing, sampled every 10 ms from
//! `pg_stat_activity` (a wait event, on CPU, or idle in a transaction:
//! waiting for the daemon's next statement).

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio_postgres::{Client, NoTls};
use tokio_util::sync::CancellationToken;

/// WAL counters: records, bytes, flushes (`wal_sync`).
#[derive(Debug, Clone, Copy, Default)]
struct Wal {
    records: i64,
    bytes: i64,
    syncs: i64,
}

pub struct PgProbe {
    client: Client,
    before: Wal,
    samples: Arc<Mutex<HashMap<String, u64>>>,
    stop: CancellationToken,
    sampler: tokio::task::JoinHandle<()>,
}

/// What a probe saw over a run.
pub struct PgReport {
    pub wal_syncs: i64,
    pub wal_records: i64,
    pub wal_bytes: i64,
    /// Share of the samples in each state, most frequent first.
    pub states: Vec<(String, f64)>,
}

async fn connect(url: &str) -> Client {
    let (client, connection) = tokio_postgres::connect(url, NoTls).await.unwrap();
    tokio::spawn(connection);
    client
}

async fn wal(client: &Client) -> Wal {
    let row = client
        .query_one(
            "SELECT wal_records, wal_bytes::bigint, wal_sync FROM pg_stat_wal",
            &[],
        )
        .await
        .unwrap();
    Wal {
        records: row.get(0),
        bytes: row.get(1),
        syncs: row.get(2),
    }
}

const SAMPLE: &str = "SELECT CASE WHEN state = 'active' THEN coalesce(wait_event_type || ':' || wait_event, 'on CPU') ELSE state END
    FROM pg_stat_activity
    WHERE backend_type = 'client backend' AND datname = current_database()
      AND pid <> pg_backend_pid() AND state IN ('active', 'idle in transaction')
      AND query NOT LIKE 'LISTEN%'";

impl PgProbe {
    pub async fn start(url: &str) -> Self {
        let client = connect(url).await;
        let before = wal(&client).await;
        let samples = Arc::new(Mutex::new(HashMap::new()));
        let stop = CancellationToken::new();
        let sampler = {
            let (sampler, samples, stop) = (connect(url).await, samples.clone(), stop.clone());
            tokio::spawn(async move {
                while !stop.is_cancelled() {
                    if let Ok(rows) = sampler.query(SAMPLE, &[]).await {
                        let mut samples = samples.lock().unwrap();
                        for row in rows {
                            *samples.entry(row.get::<_, String>(0)).or_insert(0) += 1;
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
        };
        Self {
            client,
            before,
            samples,
            stop,
            sampler,
        }
    }

    pub async fn finish(self) -> PgReport {
        self.stop.cancel();
        let _ = self.sampler.await;
        let after = wal(&self.client).await;
        let samples = self.samples.lock().unwrap().clone();
        let total: u64 = samples.values().sum::<u64>().max(1);
        let mut states: Vec<(String, f64)> = samples
            .into_iter()
            .map(|(state, n)| (state, n as f64 / total as f64))
            .collect();
        states.sort_by(|a, b| b.1.total_cmp(&a.1));
        PgReport {
            wal_syncs: after.syncs - self.before.syncs,
            wal_records: after.records - self.before.records,
            wal_bytes: after.bytes - self.before.bytes,
            states,
        }
    }
}

impl PgReport {
    /// Two lines: WAL per job and per second, and the top backend states.
    pub fn print(&self, jobs: usize, wall: f64) {
        let jobs = jobs.max(1) as f64;
        println!(
            "  {:<24} WAL: {:.0} flushes/s, {:.2} flushes/job, {:.1} records/job, {:.1} KiB/job",
            "",
            self.wal_syncs as f64 / wall,
            self.wal_syncs as f64 / jobs,
            self.wal_records as f64 / jobs,
            self.wal_bytes as f64 / jobs / 1024.0
        );
        let top: Vec<String> = self
            .states
            .iter()
            .take(5)
            .map(|(state, share)| format!("{state} {:.0} %", share * 100.0))
            .collect();
        println!("  {:<24} backends: {}", "", top.join(", "));
    }
}
