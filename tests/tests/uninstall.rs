//! `flotilla uninstall`: every federated object leaves the host with its finalizer released,
//! and the member objects are kept (unlabelled) or deleted as the user chose; without a
//! controller-manager, the finalizers are released directly and the members left alone.

use std::time::Duration;

use anyhow::ensure;
use flotilla_api::MANAGED_LABEL;
use flotilla_tests::{
    cli::run,
    federation::{Federation, apply, federated, federated_namespace, federation},
    init_tracing, wait_for,
};
use k8s_openapi::api::{
    core::v1::{ConfigMap, Namespace},
    rbac::v1::ClusterRole,
};
use kube::{
    Api, ResourceExt,
    api::{DynamicObject, ListParams},
};
use serde_json::json;

const T: Duration = Duration::from_secs(60);
const ROLE_A: &str = "uninstall-a";
const ROLE_B: &str = "uninstall-b";

/// A federated namespace `ns` with two FederatedConfigMaps and two FederatedClusterRoles
/// (of each, one already marked orphan, one not), all propagated to every member.
async fn scenario(fed: &Federation, ns: &str) -> anyhow::Result<()> {
    federated_namespace(fed, ns).await?;
    for (name, orphan) in [("a", None), ("b", Some("true"))] {
        let mut obj = json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"template": {"data": {"k": "v"}}, "placement": {"clusterSelector": {}}}
        });
        if let Some(v) = orphan {
            obj["metadata"]["annotations"] = json!({"kubefed.io/orphan": v});
        }
        apply(
            &fed.host,
            &federated("ConfigMap", "configmaps"),
            Some(ns),
            &obj,
        )
        .await?;
    }
    // Cluster-scoped twins: no namespace deletion takes them along, so what happens to them
    // is the command's choice alone.
    for (name, orphan) in [(ROLE_A, None), (ROLE_B, Some("true"))] {
        let mut obj = json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedClusterRole",
            "metadata": {"name": name},
            "spec": {
                "template": {"rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]},
                "placement": {"clusterSelector": {}}
            }
        });
        if let Some(v) = orphan {
            obj["metadata"]["annotations"] = json!({"kubefed.io/orphan": v});
        }
        apply(
            &fed.host,
            &federated("ClusterRole", "clusterroles"),
            None,
            &obj,
        )
        .await?;
    }
    for m in &fed.members {
        let cms: Api<ConfigMap> = Api::namespaced(m.clone(), ns);
        let roles: Api<ClusterRole> = Api::all(m.clone());
        wait_for(
            T,
            "both ConfigMaps and ClusterRoles in every member",
            || async {
                cms.get("a").await?;
                cms.get("b").await?;
                roles.get(ROLE_A).await?;
                roles.get(ROLE_B).await?;
                Ok(())
            },
        )
        .await?;
    }
    Ok(())
}

/// No federated object of the scenario's kinds is left in the host.
async fn host_is_empty(fed: &Federation) -> anyhow::Result<()> {
    let kinds = [
        ("ConfigMap", "configmaps"),
        ("Namespace", "namespaces"),
        ("ClusterRole", "clusterroles"),
    ];
    for (kind, plural) in kinds {
        let api: Api<DynamicObject> = Api::all_with(fed.host.clone(), &federated(kind, plural));
        let left = api.list(&ListParams::default()).await?;
        ensure!(
            left.items.is_empty(),
            "{} Federated{kind} left",
            left.items.len()
        );
    }
    Ok(())
}

fn managed(labels: &std::collections::BTreeMap<String, String>) -> bool {
    labels.get(MANAGED_LABEL).is_some_and(|v| v == "true")
}

#[tokio::test]
async fn uninstall_keeping_member_objects_releases_every_federated_object_and_unlabels_the_members()
-> anyhow::Result<()> {
    init_tracing();
    let fed = federation(2).await?;
    scenario(&fed, "keep").await?;
    let r = run(&fed, &["uninstall", "--member-objects", "keep"]).await;
    ensure!(r.code == 0, "{}", r.out);
    ensure!(
        r.out.contains("member objects kept (unlabelled)"),
        "{}",
        r.out
    );
    host_is_empty(&fed).await?;
    for m in &fed.members {
        let ns = Api::<Namespace>::all(m.clone()).get("keep").await?;
        ensure!(
            ns.metadata.deletion_timestamp.is_none(),
            "member namespace deleted"
        );
        ensure!(!managed(ns.labels()), "member namespace still managed");
        let cms: Api<ConfigMap> = Api::namespaced(m.clone(), "keep");
        let roles: Api<ClusterRole> = Api::all(m.clone());
        for (a, b) in [("a", ROLE_A), ("b", ROLE_B)] {
            let cm = cms.get(a).await?;
            ensure!(!managed(cm.labels()), "ConfigMap {a} still managed");
            let role = roles.get(b).await?;
            ensure!(!managed(role.labels()), "ClusterRole {b} still managed");
        }
    }
    Ok(())
}

#[tokio::test]
async fn uninstall_deleting_member_objects_removes_them_even_where_an_object_was_marked_orphan()
-> anyhow::Result<()> {
    init_tracing();
    let fed = federation(2).await?;
    scenario(&fed, "delete").await?;
    let r = run(&fed, &["uninstall", "--member-objects", "delete"]).await;
    ensure!(r.code == 0, "{}", r.out);
    host_is_empty(&fed).await?;
    for m in &fed.members {
        let nss: Api<Namespace> = Api::all(m.clone());
        wait_for(T, "the member namespace deleted", || async {
            let gone = nss
                .get_opt("delete")
                .await?
                .is_none_or(|ns| ns.metadata.deletion_timestamp.is_some());
            ensure!(gone, "still there");
            Ok(())
        })
        .await?;
        // Deleted by the control plane before the command returned — ROLE_B too, though it
        // was marked for orphaning.
        let roles: Api<ClusterRole> = Api::all(m.clone());
        for name in [ROLE_A, ROLE_B] {
            ensure!(
                roles.get_opt(name).await?.is_none(),
                "ClusterRole {name} kept"
            );
        }
    }
    Ok(())
}

#[tokio::test]
async fn uninstall_without_a_controller_releases_finalizers_and_leaves_members_as_they_are()
-> anyhow::Result<()> {
    init_tracing();
    let mut fed = federation(1).await?;
    scenario(&fed, "nocontroller").await?;
    if let Some(cp) = fed.control_plane.take() {
        cp.shutdown().await;
    }
    let refused = run(
        &fed,
        &["uninstall", "--member-objects", "delete", "--no-controller"],
    )
    .await;
    ensure!(
        refused.code != 0
            && refused
                .out
                .contains("--no-controller cannot delete member objects"),
        "{}",
        refused.out
    );
    let r = run(
        &fed,
        &["uninstall", "--member-objects", "keep", "--no-controller"],
    )
    .await;
    ensure!(r.code == 0, "{}", r.out);
    ensure!(r.out.contains("kept as they were"), "{}", r.out);
    host_is_empty(&fed).await?;
    let cms: Api<ConfigMap> = Api::namespaced(fed.members[0].clone(), "nocontroller");
    let roles: Api<ClusterRole> = Api::all(fed.members[0].clone());
    for (a, b) in [("a", ROLE_A), ("b", ROLE_B)] {
        ensure!(managed(cms.get(a).await?.labels()), "ConfigMap {a} changed");
        ensure!(
            managed(roles.get(b).await?.labels()),
            "ClusterRole {b} changed"
        );
    }
    Ok(())
}
