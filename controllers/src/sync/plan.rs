//! Pure propagation decisions: given what the federated object wants, which clusters are
//! registered and Ready, and what each member's cache holds, decide one operation per
//! cluster — and, from the operations' results, the status to report. No I/O here.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_crds::federated::{
    ClusterStatus, FederatedCondition, FederatedStatus, cluster_reason,
};
use serde_json::Value;

/// Annotation on member objects holding the content hash of what Flotilla last applied.
pub const HASH_ANNOTATION: &str = "flotilla.io/desired-hash";

/// Namespaces that are never deleted in a member, whatever a FederatedNamespace says.
pub const PROTECTED_NAMESPACES: [&str; 3] = ["kube-system", "kube-public", "default"];

/// What one member cluster holds for the object, as seen through the managed-label cache.
#[derive(Clone, Debug, PartialEq)]
pub enum Observed {
    /// The cluster is not Ready (or has no client).
    NotReady,
    /// The cluster is Ready but its cache has not finished listing yet.
    NotSynced,
    /// Ready and synced; no managed object of that name.
    Absent,
    /// Ready and synced; the managed member object.
    Present(Value),
}

/// The desired object for one selected cluster, or why it could not be computed.
#[derive(Clone, Debug, PartialEq)]
pub enum DesiredFor {
    /// The object to apply and its content hash.
    Object {
        /// The desired member object.
        object: Value,
        /// Content hash of `object`.
        hash: String,
    },
    /// Computing the object failed: (kubefed reason, message).
    Failed(&'static str, String),
}

/// The operation decided for one cluster.
#[derive(Clone, Debug, PartialEq)]
pub enum Op {
    /// Nothing to do; the cluster is in the desired state.
    Nothing,
    /// Create (or adopt) the object.
    Create,
    /// Apply the desired object over the existing one.
    Update,
    /// Delete the managed object (no longer placed here).
    Delete,
    /// Remove the managed label instead of deleting (protected namespaces, orphaning).
    Unlabel,
    /// Report a status without acting: (reason, message).
    Report(&'static str, String),
    /// Try again shortly without reporting (cache still syncing).
    Wait,
}

/// Decides the operation for one cluster while the federated object is live.
pub fn decide(
    selected: bool,
    observed: &Observed,
    desired: Option<&DesiredFor>,
    protected: bool,
) -> Op {
    match (selected, observed) {
        (true, Observed::NotReady) => Op::Report(
            cluster_reason::CLUSTER_NOT_READY,
            "the cluster is not ready; the object is propagated when it returns".into(),
        ),
        (_, Observed::NotSynced) => Op::Wait,
        (false, Observed::NotReady | Observed::Absent) => Op::Nothing,
        (false, Observed::Present(obj)) => {
            if is_terminating(obj) {
                Op::Report(cluster_reason::WAITING_FOR_REMOVAL, String::new())
            } else if protected {
                Op::Unlabel
            } else {
                Op::Delete
            }
        }
        (true, Observed::Absent) => match desired {
            Some(DesiredFor::Failed(reason, msg)) => Op::Report(reason, msg.clone()),
            Some(DesiredFor::Object { .. }) => Op::Create,
            None => Op::Nothing,
        },
        (true, Observed::Present(actual)) => match desired {
            Some(DesiredFor::Failed(reason, msg)) => Op::Report(reason, msg.clone()),
            Some(DesiredFor::Object { object, hash }) => {
                if is_terminating(actual) {
                    // Recreated once the old object is gone.
                    Op::Report(
                        cluster_reason::WAITING_FOR_REMOVAL,
                        "the member object is being deleted; it is recreated once gone".into(),
                    )
                } else if up_to_date(object, hash, actual) {
                    Op::Nothing
                } else {
                    Op::Update
                }
            }
            None => Op::Nothing,
        },
    }
}

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
        Observed::Absent => DeletionOp::Done,
        Observed::Present(_) if keep => DeletionOp::Unlabel,
        Observed::Present(obj) if is_terminating(obj) => DeletionOp::WaitForRemoval,
        Observed::Present(_) => DeletionOp::Delete,
    }
}

/// Whether a member object carries a deletion timestamp.
pub fn is_terminating(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp")
        .is_some_and(|v| !v.is_null())
}

/// Whether the member object already is what Flotilla would apply: the recorded hash
/// matches (so nothing was removed from the template) and every desired field still has
/// its desired value (so nobody edited an owned field in the member).
pub fn up_to_date(desired: &Value, hash: &str, actual: &Value) -> bool {
    let recorded = actual
        .pointer(&format!(
            "/metadata/annotations/{}",
            HASH_ANNOTATION.replace('/', "~1")
        ))
        .and_then(Value::as_str);
    recorded == Some(hash) && is_subset(desired, actual)
}

/// Whether every field of `want` is present in `have` with an equal value. Objects may
/// have extra keys (defaults, fields set by the member); lists may have extra trailing
/// items (items other managers own, such as injected sidecars).
pub fn is_subset(want: &Value, have: &Value) -> bool {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => w.iter().all(|(k, wv)| {
            h.get(k).is_some_and(|hv| is_subset(wv, hv)) || (wv.is_null() && !h.contains_key(k))
        }),
        (Value::Array(w), Value::Array(h)) => {
            w.len() <= h.len() && w.iter().zip(h.iter()).all(|(wv, hv)| is_subset(wv, hv))
        }
        (Value::Number(w), Value::Number(h)) => w.as_f64() == h.as_f64(),
        (w, h) => w == h,
    }
}

/// The outcome of one cluster's operation.
#[derive(Clone, Debug, PartialEq)]
pub enum Outcome {
    /// In the desired state.
    Ok,
    /// The object is (being) removed from the cluster: reported as WaitingForRemoval until
    /// the member's cache no longer has it.
    Removing,
    /// Removed or never there: the cluster is not listed in status.
    Gone,
    /// Failed or pending with a reason.
    Status(&'static str, String),
}

/// Whether a per-cluster reason is worth retrying with backoff (kubefed's recoverable set,
/// plus ClusterNotReady which resolves itself when the cluster returns).
pub fn is_recoverable(reason: &str) -> bool {
    matches!(
        reason,
        cluster_reason::CREATION_FAILED
            | cluster_reason::UPDATE_FAILED
            | cluster_reason::DELETION_FAILED
            | cluster_reason::LABEL_REMOVAL_FAILED
            | cluster_reason::RETRIEVAL_FAILED
            | cluster_reason::CREATION_TIMED_OUT
            | cluster_reason::UPDATE_TIMED_OUT
            | cluster_reason::DELETION_TIMED_OUT
            | cluster_reason::LABEL_REMOVAL_TIMED_OUT
            | cluster_reason::CLIENT_RETRIEVAL_FAILED
            | cluster_reason::WAITING_FOR_REMOVAL
    )
}

/// Clusters a placement names explicitly (`placement.clusters`) that are not registered.
pub fn unregistered_clusters(
    placement: &flotilla_crds::federated::Placement,
    registered: &BTreeSet<String>,
) -> Vec<String> {
    placement
        .clusters
        .iter()
        .flatten()
        .map(|c| c.name.clone())
        .filter(|n| !registered.contains(n))
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// How long Flotilla remembers its own last write to a member object. Within this time a
/// member cache that does not show the write yet is taken to lag, not to disagree.
pub const RECENT_WRITE_TTL: std::time::Duration = std::time::Duration::from_secs(10);

/// Whether the member cache has merely not caught up with Flotilla's own recent write of
/// `desired_hash` (`recent_hash` is the hash written within [`RECENT_WRITE_TTL`]): the
/// object is absent from the cache, or cached with another hash. Acting on such a cache
/// would send the same write twice (the host watch often delivers the status update of a
/// reconcile before the member watch delivers the write).
pub fn cache_lags(observed: &Observed, recent_hash: Option<&str>, desired_hash: &str) -> bool {
    if recent_hash != Some(desired_hash) {
        return false;
    }
    match observed {
        Observed::Absent => true,
        Observed::Present(obj) => recorded_hash(obj) != Some(desired_hash),
        Observed::NotReady | Observed::NotSynced => false,
    }
}

fn recorded_hash(obj: &Value) -> Option<&str> {
    obj.pointer(&format!(
        "/metadata/annotations/{}",
        HASH_ANNOTATION.replace('/', "~1")
    ))
    .and_then(Value::as_str)
}

/// Builds the federated object's status from per-cluster outcomes. `aggregate` is an
/// object-level failure (reason, message) that makes the condition False regardless.
/// Timestamps are carried over from `previous` when the condition did not change, so an
/// unchanged result produces an identical status (and no write).
pub fn build_status(
    generation: i64,
    outcomes: &BTreeMap<String, Outcome>,
    aggregate: Option<(&str, String)>,
    previous: &FederatedStatus,
    remote: &BTreeMap<String, Value>,
    now: &str,
) -> FederatedStatus {
    let clusters: Vec<ClusterStatus> = outcomes
        .iter()
        .filter_map(|(name, o)| {
            let (status, message) = match o {
                Outcome::Ok => (String::new(), String::new()),
                Outcome::Gone => return None,
                Outcome::Removing => (
                    cluster_reason::WAITING_FOR_REMOVAL.to_string(),
                    String::new(),
                ),
                Outcome::Status(r, m) => (r.to_string(), m.clone()),
            };
            let remote_status = remote.get(name).cloned();
            Some(ClusterStatus {
                name: name.clone(),
                status,
                message,
                remote_status,
            })
        })
        .collect();
    let failing: BTreeSet<&str> = clusters
        .iter()
        .filter(|c| !c.status.is_empty())
        .map(|c| c.name.as_str())
        .collect();
    let (status, reason, message) = match aggregate {
        Some((r, m)) => ("False", r.to_string(), m),
        None if failing.is_empty() => ("True", String::new(), String::new()),
        None => (
            "False",
            flotilla_crds::federated::aggregate_reason::CHECK_CLUSTERS.to_string(),
            format!(
                "not propagated to {}: see status.clusters",
                failing.into_iter().collect::<Vec<_>>().join(", ")
            ),
        ),
    };
    let prev = previous.propagation();
    let unchanged =
        prev.is_some_and(|p| p.status == status && p.reason == reason && p.message == message);
    let condition = FederatedCondition {
        type_: "Propagation".into(),
        status: status.into(),
        reason,
        message,
        last_update_time: match prev {
            Some(p) if unchanged => p.last_update_time.clone(),
            _ => now.to_string(),
        },
        last_transition_time: match prev {
            Some(p) if p.status == status => p.last_transition_time.clone(),
            _ => now.to_string(),
        },
    };
    FederatedStatus {
        observed_generation: generation,
        conditions: vec![condition],
        clusters,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn desired() -> DesiredFor {
        DesiredFor::Object {
            object: json!({"metadata": {"name": "a", "labels": {"kubefed.io/managed": "true"}, "annotations": {HASH_ANNOTATION: "h1"}}, "data": {"k": "v"}}),
            hash: "h1".into(),
        }
    }

    fn member(data: Value, hash: &str) -> Observed {
        Observed::Present(json!({
            "metadata": {"name": "a", "resourceVersion": "7", "labels": {"kubefed.io/managed": "true"}, "annotations": {HASH_ANNOTATION: hash}},
            "data": data
        }))
    }

    #[test]
    fn a_selected_ready_cluster_without_the_object_gets_a_create() {
        assert_eq!(
            decide(true, &Observed::Absent, Some(&desired()), false),
            Op::Create
        );
    }

    #[test]
    fn a_selected_unready_cluster_reports_cluster_not_ready() {
        assert!(matches!(
            decide(true, &Observed::NotReady, Some(&desired()), false),
            Op::Report(cluster_reason::CLUSTER_NOT_READY, _)
        ));
    }

    #[test]
    fn an_up_to_date_member_object_needs_nothing() {
        let observed = member(json!({"k": "v"}), "h1");
        assert_eq!(
            decide(true, &observed, Some(&desired()), false),
            Op::Nothing
        );
    }

    #[test]
    fn a_member_side_edit_of_an_owned_field_is_drift_and_gets_an_update() {
        let observed = member(json!({"k": "edited"}), "h1");
        assert_eq!(decide(true, &observed, Some(&desired()), false), Op::Update);
    }

    #[test]
    fn a_changed_hash_gets_an_update_even_when_the_fields_are_a_subset() {
        let observed = member(json!({"k": "v", "removed": "x"}), "h0");
        assert_eq!(decide(true, &observed, Some(&desired()), false), Op::Update);
    }

    #[test]
    fn fields_the_member_adds_are_not_drift() {
        let observed = member(json!({"k": "v", "extra": "member-set"}), "h1");
        assert_eq!(
            decide(true, &observed, Some(&desired()), false),
            Op::Nothing
        );
    }

    #[test]
    fn a_deselected_cluster_with_the_object_gets_a_delete() {
        assert_eq!(
            decide(false, &member(json!({}), "h1"), None, false),
            Op::Delete
        );
    }

    #[test]
    fn a_protected_namespace_is_unlabelled_instead_of_deleted() {
        assert_eq!(
            decide(false, &member(json!({}), "h1"), None, true),
            Op::Unlabel
        );
    }

    #[test]
    fn a_deselected_cluster_without_the_object_needs_nothing() {
        assert_eq!(decide(false, &Observed::Absent, None, false), Op::Nothing);
        assert_eq!(decide(false, &Observed::NotReady, None, false), Op::Nothing);
    }

    #[test]
    fn an_unsynced_cache_waits() {
        assert_eq!(
            decide(true, &Observed::NotSynced, Some(&desired()), false),
            Op::Wait
        );
    }

    #[test]
    fn a_failed_desired_object_is_reported_with_its_reason() {
        let failed = DesiredFor::Failed(cluster_reason::APPLY_OVERRIDES_FAILED, "bad path".into());
        assert_eq!(
            decide(true, &Observed::Absent, Some(&failed), false),
            Op::Report(cluster_reason::APPLY_OVERRIDES_FAILED, "bad path".into())
        );
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
    fn subset_allows_longer_lists_and_numeric_equality() {
        assert!(is_subset(
            &json!({"a": [1, {"x": 1}]}),
            &json!({"a": [1.0, {"x": 1, "y": 2}, 3]})
        ));
        assert!(!is_subset(&json!({"a": [1, 2]}), &json!({"a": [1]})));
        assert!(!is_subset(&json!({"a": {"b": 1}}), &json!({"a": {}})));
    }

    #[test]
    fn clusters_named_in_the_placement_but_not_registered_are_listed() {
        let placement: flotilla_crds::federated::Placement = serde_json::from_value(
            json!({"clusters": [{"name": "m1"}, {"name": "typo"}, {"name": "typo"}]}),
        )
        .expect("valid placement");
        let registered = BTreeSet::from(["m1".to_string()]);
        assert_eq!(
            unregistered_clusters(&placement, &registered),
            vec!["typo".to_string()]
        );
        let by_selector = flotilla_crds::federated::Placement::default();
        assert!(unregistered_clusters(&by_selector, &registered).is_empty());
    }

    #[test]
    fn collected_remote_status_is_reported_per_cluster() {
        let outcomes = BTreeMap::from([("m1".to_string(), Outcome::Ok)]);
        let remote = BTreeMap::from([("m1".to_string(), json!({"readyReplicas": 2}))]);
        let s = build_status(
            1,
            &outcomes,
            None,
            &FederatedStatus::default(),
            &remote,
            "t0",
        );
        assert_eq!(
            s.clusters[0].remote_status,
            Some(json!({"readyReplicas": 2}))
        );
    }

    #[test]
    fn a_cache_that_has_not_seen_our_own_write_lags() {
        assert!(cache_lags(&Observed::Absent, Some("h1"), "h1"));
        assert!(cache_lags(
            &member(json!({"k": "v"}), "h0"),
            Some("h1"),
            "h1"
        ));
    }

    #[test]
    fn a_cache_showing_our_write_or_another_desire_does_not_lag() {
        // Our write is visible: normal drift detection applies.
        assert!(!cache_lags(
            &member(json!({"k": "edited"}), "h1"),
            Some("h1"),
            "h1"
        ));
        // The template changed since our last write: a new write is due.
        assert!(!cache_lags(&Observed::Absent, Some("h0"), "h1"));
        assert!(!cache_lags(&Observed::Absent, None, "h1"));
        assert!(!cache_lags(&Observed::NotReady, Some("h1"), "h1"));
    }

    #[test]
    fn status_is_true_when_every_cluster_propagated() {
        let outcomes = BTreeMap::from([
            ("m1".to_string(), Outcome::Ok),
            ("m2".to_string(), Outcome::Gone),
        ]);
        let s = build_status(
            3,
            &outcomes,
            None,
            &FederatedStatus::default(),
            &BTreeMap::new(),
            "t0",
        );
        assert_eq!(s.observed_generation, 3);
        assert_eq!(s.conditions[0].status, "True");
        assert_eq!(s.clusters.len(), 1);
    }

    #[test]
    fn status_names_failing_clusters_with_check_clusters() {
        let outcomes = BTreeMap::from([
            ("m1".to_string(), Outcome::Ok),
            (
                "m2".to_string(),
                Outcome::Status(cluster_reason::APPLY_OVERRIDES_FAILED, "bad".into()),
            ),
        ]);
        let s = build_status(
            1,
            &outcomes,
            None,
            &FederatedStatus::default(),
            &BTreeMap::new(),
            "t0",
        );
        assert_eq!(s.conditions[0].status, "False");
        assert_eq!(s.conditions[0].reason, "CheckClusters");
        assert!(s.conditions[0].message.contains("m2"));
    }

    #[test]
    fn an_unchanged_result_rebuilds_an_identical_status() {
        let outcomes = BTreeMap::from([("m1".to_string(), Outcome::Ok)]);
        let first = build_status(
            1,
            &outcomes,
            None,
            &FederatedStatus::default(),
            &BTreeMap::new(),
            "t0",
        );
        let second = build_status(1, &outcomes, None, &first, &BTreeMap::new(), "t1");
        assert_eq!(first, second);
    }
}
