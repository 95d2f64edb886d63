//! The sender: twice a second it claims due deliveries (a lease, so a
//! crashed sender's come back and several daemons never send one at once),
//! POSTs each as its kind's [`Format`] makes it, and settles it: delivered
//! on a 2xx, else again after a backoff with jitter, dead after the last
//! attempt.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use rand::Rng as _;
use tokio_util::sync::CancellationToken;

use super::{Format, Signed, Signer, WebhookConfig};
use crate::events::daemon::{DaemonBus, DaemonEvent, StaleClaim};
use crate::failpoint::{self, Failpoint};
use crate::queue::{Delivery, DeliveryResult, JobQueue, Settled, millis};

const EVERY: Duration = Duration::from_millis(500);
/// Deliveries claimed per round (each job's oldest only).
const BATCH: usize = 32;
/// What is read of a receiver's answer at most (it is only logged).
const MAX_ANSWER_BYTES: usize = 4 * 1024;

/// Sends the outbox's deliveries.
pub struct Sender {
    queue: Arc<dyn JobQueue>,
    http: reqwest::Client,
    /// How each kind of delivery is put on the wire.
    formats: HashMap<String, Arc<dyn Format>>,
    config: WebhookConfig,
    bus: DaemonBus,
}

impl Sender {
    pub fn new(
        queue: Arc<dyn JobQueue>,
        config: WebhookConfig,
        bus: DaemonBus,
    ) -> Result<Self, String> {
        let secret = std::env::var(&config.secret_env).unwrap_or_default();
        let signer = if secret.is_empty() {
            None
        } else {
            Some(Signer::new(&secret).map_err(|e| format!("{}: {e}", config.secret_env))?)
        };
        let timeout: Duration = config.timeout.into();
        let http = reqwest::Client::builder()
            .timeout(timeout)
            .connect_timeout(timeout)
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(|e| format!("cannot build the webhook HTTP client: {e}"))?;
        let webhooks: Arc<dyn Format> = Arc::new(Signed::new(signer, &config.secret_env));
        Ok(Self {
            queue,
            http,
            formats: HashMap::from([(crate::queue::outbox::WEBHOOK.to_string(), webhooks)]),
            config,
            bus,
        })
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
            Err(error) if delivery.attempts + 1 >= self.config.max_attempts => {
                tracing::warn!(delivery = %delivery.id, job_id = %delivery.job_id, url = %delivery.target, %error, "webhook dead-lettered after its last attempt");
                DeliveryResult::Dead { error }
            }
            Err(error) => {
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

    async fn send(&self, delivery: &Delivery) -> Result<(), String> {
        let format = self.formats.get(&delivery.kind).ok_or_else(|| {
            format!(
                "delivery {} of job {} is of kind {:?}, which this daemon cannot send",
                delivery.id, delivery.job_id, delivery.kind
            )
        })?;
        let outgoing = format.format(delivery)?;
        let mut request = self
            .http
            .post(&delivery.target)
            .header("content-type", "application/json");
        for (name, value) in &outgoing.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        failpoint::hit(Failpoint::BeforeDeliverySend);
        let mut response = request
            .body(outgoing.body)
            .send()
            .await
            .map_err(|e| format!("POST {} failed: {e}", delivery.target))?;
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
        Err(format!(
            "POST {} answered HTTP {status}: {}",
            delivery.target,
            String::from_utf8_lossy(&answer)
        ))
    }
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
