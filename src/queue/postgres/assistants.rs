//! The PostgreSQL statements of custom assistants (see `queue::assistants`).

use deadpool_postgres::GenericClient;

use super::transaction::PgTx;
use crate::queue::assistants::{
    ASSISTANT_COLUMNS, AssistantStatements, StoredAssistant, StoredAssistantVersion,
    VERSION_COLUMNS, assistant_from_row, version_from_row,
};
use crate::queue::tx::Res;

/// `assistants a` joined with its latest version `v`.
const LATEST: &str = "assistants a JOIN assistant_versions v
     ON v.owner = a.owner AND v.id = a.id AND v.version = a.latest";

impl<C: GenericClient> AssistantStatements for PgTx<'_, C> {
    async fn insert_assistant(&mut self, owner: &str, id: &str, now: i64) -> Res<bool> {
        // A concurrent create of the same id is waited for; once it
        // commits the primary key makes this one insert nothing.
        let sql = "INSERT INTO assistants (owner, id, latest, created_at, updated_at)
                   VALUES ($1, $2, 1, $3, $3) ON CONFLICT (owner, id) DO NOTHING";
        Ok(self.exec(sql, &[&owner, &id, &now]).await? > 0)
    }

    async fn insert_assistant_version(
        &mut self,
        owner: &str,
        id: &str,
        version: i64,
        settings: &str,
        now: i64,
    ) -> Res<()> {
        let sql = "INSERT INTO assistant_versions (owner, id, version, settings, created_at)
                   VALUES ($1, $2, $3, $4, $5)";
        self.exec(sql, &[&owner, &id, &version, &settings, &now])
            .await?;
        Ok(())
    }

    async fn set_assistant_latest(
        &mut self,
        owner: &str,
        id: &str,
        version: i64,
        now: i64,
    ) -> Res<bool> {
        let sql = "UPDATE assistants SET latest = $3, updated_at = $4
                   WHERE owner = $1 AND id = $2 AND EXISTS (
                       SELECT 1 FROM assistant_versions
                       WHERE owner = $1 AND id = $2 AND version = $3)";
        Ok(self.exec(sql, &[&owner, &id, &version, &now]).await? > 0)
    }

    async fn assistant(
        &mut self,
        owner: &str,
        id: &str,
        lock: bool,
    ) -> Res<Option<StoredAssistant>> {
        let sql = format!(
            "SELECT {ASSISTANT_COLUMNS} FROM {LATEST} WHERE a.owner = $1 AND a.id = $2{}",
            if lock { " FOR UPDATE OF a" } else { "" }
        );
        self.first(&sql, &[&owner, &id])
            .await?
            .as_ref()
            .map(assistant_from_row)
            .transpose()
    }

    async fn assistants(&mut self, owner: &str, limit: usize) -> Res<Vec<StoredAssistant>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let sql = format!(
            "SELECT {ASSISTANT_COLUMNS} FROM {LATEST} WHERE a.owner = $1
             ORDER BY a.created_at DESC, a.id COLLATE \"C\" LIMIT $2"
        );
        self.rows(&sql, &[&owner, &limit])
            .await?
            .iter()
            .map(assistant_from_row)
            .collect()
    }

    async fn assistant_versions(
        &mut self,
        owner: &str,
        id: &str,
        limit: usize,
    ) -> Res<Vec<StoredAssistantVersion>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let sql = format!(
            "SELECT {VERSION_COLUMNS} FROM assistant_versions
             WHERE owner = $1 AND id = $2 ORDER BY version DESC LIMIT $3"
        );
        self.rows(&sql, &[&owner, &id, &limit])
            .await?
            .iter()
            .map(version_from_row)
            .collect()
    }

    async fn delete_assistant(&mut self, owner: &str, id: &str) -> Res<bool> {
        let sql = "DELETE FROM assistant_versions WHERE owner = $1 AND id = $2";
        self.exec(sql, &[&owner, &id]).await?;
        let sql = "DELETE FROM assistants WHERE owner = $1 AND id = $2";
        Ok(self.exec(sql, &[&owner, &id]).await? > 0)
    }
}
