//! What a [`super::MemberWatch`] covers: which clusters ([`ClusterSelector`]), and in
//! each what it watches, keeps, indexes and how long it waits for a first list
//! ([`WatchOptions`]).

use std::time::Duration;

use kube::runtime::watcher;

use crate::{index::Indexer, watch::FailureLog};

/// The default of [`WatchOptions::unserved_recheck`]: one discovery request a minute per
/// cluster and unserved kind, and a CRD installed later is watched within a minute.
pub const DEFAULT_UNSERVED_RECHECK: Duration = Duration::from_secs(60);

/// Which member clusters a watch covers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ClusterSelector {
    /// Every Ready cluster of the set, including those that join later.
    All,
    /// Only this cluster, while it is Ready.
    Named(String),
    /// Every Ready cluster but this one (e.g. every member but a central cluster).
    AllExcept(String),
}

impl ClusterSelector {
    /// Whether the selector covers `cluster`.
    pub fn matches(&self, cluster: &str) -> bool {
        match self {
            ClusterSelector::All => true,
            ClusterSelector::Named(name) => name == cluster,
            ClusterSelector::AllExcept(name) => name != cluster,
        }
    }
}

/// What a [`MemberWatch`](crate::MemberWatch) watches in each selected cluster, and what it keeps.
pub struct WatchOptions<K> {
    /// The clusters watched.
    pub clusters: ClusterSelector,
    /// Only this namespace (a `metadata.namespace` field selector: list and watch of the
    /// kind must be granted cluster-wide); `None` for every namespace.
    pub namespace: Option<String>,
    /// The watcher's configuration: label and field selectors, page size, ...
    pub config: watcher::Config,
    /// A cut applied to every object before it is cached (e.g. drop a status nobody reads).
    /// It still sees `managedFields`, which are dropped after it (keep a digest if needed).
    pub shrink: fn(&mut K),
    /// How loudly a failing watch is logged: `Warn` (an unreachable member), or `Debug` for
    /// a kind members may not serve (an optional CRD).
    pub failures: FailureLog,
    /// Indexes kept for every cluster watched (see [`crate::index`]).
    pub indexers: Vec<Indexer<K>>,
    /// How long a cluster's cache may take to complete its first list before the cluster
    /// is reported ([`MemberWatch::sync_problems`](crate::MemberWatch::sync_problems)) and no longer waited for
    /// ([`MemberWatch::wait_for_sync`](crate::MemberWatch::wait_for_sync)); `None`: waited for without limit.
    pub sync_timeout: Option<Duration>,
    /// The longest pause between two discovery checks of a cluster that does not serve the
    /// kind (see [`super::unserved`]); 60 s by default.
    pub unserved_recheck: Duration,
}

impl<K> Clone for WatchOptions<K> {
    fn clone(&self) -> Self {
        WatchOptions {
            clusters: self.clusters.clone(),
            namespace: self.namespace.clone(),
            config: self.config.clone(),
            shrink: self.shrink,
            failures: self.failures,
            indexers: self.indexers.clone(),
            sync_timeout: self.sync_timeout,
            unserved_recheck: self.unserved_recheck,
        }
    }
}

impl<K> WatchOptions<K> {
    /// Every object of the kind in every Ready cluster, kept whole.
    pub fn all() -> Self {
        WatchOptions {
            clusters: ClusterSelector::All,
            namespace: None,
            config: watcher::Config::default(),
            shrink: |_| {},
            failures: FailureLog::Warn,
            indexers: Vec::new(),
            sync_timeout: None,
            unserved_recheck: DEFAULT_UNSERVED_RECHECK,
        }
    }

    /// Keeps this index for every cluster watched, now and later.
    pub fn index(mut self, indexer: Indexer<K>) -> Self {
        self.indexers.push(indexer);
        self
    }

    /// Gives each cluster's first list at most `timeout` (see [`WatchOptions::sync_timeout`]).
    pub fn sync_timeout(mut self, timeout: Duration) -> Self {
        self.sync_timeout = Some(timeout);
        self
    }

    /// Looks for a kind a cluster does not serve again at most every `max` (see
    /// [`WatchOptions::unserved_recheck`]).
    pub fn unserved_recheck(mut self, max: Duration) -> Self {
        self.unserved_recheck = max;
        self
    }

    /// For a kind members may not serve (an optional CRD such as the About API's): failed
    /// watches are logged at debug level and retried with a growing pause.
    pub fn optional_kind(mut self) -> Self {
        self.failures = FailureLog::Debug;
        self
    }

    /// Only in cluster `name`.
    pub fn in_cluster(mut self, name: impl Into<String>) -> Self {
        self.clusters = ClusterSelector::Named(name.into());
        self
    }

    /// In every cluster but `name`.
    pub fn except_cluster(mut self, name: impl Into<String>) -> Self {
        self.clusters = ClusterSelector::AllExcept(name.into());
        self
    }

    /// Only in namespace `ns`.
    pub fn in_namespace(mut self, ns: impl Into<String>) -> Self {
        self.namespace = Some(ns.into());
        self
    }

    /// With this watcher configuration (selectors).
    pub fn with_config(mut self, config: watcher::Config) -> Self {
        self.config = config;
        self
    }
}
