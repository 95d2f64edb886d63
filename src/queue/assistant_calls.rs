//! [`AssistantStore`] over any backend, as `driver.rs` is [`JobQueue`]:
//! each call builds its operation (`op/assistant.rs`) for the driver.

use async_trait::async_trait;

use super::backend::Driver;
use super::op;
use super::*;

#[async_trait]
impl<D: Driver> AssistantStore for Queue<D> {
    async fn create_assistant(
        &self,
        owner: &str,
        id: &str,
        settings: AssistantSettings,
    ) -> Result<AssistantCreated, QueueError> {
        let (owner, id) = (owner.to_string(), id.to_string());
        let op = op::CreateAssistant {
            owner,
            id,
            settings,
        };
        self.driver.write(op).await
    }

    async fn update_assistant(
        &self,
        owner: &str,
        id: &str,
        patch: AssistantPatch,
    ) -> Result<Option<StoredAssistant>, QueueError> {
        let (owner, id) = (owner.to_string(), id.to_string());
        self.driver
            .write(op::UpdateAssistant { owner, id, patch })
            .await
    }

    async fn set_assistant_latest(
        &self,
        owner: &str,
        id: &str,
        version: i64,
    ) -> Result<Option<StoredAssistant>, QueueError> {
        let (owner, id) = (owner.to_string(), id.to_string());
        self.driver
            .write(op::SetAssistantLatest { owner, id, version })
            .await
    }

    async fn delete_assistant(&self, owner: &str, id: &str) -> Result<bool, QueueError> {
        let (owner, id) = (owner.to_string(), id.to_string());
        self.driver.write(op::DeleteAssistant { owner, id }).await
    }

    async fn assistant(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<Option<StoredAssistant>, QueueError> {
        let (owner, id) = (owner.to_string(), id.to_string());
        self.driver.read(op::AssistantOf { owner, id }).await
    }

    async fn assistants(&self, owner: &str) -> Result<Vec<StoredAssistant>, QueueError> {
        let owner = owner.to_string();
        self.driver.read(op::AssistantsOf { owner }).await
    }

    async fn assistant_versions(
        &self,
        owner: &str,
        id: &str,
    ) -> Result<Vec<StoredAssistantVersion>, QueueError> {
        let (owner, id) = (owner.to_string(), id.to_string());
        self.driver.read(op::AssistantVersions { owner, id }).await
    }
}
