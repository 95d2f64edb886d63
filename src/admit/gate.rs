//! What admission keeps between requests ([`Gate`]): each key's rate
//! limiter, a lock per key with an in-flight cap (held from the count to
//! the enqueue), and the direct tool runs running now per key. The rules
//! that ask it are `quota`'s; the API holds the lock (`api/admission.rs`).

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
    /// Direct tool runs running now, per key: in flight as its jobs are.
    direct_runs: Arc<Mutex<HashMap<String, u64>>>,
}

/// One direct tool run counted in flight for its key until it drops.
pub struct DirectRunTicket {
    runs: Arc<Mutex<HashMap<String, u64>>>,
    key: String,
}

impl Drop for DirectRunTicket {
    fn drop(&mut self) {
        let mut runs = self.runs.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(count) = runs.get_mut(&self.key) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                runs.remove(&self.key);
            }
        }
    }
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

    /// The key's direct tool runs running now.
    pub fn direct_runs(&self, key: &str) -> u64 {
        let runs = self.direct_runs.lock().unwrap_or_else(|p| p.into_inner());
        runs.get(key).copied().unwrap_or(0)
    }

    /// Counts one more direct tool run of `key` until the ticket drops.
    pub fn start_direct_run(&self, key: &str) -> DirectRunTicket {
        let mut runs = self.direct_runs.lock().unwrap_or_else(|p| p.into_inner());
        *runs.entry(key.to_string()).or_default() += 1;
        DirectRunTicket {
            runs: self.direct_runs.clone(),
            key: key.to_string(),
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
