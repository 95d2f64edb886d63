//! The outbox operations (their rules in `queue/outbox.rs`): claim due
//! deliveries, settle one under its claim's generation, redrive a dead one,
//! and a task's push configs.

use super::*;

operation! {
    /// Up to `limit` due deliveries, leased for `lease_for`.
    pub(crate) struct ClaimDeliveries {
        pub lease_for: Duration,
        pub limit: usize,
    }
    write "claim_deliveries" -> Vec<Delivery> = |op, tx| {
        let lease_ms = i64::try_from(op.lease_for.as_millis()).unwrap_or(i64::MAX);
        outbox::claim(tx, lease_ms, op.limit).await
    };
}

operation! {
    /// Records a delivery attempt's outcome under the claim that made it.
    pub(crate) struct SettleDelivery {
        pub id: String,
        /// The claim's generation (`Delivery::claim`).
        pub claim: u64,
        pub result: DeliveryResult,
    }
    write "settle_delivery" -> Settled = |op, tx|
        outbox::settle(tx, &op.id, op.claim, &op.result).await;
}

operation! {
    pub(crate) struct RedriveDelivery {
        pub id: String,
        /// Only a delivery of this key's jobs.
        pub owner: Option<String>,
    }
    write "redrive_delivery" -> Redrive = |op, tx|
        outbox::redrive(tx, &op.id, op.owner.as_deref()).await;
}

operation! {
    /// Adds a push config to a task within its caps (or replaces the one
    /// with its id).
    pub(crate) struct PutPushConfig {
        pub id: JobId,
        pub config: PushConfig,
        pub caps: super::PushCaps,
    }
    write "put_push_config" -> () = |op, tx|
        push_configs::put_push(tx, op.id.as_str(), &op.config, &op.caps).await;
}

operation! {
    /// Whether there was one to delete.
    pub(crate) struct DeletePushConfig {
        pub id: JobId,
        pub config: String,
    }
    write "delete_push_config" -> bool = |op, tx|
        push_configs::delete_push(tx, op.id.as_str(), &op.config).await;
}
