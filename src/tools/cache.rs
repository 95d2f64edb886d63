//! The tool result cache: bounded, optional TTL, keyed by the tool name and
//! the exact raw argument text (no canonicalization: `{"a":1}` and
//! `{"a": 1}` are different keys, as the engine this replaces did).

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::{Duration, Instant};

pub struct ResultCache {
    max_entries: usize,
    ttl: Option<Duration>,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    entries: HashMap<String, (String, Instant)>,
    /// Insertion order, oldest first, for eviction.
    order: VecDeque<String>,
}

impl std::fmt::Debug for ResultCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResultCache")
            .field("entries", &self.len())
            .finish()
    }
}

impl ResultCache {
    pub fn new(max_entries: usize, ttl: Option<Duration>) -> Self {
        Self {
            max_entries: max_entries.max(1),
            ttl,
            inner: Mutex::default(),
        }
    }

    fn key(tool: &str, raw_arguments: &str) -> String {
        format!("{tool}\u{0}{raw_arguments}")
    }

    pub fn get(&self, tool: &str, raw_arguments: &str) -> Option<String> {
        let key = Self::key(tool, raw_arguments);
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let (output, stored) = inner.entries.get(&key)?.clone();
        if self.ttl.is_some_and(|ttl| stored.elapsed() > ttl) {
            inner.entries.remove(&key);
            inner.order.retain(|k| k != &key);
            return None;
        }
        Some(output)
    }

    pub fn put(&self, tool: &str, raw_arguments: &str, output: String) {
        let key = Self::key(tool, raw_arguments);
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        if inner
            .entries
            .insert(key.clone(), (output, Instant::now()))
            .is_none()
        {
            inner.order.push_back(key);
        }
        while inner.entries.len() > self.max_entries {
            match inner.order.pop_front() {
                Some(oldest) => {
                    inner.entries.remove(&oldest);
                }
                None => break,
            }
        }
    }

    pub fn len(&self) -> usize {
        self.inner.lock().map(|i| i.entries.len()).unwrap_or(0)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_keys_bounded_and_expiring() {
        let cache = ResultCache::new(2, None);
        cache.put("t", "{\"a\":1}", "one".into());
        assert_eq!(cache.get("t", "{\"a\":1}").as_deref(), Some("one"));
        assert_eq!(cache.get("t", "{\"a\": 1}"), None);
        assert_eq!(cache.get("u", "{\"a\":1}"), None);
        cache.put("t", "2", "two".into());
        cache.put("t", "3", "three".into());
        assert_eq!(cache.get("t", "{\"a\":1}"), None, "oldest evicted");
        assert_eq!(cache.len(), 2);
        let expiring = ResultCache::new(10, Some(Duration::ZERO));
        expiring.put("t", "x", "v".into());
        std::thread::sleep(Duration::from_millis(2));
        assert_eq!(expiring.get("t", "x"), None);
    }
}
