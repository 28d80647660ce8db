//! Multi-Cluster Services from a Pull member: the agent watches the member's
//! ServiceExports, Services and Kubernetes' own EndpointSlices and keeps one
//! ServiceExportReport per export in its inventory namespace of the host (written with its
//! own host credential: the host never reads the member), deleting the report of an export
//! that is gone (only reports it wrote: labelled `app.kubernetes.io/managed-by:
//! flotilla-agent`). The control plane answers in each report's status; the agent copies those
//! conditions onto the export in the member. Imports travel the other way as ordinary Works
//! (applied by [`crate::work`]), so this module writes no ServiceImport or EndpointSlice.
//! Decisions are [`plan`] (pure); a report or a status is written only when it differs.

use std::{collections::BTreeMap, sync::Arc, time::Duration};

use flotilla_api::{
    mcs::{K8S_SERVICE_NAME_LABEL, ServiceExport},
    mcs_report::{
        REPORTER, REPORTER_LABEL, ServiceExportReport, ServiceExportReportSpec, report_name,
        report_spec, same_conditions,
    },
    work::AGENT_FIELD_MANAGER,
};
use flotilla_multicluster::{
    gate::store_ready,
    runner::{Action, PassRunner, Retry},
    watch::{FailureLog, WatchParams, notifying_store_with},
};
use k8s_openapi::serde::{Serialize, de::DeserializeOwned};
use k8s_openapi::{api::core::v1::Service, apimachinery::pkg::apis::meta::v1::Condition};
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams},
    runtime::{reflector::Store, watcher},
};
use serde_json::json;
use tokio::sync::Notify;
use tracing::{debug, warn};

/// Everything compared again this often without a change (a safety net behind the watches).
const RECHECK: Duration = Duration::from_secs(60);
/// Delay before a pass with a failed write is tried again.
const RETRY: Duration = Duration::from_secs(2);
/// Changes this close together are handled by one pass.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// What one pass writes.
#[derive(Debug, Default, PartialEq)]
pub struct ReportPlan {
    /// Reports to create or update (server-side apply of the spec).
    pub apply: Vec<(String, ServiceExportReportSpec)>,
    /// Reports whose export is gone.
    pub delete: Vec<String>,
    /// Exports (namespace, name) whose conditions should become the report's answer.
    pub export_status: Vec<(String, String, Vec<Condition>)>,
}

fn export_conditions(e: &DynamicObject) -> Vec<Condition> {
    e.data
        .get("status")
        .and_then(|s| s.get("conditions"))
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default()
}

/// The writes that make the host's reports match the member's exports, and the exports'
/// conditions match the host's answers. An answer is copied only when it is about the
/// export's current generation (so a changed export never shows the old answer as new).
pub fn plan(
    exports: &[Arc<DynamicObject>],
    services: &[Arc<Service>],
    slices: &[Arc<DynamicObject>],
    reports: &[Arc<ServiceExportReport>],
) -> ReportPlan {
    let reports: BTreeMap<String, &ServiceExportReport> =
        reports.iter().map(|r| (r.name_any(), &**r)).collect();
    let mut out = ReportPlan::default();
    let mut wanted = std::collections::BTreeSet::new();
    for e in exports {
        let (namespace, name) = (e.namespace().unwrap_or_default(), e.name_any());
        let service = services
            .iter()
            .find(|s| s.namespace().as_deref() == Some(&namespace) && s.name_any() == name);
        let own: Vec<&DynamicObject> = slices
            .iter()
            .filter(|s| {
                s.namespace().as_deref() == Some(&namespace)
                    && s.labels().get(K8S_SERVICE_NAME_LABEL) == Some(&name)
            })
            .map(|s| &**s)
            .collect();
        let spec = report_spec(e, service.map(|s| &**s), &own);
        let key = report_name(&namespace, &name);
        wanted.insert(key.clone());
        let existing = reports.get(&key);
        if existing.map(|r| &r.spec) != Some(&spec) {
            out.apply.push((key, spec));
            continue;
        }
        let answer = existing
            .and_then(|r| r.status.as_ref())
            .map(|s| s.conditions.clone())
            .unwrap_or_default();
        let current_answer = answer
            .iter()
            .all(|c| c.observed_generation == e.metadata.generation);
        if !answer.is_empty() && current_answer && !same_conditions(&answer, &export_conditions(e))
        {
            out.export_status.push((namespace, name, answer));
        }
    }
    out.delete = reports
        .keys()
        .filter(|k| !wanted.contains(*k))
        .cloned()
        .collect();
    out
}

/// The member and host caches one reporter reads.
struct Caches {
    exports: Store<DynamicObject>,
    services: Store<Service>,
    slices: Store<DynamicObject>,
    reports: Store<ServiceExportReport>,
}

impl Caches {
    /// Waits until every cache is complete (never, while the member lacks the MCS CRDs:
    /// then there is nothing to report).
    async fn ready(&self) -> bool {
        store_ready(&self.exports).await
            && store_ready(&self.services).await
            && store_ready(&self.slices).await
            && store_ready(&self.reports).await
    }
}

fn spawn_watch<K>(
    api: Api<K>,
    params: WatchParams,
    changed: &Arc<Notify>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Store<K>
where
    K: Resource + Clone + DeserializeOwned + std::fmt::Debug + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default + Send + Sync,
{
    let (store, task) = notifying_store_with(api, K::DynamicType::default(), params, changed);
    tasks.push(task);
    store
}

/// The EndpointSlice version the member prefers (discovered), when the member can take
/// imports: it serves ServiceImports (the MCS CRDs are installed) and EndpointSlices. The
/// host sends a Pull member import Works only once its agent published this, so a member
/// without the MCS CRDs gets none (rather than Works that can never apply).
pub async fn slice_version(member: &Client) -> Option<String> {
    let groups = member.list_api_groups().await.ok()?;
    let serves_imports = match groups.groups.iter().find(|g| g.name == MCS_GROUP) {
        Some(group) => {
            let version = group.preferred_version.as_ref()?.group_version.clone();
            let resources = member.list_api_group_resources(&version).await.ok()?;
            resources
                .resources
                .iter()
                .any(|r| r.name == "serviceimports")
        }
        None => false,
    };
    if !serves_imports {
        return None;
    }
    let group = groups
        .groups
        .into_iter()
        .find(|g| g.name == "discovery.k8s.io")?;
    group
        .preferred_version
        .map(|v| v.version)
        .or_else(|| group.versions.first().map(|v| v.version.clone()))
}

/// The API group of ServiceImports and ServiceExports.
const MCS_GROUP: &str = "multicluster.x-k8s.io";

/// A watch of a dynamic kind into a store whose every change wakes `changed`.
fn spawn_dynamic(
    api: Api<DynamicObject>,
    resource: &ApiResource,
    params: WatchParams,
    changed: &Arc<Notify>,
    tasks: &mut Vec<tokio::task::JoinHandle<()>>,
) -> Store<DynamicObject> {
    let (store, task) = notifying_store_with(api, resource.clone(), params, changed);
    tasks.push(task);
    store
}

impl Caches {
    /// Starts the member's watches (EndpointSlices at `version`) and the host's watch of
    /// the agent's own reports in `namespace`.
    fn start(
        host: &Client,
        member: &Client,
        namespace: &str,
        cluster: &str,
        version: &str,
        changed: &Arc<Notify>,
        tasks: &mut Vec<tokio::task::JoinHandle<()>>,
    ) -> Caches {
        let slice_resource = ApiResource {
            group: "discovery.k8s.io".into(),
            version: version.into(),
            api_version: format!("discovery.k8s.io/{version}"),
            kind: "EndpointSlice".into(),
            plural: "endpointslices".into(),
        };
        let member_params = |selector: Option<String>| WatchParams {
            label_selector: selector,
            ..WatchParams::member(cluster.to_owned(), watcher::Config::default())
        };
        let export_resource = ApiResource::erase::<ServiceExport>(&());
        // A member without the MCS CRDs is normal (nothing to report): its failures are quiet.
        let export_params = WatchParams {
            failures: FailureLog::Debug,
            ..member_params(None)
        };
        let exports = Api::all_with(member.clone(), &export_resource);
        let slices = Api::all_with(member.clone(), &slice_resource);
        let slice_params = member_params(Some(K8S_SERVICE_NAME_LABEL.to_owned()));
        // Only its own reports: one another writer put there is neither read nor deleted.
        let report_params = WatchParams {
            label_selector: Some(format!("{REPORTER_LABEL}={REPORTER}")),
            ..WatchParams::host("service export report")
        };
        Caches {
            exports: spawn_dynamic(exports, &export_resource, export_params, changed, tasks),
            services: spawn_watch(
                Api::all(member.clone()),
                member_params(None),
                changed,
                tasks,
            ),
            slices: spawn_dynamic(slices, &slice_resource, slice_params, changed, tasks),
            reports: spawn_watch(
                Api::namespaced(host.clone(), namespace),
                report_params,
                changed,
                tasks,
            ),
        }
    }
}

/// Reports the member's exports into `namespace` of the host until aborted.
pub async fn report(host: Client, member: Client, namespace: String, cluster: String) {
    let version = loop {
        match slice_version(&member).await {
            Some(v) => break v,
            None => tokio::time::sleep(RETRY).await,
        }
    };
    let changed = Arc::new(Notify::new());
    let mut tasks = Vec::new();
    let caches = Caches::start(
        &host, &member, &namespace, &cluster, &version, &changed, &mut tasks,
    );
    let _guard = AbortOnDrop(tasks);
    let export_resource = ApiResource::erase::<ServiceExport>(&());
    let reports: Api<ServiceExportReport> = Api::namespaced(host, &namespace);
    let mut runner = PassRunner::new("agent-mcs", changed)
        .period(RECHECK)
        .retry(Retry::Fixed(RETRY))
        .debounce(DEBOUNCE);
    // A report written from part of the member's state could delete what it should keep.
    if !caches.ready().await {
        return;
    }
    while runner.next().await.is_some() {
        let p = plan(
            &caches.exports.state(),
            &caches.services.state(),
            &caches.slices.state(),
            &caches.reports.state(),
        );
        let ok = execute(&p, &reports, &member, &export_resource).await;
        runner.finish(if ok {
            Action::AwaitChange
        } else {
            Action::backoff()
        });
    }
}

struct AbortOnDrop(Vec<tokio::task::JoinHandle<()>>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        for t in &self.0 {
            t.abort();
        }
    }
}

fn report_body(name: &str, spec: &impl Serialize) -> serde_json::Value {
    json!({
        "apiVersion": ServiceExportReport::api_version(&()),
        "kind": ServiceExportReport::kind(&()),
        "metadata": {"name": name, "labels": {REPORTER_LABEL: REPORTER}},
        "spec": spec,
    })
}

/// Writes a plan; returns whether every write worked (failures are logged and retried).
async fn execute(
    p: &ReportPlan,
    reports: &Api<ServiceExportReport>,
    member: &Client,
    export_resource: &ApiResource,
) -> bool {
    let mut ok = true;
    let pp = PatchParams::apply(AGENT_FIELD_MANAGER).force();
    for (name, spec) in &p.apply {
        let body = report_body(name, spec);
        if let Err(e) = reports.patch(name, &pp, &Patch::Apply(&body)).await {
            warn!(report = %name, error = %e, "writing a ServiceExportReport failed; retrying");
            ok = false;
        } else {
            debug!(report = %name, "ServiceExportReport written");
        }
    }
    for name in &p.delete {
        match reports.delete(name, &DeleteParams::default()).await {
            Ok(_) => debug!(report = %name, "ServiceExportReport deleted"),
            Err(kube::Error::Api(s)) if s.code == 404 => {}
            Err(e) => {
                warn!(report = %name, error = %e, "deleting a ServiceExportReport failed; retrying");
                ok = false;
            }
        }
    }
    let status_pp = PatchParams {
        field_manager: Some(AGENT_FIELD_MANAGER.into()),
        ..PatchParams::default()
    };
    for (namespace, name, conditions) in &p.export_status {
        let api = Api::<DynamicObject>::namespaced_with(member.clone(), namespace, export_resource);
        let body = json!({"status": {"conditions": conditions}});
        if let Err(e) = api
            .patch_status(name, &status_pp, &Patch::Merge(&body))
            .await
        {
            warn!(%namespace, %name, error = %e, "writing a ServiceExport's conditions failed; retrying");
            ok = false;
        }
    }
    ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::mcs_report::ServiceExportReportStatus;

    fn export(generation: i64, conditions: serde_json::Value) -> Arc<DynamicObject> {
        Arc::new(
            serde_json::from_value(json!({
                "apiVersion": "multicluster.x-k8s.io/v1beta1", "kind": "ServiceExport",
                "metadata": {"name": "web", "namespace": "demo", "generation": generation,
                             "creationTimestamp": "2026-01-01T00:00:00Z"},
                "status": {"conditions": conditions},
            }))
            .expect("an export"),
        )
    }

    fn condition(status: &str, generation: i64) -> Condition {
        serde_json::from_value(json!({
            "type": "Valid", "status": status, "reason": "Valid", "message": "",
            "observedGeneration": generation, "lastTransitionTime": "2026-01-01T00:00:00Z",
        }))
        .expect("a condition")
    }

    fn report_of(e: &DynamicObject, answer: Vec<Condition>) -> Arc<ServiceExportReport> {
        let mut r = ServiceExportReport::new("demo.web", report_spec(e, None, &[]));
        r.status = Some(ServiceExportReportStatus { conditions: answer });
        Arc::new(r)
    }

    #[test]
    fn a_new_export_is_reported_and_a_report_without_export_is_deleted() {
        let e = export(1, json!([]));
        let p = plan(&[e], &[], &[], &[]);
        assert_eq!(p.apply.len(), 1);
        assert_eq!(p.apply[0].0, "demo.web");
        let gone = report_of(&export(1, json!([])), vec![]);
        let p = plan(&[], &[], &[], &[gone]);
        assert_eq!(p.delete, ["demo.web"]);
        assert!(p.apply.is_empty());
    }

    #[test]
    fn the_hosts_answer_is_copied_once_and_only_for_the_current_generation() {
        let e = export(2, json!([]));
        let p = plan(
            std::slice::from_ref(&e),
            &[],
            &[],
            &[report_of(&e, vec![condition("True", 2)])],
        );
        assert_eq!(p.export_status.len(), 1);
        assert!(p.apply.is_empty() && p.delete.is_empty());
        // Already carried: nothing to write.
        let done = export(2, json!([condition("True", 2)]));
        let p = plan(
            std::slice::from_ref(&done),
            &[],
            &[],
            &[report_of(&done, vec![condition("True", 2)])],
        );
        assert_eq!(p, ReportPlan::default());
        // An answer about an older generation waits for the new one.
        let p = plan(
            std::slice::from_ref(&e),
            &[],
            &[],
            &[report_of(&e, vec![condition("True", 1)])],
        );
        assert!(p.export_status.is_empty());
    }
}
