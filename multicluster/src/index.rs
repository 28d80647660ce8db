//! Indexes on member caches: an [`Indexer`] maps an object to the values it is found
//! under (a label's value, a field, its owners' uids); the indexes of a watch are kept for
//! every cluster it covers — those engaged now and those engaged later — updated with
//! every change, rebuilt on every (re)list and dropped with the cluster's cache. Lookups
//! return object keys; [`crate::MemberWatch::by_index`] turns them into cached objects.

use std::{
    collections::{BTreeSet, HashMap},
    sync::{Arc, RwLock},
};

use kube::Resource;

use crate::ownership::OWNER_LABEL;

/// The index of owners' uids ([`Indexer::owner`]).
pub const OWNER_INDEX: &str = "owner";

/// The values an object is indexed under.
pub type IndexFn<K> = Arc<dyn Fn(&K) -> Vec<String> + Send + Sync>;

/// A named index of a kind.
pub struct Indexer<K> {
    /// The index's name, used to look it up.
    pub name: String,
    /// The values an object is found under.
    pub values: IndexFn<K>,
}

impl<K> Clone for Indexer<K> {
    fn clone(&self) -> Self {
        Indexer {
            name: self.name.clone(),
            values: self.values.clone(),
        }
    }
}

impl<K: Resource + 'static> Indexer<K> {
    /// An index named `name` of the values `values` gives.
    pub fn new(
        name: impl Into<String>,
        values: impl Fn(&K) -> Vec<String> + Send + Sync + 'static,
    ) -> Self {
        Indexer {
            name: name.into(),
            values: Arc::new(values),
        }
    }

    /// Objects by the value of label `key` (index name: `key`).
    ///
    /// ```
    /// use flotilla_multicluster::index::Indexer;
    /// use k8s_openapi::api::core::v1::ConfigMap;
    /// let by_app = Indexer::<ConfigMap>::label("app");
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    /// assert_eq!((by_app.values)(&cm), vec!["web"]);
    /// ```
    pub fn label(key: impl Into<String>) -> Self {
        let key = key.into();
        let name = key.clone();
        Self::new(name, move |o: &K| {
            o.meta()
                .labels
                .as_ref()
                .and_then(|l| l.get(&key))
                .cloned()
                .into_iter()
                .collect()
        })
    }

    /// Objects by a field (e.g. `spec.nodeName`) that `field` reads.
    pub fn field(name: impl Into<String>, field: fn(&K) -> Option<String>) -> Self {
        Self::new(name, move |o: &K| field(o).into_iter().collect())
    }

    /// Objects by their owners' uids (index name [`OWNER_INDEX`]): the uids of their
    /// `ownerReferences` and of their multi-cluster owner.
    ///
    /// ```
    /// use flotilla_multicluster::index::Indexer;
    /// use k8s_openapi::{api::core::v1::ConfigMap, apimachinery::pkg::apis::meta::v1::OwnerReference};
    /// let mut cm = ConfigMap::default();
    /// cm.metadata.owner_references = Some(vec![OwnerReference { uid: "u1".into(), ..Default::default() }]);
    /// cm.metadata.labels = Some([("multicluster.flotilla.io/owner-uid".to_string(), "u2".to_string())].into());
    /// assert_eq!((Indexer::<ConfigMap>::owner().values)(&cm), vec!["u1", "u2"]);
    /// ```
    pub fn owner() -> Self {
        Self::new(OWNER_INDEX, |o: &K| {
            let meta = o.meta();
            let local = meta
                .owner_references
                .iter()
                .flatten()
                .map(|r| r.uid.clone());
            let remote = meta
                .labels
                .as_ref()
                .and_then(|l| l.get(OWNER_LABEL))
                .cloned();
            let mut uids: Vec<String> = local.chain(remote).collect();
            uids.dedup();
            uids
        })
    }
}

/// An object's key in one cluster: namespace (for namespaced kinds) and name.
pub type ObjectName = (Option<String>, String);

#[derive(Default)]
struct ClusterIndex {
    by_value: HashMap<(usize, String), BTreeSet<ObjectName>>,
    by_object: HashMap<ObjectName, Vec<(usize, String)>>,
}

impl ClusterIndex {
    fn remove(&mut self, key: &ObjectName) {
        for entry in self.by_object.remove(key).unwrap_or_default() {
            if let Some(keys) = self.by_value.get_mut(&entry) {
                keys.remove(key);
                if keys.is_empty() {
                    self.by_value.remove(&entry);
                }
            }
        }
    }

    fn insert(&mut self, key: ObjectName, entries: Vec<(usize, String)>) {
        for entry in &entries {
            self.by_value
                .entry(entry.clone())
                .or_default()
                .insert(key.clone());
        }
        if !entries.is_empty() {
            self.by_object.insert(key, entries);
        }
    }
}

/// The indexes of one watch, per cluster.
pub(crate) struct Indexes<K> {
    indexers: Vec<Indexer<K>>,
    clusters: RwLock<HashMap<String, ClusterIndex>>,
}

impl<K: Resource> Indexes<K> {
    pub(crate) fn new(indexers: Vec<Indexer<K>>) -> Self {
        Indexes {
            indexers,
            clusters: RwLock::default(),
        }
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.indexers.is_empty()
    }

    fn entries(&self, o: &K) -> Vec<(usize, String)> {
        let mut entries = Vec::new();
        for (i, indexer) in self.indexers.iter().enumerate() {
            entries.extend((indexer.values)(o).into_iter().map(|v| (i, v)));
        }
        entries
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, ClusterIndex>> {
        self.clusters.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Re-indexes one object of `cluster`: `current` is its cached state (`None`: deleted).
    pub(crate) fn update(&self, cluster: &str, key: ObjectName, current: Option<&K>) {
        let entries = current.map(|o| self.entries(o)).unwrap_or_default();
        let mut clusters = self.write();
        let index = clusters.entry(cluster.to_owned()).or_default();
        index.remove(&key);
        index.insert(key, entries);
    }

    /// Rebuilds the index of `cluster` from its whole cache (after a (re)list).
    pub(crate) fn rebuild(&self, cluster: &str, objects: &[Arc<K>]) {
        let mut index = ClusterIndex::default();
        for o in objects {
            index.insert(name_of(o.as_ref()), self.entries(o));
        }
        self.write().insert(cluster.to_owned(), index);
    }

    /// Forgets `cluster` (its cache was dropped).
    pub(crate) fn drop_cluster(&self, cluster: &str) {
        self.write().remove(cluster);
    }

    /// Keys of the objects of `cluster` found under `value` in index `name`.
    pub(crate) fn lookup(&self, cluster: &str, name: &str, value: &str) -> Vec<ObjectName> {
        let Some(i) = self.indexers.iter().position(|x| x.name == name) else {
            return Vec::new();
        };
        let clusters = self.clusters.read().unwrap_or_else(|e| e.into_inner());
        clusters
            .get(cluster)
            .and_then(|c| c.by_value.get(&(i, value.to_owned())))
            .map(|keys| keys.iter().cloned().collect())
            .unwrap_or_default()
    }
}

/// The key of an object.
pub(crate) fn name_of<K: Resource>(o: &K) -> ObjectName {
    (
        o.meta().namespace.clone(),
        o.meta().name.clone().unwrap_or_default(),
    )
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ConfigMap;

    use super::*;

    fn cm(name: &str, app: &str) -> ConfigMap {
        let mut cm = ConfigMap::default();
        cm.metadata.name = Some(name.into());
        cm.metadata.namespace = Some("ns".into());
        cm.metadata.labels = Some([("app".to_string(), app.to_string())].into());
        cm
    }

    fn key(name: &str) -> ObjectName {
        (Some("ns".into()), name.into())
    }

    #[test]
    fn changes_move_an_object_between_values_and_deletes_remove_it() {
        let indexes = Indexes::new(vec![Indexer::<ConfigMap>::label("app")]);
        indexes.update("c1", key("a"), Some(&cm("a", "web")));
        indexes.update("c1", key("b"), Some(&cm("b", "web")));
        indexes.update("c2", key("a"), Some(&cm("a", "db")));
        assert_eq!(indexes.lookup("c1", "app", "web"), vec![key("a"), key("b")]);
        indexes.update("c1", key("a"), Some(&cm("a", "db")));
        assert_eq!(indexes.lookup("c1", "app", "web"), vec![key("b")]);
        assert_eq!(indexes.lookup("c1", "app", "db"), vec![key("a")]);
        indexes.update("c1", key("b"), None);
        assert!(indexes.lookup("c1", "app", "web").is_empty());
        assert_eq!(indexes.lookup("c2", "app", "db"), vec![key("a")]);
        assert!(indexes.lookup("c1", "no-such-index", "db").is_empty());
    }

    #[test]
    fn a_relist_rebuilds_a_cluster_and_a_dropped_cluster_is_forgotten() {
        let indexes = Indexes::new(vec![Indexer::<ConfigMap>::label("app")]);
        indexes.update("c1", key("gone"), Some(&cm("gone", "web")));
        indexes.rebuild("c1", &[Arc::new(cm("a", "web"))]);
        assert_eq!(indexes.lookup("c1", "app", "web"), vec![key("a")]);
        indexes.drop_cluster("c1");
        assert!(indexes.lookup("c1", "app", "web").is_empty());
    }
}
