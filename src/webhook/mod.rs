//! Completion webhooks: the sender that delivers the queue's outbox
//! (`queue::outbox`) over HTTP, signed as Standard Webhooks signs
//! (`webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64 of
//! HMAC-SHA256 over "id.timestamp.body">`), with a timeout, a cap on what
//! it reads back, and retries with exponential backoff and jitter until the
//! delivery is dead-lettered.

mod sender;
mod sign;

pub use sender::{Sender, spawn};
pub use sign::{SignError, Signer};

pub use crate::config::WebhookConfig;
