//! `flotilla clusterset-routes`: the optional piece of data plane Flotilla provides, run in
//! each member. For every `ClusterSetIP` ServiceImport of the member it keeps a selector-less
//! Service `<svc>-clusterset` with the ClusterSet IPs as `externalIPs` and EndpointSlices
//! with the merged endpoints (copied from the imported slices), so kube-proxy routes a
//! ClusterSet IP to every exporting cluster's endpoints — on a network where Pod IPs of one
//! cluster are reachable from the others. What to write is [`plan`] (pure); this module
//! watches, compares hashes and writes only what differs. A name held by an object it did
//! not write is never taken over: the ServiceImport gets a Warning Event instead.

pub mod plan;

use std::{collections::BTreeSet, sync::Arc, time::Duration};

use crate::cache::{ImportedView, notify, watch_imported};

use flotilla_api::mcs::{IMPORT_MANAGED_BY_LABEL, ServiceImport};
use flotilla_multicluster::{
    events::{publish, recorder},
    runner::{Action, PassRunner},
    tasks::AbortOnDrop,
    watch::{WatchParams, watch_into},
};
use k8s_openapi::api::core::v1::ObjectReference;
use kube::{
    Api, Client, Resource, ResourceExt,
    api::{ApiResource, DeleteParams, DynamicObject, Patch, PatchParams, PostParams},
    runtime::{
        events::{EventType, Recorder},
        reflector::{self, Store},
    },
};
use serde_json::Value;
use tokio::{sync::Notify, task::JoinHandle};
use tracing::{info, warn};

use plan::{Key, MANAGER, Problem, desired_hash, written_hash};

/// Field manager of every write.
const FIELD_MANAGER: &str = "flotilla-clusterset-routes";
/// A pass at least this often, changes or not.
const PERIOD: Duration = Duration::from_secs(300);
/// Changes this close together make one pass.
const DEBOUNCE: Duration = Duration::from_millis(100);

/// What the helper reads: the member's imports and imported slices, and what it wrote.
struct Caches {
    imports: Store<ServiceImport>,
    imported: Store<DynamicObject>,
    services: Store<DynamicObject>,
    slices: Store<DynamicObject>,
    slice_ar: ApiResource,
    service_ar: ApiResource,
}

/// The running helper. Stops when dropped.
pub struct RouteHelper {
    _task: AbortOnDrop,
}

/// The caches, filled, and what keeps them and wakes the passes.
struct Prepared {
    client: Client,
    caches: Caches,
    changed: Arc<Notify>,
    _watches: AbortOnDrop,
}

/// A store of `ar` objects selected by `selector`, fed by a task pushed onto `tasks`.
fn watched(
    client: &Client,
    ar: &ApiResource,
    selector: &str,
    what: &'static str,
    changed: &Arc<Notify>,
    tasks: &mut Vec<JoinHandle<()>>,
) -> Store<DynamicObject> {
    let writer = reflector::store::Writer::<DynamicObject>::new(ar.clone());
    let store = writer.as_reader();
    tasks.push(tokio::spawn(watch_into(
        Api::<DynamicObject>::all_with(client.clone(), ar),
        writer,
        WatchParams {
            label_selector: Some(selector.into()),
            ..WatchParams::host(what)
        },
        |_| {},
        notify(changed),
    )));
    store
}

/// Starts the watches and returns once every cache is complete.
async fn prepare(client: Client) -> anyhow::Result<Prepared> {
    let slice_ar = crate::cache::slice_resource(&client).await?;
    let service_ar = ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&());
    let changed = Arc::new(Notify::new());
    let mut tasks = Vec::new();
    let ImportedView { imports, slices } = watch_imported(&client, &slice_ar, &changed, &mut tasks);
    let ours = format!("{IMPORT_MANAGED_BY_LABEL}={MANAGER}");
    let caches = Caches {
        imports,
        imported: slices,
        services: watched(
            &client,
            &service_ar,
            &ours,
            "route service",
            &changed,
            &mut tasks,
        ),
        slices: watched(
            &client,
            &slice_ar,
            &ours,
            "route slice",
            &changed,
            &mut tasks,
        ),
        slice_ar,
        service_ar,
    };
    caches.imports.wait_until_ready().await?;
    for store in [&caches.imported, &caches.services, &caches.slices] {
        store.wait_until_ready().await?;
    }
    Ok(Prepared {
        client,
        caches,
        changed,
        _watches: AbortOnDrop::from(tasks),
    })
}

/// Keeps the routes: a pass on every change and every [`PERIOD`]. Runs until dropped.
async fn keep(prepared: Prepared) {
    let recorder = recorder(prepared.client.clone(), FIELD_MANAGER);
    let mut runner = PassRunner::new("clusterset-routes", prepared.changed.clone())
        .debounce(DEBOUNCE)
        .period(PERIOD);
    prepared.changed.notify_one();
    let mut announced = BTreeSet::new();
    while runner.next().await.is_some() {
        let action = pass(
            &prepared.client,
            &prepared.caches,
            &recorder,
            &mut announced,
        )
        .await;
        runner.finish(action);
    }
}

impl RouteHelper {
    /// Fills the caches from `client`'s cluster and starts keeping the routes.
    pub async fn start(client: Client) -> anyhow::Result<RouteHelper> {
        let prepared = prepare(client).await?;
        Ok(RouteHelper {
            _task: AbortOnDrop::from([tokio::spawn(keep(prepared))]),
        })
    }
}

/// One pass: plan from the caches, write what differs, announce problems once each.
async fn pass(
    client: &Client,
    caches: &Caches,
    recorder: &Recorder,
    announced: &mut BTreeSet<(Key, String)>,
) -> Action {
    let imports = caches.imports.state();
    let imported = caches.imported.state();
    let mut routes = plan::plan(&imports, &imported, &caches.slice_ar.api_version);
    let mut problems = std::mem::take(&mut routes.problems);
    let mut failed = false;
    for (kind, desired, store, ar) in [
        (
            "Service",
            &routes.services,
            &caches.services,
            &caches.service_ar,
        ),
        (
            "EndpointSlice",
            &routes.slices,
            &caches.slices,
            &caches.slice_ar,
        ),
    ] {
        let outcome = write_kind(client, ar, desired, store, kind).await;
        failed |= outcome.failed;
        problems.extend(outcome.conflicts);
    }
    announce(recorder, &imports, problems, announced).await;
    if failed {
        Action::backoff()
    } else {
        Action::await_change()
    }
}

/// What writing one kind came to.
struct Outcome {
    failed: bool,
    conflicts: Vec<Problem>,
}

/// Creates, updates and deletes the helper's objects of one kind so they match `desired`.
async fn write_kind(
    client: &Client,
    ar: &ApiResource,
    desired: &std::collections::BTreeMap<Key, Value>,
    written: &Store<DynamicObject>,
    kind: &str,
) -> Outcome {
    let mut outcome = Outcome {
        failed: false,
        conflicts: Vec::new(),
    };
    let mut existing = std::collections::BTreeMap::new();
    for object in written.state() {
        let key = Key {
            namespace: object.namespace().unwrap_or_default(),
            name: object.name_any(),
        };
        existing.insert(key, object);
    }
    for (key, object) in desired {
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), &key.namespace, ar);
        let result = match existing.get(key) {
            Some(live) if written_hash(live) == desired_hash(object) => continue,
            Some(_) => {
                let params = PatchParams::apply(FIELD_MANAGER).force();
                api.patch(&key.name, &params, &Patch::Apply(object))
                    .await
                    .map(drop)
            }
            None => match serde_json::from_value::<DynamicObject>(object.clone()) {
                Ok(new) => api.create(&PostParams::default(), &new).await.map(drop),
                Err(e) => {
                    warn!(%kind, name = %key.name, error = %e, "route object does not parse");
                    continue;
                }
            },
        };
        match result {
            Ok(()) => info!(%kind, namespace = %key.namespace, name = %key.name, "route written"),
            Err(kube::Error::Api(e)) if e.code == 409 && !existing.contains_key(key) => {
                // Ours but not yet in the cache (a create the watch has not delivered),
                // or someone else's.
                match api.get_opt(&key.name).await {
                    Ok(Some(live)) if is_ours(&live) => {}
                    Ok(_) => outcome.conflicts.push(conflict(kind, key, object)),
                    Err(_) => outcome.failed = true,
                }
            }
            Err(e) => {
                warn!(%kind, namespace = %key.namespace, name = %key.name, error = %e, "route write failed");
                outcome.failed = true;
            }
        }
    }
    for (key, _) in existing.iter().filter(|(k, _)| !desired.contains_key(*k)) {
        let api = Api::<DynamicObject>::namespaced_with(client.clone(), &key.namespace, ar);
        match api.delete(&key.name, &DeleteParams::default()).await {
            Ok(_) => info!(%kind, namespace = %key.namespace, name = %key.name, "route removed"),
            Err(kube::Error::Api(e)) if e.code == 404 => {}
            Err(e) => {
                warn!(%kind, namespace = %key.namespace, name = %key.name, error = %e, "route delete failed");
                outcome.failed = true;
            }
        }
    }
    outcome
}

fn is_ours(object: &DynamicObject) -> bool {
    object
        .labels()
        .get(IMPORT_MANAGED_BY_LABEL)
        .map(String::as_str)
        == Some(MANAGER)
}

/// The problem of a name already held by an object the helper did not write.
fn conflict(kind: &str, key: &Key, object: &Value) -> Problem {
    let import = object["metadata"]["labels"][plan::IMPORT_LABEL]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    Problem {
        import: Key {
            namespace: key.namespace.clone(),
            name: import,
        },
        reason: "RouteConflict",
        message: format!(
            "{kind} {}/{} exists and was not written by the ClusterSet IP route helper; \
             it is left alone and this service gets no route in this cluster",
            key.namespace, key.name
        ),
    }
}

/// A Warning Event on the ServiceImport for each problem not announced before (problems
/// that went away may be announced again when they come back).
async fn announce(
    recorder: &Recorder,
    imports: &[Arc<ServiceImport>],
    problems: Vec<Problem>,
    announced: &mut BTreeSet<(Key, String)>,
) {
    let now: BTreeSet<(Key, String)> = problems
        .iter()
        .map(|p| (p.import.clone(), p.reason.to_owned()))
        .collect();
    announced.retain(|p| now.contains(p));
    for problem in problems {
        let id = (problem.import.clone(), problem.reason.to_owned());
        if announced.contains(&id) {
            continue;
        }
        let Some(import) = imports.iter().find(|i| {
            i.namespace().as_deref() == Some(problem.import.namespace.as_str())
                && i.name_any() == problem.import.name
        }) else {
            continue;
        };
        warn!(namespace = %problem.import.namespace, import = %problem.import.name, reason = problem.reason, "{}", problem.message);
        let reference: ObjectReference = import.object_ref(&());
        publish(
            recorder,
            &reference,
            EventType::Warning,
            problem.reason,
            "Route",
            problem.message,
        )
        .await;
        announced.insert(id);
    }
}

/// The command line of `flotilla clusterset-routes`.
#[derive(clap::Args, Clone, Debug)]
pub struct Args {}

/// Runs `flotilla clusterset-routes` with `client` (the CLI builds it from the global
/// `--kubeconfig` and `--context`, else `$KUBECONFIG`, else the in-cluster configuration).
pub async fn run(client: Client, _args: Args) -> anyhow::Result<()> {
    let prepared = prepare(client).await?;
    info!("keeping ClusterSet IP routes (Services <svc>-clusterset)");
    keep(prepared).await;
    anyhow::bail!("the ClusterSet IP route helper stopped")
}
