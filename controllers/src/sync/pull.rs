//! Pull clusters in the sync controller. For a cluster in pull mode the "member write"
//! becomes a change of the object's manifest in its bundle Work in the host (namespace
//! `flotilla-cluster-<name>`, one bundle per type and namespace, chunked; written in batches
//! by [`super::bundles`]), and the "observed member object" is that manifest as the host's
//! Work cache holds it, with the member object's status and generation from the agent's
//! report on it. The decisions stay those of [`super::plan`]: a manifest carrying the
//! desired hash is up to date, so a steady state writes nothing. What the agent reports
//! (Applied / Failed with the member's message) becomes the same per-cluster reasons a Push
//! cluster gets. A legacy one-object Work (earlier versions) is still read, and handed to
//! the bundle on the object's next reconcile.
//!
//! This module owns the Work watch of one type and the mapping of the agent's report; it
//! makes no placement or propagation decision.

use std::{ops::ControlFlow, sync::Arc, time::Instant};

use flotilla_api::{
    ClusterReason,
    work::{
        APPLIED, ManifestConfig, RELEASED, WORK_COLLECT_STATUS, WORK_SOURCE_NAME,
        WORK_SOURCE_NAMESPACE, WORK_TYPE_LABEL, Work, cluster_namespace, identify, type_label,
        work_name,
    },
};
use flotilla_core::drift::Policy;
use flotilla_multicluster::unread;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams},
    core::ApiResource,
    runtime::reflector,
};
use serde_json::{Value, json};
use tracing::info;

use super::{
    Key, SyncShared,
    bundle_index::Located,
    bundles::{Bundler, Change, Entry},
    dispatch::{OPERATION_TIMEOUT, record_operation},
    feeds::AllKeys,
    host::HostCaches,
    memory::Availability,
    plan::{Observed, Op, Outcome},
    type_info::TypeInfo,
};
use crate::{
    multicluster::ClusterState,
    watch::{Change as WatchChange, WatchParams, watch_into},
    workqueue::WorkQueue,
};

/// Label selector of one type's Works.
pub(super) fn selector(target: &kube::core::ApiResource) -> String {
    format!(
        "{WORK_TYPE_LABEL}={}",
        type_label(&target.plural, &target.group)
    )
}

/// Host: this type's Works in every cluster namespace. A change is news for the bundler's
/// stand-ins of its own writes (see [`Bundler::observe`]) and requeues the federated
/// objects it is news for (see [`super::bundle_index`]); a completed list rebuilds the
/// index and requeues everything.
pub(super) async fn watch_works(
    host: Client,
    target: ApiResource,
    all: AllKeys,
    writer: reflector::store::Writer<Work>,
    bundler: Arc<Bundler>,
    queue: Arc<WorkQueue<Key>>,
) {
    let api: Api<Work> = Api::all(host);
    let mut params = WatchParams::host("work").from_watch_cache();
    params.label_selector = Some(selector(&target));
    watch_into(api, writer, params, keep, move |c| {
        let (index, store) = (&all.host.bundles, &all.host.works);
        // Before the requeues: their flushes read the cache, not a stale stand-in, and
        // wait while the watch lists.
        bundler.observe(&c);
        match c {
            WatchChange::Object(w) => {
                let ns = w.namespace().unwrap_or_default();
                for key in index.update(store, &ns, &w.name_any()) {
                    queue.add(key);
                }
            }
            // The cache shows a list only at its end, and holds the Works as they were
            // until then: the index, the stand-ins and the reconciles wait for it.
            WatchChange::Listing | WatchChange::Listed(_) => {}
            WatchChange::Synced => {
                index.rebuild(store);
                all.requeue(&queue);
            }
        }
        ControlFlow::Continue(())
    })
    .await;
}

fn keep(_: &mut Work) {}

/// The member object manifest `ordinal` of a Work stands for, as the plan reads it: the
/// manifest (it carries the hash annotation of what was written), with the member object's
/// status and generation from the agent's report when the report is about this manifest.
pub fn observed_of(work: &Work, ordinal: usize) -> Value {
    let mut obj = work
        .spec
        .workload
        .manifests
        .get(ordinal)
        .cloned()
        .unwrap_or_else(|| json!({}));
    // A report on an earlier manifest describes the member object before this one was
    // applied: its status must not pass for the new template's (a rollout's health gate).
    let hash = flotilla_core::member::recorded_hash(&obj).map(str::to_owned);
    let report = work.manifest_report(ordinal).filter(|r| r.hash == hash);
    if let Some(report) = report
        && let Some(map) = obj.as_object_mut()
    {
        if let Some(status) = &report.status_feedback {
            map.insert("status".into(), status.clone());
        }
        if let (Some(g), Some(meta)) = (
            report.generation,
            map.get_mut("metadata").and_then(Value::as_object_mut),
        ) {
            meta.insert("generation".into(), json!(g));
        }
    }
    obj
}

/// What the agent says about manifest `ordinal` of a Work, as a per-cluster outcome: its
/// report on the current generation (Applied, or Failed with its reason and the member's
/// message); a manifest the agent has not looked at since the last write counts as
/// propagated, like a Push write the member's API server accepted.
pub fn applied_outcome(work: &Work, ordinal: usize) -> Outcome {
    let generation = work.metadata.generation;
    let condition = work
        .manifest_report(ordinal)
        .and_then(|m| m.conditions.iter().find(|c| c.type_ == APPLIED));
    match condition {
        Some(c) if c.observed_generation == generation && c.status != "True" => Outcome::Status(
            c.reason.parse().unwrap_or(ClusterReason::CreationFailed),
            c.message.clone(),
        ),
        _ => super::pull_drift::reported_drift(work, ordinal)
            .flatten()
            .and_then(super::pull_drift::drift_outcome)
            .unwrap_or(Outcome::Ok),
    }
}

/// Whether the agent released the member object of an orphaned manifest (reported on the
/// Work's current generation).
fn released(work: &Work, ordinal: usize) -> bool {
    work.manifest_report(ordinal)
        .and_then(|m| m.conditions.iter().find(|c| c.type_ == APPLIED))
        .is_some_and(|c| c.reason == RELEASED && c.observed_generation == work.metadata.generation)
}

/// One federated object's entry in its Pull cluster's bundle.
pub fn entry(key: &Key, object: &Value, policy: &Policy, orphan: bool) -> Entry {
    Entry {
        manifest: object.clone(),
        config: ManifestConfig {
            identifier: identify(0, object),
            source_namespace: key.0.clone(),
            source_name: key.1.clone(),
            drift: super::pull_drift::work_policy_annotations(policy),
            orphan,
            adopt_label: None,
        },
    }
}

/// The legacy one-object Work Flotilla applied for one federated object in one Pull
/// cluster (earlier versions; kept to read and test them).
pub fn work_body(
    target: &kube::core::ApiResource,
    cluster: &str,
    key: &Key,
    object: &Value,
    collect_status: bool,
    policy: &Policy,
) -> Value {
    let mut annotations = json!({
        WORK_SOURCE_NAME: key.1,
        WORK_COLLECT_STATUS: collect_status.to_string(),
    });
    for (k, v) in super::pull_drift::work_policy_annotations(policy) {
        annotations[k] = json!(v);
    }
    if let Some(ns) = &key.0 {
        annotations[WORK_SOURCE_NAMESPACE] = json!(ns);
    }
    json!({
        "apiVersion": "multicluster.x-k8s.io/v1alpha1",
        "kind": "Work",
        "metadata": {
            "name": work_name(&target.plural, &target.group, key.0.as_deref(), &key.1),
            "namespace": cluster_namespace(cluster),
            "labels": {WORK_TYPE_LABEL: type_label(&target.plural, &target.group)},
            "annotations": annotations,
        },
        "spec": {"workload": {"manifests": [object]}},
    })
}

pub use flotilla_core::member::ORPHAN_LABEL;

/// What a Pull cluster holds for `key`: its Work, from the host's cache (its availability
/// recorded in `availability`).
pub(super) fn observe(
    host: &HostCaches,
    ty: &TypeInfo,
    availability: &Availability,
    cluster: &ClusterState,
    key: &Key,
) -> Observed {
    let synced = cluster.ready && host.works_synced();
    availability.record(&cluster.name, synced);
    if !cluster.ready {
        return Observed::NotReady;
    }
    if !synced {
        return Observed::NotSynced;
    }
    match host.locate(&cluster.name, key, &ty.work_name(key)) {
        Some(l) => Observed::Present(observed_of(&l.work, l.ordinal)),
        None => Observed::Absent,
    }
}

/// What the Work writes of one type read and write: the host client, the cluster set and
/// the operation metrics (of `shared`), the host's Work cache, the type, the bundler.
#[derive(Clone, Copy)]
pub(super) struct Works<'a> {
    pub shared: &'a SyncShared,
    pub host: &'a HostCaches,
    pub ty: &'a TypeInfo,
    pub bundler: &'a Bundler,
    /// The type's canary Deployments in Pull clusters, which leave with the object.
    pub canaries: Option<&'a super::rollout::PullCanaries>,
}

impl Works<'_> {
    fn locate(&self, cluster: &str, key: &Key) -> Option<Located> {
        self.host.locate(cluster, key, &self.ty.work_name(key))
    }

    /// Carries out the operation decided for one Pull cluster.
    pub async fn run(
        &self,
        cluster: &str,
        selected: bool,
        op: Op,
        key: &Key,
        object: Option<Value>,
        policy: &Policy,
    ) -> Outcome {
        match (op, object) {
            (Op::Nothing, Some(object)) if selected => {
                let Some(l) = self.locate(cluster, key) else {
                    return Outcome::Ok;
                };
                let outcome = applied_outcome(&l.work, l.ordinal);
                let current = if l.is_bundle() {
                    l.work.manifest_config(l.ordinal).is_some_and(|c| {
                        !c.orphan && c.drift == super::pull_drift::work_policy_annotations(policy)
                    })
                } else {
                    false
                };
                if !current {
                    // A legacy Work is handed to the bundle (deleted once the bundle is
                    // written); a changed drift policy is the agent's to read.
                    self.upsert(cluster, key, &object, policy, &l);
                }
                outcome
            }
            (Op::Nothing, _) if selected => self
                .locate(cluster, key)
                .map(|l| applied_outcome(&l.work, l.ordinal))
                .unwrap_or(Outcome::Ok),
            (Op::Nothing | Op::Wait, _) | (Op::Create | Op::Update, None) => Outcome::Gone,
            (Op::Report(r, m), _) => Outcome::Status(r, m),
            (op @ (Op::Create | Op::Update), Some(object)) => {
                let found = self.locate(cluster, key);
                match found {
                    Some(l) => self.upsert(cluster, key, &object, policy, &l),
                    None => {
                        let change = Change::Upsert(Box::new(entry(key, &object, policy, false)));
                        self.bundler.change(cluster, key, change, None);
                    }
                }
                match self.bundler.failure(cluster, key) {
                    Some(message) if op == Op::Create => {
                        Outcome::Status(ClusterReason::CreationFailed, message)
                    }
                    Some(message) => Outcome::Status(ClusterReason::UpdateFailed, message),
                    None => Outcome::Ok,
                }
            }
            (Op::Delete, _) => self.delete(cluster, key, false).await,
            (Op::Unlabel, _) => self.delete(cluster, key, true).await,
        }
    }

    /// Queues the object's manifest for its bundle; a legacy Work that held it is deleted
    /// once the bundle is written.
    fn upsert(&self, cluster: &str, key: &Key, object: &Value, policy: &Policy, l: &Located) {
        let retire = (!l.is_bundle()).then(|| l.work.name_any());
        let change = Change::Upsert(Box::new(entry(key, object, policy, false)));
        self.bundler.change(cluster, key, change, retire);
    }

    /// Removes the object from its cluster: its manifest leaves the bundle (the agent then
    /// prunes it). With `orphan` (or a manifest already being orphaned) the manifest is
    /// first marked so, the agent releases the object, and only then does it leave. A
    /// legacy Work is deleted (labelled first for orphaning).
    pub async fn delete(&self, cluster: &str, key: &Key, orphan: bool) -> Outcome {
        if let Some(canaries) = self.canaries {
            canaries.forget(cluster, key).await;
        }
        let Some(l) = self.locate(cluster, key) else {
            self.bundler.cancel(cluster, key);
            return Outcome::Gone;
        };
        if !l.is_bundle() {
            return self.delete_legacy(cluster, key, orphan).await;
        }
        let config = l.work.manifest_config(l.ordinal);
        let orphaning = orphan || config.is_some_and(|c| c.orphan);
        let change = match config {
            Some(c) if orphaning && !(c.orphan && released(&l.work, l.ordinal)) => {
                let manifest = l.work.spec.workload.manifests.get(l.ordinal);
                let mut config = c.clone();
                config.orphan = true;
                Change::Upsert(Box::new(Entry {
                    manifest: manifest.cloned().unwrap_or(Value::Null),
                    config,
                }))
            }
            _ => Change::Remove,
        };
        self.bundler.change(cluster, key, change, None);
        Outcome::Removing
    }

    /// Deletes a legacy Work; the agent then prunes the member object, or only unlabels it
    /// when `orphan` (the Work is labelled first, so the deleted Work the agent sees says
    /// so).
    async fn delete_legacy(&self, cluster: &str, key: &Key, orphan: bool) -> Outcome {
        let started = Instant::now();
        let api: Api<Work> = Api::namespaced(self.shared.host.clone(), &cluster_namespace(cluster));
        let name = self.ty.work_name(key);
        let result = async {
            if orphan {
                let patch = json!({"metadata": {"labels": {ORPHAN_LABEL: "true"}}});
                unread::patch(&api, &name, &PatchParams::default(), &Patch::Merge(&patch)).await?;
            }
            unread::delete(&api, &name, &DeleteParams::default()).await
        };
        let outcome = match tokio::time::timeout(OPERATION_TIMEOUT, result).await {
            Ok(Ok(_)) => {
                info!(%cluster, work = %name, orphan, "deleted the Work; the agent removes the member object");
                Outcome::Removing
            }
            Ok(Err(kube::Error::Api(s))) if s.code == 404 => Outcome::Gone,
            Ok(Err(e)) => Outcome::Status(ClusterReason::DeletionFailed, message(&e)),
            Err(_) => Outcome::Status(
                ClusterReason::DeletionTimedOut,
                format!("deleting Work {name} timed out"),
            ),
        };
        record_operation(
            self.shared,
            cluster,
            "work-delete",
            &outcome,
            started.elapsed(),
        );
        outcome
    }

    /// Removes from every Pull cluster the manifest of a federated object that no longer
    /// exists; `false` when one removal failed.
    pub async fn clean_strays(&self, key: &Key, keep: bool) -> bool {
        let clusters: Vec<String> = self
            .shared
            .clusters
            .snapshot()
            .into_iter()
            .filter(|c| c.pull && self.locate(&c.name, key).is_some())
            .map(|c| c.name)
            .collect();
        let mut ok = true;
        for cluster in clusters {
            let outcome = self.delete(&cluster, key, keep).await;
            ok &= !matches!(outcome, Outcome::Status(..));
        }
        ok
    }
}

fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::work::{
        Condition as ProfileCondition, ManifestCondition, WorkSpec, WorkStatus, WorkloadTemplate,
    };

    fn work(generation: i64, report: Option<(&str, &str, i64)>) -> Work {
        let mut w = Work::new(
            "w",
            WorkSpec {
                workload: WorkloadTemplate {
                    manifests: vec![json!({"metadata": {"name": "a"}, "spec": {"replicas": 2}})],
                },
                manifest_configs: vec![],
            },
        );
        w.metadata.generation = Some(generation);
        w.status = report.map(|(status, reason, observed)| WorkStatus {
            drift_policy: None,
            conditions: vec![],
            manifest_conditions: vec![ManifestCondition {
                identifier: flotilla_api::work::ResourceIdentifier {
                    name: "a".into(),
                    ..Default::default()
                },
                conditions: vec![ProfileCondition {
                    type_: APPLIED.into(),
                    status: status.into(),
                    observed_generation: Some(observed),
                    reason: reason.into(),
                    message: "the member said no".into(),
                    ..Default::default()
                }],
                generation: Some(7),
                status_feedback: Some(json!({"readyReplicas": 2})),
                ..Default::default()
            }],
        });
        w
    }

    #[test]
    fn a_failure_reported_for_the_current_generation_is_the_clusters_status() {
        assert_eq!(
            applied_outcome(&work(3, Some(("False", "UpdateFailed", 3))), 0),
            Outcome::Status(ClusterReason::UpdateFailed, "the member said no".into())
        );
        assert_eq!(
            applied_outcome(&work(3, Some(("False", "SomethingElse", 3))), 0),
            Outcome::Status(ClusterReason::CreationFailed, "the member said no".into())
        );
    }

    #[test]
    fn an_applied_or_not_yet_seen_work_is_propagated() {
        assert_eq!(
            applied_outcome(&work(3, Some(("True", "Applied", 3))), 0),
            Outcome::Ok
        );
        assert_eq!(
            applied_outcome(&work(4, Some(("False", "UpdateFailed", 3))), 0),
            Outcome::Ok
        );
        assert_eq!(applied_outcome(&work(1, None), 0), Outcome::Ok);
    }

    #[test]
    fn the_observed_object_is_the_manifest_with_the_reported_status_and_generation() {
        let o = observed_of(&work(3, Some(("True", "Applied", 3))), 0);
        assert_eq!(o["spec"]["replicas"], 2);
        assert_eq!(o["status"]["readyReplicas"], 2);
        assert_eq!(o["metadata"]["generation"], 7);
        assert_eq!(observed_of(&work(3, None), 0).get("status"), None);
        // The report of an earlier manifest is not this one's status.
        let mut w = work(3, Some(("True", "Applied", 3)));
        w.spec.workload.manifests[0]["metadata"]["annotations"] =
            json!({flotilla_core::member::HASH_ANNOTATION: "new"});
        let o = observed_of(&w, 0);
        assert_eq!(o.get("status"), None);
        assert_eq!(o["metadata"].get("generation"), None);
        if let Some(s) = w.status.as_mut() {
            s.manifest_conditions[0].hash = Some("new".into());
        }
        assert_eq!(observed_of(&w, 0)["status"]["readyReplicas"], 2);
    }

    #[test]
    fn a_work_body_names_its_source_and_type() {
        let ar = kube::core::ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&());
        let key = (Some("demo".to_string()), "web".to_string());
        let object = json!({"kind": "Deployment"});
        let body = work_body(&ar, "m1", &key, &object, true, &Policy::default());
        assert_eq!(body["metadata"]["namespace"], "flotilla-cluster-m1");
        assert_eq!(
            body["metadata"]["labels"][WORK_TYPE_LABEL],
            "deployments.apps"
        );
        assert_eq!(
            body["metadata"]["annotations"][WORK_SOURCE_NAMESPACE],
            "demo"
        );
        assert_eq!(body["metadata"]["annotations"][WORK_COLLECT_STATUS], "true");
        assert_eq!(
            body["spec"]["workload"]["manifests"][0]["kind"],
            "Deployment"
        );
        let w: Work = serde_json::from_value(body).expect("a Work");
        assert_eq!(super::super::host::source_key(&w), Some(key));
    }
}
