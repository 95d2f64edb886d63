//! What admission keeps between requests ([`Gate`]): each key's rate
//! limiter and a lock per key with an in-flight cap (held from the count to
//! the enqueue). The rules that ask it are `quota`'s; the API holds the
//! lock (`api/admission.rs`). Everything a key starts is a job (a direct
//! tool run and a verify too), so the queue alone counts what is in flight.

use std::collections::HashMap;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

use crate::access::Principal;

/// What admission keeps between requests: each key's rate limiter, and a
/// lock per key with an in-flight cap so that concurrent submissions of
/// one key cannot all pass the same count.
#[derive(Default)]
pub struct Gate {
    limiters: Mutex<HashMap<String, (u32, Arc<DefaultDirectRateLimiter>)>>,
    in_flight_locks: Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl Gate {
    /// The key's limiter, made again when its rate changed in a reload.
    pub fn limiter(&self, name: &str, per_minute: u32) -> Arc<DefaultDirectRateLimiter> {
        let mut limiters = self.limiters.lock().unwrap_or_else(|p| p.into_inner());
        match limiters.get(name) {
            Some((rate, limiter)) if *rate == per_minute => limiter.clone(),
            _ => {
                let rate = NonZeroU32::new(per_minute).unwrap_or(NonZeroU32::MIN);
                let limiter = Arc::new(RateLimiter::direct(Quota::per_minute(rate)));
                limiters.insert(name.to_string(), (per_minute, limiter.clone()));
                limiter
            }
        }
    }

    /// For a key with a jobs-in-flight cap: its lock, held from the count
    /// to the enqueue, so concurrent submissions cannot all pass one count.
    pub async fn hold_in_flight(
        &self,
        key: &Principal,
    ) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        key.max_in_flight?;
        let lock = {
            let mut locks = self
                .in_flight_locks
                .lock()
                .unwrap_or_else(|p| p.into_inner());
            locks.entry(key.name.clone()).or_default().clone()
        };
        Some(lock.lock_owned().await)
    }
}
