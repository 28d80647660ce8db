//! Multi-Cluster Services for Pull members, the I/O: host caches of the ServiceExportReports
//! the agents write (every cluster namespace), of the MCS Works in those namespaces and of
//! the agents' Leases (the EndpointSlice version each member serves); delivering a plan's
//! imports to each Pull member as Works; and answering each report with its export's
//! conditions (or why the report was not read) in its status. The host reads no Pull member:
//! everything comes from its inventory namespace. Decisions are in [`super::pull_plan`].

use std::{collections::BTreeMap, ops::ControlFlow, sync::Arc};

use flotilla_api::{
    FIELD_MANAGER,
    mcs::condition,
    mcs_report::{MCS_WORK_LABEL, SLICE_VERSION_ANNOTATION, ServiceExportReport},
    work::{AGENT_LEASE, CLUSTER_NAMESPACE_PREFIX, Work, cluster_namespace},
};
use futures::FutureExt;
use k8s_openapi::{
    api::coordination::v1::Lease,
    apimachinery::pkg::apis::meta::v1::{Condition, Time},
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams},
    runtime::reflector::{Store, store::Writer},
};
use serde_json::json;
use tokio::{sync::Notify, task::JoinHandle};
use tracing::{debug, warn};

use crate::watch::{WatchParams, notifying_store};
use flotilla_multicluster::watch::watch_into;

use super::{
    apply::{Writes, count},
    conditions::export_conditions,
    objects::HASH_ANNOTATION,
    plan::{Availability, MemberView, Plan, ServiceKey, WantedCondition},
    pull_plan::{self, Read, Rejection},
    slice::SliceVersion,
};

/// The host caches of Pull members' MCS state.
pub struct PullStores {
    client: Client,
    reports: Store<DynamicObject>,
    works: Store<Work>,
    leases: Store<Lease>,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for PullStores {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

fn ready<K: kube::Resource + Clone>(s: &Store<K>) -> bool
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    matches!(s.wait_until_ready().now_or_never(), Some(Ok(())))
}

/// The Pull cluster whose inventory `namespace` is, by name.
fn cluster_of(namespace: &str) -> Option<&str> {
    namespace.strip_prefix(CLUSTER_NAMESPACE_PREFIX)
}

impl PullStores {
    /// Starts the caches; every change wakes `changed`.
    pub fn start(client: Client, changed: &Arc<Notify>) -> Self {
        let ar = ApiResource::erase::<ServiceExportReport>(&());
        let writer = Writer::<DynamicObject>::new(ar.clone());
        let reports = writer.as_reader();
        let notify = changed.clone();
        let reports_task = tokio::spawn(watch_into(
            Api::all_with(client.clone(), &ar),
            writer,
            WatchParams::host("service export report"),
            |_| {},
            move |_| {
                notify.notify_one();
                ControlFlow::Continue(())
            },
        ));
        let params = WatchParams {
            label_selector: Some(MCS_WORK_LABEL.to_owned()),
            ..WatchParams::host("MCS work")
        };
        let (works, works_task) =
            notifying_store::<Work>(Api::all(client.clone()), params, changed);
        let mut params = WatchParams::host("agent lease");
        params.config = params
            .config
            .fields(&format!("metadata.name={AGENT_LEASE}"));
        let writer = Writer::<Lease>::default();
        let leases = writer.as_reader();
        let notify = changed.clone();
        // Every renewal changes a Lease; only a changed EndpointSlice version wakes a pass.
        let mut versions: BTreeMap<String, Option<String>> = BTreeMap::new();
        let leases_task = tokio::spawn(watch_into(
            Api::all(client.clone()),
            writer,
            params,
            |_| {},
            move |change| {
                if let Some(l) = change.object() {
                    let version = l.annotations().get(SLICE_VERSION_ANNOTATION).cloned();
                    let ns = l.namespace().unwrap_or_default();
                    if versions.get(&ns) != Some(&version) {
                        versions.insert(ns, version);
                        notify.notify_one();
                    }
                }
                ControlFlow::Continue(())
            },
        ));
        PullStores {
            client,
            reports,
            works,
            leases,
            tasks: vec![reports_task, works_task, leases_task],
        }
    }

    /// Whether every cache is complete.
    pub fn synced(&self) -> bool {
        ready(&self.reports) && ready(&self.works) && ready(&self.leases)
    }

    /// The EndpointSlice version a Pull member serves, as its agent published it.
    pub fn slice_version(&self, cluster: &str) -> Option<SliceVersion> {
        let ns = cluster_namespace(cluster);
        let lease = self
            .leases
            .state()
            .into_iter()
            .find(|l| l.namespace().as_deref() == Some(&ns))?;
        let v = lease.annotations().get(SLICE_VERSION_ANNOTATION)?.clone();
        SliceVersion::preferred([v.as_str()])
    }

    /// Every report, read, by the cluster it belongs to (`None`: a namespace of no cluster).
    fn reports(&self) -> Vec<(Option<String>, Arc<DynamicObject>, Read)> {
        self.reports
            .state()
            .into_iter()
            .map(|o| {
                let cluster = o
                    .namespace()
                    .as_deref()
                    .and_then(cluster_of)
                    .map(str::to_owned);
                let read = pull_plan::read_report(&o);
                (cluster, o, read)
            })
            .collect()
    }

    /// A Pull member's view from its readable reports.
    pub fn view(&self, cluster: &str, availability: Availability) -> MemberView {
        let reports: Vec<ServiceExportReport> = self
            .reports()
            .into_iter()
            .filter(|(c, _, _)| c.as_deref() == Some(cluster))
            .filter_map(|(_, _, r)| r.ok())
            .collect();
        let refs: Vec<&ServiceExportReport> = reports.iter().collect();
        pull_plan::report_view(cluster, availability, &refs)
    }

    /// Brings an available Pull member's MCS Works to the plan; returns whether every
    /// write worked.
    pub async fn deliver(&self, plan: &Plan, cluster: &str, writes: &Writes) -> bool {
        let Some(version) = self.slice_version(cluster) else {
            return true;
        };
        let ns = cluster_namespace(cluster);
        let held: BTreeMap<String, Option<String>> = self
            .works
            .state()
            .iter()
            .filter(|w| w.namespace().as_deref() == Some(&ns))
            .map(|w| (w.name_any(), w.annotations().get(HASH_ANNOTATION).cloned()))
            .collect();
        let ops = pull_plan::work_ops(pull_plan::member_works(plan, cluster, version), &held);
        let api: Api<Work> = Api::namespaced(self.client.clone(), &ns);
        let mut ok = true;
        let pp = PatchParams::apply(FIELD_MANAGER).force();
        for (name, body) in &ops.apply {
            let done = api.patch(name, &pp, &Patch::Apply(body)).await;
            count(writes, "apply_work", done.is_ok());
            if let Err(e) = done {
                warn!(%cluster, work = %name, error = %e, "writing an MCS Work failed");
                ok = false;
            }
        }
        for name in &ops.delete {
            let done = match api.delete(name, &DeleteParams::default()).await {
                Err(kube::Error::Api(e)) if e.code == 404 => Ok(()),
                other => other.map(|_| ()),
            };
            count(writes, "delete_work", done.is_ok());
            if let Err(e) = done {
                warn!(%cluster, work = %name, error = %e, "deleting an MCS Work failed");
                ok = false;
            }
        }
        debug!(%cluster, applied = ops.apply.len(), deleted = ops.delete.len(), "MCS Works");
        ok
    }

    /// Answers every report: the export's conditions from the plan for an available Pull
    /// member, or why the report was not read. Returns whether every write worked.
    pub async fn answer(
        &self,
        plan: &Plan,
        pull: &BTreeMap<String, Availability>,
        writes: &Writes,
    ) -> bool {
        let now = plan
            .now
            .clone()
            .unwrap_or(Time(k8s_openapi::jiff::Timestamp::now()));
        let mut ok = true;
        for (cluster, object, read) in self.reports() {
            let known = cluster.as_ref().and_then(|c| pull.get(c));
            let (wanted, generation) = match (&read, known) {
                (_, None) => {
                    let r = Rejection::UnknownCluster(format!(
                        "namespace {} is the inventory of no Pull cluster",
                        object.namespace().unwrap_or_default()
                    ));
                    (rejected(&r), None)
                }
                (Err(r), Some(_)) => (rejected(r), None),
                (Ok(report), Some(Availability::Available)) => {
                    let key = ServiceKey::new(&report.spec.namespace, &report.spec.name);
                    let Some(v) = plan
                        .exports
                        .iter()
                        .find(|v| Some(&v.cluster) == cluster.as_ref() && v.key == key)
                    else {
                        continue;
                    };
                    (v.conditions.clone(), report.spec.generation)
                }
                // A member not known or down: its last answer stands.
                (Ok(_), Some(_)) => continue,
            };
            let existing: Vec<Condition> = object
                .data
                .get("status")
                .and_then(|s| s.get("conditions"))
                .and_then(|c| serde_json::from_value(c.clone()).ok())
                .unwrap_or_default();
            let Some(next) = export_conditions(&existing, &wanted, generation, &now) else {
                continue;
            };
            ok &= self.write_answer(&object, &next, writes).await;
        }
        ok
    }

    async fn write_answer(&self, report: &DynamicObject, c: &[Condition], writes: &Writes) -> bool {
        let ar = ApiResource::erase::<ServiceExportReport>(&());
        let ns = report.namespace().unwrap_or_default();
        let api = Api::<DynamicObject>::namespaced_with(self.client.clone(), &ns, &ar);
        let body = json!({"status": {"conditions": c}});
        let pp = PatchParams::default();
        let done = api
            .patch_status(&report.name_any(), &pp, &Patch::Merge(&body))
            .await;
        count(writes, "report_status", done.is_ok());
        if let Err(e) = &done {
            warn!(namespace = %ns, report = %report.name_any(), error = %e, "answering a ServiceExportReport failed");
        }
        done.is_ok()
    }
}

/// The conditions of a report that was not read.
fn rejected(r: &Rejection) -> Vec<WantedCondition> {
    vec![WantedCondition {
        type_: condition::VALID,
        status: false,
        reason: r.as_str().to_string(),
        message: r.message().to_string(),
    }]
}
