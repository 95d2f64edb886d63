//! How a delivery of one `kind` goes on the wire: its body and headers,
//! made when it is sent (so a retry signs its own time). The sender holds
//! one [`Format`] per kind; Standard Webhooks' is here ([`Signed`]), an A2A
//! push's is the A2A server's (`api::a2a::push`), given to the sender by
//! the daemon.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::SystemTime;

use super::Signer;
use crate::queue::{Delivery, millis};

/// A delivery as it is POSTed: its JSON body and its headers (besides
/// `content-type: application/json`).
#[derive(Debug, Clone, PartialEq)]
pub struct Outgoing {
    pub body: String,
    pub headers: Vec<(String, String)>,
}

/// Makes the request of a delivery of one kind; an error fails the attempt
/// as a refusing receiver would (retried, then dead-lettered).
pub trait Format: Send + Sync {
    fn format(&self, delivery: &Delivery) -> Result<Outgoing, FormatError>;
}

/// Why a delivery could not be made into its request; `what` names the
/// kind of delivery as its format calls it (e.g. "A2A push").
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error(
        "{what} {delivery} of job {job} has an unreadable payload ({source}); it cannot be sent"
    )]
    UnreadablePayload {
        what: &'static str,
        delivery: String,
        job: String,
        source: serde_json::Error,
    },
    #[error("{what} {delivery} cannot be encoded: {source}")]
    Encode {
        what: &'static str,
        delivery: String,
        source: serde_json::Error,
    },
}

/// A completion webhook: the payload as stored, signed as Standard
/// Webhooks signs (`webhook-id`, `webhook-timestamp`, `webhook-signature`).
pub struct Signed {
    signer: Option<Signer>,
    /// The variable the secret was read from, for the warning.
    secret_env: String,
    /// Whether the first unsigned delivery was warned of (a daemon that
    /// sends no webhooks says nothing of a secret it does not need).
    warned_unsigned: AtomicBool,
}

impl Signed {
    pub fn new(signer: Option<Signer>, secret_env: &str) -> Self {
        Self {
            signer,
            secret_env: secret_env.to_string(),
            warned_unsigned: AtomicBool::new(false),
        }
    }
}

impl Format for Signed {
    fn format(&self, delivery: &Delivery) -> Result<Outgoing, FormatError> {
        let timestamp = millis(SystemTime::now()) / 1000;
        let mut headers = vec![
            ("webhook-id".to_string(), delivery.id.clone()),
            ("webhook-timestamp".to_string(), timestamp.to_string()),
        ];
        match &self.signer {
            Some(signer) => headers.push((
                "webhook-signature".to_string(),
                signer.sign(&delivery.id, timestamp, &delivery.payload),
            )),
            None if !self.warned_unsigned.swap(true, Ordering::Relaxed) => {
                tracing::warn!(
                    env = %self.secret_env,
                    "webhooks: no signing secret; deliveries go unsigned (set the variable to sign them)"
                );
            }
            None => {}
        }
        Ok(Outgoing {
            body: delivery.payload.clone(),
            headers,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_webhook_is_its_payload_signed() {
        let delivery = Delivery {
            id: "msg_1".into(),
            kind: "webhook".into(),
            target: "http://x/".into(),
            job_id: "j".into(),
            seq: 1,
            event: "job.succeeded".into(),
            payload: "{}".into(),
            attempts: 0,
            claim: 1,
        };
        let signer = Signer::new("secret").unwrap();
        let out = Signed::new(Some(signer.clone()), "X")
            .format(&delivery)
            .unwrap();
        assert_eq!(out.body, "{}");
        let header = |name: &str| {
            out.headers
                .iter()
                .find(|(n, _)| n == name)
                .map(|(_, v)| v.clone())
                .unwrap()
        };
        assert_eq!(header("webhook-id"), "msg_1");
        let timestamp: i64 = header("webhook-timestamp").parse().unwrap();
        assert_eq!(
            header("webhook-signature"),
            signer.sign("msg_1", timestamp, "{}")
        );
        let unsigned = Signed::new(None, "X").format(&delivery).unwrap();
        assert_eq!(unsigned.headers.len(), 2);
    }
}
