//! Where each federated object's manifest is in one type's Works: an index from (Pull
//! cluster, federated key) to its bundle Work and ordinal, kept by the Work watch, and
//! which keys a Work event concerns (only those whose manifest, config or report changed,
//! so an agent's report on a bundle of many objects requeues the objects it is news for).
//! Legacy one-object Works are found by their name. Lookups only; no I/O.

use std::{
    collections::{HashMap, hash_map::DefaultHasher},
    hash::{Hash, Hasher},
    sync::{Arc, Mutex},
};

use flotilla_api::work::{Work, cluster_namespace, cluster_of_namespace};
use kube::{
    ResourceExt,
    runtime::reflector::{ObjectRef, Store},
};

use super::{Key, host::source_key};

/// A federated object's manifest in a Work.
#[derive(Clone, Debug)]
pub struct Located {
    /// The Work.
    pub work: Arc<Work>,
    /// The manifest's ordinal.
    pub ordinal: usize,
}

impl Located {
    /// Whether the Work is a bundle (else a legacy one-object Work).
    pub fn is_bundle(&self) -> bool {
        self.work.is_bundle()
    }
}

/// (cluster, key) → (Work name, ordinal); (namespace, Work) → its keys and fingerprints.
#[derive(Default)]
pub struct BundleIndex {
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    by_key: HashMap<(String, Key), (String, usize)>,
    by_work: HashMap<(String, String), Vec<(Key, u64)>>,
}

impl BundleIndex {
    /// Takes in the Work `namespace/name` as `store` now holds it (absent: deleted);
    /// returns the keys whose manifest, config or report changed.
    pub fn update(&self, store: &Store<Work>, namespace: &str, name: &str) -> Vec<Key> {
        let Some(cluster) = cluster_of_namespace(namespace) else {
            return Vec::new();
        };
        let work = store.get(&ObjectRef::new(name).within(namespace));
        let new: Vec<(Key, usize, u64)> = match &work {
            Some(w) if w.is_bundle() => keys_of(w),
            _ => Vec::new(),
        };
        let mut inner = lock(&self.inner);
        let id = (namespace.to_owned(), name.to_owned());
        let old = inner.by_work.remove(&id).unwrap_or_default();
        let mut changed = Vec::new();
        for (key, _) in &old {
            if !new.iter().any(|(k, _, _)| k == key) {
                let here = (cluster.to_owned(), key.clone());
                if inner.by_key.get(&here).is_some_and(|(n, _)| n == name) {
                    inner.by_key.remove(&here);
                }
                changed.push(key.clone());
            }
        }
        for (key, ordinal, print) in &new {
            let was = old.iter().find(|(k, _)| k == key).map(|(_, p)| *p);
            if was != Some(*print) {
                changed.push(key.clone());
            }
            let here = (cluster.to_owned(), key.clone());
            inner.by_key.insert(here, (name.to_owned(), *ordinal));
        }
        if !new.is_empty() {
            let prints = new.into_iter().map(|(k, _, p)| (k, p)).collect();
            inner.by_work.insert(id, prints);
        }
        if let Some(w) = work.filter(|w| !w.is_bundle()) {
            changed.extend(source_key(&w));
        }
        changed
    }

    /// Rebuilds the index from `store` (a completed list).
    pub fn rebuild(&self, store: &Store<Work>) {
        *lock(&self.inner) = Inner::default();
        for w in store.state() {
            if w.is_bundle()
                && let Some(ns) = w.namespace()
            {
                self.update(store, &ns, &w.name_any());
            }
        }
    }

    /// Every key some bundle holds.
    pub fn keys(&self) -> Vec<Key> {
        let inner = lock(&self.inner);
        inner.by_key.keys().map(|(_, k)| k.clone()).collect()
    }

    /// The manifest of `key` in `cluster`: in a bundle, else in the legacy Work `legacy`.
    pub fn locate(
        &self,
        store: &Store<Work>,
        cluster: &str,
        key: &Key,
        legacy: &str,
    ) -> Option<Located> {
        let namespace = cluster_namespace(cluster);
        let found = lock(&self.inner)
            .by_key
            .get(&(cluster.to_owned(), key.clone()))
            .cloned();
        if let Some((name, ordinal)) = found
            && let Some(work) = store.get(&ObjectRef::new(&name).within(&namespace))
        {
            let ordinal = match work.manifest_config(ordinal) {
                Some(c) if (&c.source_namespace, &c.source_name) == (&key.0, &key.1) => {
                    Some(ordinal)
                }
                _ => (0..work.spec.manifest_configs.len()).find(|i| {
                    work.manifest_config(*i)
                        .is_some_and(|c| (&c.source_namespace, &c.source_name) == (&key.0, &key.1))
                }),
            };
            if let Some(ordinal) = ordinal {
                return Some(Located { work, ordinal });
            }
        }
        let work = store.get(&ObjectRef::new(legacy).within(&namespace))?;
        (!work.is_bundle()).then_some(Located { work, ordinal: 0 })
    }
}

/// A bundle's keys, ordinals and fingerprints: the manifest, its config and the agent's
/// report on it — the report's generation only while it is news (a failure or a drift):
/// a rewrite of the bundle for another object moves every report's generation, and
/// requeues no object whose report says applied.
fn keys_of(w: &Work) -> Vec<(Key, usize, u64)> {
    let mut out = Vec::with_capacity(w.spec.workload.manifests.len());
    for (i, manifest) in w.spec.workload.manifests.iter().enumerate() {
        let Some(config) = w.manifest_config(i) else {
            continue;
        };
        let key = (config.source_namespace.clone(), config.source_name.clone());
        let mut h = DefaultHasher::new();
        manifest.to_string().hash(&mut h);
        serde_json::to_string(config)
            .unwrap_or_default()
            .hash(&mut h);
        if let Some(report) = w.manifest_report(i) {
            let mut report = report.clone();
            let news = report.drift.is_some()
                || report
                    .conditions
                    .iter()
                    .any(|c| c.status != "True" || c.reason != "Applied");
            if !news {
                for c in &mut report.conditions {
                    c.observed_generation = None;
                }
            }
            serde_json::to_string(&report)
                .unwrap_or_default()
                .hash(&mut h);
        }
        out.push((key, i, h.finish()));
    }
    out
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
