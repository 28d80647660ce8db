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
//! after a restart: clusters not yet known are held, not emptied, and each member is waited
//! for only until it is judged — by the registry's health verdict and, once Ready, the
//! library's per-cluster sync timeout on its caches ([`known`]): one unreachable member
//! neither stalls the others nor goes unreported. ClusterSet IPs are
//! allocated from the KubeFedConfig's ranges by [`ips`] (pure, after [`plan`]); DNS is
//! `flotilla dns` (the flotilla-dns crate); routing the IPs is the network layer's job
//! (docs/multicluster-services.md).

pub mod apply;
pub mod conditions;
pub mod ips;
pub mod known;
pub mod objects;
pub mod observe;
pub mod plan;
pub mod pull;
pub mod pull_plan;
pub mod slice;
pub mod slice_watch;

use flotilla_multicluster::{
    SyncState, WatchOptions,
    runner::{Action, PassRunner, Retry},
};
use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use flotilla_api::{
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
use tokio::sync::{Notify, mpsc, watch};
use tracing::{debug, info, warn};

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
/// How long a Ready member's caches may take to complete their first list (the library's
/// per-cluster sync timeout): until then a member never judged before is waited for; past
/// it, the member is held (its slices neither rewritten nor removed) and reported.
const SYNC_TIMEOUT: Duration = Duration::from_secs(15);
/// How soon a pass waiting for a member looks again (a missed sync timeout sends no event).
const WAIT_RECHECK: Duration = Duration::from_secs(1);
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
        let imports = kube::runtime::watcher::Config::default().labels(&managed_selector());
        Watches {
            // A member joined before Flotilla installed the MCS CRDs may not serve them.
            exports: MemberWatch::start_with_events(
                set.clone(),
                ApiResource::erase::<ServiceExport>(&()),
                WatchOptions::all()
                    .optional_kind()
                    .sync_timeout(SYNC_TIMEOUT),
                events.clone(),
            ),
            imports: MemberWatch::start_with_events(
                set.clone(),
                (),
                WatchOptions::all()
                    .with_config(imports)
                    .sync_timeout(SYNC_TIMEOUT),
                events.clone(),
            ),
            services: MemberWatch::start_with_events(
                set.clone(),
                (),
                WatchOptions {
                    shrink: shrink_service,
                    ..WatchOptions::all().sync_timeout(SYNC_TIMEOUT)
                },
                events.clone(),
            ),
            namespaces: MemberWatch::start_with_events(
                set.clone(),
                (),
                WatchOptions {
                    shrink: shrink_namespace,
                    ..WatchOptions::all().sync_timeout(SYNC_TIMEOUT)
                },
                events.clone(),
            ),
            slices: SliceWatch::start(set.clone(), events),
        }
    }

    /// Where the member's caches stand against their sync timeout.
    fn sync_state(&self, cluster: &str) -> SyncState {
        known::combine([
            ("ServiceExports", self.exports.sync_state(cluster)),
            ("ServiceImports", self.imports.sync_state(cluster)),
            ("Services", self.services.sync_state(cluster)),
            ("Namespaces", self.namespaces.sync_state(cluster)),
            (
                "EndpointSlices",
                self.slices.sync_state(cluster, SYNC_TIMEOUT),
            ),
        ])
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
    let mut known = Known::default();
    let mut runner = PassRunner::new("multicluster-services", changed)
        .period(RECHECK)
        .retry(Retry::Fixed(RETRY))
        .debounce(DEBOUNCE)
        .wake_on_channel(rx)
        .wake_on_changes(clusters.changes())
        .wake_on_changes(config.clone());
    info!("multi-cluster services controller started");
    while runner.next().await.is_some() {
        let known = &mut known;
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
    /// Not judged yet: the pass waits for it.
    wait: bool,
    /// Why its caches are not waited for, when they missed their sync timeout.
    timed_out: Option<String>,
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
    memory: &mut known::Memory,
) -> Vec<Lists> {
    // An unready member the registry has probed is reported with why (its verdict).
    let verdicts = clusters.problems();
    clusters
        .snapshot()
        .into_iter()
        .map(|c| {
            let caches = match (c.pull, pulled.synced()) {
                (true, true) => SyncState::Synced,
                (true, false) => SyncState::Syncing,
                (false, _) => w.sync_state(&c.name),
            };
            let timed_out = match &caches {
                SyncState::TimedOut { reason } if c.ready => Some(reason.clone()),
                _ => None,
            };
            let verdict = c.ready || verdicts.contains_key(&c.name);
            let judgement = memory.judge(&c.name, c.ready, caches, verdict);
            let availability = judgement.availability;
            let name = c.name;
            let id_label = format!("{PROPERTY_LABEL_PREFIX}/{CLUSTER_ID_PROPERTY}");
            Lists {
                id: c.labels.get(&id_label).cloned(),
                availability,
                wait: judgement.wait,
                timed_out,
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

/// What this process knows of the members across passes: what it judged, and which
/// members' caches it reported as having missed their sync timeout (with why).
#[derive(Default)]
struct Known {
    memory: known::Memory,
    reported: BTreeMap<String, String>,
}

impl Known {
    /// Logs each member whose caches missed their sync timeout (once per reason), and each
    /// that has synced since.
    fn report(&mut self, members: &[Lists]) {
        let now: BTreeMap<String, String> = members
            .iter()
            .filter_map(|m| Some((m.name.clone(), m.timed_out.clone()?)))
            .collect();
        for (cluster, reason) in &now {
            if self.reported.get(cluster) != Some(reason) {
                warn!(%cluster, %reason, "member held by multi-cluster services: its caches missed the sync timeout; the other members go on");
            }
        }
        for cluster in self.reported.keys().filter(|c| !now.contains_key(*c)) {
            info!(%cluster, "member no longer held by multi-cluster services");
        }
        self.reported = now;
    }
}

/// What a pass takes besides the caches.
struct PassContext<'a> {
    known: &'a mut Known,
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
    let members = lists(w, pull, clusters, &mut known.memory);
    known.report(&members);
    let waiting: Vec<&str> = members
        .iter()
        .filter(|m| m.wait)
        .map(|m| m.name.as_str())
        .collect();
    if !waiting.is_empty() {
        // A plan over part of the ClusterSet could differ from the one already written:
        // wait for members not judged yet, each for a bounded time (its first health
        // verdict, then its caches' sync timeout).
        debug!(?waiting, "MCS pass deferred until these members are judged");
        return Action::requeue(WAIT_RECHECK);
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
                flotilla_api::mcs::condition::READY if c.status && !failed.is_empty() => {
                    WantedCondition {
                        status: false,
                        reason: flotilla_api::mcs::condition::REASON_FAILED.into(),
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
