//! kubefed manifests that relied on kubefed's update-based sync propagate unchanged:
//! Service and container ports without `protocol` (server-side apply needs every key of
//! an associative list, and older API servers publish no default for it).

use anyhow::ensure;
use flotilla_tests::{
    federation::{apply, federated, federated_namespace, federation},
    host::FederatedRef,
    init_tracing,
};
use k8s_openapi::api::{apps::v1::Deployment, core::v1::Service};
use kube::Api;
use serde_json::json;

const NS: &str = "kubefed-sample";

#[tokio::test]
async fn services_and_deployments_whose_ports_omit_protocol_propagate_with_tcp()
-> anyhow::Result<()> {
    init_tracing();
    let fed = federation(2).await?;
    federated_namespace(&fed, NS).await?;
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
