//! The SQLite statements of the release decisions (see
//! `queue::releases`).

use rusqlite::params;

use super::dialect::SqliteTx;
use crate::queue::releases::{RELEASE_COLUMNS, ReleaseStatements, StoredRelease, release_from_row};
use crate::queue::tx::Res;

// Mirrors `postgres/releases.rs` statement for statement, kept apart as
// every dialect pair is: the SQL and the client's calling convention differ.
impl ReleaseStatements for SqliteTx<'_> {
    async fn next_release_seq(&mut self) -> Res<i64> {
        self.one_int("UPDATE release_seq SET seq = seq + 1 RETURNING seq", [])
    }

    async fn put_release(
        &mut self,
        r: &StoredRelease,
        any: bool,
        verdict: Option<&str>,
        now: i64,
    ) -> Res<bool> {
        let seq = i64::try_from(r.seq).unwrap_or(i64::MAX);
        Ok(self.exec(
            "INSERT INTO release_decisions (identity, verdict, decision, seq, decided_at)
             VALUES (?1, ?2, ?3, ?4, ?5)
             ON CONFLICT (identity) DO UPDATE SET verdict = excluded.verdict,
                 decision = excluded.decision, seq = excluded.seq,
                 decided_at = excluded.decided_at
             WHERE ?6 OR release_decisions.verdict = ?7",
            params![r.identity, r.verdict, r.decision, seq, now, any, verdict],
        )? > 0)
    }

    async fn forget_releases_through(&mut self, seq: i64) -> Res<()> {
        self.exec("DELETE FROM release_decisions WHERE seq <= ?1", [seq])?;
        Ok(())
    }

    async fn releases_after(&mut self, seq: i64, limit: usize) -> Res<Vec<StoredRelease>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.rows(
            &format!(
                "SELECT {RELEASE_COLUMNS} FROM release_decisions WHERE seq > ?1 ORDER BY seq LIMIT ?2"
            ),
            params![seq, limit],
            |row| release_from_row(row),
        )
    }
}
