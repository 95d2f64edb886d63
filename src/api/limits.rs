//! How many event streams (SSE) may be open at once: in all
//! (`server.max_event_streams`) and per caller
//! (`server.max_event_streams_per_caller`). A stream holds a connection, a
//! task and a subscription for as long as its client keeps it open, so an
//! unbounded number of them is an unbounded amount of memory.
//!
//! A caller is named by a string: the name of the API key the request
//! presented (`auth::Caller`). This module does not know how callers
//! authenticate.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use super::error::{ApiError, ErrorCode};

/// The open event streams, counted in all and per caller.
#[derive(Clone)]
pub struct StreamPermits {
    inner: Arc<Inner>,
}

struct Inner {
    total: usize,
    per_caller: usize,
    open: Mutex<Open>,
}

#[derive(Default)]
struct Open {
    all: usize,
    by_caller: HashMap<Arc<str>, usize>,
}

/// Which cap a stream was refused by.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StreamsFull {
    #[error(
        "{limit} event streams are open, the daemon's limit (server.max_event_streams); close one or try again after Retry-After seconds"
    )]
    Total { limit: usize },
    #[error(
        "caller {caller:?} has {limit} event streams open, its limit (server.max_event_streams_per_caller); close one or try again after Retry-After seconds"
    )]
    Caller { caller: String, limit: usize },
}

impl From<StreamsFull> for ApiError {
    fn from(e: StreamsFull) -> Self {
        ApiError::new(ErrorCode::Unavailable, e.to_string())
    }
}

/// One open stream; its place is given back when it drops (the stream
/// ended or its client went away).
pub struct StreamPermit {
    inner: Arc<Inner>,
    caller: Arc<str>,
}

impl StreamPermits {
    pub fn new(total: usize, per_caller: usize) -> Self {
        Self {
            inner: Arc::new(Inner {
                total,
                per_caller,
                open: Mutex::new(Open::default()),
            }),
        }
    }

    /// A place for one more stream of `caller`, or which cap is reached.
    pub fn acquire(&self, caller: &str) -> Result<StreamPermit, StreamsFull> {
        let mut open = self.lock();
        if open.all >= self.inner.total {
            return Err(StreamsFull::Total {
                limit: self.inner.total,
            });
        }
        let caller: Arc<str> = match open.by_caller.get_key_value(caller) {
            Some((name, &count)) if count >= self.inner.per_caller => {
                return Err(StreamsFull::Caller {
                    caller: name.to_string(),
                    limit: self.inner.per_caller,
                });
            }
            Some((name, _)) => name.clone(),
            None => Arc::from(caller),
        };
        open.all += 1;
        *open.by_caller.entry(caller.clone()).or_default() += 1;
        Ok(StreamPermit {
            inner: self.inner.clone(),
            caller,
        })
    }

    /// Streams open now (in all).
    pub fn open(&self) -> usize {
        self.lock().all
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Open> {
        lock(&self.inner)
    }
}

fn lock(inner: &Inner) -> std::sync::MutexGuard<'_, Open> {
    // The counts stay consistent under a panic elsewhere: each update is
    // one step.
    inner.open.lock().unwrap_or_else(|p| p.into_inner())
}

impl Drop for StreamPermit {
    fn drop(&mut self) {
        let mut open = lock(&self.inner);
        open.all = open.all.saturating_sub(1);
        if let Some(count) = open.by_caller.get_mut(&self.caller) {
            *count -= 1;
            if *count == 0 {
                // No entry per caller that ever connected: the map stays
                // as small as the callers streaming now.
                open.by_caller.remove(&self.caller);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_total_cap_and_the_callers_cap_each_refuse_and_free_on_drop() {
        let permits = StreamPermits::new(3, 2);
        let a1 = permits.acquire("a").unwrap();
        let _a2 = permits.acquire("a").unwrap();
        assert_eq!(
            permits.acquire("a").err(),
            Some(StreamsFull::Caller {
                caller: "a".into(),
                limit: 2
            })
        );
        let _b1 = permits.acquire("b").unwrap();
        assert_eq!(
            permits.acquire("c").err(),
            Some(StreamsFull::Total { limit: 3 })
        );
        drop(a1);
        assert_eq!(permits.open(), 2);
        let _c1 = permits.acquire("c").unwrap();
        assert_eq!(permits.open(), 3);
    }

    #[test]
    fn callers_with_no_stream_leave_no_entry() {
        let permits = StreamPermits::new(10, 10);
        for n in 0..100 {
            drop(permits.acquire(&format!("caller-{n}")).unwrap());
        }
        assert!(lock(&permits.inner).by_caller.is_empty());
    }

    #[test]
    fn a_refusal_is_a_503_naming_the_setting() {
        let e = ApiError::from(StreamsFull::Total { limit: 1 });
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(e.message.contains("server.max_event_streams"));
    }
}
