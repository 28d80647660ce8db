//! Dependencies that follow a workload (`spec.propagateDependencies`): in each reconcile,
//! the ConfigMaps, Secrets, ServiceAccounts and PersistentVolumeClaims its pod template
//! references are looked up in the host, copied to exactly the clusters the workload lands
//! on, let go of where it left, and reported in `status.dependencies`. The decisions are
//! [`flotilla_core::dependencies`] and [`flotilla_core::dependency_plan`]; this module
//! reads and writes — in a Push cluster itself, in a Pull cluster through the copies'
//! Works ([`super::pull_dependencies`]). It never logs nor reports an object's content
//! (Secrets).

use std::{
    collections::{BTreeMap, BTreeSet},
    sync::Arc,
    time::Duration,
};

use flotilla_api::{
    FIELD_MANAGER,
    dependency_plan::DependencyStatus,
    federated::{FederatedSpec, FederatedStatus},
};
use flotilla_core::{
    dependencies::{self as deps, Dependency, DependencyKind, EnsureOp, ReleaseOp},
    dependency_plan::{self as dplan, Lookup, Pair, PairOutcome},
};
use futures::future::join_all;
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, PostParams, Preconditions},
    core::DynamicObject,
    runtime::events::EventType,
};
use serde_json::Value;
use tokio::sync::broadcast::error::RecvError;
use tracing::{debug, warn};

use super::{
    Key, SyncShared,
    dependency_hosts::{DependencyHosts, api_resource},
    feeds::AllKeys,
    plan::{DesiredFor, DesiredSet},
    pull_dependencies::PullDependencies,
    status::Events,
    type_info::TypeInfo,
};
use crate::{
    multicluster::{ClusterSet, ClusterState},
    workqueue::WorkQueue,
};

/// The clusters a workload lands on this round: selected by placement and scheduling,
/// with a member object computed for them.
pub(super) fn lands_on(selected: &BTreeSet<String>, desired: &DesiredSet) -> BTreeSet<String> {
    (selected.iter())
        .filter(|c| matches!(desired.by_cluster.get(*c), Some(DesiredFor::Object { .. })))
        .cloned()
        .collect()
}

/// How long one member read or write may take.
const MEMBER_TIMEOUT: Duration = Duration::from_secs(10);
/// How soon a round with a failure is tried again.
const RETRY: Duration = Duration::from_secs(10);

/// What a round decided for `status.dependencies`, and when to look again.
#[derive(Default)]
pub(super) struct DependencyRound {
    /// The new `status.dependencies` (`None`: keep the previous).
    pub status: Option<Vec<DependencyStatus>>,
    /// Look again after this long (a failure, or caches still listing).
    pub recheck: Option<Duration>,
}

/// What following dependencies reads and writes: the host (its client and its caches of
/// the dependency kinds, with who references what), the member clusters, the type, and
/// the Events a new problem warrants.
pub(super) struct Dependencies<'a> {
    pub host: &'a Client,
    pub hosts: &'a DependencyHosts,
    /// The copies carried to Pull clusters.
    pub pull: &'a PullDependencies,
    pub clusters: &'a ClusterSet,
    pub ty: &'a TypeInfo,
    pub events: Events<'a>,
}

impl Dependencies<'_> {
    /// Brings the copies of the workload's dependencies in line with `lands` (the clusters
    /// the workload is propagated to this round).
    pub async fn follow(
        &self,
        key: &Key,
        fed: &DynamicObject,
        spec: &FederatedSpec,
        previous: &FederatedStatus,
        snapshot: &[ClusterState],
        lands: &BTreeSet<String>,
    ) -> DependencyRound {
        let Some(ns) = key.0.as_deref() else {
            return DependencyRound::default();
        };
        let enabled = spec.propagate_dependencies || deps::enabled(&Value::Null, fed.annotations());
        let refs = match deps::pod_spec(&self.ty.target_ar.kind, &spec.template) {
            Some(pod) if enabled => deps::references(pod),
            _ => BTreeSet::new(),
        };
        self.hosts.record(self.referrer(key), ns, &refs);
        if refs.is_empty() && previous.dependencies.is_empty() {
            return DependencyRound::default();
        }
        let Some((wanted, found)) = self.look_up(ns, &refs).await else {
            return DependencyRound {
                status: None,
                recheck: Some(RETRY),
            };
        };
        let plan = dplan::plan(&previous.dependencies, &wanted, lands);
        let owner = deps::owner_id(&self.ty.fed_ar.kind, &key.1);
        let mut outcomes = self.carry_out(ns, &owner, plan, &found, snapshot).await;
        (self.sweep_pull(
            ns,
            &owner,
            &previous.dependencies,
            &wanted,
            snapshot,
            &mut outcomes,
        ))
        .await;
        let handing_over = self.hand_over(ns, &wanted, snapshot).await;
        let failed = (outcomes.values())
            .any(|o| matches!(o, PairOutcome::Failed(_) | PairOutcome::ReleaseFailed(_)));
        let status = dplan::report(ns, &previous.dependencies, &wanted, lands, &outcomes);
        for p in dplan::new_problems(&previous.dependencies, &status) {
            let note = format!("{} {}: {}", p.kind, p.name, p.message);
            (self
                .events
                .publish(fed, EventType::Warning, &p.reason, note))
            .await;
        }
        DependencyRound {
            status: Some(status),
            recheck: (failed || handing_over).then_some(RETRY),
        }
    }

    /// Hands the Pull clusters' copies of explicitly federated dependencies over to their
    /// Federated&lt;Kind&gt; (push mode's copy is simply taken over by it in the member; a
    /// Pull member's object must not stay in two Works). Whether one is still under way.
    async fn hand_over(
        &self,
        ns: &str,
        wanted: &BTreeMap<Dependency, Lookup>,
        snapshot: &[ClusterState],
    ) -> bool {
        let explicit = (wanted.iter()).filter(|(_, l)| **l == Lookup::Explicit);
        let pairs = explicit.flat_map(|(dep, _)| {
            (snapshot.iter().filter(|c| c.pull)).map(move |c| (dep, c.name.as_str()))
        });
        let steps = pairs.map(|(dep, cluster)| self.pull.hand_over(cluster, ns, dep));
        join_all(steps).await.into_iter().any(|under_way| under_way)
    }

    /// The workload is deleted (and not orphaned): every copy it holds is let go of. Best
    /// effort: a copy that cannot be removed now is left, and said so in the log.
    pub async fn release(&self, key: &Key, fed: &DynamicObject) {
        self.hosts.record(self.referrer(key), "", &BTreeSet::new());
        let Some(ns) = key.0.as_deref() else { return };
        let previous = FederatedStatus::from_dynamic(fed);
        let plan = dplan::plan(&previous.dependencies, &BTreeMap::new(), &BTreeSet::new());
        let owner = deps::owner_id(&self.ty.fed_ar.kind, &key.1);
        let snapshot = self.clusters.snapshot();
        let mut outcomes = (self.carry_out(ns, &owner, plan, &BTreeMap::new(), &snapshot)).await;
        let wanted = BTreeMap::new();
        (self.sweep_pull(
            ns,
            &owner,
            &previous.dependencies,
            &wanted,
            &snapshot,
            &mut outcomes,
        ))
        .await;
        for ((dep, cluster), outcome) in outcomes {
            if let PairOutcome::ReleaseFailed(message) = outcome {
                warn!(%cluster, kind = dep.kind.as_str(), name = %dep.name, %message, "a dependency copy of a deleted workload was not removed");
            }
        }
    }

    /// Lets go of the Pull clusters' copies no plan touched that the bundles still carry
    /// for `owner` (one the agent refused: a user's object holds the name), adding their
    /// outcomes to `outcomes`.
    async fn sweep_pull(
        &self,
        ns: &str,
        owner: &str,
        previous: &[DependencyStatus],
        wanted: &BTreeMap<Dependency, Lookup>,
        snapshot: &[ClusterState],
        outcomes: &mut BTreeMap<Pair, PairOutcome>,
    ) {
        let pull: Vec<&str> = (snapshot.iter().filter(|c| c.pull))
            .map(|c| c.name.as_str())
            .collect();
        if pull.is_empty() {
            return;
        }
        let done = outcomes.keys().cloned().collect();
        let pairs = super::pull_dependencies::unplanned(previous, wanted, &pull, &done);
        outcomes.extend(self.pull.sweep(ns, owner, pairs).await);
    }

    fn referrer(&self, key: &Key) -> (String, Key) {
        (self.ty.fed_ar.kind.clone(), key.clone())
    }

    /// What the host says of each dependency, and the host objects found (`None` while
    /// the host caches are still listing).
    async fn look_up(
        &self,
        ns: &str,
        refs: &BTreeSet<Dependency>,
    ) -> Option<(BTreeMap<Dependency, Lookup>, BTreeMap<Dependency, Value>)> {
        let mut wanted = BTreeMap::new();
        let mut found = BTreeMap::new();
        for dep in refs {
            if self.federated_explicitly(ns, dep).await {
                wanted.insert(dep.clone(), Lookup::Explicit);
                continue;
            }
            let lookup = match self.hosts.get(ns, dep).await.ok()? {
                None => Lookup::NotFound,
                Some(obj) => {
                    found.insert(dep.clone(), serde_json::to_value(&*obj).ok()?);
                    Lookup::Found
                }
            };
            wanted.insert(dep.clone(), lookup);
        }
        Some((wanted, found))
    }

    /// Whether a Federated&lt;Kind&gt; of the dependency's name exists. A failed read counts
    /// as no: a member object it manages is refused anyway (see [`deps::holder`]).
    async fn federated_explicitly(&self, ns: &str, dep: &Dependency) -> bool {
        let api: Api<DynamicObject> =
            Api::namespaced_with(self.host.clone(), ns, &federated_resource(dep.kind));
        match api.get_metadata_opt(&dep.name).await {
            Ok(found) => found.is_some(),
            Err(e) => {
                debug!(kind = dep.kind.as_str(), error = %e, "reading the federated type failed");
                false
            }
        }
    }

    /// Runs every pair of the plan, all at once: in a Push cluster through its client, in
    /// a Pull cluster through its Works.
    async fn carry_out(
        &self,
        ns: &str,
        owner: &str,
        plan: dplan::Plan,
        found: &BTreeMap<Dependency, Value>,
        snapshot: &[ClusterState],
    ) -> BTreeMap<Pair, PairOutcome> {
        let member = |cluster: &str| match snapshot.iter().find(|c| c.name == cluster) {
            Some(c) if c.pull => Member::Pull,
            Some(c) if c.ready => c.client.clone().map_or(Member::None, Member::Push),
            _ => Member::None,
        };
        let pull = self.pull;
        let ensure = plan.ensure.into_iter().map(|(dep, cluster)| {
            let (member, host) = (member(&cluster), found.get(&dep));
            async move {
                let outcome = match (member, host) {
                    (Member::Push(c), Some(h)) => ensure(c, ns, &dep, h, owner).await,
                    (Member::Pull, Some(h)) => pull.ensure(&cluster, ns, &dep, h, owner).await,
                    _ => PairOutcome::Failed(NO_CLIENT.into()),
                };
                ((dep, cluster), outcome)
            }
        });
        let release = plan.release.into_iter().map(|(dep, cluster)| {
            let member = member(&cluster);
            async move {
                let outcome = match member {
                    Member::Push(c) => release(c, ns, &dep, owner).await,
                    Member::Pull => pull.release(&cluster, ns, &dep, owner).await,
                    Member::None => PairOutcome::ReleaseFailed(NO_CLIENT.into()),
                };
                ((dep, cluster), outcome)
            }
        });
        let (a, b) = futures::join!(join_all(ensure), join_all(release));
        a.into_iter().chain(b).collect()
    }
}

/// How a cluster's copies are written.
enum Member {
    /// Through this client.
    Push(Client),
    /// Through the cluster's Works.
    Pull,
    /// Not now (an unready Push cluster).
    None,
}

const NO_CLIENT: &str = "no client for the cluster (it is not ready)";

/// Host changes of referenced objects requeue their workloads of this controller's type.
/// `kind`: the federated kind of this controller.
pub(super) async fn follow_host_changes(
    shared: Arc<SyncShared>,
    kind: String,
    all: AllKeys,
    queue: Arc<WorkQueue<Key>>,
) {
    let mut changes = shared.dependency_hosts.subscribe();
    loop {
        match changes.recv().await {
            Ok((changed, key)) if changed == kind => queue.add(key),
            Ok(_) => {}
            Err(RecvError::Lagged(_)) => all.requeue(&queue),
            Err(RecvError::Closed) => return,
        }
    }
}

/// The Federated&lt;Kind&gt; API of a dependency kind.
fn federated_resource(kind: DependencyKind) -> kube::core::ApiResource {
    let target = flotilla_api::core::ApiResource {
        group: String::new(),
        version: "v1".into(),
        kind: kind.as_str().into(),
        plural_name: kind.plural().into(),
        scope: flotilla_api::core::Scope::Namespaced,
    };
    flotilla_api::crdgen::federated_api_resource(&target).to_kube()
}

fn member_api(client: Client, ns: &str, kind: DependencyKind) -> Api<DynamicObject> {
    Api::namespaced_with(client, ns, &api_resource(kind))
}

/// The member object of a dependency, as JSON.
async fn read(api: &Api<DynamicObject>, name: &str) -> Result<Option<Value>, String> {
    let got = tokio::time::timeout(MEMBER_TIMEOUT, api.get_opt(name))
        .await
        .map_err(|_| timed_out())?
        .map_err(|e| message(&e))?;
    Ok(got.and_then(|o| serde_json::to_value(o).ok()))
}

async fn ensure(
    client: Client,
    ns: &str,
    dep: &Dependency,
    host: &Value,
    owner: &str,
) -> PairOutcome {
    let api = member_api(client, ns, dep.kind);
    let existing = match read(&api, &dep.name).await {
        Ok(e) => e,
        Err(m) => return PairOutcome::Failed(m),
    };
    let pp = PostParams {
        field_manager: Some(FIELD_MANAGER.into()),
        ..PostParams::default()
    };
    let write = match deps::ensure_op(dep.kind, host, existing.as_ref(), owner) {
        EnsureOp::Nothing => return PairOutcome::Placed,
        EnsureOp::Refuse(holder) => return PairOutcome::Refused(holder),
        EnsureOp::Create(v) => match serde_json::from_value::<DynamicObject>(v) {
            Ok(obj) => tokio::time::timeout(MEMBER_TIMEOUT, api.create(&pp, &obj)).await,
            Err(e) => return PairOutcome::Failed(e.to_string()),
        },
        EnsureOp::Replace(v) => match serde_json::from_value::<DynamicObject>(v) {
            Ok(obj) => {
                tokio::time::timeout(MEMBER_TIMEOUT, api.replace(&dep.name, &pp, &obj)).await
            }
            Err(e) => return PairOutcome::Failed(e.to_string()),
        },
    };
    match write {
        Ok(Ok(_)) => PairOutcome::Placed,
        Ok(Err(e)) => PairOutcome::Failed(message(&e)),
        Err(_) => PairOutcome::Failed(timed_out()),
    }
}

async fn release(client: Client, ns: &str, dep: &Dependency, owner: &str) -> PairOutcome {
    let api = member_api(client, ns, dep.kind);
    let existing = match read(&api, &dep.name).await {
        Ok(e) => e,
        Err(m) => return PairOutcome::ReleaseFailed(m),
    };
    let result = match deps::release_op(existing.as_ref(), owner) {
        ReleaseOp::Nothing => return PairOutcome::Released,
        ReleaseOp::Delete {
            uid,
            resource_version,
        } => {
            let dp = DeleteParams {
                preconditions: Some(Preconditions {
                    uid,
                    resource_version,
                }),
                ..DeleteParams::default()
            };
            let deleted = tokio::time::timeout(MEMBER_TIMEOUT, api.delete(&dep.name, &dp)).await;
            deleted.map(|r| r.map(|_| ()))
        }
        ReleaseOp::Replace(v) => match serde_json::from_value::<DynamicObject>(v) {
            Ok(obj) => {
                let pp = PostParams::default();
                let replaced = api.replace(&dep.name, &pp, &obj);
                (tokio::time::timeout(MEMBER_TIMEOUT, replaced).await).map(|r| r.map(|_| ()))
            }
            Err(e) => return PairOutcome::ReleaseFailed(e.to_string()),
        },
    };
    match result {
        Ok(Ok(())) => PairOutcome::Released,
        Ok(Err(kube::Error::Api(s))) if s.code == 404 => PairOutcome::Released,
        Ok(Err(e)) => PairOutcome::ReleaseFailed(message(&e)),
        Err(_) => PairOutcome::ReleaseFailed(timed_out()),
    }
}

fn timed_out() -> String {
    format!("no answer from the cluster within {MEMBER_TIMEOUT:?}")
}

/// The API server's message for an API error, else the error's text (never an object's
/// content: requests carry it, errors do not echo it).
fn message(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) => s.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::ClusterReason;
    use serde_json::json;

    #[test]
    fn a_workload_lands_on_selected_clusters_that_have_a_member_object() {
        let object = || DesiredFor::Object {
            object: json!({}),
            hash: "h".into(),
        };
        let desired = DesiredSet {
            by_cluster: BTreeMap::from([
                ("member1".to_string(), object()),
                (
                    "member2".to_string(),
                    DesiredFor::Failed(ClusterReason::ApplyOverridesFailed, "bad".into()),
                ),
                ("member3".to_string(), object()),
            ]),
            dropped_annotations: false,
            dropped_finalizers: false,
        };
        let selected: BTreeSet<String> = ["member1", "member2"].map(String::from).into();
        assert_eq!(
            lands_on(&selected, &desired),
            BTreeSet::from(["member1".to_string()])
        );
    }
}
