//! Kinds a member does not serve (a list answered `404`: no CRD, or the group/version
//! turned off). Such a watch is not retried every few seconds with a warning each time:
//! it is reported once per (cluster, resource) — a WARN line, the gauge
//! `member_watch_unserved_kinds{cluster,resource}` and [`crate::MemberWatch::unserved`] —
//! then discovery of its one group/version is asked again, quietly, with a growing pause
//! ([`recheck_pause`]), and the watch resumes once it lists the resource (an INFO line
//! when its cache is complete). It decides nothing about what the member's objects mean.

use std::{
    collections::BTreeSet,
    sync::{LazyLock, Mutex},
    time::Duration,
};

use kube::Client;
use prometheus_client::{
    encoding::EncodeLabelSet,
    metrics::{family::Family, gauge::Gauge},
    registry::Registry,
};
use tracing::{debug, info, warn};

use crate::sync_state::lock;

/// The first pause before discovery is asked again.
const FIRST_RECHECK: Duration = Duration::from_secs(10);

/// The pause before the `attempt`-th (from 0) discovery recheck of an unserved kind:
/// 10 s, doubling, never more than `max`.
pub fn recheck_pause(attempt: u32, max: Duration) -> Duration {
    FIRST_RECHECK
        .saturating_mul(1u32 << attempt.min(16))
        .min(max)
}

/// Labels of the gauge: bounded by the member clusters times the watched kinds.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnservedLabels {
    /// The member cluster.
    pub cluster: String,
    /// The resource, as kubectl names it (`serviceimports.multicluster.x-k8s.io`).
    pub resource: String,
}

/// The gauge of every member watch of the process. Watches are started in many places
/// (each controller, each enabled type), none of which holds a registry; the process
/// registers this one family once ([`register_metrics`]). Prometheus-client metrics share
/// their state between clones, so the registered clone sees every change.
static UNSERVED: LazyLock<Family<UnservedLabels, Gauge>> = LazyLock::new(Family::default);

/// Registers `member_watch_unserved_kinds{cluster,resource}` (under the registry's prefix):
/// the member watches waiting for their cluster to serve their kind (1 each).
pub fn register_metrics(registry: &mut Registry) {
    registry.register(
        "member_watch_unserved_kinds",
        "Member watches whose cluster does not serve their kind (404), by cluster and resource",
        UNSERVED.clone(),
    );
}

/// Where one group/version's discovery is asked for one resource.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// `v1` for the core group, else `group/version`.
    pub group_version: String,
    /// The resource's plural.
    pub plural: String,
}

impl Served {
    /// Whether the cluster's discovery lists the resource (a group/version the cluster does
    /// not serve at all answers `404`: not served).
    async fn check(&self, client: &Client) -> Result<bool, kube::Error> {
        let list = if self.group_version.contains('/') {
            client.list_api_group_resources(&self.group_version).await
        } else {
            client.list_core_api_resources(&self.group_version).await
        };
        match list {
            Ok(list) => Ok(list.resources.iter().any(|r| r.name == self.plural)),
            Err(kube::Error::Api(status)) if status.code == 404 => Ok(false),
            Err(e) => Err(e),
        }
    }
}

/// The clusters in which one member watch's kind is not served.
#[derive(Debug)]
pub struct Unserved {
    resource: String,
    served: Served,
    max_pause: Duration,
    clusters: Mutex<BTreeSet<String>>,
}

impl Unserved {
    /// For `resource` (kubectl's name), looked for in discovery as `served` says, rechecked
    /// at most every `max_pause`.
    pub fn new(resource: String, served: Served, max_pause: Duration) -> Self {
        Unserved {
            resource,
            served,
            max_pause,
            clusters: Mutex::default(),
        }
    }

    fn labels(&self, cluster: &str) -> UnservedLabels {
        UnservedLabels {
            cluster: cluster.to_owned(),
            resource: self.resource.clone(),
        }
    }

    /// kubectl's name of the resource (`serviceimports.multicluster.x-k8s.io`).
    pub fn resource(&self) -> &str {
        &self.resource
    }

    /// The clusters that do not serve the kind, by name.
    pub fn clusters(&self) -> Vec<String> {
        lock(&self.clusters).iter().cloned().collect()
    }

    /// Records that `cluster` does not serve the kind; says so once.
    fn mark(&self, cluster: &str, error: &str) {
        if !lock(&self.clusters).insert(cluster.to_owned()) {
            return;
        }
        UNSERVED.get_or_create(&self.labels(cluster)).inc();
        warn!(
            %cluster,
            resource = %self.resource,
            %error,
            "the member does not serve this kind: not watched until its discovery lists it (looked for again at most every {:?})",
            self.max_pause
        );
    }

    /// The watch's cache of `cluster` is complete: if the kind was unserved, says it is
    /// served now.
    pub fn synced(&self, cluster: &str) {
        if self.forget(cluster) {
            info!(%cluster, resource = %self.resource, "the member serves this kind now; watching it");
        }
    }

    /// Drops `cluster` (its watch stopped); whether it was unserved.
    pub fn forget(&self, cluster: &str) -> bool {
        if !lock(&self.clusters).remove(cluster) {
            return false;
        }
        UNSERVED.get_or_create(&self.labels(cluster)).dec();
        true
    }

    /// Drops every cluster (the watch is gone).
    pub fn forget_all(&self) {
        for cluster in self.clusters() {
            self.forget(&cluster);
        }
    }

    /// Marks `cluster` (failing with `error`), then asks discovery again with a growing
    /// pause until it lists the resource. Its watch relists after this returns.
    pub async fn until_served(&self, cluster: &str, client: &Client, error: &str) {
        self.mark(cluster, error);
        let mut attempt = 0;
        loop {
            tokio::time::sleep(recheck_pause(attempt, self.max_pause)).await;
            attempt = attempt.saturating_add(1);
            match self.served.check(client).await {
                Ok(true) => return,
                Ok(false) => {
                    debug!(%cluster, resource = %self.resource, "still not served")
                }
                Err(error) => {
                    debug!(%cluster, resource = %self.resource, %error, "discovery failed; asked again later")
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rechecks_start_at_ten_seconds_and_double_up_to_the_maximum() {
        let minute = Duration::from_secs(60);
        let pauses: Vec<u64> = (0..6).map(|n| recheck_pause(n, minute).as_secs()).collect();
        assert_eq!(pauses, [10, 20, 40, 60, 60, 60]);
        assert_eq!(recheck_pause(u32::MAX, minute), minute);
        // A maximum below the first pause wins (tests use a short one).
        assert_eq!(
            recheck_pause(0, Duration::from_secs(2)),
            Duration::from_secs(2)
        );
    }

    fn unserved() -> Unserved {
        let served = Served {
            group_version: "example.com/v1".into(),
            plural: "widgets".into(),
        };
        Unserved::new(
            "widgets.example.com".into(),
            served,
            Duration::from_secs(60),
        )
    }

    fn gauge(cluster: &str) -> i64 {
        UNSERVED
            .get_or_create(&UnservedLabels {
                cluster: cluster.into(),
                resource: "widgets.example.com".into(),
            })
            .get()
    }

    #[test]
    fn a_cluster_is_counted_once_however_often_it_fails_and_uncounted_when_served() {
        let u = unserved();
        u.mark("unit-a", "404 page not found");
        u.mark("unit-a", "404 page not found");
        u.mark("unit-b", "404 page not found");
        assert_eq!(u.clusters(), ["unit-a", "unit-b"]);
        assert_eq!((gauge("unit-a"), gauge("unit-b")), (1, 1));
        u.synced("unit-a");
        assert_eq!(u.clusters(), ["unit-b"]);
        assert_eq!(gauge("unit-a"), 0);
        u.forget_all();
        assert!(u.clusters().is_empty());
        assert_eq!(gauge("unit-b"), 0);
    }
}
