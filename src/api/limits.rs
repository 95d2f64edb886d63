//! How many event streams (SSE) may be open at once: in all
//! (`server.max_event_streams`) and per caller
//! (`server.max_event_streams_per_caller`). A stream holds a connection, a
//! task and a subscription for as long as its client keeps it open, so an
//! unbounded number of them is an unbounded amount of memory.
//!
//! A caller is named by a string: the name of the API key the request
//! presented (`auth::Caller`). This module does not know how callers
//! authenticate; it is told which callers are gone ([`StreamPermits::end_unknown`],
//! after every reload), and every open stream of those ends: each permit
//! carries its caller's [`StreamPermit::revoked`] token.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;

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
    by_caller: HashMap<Arc<str>, Streams>,
}

/// One caller's open streams, and what ends them all.
struct Streams {
    count: usize,
    revoked: CancellationToken,
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
    revoked: CancellationToken,
}

impl StreamPermit {
    /// Cancelled when the caller's key is gone (revoked by a reload): the
    /// stream holding this permit ends then.
    pub fn revoked(&self) -> CancellationToken {
        self.revoked.clone()
    }
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
            Some((name, streams)) if streams.count >= self.inner.per_caller => {
                return Err(StreamsFull::Caller {
                    caller: name.to_string(),
                    limit: self.inner.per_caller,
                });
            }
            Some((name, _)) => name.clone(),
            None => Arc::from(caller),
        };
        open.all += 1;
        let streams = open
            .by_caller
            .entry(caller.clone())
            .or_insert_with(|| Streams {
                count: 0,
                revoked: CancellationToken::new(),
            });
        streams.count += 1;
        Ok(StreamPermit {
            inner: self.inner.clone(),
            caller,
            revoked: streams.revoked.clone(),
        })
    }

    /// Ends every open stream of each caller `known` no longer knows (its
    /// key was revoked); the callers named again later start afresh.
    /// Answers the callers whose streams were ended.
    pub fn end_unknown(&self, known: impl Fn(&str) -> bool) -> Vec<String> {
        let mut open = self.lock();
        let mut ended = Vec::new();
        for (caller, streams) in open.by_caller.iter_mut() {
            if !known(caller) {
                streams.revoked.cancel();
                streams.revoked = CancellationToken::new();
                ended.push(caller.to_string());
            }
        }
        ended
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
        if let Some(streams) = open.by_caller.get_mut(&self.caller) {
            streams.count -= 1;
            if streams.count == 0 {
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
    fn a_revoked_callers_streams_end_and_a_new_one_starts_afresh() {
        let permits = StreamPermits::new(10, 10);
        let (a, b) = (permits.acquire("a").unwrap(), permits.acquire("b").unwrap());
        assert_eq!(permits.end_unknown(|caller| caller == "b"), ["a"]);
        assert!(a.revoked().is_cancelled() && !b.revoked().is_cancelled());
        let again = permits.acquire("a").unwrap();
        assert!(
            !again.revoked().is_cancelled(),
            "a key named again streams anew"
        );
        drop(a);
        assert_eq!(permits.open(), 2);
    }

    #[test]
    fn a_refusal_is_a_503_naming_the_setting() {
        let e = ApiError::from(StreamsFull::Total { limit: 1 });
        assert_eq!(e.code, ErrorCode::Unavailable);
        assert!(e.message.contains("server.max_event_streams"));
    }
}
