//! Another cluster manager's ClusterProfile as a member of Flotilla's controllers, on real
//! clusters: the controller-manager runs with an access provider file
//! (`--access-providers`) naming an exec plugin (a script the test writes, under
//! `--exec-plugin-dir`); a profile offering that provider for member1 becomes a
//! KubeFedCluster whose credential comes from the plugin, turns Ready and gets propagated
//! objects; a profile offering only an unconfigured provider gets a Warning Event and no
//! cluster; deleting the profile removes its cluster.

use std::{sync::Arc, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_api::{DEFAULT_NAMESPACE, KubeFedCluster, inventory::ClusterProfile};
use flotilla_controllers::{
    manager::{ControlPlane, Options},
    metrics::Metrics,
    profiles::import::{IMPORTED_FROM, NOT_IMPORTED},
};
use flotilla_multicluster::provider::profiles::AccessProviders;
use flotilla_tests::{
    EnvOptions,
    federation::{Federation, bootstrap, federated_namespace, install_host, seeded_env},
    init_tracing, wait_for,
};
use k8s_openapi::api::core::v1::Event;
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams},
};
use serde_json::json;

use crate::credential_rotation::{NS, apply_fcm, condition, wait_propagated, write_plugin};
use crate::library_support::put_profile;

const T: Duration = Duration::from_secs(60);
/// Where the test's profiles live (not the control-plane namespace).
const PROFILES: &str = "default";

#[tokio::test]
async fn a_cluster_profile_with_a_configured_exec_access_provider_is_a_member() -> anyhow::Result<()>
{
    init_tracing();
    let plugins = std::env::temp_dir().join(format!("flotilla-access-{}", std::process::id()));
    std::fs::create_dir_all(&plugins)?;
    let boot = bootstrap();
    let env = seeded_env(EnvOptions::with_members(1), &boot).await;
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let m1 = &env.members()[0];
    let (token, member) = (m1.admin_token().to_owned(), m1.client().await?);
    let plugin = write_plugin(&plugins, &token)?;
    let file = json!({"providers": [{"name": "test-exec", "execConfig": {
        "apiVersion": "client.authentication.k8s.io/v1beta1",
        "command": plugin.display().to_string(),
    }}]});
    let options = Options {
        profile_namespace: Some(PROFILES.into()),
        exec_plugin_dir: Some(plugins.clone()),
        access_providers: Some(
            AccessProviders::parse(&file.to_string()).map_err(anyhow::Error::msg)?,
        ),
        ..Options::new(DEFAULT_NAMESPACE)
    };
    let cp = ControlPlane::start_with(host.clone(), &options, Arc::new(Metrics::new()));
    let fed = Federation {
        control_plane: Some(cp),
        host: host.clone(),
        members: vec![member],
        env,
    };
    put_profile(
        &host,
        "edge",
        "test-exec",
        fed.env.members()[0].server(),
        fed.env.members()[0].ca_pem(),
    )
    .await?;
    put_profile(
        &host,
        "elsewhere",
        "cloud-iam",
        fed.env.members()[0].server(),
        fed.env.members()[0].ca_pem(),
    )
    .await?;

    let kfcs: Api<KubeFedCluster> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    let kfc = wait_for(T, "edge imported", || async {
        kfcs.get("edge").await.context("not yet")
    })
    .await?;
    ensure!(
        kfc.annotations().get(IMPORTED_FROM).map(String::as_str) == Some("edge"),
        "{:?}",
        kfc.annotations()
    );
    ensure!(
        kfc.spec.exec.as_ref().map(|e| e.command.clone()) == Some(plugin.display().to_string()),
        "{:?}",
        kfc.spec.exec
    );
    wait_for(T, "edge Ready", || async {
        let (status, reason) = condition(&host, "edge", "Ready").await?;
        ensure!(status == "True", "{status} ({reason})");
        Ok(())
    })
    .await?;
    federated_namespace(&fed, NS).await?;
    apply_fcm(&fed, "through-profile", "v").await?;
    wait_propagated(&fed, "through-profile", "v").await?;
    let runs = std::fs::read_to_string(plugins.join("runs"))?;
    ensure!(runs.lines().count() >= 1, "the plugin never ran");
    let status = serde_json::to_string(&kfcs.get("edge").await?.status)?;
    ensure!(!status.contains(&token), "the token in the status");

    // The unconfigured provider: an Event on the profile, no cluster.
    let events: Api<Event> = Api::namespaced(host.clone(), PROFILES);
    let event = wait_for(T, "a ClusterProfileNotImported Event", || async {
        let list = events.list(&ListParams::default()).await?;
        list.items
            .into_iter()
            .find(|e| {
                e.reason.as_deref() == Some(NOT_IMPORTED)
                    && e.involved_object.name.as_deref() == Some("elsewhere")
                    && e.message
                        .as_deref()
                        .is_some_and(|m| m.contains("cloud-iam"))
            })
            .context("none yet")
    })
    .await?;
    let message = event.message.unwrap_or_default();
    ensure!(message.contains("test-exec"), "{message}");
    ensure!(
        kfcs.get_opt("elsewhere").await?.is_none(),
        "an unusable profile imported"
    );

    // The profile goes, and its cluster with it.
    let profiles: Api<ClusterProfile> = Api::namespaced(host.clone(), PROFILES);
    profiles.delete("edge", &DeleteParams::default()).await?;
    wait_for(T, "edge's KubeFedCluster deleted", || async {
        ensure!(kfcs.get_opt("edge").await?.is_none(), "still there");
        Ok(())
    })
    .await?;
    std::fs::remove_dir_all(&plugins)?;
    Ok(())
}
