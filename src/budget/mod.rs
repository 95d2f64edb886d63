//! Budgets: what one job may spend (prompt and completion tokens, cost,
//! wall time, tool calls, model calls, nesting depth), checked before each
//! model call and each tool call. A job's runs — its own, its nested agents,
//! its workflow stages, its group-chat replies — share one [`Budget`], and
//! every replayed step counts as it did the first time, so a resumed job
//! stops at the same step it would have without the crash.
//!
//! A seam like the journal: the kernel spends and checks; the bundle and
//! the API say what the limits are. It knows neither. What a bundle's or a
//! key's jobs may spend in a day, and how a new job reserves its share of
//! it, is [`daily`]'s.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::duration::HumanDuration;
use crate::types::TokenUsage;

mod daily;

/// An optional field of limits read from an object only (`null` is none):
/// serde's derive would also read a struct from an array, by position,
/// which the API document calls invalid. For `#[serde(default,
/// deserialize_with = "object_only")]`.
pub fn object_only<'de, D, T>(deserializer: D) -> Result<Option<T>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: serde::de::DeserializeOwned,
{
    type Object = serde_json::Map<String, serde_json::Value>;
    match Option::<Object>::deserialize(deserializer)? {
        None => Ok(None),
        Some(object) => serde_json::from_value(serde_json::Value::Object(object))
            .map(Some)
            .map_err(serde::de::Error::custom),
    }
}

pub use daily::{
    DAY, DailyBudgets, DailyLimits, DailyReached, DailyRefusal, DailySpend, DailyStop, DaySpend,
    JobMax, Reservation, SpendUnreadable, reserve,
};

/// What one job may spend. A bundle sets these under `limits:`; a submitter
/// may lower each (never raise it).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct BudgetLimits {
    /// Prompt plus completion tokens over all model calls of the job (a
    /// job admitted under a daily budget runs to what it reserved of it).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokens: Option<u64>,
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

/// A submitter asked for more than the bundle allows: where (`limits.<name>`),
/// both values, and what to do (ask for less; a submitter can only lower).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "limits.{limit}: {asked} is above the bundle's {bundle}; a submitter can only lower a budget"
)]
pub struct LimitAboveBundle {
    /// The limit's key under `limits`, e.g. `model_calls`.
    pub limit: &'static str,
    /// What the submitter asked for, as written in the message.
    pub asked: String,
    /// The bundle's own limit.
    pub bundle: String,
}

/// The API's error bodies take the message as text.
impl From<LimitAboveBundle> for String {
    fn from(e: LimitAboveBundle) -> Self {
        e.to_string()
    }
}

impl BudgetLimits {
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// These limits held to what a job reserved of its daily budgets: it
    /// runs to the lower of each.
    pub fn reserved(mut self, reservation: Reservation) -> BudgetLimits {
        if let Some(tokens) = reservation.tokens {
            self.tokens = Some(self.tokens.map_or(tokens, |limit| limit.min(tokens)));
        }
        if let Some(cost) = reservation.cost {
            self.cost = Some(self.cost.map_or(cost, |limit| limit.min(cost)));
        }
        self
    }

    /// These limits lowered by a submitter's: each limit the submitter
    /// gives must be at most the bundle's (where the bundle sets one).
    pub fn lowered_by(&self, asked: &BudgetLimits) -> Result<BudgetLimits, LimitAboveBundle> {
        fn lower<T: PartialOrd + Copy + std::fmt::Debug>(
            name: &'static str,
            bundle: Option<T>,
            asked: Option<T>,
        ) -> Result<Option<T>, LimitAboveBundle> {
            match (bundle, asked) {
                (Some(b), Some(a)) if a > b => Err(LimitAboveBundle {
                    limit: name,
                    asked: format!("{a:?}"),
                    bundle: format!("{b:?}"),
                }),
                (_, Some(a)) => Ok(Some(a)),
                (b, None) => Ok(b),
            }
        }
        Ok(BudgetLimits {
            tokens: lower("tokens", self.tokens, asked.tokens)?,
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

/// Why a run stopped: the budget, its limit and what was spent, and whose
/// limits they are (the job's, or a nested agent's own bundle's).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BudgetStop {
    pub budget: String,
    pub limit: String,
    pub spent: String,
    /// The bundle of a nested agent run whose own `limits` stopped it;
    /// `None` for the job's budget.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bundle: Option<String>,
}

impl std::error::Error for BudgetStop {}

impl std::fmt::Display for BudgetStop {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let Self {
            budget,
            limit,
            spent,
            bundle,
        } = self;
        match bundle {
            None => write!(
                f,
                "budget exceeded: {budget} is limited to {limit} and the job has spent {spent}; raise limits.{budget} in the bundle (a submitter can only lower it) or resubmit with less to do"
            ),
            Some(bundle) => write!(
                f,
                "budget exceeded: the nested run of bundle {bundle:?} is limited to {limit} {budget} by its own limits.{budget} and has spent {spent}; ask it for less, or raise limits.{budget} in that bundle's bundle.yaml"
            ),
        }
    }
}

/// One job's limits and running spend, shared by all its runs. A nested
/// agent run has its own, on top of the job's ([`Budget::nested`]): what
/// it spends counts on both, and a step needs both to allow it.
#[derive(Clone, Debug)]
pub struct Budget {
    limits: Arc<BudgetLimits>,
    prices: Arc<Prices>,
    spent: Arc<Mutex<Spent>>,
    /// When the job's first attempt started (wall time runs across attempts);
    /// a nested run's own budget: when it started.
    started: SystemTime,
    /// The budget of the run this one is nested in.
    parent: Option<Arc<Budget>>,
    /// The bundle whose own limits these are, for a nested run's budget.
    bundle: Option<String>,
    /// The depth the run of this budget runs at (0: the job's own agent).
    depth: u32,
    /// What the job's nested runs spent, per bundle: shared by the whole
    /// job, recorded with its outcome for those bundles' daily budgets.
    by_bundle: Arc<Mutex<BTreeMap<String, Spent>>>,
}

impl Budget {
    pub fn new(limits: BudgetLimits, prices: Arc<Prices>, started: SystemTime) -> Self {
        Self {
            limits: Arc::new(limits),
            prices,
            spent: Arc::default(),
            started,
            parent: None,
            bundle: None,
            depth: 0,
            by_bundle: Arc::default(),
        }
    }

    /// The budget of a run of `bundle` nested at `depth`, held to the lower
    /// of this budget's remainder and the bundle's own `limits` (its
    /// `depth` counted from the nested run, its wall time from now).
    pub fn nested(&self, bundle: &str, limits: BudgetLimits, depth: u32) -> Budget {
        Budget {
            limits: Arc::new(limits),
            prices: self.prices.clone(),
            spent: Arc::default(),
            started: SystemTime::now(),
            parent: Some(Arc::new(self.clone())),
            bundle: Some(bundle.to_string()),
            depth,
            by_bundle: self.by_bundle.clone(),
        }
    }

    pub fn limits(&self) -> &BudgetLimits {
        &self.limits
    }

    /// What the run of this budget (with its nested runs) has spent; for
    /// the job's budget, what the job has.
    pub fn spent(&self) -> Spent {
        *self.spent.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// What the job's nested agent runs spent, per bundle.
    pub fn spent_by_bundle(&self) -> BTreeMap<String, Spent> {
        self.by_bundle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Counts `add` on this budget, on each budget it is nested in, and on
    /// the nested runs' per-bundle spend (once per bundle, however deep
    /// it recurses into itself).
    fn charge(&self, add: &dyn Fn(&mut Spent)) {
        let mut charged: Vec<&str> = Vec::new();
        let mut budget = Some(self);
        while let Some(b) = budget {
            add(&mut b.spent.lock().unwrap_or_else(|p| p.into_inner()));
            if let Some(bundle) = b.bundle.as_deref()
                && !charged.contains(&bundle)
            {
                charged.push(bundle);
                let mut by_bundle = self.by_bundle.lock().unwrap_or_else(|p| p.into_inner());
                add(by_bundle.entry(bundle.to_string()).or_default());
            }
            budget = b.parent.as_deref();
        }
    }

    /// A model reply (made now or replayed): its tokens, its cost.
    pub fn add_reply(&self, model: &str, usage: &TokenUsage) -> f64 {
        let cost = self.cost_of(model, usage);
        self.charge(&|spent| {
            spent.model_calls += 1;
            spent.prompt_tokens += usage.prompt_tokens;
            spent.completion_tokens += usage.completion_tokens;
            spent.cost += cost;
        });
        cost
    }

    /// What `usage` of `model` costs by the price table (0 without a price).
    pub fn cost_of(&self, model: &str, usage: &TokenUsage) -> f64 {
        self.prices.get(model).map_or(0.0, |price| price.of(usage))
    }

    /// A tool call answered (run now or replayed).
    pub fn add_tool_call(&self) {
        self.charge(&|spent| spent.tool_calls += 1);
    }

    /// Runs `check` on this budget, then on each budget it is nested in:
    /// the first stop.
    fn each(&self, check: impl Fn(&Budget) -> Result<(), BudgetStop>) -> Result<(), BudgetStop> {
        let mut budget = Some(self);
        while let Some(b) = budget {
            check(b).map_err(|mut stop| {
                stop.bundle = b.bundle.clone();
                stop
            })?;
            budget = b.parent.as_deref();
        }
        Ok(())
    }

    /// Before a model call: the first budget already used up.
    pub fn before_model_call(&self) -> Result<(), BudgetStop> {
        self.each(|b| {
            let spent = b.spent();
            let l = &b.limits;
            let tokens = spent.prompt_tokens.saturating_add(spent.completion_tokens);
            reached("tokens", l.tokens, tokens)?;
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
            b.wall_time()
        })
    }

    /// Before a tool call: the first budget already used up.
    pub fn before_tool_call(&self) -> Result<(), BudgetStop> {
        self.each(|b| {
            reached("tool_calls", b.limits.tool_calls, b.spent().tool_calls)?;
            b.wall_time()
        })
    }

    /// Before a nested run at `depth` (1: called by the job's own agent);
    /// a nested run's own `depth` counts from the depth it runs at.
    pub fn before_nested_run(&self, depth: u32) -> Result<(), BudgetStop> {
        self.each(|b| {
            let relative = depth.saturating_sub(b.depth);
            match b.limits.depth {
                Some(limit) if relative > limit => Err(stop("depth", limit, relative.to_string())),
                _ => Ok(()),
            }
        })
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
        bundle: None,
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
            .unwrap_err()
            .to_string();
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
    fn a_nested_budget_holds_to_the_lower_of_its_own_limits_and_the_jobs() {
        let job = Budget::new(
            BudgetLimits {
                model_calls: Some(3),
                depth: Some(3),
                ..Default::default()
            },
            Arc::default(),
            SystemTime::now(),
        );
        let helper = job.nested(
            "helper",
            BudgetLimits {
                model_calls: Some(1),
                depth: Some(1),
                ..Default::default()
            },
            1,
        );
        assert!(helper.before_model_call().is_ok());
        helper.add_reply("m", &usage(10, 5));
        let stop = helper.before_model_call().unwrap_err();
        assert_eq!(stop.budget, "model_calls");
        assert_eq!(stop.bundle.as_deref(), Some("helper"));
        assert!(
            stop.to_string().contains("bundle \"helper\"")
                && stop.to_string().contains("limits.model_calls"),
            "{stop}"
        );
        assert_eq!(job.spent().model_calls, 1, "the job counts it");
        assert!(job.before_model_call().is_ok(), "the job may go on");
        assert_eq!(job.spent_by_bundle()["helper"].prompt_tokens, 10);

        // Own limits roomier than the job's remainder: the job's stop.
        let roomy = job.nested("roomy", BudgetLimits::default(), 1);
        roomy.add_reply("m", &usage(1, 1));
        roomy.add_reply("m", &usage(1, 1));
        let stop = roomy.before_model_call().unwrap_err();
        assert_eq!((stop.budget.as_str(), stop.bundle), ("model_calls", None));

        // A nested run's own depth counts from where it runs.
        assert!(helper.before_nested_run(2).is_ok());
        let stop = helper.before_nested_run(3).unwrap_err();
        assert_eq!(stop.bundle.as_deref(), Some("helper"));
        // A bundle nested in itself counts once for its day.
        let inner = helper.nested("helper", BudgetLimits::default(), 2);
        inner.add_reply("m", &usage(5, 0));
        assert_eq!(job.spent_by_bundle()["helper"].prompt_tokens, 15);
        assert_eq!(helper.spent().prompt_tokens, 15);
        assert_eq!(job.spent().prompt_tokens, 17);
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
