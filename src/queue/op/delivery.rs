//! The outbox operations (their rules in `queue/outbox.rs`): claim due
//! deliveries, settle one under its claim's generation, redrive a dead one,
//! and a task's push configs.

use super::*;

/// Up to `limit` due deliveries, leased for `lease_for`.
pub(crate) struct ClaimDeliveries {
    pub lease_for: Duration,
    pub limit: usize,
}

impl Operation for ClaimDeliveries {
    type Output = Vec<Delivery>;
    const NAME: &'static str = "claim_deliveries";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Vec<Delivery>> {
        let lease_ms = i64::try_from(self.lease_for.as_millis()).unwrap_or(i64::MAX);
        outbox::claim(tx, lease_ms, self.limit).await
    }
}

impl Write for ClaimDeliveries {}

/// Records a delivery attempt's outcome under the claim that made it.
pub(crate) struct SettleDelivery {
    pub id: String,
    /// The claim's generation (`Delivery::claim`).
    pub claim: u64,
    pub result: DeliveryResult,
}

impl Operation for SettleDelivery {
    type Output = Settled;
    const NAME: &'static str = "settle_delivery";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Settled> {
        outbox::settle(tx, &self.id, self.claim, &self.result).await
    }
}

impl Write for SettleDelivery {}

pub(crate) struct RedriveDelivery {
    pub id: String,
    /// Only a delivery of this key's jobs.
    pub owner: Option<String>,
}

impl Operation for RedriveDelivery {
    type Output = Redrive;
    const NAME: &'static str = "redrive_delivery";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<Redrive> {
        outbox::redrive(tx, &self.id, self.owner.as_deref()).await
    }
}

impl Write for RedriveDelivery {}

/// Adds a push config to a task within its caps (or replaces the one
/// with its id).
pub(crate) struct PutPushConfig {
    pub id: JobId,
    pub config: PushConfig,
    pub caps: super::PushCaps,
}

impl Operation for PutPushConfig {
    type Output = ();
    const NAME: &'static str = "put_push_config";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<()> {
        push_configs::put_push(tx, self.id.as_str(), &self.config, &self.caps).await
    }
}

impl Write for PutPushConfig {}

/// Whether there was one to delete.
pub(crate) struct DeletePushConfig {
    pub id: JobId,
    pub config: String,
}

impl Operation for DeletePushConfig {
    type Output = bool;
    const NAME: &'static str = "delete_push_config";
    async fn run<T: Tx>(&self, tx: &mut T) -> Res<bool> {
        push_configs::delete_push(tx, self.id.as_str(), &self.config).await
    }
}

impl Write for DeletePushConfig {}
