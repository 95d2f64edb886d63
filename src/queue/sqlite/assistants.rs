//! The SQLite statements of custom assistants (see `queue::assistants`).

use rusqlite::params;

use super::dialect::SqliteTx;
use crate::queue::assistants::{
    ASSISTANT_COLUMNS, AssistantStatements, StoredAssistant, StoredAssistantVersion,
    VERSION_COLUMNS, assistant_from_row, version_from_row,
};
use crate::queue::tx::Res;

/// `assistants a` joined with its latest version `v`.
const LATEST: &str = "assistants a JOIN assistant_versions v
     ON v.owner = a.owner AND v.id = a.id AND v.version = a.latest";

// Mirrors `postgres/assistants.rs` statement for statement, kept apart as
// every dialect pair is: the SQL and the client's calling convention differ.
impl AssistantStatements for SqliteTx<'_> {
    async fn insert_assistant(&mut self, owner: &str, id: &str, now: i64) -> Res<bool> {
        Ok(self.exec(
            "INSERT INTO assistants (owner, id, latest, created_at, updated_at)
             VALUES (?1, ?2, 1, ?3, ?3) ON CONFLICT (owner, id) DO NOTHING",
            params![owner, id, now],
        )? > 0)
    }

    async fn insert_assistant_version(
        &mut self,
        owner: &str,
        id: &str,
        version: i64,
        settings: &str,
        now: i64,
    ) -> Res<()> {
        self.exec(
            "INSERT INTO assistant_versions (owner, id, version, settings, created_at)
             VALUES (?1, ?2, ?3, ?4, ?5)",
            params![owner, id, version, settings, now],
        )?;
        Ok(())
    }

    async fn set_assistant_latest(
        &mut self,
        owner: &str,
        id: &str,
        version: i64,
        now: i64,
    ) -> Res<bool> {
        Ok(self.exec(
            "UPDATE assistants SET latest = ?3, updated_at = ?4
             WHERE owner = ?1 AND id = ?2 AND EXISTS (
                 SELECT 1 FROM assistant_versions
                 WHERE owner = ?1 AND id = ?2 AND version = ?3)",
            params![owner, id, version, now],
        )? > 0)
    }

    async fn assistant(
        &mut self,
        owner: &str,
        id: &str,
        _lock: bool,
    ) -> Res<Option<StoredAssistant>> {
        self.first(
            &format!("SELECT {ASSISTANT_COLUMNS} FROM {LATEST} WHERE a.owner = ?1 AND a.id = ?2"),
            params![owner, id],
            |row| assistant_from_row(row),
        )
    }

    async fn assistants(&mut self, owner: &str, limit: usize) -> Res<Vec<StoredAssistant>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.rows(
            &format!(
                "SELECT {ASSISTANT_COLUMNS} FROM {LATEST} WHERE a.owner = ?1
                 ORDER BY a.created_at DESC, a.id LIMIT ?2"
            ),
            params![owner, limit],
            |row| assistant_from_row(row),
        )
    }

    async fn assistant_versions(
        &mut self,
        owner: &str,
        id: &str,
        limit: usize,
    ) -> Res<Vec<StoredAssistantVersion>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        self.rows(
            &format!(
                "SELECT {VERSION_COLUMNS} FROM assistant_versions
                 WHERE owner = ?1 AND id = ?2 ORDER BY version DESC LIMIT ?3"
            ),
            params![owner, id, limit],
            |row| version_from_row(row),
        )
    }

    async fn delete_assistant(&mut self, owner: &str, id: &str) -> Res<bool> {
        self.exec(
            "DELETE FROM assistant_versions WHERE owner = ?1 AND id = ?2",
            params![owner, id],
        )?;
        Ok(self.exec(
            "DELETE FROM assistants WHERE owner = ?1 AND id = ?2",
            params![owner, id],
        )? > 0)
    }
}
