//! What the sync controller knows of each member beyond the event stream: the member
//! object as the managed-label cache holds it ([`Ctl::observe`]), Flotilla's own recent
//! writes (so a lagging cache does not cause the same write twice), and since when each
//! cluster has been unavailable (so deletion gives up on a cluster only after waiting for
//! it, as far as this process knows, for the whole timeout).

use std::{
    collections::HashMap,
    sync::Mutex,
    time::{Duration, Instant},
};

use flotilla_crds::MANAGED_LABEL;
use kube::{ResourceExt, core::DynamicObject};
use serde_json::Value;

use super::{Key, ctl::Ctl, plan::Observed, plan::RECENT_WRITE_TTL};
use crate::multicluster::ClusterState;

/// Entries kept before expired ones are swept.
const RECENT_SWEEP_AT: usize = 4096;

/// Flotilla's own recent writes: (cluster, key) → (hash written, when).
#[derive(Default)]
pub struct RecentWrites {
    writes: Mutex<HashMap<(String, Key), (String, Instant)>>,
}

impl RecentWrites {
    /// The hash written to this member object within [`RECENT_WRITE_TTL`], and how long ago.
    pub fn get(&self, cluster: &str, key: &Key) -> Option<(String, Duration)> {
        // Plain maps stay valid after a panic in a holder.
        let writes = self.writes.lock().unwrap_or_else(|e| e.into_inner());
        let (hash, at) = writes.get(&(cluster.to_string(), key.clone()))?;
        let age = at.elapsed();
        (age < RECENT_WRITE_TTL).then(|| (hash.clone(), age))
    }

    /// Remembers a write of `hash`, or forgets the object (`None`: deleted, or a write
    /// whose result is unknown).
    pub fn remember(&self, cluster: &str, key: &Key, hash: Option<&str>) {
        let mut writes = self.writes.lock().unwrap_or_else(|e| e.into_inner());
        if writes.len() > RECENT_SWEEP_AT {
            writes.retain(|_, (_, at)| at.elapsed() < RECENT_WRITE_TTL);
        }
        let k = (cluster.to_string(), key.clone());
        match hash {
            Some(h) => {
                writes.insert(k, (h.to_string(), Instant::now()));
            }
            None => {
                writes.remove(&k);
            }
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

impl Ctl {
    /// What `cluster` holds for `key`, from the member cache.
    pub(super) fn observe(&self, cluster: &ClusterState, key: &Key) -> Observed {
        if cluster.pull {
            return self.observe_pull(cluster, key);
        }
        let available = cluster.ready && cluster.client.is_some();
        let synced = available && self.members.is_synced(&cluster.name);
        self.availability.record(&cluster.name, synced);
        if !available {
            return Observed::NotReady;
        }
        if !synced {
            return Observed::NotSynced;
        }
        let (ns, name) = self.member_name(key);
        match self.members.get(&cluster.name, ns, name) {
            Some(obj) if !is_managed(&obj) => Observed::Excluded,
            Some(obj) => Observed::Present(serde_json::to_value(&*obj).unwrap_or(Value::Null)),
            None => Observed::Absent,
        }
    }

    /// Whether `cluster`'s cache holds a managed object for `key` (not one labelled
    /// `managed=false`).
    pub(super) fn holds_managed(&self, cluster: &str, key: &Key) -> bool {
        let (ns, name) = self.member_name(key);
        self.members
            .get(cluster, ns, name)
            .is_some_and(|o| is_managed(&o))
    }

    /// Every managed member object's key, for stray detection.
    pub(super) fn member_keys(&self) -> Vec<Key> {
        let mut keys = Vec::new();
        for cluster in self.members.clusters() {
            for m in self.members.list(&cluster).iter().filter(|m| is_managed(m)) {
                keys.push(if self.is_namespace_type {
                    (Some(m.name_any()), m.name_any())
                } else {
                    (m.namespace(), m.name_any())
                });
            }
        }
        keys
    }
}

/// The member cache holds objects labelled `managed=true` and `managed=false` (so that an
/// object the user excluded is known without a read before each create); only the first
/// are Flotilla's.
fn is_managed(obj: &DynamicObject) -> bool {
    obj.labels().get(MANAGED_LABEL).is_some_and(|v| v == "true")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> Key {
        (Some("demo".into()), "a".into())
    }

    #[test]
    fn a_remembered_write_is_returned_until_forgotten() {
        let recent = RecentWrites::default();
        recent.remember("m1", &key(), Some("h1"));
        assert_eq!(recent.get("m1", &key()).map(|(h, _)| h), Some("h1".into()));
        assert_eq!(recent.get("m2", &key()), None);
        recent.remember("m1", &key(), None);
        assert_eq!(recent.get("m1", &key()), None);
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
}
