//! The SQLite statements of threads (see `queue::threads`).

use rusqlite::params;

use super::dialect::SqliteTx;
use crate::queue::threads::{
    StoredThread, ThreadStatements, copy_job_sql, thread_columns, thread_from_row,
};
use crate::queue::tx::{Conversation, Res};

// Mirrors `postgres/threads.rs` statement for statement, kept apart as
// every dialect pair is: the SQL and the client's calling convention differ.
impl ThreadStatements for SqliteTx<'_> {
    async fn insert_thread(&mut self, c: &Conversation<'_>, metadata: &str, now: i64) -> Res<bool> {
        Ok(self.exec(
            "INSERT INTO conversations (owner, id, created_at, metadata, updated_at)
             VALUES (?1, ?2, ?3, ?4, ?3) ON CONFLICT (owner, id) DO NOTHING",
            params![c.owner, c.id, now, metadata],
        )? > 0)
    }

    async fn thread(&mut self, c: &Conversation<'_>, _lock: bool) -> Res<Option<StoredThread>> {
        // One writer: every write already excludes every other.
        self.first(
            &format!(
                "SELECT {} FROM conversations c WHERE c.owner = ?1 AND c.id = ?2",
                thread_columns()
            ),
            params![c.owner, c.id],
            |row| thread_from_row(row),
        )
    }

    async fn set_thread_metadata(
        &mut self,
        c: &Conversation<'_>,
        metadata: &str,
        now: i64,
    ) -> Res<()> {
        self.exec(
            "UPDATE conversations SET metadata = ?3, updated_at = ?4 WHERE owner = ?1 AND id = ?2",
            params![c.owner, c.id, metadata, now],
        )?;
        Ok(())
    }

    async fn threads(&mut self, owner: &str, limit: usize) -> Res<Vec<StoredThread>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.rows(
            &format!(
                "SELECT {} FROM conversations c WHERE c.owner = ?1
                 ORDER BY c.created_at DESC, c.id DESC LIMIT ?2",
                thread_columns()
            ),
            params![owner, limit],
            |row| thread_from_row(row),
        )
    }

    async fn copy_job(&mut self, from: &str, to: &str, conversation: &str) -> Res<()> {
        self.exec(
            &copy_job_sql(|i| format!("?{i}")),
            params![from, to, conversation],
        )?;
        self.exec(
            "INSERT INTO events (job_id, seq, attempt, event)
             SELECT ?2, seq, attempt, REPLACE(event, ?1, ?2) FROM events WHERE job_id = ?1",
            params![from, to],
        )?;
        self.exec(
            "INSERT INTO journal (job_id, scope, turn, step, attempt, body)
             SELECT ?2, scope, turn, step, attempt, REPLACE(body, ?1, ?2) FROM journal WHERE job_id = ?1",
            params![from, to],
        )?;
        Ok(())
    }
}
