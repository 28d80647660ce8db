//! Multi-Cluster Services (KEP-1645) over the federation: the ClusterSet is every joined
//! cluster. A ServiceExport in a member exports the Service of its namespace and name; every
//! member whose namespace exists gets a ServiceImport (type, merged ports, exporting
//! clusters) and one EndpointSlice per exporting cluster's slice, labelled
//! `multicluster.kubernetes.io/service-name` and `.../source-cluster`; the exports get
//! `Valid`, `Ready` and `Conflict` conditions; and the host gets a mirror of every
//! ServiceImport in the same namespace (when the host has it), for `kubectl get
//! serviceimports` on the host.
//!
//! One pass recomputes everything whenever anything changed: member caches
//! ([`MemberWatch`] for exports, Services, imports and namespaces; [`slice_watch`] for
//! EndpointSlices at each member's version) → [`observe`] → [`plan`] (pure) → [`objects`]
//! (pure diff by content hash) → [`apply`]. A Pull member is read from the reports its agent
//! writes into its inventory and receives its imports there as Works ([`pull`]). An unchanged ClusterSet costs no writes, also
//! after a restart: clusters not yet known are held, not emptied. ClusterSet IPs are
//! allocated from the KubeFedConfig's ranges by [`ips`] (pure, after [`plan`]); DNS is
//! `flotilla dns` (the flotilla-dns crate); routing the IPs is the network layer's job
//! (docs/multicluster-services.md).

pub mod apply;
pub mod conditions;
pub mod ips;
pub mod objects;
pub mod observe;
pub mod plan;
pub mod pull;
pub mod pull_plan;
pub mod slice;
pub mod slice_watch;

use flotilla_multicluster::runner::{Action, PassRunner, Retry};
use std::{collections::BTreeSet, sync::Arc, time::Duration};

use flotilla_crds::{
    about::{CLUSTER_ID_PROPERTY, PROPERTY_LABEL_PREFIX},
    core::EffectiveConfig,
    mcs::{IMPORT_MANAGED_BY_LABEL, MANAGED_BY, ServiceExport, ServiceImport},
};
use futures::FutureExt;
use k8s_openapi::{
    api::core::v1::{Namespace, Service},
    apimachinery::pkg::apis::meta::v1::Time,
};
use kube::{
    Api, Client, ResourceExt,
    api::{ApiResource, DynamicObject},
    runtime::reflector::Store,
};
use tokio::{
    sync::{Notify, mpsc, watch},
    time::Instant,
};
use tracing::{debug, info};

use crate::{
    metrics::Metrics,
    multicluster::{ClusterSet, MemberEvent, MemberWatch},
    watch::{WatchParams, notifying_store},
};
use observe::MemberCaches;
use plan::{Availability, Plan, WantedCondition};
use slice_watch::SliceWatch;

/// How often everything is compared again without a change.
const RECHECK: Duration = Duration::from_secs(300);
/// Delay before a pass with failed writes is tried again.
const RETRY: Duration = Duration::from_secs(5);
/// Events arriving this close together are handled by one pass.
const DEBOUNCE: Duration = Duration::from_millis(200);
/// After a start, nothing is written until every member is known, for at most this long
/// (then members still unknown are held: their slices neither rewritten nor removed), so a
/// restart writes nothing that a partial view would have got wrong.
const GRACE: Duration = Duration::from_secs(30);
/// Name of the host in logs and failures.
const HOST: &str = "host";

/// The member caches of one controller.
struct Watches {
    // Dynamic: an export without `spec` (the usual case) does not fit the typed struct.
    exports: MemberWatch<DynamicObject>,
    imports: MemberWatch<ServiceImport>,
    services: MemberWatch<Service>,
    namespaces: MemberWatch<Namespace>,
    slices: SliceWatch,
}

fn shrink_service(s: &mut Service) {
    s.status = None;
}

fn shrink_namespace(n: &mut Namespace) {
    n.spec = None;
    n.status = None;
}

fn managed_selector() -> String {
    format!("{IMPORT_MANAGED_BY_LABEL}={MANAGED_BY}")
}

impl Watches {
    fn start(set: &ClusterSet, events: mpsc::UnboundedSender<MemberEvent>) -> Self {
        Watches {
            // A member joined before Flotilla installed the MCS CRDs may not serve them.
            exports: MemberWatch::start_optional(
                set.clone(),
                ApiResource::erase::<ServiceExport>(&()),
                |_| {},
                events.clone(),
            ),
            imports: MemberWatch::start(
                set.clone(),
                (),
                Some(managed_selector()),
                |_| {},
                events.clone(),
            ),
            services: MemberWatch::start(set.clone(), (), None, shrink_service, events.clone()),
            namespaces: MemberWatch::start(set.clone(), (), None, shrink_namespace, events.clone()),
            slices: SliceWatch::start(set.clone(), events),
        }
    }

    fn synced(&self, cluster: &str) -> bool {
        self.exports.is_synced(cluster)
            && self.imports.is_synced(cluster)
            && self.services.is_synced(cluster)
            && self.namespaces.is_synced(cluster)
            && self.slices.is_synced(cluster)
    }
}

/// The host's namespaces and the ServiceImports Flotilla mirrored there.
struct HostMirror {
    client: Client,
    namespaces: Store<Namespace>,
    imports: Store<ServiceImport>,
    tasks: [tokio::task::JoinHandle<()>; 2],
}

impl Drop for HostMirror {
    fn drop(&mut self) {
        for t in &self.tasks {
            t.abort();
        }
    }
}

impl HostMirror {
    fn start(client: Client, changed: &Arc<Notify>) -> Self {
        let (namespaces, ns_task) = notifying_store::<Namespace>(
            Api::all(client.clone()),
            WatchParams::host("namespace"),
            changed,
        );
        let params = WatchParams {
            label_selector: Some(managed_selector()),
            ..WatchParams::host("service import")
        };
        let (imports, imports_task) =
            notifying_store::<ServiceImport>(Api::all(client.clone()), params, changed);
        HostMirror {
            client,
            namespaces,
            imports,
            tasks: [ns_task, imports_task],
        }
    }

    /// Whether both caches are complete (the host may lack the ServiceImport CRD: then
    /// nothing is mirrored).
    fn synced(&self) -> bool {
        let ready = |r: Option<Result<(), _>>| matches!(r, Some(Ok(())));
        ready(self.namespaces.wait_until_ready().now_or_never())
            && ready(self.imports.wait_until_ready().now_or_never())
    }
}

/// Runs the MCS controller until aborted; `config` gives the ClusterSet IP ranges.
pub async fn run(
    host: Client,
    clusters: ClusterSet,
    config: watch::Receiver<EffectiveConfig>,
    metrics: Arc<Metrics>,
) {
    let writes = apply::Writes::default();
    metrics.register(
        "mcs_writes",
        "Multi-Cluster Services writes (ServiceImports, their status, EndpointSlices, export conditions) by outcome",
        writes.clone(),
    );
    let (tx, rx) = mpsc::unbounded_channel();
    let watches = Watches::start(&clusters, tx);
    let changed = Arc::new(Notify::new());
    let pulled = pull::PullStores::start(host.clone(), &changed);
    let mirror = HostMirror::start(host, &changed);
    let grace_ends = Instant::now() + GRACE;
    let mut seen_ready = BTreeSet::new();
    // The grace's end wakes a pass: members never seen Ready are judged then.
    let mut runner = PassRunner::new("multicluster-services", changed)
        .period(RECHECK)
        .retry(Retry::Fixed(RETRY))
        .debounce(DEBOUNCE)
        .wake_on_channel(rx)
        .wake_on_changes(clusters.changes())
        .wake_on_changes(config.clone())
        .wake_at(grace_ends);
    info!("multi-cluster services controller started");
    while runner.next().await.is_some() {
        let grace_over = Instant::now() >= grace_ends;
        let known = Known {
            seen_ready: &mut seen_ready,
            grace_over,
        };
        let ranges = ips::Ranges::parse(&config.borrow().clusterset_ip_ranges);
        let ctx = PassContext {
            known,
            ranges: &ranges,
            writes: &writes,
            pull: &pulled,
        };
        runner.finish(pass(&watches, &mirror, &clusters, ctx).await);
    }
}

/// One member's cache contents, owned for the length of a pass.
struct Lists {
    name: String,
    /// The cluster's id (About API), from its KubeFedCluster label.
    id: Option<String>,
    client: Option<Client>,
    availability: Availability,
    exports: Vec<Arc<DynamicObject>>,
    services: Vec<Arc<Service>>,
    slices: Vec<Arc<DynamicObject>>,
    imports: Vec<Arc<ServiceImport>>,
    namespaces: BTreeSet<String>,
    /// A Pull member's view, read from its reports (its caches above are empty).
    pulled: Option<plan::MemberView>,
}

impl Lists {
    fn caches(&self) -> MemberCaches<'_> {
        MemberCaches {
            name: &self.name,
            availability: self.availability,
            exports: &self.exports,
            services: &self.services,
            slices: &self.slices,
            imports: &self.imports,
            namespaces: self.namespaces.clone(),
        }
    }
}

fn lists(
    w: &Watches,
    pulled: &pull::PullStores,
    clusters: &ClusterSet,
    seen_ready: &mut BTreeSet<String>,
    grace_over: bool,
) -> Vec<Lists> {
    clusters
        .snapshot()
        .into_iter()
        .map(|c| {
            if c.ready {
                seen_ready.insert(c.name.clone());
            }
            let synced = match c.pull {
                true => pulled.synced(),
                false => w.synced(&c.name),
            };
            let seen = seen_ready.contains(&c.name);
            let name = c.name;
            let id_label = format!("{PROPERTY_LABEL_PREFIX}/{CLUSTER_ID_PROPERTY}");
            let availability = observe::availability(c.ready, synced, seen, grace_over);
            Lists {
                id: c.labels.get(&id_label).cloned(),
                availability,
                pulled: c.pull.then(|| pulled.view(&name, availability)),
                client: c.client,
                exports: w.exports.list(&name),
                services: w.services.list(&name),
                slices: w.slices.list(&name),
                imports: w.imports.list(&name),
                namespaces: w
                    .namespaces
                    .list(&name)
                    .iter()
                    .map(|n| n.name_any())
                    .collect(),
                name,
            }
        })
        .collect()
}

/// Which members this process has seen Ready, and whether the start-up grace is over.
struct Known<'a> {
    seen_ready: &'a mut BTreeSet<String>,
    grace_over: bool,
}

/// What a pass takes besides the caches.
struct PassContext<'a> {
    known: Known<'a>,
    ranges: &'a ips::Ranges,
    writes: &'a apply::Writes,
    pull: &'a pull::PullStores,
}

/// One pass over the ClusterSet; a failed write backs off (the runner retries it).
async fn pass(
    w: &Watches,
    mirror: &HostMirror,
    clusters: &ClusterSet,
    ctx: PassContext<'_>,
) -> Action {
    let PassContext {
        known,
        ranges,
        writes,
        pull,
    } = ctx;
    let grace_over = known.grace_over;
    let members = lists(w, pull, clusters, known.seen_ready, grace_over);
    if !grace_over
        && members
            .iter()
            .any(|m| m.availability == Availability::Unknown)
    {
        // Just started: a plan over part of the ClusterSet could differ from the one
        // already written; wait until every member is known (or the grace is over).
        debug!("MCS pass deferred until every member is known");
        return Action::AwaitChange;
    }
    let views: Vec<plan::MemberView> = members
        .iter()
        .map(|m| m.pulled.clone().unwrap_or_else(|| m.caches().view()))
        .collect();
    let mut plan = plan::plan(&views);
    ips::assign(&mut plan, &views, ranges);
    plan.cluster_ids = members
        .iter()
        .filter_map(|m| Some((m.name.clone(), m.id.clone()?)))
        .collect();
    plan.now = Some(Time(k8s_openapi::jiff::Timestamp::now()));
    let plan = plan;
    // Every member at once: a slow member must not hold back the others.
    let member_writes = members.iter().filter_map(|m| {
        let (Availability::Available, Some(client)) = (m.availability, &m.client) else {
            return None;
        };
        let version = w.slices.version(&m.name);
        let ops = objects::member_ops(&plan, &m.caches().actual(), version);
        Some(async move { apply::execute(&m.name, client, version, &ops, writes).await })
    });
    let failures: Vec<apply::Failure> = futures::future::join_all(member_writes)
        .await
        .into_iter()
        .flatten()
        .collect();
    let mut host_failed = false;
    if mirror.synced() {
        let ops = objects::member_ops(&plan, &host_actual(mirror), None);
        host_failed = !apply::execute(HOST, &mirror.client, None, &ops, writes)
            .await
            .is_empty();
    }
    let conditions_failed = !write_conditions(w, &members, &plan, &failures, writes).await;
    let pull_failed = !deliver_pull(pull, &members, &plan, writes).await;
    debug!(
        services = plan.services.len(),
        failures = failures.len(),
        "MCS pass done"
    );
    if !failures.is_empty() || host_failed || conditions_failed || pull_failed {
        Action::backoff()
    } else {
        Action::AwaitChange
    }
}

/// Delivers the plan to every available Pull member (Works) and answers every report.
async fn deliver_pull(
    pull: &pull::PullStores,
    members: &[Lists],
    plan: &Plan,
    writes: &apply::Writes,
) -> bool {
    let pulled: std::collections::BTreeMap<String, Availability> = members
        .iter()
        .filter(|m| m.pulled.is_some())
        .map(|m| (m.name.clone(), m.availability))
        .collect();
    let mut ok = true;
    for (name, _) in pulled
        .iter()
        .filter(|(_, a)| **a == Availability::Available)
    {
        ok &= pull.deliver(plan, name, writes).await;
    }
    ok & pull.answer(plan, &pulled, writes).await
}

fn host_actual(mirror: &HostMirror) -> objects::ActualMember {
    let imports = mirror.imports.state();
    let caches = MemberCaches {
        name: HOST,
        availability: Availability::Available,
        exports: &[],
        services: &[],
        slices: &[],
        imports: &imports,
        namespaces: mirror
            .namespaces
            .state()
            .iter()
            .map(|n| n.name_any())
            .collect(),
    };
    caches.actual()
}

/// Writes every export's conditions that differ; a service whose imports could not be
/// written everywhere is not Ready. Returns whether every write worked.
async fn write_conditions(
    w: &Watches,
    members: &[Lists],
    plan: &Plan,
    failures: &[apply::Failure],
    writes: &apply::Writes,
) -> bool {
    let mut all_written = true;
    let now = Time(k8s_openapi::jiff::Timestamp::now());
    for verdict in &plan.exports {
        let Some(client) = members
            .iter()
            .find(|m| m.name == verdict.cluster)
            .and_then(|m| m.client.as_ref())
        else {
            continue;
        };
        let Some(export) = w.exports.get(
            &verdict.cluster,
            Some(&verdict.key.namespace),
            &verdict.key.name,
        ) else {
            continue;
        };
        let failed: Vec<&str> = failures
            .iter()
            .filter(|f| f.key.as_ref() == Some(&verdict.key))
            .map(|f| f.error.as_str())
            .collect();
        let wanted: Vec<WantedCondition> = verdict
            .conditions
            .iter()
            .map(|c| match c.type_ {
                flotilla_crds::mcs::condition::READY if c.status && !failed.is_empty() => {
                    WantedCondition {
                        status: false,
                        reason: flotilla_crds::mcs::condition::REASON_FAILED.into(),
                        message: failed.join("; "),
                        ..c.clone()
                    }
                }
                _ => c.clone(),
            })
            .collect();
        let existing = observe::export_conditions(&export);
        if let Some(next) =
            conditions::export_conditions(&existing, &wanted, export.metadata.generation, &now)
        {
            all_written &=
                apply::write_export_status(&verdict.cluster, client, &verdict.key, &next, writes)
                    .await;
        }
    }
    all_written
}
