//! Where each key's lease scan starts on PostgreSQL.
//!
//! Leasing a job leaves its queued version's entry in `jobs_fair_from` at
//! the head of its key until vacuum removes it, and while another client
//! holds a snapshot vacuum can remove none: a scan from the head then walks
//! every job leased since the snapshot began, and every lease scanned from
//! the head three times (the key walk, the key's due test, its fetch).
//! Measured with a snapshot held 120 s: leases down 72.5 %, one lease's
//! buffers 1,174 → 2,314 (docs/daemon.md). So a daemon remembers, per key,
//! where it last leased — the job's place in the index: minus its priority,
//! its `run_at`, its id (a backlog submitted in bulk holds dozens of jobs
//! in one millisecond) — and starts the key's next scan there; a job of a higher
//! priority, which sorts before that place, is found by a probe of the
//! range before it, which holds none of the leased jobs' entries. It also
//! remembers the database time up to which it left no abandoned run, and
//! looks for abandoned runs only after it.
//!
//! A cursor can miss a job put back behind it: one released or resumed with
//! its old `run_at`, one whose submit committed after a newer job was
//! leased, one skipped as locked by a lease that then rolled back. So a
//! lease from every key's head (a full walk, which also finds the keys this
//! daemon has not seen) comes regularly — after [`FULL_EVERY`] or twenty
//! times what the last full walk took, whichever is longer, so that walks a
//! long-held snapshot makes slow cost at most a twentieth of the time — and
//! sooner (after [`FULL_GAP`], or twenty times the last walk) when a lease
//! from the cursors found nothing: such a lease waits for it rather than
//! answer "nothing" (a worker woken for a job another daemon submitted
//! would otherwise sleep until its next poll with the job behind no cursor
//! it knows). A job behind a cursor waits at most that
//! long; the queue's order within a key is otherwise kept.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio_postgres::Row;

/// How often, at least, a lease walks every key from its head.
pub(super) const FULL_EVERY: Duration = Duration::from_secs(1);

/// How soon a full walk may follow the last one when a lease from the
/// cursors found nothing.
pub(super) const FULL_GAP: Duration = Duration::from_millis(25);

/// How many times what a full walk took the next one waits, at least.
const FULL_COST_FACTOR: u32 = 20;

/// How long a key stays known without a due job (a key whose jobs come one
/// at a time is found from its cursor, not only by the next full walk).
const KEY_TTL: Duration = Duration::from_secs(60);

/// Keys remembered at most; beyond it every lease is a full walk (which
/// costs what a lease from as many cursors would).
const MAX_KEYS: usize = 4096;

/// The start of a key's scan when nothing is known of it: its head.
const HEAD: Mark = Mark {
    neg_priority: i64::MIN,
    run_at: i64::MIN,
    id: String::new(),
};

/// A job's place among its key's queued jobs, in `jobs_fair_from`'s order
/// (minus the priority first, so that the order is ascending and a scan can
/// start at a place).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Mark {
    pub neg_priority: i64,
    pub run_at: i64,
    pub id: String,
}

/// How a lease finds its jobs.
#[derive(Debug, PartialEq)]
pub(super) enum Walk {
    /// Every key with due jobs from its head, and every abandoned run.
    Full,
    /// The known keys, each from its cursor (`HEAD` when none), and the
    /// runs abandoned after `expired_after` (database milliseconds).
    FromCursors {
        keys: Vec<String>,
        neg_priorities: Vec<i64>,
        run_ats: Vec<i64>,
        ids: Vec<String>,
        expired_after: i64,
    },
}

/// What a committed lease statement saw (its extra columns, see
/// `lease::lease_sql`).
#[derive(Debug, Default, PartialEq)]
pub(super) struct Seen {
    /// The database's time the statement ran at.
    pub db_now: i64,
    /// The keys the statement found with due jobs.
    pub ready: Vec<String>,
    /// Each queued job leased: its key and its place.
    pub leased: Vec<(String, Mark)>,
    /// Whether it leased an abandoned run.
    pub leased_abandoned: bool,
}

impl Seen {
    /// Reads the columns from `at` of a lease statement's rows: the job's
    /// key (NULL for an abandoned run), minus its priority, its `run_at`
    /// (its id is the row's first column),
    /// the statement's time and the keys found ready. A row without a job
    /// (nothing was due) carries only the last two.
    pub(super) fn read(rows: &[Row], at: usize) -> Result<Self, tokio_postgres::Error> {
        let mut seen = Seen::default();
        for (i, row) in rows.iter().enumerate() {
            if i == 0 {
                seen.db_now = row.try_get(at + 3)?;
                let ready: Option<Vec<String>> = row.try_get(at + 4)?;
                seen.ready = ready.unwrap_or_default();
            }
            let key: Option<String> = row.try_get(at)?;
            let run_at: Option<i64> = row.try_get(at + 2)?;
            let id: Option<String> = row.try_get(0)?;
            match (key, run_at, id) {
                (Some(key), Some(run_at), Some(id)) => seen.leased.push((
                    key,
                    Mark {
                        neg_priority: row.try_get(at + 1)?,
                        run_at,
                        id,
                    },
                )),
                (None, Some(_), Some(_)) => seen.leased_abandoned = true,
                _ => {}
            }
        }
        Ok(seen)
    }
}

/// What a lease from the cursors that found nothing does next.
#[derive(Debug, PartialEq)]
pub(super) enum Next {
    /// A full walk began after it did and saw all it could: it answers
    /// nothing.
    Covered,
    /// A full walk, now (claimed).
    WalkAll,
    /// Asks again after this long (a full walk ran too recently).
    Wait(Duration),
}

/// One daemon's cursors over one queue.
#[derive(Default)]
pub(super) struct Cursors(Mutex<State>);

#[derive(Default)]
struct State {
    keys: HashMap<String, Known>,
    /// When a lease next walks every key from its head (`None`: now).
    next_full: Option<Instant>,
    /// When the last full walk began, and how long after it another may
    /// follow when the cursors find nothing.
    last_full: Option<(Instant, Duration)>,
    /// The database time up to which no abandoned run was left.
    expired_after: Option<i64>,
    /// When a job was last put back here (see [`Cursors::rewind`]).
    rewound: Option<Instant>,
}

impl State {
    /// A full walk starts now: the next is not due before [`FULL_EVERY`]
    /// (the walk's own cost sets it when it ends, see [`Cursors::learn`]).
    fn claim_full(&mut self, now: Instant) {
        self.next_full = Some(now + FULL_EVERY);
        let gap = self.last_full.map_or(FULL_GAP, |(_, gap)| gap);
        self.last_full = Some((now, gap));
    }
}

struct Known {
    /// Where the key's next scan starts (`None`: its head).
    from: Option<Mark>,
    seen: Instant,
}

impl Cursors {
    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How the next lease finds its jobs. A full walk is handed to one
    /// lease at a time; the others walk from the cursors meanwhile (eight
    /// workers finding it due at once made eight full walks, each slower
    /// the longer a snapshot was held).
    pub(super) fn plan(&self, now: Instant) -> Walk {
        let mut state = self.state();
        let full_due = state.next_full.is_none_or(|at| now >= at);
        match state.expired_after {
            Some(expired_after) if !full_due => {
                let n = state.keys.len();
                let mut walk = (
                    Vec::with_capacity(n),
                    Vec::with_capacity(n),
                    Vec::with_capacity(n),
                    Vec::with_capacity(n),
                );
                let head = HEAD;
                for (key, known) in &state.keys {
                    let from = known.from.as_ref().unwrap_or(&head);
                    walk.0.push(key.clone());
                    walk.1.push(from.neg_priority);
                    walk.2.push(from.run_at);
                    walk.3.push(from.id.clone());
                }
                Walk::FromCursors {
                    keys: walk.0,
                    neg_priorities: walk.1,
                    run_ats: walk.2,
                    ids: walk.3,
                    expired_after,
                }
            }
            _ => {
                state.claim_full(now);
                Walk::Full
            }
        }
    }

    /// What a lease from the cursors that began at `began` and found
    /// nothing does next (see [`Next`]); a full walk it is told to make is
    /// claimed for it.
    pub(super) fn after_nothing(&self, began: Instant, now: Instant) -> Next {
        let mut state = self.state();
        match state.last_full {
            Some((at, _)) if at >= began => Next::Covered,
            Some((at, gap)) if now.duration_since(at) < gap => Next::Wait(at + gap - now),
            _ => {
                state.claim_full(now);
                Next::WalkAll
            }
        }
    }

    /// A job was submitted for `key` here: its key is known from now on,
    /// from its head, without waiting for the next full walk.
    pub(super) fn submitted(&self, key: &str) {
        let mut state = self.state();
        if !state.keys.contains_key(key) && state.keys.len() < MAX_KEYS {
            let seen = Instant::now();
            state
                .keys
                .insert(key.to_string(), Known { from: None, seen });
        }
    }

    /// A job may have been put back behind a cursor here (released, resumed,
    /// redriven): the next lease walks every key from its head.
    pub(super) fn rewind(&self) {
        let mut state = self.state();
        state.next_full = None;
        state.rewound = Some(Instant::now());
    }

    /// Learns from a committed lease made by `walk`, begun at `began`.
    pub(super) fn learn(&self, walk: &Walk, began: Instant, seen: &Seen) {
        let now = Instant::now();
        let mut state = self.state();
        if *walk == Walk::Full {
            let took = now.duration_since(began) * FULL_COST_FACTOR;
            // A job put back while this walk ran may be behind it.
            let put_back = state.rewound.is_some_and(|at| at >= began);
            state.next_full = (!put_back).then(|| began + took.max(FULL_EVERY));
            state.last_full = Some((began, took.max(FULL_GAP)));
            state
                .keys
                .retain(|_, known| now.duration_since(known.seen) < KEY_TTL);
        }
        for key in &seen.ready {
            match state.keys.get_mut(key) {
                Some(known) => known.seen = now,
                None => {
                    let known = Known {
                        from: None,
                        seen: now,
                    };
                    state.keys.insert(key.clone(), known);
                }
            }
        }
        for (key, mark) in &seen.leased {
            if let Some(known) = state.keys.get_mut(key)
                && known.from.as_ref().is_none_or(|from| from < mark)
            {
                known.from = Some(mark.clone());
            }
        }
        if state.keys.len() > MAX_KEYS {
            // Too many to walk from cursors: full walks until fewer.
            state.keys.clear();
            state.next_full = None;
        }
        // No abandoned run leased: none was left up to the statement's time
        // (it takes abandoned runs first), so later leases look after it.
        if !seen.leased_abandoned {
            let after = state.expired_after.unwrap_or(i64::MIN).max(seen.db_now);
            state.expired_after = Some(after);
        }
        let found_nothing = seen.leased.is_empty() && !seen.leased_abandoned;
        if let Some((at, gap)) = state.last_full
            && found_nothing
            && *walk != Walk::Full
        {
            let sooner = at + gap;
            state.next_full = Some(state.next_full.map_or(sooner, |n| n.min(sooner)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(db_now: i64, ready: &[&str], leased: &[(&str, i64, i64)]) -> Seen {
        Seen {
            db_now,
            ready: ready.iter().map(|k| k.to_string()).collect(),
            leased: leased
                .iter()
                .map(|(k, p, r)| {
                    let mark = Mark {
                        neg_priority: *p,
                        run_at: *r,
                        id: format!("j{r}"),
                    };
                    (k.to_string(), mark)
                })
                .collect(),
            leased_abandoned: false,
        }
    }

    fn from_of(walk: &Walk, key: &str) -> Option<(i64, i64)> {
        match walk {
            Walk::FromCursors {
                keys,
                neg_priorities,
                run_ats,
                ..
            } => keys
                .iter()
                .position(|k| k == key)
                .map(|i| (neg_priorities[i], run_ats[i])),
            Walk::Full => None,
        }
    }

    #[test]
    fn the_first_lease_walks_every_key_and_the_next_start_where_they_leased() {
        let cursors = Cursors::default();
        let t0 = Instant::now();
        assert_eq!(cursors.plan(t0), Walk::Full);
        let full = seen(1_000, &["a", "b"], &[("a", 0, 900), ("a", 0, 950)]);
        cursors.learn(&Walk::Full, t0, &full);
        let walk = cursors.plan(Instant::now());
        assert_eq!(from_of(&walk, "a"), Some((0, 950)));
        assert_eq!(from_of(&walk, "b"), Some((i64::MIN, i64::MIN)));
        let Walk::FromCursors { expired_after, .. } = walk else {
            panic!("expected a walk from the cursors, got {walk:?}");
        };
        assert_eq!(expired_after, 1_000);
    }

    #[test]
    fn a_cursor_never_moves_back_and_an_abandoned_run_keeps_the_time() {
        let cursors = Cursors::default();
        let t0 = Instant::now();
        cursors.learn(&Walk::Full, t0, &seen(1_000, &["a"], &[("a", 0, 950)]));
        let walk = cursors.plan(Instant::now());
        // A job of a higher priority (minus it is lower) leased later.
        let mut later = seen(1_100, &["a"], &[("a", -5, 1_050)]);
        later.leased_abandoned = true;
        cursors.learn(&walk, Instant::now(), &later);
        let walk = cursors.plan(Instant::now());
        assert_eq!(from_of(&walk, "a"), Some((0, 950)));
        let Walk::FromCursors { expired_after, .. } = walk else {
            panic!("expected a walk from the cursors, got {walk:?}");
        };
        assert_eq!(expired_after, 1_000, "more abandoned runs may be left");
    }

    #[test]
    fn full_walks_come_regularly_and_sooner_when_the_cursors_find_nothing() {
        let cursors = Cursors::default();
        let t0 = Instant::now();
        cursors.learn(&Walk::Full, t0, &seen(1_000, &["a"], &[("a", 0, 950)]));
        let walk = cursors.plan(t0 + FULL_EVERY / 2);
        assert_ne!(walk, Walk::Full);
        cursors.learn(&walk, t0, &seen(1_010, &[], &[]));
        // Nothing found: the next full walk may come after the gap.
        assert_eq!(cursors.plan(t0 + FULL_GAP * 2), Walk::Full);
        let began = t0 + FULL_GAP;
        assert_eq!(
            cursors.after_nothing(began, t0 + FULL_GAP * 2),
            Next::Covered,
            "a full walk began after it"
        );
        let began = t0 + FULL_GAP * 5 / 2;
        assert_eq!(
            cursors.after_nothing(began, began),
            Next::Wait(FULL_GAP / 2),
            "too soon after the last"
        );
        assert_eq!(
            cursors.after_nothing(began, t0 + FULL_GAP * 4),
            Next::WalkAll
        );
        assert_eq!(cursors.plan(t0 + FULL_EVERY * 3), Walk::Full);
    }

    #[test]
    fn one_lease_at_a_time_walks_every_key_the_others_walk_from_the_cursors() {
        let cursors = Cursors::default();
        let t0 = Instant::now();
        cursors.learn(&Walk::Full, t0, &seen(1_000, &["a"], &[("a", 0, 950)]));
        let later = t0 + FULL_EVERY * 2;
        assert_eq!(cursors.plan(later), Walk::Full);
        assert_ne!(cursors.plan(later), Walk::Full, "the full walk is taken");
        cursors.rewind();
        assert_eq!(cursors.plan(later), Walk::Full, "a put-back job needs one");
    }

    #[test]
    fn a_key_submitted_here_is_walked_from_its_head_before_the_next_full_walk() {
        let cursors = Cursors::default();
        let t0 = Instant::now();
        cursors.learn(&Walk::Full, t0, &seen(1_000, &["a"], &[("a", 0, 950)]));
        cursors.submitted("b");
        let walk = cursors.plan(Instant::now());
        assert_eq!(from_of(&walk, "b"), Some((i64::MIN, i64::MIN)));
    }
}
