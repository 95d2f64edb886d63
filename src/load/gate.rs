//! The gate in front of one endpoint: how many new calls the server's last
//! reported load leaves room for, and the calls waiting for room, in the
//! order they go: calls of jobs in flight before jobs' first calls, then by
//! priority, then taking turns across fairness keys, then by arrival.

use std::cmp::Reverse;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::oneshot;

use super::signals::Signals;
use super::ticket::{self, CallTicket};
use crate::config::{LoadConfig, LoadThresholds};
use crate::events::daemon::{DaemonBus, DaemonEvent, LoadChange};

/// Where a waiting call stands; smaller goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Place {
    /// 0: a call of a job in flight; 1: a job's first call.
    class: u8,
    priority: Reverse<i32>,
    /// How many calls of the same fairness key were waiting before it.
    turn: u64,
    arrival: u64,
}

struct Waiter {
    go: oneshot::Sender<()>,
    fairness: String,
}

/// New calls the server has room for until its next reading (`None`: no limit).
#[derive(Debug, Clone, Copy, PartialEq)]
struct Room {
    all: Option<u64>,
    first: Option<u64>,
}

impl Room {
    const UNLIMITED: Room = Room {
        all: None,
        first: None,
    };
    const NONE: Room = Room {
        all: Some(0),
        first: Some(0),
    };

    fn fits(&self, class: u8) -> bool {
        let free = |n: Option<u64>| n.is_none_or(|n| n > 0);
        free(self.all) && (class == 0 || free(self.first))
    }

    fn take(&mut self, class: u8) {
        let dec = |n: &mut Option<u64>| {
            if let Some(n) = n {
                *n = n.saturating_sub(1);
            }
        };
        dec(&mut self.all);
        if class == 1 {
            dec(&mut self.first);
        }
    }
}

struct State {
    room: Room,
    falling_back: bool,
    waiting: BTreeMap<Place, Waiter>,
    waiting_by_key: HashMap<String, u64>,
    arrivals: u64,
}

pub struct LoadGate {
    endpoint: String,
    config: LoadConfig,
    bus: DaemonBus,
    state: Mutex<State>,
}

impl LoadGate {
    /// A gate that no poller feeds yet: `LoadGate::start` (beside the
    /// poller, which calls into the gate and not the other way) is the one
    /// a daemon uses.
    pub(super) fn new(endpoint: String, config: LoadConfig, bus: DaemonBus) -> Self {
        // Until the first reading, the server is taken to be idle.
        let room = room_for(&config, Signals::default());
        Self {
            endpoint,
            config,
            bus,
            state: Mutex::new(State {
                room,
                falling_back: false,
                waiting: BTreeMap::new(),
                waiting_by_key: HashMap::new(),
                arrivals: 0,
            }),
        }
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn config(&self) -> &LoadConfig {
        &self.config
    }

    /// Waits until the server has room for the current call.
    pub async fn admit(self: &Arc<Self>) {
        let call = ticket::current_call();
        let class = u8::from(call.first_call);
        let (place, go) = self.enqueue(&call, class);
        let mut go = go;
        if go.try_recv().is_ok() {
            return;
        }
        self.publish(LoadChange::Held {
            first_call: call.first_call,
        });
        let mut waiting = Waiting {
            gate: self,
            place,
            first_call: call.first_call,
            released: false,
        };
        // The sender is only dropped after sending (or with the gate,
        // which this call holds): either way the call goes ahead.
        let _ = go.await;
        waiting.released = true;
        self.publish(LoadChange::Released {
            first_call: call.first_call,
        });
    }

    fn enqueue(&self, call: &CallTicket, class: u8) -> (Place, oneshot::Receiver<()>) {
        let (tx, rx) = oneshot::channel();
        let mut state = self.lock();
        state.arrivals += 1;
        let arrival = state.arrivals;
        let turns = state
            .waiting_by_key
            .entry(call.fairness.clone())
            .or_default();
        let place = Place {
            class,
            priority: Reverse(call.priority),
            turn: *turns,
            arrival,
        };
        *turns += 1;
        state.waiting.insert(
            place,
            Waiter {
                go: tx,
                fairness: call.fairness.clone(),
            },
        );
        release(&mut state);
        (place, rx)
    }

    /// A new reading of the server's load.
    pub fn read(&self, signals: Signals) {
        let recovered = {
            let mut state = self.lock();
            state.room = room_for(&self.config, signals);
            let recovered = std::mem::take(&mut state.falling_back);
            release(&mut state);
            recovered
        };
        self.publish(LoadChange::Signals {
            waiting: signals.waiting,
            kv_cache: signals.kv_cache,
        });
        if recovered {
            self.publish(LoadChange::Recovered);
        }
    }

    /// The page could not be read: the gate opens (the endpoint's fixed
    /// permit still applies) until it reads again.
    pub fn unreadable(&self, reason: String) {
        let first = {
            let mut state = self.lock();
            state.room = Room::UNLIMITED;
            let first = !std::mem::replace(&mut state.falling_back, true);
            release(&mut state);
            first
        };
        if first {
            self.publish(LoadChange::Fallback { reason });
        }
    }

    /// The server refused a call as overloaded: no new call goes until
    /// the next reading says there is room.
    pub fn refused(&self, status: u16) {
        {
            let mut state = self.lock();
            if !state.falling_back {
                state.room = Room::NONE;
            }
        }
        self.publish(LoadChange::Refused { status });
    }

    fn leave(&self, place: Place) -> bool {
        let mut state = self.lock();
        match state.waiting.remove(&place) {
            Some(waiter) => {
                forget_turn(&mut state, &waiter.fairness);
                true
            }
            None => false,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn publish(&self, change: LoadChange) {
        self.bus.publish(DaemonEvent::EndpointLoad {
            endpoint: self.endpoint.clone(),
            change,
        });
    }
}

/// A held call; dropped before release (its job cancelled), it leaves the line.
struct Waiting<'a> {
    gate: &'a LoadGate,
    place: Place,
    first_call: bool,
    released: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if !self.released && self.gate.leave(self.place) {
            self.gate.publish(LoadChange::Abandoned {
                first_call: self.first_call,
            });
        } else if !self.released {
            // Released as it was dropped: it went ahead as far as counts go.
            self.gate.publish(LoadChange::Released {
                first_call: self.first_call,
            });
        }
    }
}

/// Lets waiting calls go, in order, while there is room.
fn release(state: &mut State) {
    while let Some(entry) = state.waiting.first_entry() {
        let class = entry.key().class;
        if !state.room.fits(class) {
            return;
        }
        let waiter = entry.remove();
        forget_turn(state, &waiter.fairness);
        // A waiter gone (its call dropped) takes no room.
        if waiter.go.send(()).is_ok() {
            state.room.take(class);
        }
    }
}

fn forget_turn(state: &mut State, fairness: &str) {
    if let Some(turns) = state.waiting_by_key.get_mut(fairness) {
        *turns = turns.saturating_sub(1);
        if *turns == 0 {
            state.waiting_by_key.remove(fairness);
        }
    }
}

/// The room a reading leaves: below each threshold, as many calls as take
/// the server's queue one past it (one at least, so a threshold of 0 still
/// lets calls through one reading at a time); past it, none.
fn room_for(config: &LoadConfig, signals: Signals) -> Room {
    Room {
        all: room_under(config.hold_above, signals),
        first: room_under(config.first_call_hold_above, signals),
    }
}

fn room_under(limits: LoadThresholds, signals: Signals) -> Option<u64> {
    if let (Some(limit), Some(used)) = (limits.kv_cache, signals.kv_cache)
        && used > limit
    {
        return Some(0);
    }
    let limit = limits.waiting?;
    let waiting = signals.waiting.unwrap_or(0.0);
    if waiting > limit {
        return Some(0);
    }
    // Both finite and bounded by the config's and the page's numbers.
    Some((limit - waiting).floor().clamp(0.0, 1e6) as u64 + 1)
}

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::*;
    use crate::load::ticket::JobTicket;

    fn gate(hold: f64, first: f64) -> Arc<LoadGate> {
        let config = LoadConfig {
            hold_above: LoadThresholds {
                waiting: Some(hold),
                kv_cache: Some(0.9),
            },
            first_call_hold_above: LoadThresholds {
                waiting: Some(first),
                kv_cache: Some(0.8),
            },
            ..LoadConfig::default()
        };
        Arc::new(LoadGate::new("ep".into(), config, DaemonBus::new()))
    }

    fn busy(waiting: f64) -> Signals {
        Signals {
            waiting: Some(waiting),
            kv_cache: Some(0.1),
        }
    }

    /// Spawns a call of a job with `priority`, `key`, first or not; its
    /// handle finishes when the gate lets it go and pushes `name`.
    fn call(
        gate: &Arc<LoadGate>,
        order: &Arc<Mutex<Vec<String>>>,
        name: &str,
        priority: i32,
        key: &str,
        started: bool,
    ) -> tokio::task::JoinHandle<()> {
        let (gate, order, name) = (gate.clone(), order.clone(), name.to_string());
        let ticket = JobTicket::new(priority, key.into(), started);
        tokio::spawn(JobTicket::scope(ticket, async move {
            gate.admit().await;
            order.lock().unwrap().push(name);
        }))
    }

    async fn settle() {
        for _ in 0..20 {
            tokio::task::yield_now().await;
        }
    }

    #[tokio::test]
    async fn past_the_threshold_calls_wait_and_drain_in_priority_then_fair_order() {
        let gate = gate(2.0, 0.0);
        gate.read(busy(5.0));
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut calls = vec![
            call(&gate, &order, "a1", 0, "a", true),
            call(&gate, &order, "a2", 0, "a", true),
            call(&gate, &order, "b1", 0, "b", true),
        ];
        settle().await;
        calls.push(call(&gate, &order, "urgent", 5, "c", true));
        calls.push(call(&gate, &order, "new", 9, "d", false));
        settle().await;
        assert!(
            order.lock().unwrap().is_empty(),
            "all held past the threshold"
        );
        // Room for two in-flight calls (2 - 1 + 1); first calls stay held
        // (1 waiting is past their threshold of 0).
        gate.read(busy(1.0));
        settle().await;
        assert_eq!(*order.lock().unwrap(), ["urgent", "a1"]);
        gate.read(busy(0.0));
        settle().await;
        assert_eq!(*order.lock().unwrap(), ["urgent", "a1", "b1", "a2", "new"]);
        for c in calls {
            c.await.unwrap();
        }
    }

    #[tokio::test]
    async fn a_refusal_holds_until_the_next_reading_and_a_broken_page_opens_the_gate() {
        let gate = gate(4.0, 1.0);
        gate.refused(503);
        let order = Arc::new(Mutex::new(Vec::new()));
        let held = call(&gate, &order, "x", 0, "a", true);
        settle().await;
        assert!(order.lock().unwrap().is_empty());
        gate.unreadable("connection refused".into());
        held.await.unwrap();
        // Falling back, a KV cache past the limit would not matter: nothing reads it.
        call(&gate, &order, "y", 0, "a", false).await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["x", "y"]);
    }

    #[tokio::test]
    async fn an_abandoned_call_leaves_the_line_without_taking_room() {
        let gate = gate(0.0, 0.0);
        gate.read(busy(3.0));
        let order = Arc::new(Mutex::new(Vec::new()));
        let gone = call(&gate, &order, "gone", 9, "a", true);
        let kept = call(&gate, &order, "kept", 0, "b", true);
        settle().await;
        gone.abort();
        settle().await;
        gate.read(busy(0.0));
        kept.await.unwrap();
        assert_eq!(*order.lock().unwrap(), ["kept"]);
        assert!(gate.lock().waiting_by_key.is_empty());
    }
}
