//! A few dedicated threads per plugin for its blocking calls.
//!
//! Plugin code may block, so it cannot run on the async runtime threads; on
//! tokio's shared blocking pool, though, a call that never returns keeps its
//! thread forever, and enough of them would starve everything else that
//! needs that pool (the queue's SQLite work among it). Here a stuck call can
//! only occupy one of its own plugin's threads; once all are stuck, further
//! calls to that plugin wait for a free thread, within their timeout, and
//! fail naming the plugin.

use std::panic::AssertUnwindSafe;
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;

/// Threads per plugin: calls of one plugin that may run at the same time.
pub const PLUGIN_CALL_THREADS: usize = 4;

type Job = Box<dyn FnOnce() + Send>;

/// Why a call did not run to an answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PoolError {
    #[error(
        "timeout: plugin {plugin} had no free call slot within {after:?} (all {slots} are busy with calls that have not returned; the plugin may be stuck — check it, or restart the daemon to reset it)"
    )]
    NoSlot {
        plugin: String,
        slots: usize,
        after: Duration,
    },
    #[error("timeout: plugin {plugin} did not answer within {after:?}")]
    Timeout { plugin: String, after: Duration },
    #[error("plugin {plugin}: the call ended without an answer (it panicked on the daemon's side)")]
    Lost { plugin: String },
    #[error("plugin {plugin}: cannot start its call threads: {detail}")]
    Spawn { plugin: String, detail: String },
}

impl PoolError {
    /// Whether the call may succeed when tried again: the plugin was busy
    /// or slow, not broken.
    pub fn is_retryable(&self) -> bool {
        matches!(self, Self::NoSlot { .. } | Self::Timeout { .. })
    }
}

/// The call threads of one plugin.
pub struct CallPool {
    plugin: String,
    threads: usize,
    /// One permit per thread; a permit travels with its call and is released
    /// when the call really returns (not when the caller gives up), so a
    /// stuck call keeps its slot.
    slots: Arc<Semaphore>,
    jobs: SyncSender<(Job, OwnedSemaphorePermit)>,
}

impl CallPool {
    pub fn new(plugin: &str, threads: usize) -> Result<Self, PoolError> {
        let threads = threads.max(1);
        // Every queued job holds a permit, so the channel never holds more
        // than `threads` jobs and sending never blocks.
        let (jobs, receiver) = sync_channel::<(Job, OwnedSemaphorePermit)>(threads);
        let receiver = Arc::new(Mutex::new(receiver));
        for i in 0..threads {
            let receiver = receiver.clone();
            std::thread::Builder::new()
                .name(format!("plugin-{plugin}-{i}"))
                .spawn(move || worker(&receiver))
                .map_err(|e| PoolError::Spawn {
                    plugin: plugin.to_string(),
                    detail: e.to_string(),
                })?;
        }
        Ok(Self {
            plugin: plugin.to_string(),
            threads,
            slots: Arc::new(Semaphore::new(threads)),
            jobs,
        })
    }

    /// Runs `f` on one of the plugin's threads. `timeout` covers waiting for
    /// a free thread and the call itself.
    pub async fn run<T, F>(&self, timeout: Duration, f: F) -> Result<T, PoolError>
    where
        T: Send + 'static,
        F: FnOnce() -> T + Send + 'static,
    {
        let deadline = Instant::now() + timeout;
        let permit =
            match tokio::time::timeout_at(deadline, self.slots.clone().acquire_owned()).await {
                Ok(Ok(permit)) => permit,
                // The semaphore is never closed; treat it like no slot.
                Ok(Err(_)) | Err(_) => {
                    return Err(PoolError::NoSlot {
                        plugin: self.plugin.clone(),
                        slots: self.threads,
                        after: timeout,
                    });
                }
            };
        let (tx, rx) = tokio::sync::oneshot::channel();
        let job: Job = Box::new(move || {
            let _ = tx.send(f());
        });
        match self.jobs.try_send((job, permit)) {
            Ok(()) => {}
            Err(TrySendError::Full(_) | TrySendError::Disconnected(_)) => {
                return Err(PoolError::Lost {
                    plugin: self.plugin.clone(),
                });
            }
        }
        match tokio::time::timeout_at(deadline, rx).await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(_)) => Err(PoolError::Lost {
                plugin: self.plugin.clone(),
            }),
            Err(_) => Err(PoolError::Timeout {
                plugin: self.plugin.clone(),
                after: timeout,
            }),
        }
    }
}

fn worker(receiver: &Mutex<Receiver<(Job, OwnedSemaphorePermit)>>) {
    loop {
        // The lock is held only while waiting for the next job.
        let next = match receiver.lock() {
            Ok(r) => r.recv(),
            Err(_) => return,
        };
        // The pool was dropped: nothing more will come.
        let Ok((job, permit)) = next else { return };
        // A panic here (the SDK already catches the plugin's own) must not
        // kill the thread and shrink the pool; the caller sees `Lost`.
        let _ = std::panic::catch_unwind(AssertUnwindSafe(job));
        drop(permit);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Condvar;

    /// Blocks the threads that call `wait` until `open`.
    #[derive(Default)]
    struct Gate(Mutex<bool>, Condvar);

    impl Gate {
        fn wait(&self) {
            let mut open = self.0.lock().unwrap();
            while !*open {
                open = self.1.wait(open).unwrap();
            }
        }
        fn open(&self) {
            *self.0.lock().unwrap() = true;
            self.1.notify_all();
        }
    }

    /// Calls that never return (until the test ends) fill the plugin's own
    /// threads and then time out waiting for a slot, naming the plugin; the
    /// runtime's blocking pool — two threads here — stays free throughout.
    #[test]
    fn stuck_calls_time_out_and_leave_the_blocking_pool_free() {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .max_blocking_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let gate = Arc::new(Gate::default());
        runtime.block_on(async {
            let pool = CallPool::new("stuck", 2).unwrap();
            let calls = (0..10).map(|_| {
                let gate = gate.clone();
                pool.run(Duration::from_millis(200), move || gate.wait())
            });
            let results = futures::future::join_all(calls).await;
            let timeouts = results
                .iter()
                .filter(|r| matches!(r, Err(PoolError::Timeout { plugin, .. }) if plugin == "stuck"))
                .count();
            let no_slot = results
                .iter()
                .filter(|r| matches!(r, Err(PoolError::NoSlot { plugin, slots: 2, .. }) if plugin == "stuck"))
                .count();
            assert_eq!((timeouts, no_slot), (2, 8), "{results:?}");
            assert!(results[9].as_ref().unwrap_err().to_string().starts_with("timeout: plugin stuck"));

            // The runtime's blocking pool still runs work, more of it than
            // it has threads.
            let blocking = (0..4).map(|i| tokio::task::spawn_blocking(move || i * 2));
            let out: Vec<i32> = futures::future::join_all(blocking)
                .await
                .into_iter()
                .map(Result::unwrap)
                .collect();
            assert_eq!(out, [0, 2, 4, 6]);

            // Once the stuck calls return, the slots are free again.
            gate.open();
            assert_eq!(pool.run(Duration::from_secs(30), || 7).await, Ok(7));
        });
    }

    #[tokio::test]
    async fn a_panicking_call_is_lost_and_the_thread_survives() {
        let pool = CallPool::new("p", 1).unwrap();
        let lost = pool
            .run(Duration::from_secs(30), || -> i32 { panic!("boom") })
            .await;
        assert_eq!(lost, Err(PoolError::Lost { plugin: "p".into() }));
        assert_eq!(pool.run(Duration::from_secs(30), || 1).await, Ok(1));
    }
}
