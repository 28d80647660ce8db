//! SIG-Multicluster's About API and PlacementDecision on real clusters: a ClusterProperty
//! created in a member shows in its ClusterProfile and as an `about.flotilla.io/` label a
//! placement can select on, and is removed with the property; an object placed by the
//! constraint scheduler gets a PlacementDecision naming its cluster, which follows a
//! failover and goes when the object no longer is scheduled.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::{
    DEFAULT_NAMESPACE, KubeFedCluster,
    about::{ClusterProperty, ClusterPropertySpec},
    crdgen,
    inventory::ClusterProfile,
    placement_decision::PlacementDecision,
};
use flotilla_controllers::install;
use flotilla_tests::{
    federation::Federation,
    member::config_maps,
    objects::FederatedObject,
    setup::federation_with_namespace,
    wait::{TIMEOUT, wait_absent, wait_present},
    wait_for,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, Patch, PatchParams, PostParams},
};
use serde_json::json;

const NS: &str = "standards";
const T: Duration = Duration::from_secs(90);

fn member(fed: &Federation, name: &str) -> Client {
    let i: usize = name.trim_start_matches("member").parse().unwrap_or(1);
    fed.members[i - 1].clone()
}

async fn profile_property(
    profiles: &Api<ClusterProfile>,
    cluster: &str,
    name: &str,
) -> anyhow::Result<Option<String>> {
    let profile = profiles.get(cluster).await?;
    Ok(profile
        .status
        .and_then(|s| s.properties.into_iter().find(|p| p.name == name))
        .map(|p| p.value))
}

async fn decided_clusters(api: &Api<PlacementDecision>, name: &str) -> anyhow::Result<Vec<String>> {
    let pd = api.get(name).await?;
    ensure!(
        pd.scheduler_name.as_deref() == Some("flotilla"),
        "scheduler {:?}",
        pd.scheduler_name
    );
    Ok(pd
        .decisions
        .iter()
        .filter_map(|d| d.cluster_profile_ref.name.clone())
        .collect())
}

#[tokio::test]
async fn member_properties_reach_profiles_and_placement_and_decisions_are_published()
-> anyhow::Result<()> {
    flotilla_tests::init_tracing();
    let fed = federation_with_namespace(2, NS).await?;
    let m1 = member(&fed, "member1");
    install::install_crds(&m1, &crdgen::member_crds(), "flotilla-test", T).await?;
    let properties: Api<ClusterProperty> = Api::all(m1.clone());
    for (name, value) in [
        ("region", "eu"),
        ("cluster.clusterset.k8s.io", "member1-id"),
    ] {
        let p = ClusterProperty::new(
            name,
            ClusterPropertySpec {
                value: value.into(),
            },
        );
        properties.create(&PostParams::default(), &p).await?;
    }

    // The member's properties reach its profile and its KubeFedCluster's labels.
    let profiles: Api<ClusterProfile> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    let kfcs: Api<KubeFedCluster> = Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    wait_for(
        T,
        "member1's properties in its profile and labels",
        || async {
            let region = profile_property(&profiles, "member1", "region").await?;
            ensure!(region.as_deref() == Some("eu"), "region {region:?}");
            let id = profile_property(&profiles, "member1", "cluster.clusterset.k8s.io").await?;
            ensure!(id.as_deref() == Some("member1-id"), "id {id:?}");
            let labels = kfcs.get("member1").await?.labels().clone();
            ensure!(
                labels.get("about.flotilla.io/region").map(String::as_str) == Some("eu"),
                "{labels:?}"
            );
            Ok(())
        },
    )
    .await?;
    // member2 declares nothing (no About CRD there): its profile carries only the resource
    // summary Flotilla publishes itself (`resources.flotilla.io/...`).
    let m2_profile = profiles.get("member2").await?;
    let declared: Vec<_> = m2_profile
        .status
        .context("status")?
        .properties
        .into_iter()
        .filter(|p| !p.name.starts_with("resources.flotilla.io/"))
        .collect();
    ensure!(
        declared.is_empty(),
        "member2 declares nothing (no About CRD there): {declared:?}"
    );

    // Join's id declaration: kept where declared, the kube-system uid where not.
    use flotilla_controllers::cluster_id::{ClusterId, ensure_cluster_id};
    ensure!(ensure_cluster_id(&m1).await? == ClusterId::Declared("member1-id".into()));
    let m2 = member(&fed, "member2");
    ensure!(ensure_cluster_id(&m2).await? == ClusterId::NotServed);
    install::install_crds(&m2, &crdgen::member_crds(), "flotilla-test", T).await?;
    let ClusterId::Created(id) = ensure_cluster_id(&m2).await? else {
        anyhow::bail!("no id declared in member2");
    };
    ensure!(
        ensure_cluster_id(&m2).await? == ClusterId::Declared(id.clone()),
        "declared once"
    );
    wait_for(T, "member2's id in its profile", || async {
        let got = profile_property(&profiles, "member2", "cluster.clusterset.k8s.io").await?;
        ensure!(got.as_deref() == Some(id.as_str()), "id {got:?}");
        Ok(())
    })
    .await?;

    // A placement selects on the declared property.
    let eu = FederatedObject::config_map(NS, "eu-only", json!({"k": "v"}))
        .placement(json!({"clusterSelector": {"matchLabels": {"about.flotilla.io/region": "eu"}}}))
        .apply(&fed.host)
        .await?;
    eu.wait_propagated().await?;
    wait_present(TIMEOUT, &config_maps(&m1, NS), "eu-only").await?;
    ensure!(
        config_maps(&member(&fed, "member2"), NS)
            .get_opt("eu-only")
            .await?
            .is_none(),
        "member2 is not in eu"
    );

    // An object placed by the constraint scheduler gets a PlacementDecision.
    let decisions: Api<PlacementDecision> = Api::namespaced(fed.host.clone(), NS);
    let one = FederatedObject::config_map(NS, "one", json!({"k": "v"}))
        .placement(
            json!({"clusters": [{"name": "member1"}, {"name": "member2"}], "maxClusters": 1}),
        )
        .apply(&fed.host)
        .await?;
    let first = wait_for(T, "a PlacementDecision for one", || async {
        let clusters = decided_clusters(&decisions, "one-federatedconfigmap").await?;
        ensure!(clusters.len() == 1, "decided {clusters:?}");
        Ok(clusters[0].clone())
    })
    .await?;
    let pd = decisions.get("one-federatedconfigmap").await?;
    let r = &pd.decisions[0].cluster_profile_ref;
    ensure!(
        r.namespace.as_deref() == Some(DEFAULT_NAMESPACE)
            && r.kind.as_deref() == Some("ClusterProfile"),
        "{r:?}"
    );
    ensure!(
        pd.owner_references()
            .iter()
            .any(|o| o.name == "one" && o.kind == "FederatedConfigMap"),
        "owned by its object: {:?}",
        pd.owner_references()
    );

    // Failover: the chosen cluster is drained; the decision follows.
    let other = if first == "member1" {
        "member2"
    } else {
        "member1"
    };
    let patch = json!({"spec": {"taints": [{"key": "drain", "effect": "NoExecute"}]}});
    kfcs.patch(&first, &PatchParams::default(), &Patch::Merge(&patch))
        .await?;
    wait_for(T, "the decision moved", || async {
        let clusters = decided_clusters(&decisions, "one-federatedconfigmap").await?;
        ensure!(clusters == [other.to_string()], "decided {clusters:?}");
        Ok(())
    })
    .await?;

    // The property removed: its label and profile entry go, the eu-only object leaves member1.
    properties
        .delete("region", &DeleteParams::default())
        .await?;
    wait_for(
        T,
        "region gone from member1's profile and labels",
        || async {
            let region = profile_property(&profiles, "member1", "region").await?;
            ensure!(region.is_none(), "region {region:?}");
            let labels = kfcs.get("member1").await?.labels().clone();
            ensure!(
                !labels.contains_key("about.flotilla.io/region"),
                "{labels:?}"
            );
            Ok(())
        },
    )
    .await?;
    wait_absent(TIMEOUT, &config_maps(&m1, NS), "eu-only").await?;

    // Deleted with its object.
    one.delete().await?;
    wait_for(T, "the decision deleted with its object", || async {
        ensure!(
            decisions.get_opt("one-federatedconfigmap").await?.is_none(),
            "still there"
        );
        Ok(())
    })
    .await?;
    Ok(())
}
