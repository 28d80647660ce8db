//! Pure propagation decisions: given what the federated object wants, which clusters are
//! registered and Ready, and what each member's cache holds, decide one operation per
//! cluster ([`decide`]); what deletion does per cluster ([`deletion`]); and, from the
//! operations' results, the status to report ([`status`]). No I/O here: every "why was an
//! Update sent to member2?" is answered by a function of this module and its unit tests.

pub mod aggregate;
pub mod decision;
pub mod deletion;
pub mod lag;
pub mod pipeline;
pub mod status;

use std::{
    collections::{BTreeMap, BTreeSet},
    time::Duration,
};

use flotilla_api::{ClusterReason, core::ApiResource, federated::FederatedSpec};
use serde_json::{Value, json};

pub use lag::{LagCheck, Recent, lag_check};

pub use flotilla_core::member::{
    HASH_ANNOTATION, PROTECTED_NAMESPACES, excluded_message, is_subset, is_terminating,
    recorded_hash, up_to_date,
};

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
    /// Ready and synced; an object of that name labelled `kubefed.io/managed=false`: the
    /// user asked Flotilla to leave it alone.
    Excluded,
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
    Failed(ClusterReason, String),
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
    Report(ClusterReason, String),
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
            ClusterReason::ClusterNotReady,
            "the cluster is not ready; the object is propagated when it returns".into(),
        ),
        (_, Observed::NotSynced) => Op::Wait,
        (false, Observed::NotReady | Observed::Absent | Observed::Excluded) => Op::Nothing,
        (true, Observed::Excluded) => match desired {
            Some(DesiredFor::Failed(reason, msg)) => Op::Report(*reason, msg.clone()),
            Some(DesiredFor::Object { .. }) => {
                Op::Report(ClusterReason::ManagedLabelFalse, excluded_message())
            }
            None => Op::Nothing,
        },
        (false, Observed::Present(obj)) => {
            if is_terminating(obj) {
                Op::Report(ClusterReason::WaitingForRemoval, String::new())
            } else if protected {
                Op::Unlabel
            } else {
                Op::Delete
            }
        }
        (true, Observed::Absent) => match desired {
            Some(DesiredFor::Failed(reason, msg)) => Op::Report(*reason, msg.clone()),
            Some(DesiredFor::Object { .. }) => Op::Create,
            None => Op::Nothing,
        },
        (true, Observed::Present(actual)) => match desired {
            Some(DesiredFor::Failed(reason, msg)) => Op::Report(*reason, msg.clone()),
            Some(DesiredFor::Object { object, hash }) => {
                if is_terminating(actual) {
                    // Recreated once the old object is gone.
                    Op::Report(
                        ClusterReason::WaitingForRemoval,
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
    Status(ClusterReason, String),
}

/// Clusters a placement names explicitly (`placement.clusters`) that are not registered.
pub fn unregistered_clusters(
    placement: &flotilla_api::federated::Placement,
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

/// The operation for one cluster, and when to look again if its cache lags behind our
/// own last operation on the object (`recent`, see [`lag`]).
pub fn cluster_op(
    selected: bool,
    observed: &Observed,
    recent: Option<&Recent>,
    desired: &DesiredSet,
    cluster: &str,
    protected: bool,
) -> (Op, Option<Duration>) {
    match lag_check(selected, observed, recent, desired.hash(cluster)) {
        // Our delete has not reached the cache yet: the object is on its way out.
        LagCheck::Skip { recheck_after } if !selected => (
            Op::Report(ClusterReason::WaitingForRemoval, String::new()),
            recheck_after,
        ),
        LagCheck::Skip { recheck_after } => (Op::Nothing, recheck_after),
        LagCheck::Trust => (
            decide(
                selected,
                observed,
                desired.by_cluster.get(cluster),
                protected,
            ),
            None,
        ),
    }
}

/// How soon to look again while a member cache is still listing. The cache's `Synced`
/// event requeues every object the moment it has listed, so this is only a safety net:
/// at 500 ms every object placed on a listing member was reconciled twice a second for
/// nothing (100 members × 1,100 objects at a start or a restart).
pub const CACHE_SYNC_RECHECK: Duration = Duration::from_secs(5);

/// What the work queue does after a live reconcile: look again soon while a cache is
/// listing, back off after a recoverable failure, else wait for events (or the lag recheck).
pub fn live_action(waiting: bool, backoff: bool, recheck: Option<Duration>) -> crate::sync::Action {
    use crate::sync::Action;
    if waiting {
        Action::Requeue(CACHE_SYNC_RECHECK)
    } else if backoff {
        Action::Backoff { recheck }
    } else {
        Action::recheck(recheck)
    }
}

/// The desired member objects of one federated object, per selected cluster.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DesiredSet {
    /// Per selected cluster: the object (with its hash annotation) or why it failed.
    pub by_cluster: BTreeMap<String, DesiredFor>,
    /// The template had annotations, which are not propagated.
    pub dropped_annotations: bool,
    /// The template had finalizers, which are not propagated.
    pub dropped_finalizers: bool,
}

impl DesiredSet {
    /// The desired content hash for a cluster, when an object could be computed.
    pub fn hash(&self, cluster: &str) -> Option<&str> {
        match self.by_cluster.get(cluster) {
            Some(DesiredFor::Object { hash, .. }) => Some(hash),
            _ => None,
        }
    }
}

/// Computes the desired object for every selected cluster: template, name, namespace,
/// managed label, the cluster's overrides, and the content-hash annotation.
pub fn desired_objects(
    target: &ApiResource,
    name: &str,
    namespace: Option<&str>,
    spec: &FederatedSpec,
    selected: &BTreeSet<String>,
) -> DesiredSet {
    let overrides = flotilla_core::overrides::by_cluster(&spec.overrides);
    let mut set = DesiredSet::default();
    for cluster in selected {
        let d = match &overrides {
            Err(e) => DesiredFor::Failed(ClusterReason::ApplyOverridesFailed, e.to_string()),
            Ok(by_cluster) => {
                let ops = by_cluster.get(cluster).map(Vec::as_slice);
                match flotilla_core::desired::compute(target, name, namespace, spec, cluster, ops) {
                    Ok(d) => {
                        set.dropped_annotations |= d.dropped_annotations;
                        set.dropped_finalizers |= d.dropped_finalizers;
                        let mut object = d.object;
                        let hash = flotilla_api::hash::content_hash(&object);
                        set_annotation(&mut object, HASH_ANNOTATION, &hash);
                        DesiredFor::Object { object, hash }
                    }
                    Err(e) => DesiredFor::Failed(e.reason(), e.to_string()),
                }
            }
        };
        set.by_cluster.insert(cluster.clone(), d);
    }
    set
}

fn set_annotation(obj: &mut Value, key: &str, value: &str) {
    if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
        let ann = meta.entry("annotations").or_insert_with(|| json!({}));
        if let Some(map) = ann.as_object_mut() {
            map.insert(key.to_string(), Value::String(value.to_string()));
        }
    }
}

/// Whether the results of a live reconcile call for a retry with backoff: a failure that
/// retrying may fix, or a member object still being removed.
pub fn needs_backoff<'a>(outcomes: impl IntoIterator<Item = &'a Outcome>) -> bool {
    outcomes.into_iter().any(|o| match o {
        Outcome::Status(reason, _) => reason.is_recoverable(),
        Outcome::Removing => true,
        Outcome::Ok | Outcome::Gone => false,
    })
}

/// The desired object with the member's current `spec.replicas` kept
/// (`spec.retainReplicas`): replicas are owned by whatever scales the member (an HPA).
pub fn retain_replicas(mut desired: Value, observed: &Observed) -> Value {
    if let Observed::Present(actual) = observed
        && let Some(r) = actual.pointer("/spec/replicas")
        && let Some(spec) = desired.get_mut("spec").and_then(Value::as_object_mut)
    {
        spec.insert("replicas".into(), r.clone());
    }
    desired
}

/// Whether an observed member namespace is the host's own namespace (same UID), which
/// happens when the host cluster is also joined as a member.
pub fn is_host_namespace(observed: &Observed, host_uid: Option<&str>) -> bool {
    match (observed, host_uid) {
        (Observed::Present(obj), Some(uid)) => {
            obj.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid)
        }
        _ => false,
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
    fn an_object_labelled_managed_false_is_reported_and_never_written() {
        assert!(matches!(
            decide(true, &Observed::Excluded, Some(&desired()), false),
            Op::Report(ClusterReason::ManagedLabelFalse, _)
        ));
        assert_eq!(
            decide(false, &Observed::Excluded, Some(&desired()), false),
            Op::Nothing
        );
        assert_eq!(decide(false, &Observed::Excluded, None, true), Op::Nothing);
    }

    #[test]
    fn a_selected_unready_cluster_reports_cluster_not_ready() {
        assert!(matches!(
            decide(true, &Observed::NotReady, Some(&desired()), false),
            Op::Report(ClusterReason::ClusterNotReady, _)
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
    fn a_member_object_from_a_list_without_api_version_and_kind_is_up_to_date() {
        let desired = DesiredFor::Object {
            object: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a", "annotations": {HASH_ANNOTATION: "h1"}}, "data": {"k": "v"}}),
            hash: "h1".into(),
        };
        // As a LIST returns it after a restart: no apiVersion, no kind.
        let listed = member(json!({"k": "v"}), "h1");
        assert_eq!(decide(true, &listed, Some(&desired), false), Op::Nothing);
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
        let failed = DesiredFor::Failed(ClusterReason::ApplyOverridesFailed, "bad path".into());
        assert_eq!(
            decide(true, &Observed::Absent, Some(&failed), false),
            Op::Report(ClusterReason::ApplyOverridesFailed, "bad path".into())
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
        let placement: flotilla_api::federated::Placement = serde_json::from_value(
            json!({"clusters": [{"name": "m1"}, {"name": "typo"}, {"name": "typo"}]}),
        )
        .expect("valid placement");
        let registered = BTreeSet::from(["m1".to_string()]);
        assert_eq!(
            unregistered_clusters(&placement, &registered),
            vec!["typo".to_string()]
        );
        let by_selector = flotilla_api::federated::Placement::default();
        assert!(unregistered_clusters(&by_selector, &registered).is_empty());
    }

    fn target() -> ApiResource {
        ApiResource {
            group: String::new(),
            version: "v1".into(),
            kind: "ConfigMap".into(),
            plural_name: "configmaps".into(),
            scope: flotilla_api::core::Scope::Namespaced,
        }
    }

    #[test]
    fn desired_objects_carry_the_hash_annotation_and_each_clusters_overrides() {
        let spec: FederatedSpec = serde_json::from_value(json!({
            "template": {"data": {"k": "v"}},
            "overrides": [{"clusterName": "m2", "clusterOverrides": [{"path": "/data/k", "value": "m2"}]}]
        }))
        .expect("valid spec");
        let selected = BTreeSet::from(["m1".to_string(), "m2".to_string()]);
        let set = desired_objects(&target(), "a", Some("demo"), &spec, &selected);
        let DesiredFor::Object { object, hash } = &set.by_cluster["m2"] else {
            panic!("m2 computed");
        };
        assert_eq!(object["data"]["k"], "m2");
        assert_eq!(
            object["metadata"]["annotations"][HASH_ANNOTATION].as_str(),
            Some(hash.as_str())
        );
        assert_ne!(set.hash("m1"), set.hash("m2"));
    }

    #[test]
    fn a_bad_override_fails_every_cluster_with_apply_overrides_failed() {
        let spec: FederatedSpec = serde_json::from_value(json!({
            "template": {"data": {"k": "v"}},
            "overrides": [{"clusterName": "m1", "clusterOverrides": [{"op": "remove", "path": "/metadata"}]}]
        }))
        .expect("valid spec");
        let selected = BTreeSet::from(["m1".to_string()]);
        let set = desired_objects(&target(), "a", Some("demo"), &spec, &selected);
        assert!(matches!(
            set.by_cluster["m1"],
            DesiredFor::Failed(ClusterReason::ApplyOverridesFailed, _)
        ));
        assert_eq!(set.hash("m1"), None);
    }

    #[test]
    fn a_lagging_cache_gets_nothing_and_a_recheck_while_a_trusted_one_gets_a_decision() {
        let mut set = DesiredSet::default();
        set.by_cluster.insert("m1".into(), desired());
        let hash = set.hash("m1").expect("a hash").to_string();
        let recent = Recent {
            op: lag::LastOp::Wrote(hash),
            basis: lag::Basis::Version(None),
            age: Duration::from_secs(119),
        };
        let (op, recheck) = cluster_op(true, &Observed::Absent, Some(&recent), &set, "m1", false);
        assert_eq!(op, Op::Nothing);
        assert_eq!(recheck, Some(Duration::from_millis(1100)));
        let (op, recheck) = cluster_op(true, &Observed::Absent, None, &set, "m1", false);
        assert_eq!((op, recheck), (Op::Create, None));
    }

    #[test]
    fn an_unselected_cluster_whose_cache_lags_our_delete_is_waiting_for_removal() {
        let held = member(json!({"k": "v"}), "h1");
        let recent = Recent {
            op: lag::LastOp::Deleted,
            basis: lag::Basis::of(&held),
            age: Duration::from_secs(1),
        };
        let set = DesiredSet::default();
        let (op, _) = cluster_op(false, &held, Some(&recent), &set, "m1", false);
        assert_eq!(
            op,
            Op::Report(ClusterReason::WaitingForRemoval, String::new())
        );
        assert_eq!(
            cluster_op(false, &held, None, &set, "m1", false).0,
            Op::Delete
        );
    }

    #[test]
    fn a_listing_cache_wins_over_backoff_and_backoff_over_a_plain_recheck() {
        use crate::sync::Action;
        let r = Some(Duration::from_secs(2));
        assert_eq!(
            live_action(true, true, r),
            Action::Requeue(CACHE_SYNC_RECHECK)
        );
        assert_eq!(live_action(false, true, r), Action::Backoff { recheck: r });
        assert_eq!(
            live_action(false, false, r),
            Action::Requeue(Duration::from_secs(2))
        );
        assert_eq!(live_action(false, false, None), Action::AwaitChange);
    }

    #[test]
    fn recoverable_failures_and_removals_back_off_while_user_errors_do_not() {
        assert!(needs_backoff(&[Outcome::Ok, Outcome::Removing]));
        assert!(needs_backoff(&[Outcome::Status(
            ClusterReason::CreationFailed,
            String::new()
        )]));
        assert!(!needs_backoff(&[Outcome::Status(
            ClusterReason::AlreadyExists,
            String::new()
        )]));
        assert!(!needs_backoff(&[Outcome::Ok, Outcome::Gone]));
    }

    #[test]
    fn retained_replicas_come_from_the_member_object() {
        let desired = json!({"spec": {"replicas": 3, "x": 1}});
        let observed = Observed::Present(json!({"spec": {"replicas": 7}}));
        assert_eq!(
            retain_replicas(desired.clone(), &observed)["spec"]["replicas"],
            7
        );
        assert_eq!(
            retain_replicas(desired, &Observed::Absent)["spec"]["replicas"],
            3
        );
    }

    #[test]
    fn only_a_member_namespace_with_the_host_namespaces_uid_is_the_host_namespace() {
        let ns = |uid: &str| Observed::Present(json!({"metadata": {"name": "demo", "uid": uid}}));
        assert!(is_host_namespace(&ns("u1"), Some("u1")));
        assert!(!is_host_namespace(&ns("u2"), Some("u1")));
        assert!(!is_host_namespace(&ns("u1"), None));
        assert!(!is_host_namespace(&Observed::Absent, Some("u1")));
    }
}
