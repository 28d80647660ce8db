//! Propagation end to end on real clusters: create, update, placement changes, overrides,
//! steady state, drift repair, bad overrides and an unready member — for ConfigMaps,
//! Deployments and a custom resource type.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_crds::{
    DEFAULT_NAMESPACE,
    core::Scope,
    crdgen::{self, TargetType},
    federated::FederatedStatus,
};
use flotilla_tests::{
    federation::{Federation, apply, federated, federated_namespace, federation},
    wait_for,
};
use k8s_openapi::{
    api::{
        apps::v1::Deployment,
        core::v1::{ConfigMap, Service},
    },
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
    core::ApiResource,
};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(30);

fn fed_cm(name: &str, data: Value, placement: Value, overrides: Value) -> Value {
    json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
        "metadata": {"name": name, "namespace": "demo"},
        "spec": {"template": {"data": data}, "placement": placement, "overrides": overrides}
    })
}

async fn cm_data(client: &Client, name: &str) -> anyhow::Result<Option<BTreeMap<String, String>>> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "demo");
    Ok(api.get_opt(name).await?.map(|c| c.data.unwrap_or_default()))
}

async fn status_of(
    client: &Client,
    ar: &ApiResource,
    ns: &str,
    name: &str,
) -> anyhow::Result<FederatedStatus> {
    let api: Api<DynamicObject> = Api::namespaced_with(client.clone(), ns, ar);
    Ok(FederatedStatus::from_dynamic(&api.get(name).await?))
}

/// Waits until the status describes the current generation and says Propagation=True.
async fn wait_propagated(
    fed: &Federation,
    ar: &ApiResource,
    name: &str,
) -> anyhow::Result<FederatedStatus> {
    wait_for(T, &format!("{name} propagated"), || async {
        let api: Api<DynamicObject> = Api::namespaced_with(fed.host.clone(), "demo", ar);
        let obj = api.get(name).await?;
        let s = FederatedStatus::from_dynamic(&obj);
        ensure!(
            s.observed_generation == obj.metadata.generation.unwrap_or(0),
            "status is of an older generation: {s:?}"
        );
        let ok = s.propagation().is_some_and(|c| c.status == "True");
        ensure!(ok, "status: {s:?}");
        Ok(s)
    })
    .await
}

async fn ready_federation() -> anyhow::Result<Federation> {
    let fed = federation(2).await?;
    federated_namespace(&fed, "demo").await?;
    for m in &fed.members {
        let ns: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(m.clone());
        wait_for(T, "namespace demo in member", || async {
            ensure!(ns.get_opt("demo").await?.is_some(), "missing");
            Ok(())
        })
        .await?;
    }
    Ok(fed)
}

#[tokio::test]
async fn configmaps_are_created_updated_and_moved_with_placement_and_overrides()
-> anyhow::Result<()> {
    let fed = ready_federation().await?;
    let ar = federated("ConfigMap", "configmaps");
    apply(
        &fed.host,
        &ar,
        Some("demo"),
        &fed_cm(
            "settings",
            json!({"color": "blue"}),
            json!({"clusters": [{"name": "member1"}, {"name": "member2"}]}),
            json!([{"clusterName": "member2", "clusterOverrides": [{"op": "add", "path": "/data/region", "value": "eu"}]}]),
        ),
    )
    .await?;
    wait_for(T, "configmap in both members", || async {
        let m1 = cm_data(&fed.members[0], "settings")
            .await?
            .context("absent in member1")?;
        let m2 = cm_data(&fed.members[1], "settings")
            .await?
            .context("absent in member2")?;
        ensure!(
            m1.get("color").map(String::as_str) == Some("blue") && !m1.contains_key("region"),
            "member1: {m1:?}"
        );
        ensure!(
            m2.get("region").map(String::as_str) == Some("eu"),
            "member2 override missing: {m2:?}"
        );
        Ok(())
    })
    .await?;
    let status = wait_propagated(&fed, &ar, "settings").await?;
    assert_eq!(status.clusters.len(), 2);

    // The managed label is on every member object.
    let cms: Api<ConfigMap> = Api::namespaced(fed.members[0].clone(), "demo");
    let live = cms.get("settings").await?;
    assert_eq!(
        live.labels().get("kubefed.io/managed").map(String::as_str),
        Some("true")
    );

    // Template update reaches both members; a removed key is removed.
    apply(
        &fed.host,
        &ar,
        Some("demo"),
        &fed_cm(
            "settings",
            json!({"shape": "round"}),
            json!({"clusters": [{"name": "member1"}, {"name": "member2"}]}),
            json!([{"clusterName": "member2", "clusterOverrides": [{"op": "add", "path": "/data/region", "value": "eu"}]}]),
        ),
    )
    .await?;
    wait_for(T, "template update in both members", || async {
        for m in &fed.members {
            let d = cm_data(m, "settings").await?.context("absent")?;
            ensure!(
                d.get("shape").map(String::as_str) == Some("round") && !d.contains_key("color"),
                "{d:?}"
            );
        }
        Ok(())
    })
    .await?;

    // Placement change: removed from the deselected member only.
    apply(
        &fed.host,
        &ar,
        Some("demo"),
        &fed_cm(
            "settings",
            json!({"shape": "round"}),
            json!({"clusters": [{"name": "member2"}]}),
            json!([]),
        ),
    )
    .await?;
    wait_for(T, "removed from member1 only", || async {
        ensure!(
            cm_data(&fed.members[0], "settings").await?.is_none(),
            "still in member1"
        );
        ensure!(
            cm_data(&fed.members[1], "settings").await?.is_some(),
            "gone from member2"
        );
        Ok(())
    })
    .await?;
    let status = wait_propagated(&fed, &ar, "settings").await?;
    assert_eq!(
        status
            .clusters
            .iter()
            .map(|c| c.name.as_str())
            .collect::<Vec<_>>(),
        vec!["member2"]
    );
    Ok(())
}

#[tokio::test]
async fn deployments_get_per_cluster_replicas_and_a_custom_resource_type_propagates()
-> anyhow::Result<()> {
    let fed = ready_federation().await?;
    let ar = federated("Deployment", "deployments");
    let fdeploy = |image: &str| {
        json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedDeployment",
            "metadata": {"name": "web", "namespace": "demo"},
            "spec": {
                "template": {"spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{"name": "web", "image": image}]}}
                }},
                "placement": {"clusterSelector": {}},
                "overrides": [{"clusterName": "member2", "clusterOverrides": [{"path": "/spec/replicas", "value": 5}]}]
            }
        })
    };
    apply(&fed.host, &ar, Some("demo"), &fdeploy("nginx:1.25")).await?;
    wait_for(T, "deployments with per-cluster replicas", || async {
        let d1: Api<Deployment> = Api::namespaced(fed.members[0].clone(), "demo");
        let d2: Api<Deployment> = Api::namespaced(fed.members[1].clone(), "demo");
        let r1 = d1
            .get_opt("web")
            .await?
            .context("absent in member1")?
            .spec
            .and_then(|s| s.replicas);
        let r2 = d2
            .get_opt("web")
            .await?
            .context("absent in member2")?
            .spec
            .and_then(|s| s.replicas);
        ensure!(r1 == Some(2) && r2 == Some(5), "replicas {r1:?} {r2:?}");
        Ok(())
    })
    .await?;
    wait_propagated(&fed, &ar, "web").await?;

    // Status collection (the FTC's statusCollection): each member's Deployment status is
    // reported per cluster.
    let ftcs: Api<flotilla_crds::FederatedTypeConfig> =
        Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    ftcs.patch(
        "deployments.apps",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"statusCollection": "Enabled"}})),
    )
    .await?;
    wait_for(T, "remote status of both members", || async {
        let s = status_of(&fed.host, &ar, "demo", "web").await?;
        ensure!(s.clusters.len() == 2, "{s:?}");
        for c in &s.clusters {
            let rs = c.remote_status.as_ref().context("no remoteStatus")?;
            ensure!(rs.get("observedGeneration").is_some(), "{}: {rs}", c.name);
        }
        Ok(())
    })
    .await?;

    apply(&fed.host, &ar, Some("demo"), &fdeploy("nginx:1.26")).await?;
    wait_for(T, "image update in both members", || async {
        for m in &fed.members {
            let api: Api<Deployment> = Api::namespaced(m.clone(), "demo");
            let d = api.get("web").await?;
            let image = d
                .spec
                .and_then(|s| s.template.spec)
                .map(|p| p.containers[0].image.clone().unwrap_or_default());
            ensure!(image.as_deref() == Some("nginx:1.26"), "image {image:?}");
        }
        Ok(())
    })
    .await?;

    // A custom resource type, enabled through its own FederatedTypeConfig.
    let widget_crd: CustomResourceDefinition = serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.com"},
        "spec": {"group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string"}}}}}}}]}
    }))?;
    let target = TargetType {
        api: flotilla_crds::core::ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            kind: "Widget".into(),
            plural_name: "widgets".into(),
            scope: Scope::Namespaced,
        },
        short_names: vec![],
    };
    for c in std::iter::once(&fed.host).chain(fed.members.iter()) {
        let api: Api<CustomResourceDefinition> = Api::all(c.clone());
        api.patch(
            "widgets.example.com",
            &PatchParams::apply("flotilla-tests"),
            &Patch::Apply(&widget_crd),
        )
        .await?;
    }
    let crds: Api<CustomResourceDefinition> = Api::all(fed.host.clone());
    let fcrd = crdgen::federated_crd(&target, None);
    crds.patch(
        &fcrd.name_any(),
        &PatchParams::apply("flotilla-tests"),
        &Patch::Apply(&fcrd),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ftc = crdgen::federated_type_config(&target, DEFAULT_NAMESPACE);
    let ftcs: Api<flotilla_crds::FederatedTypeConfig> =
        Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    ftcs.patch(
        &ftc.name_any(),
        &PatchParams::apply("flotilla-tests"),
        &Patch::Apply(&ftc),
    )
    .await?;
    let war = federated("Widget", "widgets");
    let fwidget = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedWidget",
        "metadata": {"name": "gear", "namespace": "demo"},
        "spec": {"template": {"spec": {"size": 3, "color": "red"}}, "placement": {"clusters": [{"name": "member1"}]},
            "overrides": [{"clusterName": "member1", "clusterOverrides": [{"path": "/spec/size", "value": 7}]}]}
    });
    wait_for(T, "federated widget accepted", || async {
        apply(&fed.host, &war, Some("demo"), &fwidget).await
    })
    .await?;
    let widget_ar = ApiResource {
        group: "example.com".into(),
        version: "v1".into(),
        api_version: "example.com/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    wait_for(T, "widget only in member1 with the override", || async {
        let w1: Api<DynamicObject> =
            Api::namespaced_with(fed.members[0].clone(), "demo", &widget_ar);
        let w2: Api<DynamicObject> =
            Api::namespaced_with(fed.members[1].clone(), "demo", &widget_ar);
        let w = w1.get_opt("gear").await?.context("absent in member1")?;
        ensure!(
            w.data["spec"]["size"] == json!(7),
            "spec {:?}",
            w.data["spec"]
        );
        ensure!(
            w2.get_opt("gear").await?.is_none(),
            "must not be in member2"
        );
        Ok(())
    })
    .await?;
    wait_propagated(&fed, &war, "gear").await?;
    Ok(())
}

#[tokio::test]
async fn steady_state_makes_no_writes_drift_is_repaired_and_member_fields_are_kept()
-> anyhow::Result<()> {
    let fed = ready_federation().await?;
    let ar = federated("ConfigMap", "configmaps");
    apply(
        &fed.host,
        &ar,
        Some("demo"),
        &fed_cm(
            "steady",
            json!({"k": "v"}),
            json!({"clusterSelector": {}}),
            json!([]),
        ),
    )
    .await?;
    wait_propagated(&fed, &ar, "steady").await?;
    let sar = federated("Service", "services");
    let fsvc = |port: i64| {
        json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedService",
            "metadata": {"name": "front", "namespace": "demo"},
            "spec": {"template": {"spec": {"selector": {"app": "web"}, "ports": [{"name": "http", "port": port, "protocol": "TCP"}]}},
                "placement": {"clusterSelector": {}}}
        })
    };
    apply(&fed.host, &sar, Some("demo"), &fsvc(80)).await?;
    wait_propagated(&fed, &sar, "front").await?;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let rv = |c: Client| async move {
        let api: Api<ConfigMap> = Api::namespaced(c, "demo");
        anyhow::Ok(api.get("steady").await?.resource_version())
    };
    let before: Vec<_> = vec![
        rv(fed.members[0].clone()).await?,
        rv(fed.members[1].clone()).await?,
    ];
    let host_api: Api<DynamicObject> = Api::namespaced_with(fed.host.clone(), "demo", &ar);
    let host_rv = host_api.get("steady").await?.resource_version();
    // Force a full resync: a cluster label change requeues every federated object.
    let kfcs: Api<flotilla_crds::KubeFedCluster> =
        Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    kfcs.patch(
        "member1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"resync": "1"}}})),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after: Vec<_> = vec![
        rv(fed.members[0].clone()).await?,
        rv(fed.members[1].clone()).await?,
    ];
    assert_eq!(
        before, after,
        "a resync of converged objects must not write to members"
    );
    assert_eq!(
        host_rv,
        host_api.get("steady").await?.resource_version(),
        "nor to the host"
    );

    // Drift: a member-side edit of an owned field is reverted.
    let m1: Api<ConfigMap> = Api::namespaced(fed.members[0].clone(), "demo");
    m1.patch(
        "steady",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "edited"}})),
    )
    .await?;
    wait_for(T, "drift reverted", || async {
        let d = cm_data(&fed.members[0], "steady")
            .await?
            .context("absent")?;
        ensure!(d.get("k").map(String::as_str) == Some("v"), "{d:?}");
        Ok(())
    })
    .await?;

    // A member object deleted in the member (right after Flotilla wrote it) comes back.
    m1.delete("steady", &Default::default()).await?;
    wait_for(T, "deleted member object recreated", || async {
        let d = cm_data(&fed.members[0], "steady")
            .await?
            .context("absent")?;
        ensure!(d.get("k").map(String::as_str) == Some("v"), "{d:?}");
        Ok(())
    })
    .await?;

    // The member-assigned clusterIP survives a template update.
    let svcs: Api<Service> = Api::namespaced(fed.members[1].clone(), "demo");
    let ip_before = svcs.get("front").await?.spec.and_then(|s| s.cluster_ip);
    assert!(ip_before.is_some());
    apply(&fed.host, &sar, Some("demo"), &fsvc(8080)).await?;
    wait_for(T, "service port updated", || async {
        let s = svcs.get("front").await?.spec.context("no spec")?;
        let port = s.ports.as_ref().and_then(|p| p.first()).map(|p| p.port);
        ensure!(port == Some(8080), "port {port:?}");
        ensure!(
            s.cluster_ip == ip_before,
            "clusterIP changed: {:?} -> {:?}",
            ip_before,
            s.cluster_ip
        );
        Ok(())
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn a_bad_override_fails_only_its_cluster_and_an_unready_member_catches_up()
-> anyhow::Result<()> {
    let fed = ready_federation().await?;
    let ar = federated("ConfigMap", "configmaps");
    apply(
        &fed.host,
        &ar,
        Some("demo"),
        &fed_cm(
            "partial",
            json!({"k": "v"}),
            json!({"clusterSelector": {}}),
            json!([{"clusterName": "member2", "clusterOverrides": [{"op": "replace", "path": "/data/missing/deeper", "value": "x"}]}]),
        ),
    )
    .await?;
    let status = wait_for(T, "member2 ApplyOverridesFailed", || async {
        let s = status_of(&fed.host, &ar, "demo", "partial").await?;
        let m2 = s
            .clusters
            .iter()
            .find(|c| c.name == "member2")
            .map(|c| c.status.clone());
        ensure!(m2.as_deref() == Some("ApplyOverridesFailed"), "{s:?}");
        Ok(s)
    })
    .await?;
    let m2 = status
        .clusters
        .iter()
        .find(|c| c.name == "member2")
        .context("member2")?;
    assert!(
        m2.message.contains("/data/missing/deeper"),
        "message names the path: {}",
        m2.message
    );
    assert_eq!(
        status.propagation().map(|c| c.reason.as_str()),
        Some("CheckClusters")
    );
    assert!(
        cm_data(&fed.members[0], "partial").await?.is_some(),
        "member1 propagated normally"
    );
    assert!(cm_data(&fed.members[1], "partial").await?.is_none());

    // A placement naming a cluster that is not registered says so in status.
    apply(
        &fed.host,
        &ar,
        Some("demo"),
        &fed_cm(
            "typo",
            json!({"k": "v"}),
            json!({"clusters": [{"name": "member1"}, {"name": "membr2"}]}),
            json!([]),
        ),
    )
    .await?;
    wait_for(T, "unregistered cluster reported", || async {
        let s = status_of(&fed.host, &ar, "demo", "typo").await?;
        let ghost = s
            .clusters
            .iter()
            .find(|c| c.name == "membr2")
            .context("membr2 not in status")?;
        ensure!(
            ghost.status == "ClusterNotReady" && ghost.message.contains("no KubeFedCluster membr2"),
            "{ghost:?}"
        );
        ensure!(
            cm_data(&fed.members[0], "typo").await?.is_some(),
            "member1 still propagated"
        );
        Ok(())
    })
    .await?;

    // member1 stops; an update reaches member2 and member1 reports ClusterNotReady.
    apply(
        &fed.host,
        &ar,
        Some("demo"),
        &fed_cm(
            "both",
            json!({"v": "1"}),
            json!({"clusterSelector": {}}),
            json!([]),
        ),
    )
    .await?;
    wait_propagated(&fed, &ar, "both").await?;
    fed.env.stop_apiserver("member1").await?;
    apply(
        &fed.host,
        &ar,
        Some("demo"),
        &fed_cm(
            "both",
            json!({"v": "2"}),
            json!({"clusterSelector": {}}),
            json!([]),
        ),
    )
    .await?;
    wait_for(T, "member2 updated, member1 ClusterNotReady", || async {
        let d = cm_data(&fed.members[1], "both").await?.context("absent")?;
        ensure!(d.get("v").map(String::as_str) == Some("2"), "{d:?}");
        let s = status_of(&fed.host, &ar, "demo", "both").await?;
        let m1 = s
            .clusters
            .iter()
            .find(|c| c.name == "member1")
            .map(|c| c.status.clone());
        ensure!(m1.as_deref() == Some("ClusterNotReady"), "{s:?}");
        Ok(())
    })
    .await?;
    fed.env.start_apiserver("member1").await?;
    wait_for(Duration::from_secs(60), "member1 caught up", || async {
        let d = cm_data(&fed.members[0], "both").await?.context("absent")?;
        ensure!(d.get("v").map(String::as_str) == Some("2"), "{d:?}");
        Ok(())
    })
    .await?;
    wait_propagated(&fed, &ar, "both").await?;
    Ok(())
}
