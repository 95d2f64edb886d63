//! Counts of committed writes and of the commits that carried them (group
//! commit puts many writes in one), for benchmarks.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use serde::Serialize;

/// Counts of committed writes and of the commits that carried them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize)]
pub struct WriteCounts {
    pub writes: u64,
    pub commits: u64,
    /// Statements the writes sent to the database, each one round trip
    /// (PostgreSQL; SQLite runs in process and counts none).
    pub statements: u64,
}

/// The live counters behind [`WriteCounts`].
#[derive(Debug, Default)]
pub(crate) struct WriteStats {
    writes: AtomicU64,
    commits: AtomicU64,
    statements: AtomicU64,
}

impl WriteStats {
    /// One commit carrying `writes` writes.
    pub(crate) fn count(&self, writes: usize) {
        self.writes.fetch_add(writes as u64, Relaxed);
        self.commits.fetch_add(1, Relaxed);
    }

    /// `n` statements sent to the database (one round trip each).
    pub(crate) fn sent(&self, n: u64) {
        self.statements.fetch_add(n, Relaxed);
    }

    pub(crate) fn counts(&self) -> WriteCounts {
        WriteCounts {
            writes: self.writes.load(Relaxed),
            commits: self.commits.load(Relaxed),
            statements: self.statements.load(Relaxed),
        }
    }
}
