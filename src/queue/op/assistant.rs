//! The custom assistant operations (their rule in `queue/assistants.rs`):
//! make one, add a version, pick the latest, delete one, read one, a
//! key's, an assistant's versions.

use super::*;
use crate::queue::assistants::{
    self, ASSISTANTS_SCANNED, AssistantCreated, AssistantPatch, AssistantSettings, StoredAssistant,
    StoredAssistantVersion, VERSIONS_LISTED,
};

operation! {
    /// Makes a key's assistant (new work: refused by a full backlog).
    pub(crate) struct CreateAssistant {
        pub owner: String,
        pub id: String,
        pub settings: AssistantSettings,
    }
    write(REFUSED_WHEN_BUSY) "create_assistant" -> AssistantCreated = |op, tx| {
        assistants::create(tx, &op.owner, &op.id, &op.settings).await
    };
}

operation! {
    /// A new version of a key's assistant, made its latest.
    pub(crate) struct UpdateAssistant {
        pub owner: String,
        pub id: String,
        pub patch: AssistantPatch,
    }
    write(REFUSED_WHEN_BUSY) "update_assistant" -> Option<StoredAssistant> = |op, tx| {
        assistants::update(tx, &op.owner, &op.id, &op.patch).await
    };
}

operation! {
    /// Makes one version of a key's assistant its latest.
    pub(crate) struct SetAssistantLatest {
        pub owner: String,
        pub id: String,
        pub version: i64,
    }
    write "set_assistant_latest" -> Option<StoredAssistant> = |op, tx| {
        assistants::set_latest(tx, &op.owner, &op.id, op.version).await
    };
}

operation! {
    /// Deletes a key's assistant with its versions: whether there was one.
    pub(crate) struct DeleteAssistant {
        pub owner: String,
        pub id: String,
    }
    write "delete_assistant" -> bool = |op, tx| tx.delete_assistant(&op.owner, &op.id).await;
}

operation! {
    /// A key's assistant at its latest version.
    pub(crate) struct AssistantOf {
        pub owner: String,
        pub id: String,
    }
    read "assistant" -> Option<StoredAssistant> = |op, tx| {
        tx.assistant(&op.owner, &op.id, false).await
    };
}

operation! {
    /// A key's newest assistants.
    pub(crate) struct AssistantsOf {
        pub owner: String,
    }
    read "assistants" -> Vec<StoredAssistant> = |op, tx| {
        tx.assistants(&op.owner, ASSISTANTS_SCANNED).await
    };
}

operation! {
    /// The newest versions of a key's assistant.
    pub(crate) struct AssistantVersions {
        pub owner: String,
        pub id: String,
    }
    read "assistant_versions" -> Vec<StoredAssistantVersion> = |op, tx| {
        tx.assistant_versions(&op.owner, &op.id, VERSIONS_LISTED).await
    };
}
