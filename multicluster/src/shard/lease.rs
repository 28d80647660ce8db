//! The Leases of a shard group: a peer Lease per replica (alive while renewed) and a fence
//! Lease per cluster (who may reconcile it). Expiry is judged by this replica's own clock
//! — a Lease whose holder and renew time have not changed for its duration — so clocks of
//! different machines need not agree. The decisions are pure; [`Leases`] does the I/O.

use std::{
    collections::HashMap,
    time::{Duration, Instant},
};

use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::MicroTime,
    jiff::Timestamp,
};
use kube::{
    Api, Client, ResourceExt,
    api::{ListParams, ObjectMeta, PostParams},
};

/// Label of every Lease of a shard group (value: the group).
pub const GROUP_LABEL: &str = "multicluster.flotilla.io/shard-group";
/// Label saying what a Lease is: `peer` or `fence`.
pub const ROLE_LABEL: &str = "multicluster.flotilla.io/shard-role";

/// Who holds a Lease, as this replica sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Holder {
    /// This replica.
    Me,
    /// Nobody (released, or never taken).
    Nobody,
    /// Another replica that has not renewed it for its duration: free to take.
    Expired,
    /// Another replica, alive.
    Other(String),
}

/// Who holds a Lease whose holder is `holder`, unchanged for `unchanged_for` by this
/// replica's clock, for a lease of `duration`.
pub fn holder(
    holder: Option<&str>,
    me: &str,
    unchanged_for: Duration,
    duration: Duration,
) -> Holder {
    match holder {
        None | Some("") => Holder::Nobody,
        Some(h) if h == me => Holder::Me,
        Some(_) if unchanged_for >= duration => Holder::Expired,
        Some(h) => Holder::Other(h.to_owned()),
    }
}

/// What proves a Lease's holder alive when it changes: holder and renew time.
type Renewal = (Option<String>, Option<MicroTime>);

/// When each Lease was last seen to change (holder or renew time).
#[derive(Default)]
pub struct Observer {
    seen: HashMap<String, (Renewal, Instant)>,
}

impl Observer {
    /// Records `lease` as seen now; returns for how long it has been unchanged.
    pub fn observe(&mut self, lease: &Lease) -> Duration {
        let spec = lease.spec.clone().unwrap_or_default();
        let record = (spec.holder_identity, spec.renew_time);
        let now = Instant::now();
        let entry = self
            .seen
            .entry(lease.name_any())
            .or_insert((record.clone(), now));
        if entry.0 != record {
            *entry = (record, now);
        }
        now - entry.1
    }
}

/// The Leases of one shard group in one namespace.
pub struct Leases {
    api: Api<Lease>,
    group: String,
    duration: Duration,
}

fn seconds(d: Duration) -> i32 {
    i32::try_from(d.as_secs().max(1)).unwrap_or(i32::MAX)
}

impl Leases {
    /// The group's Leases in `namespace` of the cluster `client` talks to.
    pub fn new(client: Client, namespace: &str, group: &str, duration: Duration) -> Self {
        Leases {
            api: Api::namespaced(client, namespace),
            group: group.to_owned(),
            duration,
        }
    }

    /// The name of a peer's Lease.
    pub fn peer_name(&self, peer: &str) -> String {
        format!("{}-peer-{peer}", self.group)
    }

    /// The name of a cluster's fence Lease.
    pub fn fence_name(&self, cluster: &str) -> String {
        format!("{}-fence-{cluster}", self.group)
    }

    /// Every Lease of the group.
    pub async fn list(&self) -> Result<Vec<Lease>, kube::Error> {
        let params = ListParams::default().labels(&format!("{GROUP_LABEL}={}", self.group));
        Ok(self.api.list(&params).await?.items)
    }

    /// Writes `name` held by `holder` (or released with `None`), replacing `current` (its
    /// resource version guards against a concurrent writer: a conflict means another
    /// replica got there first) or creating it.
    pub async fn write(
        &self,
        name: &str,
        role: &str,
        holder: Option<&str>,
        current: Option<&Lease>,
    ) -> Result<(), kube::Error> {
        let labels = [
            (GROUP_LABEL.to_string(), self.group.clone()),
            (ROLE_LABEL.to_string(), role.to_string()),
        ];
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                labels: Some(labels.into()),
                resource_version: current.and_then(|l| l.resource_version()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_owned),
                lease_duration_seconds: Some(seconds(self.duration)),
                renew_time: holder.map(|_| MicroTime(Timestamp::now())),
                ..LeaseSpec::default()
            }),
        };
        match current {
            Some(_) => self
                .api
                .replace(name, &PostParams::default(), &lease)
                .await
                .map(drop),
            None => self
                .api
                .create(&PostParams::default(), &lease)
                .await
                .map(drop),
        }
    }

    /// Deletes `name` (this replica's peer Lease, when it stops).
    pub async fn delete(&self, name: &str) -> Result<(), kube::Error> {
        self.api.delete(name, &Default::default()).await.map(drop)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: Duration = Duration::from_secs(1);

    #[test]
    fn a_lease_is_free_when_released_or_left_unrenewed_for_its_duration() {
        assert_eq!(holder(None, "a", S, 10 * S), Holder::Nobody);
        assert_eq!(holder(Some(""), "a", S, 10 * S), Holder::Nobody);
        assert_eq!(holder(Some("a"), "a", 99 * S, 10 * S), Holder::Me);
        assert_eq!(
            holder(Some("b"), "a", 9 * S, 10 * S),
            Holder::Other("b".into())
        );
        assert_eq!(holder(Some("b"), "a", 10 * S, 10 * S), Holder::Expired);
    }

    #[test]
    fn a_lease_counts_as_unchanged_only_since_its_last_renewal() {
        let mut observer = Observer::default();
        let mut lease = Lease::default();
        lease.metadata.name = Some("l".into());
        lease.spec = Some(LeaseSpec {
            holder_identity: Some("b".into()),
            ..LeaseSpec::default()
        });
        observer.observe(&lease);
        std::thread::sleep(Duration::from_millis(20));
        assert!(observer.observe(&lease) >= Duration::from_millis(20));
        lease.spec.as_mut().expect("present").renew_time = Some(MicroTime(Timestamp::now()));
        assert!(observer.observe(&lease) < Duration::from_millis(20));
    }
}
