//! A key's own limits on new work, asked before it is queued: its rate
//! (`rate_per_minute`, kept in the [`Gate`]) and its jobs in flight
//! (`max_in_flight`, counted by the queue). Its
//! daily budget is not here: the queue reserves it in the write that
//! queues the job.

use std::num::NonZeroU32;
use std::time::{Duration, SystemTime};

use super::gate::Gate;
use super::refusal::Refusal;
use crate::access::Principal;
use crate::queue::JobQueue;

/// Refuses `n` new jobs of `key` that its rate or its
/// in-flight cap does not allow now. Hold the key's in-flight lock
/// ([`Gate::hold_in_flight`]) from this check to the enqueue.
pub async fn key_quotas(
    gate: &Gate,
    queue: &dyn JobQueue,
    key: &Principal,
    n: u32,
) -> Result<(), Refusal> {
    if let Some(per_minute) = key.rate_per_minute {
        rate(gate, key, per_minute, n)?;
    }
    let Some(max) = key.max_in_flight else {
        return Ok(());
    };
    let load = queue
        .owner_load(&key.name, SystemTime::now() - crate::budget::DAY)
        .await?;
    let in_flight = load.in_flight;
    if in_flight + u64::from(n) > max {
        return Err(Refusal::InFlight {
            key: key.name.clone(),
            in_flight,
            max,
        });
    }
    Ok(())
}

/// Takes `n` cells of the key's rate, or refuses saying when to retry (or
/// that a batch of `n` never fits a minute).
fn rate(gate: &Gate, key: &Principal, per_minute: u32, n: u32) -> Result<(), Refusal> {
    let limiter = gate.limiter(&key.name, per_minute);
    let cells = NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
    match limiter.check_n(cells) {
        Ok(Ok(())) => Ok(()),
        Ok(Err(not_until)) => {
            let clock = governor::clock::DefaultClock::default();
            let wait: Duration = not_until.wait_time_from(governor::clock::Clock::now(&clock));
            Err(Refusal::Rate {
                key: key.name.clone(),
                per_minute,
                wait_secs: wait.as_secs().max(1),
            })
        }
        Err(_) => Err(Refusal::BatchOverRate {
            key: key.name.clone(),
            jobs: n,
            per_minute,
        }),
    }
}
