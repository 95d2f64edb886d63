//! Budgets: what one job may spend (prompt and completion tokens, cost,
//! wall time, tool calls, model calls, nesting depth), checked before each
//! model call and each tool call. A job's runs — its own, its nested agents,
//! its workflow stages, its group-chat replies — share one [`Budget`], and
//! every replayed step counts as it did the first time, so a resumed job
//! stops at the same step it would have without the crash.
//!
//! A seam like the journal: the kernel spends and checks; the bundle and
//! the API say what the limits are. It knows neither.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;
use crate::types::TokenUsage;

/// What one job may spend. A bundle sets these under `limits:`; a submitter
/// may lower each (never raise it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetLimits {
    /// Prompt tokens over all model calls of the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_tokens: Option<u64>,
    /// Completion tokens over all model calls of the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completion_tokens: Option<u64>,
    /// Cost over all model calls, priced by the daemon's `[prices]` table.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost: Option<f64>,
    /// Time since the job's first attempt started ("10m").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub wall_time: Option<HumanDuration>,
    /// Tool calls over the whole job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<u64>,
    /// Model calls over the whole job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_calls: Option<u64>,
    /// How deep agents may nest (1: the job's agent may call agents that
    /// call none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub depth: Option<u32>,
}

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

impl BudgetLimits {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// These limits lowered by a submitter's: each limit the submitter
    /// gives must be at most the bundle's (where the bundle sets one).
    pub fn lowered_by(&self, asked: &BudgetLimits) -> Result<BudgetLimits, String> {
        fn lower<T: PartialOrd + Copy + std::fmt::Debug>(
            name: &str,
            bundle: Option<T>,
            asked: Option<T>,
        ) -> Result<Option<T>, String> {
            match (bundle, asked) {
                (Some(b), Some(a)) if a > b => Err(format!(
                    "limits.{name}: {a:?} is above the bundle's {b:?}; a submitter can only lower a budget"
                )),
                (_, Some(a)) => Ok(Some(a)),
                (b, None) => Ok(b),
            }
        }
        Ok(BudgetLimits {
            prompt_tokens: lower("prompt_tokens", self.prompt_tokens, asked.prompt_tokens)?,
            completion_tokens: lower(
                "completion_tokens",
                self.completion_tokens,
                asked.completion_tokens,
            )?,
            cost: lower("cost", self.cost, asked.cost)?,
            wall_time: lower("wall_time", self.wall_time, asked.wall_time)?,
            tool_calls: lower("tool_calls", self.tool_calls, asked.tool_calls)?,
            model_calls: lower("model_calls", self.model_calls, asked.model_calls)?,
            depth: lower("depth", self.depth, asked.depth)?,
        })
    }
}

/// What a model's tokens cost, per million (the daemon's `[prices]` table).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub prompt_per_million: f64,
    pub completion_per_million: f64,
}

impl Price {
    pub fn of(&self, usage: &TokenUsage) -> f64 {
        (usage.prompt_tokens as f64 * self.prompt_per_million
            + usage.completion_tokens as f64 * self.completion_per_million)
            / 1_000_000.0
    }
}

/// Prices by the model a request names; a model without one costs nothing.
pub type Prices = BTreeMap<String, Price>;

/// What a job has spent so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spent {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    pub cost: f64,
    pub tool_calls: u64,
    pub model_calls: u64,
}

/// Why a run stopped: the budget, its limit and what was spent.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, thiserror::Error)]
#[error(
    "budget exceeded: {budget} is limited to {limit} and the job has spent {spent}; raise limits.{budget} in the bundle (a submitter can only lower it) or resubmit with less to do"
)]
pub struct BudgetStop {
    pub budget: String,
    pub limit: String,
    pub spent: String,
}

/// One job's limits and running spend, shared by all its runs.
#[derive(Clone, Debug)]
pub struct Budget {
    limits: Arc<BudgetLimits>,
    prices: Arc<Prices>,
    spent: Arc<Mutex<Spent>>,
    /// When the job's first attempt started (wall time runs across attempts).
    started: SystemTime,
}

impl Budget {
    pub fn new(limits: BudgetLimits, prices: Arc<Prices>, started: SystemTime) -> Self {
        Self {
            limits: Arc::new(limits),
            prices,
            spent: Arc::default(),
            started,
        }
    }

    pub fn limits(&self) -> &BudgetLimits {
        &self.limits
    }

    pub fn spent(&self) -> Spent {
        *self.spent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A model reply (made now or replayed): its tokens, its cost.
    pub fn add_reply(&self, model: &str, usage: &TokenUsage) -> f64 {
        let cost = self.cost_of(model, usage);
        let mut spent = self.spent.lock().unwrap_or_else(|p| p.into_inner());
        spent.model_calls += 1;
        spent.prompt_tokens += usage.prompt_tokens;
        spent.completion_tokens += usage.completion_tokens;
        spent.cost += cost;
        cost
    }

    /// What `usage` of `model` costs by the price table (0 without a price).
    pub fn cost_of(&self, model: &str, usage: &TokenUsage) -> f64 {
        self.prices.get(model).map_or(0.0, |price| price.of(usage))
    }

    /// A tool call answered (run now or replayed).
    pub fn add_tool_call(&self) {
        self.spent
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .tool_calls += 1;
    }

    /// Before a model call: the first budget already used up.
    pub fn before_model_call(&self) -> Result<(), BudgetStop> {
        let spent = self.spent();
        let l = &self.limits;
        reached("prompt_tokens", l.prompt_tokens, spent.prompt_tokens)?;
        reached(
            "completion_tokens",
            l.completion_tokens,
            spent.completion_tokens,
        )?;
        if let Some(limit) = l.cost
            && spent.cost >= limit
        {
            return Err(stop("cost", limit, format!("{:.6}", spent.cost)));
        }
        reached("model_calls", l.model_calls, spent.model_calls)?;
        self.wall_time()
    }

    /// Before a tool call: the first budget already used up.
    pub fn before_tool_call(&self) -> Result<(), BudgetStop> {
        reached(
            "tool_calls",
            self.limits.tool_calls,
            self.spent().tool_calls,
        )?;
        self.wall_time()
    }

    /// Before a nested run at `depth` (1: called by the job's own agent).
    pub fn before_nested_run(&self, depth: u32) -> Result<(), BudgetStop> {
        match self.limits.depth {
            Some(limit) if depth > limit => Err(stop("depth", limit, depth.to_string())),
            _ => Ok(()),
        }
    }

    fn wall_time(&self) -> Result<(), BudgetStop> {
        let Some(limit) = self.limits.wall_time else {
            return Ok(());
        };
        let elapsed = self.started.elapsed().unwrap_or(Duration::ZERO);
        if elapsed >= limit.0 {
            return Err(stop(
                "wall_time",
                humantime::format_duration(limit.0),
                humantime::format_duration(Duration::from_secs(elapsed.as_secs())).to_string(),
            ));
        }
        Ok(())
    }
}

fn reached(budget: &str, limit: Option<u64>, spent: u64) -> Result<(), BudgetStop> {
    match limit {
        Some(limit) if spent >= limit => Err(stop(budget, limit, spent.to_string())),
        _ => Ok(()),
    }
}

fn stop(budget: &str, limit: impl std::fmt::Display, spent: String) -> BudgetStop {
    BudgetStop {
        budget: budget.to_string(),
        limit: limit.to_string(),
        spent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(prompt: u64, completion: u64) -> TokenUsage {
        TokenUsage {
            prompt_tokens: prompt,
            completion_tokens: completion,
            total_tokens: prompt + completion,
        }
    }

    #[test]
    fn a_submitter_lowers_never_raises() {
        let bundle = BudgetLimits {
            model_calls: Some(5),
            cost: Some(1.0),
            ..Default::default()
        };
        let lowered = bundle
            .lowered_by(&BudgetLimits {
                model_calls: Some(2),
                tool_calls: Some(3),
                ..Default::default()
            })
            .unwrap();
        assert_eq!(lowered.model_calls, Some(2));
        assert_eq!(lowered.tool_calls, Some(3), "a limit the bundle lacks");
        assert_eq!(lowered.cost, Some(1.0), "kept");
        let err = bundle
            .lowered_by(&BudgetLimits {
                model_calls: Some(6),
                ..Default::default()
            })
            .unwrap_err();
        assert!(
            err.contains("limits.model_calls") && err.contains("only lower"),
            "{err}"
        );
    }

    #[test]
    fn each_budget_stops_when_used_up() {
        let prices: Prices = [(
            "m".to_string(),
            Price {
                prompt_per_million: 1_000_000.0,
                completion_per_million: 0.0,
            },
        )]
        .into();
        let budget = Budget::new(
            BudgetLimits {
                model_calls: Some(2),
                cost: Some(25.0),
                tool_calls: Some(1),
                depth: Some(1),
                ..Default::default()
            },
            Arc::new(prices),
            SystemTime::now(),
        );
        assert!(budget.before_model_call().is_ok());
        assert_eq!(budget.add_reply("m", &usage(10, 5)), 10.0);
        assert!(budget.before_model_call().is_ok());
        budget.add_reply("m", &usage(10, 5));
        let stop = budget.before_model_call().unwrap_err();
        assert_eq!(
            (stop.budget.as_str(), stop.limit.as_str()),
            ("model_calls", "2")
        );
        assert!(budget.before_tool_call().is_ok());
        budget.add_tool_call();
        assert_eq!(budget.before_tool_call().unwrap_err().budget, "tool_calls");
        assert!(budget.before_nested_run(1).is_ok());
        assert_eq!(budget.before_nested_run(2).unwrap_err().budget, "depth");

        let costly = Budget::new(
            BudgetLimits {
                cost: Some(15.0),
                ..Default::default()
            },
            budget.prices.clone(),
            SystemTime::now(),
        );
        costly.add_reply("m", &usage(20, 0));
        let stop = costly.before_model_call().unwrap_err();
        assert_eq!(stop.budget, "cost");
        assert!(stop.to_string().contains("spent 20.000000"), "{stop}");
    }

    #[test]
    fn wall_time_counts_from_the_first_attempt() {
        let budget = Budget::new(
            BudgetLimits {
                wall_time: Some(HumanDuration::from_secs(60)),
                ..Default::default()
            },
            Arc::default(),
            SystemTime::now() - Duration::from_secs(61),
        );
        assert_eq!(budget.before_tool_call().unwrap_err().budget, "wall_time");
    }
}
