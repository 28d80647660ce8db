//! What one type's sync controller remembers between reconciles, beyond its caches:
//! Flotilla's own recent member writes (so a lagging cache does not cause the same write
//! twice), since when each cluster has been unavailable (so deletion gives up on a cluster
//! only after waiting for it, as far as this process knows, for the whole timeout), the
//! last status written per object (so a lagging host cache does not cause a second write),
//! and each member object's recent drift repairs (so a fight is recognised).

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use flotilla_api::federated::FederatedStatus;
use flotilla_core::drift::fight::{History, Repair};
use flotilla_multicluster::written::WrittenOver;

use super::{
    Key,
    plan::lag::{Basis, LastOp, Recent},
};

/// Entries kept before expired ones are swept (the threshold then doubles with the live
/// entries, so a burst of many thousands is not swept on every write).
const RECENT_SWEEP_AT: usize = 4096;
/// Member objects whose repair history is kept before expired ones are swept.
const SWEEP_AT: usize = 4096;

/// Flotilla's own last operation per member object: (cluster, key) → (operation, what the
/// cache showed when it was decided, when it landed). See [`super::plan::lag`].
#[derive(Default)]
pub struct RecentWrites {
    state: Mutex<RecentState>,
}

#[derive(Default)]
struct RecentState {
    ops: HashMap<(String, Key), (LastOp, Basis, Instant)>,
    sweep_at: usize,
}

impl RecentWrites {
    /// The last operation on this member object, within its basis's TTL.
    pub fn get(&self, cluster: &str, key: &Key) -> Option<Recent> {
        // Plain maps stay valid after a panic in a holder.
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let (op, basis, at) = state.ops.get(&(cluster.to_string(), key.clone()))?;
        let age = at.elapsed();
        (age < basis.ttl()).then(|| Recent {
            op: op.clone(),
            basis: basis.clone(),
            age,
        })
    }

    /// Remembers an operation that landed, or forgets the object (`None`: a write whose
    /// result is unknown).
    pub fn remember(&self, cluster: &str, key: &Key, op: Option<(LastOp, Basis)>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        if state.ops.len() > state.sweep_at.max(RECENT_SWEEP_AT) {
            state
                .ops
                .retain(|_, (_, basis, at)| at.elapsed() < basis.ttl());
            state.sweep_at = 2 * state.ops.len();
        }
        let k = (cluster.to_string(), key.clone());
        match op {
            Some((op, basis)) => {
                state.ops.insert(k, (op, basis, Instant::now()));
            }
            None => {
                state.ops.remove(&k);
            }
        }
    }

    /// The member cache now shows the object at `version` (`None`: absent): an operation
    /// decided on another version has been delivered (or overtaken), so it is forgotten.
    pub fn cache_moved(&self, cluster: &str, key: &Key, version: Option<&str>) {
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        let k = (cluster.to_string(), key.clone());
        if let Some((_, Basis::Version(before), _)) = state.ops.get(&k)
            && before.as_deref() != version
        {
            state.ops.remove(&k);
        }
    }
}

/// Since when each cluster has been seen unready or unsynced, continuously.
#[derive(Default)]
pub struct Availability {
    unavailable_since: Mutex<HashMap<String, Instant>>,
}

impl Availability {
    /// Records whether a cluster is usable now.
    pub fn record(&self, cluster: &str, usable: bool) {
        let mut since = self
            .unavailable_since
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if usable {
            since.remove(cluster);
        } else {
            since
                .entry(cluster.to_string())
                .or_insert_with(Instant::now);
        }
    }

    /// How long the cluster has been unavailable, if it is.
    pub fn unavailable_for(&self, cluster: &str) -> Option<Duration> {
        self.unavailable_since
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(cluster)
            .map(Instant::elapsed)
    }
}

/// The last status this process wrote per federated object, with the resourceVersion of
/// the object it was written over (see [`WrittenOver`]).
pub type WrittenStatus = WrittenOver<Key, FederatedStatus>;

/// The versions our finalizer patches were sent over, until the host cache delivers a
/// newer one: a reconcile that still sees the old version (after a restart, member caches
/// syncing requeue every object, often before the host watch has delivered the patch)
/// would otherwise send the same patch again — a no-op, but a request all the same.
#[derive(Default)]
pub struct FinalizerAdds {
    over: Mutex<HashMap<Key, String>>,
}

impl FinalizerAdds {
    /// Whether our finalizer patch was sent over version `base`, which the cache still
    /// holds; an entry the cache has moved past is dropped.
    pub fn lagging(&self, key: &Key, base: &str) -> bool {
        let mut over = self.over.lock().unwrap_or_else(|e| e.into_inner());
        match over.get(key) {
            Some(rv) if rv == base => true,
            Some(_) => {
                over.remove(key);
                false
            }
            None => false,
        }
    }

    /// Remembers a finalizer patch sent over version `base`.
    pub fn remember(&self, key: Key, base: String) {
        let mut over = self.over.lock().unwrap_or_else(|e| e.into_inner());
        if over.len() > SWEEP_AT {
            // Entries of objects deleted before the cache caught up.
            over.clear();
        }
        over.insert(key, base);
    }
}

/// What the sync controller remembers about drift between reconciles: each member
/// object's recent repairs (for fights) and the last policy error announced per object.
#[derive(Default)]
pub struct DriftMemory {
    repairs: Mutex<HashMap<(String, Key), History>>,
    announced: Mutex<HashMap<Key, String>>,
    /// The resourceVersion each repair was written over, until the cache moves past it.
    repaired_over: Mutex<HashMap<(String, Key), String>>,
}

impl DriftMemory {
    pub fn history(&self, cluster: &str, key: &Key) -> History {
        let repairs = self.repairs.lock().unwrap_or_else(|e| e.into_inner());
        repairs
            .get(&(cluster.to_string(), key.clone()))
            .cloned()
            .unwrap_or_default()
    }

    pub fn record(&self, cluster: &str, key: &Key, repair: Repair) {
        let mut repairs = self.repairs.lock().unwrap_or_else(|e| e.into_inner());
        if repairs.len() > SWEEP_AT {
            let now = repair.at;
            repairs.retain(|_, h| !h.expired(now));
        }
        repairs
            .entry((cluster.to_string(), key.clone()))
            .or_default()
            .record(repair);
    }

    /// Whether the cache still holds the version a repair was written over (then the
    /// repair is on its way, not to be sent again); a version it moved past is forgotten.
    pub fn awaits_repair(&self, cluster: &str, key: &Key, version: Option<&str>) -> bool {
        let mut over = self.repaired_over.lock().unwrap_or_else(|e| e.into_inner());
        let k = (cluster.to_string(), key.clone());
        match (over.get(&k), version) {
            (Some(v), Some(live)) if v == live => true,
            (Some(_), _) => {
                over.remove(&k);
                false
            }
            (None, _) => false,
        }
    }

    pub fn repaired(&self, cluster: &str, key: &Key, version: String) {
        let mut over = self.repaired_over.lock().unwrap_or_else(|e| e.into_inner());
        over.insert((cluster.to_string(), key.clone()), version);
    }

    /// Whether `error` is news for `key` (announced once until it changes or goes away).
    pub fn is_new_error(&self, key: &Key, error: Option<&str>) -> bool {
        let mut announced = self.announced.lock().unwrap_or_else(|e| e.into_inner());
        match error {
            None => {
                announced.remove(key);
                false
            }
            Some(e) if announced.get(key).is_some_and(|a| a == e) => false,
            Some(e) => {
                announced.insert(key.clone(), e.to_string());
                true
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        (Some("demo".into()), "a".into())
    }

    fn wrote(version: Option<&str>) -> Option<(LastOp, Basis)> {
        let basis = Basis::Version(version.map(str::to_owned));
        Some((LastOp::Wrote("h1".into()), basis))
    }

    #[test]
    fn a_remembered_operation_is_returned_until_forgotten() {
        let recent = RecentWrites::default();
        recent.remember("m1", &key(), wrote(None));
        let got = recent.get("m1", &key()).expect("remembered");
        assert_eq!(got.op, LastOp::Wrote("h1".into()));
        assert_eq!(recent.get("m2", &key()), None);
        recent.remember("m1", &key(), None);
        assert_eq!(recent.get("m1", &key()), None);
    }

    #[test]
    fn an_operation_is_forgotten_once_the_cache_moves_past_the_version_it_was_decided_on() {
        let recent = RecentWrites::default();
        recent.remember("m1", &key(), wrote(Some("5")));
        recent.cache_moved("m1", &key(), Some("5"));
        assert!(recent.get("m1", &key()).is_some(), "still the same version");
        recent.cache_moved("m2", &key(), Some("9"));
        assert!(
            recent.get("m1", &key()).is_some(),
            "another cluster's event"
        );
        recent.cache_moved("m1", &key(), Some("9"));
        assert_eq!(recent.get("m1", &key()), None);
        // A create: forgotten when the object appears.
        recent.remember("m1", &key(), wrote(None));
        recent.cache_moved("m1", &key(), None);
        assert!(recent.get("m1", &key()).is_some());
        recent.cache_moved("m1", &key(), Some("1"));
        assert_eq!(recent.get("m1", &key()), None);
    }

    #[test]
    fn a_burst_of_operations_is_kept_whole_and_swept_only_as_it_doubles() {
        let recent = RecentWrites::default();
        for i in 0..3 * RECENT_SWEEP_AT {
            let k = (Some("demo".to_string()), format!("o{i}"));
            recent.remember("m1", &k, wrote(None));
        }
        let state = recent.state.lock().expect("lock");
        assert_eq!(state.ops.len(), 3 * RECENT_SWEEP_AT);
        assert!(state.sweep_at >= 2 * RECENT_SWEEP_AT, "{}", state.sweep_at);
    }

    #[test]
    fn a_cluster_is_unavailable_from_the_first_sighting_until_usable() {
        let a = Availability::default();
        assert_eq!(a.unavailable_for("m1"), None);
        a.record("m1", false);
        let first = a.unavailable_for("m1").expect("unavailable");
        a.record("m1", false);
        assert!(a.unavailable_for("m1").expect("still") >= first);
        a.record("m1", true);
        assert_eq!(a.unavailable_for("m1"), None);
    }

    #[test]
    fn a_finalizer_patch_is_not_repeated_over_the_same_version() {
        let adds = FinalizerAdds::default();
        assert!(!adds.lagging(&key(), "5"));
        adds.remember(key(), "5".into());
        assert!(adds.lagging(&key(), "5"), "the cache still holds version 5");
        assert!(!adds.lagging(&key(), "6"), "the cache moved on");
        assert!(
            !adds.lagging(&key(), "5"),
            "forgotten once the cache moved on"
        );
    }
}
