//! The SQLite statements of the schedules (see `queue::schedules`).

use rusqlite::params;

use super::dialect::SqliteTx;
use crate::queue::schedules::{
    FireRecord, SCHEDULE_COLUMNS, ScheduleStatements, StoredSchedule, schedule_from_row,
};
use crate::queue::tx::Res;

impl ScheduleStatements for SqliteTx<'_> {
    async fn put_schedule(&mut self, s: &StoredSchedule, now: i64) -> Res<()> {
        self.exec(
            "INSERT INTO schedules (id, source, spec, owner, paused, next_fire, created_at, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?7)
             ON CONFLICT (id) DO UPDATE SET source = excluded.source, spec = excluded.spec,
                 owner = excluded.owner, next_fire = excluded.next_fire, updated_at = excluded.updated_at",
            params![s.id, s.source, s.spec, s.owner, s.paused, s.next_fire, now],
        )?;
        Ok(())
    }

    async fn schedules(&mut self) -> Res<Vec<StoredSchedule>> {
        self.rows(
            &format!("SELECT {SCHEDULE_COLUMNS} FROM schedules ORDER BY id"),
            [],
            |row| schedule_from_row(row),
        )
    }

    async fn delete_schedule(&mut self, id: &str) -> Res<bool> {
        Ok(self.exec("DELETE FROM schedules WHERE id = ?1", [id])? > 0)
    }

    async fn pause_schedule(&mut self, id: &str, paused: bool, now: i64) -> Res<bool> {
        Ok(self.exec(
            "UPDATE schedules SET paused = ?2, updated_at = ?3 WHERE id = ?1",
            params![id, paused, now],
        )? > 0)
    }

    async fn record_fire(&mut self, f: &FireRecord, now: i64) -> Res<bool> {
        Ok(self.exec(
            "UPDATE schedules SET next_fire = ?3, last_fire = COALESCE(?4, last_fire),
                 last_job = COALESCE(?5, last_job), last_outcome = ?6, updated_at = ?7,
                 missed_fires = missed_fires + ?8
             WHERE id = ?1 AND next_fire = ?2",
            params![
                f.id,
                f.expected_next,
                f.next_fire,
                f.last_fire,
                f.last_job,
                f.last_outcome,
                now,
                i64::try_from(f.missed).unwrap_or(i64::MAX)
            ],
        )? > 0)
    }
}
