//! The PostgreSQL statements of threads (see `queue::threads`).

use deadpool_postgres::GenericClient;

use super::transaction::PgTx;
use crate::queue::threads::{
    StoredThread, ThreadStatements, copy_job_sql, thread_columns, thread_from_row,
};
use crate::queue::tx::{Conversation, Res};

impl<C: GenericClient> ThreadStatements for PgTx<'_, C> {
    async fn insert_thread(&mut self, c: &Conversation<'_>, metadata: &str, now: i64) -> Res<bool> {
        let sql = "INSERT INTO conversations (owner, id, created_at, metadata, updated_at)
                   VALUES ($1, $2, $3, $4, $3) ON CONFLICT (owner, id) DO NOTHING";
        Ok(self.exec(sql, &[&c.owner, &c.id, &now, &metadata]).await? > 0)
    }

    async fn thread(&mut self, c: &Conversation<'_>, lock: bool) -> Res<Option<StoredThread>> {
        let sql = format!(
            "SELECT {} FROM conversations c WHERE c.owner = $1 AND c.id = $2{}",
            thread_columns(),
            if lock { " FOR UPDATE OF c" } else { "" }
        );
        self.first(&sql, &[&c.owner, &c.id])
            .await?
            .as_ref()
            .map(thread_from_row)
            .transpose()
    }

    async fn set_thread_metadata(
        &mut self,
        c: &Conversation<'_>,
        metadata: &str,
        now: i64,
    ) -> Res<()> {
        let sql =
            "UPDATE conversations SET metadata = $3, updated_at = $4 WHERE owner = $1 AND id = $2";
        self.exec(sql, &[&c.owner, &c.id, &metadata, &now]).await?;
        Ok(())
    }

    async fn threads(&mut self, owner: &str, limit: usize) -> Res<Vec<StoredThread>> {
        let sql = format!(
            "SELECT {} FROM conversations c WHERE c.owner = $1
             ORDER BY c.created_at DESC, c.id DESC LIMIT $2",
            thread_columns()
        );
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.rows(&sql, &[&owner, &limit])
            .await?
            .iter()
            .map(thread_from_row)
            .collect()
    }

    async fn copy_job(&mut self, from: &str, to: &str, conversation: &str) -> Res<()> {
        let sql = copy_job_sql(|i| format!("${i}"));
        self.exec(&sql, &[&from, &to, &conversation]).await?;
        let sql = "INSERT INTO events (job_id, seq, attempt, event)
                   SELECT $2, seq, attempt, REPLACE(event, $1, $2) FROM events WHERE job_id = $1";
        self.exec(sql, &[&from, &to]).await?;
        let sql = "INSERT INTO journal (job_id, scope, turn, step, attempt, body)
                   SELECT $2, scope, turn, step, attempt, REPLACE(body, $1, $2) FROM journal WHERE job_id = $1";
        self.exec(sql, &[&from, &to]).await?;
        Ok(())
    }
}
