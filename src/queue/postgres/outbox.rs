//! The PostgreSQL statements of the outbox (see `queue::outbox`). Claims
//! take rows no other daemon holds (`SKIP LOCKED`).

use deadpool_postgres::GenericClient;

use super::transaction::PgTx;
use crate::queue::outbox::{
    DELIVERY_COLUMNS, Delivery, DeliveryFilter, DeliveryRecord, DeliveryResult, NewDelivery,
    OutboxStatements, PUSH_COLUMNS, PushConfig, RECORD_COLUMNS, RECORD_FROM, delivery_from_row,
    push_from_row, record_from_row, stored_claim,
};
use crate::queue::tx::{Columns, Res};

impl<C: GenericClient> OutboxStatements for PgTx<'_, C> {
    async fn set_job_webhook(&mut self, job_id: &str, url: &str) -> Res<()> {
        let sql = "INSERT INTO job_webhooks (job_id, url) VALUES ($1, $2)
                   ON CONFLICT (job_id) DO UPDATE SET url = EXCLUDED.url";
        self.exec(sql, &[&job_id, &url]).await?;
        Ok(())
    }

    async fn job_webhook(&mut self, job_id: &str) -> Res<Option<String>> {
        let sql = "SELECT url FROM job_webhooks WHERE job_id = $1";
        self.first(sql, &[&job_id])
            .await?
            .map(|row| row.req_text(0))
            .transpose()
    }

    async fn insert_delivery(&mut self, d: &NewDelivery<'_>, now: i64) -> Res<()> {
        // The job's row is locked by the state change: one insert per job at a time.
        let sql = "INSERT INTO deliveries (id, kind, target, job_id, seq, event, payload, state, attempts, next_attempt_at, created_at, updated_at)
                   VALUES ($1, $2, $3, $4, (SELECT COALESCE(MAX(seq), 0) + 1 FROM deliveries WHERE job_id = $4), $5, $6, 'pending', 0, $7, $7, $7)";
        self.exec(
            sql,
            &[
                &d.id, &d.kind, &d.target, &d.job_id, &d.event, &d.payload, &now,
            ],
        )
        .await?;
        Ok(())
    }

    async fn due_deliveries(&mut self, now: i64, limit: usize) -> Res<Vec<Delivery>> {
        let sql = format!(
            "SELECT {DELIVERY_COLUMNS} FROM deliveries d
             WHERE state = 'pending' AND next_attempt_at <= $1 AND (lease_until IS NULL OR lease_until <= $1)
               AND NOT EXISTS (SELECT 1 FROM deliveries e WHERE e.job_id = d.job_id AND e.seq < d.seq AND e.state = 'pending')
             ORDER BY next_attempt_at LIMIT $2 FOR UPDATE SKIP LOCKED"
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.rows(&sql, &[&now, &limit])
            .await?
            .iter()
            .map(delivery_from_row)
            .collect()
    }

    async fn lease_delivery(
        &mut self,
        id: &str,
        claim: u64,
        lease_until: i64,
        now: i64,
    ) -> Res<()> {
        let sql =
            "UPDATE deliveries SET lease_until = $2, claims = $3, updated_at = $4 WHERE id = $1";
        self.exec(sql, &[&id, &lease_until, &stored_claim(claim), &now])
            .await?;
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
        let sql = "UPDATE deliveries SET state = $2, next_attempt_at = $3, last_error = $4, attempts = attempts + 1, lease_until = NULL, updated_at = $5
                   WHERE id = $1 AND claims = $6 AND lease_until IS NOT NULL";
        let claim = stored_claim(claim);
        let settled = self
            .exec(sql, &[&id, &state, &at, &error, &now, &claim])
            .await?;
        Ok(settled > 0)
    }

    async fn dead_deliveries(&mut self) -> Res<i64> {
        let sql = "SELECT COUNT(*) FROM deliveries WHERE state = 'dead'";
        let row = self.first(sql, &[]).await?;
        row.map(|row| row.req_int(0))
            .transpose()
            .map(Option::unwrap_or_default)
    }

    async fn delivery(&mut self, id: &str) -> Res<Option<DeliveryRecord>> {
        let sql = format!("SELECT {RECORD_COLUMNS} FROM {RECORD_FROM} WHERE d.id = $1");
        self.first(&sql, &[&id])
            .await?
            .map(|row| record_from_row(&row))
            .transpose()
    }

    async fn list_deliveries(
        &mut self,
        filter: &DeliveryFilter,
        limit: usize,
    ) -> Res<Vec<DeliveryRecord>> {
        let (conditions, args) = filter.conditions(|n| format!("${n}"));
        let sql = format!(
            "SELECT {RECORD_COLUMNS} FROM {RECORD_FROM} WHERE TRUE{conditions} ORDER BY d.id DESC LIMIT {limit}"
        );
        let rows = self.filtered(&sql, &args).await?;
        rows.iter().map(record_from_row).collect()
    }

    async fn redrive_delivery(&mut self, id: &str, now: i64) -> Res<bool> {
        let sql = "UPDATE deliveries SET state = 'pending', attempts = 0, next_attempt_at = $2, lease_until = NULL, updated_at = $2
                   WHERE id = $1 AND state = 'dead'";
        Ok(self.exec(sql, &[&id, &now]).await? > 0)
    }

    async fn put_push_config(&mut self, job_id: &str, c: &PushConfig, now: i64) -> Res<()> {
        let auth = c.authentication.as_ref();
        let scheme = auth.map(|a| a.scheme.clone());
        let credentials = auth.and_then(|a| a.credentials.clone());
        let sql = "INSERT INTO a2a_push_configs (job_id, id, url, token, auth_scheme, auth_credentials, created_at)
                   VALUES ($1, $2, $3, $4, $5, $6, $7)
                   ON CONFLICT (job_id, id) DO UPDATE SET url = EXCLUDED.url, token = EXCLUDED.token,
                     auth_scheme = EXCLUDED.auth_scheme, auth_credentials = EXCLUDED.auth_credentials";
        self.exec(
            sql,
            &[
                &job_id,
                &c.id,
                &c.url,
                &c.token,
                &scheme,
                &credentials,
                &now,
            ],
        )
        .await?;
        Ok(())
    }

    async fn count_push_configs(&mut self, job_id: Option<&str>, owner: Option<&str>) -> Res<i64> {
        let sql = "SELECT COUNT(*) FROM a2a_push_configs p JOIN jobs j ON j.id = p.job_id
                   WHERE j.finished_at IS NULL AND ($1::TEXT IS NULL OR p.job_id = $1)
                     AND ($2::TEXT IS NULL OR j.owner = $2)";
        self.one_int(sql, &[&job_id, &owner]).await
    }

    async fn push_configs(&mut self, job_id: &str) -> Res<Vec<PushConfig>> {
        let sql = format!(
            "SELECT {PUSH_COLUMNS} FROM a2a_push_configs WHERE job_id = $1 ORDER BY created_at, id"
        );
        self.rows(&sql, &[&job_id])
            .await?
            .iter()
            .map(push_from_row)
            .collect()
    }

    async fn delete_push_config(&mut self, job_id: &str, id: &str) -> Res<bool> {
        let sql = "DELETE FROM a2a_push_configs WHERE job_id = $1 AND id = $2";
        Ok(self.exec(sql, &[&job_id, &id]).await? > 0)
    }

    async fn drop_pending(&mut self, job_id: &str, kind: &str, target: &str) -> Res<()> {
        let sql = "DELETE FROM deliveries WHERE job_id = $1 AND kind = $2 AND target = $3 AND state = 'pending'";
        self.exec(sql, &[&job_id, &kind, &target]).await?;
        Ok(())
    }
}
