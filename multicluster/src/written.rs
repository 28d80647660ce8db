//! What this process last wrote to each object (a status, typically), with the
//! resourceVersion of the cached object the write was based on — so that a reconcile that
//! runs before the watch has delivered the write compares with what was written, not with
//! the stale cached copy, and does not write the same thing a second time.
//!
//! An entry lives only until the cache delivers another version (usually the write's own
//! watch event, milliseconds later): from then on the cache is the truth. Only equality of
//! versions is used, never their order.
//!
//! ```
//! use flotilla_multicluster::written::WrittenOver;
//!
//! let written: WrittenOver<String, &str> = WrittenOver::default();
//! written.remember("web".to_string(), "10".into(), "Ready");
//! // The cache still holds version 10: the status there is the one we wrote.
//! assert_eq!(written.lagging(&"web".to_string(), "10"), Some("Ready"));
//! // It moved on: trust it, and forget ours.
//! assert_eq!(written.lagging(&"web".to_string(), "11"), None);
//! ```

use std::{collections::HashMap, hash::Hash, sync::Mutex};

/// Per object key: the version a write was based on, and what was written.
pub struct WrittenOver<K, V> {
    written: Mutex<HashMap<K, (String, V)>>,
}

impl<K, V> Default for WrittenOver<K, V> {
    fn default() -> Self {
        WrittenOver {
            written: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Eq + Hash, V: Clone> WrittenOver<K, V> {
    /// What we wrote, if the cache still holds the version `base` it was written over; an
    /// entry the cache has moved past is dropped.
    pub fn lagging(&self, key: &K, base: &str) -> Option<V> {
        // A plain map stays valid after a panic in a holder.
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        match written.get(key) {
            Some((rv, value)) if rv == base => Some(value.clone()),
            Some(_) => {
                written.remove(key);
                None
            }
            None => None,
        }
    }

    /// Remembers a write based on version `base`.
    pub fn remember(&self, key: K, base: String, value: V) {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        written.insert(key, (base, value));
    }

    /// Forgets the object (a write whose result is unknown, or a new write under way).
    pub fn forget(&self, key: &K) {
        let mut written = self.written.lock().unwrap_or_else(|e| e.into_inner());
        written.remove(key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ours_is_the_truth_until_the_cache_moves_past_the_version_it_was_written_over() {
        let key = (Some("ns".to_string()), "a".to_string());
        let written: WrittenOver<_, u32> = WrittenOver::default();
        assert_eq!(written.lagging(&key, "10"), None);
        written.remember(key.clone(), "10".into(), 2);
        assert_eq!(written.lagging(&key, "10"), Some(2));
        // The watch delivered our write (or anyone's newer one): the cache is the truth.
        assert_eq!(written.lagging(&key, "11"), None);
        assert_eq!(written.lagging(&key, "10"), None, "the entry is gone");
        written.remember(key.clone(), "12".into(), 3);
        written.forget(&key);
        assert_eq!(written.lagging(&key, "12"), None);
    }
}
