//! Fair shares between API keys: which keys the next leases go to.
//!
//! Stride scheduling over keys (Waldspurger's, the rule behind weighted
//! fair queueing): every key has a *pass*, a virtual time that grows by its
//! *stride* (`BASE / weight`) with each job it is leased, and each lease
//! goes to the key with the smallest pass. A key of weight 3 is leased three
//! jobs for each one of a key of weight 1 while both have jobs waiting, and a
//! key that floods the queue delays another key by at most about one job:
//! the other key's pass is behind. `priority` orders jobs inside a key only.
//!
//! A key's pass is where its last leased job left it, stored on that job
//! (`fair_pass`), so no shared row is written by every lease and concurrent
//! leases never wait for one another; two leases at the same moment may both
//! start from the same pass, which errs by at most the number of concurrent
//! leases. A key that was idle keeps no more than [`CREDIT`] of credit below
//! the most advanced key with jobs waiting, so coming back after a quiet
//! hour does not let it hold the queue to itself.
//!
//! The SQLite queue and PostgreSQL's lifecycle transaction apply [`plan`];
//! PostgreSQL's one-statement lease applies the same rule in SQL
//! (`postgres/hot.rs`), and the conformance suite holds both to one order.

use std::collections::{BinaryHeap, HashMap};

/// The stride of a key of weight 1.
pub const BASE: i64 = 1_000_000;
/// How far below the most advanced waiting key an idle key's pass may be:
/// two jobs of a weight-1 key.
pub const CREDIT: i64 = 2 * BASE;

/// Each key's stride, from the keys file's weights; a key not named has
/// weight 1 (the token, `local`, the scheduler, jobs from before keys).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Shares {
    strides: HashMap<String, i64>,
}

impl Shares {
    /// Shares from `(key, weight)` pairs (the keys file checks the range of
    /// a weight; here a weight of 0 counts as 1, and none moves a pass by
    /// less than 1).
    pub fn new(weights: impl IntoIterator<Item = (String, u32)>) -> Self {
        let strides = weights
            .into_iter()
            .filter(|(_, weight)| *weight != 1)
            .map(|(key, weight)| (key, BASE / i64::from(weight).clamp(1, BASE)))
            .collect();
        Self { strides }
    }

    /// How far a job of `key` moves its pass.
    pub fn stride(&self, key: &str) -> i64 {
        self.strides.get(key).copied().unwrap_or(BASE)
    }

    /// The keys whose stride is not [`BASE`] and their strides, as two
    /// arrays (a statement's parameters).
    pub(crate) fn arrays(&self) -> (Vec<String>, Vec<i64>) {
        self.strides.iter().map(|(k, s)| (k.clone(), *s)).unzip()
    }
}

/// A key with jobs ready to lease, as the store finds it: its name (`""`
/// for jobs from before keys) and its pass, `None` when none of its jobs
/// was ever leased.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct ReadyKey {
    pub key: String,
    pub pass: Option<i64>,
}

/// The next leases one key gets: `count` jobs, the first starting at
/// `start`.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Share {
    pub key: String,
    pub count: usize,
    pub start: i64,
    pub stride: i64,
}

impl Share {
    /// The pass the key has after its `i`-th job (from 0) of this share:
    /// what that job stores.
    pub(crate) fn pass_after(&self, i: usize) -> i64 {
        let i = i64::try_from(i).unwrap_or(i64::MAX);
        self.start
            .saturating_add(self.stride.saturating_mul(i.saturating_add(1)))
    }

    /// The virtual time the `i`-th job of this share starts at: the lease
    /// order across keys.
    pub(crate) fn starts_at(&self, i: usize) -> i64 {
        let i = i64::try_from(i).unwrap_or(i64::MAX);
        self.start.saturating_add(self.stride.saturating_mul(i))
    }
}

/// How the next `n` leases are shared between the keys with jobs ready: by
/// smallest virtual start time, ties to the smaller key name. Keys are
/// returned in the order of their first lease.
pub(crate) fn plan(ready: &[ReadyKey], shares: &Shares, n: usize) -> Vec<Share> {
    let top = ready.iter().filter_map(|k| k.pass).max();
    let floor = top.map_or(0, |top| top.saturating_sub(CREDIT));
    let mut plan: Vec<Share> = ready
        .iter()
        .map(|k| Share {
            key: k.key.clone(),
            count: 0,
            start: k.pass.map_or(floor, |pass| pass.max(floor)),
            stride: shares.stride(&k.key),
        })
        .collect();
    // A min-heap of (next start, key, index): the next lease's key.
    let mut next: BinaryHeap<std::cmp::Reverse<(i64, String, usize)>> = plan
        .iter()
        .enumerate()
        .map(|(i, s)| std::cmp::Reverse((s.start, s.key.clone(), i)))
        .collect();
    let mut first = Vec::new();
    for _ in 0..n {
        let Some(std::cmp::Reverse((_, key, i))) = next.pop() else {
            break;
        };
        let share = &mut plan[i];
        if share.count == 0 {
            first.push(i);
        }
        share.count += 1;
        next.push(std::cmp::Reverse((share.starts_at(share.count), key, i)));
    }
    first.into_iter().map(|i| plan[i].clone()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ready(key: &str, pass: Option<i64>) -> ReadyKey {
        ReadyKey {
            key: key.into(),
            pass,
        }
    }

    fn counts(plan: &[Share]) -> Vec<(&str, usize)> {
        plan.iter().map(|s| (s.key.as_str(), s.count)).collect()
    }

    #[test]
    fn equal_keys_alternate() {
        let plan = plan(
            &[ready("a", Some(10 * BASE)), ready("b", Some(10 * BASE))],
            &Shares::default(),
            4,
        );
        assert_eq!(counts(&plan), [("a", 2), ("b", 2)]);
    }

    #[test]
    fn weights_share_in_proportion() {
        let shares = Shares::new([("a".to_string(), 3)]);
        let plan = plan(&[ready("a", Some(0)), ready("b", Some(0))], &shares, 8);
        assert_eq!(counts(&plan), [("a", 6), ("b", 2)]);
    }

    #[test]
    fn a_key_behind_goes_first_but_banks_little_credit() {
        // `a` flooded the queue; `b` was idle for a long time.
        let plan = plan(
            &[ready("a", Some(1_000 * BASE)), ready("b", Some(BASE))],
            &Shares::default(),
            4,
        );
        assert_eq!(plan[0].key, "b", "the idle key is leased first");
        assert_eq!(
            counts(&plan),
            [("b", 3), ("a", 1)],
            "with at most two jobs of credit"
        );
    }

    #[test]
    fn a_new_key_starts_beside_the_others() {
        let plan = plan(
            &[ready("a", Some(50 * BASE)), ready("new", None)],
            &Shares::default(),
            4,
        );
        assert_eq!(plan[0].key, "new");
        assert_eq!(plan[0].start, 48 * BASE);
    }

    #[test]
    fn passes_follow_strides() {
        let share = Share {
            key: "a".into(),
            count: 2,
            start: 5,
            stride: 10,
        };
        assert_eq!((share.starts_at(0), share.pass_after(0)), (5, 15));
        assert_eq!((share.starts_at(1), share.pass_after(1)), (15, 25));
    }

    #[test]
    fn weights_are_held_to_their_range() {
        let shares = Shares::new([("big".to_string(), u32::MAX), ("zero".to_string(), 0)]);
        assert_eq!(shares.stride("big"), 1);
        assert_eq!(shares.stride("zero"), BASE);
        assert_eq!(shares.stride("other"), BASE);
    }
}
