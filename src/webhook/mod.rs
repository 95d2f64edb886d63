//! The sender of the queue's outbox (`queue::outbox`): completion webhooks,
//! signed as Standard Webhooks signs (`webhook-id`, `webhook-timestamp`,
//! `webhook-signature: v1,<base64 of HMAC-SHA256 over "id.timestamp.body">`),
//! and whatever other kinds the daemon gives it a [`Format`] for (A2A push
//! notifications), all with a timeout, a cap on what it reads back, and
//! retries with exponential backoff and jitter until the delivery is
//! dead-lettered.

mod format;
mod sender;
mod sign;

pub use format::{Format, FormatError, Outgoing, Signed};
pub use sender::{Sender, SenderError, spawn};
pub use sign::{SignError, Signer};

pub use crate::config::WebhookConfig;
