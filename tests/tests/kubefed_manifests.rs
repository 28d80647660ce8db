//! kubefed manifests that relied on kubefed's update-based sync propagate unchanged:
//! Service and container ports without `protocol` (server-side apply needs every key of
//! an associative list, and older API servers publish no default for it).

use anyhow::ensure;
use flotilla_tests::{
    federation::{Federation, apply, federated, federation},
    host::FederatedRef,
    init_tracing,
    requests::writes,
    scenario,
    scenarios::run_all,
};
use std::time::Duration;

use flotilla_api::{FederatedTypeConfig, KubeFedCluster};
use k8s_openapi::{
    api::{apps::v1::Deployment, core::v1::Service},
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api,
    api::{Patch, PatchParams},
};
use serde_json::json;

const NS: &str = "kubefed-sample";

/// Both scenarios share one federation, each in its own namespace: the schema scenario
/// restarts only the ConfigMap type's controller and counts only FederatedConfigMap
/// writes, which the other scenario (Services and Deployments) never makes.
#[tokio::test]
async fn kubefed_manifests_on_one_federation() -> anyhow::Result<()> {
    init_tracing();
    let fed = federation(2).await?;
    let fed = &fed;
    run_all(
        fed,
        vec![
            scenario!(fed, NS => services_and_deployments_whose_ports_omit_protocol_propagate_with_tcp),
            scenario!(
                fed,
                "kubefed-schema",
                a_crd_that_prunes_status_messages_causes_no_status_write_loop
            ),
        ],
    )
    .await;
    Ok(())
}

async fn services_and_deployments_whose_ports_omit_protocol_propagate_with_tcp(
    fed: &Federation,
) -> anyhow::Result<()> {
    // As kubefed's example/sample1 writes them: no `protocol` anywhere.
    let svc = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedService",
        "metadata": {"name": "test-service", "namespace": NS},
        "spec": {
            "template": {"spec": {"selector": {"app": "nginx"}, "type": "NodePort", "ports": [{"name": "http", "port": 80}]}},
            "placement": {"clusters": [{"name": "member1"}, {"name": "member2"}]}
        }
    });
    apply(&fed.host, &federated("Service", "services"), Some(NS), &svc).await?;
    let deploy = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedDeployment",
        "metadata": {"name": "test-deployment", "namespace": NS},
        "spec": {
            "template": {"spec": {
                "replicas": 3,
                "selector": {"matchLabels": {"app": "nginx"}},
                "template": {"metadata": {"labels": {"app": "nginx"}}, "spec": {"containers": [
                    {"name": "nginx", "image": "nginx", "ports": [{"containerPort": 80}]}
                ]}}
            }},
            "placement": {"clusters": [{"name": "member1"}, {"name": "member2"}]}
        }
    });
    apply(
        &fed.host,
        &federated("Deployment", "deployments"),
        Some(NS),
        &deploy,
    )
    .await?;

    for (kind, plural, name) in [
        ("Service", "services", "test-service"),
        ("Deployment", "deployments", "test-deployment"),
    ] {
        FederatedRef::new(&fed.host, &federated(kind, plural), NS, name)
            .wait_propagated()
            .await?;
    }
    for m in &fed.members {
        let svc = Api::<Service>::namespaced(m.clone(), NS)
            .get("test-service")
            .await?;
        let ports = svc.spec.and_then(|s| s.ports).unwrap_or_default();
        ensure!(
            ports.len() == 1 && ports[0].protocol.as_deref() == Some("TCP"),
            "{ports:?}"
        );
        let d = Api::<Deployment>::namespaced(m.clone(), NS)
            .get("test-deployment")
            .await?;
        let container = d
            .spec
            .and_then(|s| s.template.spec)
            .map(|p| p.containers)
            .unwrap_or_default();
        let port = container
            .first()
            .and_then(|c| c.ports.as_ref()?.first().cloned());
        ensure!(
            port.as_ref().and_then(|p| p.protocol.as_deref()) == Some("TCP"),
            "{port:?}"
        );
    }
    Ok(())
}

/// kubefed's own CRDs declare no `status.clusters[].message`: the API server drops the
/// message Flotilla writes. The controller must compare statuses as they are stored, or
/// every status write (a watch event) reconciles and writes again, forever.
async fn a_crd_that_prunes_status_messages_causes_no_status_write_loop(
    fed: &Federation,
    ns: &str,
) -> anyhow::Result<()> {
    // kubefed's status schema: no per-cluster message.
    let crds: Api<CustomResourceDefinition> = Api::all(fed.host.clone());
    let path = "/spec/versions/0/schema/openAPIV3Schema/properties/status/properties/clusters/items/properties/message";
    let patch: json_patch::Patch = serde_json::from_value(json!([{"op": "remove", "path": path}]))?;
    crds.patch(
        "federatedconfigmaps.types.kubefed.io",
        &PatchParams::default(),
        &Patch::<()>::Json(patch),
    )
    .await?;
    // The type's controller reads the schema when it starts: restart it.
    let ftcs: Api<FederatedTypeConfig> =
        Api::namespaced(fed.host.clone(), "kube-federation-system");
    for mode in ["Disabled", "Enabled"] {
        let p = json!({"spec": {"propagation": mode}});
        ftcs.patch("configmaps", &PatchParams::default(), &Patch::Merge(&p))
            .await?;
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // member1 fails (a bad override path), member2 propagates.
    let cm = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
        "metadata": {"name": "pruned", "namespace": ns},
        "spec": {
            "template": {"data": {"k": "v"}},
            "placement": {"clusters": [{"name": "member1"}, {"name": "member2"}]},
            "overrides": [{"clusterName": "member1", "clusterOverrides": [
                {"path": "/data/k/deeper/still", "value": "x"}
            ]}]
        }
    });
    apply(
        &fed.host,
        &federated("ConfigMap", "configmaps"),
        Some(ns),
        &cm,
    )
    .await?;
    let fed_cm = FederatedRef::new(
        &fed.host,
        &federated("ConfigMap", "configmaps"),
        ns,
        "pruned",
    );
    fed_cm
        .wait_cluster_reasons(&[("member1", "ApplyOverridesFailed"), ("member2", "")])
        .await?;
    // Every object reconciled again (a cluster's labels changed): the failing object's
    // status is unchanged, so the host must see no request for it.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let resources = ["federatedconfigmaps"];
    let before = writes(&fed.host, &resources).await?;
    let clusters: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), "kube-federation-system");
    let label = json!({"metadata": {"labels": {"resync": "1"}}});
    clusters
        .patch("member2", &PatchParams::default(), &Patch::Merge(&label))
        .await?;
    tokio::time::sleep(Duration::from_secs(4)).await;
    let after = writes(&fed.host, &resources).await?;
    ensure!(
        after == before,
        "{} write requests for federated ConfigMaps after a resync that changed nothing",
        after - before
    );
    Ok(())
}
