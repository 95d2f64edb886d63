//! The sender: twice a second it claims due deliveries (a lease, so a
//! crashed sender's come back and several daemons never send one at once),
//! POSTs each as its kind's [`Format`] makes it, and settles it: delivered
//! on a 2xx, else again after a backoff with jitter, dead after the last
//! attempt.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use rand::Rng as _;
use tokio_util::sync::CancellationToken;

use super::{Format, SignError, Signed, Signer, WebhookConfig};
use crate::egress::{Current, Egress};
use crate::events::daemon::{DaemonBus, DaemonEvent, StaleClaim};
use crate::failpoint::{self, Failpoint};
use crate::queue::{Delivery, DeliveryResult, JobQueue, Settled, millis};

const EVERY: Duration = Duration::from_millis(500);
/// Why the webhook sender cannot start.
#[derive(Debug, thiserror::Error)]
pub enum SenderError {
    #[error("{env}: {source}")]
    Secret { env: String, source: SignError },
    #[error("cannot build the webhook HTTP client: {0}")]
    Client(reqwest::Error),
}

/// Deliveries claimed per round (each job's oldest only).
const BATCH: usize = 32;
/// What is kept of a refusing receiver's answer, in the delivery's error
/// (`GET /v1/deliveries`): enough for a reason, too little to carry a page
/// of whatever answered (the tenant chose the URL; the daemon's network
/// answered it).
const MAX_ANSWER_BYTES: usize = 256;

/// Sends the outbox's deliveries.
pub struct Sender {
    queue: Arc<dyn JobQueue>,
    /// How each kind of delivery is put on the wire.
    formats: HashMap<String, Arc<dyn Format>>,
    config: WebhookConfig,
    bus: DaemonBus,
    /// The live egress rule every delivery is sent under.
    egress: Arc<dyn Current>,
    /// The HTTP client of the rule last used (rebuilt when a reload
    /// changes the rule: its resolver holds the rule's names).
    client: Mutex<Option<(Arc<Egress>, reqwest::Client)>>,
}

impl Sender {
    pub fn new(
        queue: Arc<dyn JobQueue>,
        config: WebhookConfig,
        bus: DaemonBus,
        egress: Arc<dyn Current>,
    ) -> Result<Self, SenderError> {
        let secret = std::env::var(&config.secret_env).unwrap_or_default();
        let signer = if secret.is_empty() {
            None
        } else {
            Some(Signer::new(&secret).map_err(|source| SenderError::Secret {
                env: config.secret_env.clone(),
                source,
            })?)
        };
        let webhooks: Arc<dyn Format> = Arc::new(Signed::new(signer, &config.secret_env));
        let sender = Self {
            queue,
            formats: HashMap::from([(crate::queue::outbox::WEBHOOK.to_string(), webhooks)]),
            config,
            bus,
            egress,
            client: Mutex::new(None),
        };
        // A client that cannot be built is a start-up error, not a
        // failure of every delivery.
        sender.http(&sender.egress.egress())?;
        Ok(sender)
    }

    /// The client for `egress`: its resolver applies the rule, it follows
    /// no redirect, it waits at most the webhook timeout.
    fn http(&self, egress: &Arc<Egress>) -> Result<reqwest::Client, SenderError> {
        let mut held = self.client.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((rule, client)) = held.as_ref()
            && Arc::ptr_eq(rule, egress)
        {
            return Ok(client.clone());
        }
        let timeout: Duration = self.config.timeout.into();
        let client = egress
            .client()
            .timeout(timeout)
            .connect_timeout(timeout)
            .build()
            .map_err(SenderError::Client)?;
        *held = Some((egress.clone(), client.clone()));
        Ok(client)
    }

    /// Sends the deliveries of `kind` as `format` makes them.
    pub fn with_format(mut self, kind: &str, format: Arc<dyn Format>) -> Self {
        self.formats.insert(kind.to_string(), format);
        self
    }

    /// One round: claim, send, settle.
    async fn round(&self) {
        let lease = Duration::from(self.config.timeout) + Duration::from_secs(5);
        let claimed = match self.queue.claim_deliveries(lease, BATCH).await {
            Ok(claimed) => claimed,
            Err(e) => {
                tracing::warn!(error = %e, "webhooks: cannot claim deliveries; trying again shortly");
                return;
            }
        };
        let sends = claimed.iter().map(|delivery| self.deliver(delivery));
        futures::future::join_all(sends).await;
    }

    async fn deliver(&self, delivery: &Delivery) {
        let result = match self.send(delivery).await {
            Ok(()) => DeliveryResult::Delivered,
            Err(Failure::Refused(error)) => {
                // The rule would refuse every attempt: no retries.
                tracing::warn!(delivery = %delivery.id, job_id = %delivery.job_id, url = %delivery.target, %error, "webhook refused by the egress rule; dead-lettered");
                DeliveryResult::Dead { error }
            }
            Err(Failure::Failed(error)) if delivery.attempts + 1 >= self.config.max_attempts => {
                tracing::warn!(delivery = %delivery.id, job_id = %delivery.job_id, url = %delivery.target, %error, "webhook dead-lettered after its last attempt");
                DeliveryResult::Dead { error }
            }
            Err(Failure::Failed(error)) => {
                let at = millis(SystemTime::now()) + self.backoff_ms(delivery.attempts);
                tracing::info!(delivery = %delivery.id, job_id = %delivery.job_id, url = %delivery.target, %error, "webhook not delivered; retrying");
                DeliveryResult::Retry { at, error }
            }
        };
        let outcome = match &result {
            DeliveryResult::Delivered => "delivered",
            DeliveryResult::Retry { .. } => "retry",
            DeliveryResult::Dead { .. } => "dead",
        };
        match self
            .queue
            .settle_delivery(&delivery.id, delivery.claim, result)
            .await
        {
            Ok(Settled::Recorded) => self.bus.publish(DaemonEvent::WebhookDelivery { outcome }),
            // This sender stalled past its lease and another claimed the
            // delivery since: its outcome stands, this one changed nothing.
            Ok(Settled::Stale) => self.bus.publish(DaemonEvent::StaleSettle {
                claim: StaleClaim::Delivery,
            }),
            Err(e) => {
                // The lease runs out and the delivery is sent again: at least once.
                tracing::warn!(delivery = %delivery.id, error = %e, "webhooks: cannot record a delivery's outcome; it will be sent again");
            }
        }
    }

    /// Exponential from `backoff_base`, capped, with up to half taken off.
    fn backoff_ms(&self, attempts: u32) -> i64 {
        let base = Duration::from(self.config.backoff_base).as_millis() as f64;
        let max = Duration::from(self.config.backoff_max).as_millis() as f64;
        let full = (base * 2f64.powi(attempts.min(30) as i32)).min(max);
        let jitter = rand::rng().random_range(0.5..=1.0);
        (full * jitter) as i64
    }

    async fn send(&self, delivery: &Delivery) -> Result<(), Failure> {
        let format = self.formats.get(&delivery.kind).ok_or_else(|| {
            Failure::Failed(format!(
                "delivery {} of job {} is of kind {:?}, which this daemon cannot send",
                delivery.id, delivery.job_id, delivery.kind
            ))
        })?;
        let outgoing = format
            .format(delivery)
            .map_err(|e| Failure::Failed(e.to_string()))?;
        // Checked again at sending: the rule may have changed since the URL
        // was accepted, and a delivery queued before it existed is judged
        // by it too.
        let egress = self.egress.egress();
        let target = egress
            .check(&delivery.target)
            .map_err(|e| Failure::Refused(e.to_string()))?;
        let mut request = self
            .http(&egress)
            .map_err(|e| Failure::Failed(e.to_string()))?
            .post(target)
            .header("content-type", "application/json");
        for (name, value) in &outgoing.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        failpoint::hit(Failpoint::BeforeDeliverySend);
        let mut response = request.body(outgoing.body).send().await.map_err(|e| {
            Failure::Failed(format!(
                "POST {} failed: {}",
                delivery.target,
                crate::egress::describe(&e)
            ))
        })?;
        let status = response.status();
        let mut answer = Vec::new();
        while answer.len() < MAX_ANSWER_BYTES {
            match response.chunk().await {
                Ok(Some(chunk)) => answer.extend_from_slice(&chunk),
                _ => break,
            }
        }
        answer.truncate(MAX_ANSWER_BYTES);
        if status.is_success() {
            return Ok(());
        }
        Err(Failure::Failed(format!(
            "POST {} answered HTTP {status}: {}",
            delivery.target,
            String::from_utf8_lossy(&answer)
        )))
    }
}

/// Why a delivery was not delivered.
enum Failure {
    /// The egress rule refuses its URL: no attempt can succeed.
    Refused(String),
    /// This attempt failed; a later one may not.
    Failed(String),
}

/// Runs the sender until `shutdown`.
pub fn spawn(sender: Sender, shutdown: CancellationToken) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = ticks.tick() => {}
                _ = shutdown.cancelled() => return,
            }
            sender.round().await;
        }
    })
}
