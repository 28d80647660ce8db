//! A restarted control plane recognises up-to-date member objects: with nothing changed,
//! it writes nothing to the members and nothing to the host — and it still propagates
//! what is new. (A fresh process lists member objects, and list items carry no
//! apiVersion/kind; that once made every object look drifted after a restart.)

use std::{sync::Arc, time::Duration};

use anyhow::ensure;
use flotilla_api::{DEFAULT_NAMESPACE, FederatedStatus, MANAGED_LABEL};
use flotilla_controllers::{manager::ControlPlane, metrics::Metrics};
use flotilla_tests::{
    federation::{Federation, apply, federated, federated_namespace, federation},
    init_tracing,
    requests::writes,
    wait_for,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, ListParams},
    core::ApiResource,
};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(90);
const NS: &str = "restart";
const OBJECTS: usize = 12;

fn target(kind: &str) -> ApiResource {
    match kind {
        "ConfigMap" => ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
        "Service" => ApiResource::erase::<k8s_openapi::api::core::v1::Service>(&()),
        _ => ApiResource::erase::<k8s_openapi::api::apps::v1::Deployment>(&()),
    }
}

/// Federated ConfigMaps, a Service and a Deployment (objects the member defaults and
/// adds fields to), all placed in every member.
async fn create_objects(fed: &Federation) -> anyhow::Result<()> {
    let mut objects: Vec<(&str, &str, String, Value)> = (0..OBJECTS)
        .map(|i| {
            let template = json!({"data": {"i": i.to_string()}});
            ("ConfigMap", "configmaps", format!("cm-{i}"), template)
        })
        .collect();
    let service =
        json!({"spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "protocol": "TCP"}]}});
    objects.push(("Service", "services", "web".into(), service));
    let deployment = json!({"spec": {
        "replicas": 1,
        "selector": {"matchLabels": {"app": "web"}},
        "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    }});
    objects.push(("Deployment", "deployments", "web".into(), deployment));
    for (kind, plural, name, template) in objects {
        let obj = json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": format!("Federated{kind}"),
            "metadata": {"name": name, "namespace": NS},
            "spec": {"template": template, "placement": {"clusterSelector": {}}}
        });
        apply(&fed.host, &federated(kind, plural), Some(NS), &obj).await?;
    }
    Ok(())
}

const KINDS: [(&str, &str); 3] = [
    ("ConfigMap", "configmaps"),
    ("Service", "services"),
    ("Deployment", "deployments"),
];

/// Every federated object of the test namespace is `Propagation=True` for its generation.
async fn wait_all_propagated(fed: &Federation) -> anyhow::Result<()> {
    wait_for(T, "every object propagated", || async {
        for (kind, plural) in KINDS {
            let api: Api<DynamicObject> =
                Api::namespaced_with(fed.host.clone(), NS, &federated(kind, plural));
            for o in api.list(&ListParams::default()).await? {
                let s = FederatedStatus::from_dynamic(&o);
                ensure!(
                    s.observed_generation == o.metadata.generation.unwrap_or(0),
                    "{} not reconciled for its generation",
                    o.name_any()
                );
                ensure!(
                    s.propagation().is_some_and(|c| c.status == "True"),
                    "{} not propagated: {s:?}",
                    o.name_any()
                );
            }
        }
        Ok(())
    })
    .await
}

const MEMBER_RESOURCES: [&str; 3] = ["configmaps", "services", "deployments"];
const HOST_RESOURCES: [&str; 3] = [
    "federatedconfigmaps",
    "federatedservices",
    "federateddeployments",
];

/// Writes served so far: per member, then the host.
async fn write_counts(fed: &Federation) -> anyhow::Result<Vec<u64>> {
    let mut counts = Vec::new();
    for m in &fed.members {
        counts.push(writes(m, &MEMBER_RESOURCES).await?);
    }
    counts.push(writes(&fed.host, &HOST_RESOURCES).await?);
    Ok(counts)
}

/// Every managed member object exists (the scenario really propagated).
async fn member_objects(fed: &Federation) -> anyhow::Result<usize> {
    let managed = ListParams::default().labels(&format!("{MANAGED_LABEL}=true"));
    let mut n = 0;
    for (kind, _) in KINDS {
        for m in &fed.members {
            let api: Api<DynamicObject> = Api::namespaced_with(m.clone(), NS, &target(kind));
            n += api.list(&managed).await?.items.len();
        }
    }
    Ok(n)
}

/// A sample of the control plane's metrics, e.g. `flotilla_queue_depth{kind="..."}`.
fn sample(metrics: &Metrics, family: &str, labels: &str) -> u64 {
    let needle = format!("{family}{{{labels}}} ");
    metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(&needle)?.trim().parse().ok())
        .unwrap_or(0)
}

async fn restart(fed: &mut Federation, host: &Client) -> Arc<Metrics> {
    if let Some(cp) = fed.control_plane.take() {
        cp.shutdown().await;
    }
    let metrics = Arc::new(Metrics::new());
    fed.control_plane = Some(ControlPlane::start(
        host.clone(),
        DEFAULT_NAMESPACE,
        metrics.clone(),
    ));
    metrics
}

#[tokio::test]
async fn a_restarted_control_plane_writes_nothing_when_nothing_changed_and_still_propagates_new_objects()
-> anyhow::Result<()> {
    init_tracing();
    let mut fed = federation(2).await?;
    federated_namespace(&fed, NS).await?;
    create_objects(&fed).await?;
    wait_all_propagated(&fed).await?;
    // Let late watch events and status writes of the first run settle.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let objects = member_objects(&fed).await?;
    ensure!(objects == 2 * (OBJECTS + 2), "{objects} member objects");
    let before = write_counts(&fed).await?;

    let host = fed.host.clone();
    let metrics = restart(&mut fed, &host).await;
    // Every object reconciled by the new process at least once after its member caches
    // synced (each member's Synced event requeues every object).
    // Every object reconciled by the new process (each member's Synced event requeues
    // every object; the queue keeps one entry per key), and nothing left in its queue.
    wait_for(
        T,
        "the restarted control plane reconciled everything",
        || async {
            let kind = "kind=\"FederatedConfigMap\"";
            let success = format!("{kind},result=\"success\"");
            let done = sample(&metrics, "flotilla_reconciles_total", &success);
            let queued = sample(&metrics, "flotilla_queue_depth", kind);
            ensure!(
                done >= OBJECTS as u64 && queued == 0,
                "{done} reconciles so far, {queued} queued"
            );
            Ok(())
        },
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let after = write_counts(&fed).await?;
    ensure!(
        before == after,
        "writes after the restart (member1, member2, host): before {before:?}, after {after:?}"
    );

    // Still propagating: a new object reaches both members.
    let obj = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
        "metadata": {"name": "after-restart", "namespace": NS},
        "spec": {"template": {"data": {"k": "v"}}, "placement": {"clusterSelector": {}}}
    });
    apply(
        &fed.host,
        &federated("ConfigMap", "configmaps"),
        Some(NS),
        &obj,
    )
    .await?;
    for m in &fed.members {
        let api: Api<DynamicObject> = Api::namespaced_with(m.clone(), NS, &target("ConfigMap"));
        wait_for(T, "the new object in a member", || async {
            api.get("after-restart").await?;
            Ok(())
        })
        .await?;
    }
    Ok(())
}
