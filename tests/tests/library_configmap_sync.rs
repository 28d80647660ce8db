//! The second example end to end, with the test kit: `configmap_sync` keeps a hub's
//! ConfigMap in every cluster of a ClusterProfile set (profiles of another cluster manager,
//! reached through an exec credential plugin and each member's fault proxy). Copies appear,
//! follow the source, are restored when edited and recreated when deleted; a cluster that
//! joins gets one; a black-holed cluster does not hold up the others and catches up when
//! healed; a slow cluster keeps up; deleting the source collects every copy.

use crate::configmap_sync as sync;

use std::collections::BTreeMap;

use crate::library_support::*;
use anyhow::ensure;
use flotilla_localenv::testkit::TestClusters;
use flotilla_multicluster::{
    ClusterSet,
    provider::{
        kubeconfig::KubeconfigProvider,
        profiles::{AccessProviders, ClusterProfileProvider},
    },
};
use flotilla_tests::wait::{wait_absent, wait_object};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const NS: &str = "apps";
const NAME: &str = "shared-config";

async fn put_source(hub: &Client, value: &str) -> anyhow::Result<()> {
    let cm = json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": NAME, "namespace": NS}, "data": {"setting": value}});
    Api::<ConfigMap>::namespaced(hub.clone(), NS)
        .patch(
            NAME,
            &PatchParams::apply("library-test").force(),
            &Patch::Apply(cm),
        )
        .await?;
    Ok(())
}

/// Waits until the copy in `client`'s cluster says `setting: value`.
async fn wait_copy(client: &Client, value: &str) -> anyhow::Result<()> {
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), NS);
    let want = BTreeMap::from([("setting".to_string(), value.to_string())]);
    wait_object(TIMEOUT, &api, NAME, |cm| {
        ensure!(cm.data.as_ref() == Some(&want), "data {:?}", cm.data);
        Ok(())
    })
    .await?;
    Ok(())
}

/// A profile for `member` reaching it through its fault proxy.
async fn profile_for(kit: &TestClusters, hub: &Client, member: &str) -> anyhow::Result<()> {
    let server = kit.proxied_config(member)?.cluster_url.to_string();
    let server = server.trim_end_matches('/');
    let ca = kit.cluster(member)?.ca_pem().to_owned();
    put_profile(hub, member, "fleet-creds", server, &ca).await
}

#[tokio::test]
async fn one_configmap_is_kept_in_every_cluster_of_the_profile_set() -> anyhow::Result<()> {
    flotilla_tests::init_tracing();
    let kit = TestClusters::start(3).await?;
    let hub = kit.client("host").await?;
    let (member1, member2) = (kit.client("member1").await?, kit.client("member2").await?);
    flotilla_tests::federation::install_crds(&hub).await?;
    let ns = json!({"metadata": {"name": NS}});
    Api::<Namespace>::all(hub.clone())
        .create(&PostParams::default(), &serde_json::from_value(ns)?)
        .await?;
    // One plugin for the whole set: it prints the token of the cluster the exec info names.
    let dir = kit.env().dir().join("plugins");
    std::fs::create_dir_all(&dir)?;
    write_token_plugin(&dir, &kit)?;
    let access = AccessProviders::parse(
        &json!({"providers": [{"name": "fleet-creds", "execConfig": exec_config(&dir, "fleet.sh")}]})
            .to_string(),
    )
    .map_err(anyhow::Error::msg)?;

    let set = ClusterSet::new();
    let _hub =
        set.start_provider(KubeconfigProvider::file(kit.kubeconfig_path()).contexts(["host"]));
    let _members = set.start_provider(
        ClusterProfileProvider::new(hub.clone(), "default", access)
            .selector("x-k8s.io/cluster-manager=another-manager"),
    );
    let controller = tokio::spawn(async move { sync::run(set, "host", NS, NAME).await });
    put_source(&hub, "v1").await?;
    profile_for(&kit, &hub, "member1").await?;
    wait_copy(&member1, "v1").await?;

    // The source changes; a copy edited by hand is restored, a deleted one recreated.
    put_source(&hub, "v2").await?;
    wait_copy(&member1, "v2").await?;
    let edit = json!({"data": {"setting": "edited"}});
    Api::<ConfigMap>::namespaced(member1.clone(), NS)
        .patch(NAME, &PatchParams::default(), &Patch::Merge(edit))
        .await?;
    wait_copy(&member1, "v2").await?;
    Api::<ConfigMap>::namespaced(member1.clone(), NS)
        .delete(NAME, &DeleteParams::default())
        .await?;
    wait_copy(&member1, "v2").await?;

    // A cluster joins the set.
    profile_for(&kit, &hub, "member2").await?;
    wait_copy(&member2, "v2").await?;

    // member2 goes silent: member1 still follows the source; healed, member2 catches up.
    kit.black_hole("member2");
    put_source(&hub, "v3").await?;
    wait_copy(&member1, "v3").await?;
    kit.heal("member2");
    wait_copy(&member2, "v3").await?;

    // member1 turns slow (each chunk of traffic held 200 ms each way): it still follows.
    kit.slow("member1", std::time::Duration::from_millis(200));
    put_source(&hub, "v4").await?;
    wait_copy(&member1, "v4").await?;
    wait_copy(&member2, "v4").await?;
    kit.heal("member1");

    // The source is deleted: every copy is collected.
    Api::<ConfigMap>::namespaced(hub.clone(), NS)
        .delete(NAME, &DeleteParams::default())
        .await?;
    for member in [&member1, &member2] {
        wait_absent(
            TIMEOUT,
            &Api::<ConfigMap>::namespaced(member.clone(), NS),
            NAME,
        )
        .await?;
    }
    controller.abort();
    kit.shutdown().await?;
    Ok(())
}

/// `fleet.sh`: prints an ExecCredential with the admin token of the cluster whose proxy
/// the exec info names (a credential service in the small).
fn write_token_plugin(dir: &std::path::Path, kit: &TestClusters) -> anyhow::Result<()> {
    use std::os::unix::fs::PermissionsExt;
    let mut script = String::from("#!/bin/sh\ncase \"$KUBERNETES_EXEC_INFO\" in\n");
    for member in ["member1", "member2"] {
        let server = kit.proxied_config(member)?.cluster_url.to_string();
        let token_file = dir.join(format!("{member}.token"));
        std::fs::write(&token_file, kit.cluster(member)?.admin_token())?;
        script.push_str(&format!(
            "  *'{}'*) token=$(cat '{}') ;;\n",
            server.trim_end_matches('/'),
            token_file.display()
        ));
    }
    script.push_str("  *) echo 'unknown cluster' >&2; exit 2 ;;\nesac\n");
    script.push_str("printf '{\"apiVersion\":\"client.authentication.k8s.io/v1\",\"kind\":\"ExecCredential\",\"status\":{\"token\":\"%s\"}}' \"$token\"\n");
    let path = dir.join("fleet.sh");
    std::fs::write(&path, script)?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))?;
    Ok(())
}
