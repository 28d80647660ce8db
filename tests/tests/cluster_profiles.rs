//! The Cluster Inventory API on real clusters: every joined member gets a ClusterProfile in
//! the control-plane namespace with a healthy condition and its Kubernetes version, a
//! stopped member's profile turns unhealthy, a quiet federation writes no profile, a profile
//! deleted by hand comes back, and an unjoined member's profile goes away.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::{
    DEFAULT_NAMESPACE, KubeFedCluster,
    inventory::{ClusterProfile, ProfileCondition, condition},
};
use flotilla_tests::{
    federation::{Federation, federation},
    init_tracing,
    requests::writes,
    wait_for,
};
use kube::{
    Api, ResourceExt,
    api::{DeleteParams, ListParams},
};

const T: Duration = Duration::from_secs(60);

fn healthy(profile: &ClusterProfile) -> Option<&ProfileCondition> {
    profile
        .status
        .as_ref()?
        .condition(condition::CONTROL_PLANE_HEALTHY)
}

/// Waits until `name`'s profile has `ControlPlaneHealthy` = `status` and returns it.
async fn wait_health(
    api: &Api<ClusterProfile>,
    name: &str,
    status: &str,
) -> anyhow::Result<ClusterProfile> {
    wait_for(
        T,
        &format!("{name} ControlPlaneHealthy={status}"),
        || async {
            let profile = api.get(name).await?;
            let c = healthy(&profile).context("no ControlPlaneHealthy condition")?;
            ensure!(c.status == status, "ControlPlaneHealthy is {}", c.status);
            Ok(profile)
        },
    )
    .await
}

/// Waits until `name` has a healthy profile and checks what it says.
async fn check_joined(profiles: &Api<ClusterProfile>, name: &str) -> anyhow::Result<()> {
    let profile = wait_health(profiles, name, "True").await?;
    assert_eq!(profile.spec.cluster_manager.name, "flotilla");
    assert_eq!(
        profile
            .labels()
            .get("x-k8s.io/cluster-manager")
            .map(String::as_str),
        Some("flotilla")
    );
    let status = profile.status.as_ref().context("no status")?;
    let version = status
        .version
        .as_ref()
        .and_then(|v| v.kubernetes.as_deref());
    assert!(version.is_some_and(|v| v.starts_with("v1.")), "{version:?}");
    let access = &status.access_providers[0].cluster;
    assert!(
        access.server.starts_with("https://127.0.0.1:"),
        "{access:?}"
    );
    let json = serde_json::to_string(&profile)?;
    assert!(!json.to_lowercase().contains("token"), "{json}");
    Ok(())
}

/// A quiet federation writes no profile, and no profile write failed.
async fn check_quiet(fed: &Federation) -> anyhow::Result<()> {
    // Nothing changes, so nothing is written.
    let before = writes(&fed.host, &["clusterprofiles"]).await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    let after = writes(&fed.host, &["clusterprofiles"]).await?;
    assert_eq!(before, after, "profile writes in a quiet federation");
    let metrics = fed
        .control_plane
        .as_ref()
        .context("control plane running")?
        .metrics
        .encode();
    // One write per cluster when it joins, one when its first probe says healthy.
    assert!(
        metrics.contains(r#"flotilla_cluster_profile_writes_total{op="apply",result="success"}"#),
        "{metrics}"
    );
    assert!(
        !metrics.contains(r#"flotilla_cluster_profile_writes_total{op="apply",result="failure"}"#),
        "{metrics}"
    );
    Ok(())
}

#[tokio::test]
async fn joined_members_have_profiles_that_follow_health_and_leave_with_the_cluster()
-> anyhow::Result<()> {
    init_tracing();
    let fed = federation(2).await?;
    let profiles: Api<ClusterProfile> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);

    for name in ["member1", "member2"] {
        check_joined(&profiles, name).await?;
    }
    check_quiet(&fed).await?;

    // A profile deleted by hand is put back.
    let old_uid = profiles.get("member2").await?.uid();
    profiles.delete("member2", &DeleteParams::default()).await?;
    wait_for(T, "member2's profile recreated", || async {
        let p = profiles.get("member2").await?;
        ensure!(p.uid() != old_uid, "still the old profile");
        ensure!(healthy(&p).is_some(), "no status yet");
        Ok(())
    })
    .await?;

    fed.env.stop_apiserver("member1").await?;
    let down = wait_health(&profiles, "member1", "False").await?;
    let reason = healthy(&down).map(|c| c.reason.clone()).unwrap_or_default();
    assert!(!reason.is_empty());
    assert_eq!(
        healthy(&profiles.get("member2").await?).map(|c| c.status.as_str()),
        Some("True"),
        "member2 is not affected"
    );

    let kfcs: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    kfcs.delete("member2", &DeleteParams::default()).await?;
    wait_for(T, "member2's profile gone", || async {
        let names: Vec<String> = profiles
            .list(&ListParams::default())
            .await?
            .items
            .iter()
            .map(|p| p.name_any())
            .collect();
        ensure!(!names.contains(&"member2".to_string()), "still {names:?}");
        ensure!(
            names.contains(&"member1".to_string()),
            "member1 lost: {names:?}"
        );
        Ok(())
    })
    .await?;
    Ok(())
}
