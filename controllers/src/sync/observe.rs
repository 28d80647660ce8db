//! What the sync controller knows of each member beyond the event stream: the member
//! object as the managed-label cache holds it ([`Observer::observe`]), corrected by what this
//! process remembers ([`super::memory`]).
//!
//! The cache holds each member object in its [`cache_form`]: `managedFields` reduced to a
//! digest of the other managers' fields, and the body packed as its JSON text (metadata
//! stays as it is for keys, labels and indexes). A reconcile unpacks the one object it
//! reads per cluster; at 100 members × 1,000 objects the cache holds 100,000 of them.

use flotilla_api::MANAGED_LABEL;
use flotilla_multicluster::packed;
use kube::{ResourceExt, core::DynamicObject};

use super::{
    Key, drift, host::HostCaches, memory::Availability, plan::Observed, type_info::TypeInfo,
};
use crate::multicluster::{ClusterState, MemberWatch};

/// A member object as the member cache keeps it (the watch's `shrink`).
pub(super) fn cache_form(obj: &mut DynamicObject) {
    drift::keep_digest(obj);
    packed::pack(obj);
}

/// [`cache_form`] without the member's `status` (types whose status is not collected).
pub(super) fn cache_form_without_status(obj: &mut DynamicObject) {
    drift::keep_digest_drop_status(obj);
    packed::pack(obj);
}

/// What observing a member reads: the member caches, the host's Work cache (Pull
/// clusters), the type, and where each cluster's availability is recorded.
#[derive(Clone, Copy)]
pub(super) struct Observer<'a> {
    pub members: &'a MemberWatch<DynamicObject>,
    pub host: &'a HostCaches,
    pub ty: &'a TypeInfo,
    /// Since when each cluster has been unavailable (recorded by every observation).
    pub availability: &'a Availability,
}

impl Observer<'_> {
    /// What `cluster` holds for `key`, from the member cache.
    pub fn observe(&self, cluster: &ClusterState, key: &Key) -> Observed {
        if cluster.pull {
            let (host, ty, availability) = (self.host, self.ty, self.availability);
            return super::pull::observe(host, ty, availability, cluster, key);
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
        let (ns, name) = self.ty.member_name(key);
        match self.members.get(&cluster.name, ns, name) {
            Some(obj) if !is_managed(&obj) => Observed::Excluded,
            Some(obj) => Observed::Present(packed::to_value(&obj)),
            None => Observed::Absent,
        }
    }
}

/// Whether `cluster`'s cache holds a managed object for `key` (not one labelled
/// `managed=false`).
pub(super) fn holds_managed(
    members: &MemberWatch<DynamicObject>,
    ty: &TypeInfo,
    cluster: &str,
    key: &Key,
) -> bool {
    let (ns, name) = ty.member_name(key);
    members
        .get(cluster, ns, name)
        .is_some_and(|o| is_managed(&o) && !super::rollout::is_canary(&o))
}

/// Every managed member object's key, for stray detection.
pub(super) fn managed_keys(members: &MemberWatch<DynamicObject>, ty: &TypeInfo) -> Vec<Key> {
    let mut keys = Vec::new();
    for cluster in members.clusters() {
        for m in members.by_index(&cluster, MANAGED_LABEL, "true") {
            // A canary Deployment is its federated object's, under another name.
            if super::rollout::is_canary(&m) {
                continue;
            }
            keys.push(ty.key_of_member(m.namespace(), m.name_any()));
        }
    }
    keys
}

/// The member cache holds objects labelled `managed=true` and `managed=false` (so that an
/// object the user excluded is known without a read before each create); only the first
/// are Flotilla's.
fn is_managed(obj: &DynamicObject) -> bool {
    obj.labels().get(MANAGED_LABEL).is_some_and(|v| v == "true")
}
