//! Daily budgets: what a bundle's jobs (`limits.per_day` in its
//! bundle.yaml) and an API key's jobs (`per_day` in the keys file) may
//! spend over a rolling day, and the reservation that holds them under
//! concurrency.
//!
//! A day's spend is what its finished jobs spent plus what its jobs not
//! finished hold: each new job reserves its maximum spend — its limits, or
//! what remains of the day when it has none — in the write that queues it,
//! and holds it until it ends, when its real spend takes the reservation's
//! place. The queue decides ([`reserve`]) under one lock, so fifty
//! concurrent submits cannot all see the same remainder; a job stops at its
//! reservation as at any limit, so the day overshoots by at most one model
//! call per job (the call that crosses its limit).

use std::time::{Duration, SystemTime};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::BudgetLimits;

/// A bundle's spend over a rolling day, past which new jobs are refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DailyLimits {
    /// Prompt plus completion tokens of the bundle's jobs in the last 24 hours.
    #[serde(default)]
    pub tokens: Option<u64>,
    /// Cost of the bundle's jobs in the last 24 hours.
    #[serde(default)]
    pub cost: Option<f64>,
}

/// How long the rolling window of a bundle's daily budget is.
pub const DAY: Duration = Duration::from_secs(24 * 60 * 60);

/// A bundle whose jobs and nested runs used up its daily budget.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "bundle {bundle:?} has used its daily budget: limits.per_day.{budget} is {limit} and its jobs and nested runs of the last 24 hours spent {spent}; retry later, or raise the limit in its bundle.yaml"
)]
pub struct DailyStop {
    pub bundle: String,
    pub budget: &'static str,
    pub limit: String,
    pub spent: String,
}

impl DailyLimits {
    /// Whether `bundle`, whose jobs and nested runs of the last day spent
    /// and hold `spend`, may start another nested run.
    pub fn admit(&self, bundle: &str, spend: &DaySpend) -> Result<(), DailyStop> {
        self.room(spend).map(|_| ()).map_err(|reached| DailyStop {
            bundle: bundle.to_string(),
            budget: reached.budget,
            limit: reached.limit,
            spent: reached.spent,
        })
    }

    /// What a new job may still take of this day after `spend`: what
    /// remains of each budget set; or the budget already given out.
    pub fn room(&self, spend: &DaySpend) -> Result<Reservation, DailyReached> {
        let (tokens, cost) = (spend.total_tokens(), spend.total_cost());
        if let Some(mut reached) = self.reached(tokens, cost) {
            let held = match reached.budget {
                "tokens" => (spend.held_tokens > 0).then(|| spend.held_tokens.to_string()),
                _ => (spend.held_cost > 0.0).then(|| format!("{:.6}", spend.held_cost)),
            };
            if let Some(held) = held {
                reached.spent = format!(
                    "{} ({held} of it held by jobs not finished yet)",
                    reached.spent
                );
            }
            return Err(reached);
        }
        Ok(Reservation {
            tokens: self.tokens.map(|limit| limit - tokens),
            cost: self.cost.map(|limit| limit - cost),
        })
    }

    /// Which of these limits a day's `tokens` and `cost` reached, if any:
    /// the one comparison for a bundle's day and an API key's.
    pub fn reached(&self, tokens: u64, cost: f64) -> Option<DailyReached> {
        let (budget, limit, spent) = match (self.tokens, self.cost) {
            (Some(limit), _) if tokens >= limit => {
                ("tokens", limit.to_string(), tokens.to_string())
            }
            (_, Some(limit)) if cost >= limit => ("cost", limit.to_string(), format!("{cost:.6}")),
            _ => return None,
        };
        Some(DailyReached {
            budget,
            limit,
            spent,
        })
    }
}

/// A daily limit reached, as people read it.
#[derive(Debug, Clone, PartialEq)]
pub struct DailyReached {
    /// `tokens` or `cost`.
    pub budget: &'static str,
    pub limit: String,
    pub spent: String,
}

/// What a day's jobs spent (`tokens`, `cost`), and what its jobs not yet
/// finished hold beyond what they spent so far (`held_*`).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct DaySpend {
    pub tokens: u64,
    pub cost: f64,
    pub held_tokens: u64,
    pub held_cost: f64,
}

impl DaySpend {
    /// Spent and held tokens: what the day's budget has given out.
    pub fn total_tokens(&self) -> u64 {
        self.tokens.saturating_add(self.held_tokens)
    }

    /// Spent and held cost.
    pub fn total_cost(&self) -> f64 {
        self.cost + self.held_cost
    }
}

/// The most a job may spend, by its limits: `None` where they set no bound.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct JobMax {
    pub tokens: Option<u64>,
    pub cost: Option<f64>,
}

impl From<&BudgetLimits> for JobMax {
    /// `tokens` is the limit on all tokens, else prompt plus completion
    /// when both are limited.
    fn from(limits: &BudgetLimits) -> Self {
        let split = limits
            .prompt_tokens
            .zip(limits.completion_tokens)
            .map(|(prompt, completion)| prompt.saturating_add(completion));
        JobMax {
            tokens: match (limits.tokens, split) {
                (Some(total), Some(split)) => Some(total.min(split)),
                (total, split) => total.or(split),
            },
            cost: limits.cost,
        }
    }
}

/// What a job holds of the daily budgets it runs under until it ends, and
/// the limits it runs to: `None` where no daily budget bounds it.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Reservation {
    pub tokens: Option<u64>,
    pub cost: Option<f64>,
}

impl Reservation {
    /// The lower of the two, per budget.
    fn and(self, other: Reservation) -> Reservation {
        Reservation {
            tokens: lower(self.tokens, other.tokens, u64::min),
            cost: lower(self.cost, other.cost, f64::min),
        }
    }
}

fn lower<T>(a: Option<T>, b: Option<T>, min: impl Fn(T, T) -> T) -> Option<T> {
    match (a, b) {
        (Some(a), Some(b)) => Some(min(a, b)),
        (a, b) => a.or(b),
    }
}

/// The daily budgets a new job is queued against, as admission found them:
/// its key's, its bundle's, and the most the job may spend. The queue
/// reserves against them in the write that queues the job ([`reserve`]).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct DailyBudgets {
    /// The submitting API key's `per_day`.
    pub key: Option<DailyLimits>,
    /// The bundle's `limits.per_day`.
    pub bundle: Option<DailyLimits>,
    /// The job's limits (the bundle's, lowered by the submitter's).
    pub max: JobMax,
}

/// A daily budget that has nothing left for a new job.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum DailyRefusal {
    #[error(
        "API key {key:?} has used its daily budget: per_day.{} is {} and its jobs of the last 24 hours spent {}; retry later, or ask the operator to raise it",
        reached.budget, reached.limit, reached.spent
    )]
    Key { key: String, reached: DailyReached },
    #[error(
        "bundle {bundle:?} has used its daily budget: limits.per_day.{} is {} and its jobs and nested runs of the last 24 hours spent {}; retry later, or raise the limit in its bundle.yaml",
        reached.budget, reached.limit, reached.spent
    )]
    Bundle {
        bundle: String,
        reached: DailyReached,
    },
}

/// What a new job of `bundle`, submitted by `key`, reserves: the most it
/// may spend, held to what remains of each daily budget over it (`spend`:
/// the key's day, the bundle's day), or the budget that has nothing left.
/// The one rule for every way in.
pub fn reserve(
    budgets: &DailyBudgets,
    key: (&str, &DaySpend),
    bundle: (&str, &DaySpend),
) -> Result<Reservation, DailyRefusal> {
    let mut room = Reservation::default();
    if let Some(limits) = &budgets.key {
        let left = limits.room(key.1).map_err(|reached| DailyRefusal::Key {
            key: key.0.to_string(),
            reached,
        })?;
        room = room.and(left);
    }
    if let Some(limits) = &budgets.bundle {
        let left = limits
            .room(bundle.1)
            .map_err(|reached| DailyRefusal::Bundle {
                bundle: bundle.0.to_string(),
                reached,
            })?;
        room = room.and(left);
    }
    // Only what a daily budget bounds is reserved: the job's own limits
    // lower it, and where they set none it takes what remains.
    Ok(Reservation {
        tokens: room
            .tokens
            .map(|left| budgets.max.tokens.map_or(left, |max| max.min(left))),
        cost: room
            .cost
            .map(|left| budgets.max.cost.map_or(left, |max| max.min(left))),
    })
}

/// Where the spend of a bundle's last day is read (the queue, in the
/// daemon): what its jobs, and the nested runs of it in any job, created
/// since `since` spent, and what its jobs not finished hold.
#[async_trait::async_trait]
pub trait DailySpend: Send + Sync {
    async fn spent_since(
        &self,
        bundle: &str,
        since: SystemTime,
    ) -> Result<DaySpend, SpendUnreadable>;
}

/// The store that keeps a day's spend could not be read.
#[derive(Debug, thiserror::Error)]
#[error("{source}")]
pub struct SpendUnreadable {
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_daily_budget_admits_until_used_up() {
        let daily = DailyLimits {
            tokens: Some(100),
            cost: Some(1.0),
        };
        let day = |tokens, cost| DaySpend {
            tokens,
            cost,
            ..Default::default()
        };
        assert!(daily.admit("b", &day(99, 0.5)).is_ok());
        let stop = daily.admit("b", &day(100, 0.5)).unwrap_err();
        assert_eq!((stop.budget, stop.spent.as_str()), ("tokens", "100"));
        assert!(stop.to_string().contains("limits.per_day.tokens is 100"));
        assert_eq!(daily.admit("b", &day(0, 1.0)).unwrap_err().budget, "cost");
    }

    fn spend(tokens: u64, held_tokens: u64) -> DaySpend {
        DaySpend {
            tokens,
            held_tokens,
            ..Default::default()
        }
    }

    #[test]
    fn a_job_reserves_its_limits_or_what_remains_of_the_day() {
        let day = DailyLimits {
            tokens: Some(100),
            cost: None,
        };
        let budgets = |max: Option<u64>| DailyBudgets {
            key: Some(day.clone()),
            bundle: None,
            max: JobMax {
                tokens: max,
                cost: None,
            },
        };
        let of = |max, spent, held| {
            reserve(
                &budgets(max),
                ("k", &spend(spent, held)),
                ("b", &DaySpend::default()),
            )
        };
        assert_eq!(of(Some(20), 0, 0).unwrap().tokens, Some(20), "its limit");
        assert_eq!(
            of(None, 30, 0).unwrap().tokens,
            Some(70),
            "the rest of the day"
        );
        assert_eq!(
            of(Some(20), 30, 60).unwrap().tokens,
            Some(10),
            "held counts"
        );
        let refused = of(Some(20), 40, 60).unwrap_err();
        assert!(
            refused.to_string().contains("per_day.tokens is 100")
                && refused
                    .to_string()
                    .contains("spent 100 (60 of it held by jobs not finished yet)"),
            "{refused}"
        );
        assert!(matches!(refused, DailyRefusal::Key { .. }));
    }

    #[test]
    fn the_lower_of_the_key_and_the_bundle_is_reserved() {
        let budgets = DailyBudgets {
            key: Some(DailyLimits {
                tokens: Some(100),
                cost: None,
            }),
            bundle: Some(DailyLimits {
                tokens: Some(50),
                cost: Some(1.0),
            }),
            max: JobMax::default(),
        };
        let r = reserve(&budgets, ("k", &spend(10, 0)), ("b", &spend(20, 0))).unwrap();
        assert_eq!((r.tokens, r.cost), (Some(30), Some(1.0)));
        let refused = reserve(&budgets, ("k", &spend(0, 0)), ("b", &spend(0, 50))).unwrap_err();
        assert!(matches!(refused, DailyRefusal::Bundle { .. }), "{refused}");
        assert!(
            refused.to_string().contains("limits.per_day.tokens is 50"),
            "{refused}"
        );
    }

    #[test]
    fn a_jobs_maximum_is_its_total_or_both_of_its_split_limits() {
        let max = |limits: BudgetLimits| JobMax::from(&limits).tokens;
        assert_eq!(max(BudgetLimits::default()), None);
        assert_eq!(
            max(BudgetLimits {
                prompt_tokens: Some(10),
                ..Default::default()
            }),
            None,
            "completion is unbounded"
        );
        assert_eq!(
            max(BudgetLimits {
                prompt_tokens: Some(10),
                completion_tokens: Some(5),
                ..Default::default()
            }),
            Some(15)
        );
        assert_eq!(
            max(BudgetLimits {
                tokens: Some(12),
                prompt_tokens: Some(10),
                completion_tokens: Some(5),
                ..Default::default()
            }),
            Some(12)
        );
    }
}
