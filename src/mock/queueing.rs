//! The mock server's queueing mode: a small model server's behaviour under
//! load. A fixed number of requests run at once; the rest wait in its
//! queue; each request's service time grows with the queue it found (a
//! batch that grows slows every member), and a vLLM-like `/metrics` page
//! reports the queue. Past `max_waiting`, requests are refused with 503,
//! as vLLM does past `--max-num-queued-reqs`.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::Deserialize;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// The `queueing:` section of a script.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Queueing {
    /// Requests served at once.
    pub slots: usize,
    /// A request's service time with nothing queued.
    #[serde(default)]
    pub service_ms: u64,
    /// Added to the service time per request waiting when it starts.
    #[serde(default)]
    pub per_waiting_ms: u64,
    /// Refuse with 503 when this many already wait.
    #[serde(default)]
    pub max_waiting: Option<usize>,
}

/// What the queue holds now and held at most (`GET /_mock/load`).
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, Deserialize)]
pub struct QueueLoad {
    pub waiting: usize,
    pub running: usize,
    pub peak_waiting: usize,
    pub peak_in_flight: usize,
    pub refused: usize,
    /// Requests received, refused ones included.
    pub received: usize,
    /// Requests whose client went away (a timeout) before their reply.
    pub abandoned: usize,
}

pub(super) struct Queue {
    config: Queueing,
    slots: Arc<Semaphore>,
    waiting: AtomicUsize,
    running: AtomicUsize,
    peak_waiting: AtomicUsize,
    peak_in_flight: AtomicUsize,
    refused: AtomicUsize,
    received: AtomicUsize,
    abandoned: AtomicUsize,
}

/// A request in the queue: waiting, then running. Dropped before it is
/// done (its client hung up), it leaves the queue and counts as abandoned.
struct InQueue<'a> {
    queue: &'a Queue,
    running: bool,
    done: bool,
}

impl Drop for InQueue<'_> {
    fn drop(&mut self) {
        let count = if self.running {
            &self.queue.running
        } else {
            &self.queue.waiting
        };
        count.fetch_sub(1, Ordering::SeqCst);
        if !self.done {
            self.queue.abandoned.fetch_add(1, Ordering::SeqCst);
        }
    }
}

/// A request being served; its slot frees when it is dropped.
pub(super) struct Served<'a> {
    _place: InQueue<'a>,
    _slot: Option<OwnedSemaphorePermit>,
}

impl Queue {
    pub(super) fn new(config: Queueing) -> Self {
        Self {
            slots: Arc::new(Semaphore::new(config.slots.max(1))),
            config,
            waiting: AtomicUsize::new(0),
            running: AtomicUsize::new(0),
            peak_waiting: AtomicUsize::new(0),
            peak_in_flight: AtomicUsize::new(0),
            refused: AtomicUsize::new(0),
            received: AtomicUsize::new(0),
            abandoned: AtomicUsize::new(0),
        }
    }

    /// Waits for a slot and the request's service time; `None` when the
    /// queue is full (answer 503).
    pub(super) async fn serve(&self) -> Option<Served<'_>> {
        self.received.fetch_add(1, Ordering::SeqCst);
        let queued = self.waiting.fetch_add(1, Ordering::SeqCst);
        if self.config.max_waiting.is_some_and(|max| queued >= max) {
            self.waiting.fetch_sub(1, Ordering::SeqCst);
            self.refused.fetch_add(1, Ordering::SeqCst);
            return None;
        }
        self.peak_waiting.fetch_max(queued + 1, Ordering::SeqCst);
        let in_flight = queued + 1 + self.running.load(Ordering::SeqCst);
        self.peak_in_flight.fetch_max(in_flight, Ordering::SeqCst);
        let mut place = InQueue {
            queue: self,
            running: false,
            done: false,
        };
        // The semaphore is never closed.
        let slot = self.slots.clone().acquire_owned().await.ok();
        self.running.fetch_add(1, Ordering::SeqCst);
        let behind = self.waiting.fetch_sub(1, Ordering::SeqCst) - 1;
        place.running = true;
        let service = self.config.service_ms + self.config.per_waiting_ms * behind as u64;
        tokio::time::sleep(Duration::from_millis(service)).await;
        place.done = true;
        Some(Served {
            _place: place,
            _slot: slot,
        })
    }

    pub(super) fn load(&self) -> QueueLoad {
        QueueLoad {
            waiting: self.waiting.load(Ordering::SeqCst),
            running: self.running.load(Ordering::SeqCst),
            peak_waiting: self.peak_waiting.load(Ordering::SeqCst),
            peak_in_flight: self.peak_in_flight.load(Ordering::SeqCst),
            refused: self.refused.load(Ordering::SeqCst),
            received: self.received.load(Ordering::SeqCst),
            abandoned: self.abandoned.load(Ordering::SeqCst),
        }
    }

    /// The queue as vLLM's Prometheus page shows it.
    pub(super) fn metrics_page(&self) -> String {
        let load = self.load();
        let usage = load.running as f64 / self.config.slots.max(1) as f64;
        format!(
            "# HELP vllm:num_requests_running Number of requests in model execution batches.\n\
             # TYPE vllm:num_requests_running gauge\n\
             vllm:num_requests_running{{engine=\"0\",model_name=\"mock\"}} {}\n\
             # HELP vllm:num_requests_waiting Number of requests waiting to be processed.\n\
             # TYPE vllm:num_requests_waiting gauge\n\
             vllm:num_requests_waiting{{engine=\"0\",model_name=\"mock\"}} {}\n\
             # HELP vllm:kv_cache_usage_perc KV-cache usage. 1 means 100 percent usage.\n\
             # TYPE vllm:kv_cache_usage_perc gauge\n\
             vllm:kv_cache_usage_perc{{engine=\"0\",model_name=\"mock\"}} {usage}\n",
            load.running, load.waiting
        )
    }
}
