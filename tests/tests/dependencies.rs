//! Dependencies that follow a workload (`spec.propagateDependencies`) on real clusters: a
//! FederatedDeployment scheduled on one of two members takes the ConfigMap, Secret and
//! ServiceAccount its pod template references along; a host edit reaches the copy; a
//! NoExecute taint moves the workload and its dependencies to the other member and removes
//! them from the first; a dependency missing in the host is reported while the workload
//! still propagates; a ConfigMap the user federates explicitly is left to its own
//! placement; deleting the workload removes the copies.

use std::collections::BTreeMap;

use anyhow::{Context as _, ensure};
use flotilla_api::{
    DEFAULT_NAMESPACE, KubeFedCluster, MANAGED_LABEL, dependency_plan::DependencyStatus,
};
use flotilla_core::dependencies::{DEPENDENCY_LABEL, OWNERS_ANNOTATION};
use flotilla_tests::{
    assert::events_about,
    federation::{Federation, apply},
    host::FederatedRef,
    member::{config_maps, data_is, deployments},
    objects::{FederatedObject, config_map, meta},
    setup::federation_with_namespace,
    wait::{TIMEOUT, wait_absent, wait_object, wait_present},
    wait_for,
};
use k8s_openapi::{
    ByteString,
    api::core::v1::{Secret, ServiceAccount},
};
use kube::{
    Api, Client, ResourceExt,
    api::{Patch, PatchParams, PostParams},
};
use serde_json::{Value, json};

const NS: &str = "deps";
/// The Secret's value, which must never show in the workload's status.
const SECRET_VALUE: &str = "s3cr3t-value";

fn secrets(client: &Client) -> Api<Secret> {
    Api::namespaced(client.clone(), NS)
}

fn service_accounts(client: &Client) -> Api<ServiceAccount> {
    Api::namespaced(client.clone(), NS)
}

/// Replaces member `name`'s `spec.taints`.
async fn set_taints(host: &Client, name: &str, taints: Value) -> anyhow::Result<()> {
    let clusters: Api<KubeFedCluster> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    let patch = json!({"spec": {"taints": taints}});
    clusters
        .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    Ok(())
}

/// The host objects: ConfigMaps `settings` and `shared`, Secret `creds`, ServiceAccount
/// `runner`; and a FederatedConfigMap `shared` placed on member2 only.
async fn host_objects(fed: &Federation) -> anyhow::Result<()> {
    let pp = PostParams::default();
    let cms = config_maps(&fed.host, NS);
    cms.create(
        &pp,
        &config_map("settings", &[("team", "a")], &[("mode", "blue")]),
    )
    .await?;
    cms.create(&pp, &config_map("shared", &[], &[("from", "host")]))
        .await?;
    let secret = Secret {
        metadata: meta("creds", Some(NS)),
        data: Some(BTreeMap::from([(
            "password".to_string(),
            ByteString(SECRET_VALUE.as_bytes().to_vec()),
        )])),
        ..Secret::default()
    };
    secrets(&fed.host).create(&pp, &secret).await?;
    let sa = ServiceAccount {
        metadata: meta("runner", Some(NS)),
        ..ServiceAccount::default()
    };
    service_accounts(&fed.host).create(&pp, &sa).await?;
    FederatedObject::config_map(NS, "shared", json!({"from": "federated"}))
        .on_clusters(&["member2"])
        .apply(&fed.host)
        .await?;
    Ok(())
}

/// FederatedDeployment `web` on one cluster (member1 first by name), with its
/// dependencies following it: four that exist and `missing`.
async fn web(host: &Client) -> anyhow::Result<FederatedRef> {
    let obj = FederatedObject::deployment(NS, "web", 1, "nginx:1.25").placement(json!({
        "clusterSelector": {},
        "maxClusters": 1
    }));
    let mut value = obj.to_json();
    value["spec"]["propagateDependencies"] = json!(true);
    value["spec"]["template"]["spec"]["template"]["spec"] = json!({
        "serviceAccountName": "runner",
        "volumes": [
            {"name": "settings", "configMap": {"name": "settings"}},
            {"name": "missing", "configMap": {"name": "missing", "optional": true}}
        ],
        "containers": [{
            "name": "web", "image": "nginx:1.25",
            "env": [{"name": "PASSWORD",
                "valueFrom": {"secretKeyRef": {"name": "creds", "key": "password"}}}],
            "envFrom": [{"configMapRef": {"name": "shared"}}]
        }]
    });
    apply(host, &obj.api_resource(), Some(NS), &value).await?;
    Ok(obj.in_host(host))
}

fn entry<'a>(deps: &'a [DependencyStatus], name: &str) -> anyhow::Result<&'a DependencyStatus> {
    deps.iter()
        .find(|d| d.name == name)
        .with_context(|| format!("no status entry for {name}: {deps:?}"))
}

/// Waits until `status.dependencies` reports the three followers on `cluster`, `shared`
/// as explicit and `missing` as not found.
async fn wait_reported_on(web: &FederatedRef, cluster: &str) -> anyhow::Result<()> {
    wait_for(
        TIMEOUT,
        &format!("dependencies reported on {cluster}"),
        || async {
            let deps = web.status().await?.dependencies;
            for name in ["settings", "creds", "runner"] {
                let d = entry(&deps, name)?;
                ensure!(d.state == "Propagated" && d.clusters == [cluster], "{d:?}");
            }
            let shared = entry(&deps, "shared")?;
            ensure!(
                (shared.state.as_str(), shared.reason.as_str())
                    == ("Explicit", "FederatedExplicitly"),
                "{shared:?}"
            );
            let missing = entry(&deps, "missing")?;
            ensure!(
                (missing.state.as_str(), missing.reason.as_str())
                    == ("NotFound", "DependencyNotFound"),
                "{missing:?}"
            );
            Ok(())
        },
    )
    .await
}

/// Waits until `member` holds the three dependency copies, labelled and owned by `web`.
async fn wait_copies(member: &Client) -> anyhow::Result<()> {
    let cm = wait_present(TIMEOUT, &config_maps(member, NS), "settings").await?;
    owned(&cm)?;
    let secret = wait_present(TIMEOUT, &secrets(member), "creds").await?;
    owned(&secret)?;
    let password = secret.data.as_ref().and_then(|d| d.get("password"));
    ensure!(password.map(|b| b.0.as_slice()) == Some(SECRET_VALUE.as_bytes()));
    let sa = wait_present(TIMEOUT, &service_accounts(member), "runner").await?;
    owned(&sa)
}

/// A copy made for `web`: labelled, and naming it as its only owner.
fn owned<K: ResourceExt>(o: &K) -> anyhow::Result<()> {
    ensure!(o.labels().get(DEPENDENCY_LABEL).map(String::as_str) == Some("true"));
    let owners = o.annotations().get(OWNERS_ANNOTATION).cloned();
    ensure!(
        owners.as_deref() == Some("FederatedDeployment/web"),
        "owners {owners:?}"
    );
    Ok(())
}

/// Whether `member` holds any of the three dependencies.
async fn holds_any(member: &Client) -> anyhow::Result<bool> {
    Ok(config_maps(member, NS).get_opt("settings").await?.is_some()
        || secrets(member).get_opt("creds").await?.is_some()
        || service_accounts(member).get_opt("runner").await?.is_some())
}

async fn wait_copies_gone(member: &Client) -> anyhow::Result<()> {
    wait_absent(TIMEOUT, &config_maps(member, NS), "settings").await?;
    wait_absent(TIMEOUT, &secrets(member), "creds").await?;
    wait_absent(TIMEOUT, &service_accounts(member), "runner").await
}

/// The explicitly federated `shared` in member2 is the FederatedConfigMap's, untouched.
async fn check_explicit_untouched(fed: &Federation) -> anyhow::Result<()> {
    let shared = wait_object(
        TIMEOUT,
        &config_maps(&fed.members[1], NS),
        "shared",
        data_is("from", "federated"),
    )
    .await?;
    ensure!(shared.labels().get(MANAGED_LABEL).map(String::as_str) == Some("true"));
    ensure!(
        !shared.annotations().contains_key(OWNERS_ANNOTATION),
        "the dependency path wrote into the explicit ConfigMap: {:?}",
        shared.annotations()
    );
    ensure!(
        config_maps(&fed.members[0], NS)
            .get_opt("shared")
            .await?
            .is_none(),
        "member1 got the explicitly federated ConfigMap"
    );
    Ok(())
}

#[tokio::test]
async fn dependencies_follow_a_workload_through_a_failover_and_leave_with_it() -> anyhow::Result<()>
{
    let fed = federation_with_namespace(2, NS).await?;
    let (m1, m2) = (&fed.members[0], &fed.members[1]);
    host_objects(&fed).await?;
    let web = web(&fed.host).await?;

    // Scheduled on member1: the workload and its three dependencies, there only.
    wait_present(TIMEOUT, &deployments(m1, NS), "web").await?;
    wait_copies(m1).await?;
    wait_reported_on(&web, "member1").await?;
    ensure!(
        !holds_any(m2).await?,
        "member2 got a dependency of a workload it does not run"
    );
    ensure!(
        deployments(m2, NS).get_opt("web").await?.is_none(),
        "member2 runs web"
    );
    check_explicit_untouched(&fed).await?;
    let status = serde_json::to_string(&web.get().await?.data["status"])?;
    ensure!(
        !status.contains(SECRET_VALUE),
        "the Secret's value is in the status"
    );

    wait_for(TIMEOUT, "a DependencyNotFound Event on web", || async {
        let found = events_about(&fed.host, NS, "web", "DependencyNotFound").await?;
        ensure!(!found.is_empty(), "none yet");
        Ok(())
    })
    .await?;

    // A host edit reaches the copy.
    let patch = json!({"data": {"mode": "green"}});
    config_maps(&fed.host, NS)
        .patch("settings", &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_object(
        TIMEOUT,
        &config_maps(m1, NS),
        "settings",
        data_is("mode", "green"),
    )
    .await?;

    // A NoExecute taint moves the workload to member2; its dependencies follow and leave
    // member1.
    set_taints(
        &fed.host,
        "member1",
        json!([{"key": "drain", "effect": "NoExecute"}]),
    )
    .await?;
    wait_present(TIMEOUT, &deployments(m2, NS), "web").await?;
    wait_copies(m2).await?;
    wait_object(
        TIMEOUT,
        &config_maps(m2, NS),
        "settings",
        data_is("mode", "green"),
    )
    .await?;
    wait_copies_gone(m1).await?;
    wait_reported_on(&web, "member2").await?;
    check_explicit_untouched(&fed).await?;

    // Deleting the workload removes the copies it held.
    web.delete().await?;
    web.wait_gone(TIMEOUT).await?;
    wait_copies_gone(m2).await?;
    check_explicit_untouched(&fed).await?;
    Ok(())
}
