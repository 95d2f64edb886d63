//! The SQLite statements of the outbox (see `queue::outbox`).
//!
//! Kept apart from `postgres/outbox.rs`, whose methods it mirrors: the SQL
//! differs by dialect (`?N` placeholders, `INSERT OR REPLACE`, no `SKIP
//! LOCKED`) and so does the client's calling convention; what both compute
//! (a settle's columns, a stored claim) is `queue::outbox`'s.

use rusqlite::params;

use super::dialect::SqliteTx;
use crate::queue::outbox::{
    DELIVERY_COLUMNS, Delivery, DeliveryFilter, DeliveryRecord, DeliveryResult, NewDelivery,
    OutboxStatements, PUSH_COLUMNS, PushConfig, RECORD_COLUMNS, RECORD_FROM, delivery_from_row,
    push_from_row, record_from_row, stored_claim,
};
use crate::queue::tx::{Columns, Res};

impl OutboxStatements for SqliteTx<'_> {
    async fn set_job_webhook(&mut self, job_id: &str, url: &str) -> Res<()> {
        self.exec(
            "INSERT OR REPLACE INTO job_webhooks (job_id, url) VALUES (?1, ?2)",
            params![job_id, url],
        )?;
        Ok(())
    }

    async fn job_webhook(&mut self, job_id: &str) -> Res<Option<String>> {
        self.first(
            "SELECT url FROM job_webhooks WHERE job_id = ?1",
            [job_id],
            |row| row.req_text(0),
        )
    }

    async fn insert_delivery(&mut self, d: &NewDelivery<'_>, now: i64) -> Res<()> {
        self.exec(
            "INSERT INTO deliveries (id, kind, target, job_id, seq, event, payload, state, attempts, next_attempt_at, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, (SELECT COALESCE(MAX(seq), 0) + 1 FROM deliveries WHERE job_id = ?4), ?5, ?6, 'pending', 0, ?7, ?7, ?7)",
            params![d.id, d.kind, d.target, d.job_id, d.event, d.payload, now],
        )?;
        Ok(())
    }

    async fn due_deliveries(&mut self, now: i64, limit: usize) -> Res<Vec<Delivery>> {
        self.rows(
            &format!(
                "SELECT {DELIVERY_COLUMNS} FROM deliveries d
                 WHERE state = 'pending' AND next_attempt_at <= ?1 AND (lease_until IS NULL OR lease_until <= ?1)
                   AND NOT EXISTS (SELECT 1 FROM deliveries e WHERE e.job_id = d.job_id AND e.seq < d.seq AND e.state = 'pending')
                 ORDER BY next_attempt_at LIMIT ?2"
            ),
            params![now, limit as i64],
            |row| delivery_from_row(row),
        )
    }

    async fn lease_delivery(
        &mut self,
        id: &str,
        claim: u64,
        lease_until: i64,
        now: i64,
    ) -> Res<()> {
        self.exec(
            "UPDATE deliveries SET lease_until = ?2, claims = ?3, updated_at = ?4 WHERE id = ?1",
            params![id, lease_until, stored_claim(claim), now],
        )?;
        Ok(())
    }

    async fn settle_delivery(
        &mut self,
        id: &str,
        claim: u64,
        result: &DeliveryResult,
        now: i64,
    ) -> Res<bool> {
        let (state, at, error) = result.stored(now);
        let settled = self.exec(
            "UPDATE deliveries SET state = ?2, next_attempt_at = ?3, last_error = ?4, attempts = attempts + 1, lease_until = NULL, updated_at = ?5
             WHERE id = ?1 AND claims = ?6 AND lease_until IS NOT NULL",
            params![id, state, at, error, now, stored_claim(claim)],
        )?;
        Ok(settled > 0)
    }

    async fn dead_deliveries(&mut self) -> Res<i64> {
        self.one_int("SELECT COUNT(*) FROM deliveries WHERE state = 'dead'", [])
    }

    async fn delivery(&mut self, id: &str) -> Res<Option<DeliveryRecord>> {
        self.first(
            &format!("SELECT {RECORD_COLUMNS} FROM {RECORD_FROM} WHERE d.id = ?1"),
            [id],
            |row| record_from_row(row),
        )
    }

    async fn list_deliveries(
        &mut self,
        filter: &DeliveryFilter,
        limit: usize,
    ) -> Res<Vec<DeliveryRecord>> {
        let (conditions, args) = filter.conditions(|n| format!("?{n}"));
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM {RECORD_FROM} WHERE 1=1{conditions} ORDER BY d.id DESC LIMIT {limit}"
        );
        self.rows(&sql, rusqlite::params_from_iter(args.iter()), |row| {
            record_from_row(row)
        })
    }

    async fn redrive_delivery(&mut self, id: &str, now: i64) -> Res<bool> {
        let changed = self.exec(
            "UPDATE deliveries SET state = 'pending', attempts = 0, next_attempt_at = ?2, lease_until = NULL, updated_at = ?2
             WHERE id = ?1 AND state = 'dead'",
            params![id, now],
        )?;
        Ok(changed > 0)
    }

    async fn put_push_config(&mut self, job_id: &str, c: &PushConfig, now: i64) -> Res<()> {
        let auth = c.authentication.as_ref();
        self.exec(
            "INSERT INTO a2a_push_configs (job_id, id, url, token, auth_scheme, auth_credentials, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (job_id, id) DO UPDATE SET url = excluded.url, token = excluded.token,
               auth_scheme = excluded.auth_scheme, auth_credentials = excluded.auth_credentials",
            params![
                job_id,
                c.id,
                c.url,
                c.token,
                auth.map(|a| &a.scheme),
                auth.and_then(|a| a.credentials.as_ref()),
                now
            ],
        )?;
        Ok(())
    }

    async fn count_push_configs(&mut self, job_id: Option<&str>, owner: Option<&str>) -> Res<i64> {
        self.one_int(
            "SELECT COUNT(*) FROM a2a_push_configs p JOIN jobs j ON j.id = p.job_id
             WHERE j.finished_at IS NULL AND (?1 IS NULL OR p.job_id = ?1)
               AND (?2 IS NULL OR j.owner = ?2)",
            params![job_id, owner],
        )
    }

    async fn push_configs(&mut self, job_id: &str) -> Res<Vec<PushConfig>> {
        self.rows(
            &format!(
                "SELECT {PUSH_COLUMNS} FROM a2a_push_configs WHERE job_id = ?1 ORDER BY created_at, id"
            ),
            [job_id],
            |row| push_from_row(row),
        )
    }

    async fn delete_push_config(&mut self, job_id: &str, id: &str) -> Res<bool> {
        let deleted = self.exec(
            "DELETE FROM a2a_push_configs WHERE job_id = ?1 AND id = ?2",
            params![job_id, id],
        )?;
        Ok(deleted > 0)
    }

    async fn drop_pending(&mut self, job_id: &str, kind: &str, target: &str) -> Res<()> {
        self.exec(
            "DELETE FROM deliveries WHERE job_id = ?1 AND kind = ?2 AND target = ?3 AND state = 'pending'",
            params![job_id, kind, target],
        )?;
        Ok(())
    }
}
