//! Reserving a new job's share of its daily budgets in the write that
//! queues it (the rule itself is `budget::reserve`): the budgets' lock
//! first, then what each key's and bundle's day already spent and holds,
//! read once per write and kept as the write's jobs reserve, so a batch's
//! jobs count each other as concurrent writes count them.

use std::collections::HashMap;

use super::transaction::Tx;
use super::tx::{Fail, Res};
use super::{NewJob, QueueError};
use crate::budget::{self, DaySpend, Reservation};

/// A job as it is queued under daily budgets: its limits held to what it
/// reserved, and what it holds (stored with its row).
pub(crate) struct Reserved {
    pub job: NewJob,
    pub tokens: i64,
    pub cost_micros: i64,
}

/// What the days one write reserves against spent and hold, as the write
/// has changed them.
pub(crate) struct DayLedger {
    since: i64,
    locked: bool,
    keys: HashMap<String, DaySpend>,
    bundles: HashMap<String, DaySpend>,
}

impl DayLedger {
    /// A ledger for a write at `now` (ms): its days began 24 hours before.
    pub(crate) fn new(now: i64) -> Self {
        let day = i64::try_from(budget::DAY.as_millis()).unwrap_or(i64::MAX);
        Self {
            since: now.saturating_sub(day),
            locked: false,
            keys: HashMap::new(),
            bundles: HashMap::new(),
        }
    }

    /// Takes the daily budgets' lock if any of `jobs` is under a daily
    /// budget: before any other lock of the write (see `op`).
    pub(crate) async fn lock<'a>(
        &mut self,
        tx: &mut impl Tx,
        mut jobs: impl Iterator<Item = &'a NewJob>,
    ) -> Res<()> {
        if !self.locked && jobs.any(|job| job.daily.is_some()) {
            tx.lock_daily_budgets().await?;
            self.locked = true;
        }
        Ok(())
    }

    /// Reserves what `job` (the `index`-th of its write) may spend of its
    /// daily budgets: the job as queued, or `None` when it is under none;
    /// a budget with nothing left refuses the write.
    pub(crate) async fn reserve(
        &mut self,
        tx: &mut impl Tx,
        index: usize,
        job: &NewJob,
    ) -> Res<Option<Reserved>> {
        let Some(budgets) = &job.daily else {
            return Ok(None);
        };
        debug_assert!(self.locked, "reserve before lock");
        let owner = job.owner.as_deref().unwrap_or_default();
        let key_day = match budgets.key {
            Some(_) => self.key_day(tx, owner).await?,
            None => DaySpend::default(),
        };
        let bundle_day = match budgets.bundle {
            Some(_) => self.bundle_day(tx, &job.bundle).await?,
            None => DaySpend::default(),
        };
        let reservation =
            budget::reserve(budgets, (owner, &key_day), (&job.bundle, &bundle_day))
                .map_err(|refusal| Fail::Refused(QueueError::DailyBudget { index, refusal }))?;
        if budgets.key.is_some() {
            hold(self.keys.get_mut(owner), reservation);
        }
        if budgets.bundle.is_some() {
            hold(self.bundles.get_mut(&job.bundle), reservation);
        }
        let mut queued = job.clone();
        queued.limits = Some(queued.limits.unwrap_or_default().reserved(reservation));
        Ok(Some(Reserved {
            job: queued,
            tokens: reservation
                .tokens
                .map_or(0, |t| i64::try_from(t).unwrap_or(i64::MAX)),
            cost_micros: reservation
                .cost
                .map_or(0, |c| (c * 1_000_000.0).round() as i64),
        }))
    }

    async fn key_day(&mut self, tx: &mut impl Tx, owner: &str) -> Res<DaySpend> {
        if let Some(day) = self.keys.get(owner) {
            return Ok(*day);
        }
        let (_, stored) = tx.owner_load(owner, self.since).await?;
        let day = stored.day();
        self.keys.insert(owner.to_string(), day);
        Ok(day)
    }

    async fn bundle_day(&mut self, tx: &mut impl Tx, bundle: &str) -> Res<DaySpend> {
        if let Some(day) = self.bundles.get(bundle) {
            return Ok(*day);
        }
        let day = tx.spend_since(bundle, self.since).await?.day();
        self.bundles.insert(bundle.to_string(), day);
        Ok(day)
    }
}

/// Counts a reservation as held by the day it was taken from.
fn hold(day: Option<&mut DaySpend>, reservation: Reservation) {
    let Some(day) = day else { return };
    day.held_tokens = day
        .held_tokens
        .saturating_add(reservation.tokens.unwrap_or_default());
    day.held_cost += reservation.cost.unwrap_or_default();
}
