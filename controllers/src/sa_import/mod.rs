//! ServiceAccountImport controller: for each import in the host, a kubeconfig Secret in the
//! import's namespace holding a bounded token of a ServiceAccount in a member cluster,
//! obtained through the member's TokenRequest API with the registry's member client and
//! refreshed before it expires.
//!
//! This module wires the caches and the queue: every import, the KubeFedClusters of the
//! control-plane namespace (endpoint and CA for the kubeconfig), the Secrets the controller
//! wrote (label-selected, cached without their data, so a deleted Secret is recreated) and
//! the cluster set's changes. [`reconcile`] does the I/O of one import, [`plan`] decides,
//! [`kubeconfig`] builds the Secret's contents, [`stale`] finds the Secrets left by
//! imports that are gone.

pub mod kubeconfig;
pub mod plan;
pub mod reconcile;
pub mod stale;

use flotilla_multicluster::{
    gate::{Gate, store_ready},
    runner::KeyedRunner,
    tasks::AbortOnDrop,
};
use std::{convert::Infallible, ops::ControlFlow, sync::Arc};

use flotilla_api::{
    KubeFedCluster,
    admiralty::{AnyImport, ImportGroup},
    multicluster::SECRET_LABEL,
};
use k8s_openapi::api::core::v1::Secret;
use kube::{
    Api, Client, ResourceExt,
    runtime::reflector::{self, Store},
};

use self::reconcile::{Ctx, Key};
use crate::{
    metrics::Metrics,
    multicluster::ClusterSet,
    watch::{FailureLog, WatchParams, reflect, watch_into},
    workqueue::WorkQueue,
};

/// The controller's name as the reporting controller of its Events.
const REPORTING_CONTROLLER: &str = "flotilla-serviceaccountimport";

fn queue_all(queue: &WorkQueue<Key>, imports: &Store<AnyImport>) {
    for i in imports.state() {
        queue.add((i.namespace().unwrap_or_default(), i.name_any()));
    }
}

/// The import of `group` that owns a Secret the controller wrote.
fn owner_key(group: ImportGroup, secret: &Secret) -> Option<Key> {
    let ar = group.api_resource();
    let owner = secret.owner_references().iter().find(|o| {
        o.kind == ar.kind && o.api_version == ar.api_version && o.controller == Some(true)
    })?;
    Some((secret.namespace().unwrap_or_default(), owner.name.clone()))
}

/// The caches the controller reads, and the tasks feeding them and the queue.
struct Watches {
    imports: Store<AnyImport>,
    kubefed: Store<KubeFedCluster>,
    secrets: Store<Secret>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

/// The imports of `group`, each change queueing the import.
async fn watch_imports(
    host: Client,
    group: ImportGroup,
    writer: reflector::store::Writer<AnyImport>,
    queue: Arc<WorkQueue<Key>>,
) {
    let params = WatchParams {
        what: "ServiceAccountImport",
        cluster: None,
        label_selector: None,
        config: Default::default(),
        // Admiralty's CRD is optional: until it is installed, its watch fails quietly.
        failures: match group {
            ImportGroup::Flotilla => FailureLog::Warn,
            ImportGroup::Admiralty => FailureLog::Debug,
        },
    };
    let api = Api::<AnyImport>::all_with(host, &group.api_resource());
    watch_into(
        api,
        writer,
        params,
        |_| {},
        move |c| {
            if let Some(o) = c.object() {
                queue.add((o.namespace().unwrap_or_default(), o.name_any()));
            }
            ControlFlow::Continue(())
        },
    )
    .await;
}

/// Starts the watches: imports, KubeFedClusters, the import Secrets and cluster-set
/// changes, each queueing the imports it concerns.
fn watches(
    host: &Client,
    namespace: &str,
    group: ImportGroup,
    clusters: &ClusterSet,
    queue: &Arc<WorkQueue<Key>>,
) -> Watches {
    let import_writer = reflector::store::Writer::<AnyImport>::new(group.api_resource());
    let imports = import_writer.as_reader();
    let kfc_writer = reflector::store::Writer::<KubeFedCluster>::default();
    let kubefed = kfc_writer.as_reader();
    let secret_writer = reflector::store::Writer::<Secret>::default();
    let secrets = secret_writer.as_reader();
    let mut tasks = vec![tokio::spawn(watch_imports(
        host.clone(),
        group,
        import_writer,
        queue.clone(),
    ))];
    {
        let (queue, imports) = (queue.clone(), imports.clone());
        tasks.push(tokio::spawn(reflect(
            Api::namespaced(host.clone(), namespace),
            kfc_writer,
            "KubeFedCluster",
            move |c| {
                if c.object().is_some() {
                    queue_all(&queue, &imports);
                }
            },
        )));
    }
    {
        let queue = queue.clone();
        let params = WatchParams {
            what: "import Secret",
            cluster: None,
            label_selector: Some(format!("{SECRET_LABEL}=true")),
            config: Default::default(),
            failures: FailureLog::Debug,
        };
        tasks.push(tokio::spawn(watch_into(
            Api::<Secret>::all(host.clone()),
            secret_writer,
            params,
            // Tokens are not kept in memory: the reconcile reads the Secret it needs.
            |s| s.data = None,
            move |c| {
                if let Some(s) = c.object()
                    && let Some(key) = owner_key(group, s)
                {
                    queue.add(key);
                }
                ControlFlow::Continue(())
            },
        )));
    }
    {
        let (queue, imports) = (queue.clone(), imports.clone());
        let mut changes = clusters.changes();
        tasks.push(tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                queue_all(&queue, &imports);
            }
        }));
    }
    Watches {
        imports,
        kubefed,
        secrets,
        tasks,
    }
}

/// Runs the controller until the task is aborted. `namespace` is the control-plane
/// namespace, where the KubeFedClusters are.
pub async fn run(host: Client, namespace: String, clusters: ClusterSet, metrics: Arc<Metrics>) {
    let runs = ImportGroup::ALL.map(|group| {
        run_group(
            host.clone(),
            namespace.clone(),
            group,
            clusters.clone(),
            metrics.clone(),
        )
    });
    futures::future::join_all(runs).await;
}

/// One group's imports (Flotilla's or Admiralty's): the same controller, its own caches.
async fn run_group(
    host: Client,
    namespace: String,
    group: ImportGroup,
    clusters: ClusterSet,
    metrics: Arc<Metrics>,
) {
    let queue: Arc<WorkQueue<Key>> = WorkQueue::new();
    let Watches {
        imports,
        kubefed,
        secrets,
        tasks,
    } = watches(&host, &namespace, group, &clusters, &queue);
    // The KubeFedClusters must be known before an import is judged ClusterNotFound.
    let (gate, gate_task) = {
        let (kubefed, imports) = (kubefed.clone(), imports.clone());
        Gate::after(async move { store_ready(&kubefed).await && store_ready(&imports).await })
    };
    let _guard = AbortOnDrop::from(tasks.into_iter().chain([gate_task]).collect::<Vec<_>>());
    let ctx = Arc::new(Ctx {
        recorder: crate::events::recorder(host.clone(), REPORTING_CONTROLLER),
        host,
        clusters,
        group,
        imports,
        kubefed,
        secrets,
        namespace,
        metrics,
        written: Default::default(),
    });
    // One worker, as before the runner: imports are few and each waits on a TokenRequest.
    let ages = ctx.metrics.queue_ages.clone();
    KeyedRunner::new(format!("serviceaccountimport-{}", group.as_str()), queue)
        .gate(gate)
        .queue_ages(ages)
        .run(move |key: Key| {
            let ctx = ctx.clone();
            async move { Ok::<_, Infallible>(ctx.reconcile(&key).await) }
        })
        .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_secret_maps_back_to_the_import_that_controls_it() {
        let s: Secret = serde_json::from_value(json!({
            "metadata": {"name": "x-kubeconfig", "namespace": "foo", "ownerReferences": [
                {"apiVersion": "v1", "kind": "ConfigMap", "name": "other", "uid": "1"},
                {"apiVersion": "multicluster.flotilla.io/v1alpha1", "kind": "ServiceAccountImport",
                 "name": "x", "uid": "2", "controller": true}
            ]}
        }))
        .expect("valid secret");
        assert_eq!(
            owner_key(ImportGroup::Flotilla, &s),
            Some(("foo".into(), "x".into()))
        );
        assert_eq!(
            owner_key(ImportGroup::Admiralty, &s),
            None,
            "another group's"
        );
        let orphan: Secret =
            serde_json::from_value(json!({"metadata": {"name": "y", "namespace": "foo"}}))
                .expect("valid secret");
        assert_eq!(owner_key(ImportGroup::Flotilla, &orphan), None);
    }
}
