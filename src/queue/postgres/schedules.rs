//! The PostgreSQL statements of the schedules (see `queue::schedules`).

use deadpool_postgres::GenericClient;

use super::transaction::PgTx;
use crate::queue::schedules::{
    FireRecord, SCHEDULE_COLUMNS, ScheduleStatements, StoredSchedule, schedule_from_row,
};
use crate::queue::tx::Res;

impl<C: GenericClient> ScheduleStatements for PgTx<'_, C> {
    async fn put_schedule(&mut self, s: &StoredSchedule, now: i64) -> Res<()> {
        let sql = "INSERT INTO schedules (id, source, spec, owner, paused, next_fire, created_at, updated_at)
                   VALUES ($1, $2, $3, $4, $5, $6, $7, $7)
                   ON CONFLICT (id) DO UPDATE SET source = EXCLUDED.source, spec = EXCLUDED.spec,
                       owner = EXCLUDED.owner, next_fire = EXCLUDED.next_fire, updated_at = EXCLUDED.updated_at";
        self.exec(
            sql,
            &[
                &s.id,
                &s.source,
                &s.spec,
                &s.owner,
                &s.paused,
                &s.next_fire,
                &now,
            ],
        )
        .await?;
        Ok(())
    }

    async fn schedules(&mut self) -> Res<Vec<StoredSchedule>> {
        let sql = format!("SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY id");
        self.rows(&sql, &[])
            .await?
            .iter()
            .map(schedule_from_row)
            .collect()
    }

    async fn delete_schedule(&mut self, id: &str) -> Res<bool> {
        Ok(self
            .exec("DELETE FROM schedules WHERE id = $1", &[&id])
            .await?
            > 0)
    }

    async fn pause_schedule(&mut self, id: &str, paused: bool, now: i64) -> Res<bool> {
        let sql = "UPDATE schedules SET paused = $2, updated_at = $3 WHERE id = $1";
        Ok(self.exec(sql, &[&id, &paused, &now]).await? > 0)
    }

    async fn record_fire(&mut self, f: &FireRecord, now: i64) -> Res<bool> {
        let sql = "UPDATE schedules SET next_fire = $3, last_fire = COALESCE($4, last_fire),
                       last_job = COALESCE($5, last_job), last_outcome = $6, updated_at = $7,
                       missed_fires = missed_fires + $8
                   WHERE id = $1 AND next_fire = $2";
        let missed = i64::try_from(f.missed).unwrap_or(i64::MAX);
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
            &f.id,
            &f.expected_next,
            &f.next_fire,
            &f.last_fire,
            &f.last_job,
            &f.last_outcome,
            &now,
            &missed,
        ];
        Ok(self.exec(sql, &params).await? > 0)
    }
}
