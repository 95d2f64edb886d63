//! The PostgreSQL statements of the release decisions (see
//! `queue::releases`).

use deadpool_postgres::GenericClient;

use super::transaction::PgTx;
use crate::queue::releases::{RELEASE_COLUMNS, ReleaseStatements, StoredRelease, release_from_row};
use crate::queue::tx::Res;

impl<C: GenericClient> ReleaseStatements for PgTx<'_, C> {
    async fn next_release_seq(&mut self) -> Res<i64> {
        // The row stays locked until the transaction ends: the next writer
        // takes its number only after this one committed.
        self.one_int("UPDATE release_seq SET seq = seq + 1 RETURNING seq", &[])
            .await
    }

    async fn put_release(
        &mut self,
        r: &StoredRelease,
        any: bool,
        verdict: Option<&str>,
        now: i64,
    ) -> Res<bool> {
        let sql = "INSERT INTO release_decisions (identity, verdict, decision, seq, decided_at)
                   VALUES ($1, $2, $3, $4, $5)
                   ON CONFLICT (identity) DO UPDATE SET verdict = EXCLUDED.verdict,
                       decision = EXCLUDED.decision, seq = EXCLUDED.seq,
                       decided_at = EXCLUDED.decided_at
                   WHERE $6 OR release_decisions.verdict = $7";
        let seq = i64::try_from(r.seq).unwrap_or(i64::MAX);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] = [
            &r.identity,
            &r.verdict,
            &r.decision,
            &seq,
            &now,
            &any,
            &verdict,
        ];
        Ok(self.exec(sql, &params).await? > 0)
    }

    async fn forget_releases_through(&mut self, seq: i64) -> Res<()> {
        self.exec("DELETE FROM release_decisions WHERE seq <= $1", &[&seq])
            .await?;
        Ok(())
    }

    async fn releases_after(&mut self, seq: i64, limit: usize) -> Res<Vec<StoredRelease>> {
        let sql = format!(
            "SELECT {RELEASE_COLUMNS} FROM release_decisions WHERE seq > $1 ORDER BY seq LIMIT $2"
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.rows(&sql, &[&seq, &limit])
            .await?
            .iter()
            .map(release_from_row)
            .collect()
    }
}
