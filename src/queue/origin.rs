//! Where a forked job comes from, and what it starts with: the source job
//! and the turn the fork runs live from (stored with the job and shown in
//! `GET /v1/jobs/{id}`), and the journal entries it replays, written in
//! the same transaction as the job itself, so a fork never exists without
//! the steps it replays.

use serde::{Deserialize, Serialize};

use super::JobId;
use crate::journal::JournalEntry;

/// The job a fork was made from and the first turn it runs live.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct JobOrigin {
    pub job_id: JobId,
    pub at_turn: u32,
}

/// A new job's origin and its seeded journal (the source's entries for
/// the turns it replays).
#[derive(Debug, Clone, PartialEq)]
pub struct ForkSeed {
    pub origin: JobOrigin,
    pub journal: Vec<JournalEntry>,
}
