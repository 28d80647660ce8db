//! The policy controller: native objects in the host (a Deployment, a ConfigMap, … of any
//! enabled type) selected by a PropagationPolicy or ClusterPropagationPolicy are
//! propagated through a Federated&lt;Kind&gt; the controller builds for each — placement,
//! rollout and dependencies from the winning policy, per-cluster overrides from the
//! override policies — which the sync controller then propagates like any other
//! (docs/development.md, "Two resource models, one engine"). The Federated object is owned
//! by the native object, so deleting the native object deletes its member copies; a policy
//! that stops selecting an object releases it (its member copies are removed, or kept with
//! `preserveResourcesOnDeletion`). The aggregated workload status comes back to the native
//! object when the host does not run it.
//!
//! Wiring (this module): caches of the four policy kinds and of the FederatedTypeConfigs;
//! per enabled type, a cache of the Federated objects this controller made (label
//! `policy.flotilla.io/materialized`) and, once a policy selects the type, of its native
//! objects ([`types`]). Every change queues native keys; [`reconcile`] decides one object;
//! [`status`] writes the policies' statuses in passes.

mod outcome;
mod reconcile;
mod replicas;
mod status;
mod types;
mod writes;

use std::{
    collections::BTreeMap,
    convert::Infallible,
    sync::{Arc, Mutex},
};

use flotilla_api::{
    FederatedTypeConfig, ReplicaSchedulingPreference,
    policy::{ClusterOverridePolicy, ClusterPropagationPolicy, OverridePolicy, PropagationPolicy},
};
use flotilla_multicluster::{
    gate::{Gate, store_ready},
    runner::{KeyedRunner, QueueAges},
    tasks::AbortOnDrop,
};
use kube::{
    Api, Client,
    runtime::{
        events::Recorder,
        reflector::{self, Store},
    },
};
use tokio::sync::Notify;

use crate::{multicluster::ClusterSet, watch::reflect, workqueue::WorkQueue};

pub use outcome::{Blocked, Outcome, PolicyId, PolicyKind};

/// The policy controller's name as the reporting controller of its Events.
const REPORTING_CONTROLLER: &str = "flotilla-policy";

/// A native object: the FederatedTypeConfig's name, then namespace (`""` for a
/// cluster-scoped object) and name.
pub type Key = (String, String, String);

/// The caches of the four policy kinds.
#[derive(Clone)]
pub(crate) struct PolicyStores {
    pub propagation: Store<PropagationPolicy>,
    pub cluster_propagation: Store<ClusterPropagationPolicy>,
    pub overrides: Store<OverridePolicy>,
    pub cluster_overrides: Store<ClusterOverridePolicy>,
}

/// What every part of the controller shares.
pub(crate) struct Ctx {
    pub host: Client,
    /// The control-plane namespace: never propagated by a policy.
    pub namespace: String,
    /// Namespaces known to be federated (see `writes::ensure_namespace`).
    pub namespaces_known: Mutex<std::collections::BTreeSet<String>>,
    pub clusters: ClusterSet,
    pub policies: PolicyStores,
    pub types: types::Types,
    /// The ReplicaSchedulingPreferences: one of a policy-made object's name divides its
    /// replicas, and the policy keeps what it wrote (`replica_division::keep_division`);
    /// a policy's `replicaScheduling` makes one ([`replicas`]).
    pub rsps: Store<ReplicaSchedulingPreference>,
    pub outcomes: Mutex<outcome::Outcomes>,
    pub queue: Arc<WorkQueue<Key>>,
    /// Wakes the status pass.
    pub status_wake: Arc<Notify>,
    pub recorder: Recorder,
}

/// Spawns a cache of `api` whose every change wakes `wake`.
fn watch_waking<K>(
    api: Api<K>,
    what: &'static str,
    wake: Arc<Notify>,
) -> (Store<K>, tokio::task::JoinHandle<()>)
where
    K: kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    K::DynamicType: Default + Eq + std::hash::Hash + Clone + Send + Sync,
{
    let writer = reflector::store::Writer::<K>::default();
    let store = writer.as_reader();
    // Every change, a list's objects and its end included, wakes the controller.
    let task = tokio::spawn(reflect(api, writer, what, move |_| wake.notify_one()));
    (store, task)
}

/// Runs the policy controller until the task is aborted. `namespace` is the control-plane
/// namespace, where the FederatedTypeConfigs are.
pub async fn run(host: Client, namespace: String, clusters: ClusterSet, ages: Arc<QueueAges>) {
    let changed = Arc::new(Notify::new());
    let (pp, t1) = watch_waking(Api::all(host.clone()), "PropagationPolicy", changed.clone());
    let (cpp, t2) = watch_waking(
        Api::all(host.clone()),
        "ClusterPropagationPolicy",
        changed.clone(),
    );
    let (op, t3) = watch_waking(Api::all(host.clone()), "OverridePolicy", changed.clone());
    let (cop, t4) = watch_waking(
        Api::all(host.clone()),
        "ClusterOverridePolicy",
        changed.clone(),
    );
    let (ftcs, t5) = watch_waking(
        Api::<FederatedTypeConfig>::namespaced(host.clone(), &namespace),
        "FederatedTypeConfig",
        changed.clone(),
    );
    let policies = PolicyStores {
        propagation: pp,
        cluster_propagation: cpp,
        overrides: op,
        cluster_overrides: cop,
    };
    let queue: Arc<WorkQueue<Key>> = WorkQueue::new();
    let rsp_writer = reflector::store::Writer::<ReplicaSchedulingPreference>::default();
    let ctx = Arc::new(Ctx {
        host: host.clone(),
        namespace: namespace.clone(),
        namespaces_known: Mutex::new(Default::default()),
        clusters,
        policies: policies.clone(),
        types: types::Types::new(host.clone(), queue.clone()),
        rsps: rsp_writer.as_reader(),
        outcomes: Mutex::new(BTreeMap::new()),
        queue: queue.clone(),
        status_wake: Arc::new(Notify::new()),
        recorder: crate::events::recorder(host.clone(), REPORTING_CONTROLLER),
    });
    // Nothing is decided before every policy and type config is listed: an object whose
    // policy is not in the cache yet would be released.
    let (gate, t6) = {
        let p = policies.clone();
        let f = ftcs.clone();
        // And the RSPs: a division kept, or an RSP a policy made, must not read as absent.
        let r = ctx.rsps.clone();
        Gate::after(async move {
            store_ready(&p.propagation).await
                && store_ready(&p.cluster_propagation).await
                && store_ready(&p.overrides).await
                && store_ready(&p.cluster_overrides).await
                && store_ready(&f).await
                && store_ready(&r).await
        })
    };
    let t7 = {
        let c = ctx.clone();
        tokio::spawn(reflect(
            Api::all(host.clone()),
            rsp_writer,
            "ReplicaSchedulingPreference",
            move |change| {
                if let Some(rsp) = change.object() {
                    c.rsp_changed(rsp);
                }
            },
        ))
    };
    let mut tasks = vec![t1, t2, t3, t4, t5, t6, t7];
    tasks.push(tokio::spawn(types::run(
        ctx.clone(),
        ftcs,
        changed,
        gate.clone(),
    )));
    tasks.push(tokio::spawn(status::run(ctx.clone(), gate.clone())));
    let _guard = AbortOnDrop::from(tasks);
    KeyedRunner::new("policy", queue)
        .concurrency(4)
        .queue_ages(ages)
        .gate(gate)
        .run(move |key: Key| {
            let ctx = ctx.clone();
            async move { Ok::<_, Infallible>(ctx.reconcile(&key).await) }
        })
        .await;
}
