//! The garbage-collection decision tables: what happens to one dependent given what its
//! owner's cluster says ([`decide_dependent`]), and what an owner's finalizer does with all
//! its dependents ([`plan_finalize`]). Pure functions; [`crate::gc`] does the I/O.

use std::collections::BTreeSet;

use super::MultiClusterOwner;

/// What the owner's cluster says about the owner a dependent names.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OwnerObservation {
    /// The owner's cluster is unreachable (not Ready) or its cache is not complete:
    /// nothing can be concluded.
    Unknown,
    /// The owner's cluster confirms there is no object of that name.
    Absent,
    /// An object of that name exists.
    Exists {
        /// Its uid (another uid means the owner was deleted and a new one made).
        uid: String,
        /// Whether it is being deleted.
        deleting: bool,
    },
}

/// What to do with one dependent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GcDecision {
    /// The owner is alive (or its own finalizer is taking care of its dependents).
    Keep,
    /// The owner is confirmed gone: delete the dependent.
    Delete,
    /// Nothing can be decided now (a cluster is unreachable); look again later.
    Wait,
}

impl GcDecision {
    /// A bounded label for logs and metrics.
    pub fn as_str(&self) -> &'static str {
        match self {
            GcDecision::Keep => "keep",
            GcDecision::Delete => "delete",
            GcDecision::Wait => "wait",
        }
    }
}

/// The collector's decision for a dependent of `owner`, whose own cluster is reachable or
/// not. A dependent is deleted only when the owner is confirmed gone (absent, or replaced
/// by an object with another uid) and the dependent's cluster can be written to.
pub fn decide_dependent(
    owner: &MultiClusterOwner,
    observed: &OwnerObservation,
    dependent_cluster_ready: bool,
) -> GcDecision {
    let gone = match observed {
        OwnerObservation::Unknown => return GcDecision::Wait,
        OwnerObservation::Absent => true,
        OwnerObservation::Exists { uid, .. } => uid != &owner.uid,
    };
    match (gone, dependent_cluster_ready) {
        (false, _) => GcDecision::Keep,
        (true, true) => GcDecision::Delete,
        (true, false) => GcDecision::Wait,
    }
}

/// What deleting an owner does to its dependents.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum DeletionPolicy {
    /// Delete every dependent, and let the owner go as soon as the deletes are sent;
    /// dependents in unreachable clusters are collected when their cluster returns.
    #[default]
    Background,
    /// Delete every dependent and keep the owner until all of them are gone (waiting for
    /// unreachable clusters).
    Foreground,
    /// Keep every dependent and remove the owner reference from it (waiting for
    /// unreachable clusters, which would otherwise collect them later).
    Orphan,
}

impl DeletionPolicy {
    /// The policy named by `value` (`Background`, `Foreground`, `Orphan`, as Kubernetes
    /// spells `propagationPolicy`); `None` for anything else.
    pub fn parse(value: &str) -> Option<Self> {
        match value {
            "Background" => Some(DeletionPolicy::Background),
            "Foreground" => Some(DeletionPolicy::Foreground),
            "Orphan" => Some(DeletionPolicy::Orphan),
            _ => None,
        }
    }
}

/// A dependent as a cache saw it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Dependent {
    /// Its cluster.
    pub cluster: String,
    /// Its namespace.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// Its uid (deletes are preconditioned on it).
    pub uid: Option<String>,
    /// Whether it is already being deleted.
    pub deleting: bool,
}

/// What an owner's finalizer does now.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FinalizePlan {
    /// Dependents to delete.
    pub delete: Vec<Dependent>,
    /// Dependents to strip of their owner reference.
    pub orphan: Vec<Dependent>,
    /// Clusters the finalizer waits for (unreachable, or dependents still going away).
    pub waiting_for: BTreeSet<String>,
    /// Whether the finalizer can be removed once the writes above succeed.
    pub remove_finalizer: bool,
}

/// The finalizer's plan for an owner being deleted under `policy`, given the dependents
/// the caches of Ready clusters hold and the clusters that may hold dependents but cannot
/// be seen now (`unseen`: registered but not Ready, or their cache not complete).
pub fn plan_finalize(
    policy: DeletionPolicy,
    dependents: &[Dependent],
    unseen: &BTreeSet<String>,
) -> FinalizePlan {
    let mut plan = FinalizePlan::default();
    match policy {
        DeletionPolicy::Background => {
            plan.delete = dependents.iter().filter(|d| !d.deleting).cloned().collect();
            // Unseen clusters are left to the collector: the owner will be confirmed gone.
            plan.remove_finalizer = true;
        }
        DeletionPolicy::Foreground => {
            plan.delete = dependents.iter().filter(|d| !d.deleting).cloned().collect();
            plan.waiting_for = unseen.clone();
            plan.waiting_for
                .extend(dependents.iter().map(|d| d.cluster.clone()));
            plan.remove_finalizer = plan.waiting_for.is_empty();
        }
        DeletionPolicy::Orphan => {
            plan.orphan = dependents.to_vec();
            plan.waiting_for = unseen.clone();
            plan.remove_finalizer = plan.waiting_for.is_empty();
        }
    }
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owner() -> MultiClusterOwner {
        MultiClusterOwner {
            cluster: "member1".into(),
            api_version: "samplecontroller.k8s.io/v1alpha1".into(),
            kind: "Foo".into(),
            namespace: Some("default".into()),
            name: "foo".into(),
            uid: "u1".into(),
        }
    }

    fn exists(uid: &str, deleting: bool) -> OwnerObservation {
        OwnerObservation::Exists {
            uid: uid.into(),
            deleting,
        }
    }

    #[test]
    fn the_collector_deletes_only_when_the_owner_is_confirmed_gone() {
        use GcDecision::*;
        let table = [
            (exists("u1", false), true, Keep),
            (exists("u1", true), true, Keep),
            (exists("u2", false), true, Delete),
            (OwnerObservation::Absent, true, Delete),
            (OwnerObservation::Absent, false, Wait),
            (OwnerObservation::Unknown, true, Wait),
            (OwnerObservation::Unknown, false, Wait),
            (exists("u2", false), false, Wait),
        ];
        for (observed, dep_ready, expected) in table {
            assert_eq!(
                decide_dependent(&owner(), &observed, dep_ready),
                expected,
                "{observed:?}, dependent cluster ready: {dep_ready}"
            );
        }
    }

    fn dep(cluster: &str, name: &str, deleting: bool) -> Dependent {
        Dependent {
            cluster: cluster.into(),
            namespace: Some("foo".into()),
            name: name.into(),
            uid: Some(format!("uid-{name}")),
            deleting,
        }
    }

    fn unseen(names: &[&str]) -> BTreeSet<String> {
        names.iter().map(|n| n.to_string()).collect()
    }

    #[test]
    fn background_deletes_what_it_sees_and_lets_the_owner_go_despite_an_unreachable_cluster() {
        let deps = [dep("central", "a", false), dep("central", "b", true)];
        let plan = plan_finalize(DeletionPolicy::Background, &deps, &unseen(&["down"]));
        assert_eq!(plan.delete, vec![dep("central", "a", false)]);
        assert!(plan.remove_finalizer);
        assert!(plan.orphan.is_empty());
    }

    #[test]
    fn foreground_keeps_the_owner_until_every_dependent_is_gone_and_every_cluster_seen() {
        let deps = [dep("central", "a", true)];
        let plan = plan_finalize(DeletionPolicy::Foreground, &deps, &unseen(&[]));
        assert!(plan.delete.is_empty(), "already being deleted");
        assert!(!plan.remove_finalizer);
        let plan = plan_finalize(DeletionPolicy::Foreground, &[], &unseen(&["down"]));
        assert_eq!(plan.waiting_for, unseen(&["down"]));
        assert!(!plan.remove_finalizer);
        assert!(plan_finalize(DeletionPolicy::Foreground, &[], &unseen(&[])).remove_finalizer);
    }

    #[test]
    fn orphan_strips_every_dependent_and_waits_for_unreachable_clusters() {
        let deps = [dep("central", "a", false)];
        let plan = plan_finalize(DeletionPolicy::Orphan, &deps, &unseen(&[]));
        assert_eq!(plan.orphan, deps.to_vec());
        assert!(plan.delete.is_empty());
        assert!(plan.remove_finalizer);
        let plan = plan_finalize(DeletionPolicy::Orphan, &deps, &unseen(&["down"]));
        assert!(!plan.remove_finalizer);
    }

    #[test]
    fn deletion_policies_parse_as_kubernetes_spells_them() {
        assert_eq!(
            DeletionPolicy::parse("Orphan"),
            Some(DeletionPolicy::Orphan)
        );
        assert_eq!(DeletionPolicy::parse("orphan"), None);
    }
}
