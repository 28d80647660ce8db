//! Pure deletion decisions: what removing a federated object does in each cluster, how
//! long an unavailable cluster is waited for, and when deletion is worth a status write.

use std::{collections::BTreeMap, time::Duration};

use flotilla_api::ClusterReason;

use super::{Observed, Outcome, is_terminating};

/// What deletion of the federated object does in one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DeletionOp {
    /// Nothing of ours is there (or the cluster never had the object): done here.
    Done,
    /// Delete the member object with the federated object's delete options.
    Delete,
    /// Remove the managed label and leave the object (orphaning, protected namespaces).
    Unlabel,
    /// The member object is terminating; wait until it is gone.
    WaitForRemoval,
    /// The cluster may hold the object but cannot be asked now (unready, or its cache is
    /// still listing); wait for it, up to the unready-cluster deletion timeout.
    WaitForCluster,
    /// The timeout passed: stop waiting for this cluster. Whatever it holds is left
    /// behind (and cleaned up as a stray when the cluster returns).
    Abandon,
}

impl DeletionOp {
    /// Whether the finalizer must stay because of this cluster.
    pub fn is_pending(&self) -> bool {
        !matches!(self, DeletionOp::Done | DeletionOp::Abandon)
    }
}

/// Decides what deletion does in one cluster.
///
/// - `may_hold`: the cluster may hold the object although it cannot be observed — it is
///   listed in the federated object's status or selected by its placement. An unready
///   cluster that never had the object is not waited for.
/// - `keep`: remove only the managed label (the `kubefed.io/orphan` annotation, or a
///   namespace that must never be deleted).
/// - `timed_out`: the object has been deleting for longer than the unready-cluster
///   deletion timeout.
///
/// A cluster removed from the registry is not passed here at all: it is never waited for.
pub fn decide_deletion(
    observed: &Observed,
    may_hold: bool,
    keep: bool,
    timed_out: bool,
) -> DeletionOp {
    match observed {
        Observed::NotReady | Observed::NotSynced if !may_hold => DeletionOp::Done,
        Observed::NotReady | Observed::NotSynced if timed_out => DeletionOp::Abandon,
        Observed::NotReady | Observed::NotSynced => DeletionOp::WaitForCluster,
        Observed::Absent | Observed::Excluded => DeletionOp::Done,
        Observed::Present(_) if keep => DeletionOp::Unlabel,
        Observed::Present(obj) if is_terminating(obj) => DeletionOp::WaitForRemoval,
        Observed::Present(_) => DeletionOp::Delete,
    }
}

/// How long deletion has waited for a cluster: since the deletion, or since this
/// controller first saw the cluster unavailable if that is later (after a restart, a
/// cluster nobody has probed yet is not given up on at once).
pub fn waited(deleted_for: Duration, unavailable_for: Option<Duration>) -> Duration {
    unavailable_for.map_or(deleted_for, |u| u.min(deleted_for))
}

/// The status reported for a cluster that deletion waits for.
pub fn wait_reason(observed: &Observed, timeout: &str) -> (ClusterReason, String) {
    match observed {
        Observed::NotSynced => (
            ClusterReason::WaitingForRemoval,
            "waiting for the cluster's cache to sync to remove the object".into(),
        ),
        _ => (
            ClusterReason::ClusterNotReady,
            format!("waiting up to {timeout} for the cluster to return to remove the object"),
        ),
    }
}

/// Whether a pending deletion writes status. A deletion just issued everywhere is not
/// news: writing WaitingForRemoval for every deleted object would double the host writes
/// of a bulk delete. Status is written when something holds the deletion up: a member
/// object still terminating on a later pass (`held`: a finalizer in the member), an
/// unready cluster, a failure.
pub fn writes_status(held: bool, outcomes: &BTreeMap<String, Outcome>) -> bool {
    held || !outcomes
        .values()
        .all(|o| matches!(o, Outcome::Removing | Outcome::Gone))
}

/// When to look at a pending deletion again: member delete events requeue it sooner; the
/// timer covers the unready-cluster deadline and clusters that failed to answer.
pub fn recheck_after(next_deadline: Duration) -> Duration {
    next_deadline.clamp(Duration::from_secs(1), Duration::from_secs(5))
}

/// The Warning of a deletion that gave up on unready clusters; `orphaning`: the member
/// copies are kept (only unlabelled) when the clusters return, not removed as strays.
pub fn abandoned_message(
    abandoned: &[String],
    timeout: &str,
    kind: &str,
    object: &str,
    orphaning: bool,
) -> String {
    let then = if orphaning {
        "it is kept and only unlabelled when the cluster returns (orphaned)"
    } else {
        "it is removed as a stray when the cluster returns"
    };
    format!(
        "gave up waiting for unready cluster(s) {} after {timeout}: the {kind} {object} may be left behind there; {then}",
        abandoned.join(", "),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value, json};

    fn member(data: Value, hash: &str) -> Observed {
        Observed::Present(json!({
            "metadata": {"name": "a", "annotations": {super::super::HASH_ANNOTATION: hash}},
            "data": data
        }))
    }

    fn terminating() -> Observed {
        Observed::Present(
            json!({"metadata": {"name": "a", "deletionTimestamp": "2024-01-01T00:00:00Z"}}),
        )
    }

    #[test]
    fn deletion_deletes_a_present_member_object() {
        let present = member(json!({}), "h1");
        assert_eq!(
            decide_deletion(&present, true, false, false),
            DeletionOp::Delete
        );
        assert_eq!(
            decide_deletion(&present, false, false, true),
            DeletionOp::Delete
        );
    }

    #[test]
    fn deletion_only_unlabels_when_orphaning_or_protected_even_if_terminating() {
        assert_eq!(
            decide_deletion(&member(json!({}), "h1"), true, true, false),
            DeletionOp::Unlabel
        );
        assert_eq!(
            decide_deletion(&terminating(), true, true, false),
            DeletionOp::Unlabel
        );
    }

    #[test]
    fn deletion_waits_for_a_terminating_member_object() {
        let op = decide_deletion(&terminating(), true, false, true);
        assert_eq!(op, DeletionOp::WaitForRemoval);
        assert!(op.is_pending());
    }

    #[test]
    fn deletion_is_done_in_a_cluster_without_the_object() {
        assert_eq!(
            decide_deletion(&Observed::Absent, true, false, false),
            DeletionOp::Done
        );
    }

    #[test]
    fn an_object_labelled_managed_false_is_not_deleted() {
        assert_eq!(
            decide_deletion(&Observed::Excluded, true, false, false),
            DeletionOp::Done
        );
    }

    #[test]
    fn deletion_waits_for_an_unready_cluster_that_may_hold_the_object_until_the_timeout() {
        for observed in [Observed::NotReady, Observed::NotSynced] {
            let waiting = decide_deletion(&observed, true, false, false);
            assert_eq!(waiting, DeletionOp::WaitForCluster);
            assert!(waiting.is_pending());
            let given_up = decide_deletion(&observed, true, false, true);
            assert_eq!(given_up, DeletionOp::Abandon);
            assert!(!given_up.is_pending());
        }
    }

    #[test]
    fn deletion_does_not_wait_for_an_unready_cluster_that_never_had_the_object() {
        assert_eq!(
            decide_deletion(&Observed::NotReady, false, false, false),
            DeletionOp::Done
        );
        assert_eq!(
            decide_deletion(&Observed::NotSynced, false, true, false),
            DeletionOp::Done
        );
    }

    #[test]
    fn orphaning_also_waits_for_an_unready_cluster_to_remove_the_label() {
        assert_eq!(
            decide_deletion(&Observed::NotReady, true, true, false),
            DeletionOp::WaitForCluster
        );
    }

    #[test]
    fn a_cluster_seen_unavailable_only_after_a_restart_is_waited_for_from_then() {
        let deleted_for = Duration::from_secs(600);
        assert_eq!(waited(deleted_for, None), deleted_for);
        assert_eq!(
            waited(deleted_for, Some(Duration::from_secs(3))),
            Duration::from_secs(3)
        );
        assert_eq!(
            waited(Duration::from_secs(2), Some(Duration::from_secs(30))),
            Duration::from_secs(2)
        );
    }

    #[test]
    fn a_bulk_delete_just_issued_writes_no_status() {
        let issued = BTreeMap::from([
            ("m1".to_string(), Outcome::Removing),
            ("m2".to_string(), Outcome::Gone),
        ]);
        assert!(!writes_status(false, &issued));
        assert!(writes_status(true, &issued));
        let failed = BTreeMap::from([(
            "m1".to_string(),
            Outcome::Status(ClusterReason::DeletionFailed, "denied".into()),
        )]);
        assert!(writes_status(false, &failed));
    }

    #[test]
    fn waiting_for_an_unsynced_cache_is_not_reported_as_an_unready_cluster() {
        assert_eq!(
            wait_reason(&Observed::NotSynced, "5m").0,
            ClusterReason::WaitingForRemoval
        );
        let (reason, msg) = wait_reason(&Observed::NotReady, "5m");
        assert_eq!(reason, ClusterReason::ClusterNotReady);
        assert!(msg.contains("5m"));
    }

    #[test]
    fn pending_deletions_are_rechecked_between_one_and_five_seconds() {
        assert_eq!(recheck_after(Duration::ZERO), Duration::from_secs(1));
        assert_eq!(
            recheck_after(Duration::from_secs(300)),
            Duration::from_secs(5)
        );
    }
}
