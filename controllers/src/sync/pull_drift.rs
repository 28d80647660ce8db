//! Drift in Pull clusters, as the host sees it: the agent decides on drift in its member
//! (the same [`flotilla_core::drift`] functions push mode uses) and reports the entry in the
//! Work status (`manifestConditions[].drift`); this module reads that entry into the
//! round's drift — so `status.drift`, the `DriftRepaired`/`DriftDetected`/`DriftFight`
//! Events and `flotilla_drift_total` come out exactly as for a Push cluster — maps a
//! reported or fought drift to the cluster's status (`Drifted`, `DriftFight`), and says
//! which policy annotations a Work carries so the agent applies the federated object's
//! policy. It never reads a member.

use std::collections::BTreeMap;

use flotilla_api::{
    ClusterReason,
    drift::{ClusterDrift, DriftState},
    work::{APPLIED, Work},
};
use flotilla_core::drift::Policy;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::core::DynamicObject;
use serde_json::Value;

use super::{
    Key, SyncShared,
    drift::{DriftContext, DriftRound, announce},
    host::HostCaches,
    plan::Outcome,
    type_info::TypeInfo,
};

/// The drift policy annotations of a Pull cluster's Work: none for the default policy
/// (so Works written before policies reached agents stay as they are), the normalized
/// annotations otherwise.
pub fn work_policy_annotations(policy: &Policy) -> BTreeMap<String, String> {
    if *policy == Policy::default() {
        BTreeMap::new()
    } else {
        policy.to_annotations()
    }
}

/// The agent's drift report on manifest `ordinal` of a Work: `None` when the agent has not
/// reported on the Work's current generation (not looked at: the previous entry stands),
/// else the manifest's entry (`Some(None)`: no drift to show).
pub fn reported_drift(work: &Work, ordinal: usize) -> Option<Option<&ClusterDrift>> {
    let report = work.manifest_report(ordinal)?;
    let current = report
        .conditions
        .iter()
        .any(|c| c.type_ == APPLIED && c.observed_generation == work.metadata.generation);
    current.then_some(report.drift.as_ref())
}

/// The cluster's status for a reported drift the agent left in place: `Drifted` under
/// `Report` (or when the repair failed), `DriftFight` once repairs stopped; `None` for a
/// repaired one. The message has no times, so it does not change by itself.
pub fn drift_outcome(entry: &ClusterDrift) -> Option<Outcome> {
    match DriftState::parse(&entry.state)? {
        DriftState::Repaired => None,
        DriftState::Detected => Some(Outcome::Status(ClusterReason::Drifted, entry.summary())),
        DriftState::Fight => Some(Outcome::Status(
            ClusterReason::DriftFight,
            format!(
                "{}; the agent stopped repairing after {} rewrites by {} within {} s",
                entry.summary(),
                flotilla_core::drift::fight::FIGHT_REWRITES,
                entry.first_manager(),
                flotilla_core::drift::fight::FIGHT_WINDOW_SECONDS,
            ),
        )),
    }
}

/// The member object a Work's drift is about (its manifest), as an Event's related object.
fn member_ref(work: &Work, ordinal: usize, entry: &ClusterDrift) -> ObjectReference {
    let manifest = work.spec.workload.manifests.get(ordinal);
    let text = |p: &str| {
        manifest
            .and_then(|m| m.pointer(p))
            .and_then(Value::as_str)
            .map(String::from)
    };
    let paths: Vec<&str> = entry.fields.iter().map(|f| f.path.as_str()).collect();
    ObjectReference {
        api_version: text("/apiVersion"),
        kind: text("/kind"),
        namespace: text("/metadata/namespace"),
        name: text("/metadata/name"),
        field_path: Some(paths.join(",")),
        ..ObjectReference::default()
    }
}

/// A Pull cluster's drift for this round, from its agent's report on the Work.
pub(super) fn pull_drift(
    host: &HostCaches,
    ty: &TypeInfo,
    cluster: &str,
    key: &Key,
    round: &mut DriftRound,
) {
    let Some(l) = host.locate(cluster, key, &ty.work_name(key)) else {
        return;
    };
    let Some(report) = reported_drift(&l.work, l.ordinal) else {
        return;
    };
    round.checked.insert(cluster.to_string());
    if let Some(entry) = report {
        let related = member_ref(&l.work, l.ordinal, entry);
        round
            .reported
            .insert(cluster.to_string(), (entry.clone(), related));
    }
}

/// The reported entries into this round's `found`, each one that is news announced
/// (Event, metric, log) as a Push cluster's drift is.
pub(super) async fn settle_reported(
    shared: &SyncShared,
    fed: &DynamicObject,
    cx: &DriftContext<'_>,
    round: &DriftRound,
    found: &mut BTreeMap<String, ClusterDrift>,
) {
    for (cluster, (entry, related)) in &round.reported {
        let previous = cx.previous.iter().find(|d| &d.cluster == cluster);
        if previous != Some(entry) {
            announce(shared, cx.ty, fed, entry, related.clone()).await;
        }
        found.insert(cluster.clone(), entry.clone());
    }
}

#[cfg(test)]
mod tests {
    use flotilla_api::{
        drift::{DriftField, DriftManager},
        work::{Condition, ManifestCondition, WorkSpec, WorkStatus},
    };
    use flotilla_core::drift::{IGNORE_ANNOTATION, Mode, POLICY_ANNOTATION};

    use super::*;

    fn entry(state: DriftState) -> ClusterDrift {
        ClusterDrift {
            cluster: "member2".into(),
            state: state.as_str().into(),
            fields: vec![DriftField {
                path: "spec.replicas".into(),
                desired: "2".into(),
                live: "4".into(),
            }],
            managers: vec![DriftManager {
                manager: "kubectl-scale".into(),
                operation: "Update".into(),
                time: "t".into(),
            }],
            detected_at: "t".into(),
            ..ClusterDrift::default()
        }
    }

    fn work(generation: i64, observed: i64, drift: Option<ClusterDrift>) -> Work {
        let mut w = Work::new("w", WorkSpec::default());
        w.spec.workload.manifests = vec![serde_json::json!({"kind": "ConfigMap"})];
        w.metadata.generation = Some(generation);
        w.status = Some(WorkStatus {
            drift_policy: None,
            conditions: vec![],
            manifest_conditions: vec![ManifestCondition {
                identifier: flotilla_api::work::ResourceIdentifier {
                    kind: "ConfigMap".into(),
                    ..Default::default()
                },
                conditions: vec![Condition {
                    type_: APPLIED.into(),
                    status: "True".into(),
                    observed_generation: Some(observed),
                    ..Condition::default()
                }],
                drift,
                ..ManifestCondition::default()
            }],
        });
        w
    }

    #[test]
    fn only_a_report_on_the_current_work_is_read() {
        let d = entry(DriftState::Repaired);
        assert_eq!(
            reported_drift(&work(2, 2, Some(d.clone())), 0),
            Some(Some(&d))
        );
        assert_eq!(reported_drift(&work(2, 2, None), 0), Some(None));
        assert_eq!(reported_drift(&work(3, 2, Some(d)), 0), None);
        assert_eq!(
            reported_drift(&Work::new("w", WorkSpec::default()), 0),
            None
        );
    }

    #[test]
    fn a_drift_left_in_place_is_the_clusters_status_and_a_repair_is_not() {
        assert_eq!(drift_outcome(&entry(DriftState::Repaired)), None);
        assert_eq!(
            drift_outcome(&entry(DriftState::Detected)),
            Some(Outcome::Status(
                ClusterReason::Drifted,
                "spec.replicas changed by kubectl-scale (Update)".into()
            ))
        );
        assert!(matches!(
            drift_outcome(&entry(DriftState::Fight)),
            Some(Outcome::Status(ClusterReason::DriftFight, m)) if m.contains("kubectl-scale")
        ));
    }

    #[test]
    fn a_work_carries_only_a_policy_other_than_the_default() {
        assert!(work_policy_annotations(&Policy::default()).is_empty());
        let report = Policy {
            mode: Mode::Report,
            ignore: vec!["/spec/replicas".into()],
        };
        let annotations = work_policy_annotations(&report);
        assert_eq!(annotations[POLICY_ANNOTATION], "Report");
        assert_eq!(annotations[IGNORE_ANNOTATION], "/spec/replicas");
    }
}
