//! Propagation end to end on real clusters: create, update, placement changes, overrides,
//! steady state, drift repair, bad overrides and an unready member — for ConfigMaps,
//! Deployments and a custom resource type.
//!
//! The scenarios that do not disturb each other share one federation, each in its own
//! namespace (`scenarios_on_one_federation`); stopping a member and counting the sync
//! workers' failures need a federation of their own.

use std::time::Duration;

use anyhow::{Context as _, ensure};
use flotilla_api::{
    DEFAULT_NAMESPACE,
    core::Scope,
    crdgen::{self, TargetType},
};
use flotilla_tests::{
    assert::MANAGED,
    federation::{Federation, federated},
    host::{cluster_names, cluster_status},
    member::{
        config_map_data, config_maps, data_is, data_value, deployments, first_image, replicas,
    },
    objects::{FederatedObject, widget_crd, widget_resource},
    scenario,
    scenarios::run_all,
    setup::federation_with_namespace,
    wait::wait_object,
    wait_for,
};
use k8s_openapi::{
    api::core::v1::Service,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, ResourceExt,
    api::{DynamicObject, Patch, PatchParams},
};
use serde_json::json;

const T: Duration = Duration::from_secs(30);

async fn ready_federation() -> anyhow::Result<Federation> {
    federation_with_namespace(2, "demo").await
}

/// `settings` in both members, with member2's `region` override.
fn settings(ns: &str, data: serde_json::Value) -> FederatedObject {
    FederatedObject::config_map(ns, "settings", data)
        .on_clusters(&["member1", "member2"])
        .override_op("member2", "add", "/data/region", json!("eu"))
}

/// The scenarios that share one federation, each in its own namespace.
#[tokio::test]
async fn scenarios_on_one_federation() -> anyhow::Result<()> {
    let fed = flotilla_tests::federation::federation(2).await?;
    let fed = &fed;
    run_all(
        fed,
        vec![
            scenario!(
                fed,
                "configmaps",
                configmaps_are_created_updated_and_moved_with_placement_and_overrides
            ),
            scenario!(
                fed,
                "deployments",
                deployments_get_per_cluster_replicas_report_member_status_and_roll_out_a_new_image
            ),
            scenario!(
                fed,
                "widgets",
                a_custom_resource_type_enabled_by_its_own_type_config_propagates_with_overrides
            ),
            scenario!(
                fed,
                "steady",
                steady_state_makes_no_writes_drift_is_repaired_and_member_fields_are_kept
            ),
            scenario!(
                fed,
                "overrides",
                a_bad_override_fails_only_its_cluster_and_an_unregistered_cluster_is_reported
            ),
        ],
    )
    .await;
    Ok(())
}

async fn configmaps_are_created_updated_and_moved_with_placement_and_overrides(
    fed: &Federation,
    ns: &str,
) -> anyhow::Result<()> {
    let (m1, m2) = (&fed.members[0], &fed.members[1]);
    let fcm = settings(ns, json!({"color": "blue"}))
        .apply(&fed.host)
        .await?;
    wait_for(T, "configmap in both members", || async {
        let d1 = config_map_data(m1, ns, "settings")
            .await?
            .context("absent in member1")?;
        let d2 = config_map_data(m2, ns, "settings")
            .await?
            .context("absent in member2")?;
        ensure!(
            d1.get("color").map(String::as_str) == Some("blue") && !d1.contains_key("region"),
            "member1: {d1:?}"
        );
        ensure!(
            d2.get("region").map(String::as_str) == Some("eu"),
            "member2 override missing: {d2:?}"
        );
        Ok(())
    })
    .await?;
    let status = fcm.wait_propagated().await?;
    assert_eq!(status.clusters.len(), 2);

    // The managed label is on every member object.
    let live = config_maps(m1, ns).get("settings").await?;
    assert_eq!(live.labels().get(MANAGED).map(String::as_str), Some("true"));

    // Template update reaches both members; a removed key is removed.
    settings(ns, json!({"shape": "round"}))
        .apply(&fed.host)
        .await?;
    for m in &fed.members {
        wait_object(T, &config_maps(m, ns), "settings", |cm| {
            ensure!(
                data_value(cm, "shape") == Some("round") && data_value(cm, "color").is_none(),
                "{:?}",
                cm.data
            );
            Ok(())
        })
        .await?;
    }

    // Placement change: removed from the deselected member only.
    FederatedObject::config_map(ns, "settings", json!({"shape": "round"}))
        .on_clusters(&["member2"])
        .without_overrides()
        .apply(&fed.host)
        .await?;
    wait_for(T, "removed from member1 only", || async {
        ensure!(
            config_map_data(m1, ns, "settings").await?.is_none(),
            "still in member1"
        );
        ensure!(
            config_map_data(m2, ns, "settings").await?.is_some(),
            "gone from member2"
        );
        Ok(())
    })
    .await?;
    let status = fcm.wait_propagated().await?;
    assert_eq!(cluster_names(&status), vec!["member2"]);
    Ok(())
}

fn web(ns: &str, image: &str) -> FederatedObject {
    FederatedObject::deployment(ns, "web", 2, image).override_path(
        "member2",
        "/spec/replicas",
        json!(5),
    )
}

async fn deployments_get_per_cluster_replicas_report_member_status_and_roll_out_a_new_image(
    fed: &Federation,
    ns: &str,
) -> anyhow::Result<()> {
    let fweb = web(ns, "nginx:1.25").apply(&fed.host).await?;
    wait_for(T, "deployments with per-cluster replicas", || async {
        let d1 = deployments(&fed.members[0], ns).get_opt("web").await?;
        let d2 = deployments(&fed.members[1], ns).get_opt("web").await?;
        let r1 = replicas(&d1.context("absent in member1")?);
        let r2 = replicas(&d2.context("absent in member2")?);
        ensure!(r1 == Some(2) && r2 == Some(5), "replicas {r1:?} {r2:?}");
        Ok(())
    })
    .await?;
    fweb.wait_propagated().await?;

    // Status collection (the FTC's statusCollection): each member's Deployment status is
    // reported per cluster.
    let ftcs: Api<flotilla_api::FederatedTypeConfig> =
        Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    ftcs.patch(
        "deployments.apps",
        &PatchParams::default(),
        &Patch::Merge(json!({"spec": {"statusCollection": "Enabled"}})),
    )
    .await?;
    wait_for(T, "remote status of both members", || async {
        let s = fweb.status().await?;
        ensure!(s.clusters.len() == 2, "{s:?}");
        for c in &s.clusters {
            let rs = c.remote_status.as_ref().context("no remoteStatus")?;
            ensure!(rs.get("observedGeneration").is_some(), "{}: {rs}", c.name);
        }
        Ok(())
    })
    .await?;

    web(ns, "nginx:1.26").apply(&fed.host).await?;
    for m in &fed.members {
        wait_object(T, &deployments(m, ns), "web", |d| {
            let image = first_image(d);
            ensure!(image == Some("nginx:1.26"), "image {image:?}");
            Ok(())
        })
        .await?;
    }
    Ok(())
}

/// Installs the Widget CRD everywhere, its federated CRD in the host and its
/// FederatedTypeConfig, as a user enabling a custom resource type would.
async fn enable_widgets(fed: &Federation) -> anyhow::Result<()> {
    let widget_crd = widget_crd(&[])?;
    for c in std::iter::once(&fed.host).chain(fed.members.iter()) {
        let api: Api<CustomResourceDefinition> = Api::all(c.clone());
        api.patch(
            "widgets.example.com",
            &PatchParams::apply("flotilla-tests"),
            &Patch::Apply(&widget_crd),
        )
        .await?;
    }
    let target = TargetType {
        api: flotilla_api::core::ApiResource {
            group: "example.com".into(),
            version: "v1".into(),
            kind: "Widget".into(),
            plural_name: "widgets".into(),
            scope: Scope::Namespaced,
        },
        short_names: vec![],
    };
    let crds: Api<CustomResourceDefinition> = Api::all(fed.host.clone());
    let fcrd = crdgen::federated_crd(&target, None);
    let pp = PatchParams::apply("flotilla-tests");
    crds.patch(&fcrd.name_any(), &pp, &Patch::Apply(&fcrd))
        .await?;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let ftc = crdgen::federated_type_config(&target, DEFAULT_NAMESPACE);
    let ftcs: Api<flotilla_api::FederatedTypeConfig> =
        Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    ftcs.patch(&ftc.name_any(), &pp, &Patch::Apply(&ftc))
        .await?;
    Ok(())
}

async fn a_custom_resource_type_enabled_by_its_own_type_config_propagates_with_overrides(
    fed: &Federation,
    ns: &str,
) -> anyhow::Result<()> {
    enable_widgets(fed).await?;
    let gear = FederatedObject::new("Widget", "widgets", ns, "gear")
        .template(json!({"spec": {"size": 3, "color": "red"}}))
        .on_clusters(&["member1"])
        .override_path("member1", "/spec/size", json!(7));
    let fgear = wait_for(T, "federated widget accepted", || gear.apply(&fed.host)).await?;
    wait_for(T, "widget only in member1 with the override", || async {
        let w1: Api<DynamicObject> =
            Api::namespaced_with(fed.members[0].clone(), ns, &widget_resource());
        let w2: Api<DynamicObject> =
            Api::namespaced_with(fed.members[1].clone(), ns, &widget_resource());
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
    fgear.wait_propagated().await?;
    Ok(())
}

/// Records the member copies' resourceVersions of ConfigMap `steady`.
async fn steady_versions(fed: &Federation, ns: &str) -> anyhow::Result<Vec<Option<String>>> {
    let mut versions = Vec::new();
    for m in &fed.members {
        versions.push(config_maps(m, ns).get("steady").await?.resource_version());
    }
    Ok(versions)
}

fn front(ns: &str, port: i64) -> FederatedObject {
    FederatedObject::new("Service", "services", ns, "front").template(json!({"spec": {
        "selector": {"app": "web"},
        "ports": [{"name": "http", "port": port, "protocol": "TCP"}]
    }}))
}

async fn steady_state_makes_no_writes_drift_is_repaired_and_member_fields_are_kept(
    fed: &Federation,
    ns: &str,
) -> anyhow::Result<()> {
    let fsteady = FederatedObject::config_map(ns, "steady", json!({"k": "v"}))
        .apply(&fed.host)
        .await?;
    fsteady.wait_propagated().await?;
    front(ns, 80)
        .apply(&fed.host)
        .await?
        .wait_propagated()
        .await?;
    tokio::time::sleep(Duration::from_secs(1)).await;

    let before = steady_versions(fed, ns).await?;
    let host_rv = fsteady.get().await?.resource_version();
    // Force a full resync: a cluster label change requeues every federated object.
    let kfcs: Api<flotilla_api::KubeFedCluster> =
        Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    kfcs.patch(
        "member1",
        &PatchParams::default(),
        &Patch::Merge(json!({"metadata": {"labels": {"resync": "1"}}})),
    )
    .await?;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(
        before,
        steady_versions(fed, ns).await?,
        "a resync of converged objects must not write to members"
    );
    assert_eq!(
        host_rv,
        fsteady.get().await?.resource_version(),
        "nor to the host"
    );

    // Drift: a member-side edit of an owned field is reverted.
    let m1 = config_maps(&fed.members[0], ns);
    m1.patch(
        "steady",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "edited"}})),
    )
    .await?;
    wait_object(T, &m1, "steady", data_is("k", "v")).await?;

    // A member object deleted in the member (right after Flotilla wrote it) comes back.
    m1.delete("steady", &Default::default()).await?;
    wait_object(T, &m1, "steady", data_is("k", "v")).await?;

    // The member-assigned clusterIP survives a template update.
    let svcs: Api<Service> = Api::namespaced(fed.members[1].clone(), ns);
    let ip_before = svcs.get("front").await?.spec.and_then(|s| s.cluster_ip);
    assert!(ip_before.is_some());
    front(ns, 8080).apply(&fed.host).await?;
    wait_object(T, &svcs, "front", |svc| {
        let s = svc.spec.as_ref().context("no spec")?;
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

async fn a_bad_override_fails_only_its_cluster_and_an_unregistered_cluster_is_reported(
    fed: &Federation,
    ns: &str,
) -> anyhow::Result<()> {
    let partial = FederatedObject::config_map(ns, "partial", json!({"k": "v"}))
        .override_op("member2", "replace", "/data/missing/deeper", json!("x"))
        .apply(&fed.host)
        .await?;
    let status = partial
        .wait_cluster_reasons(&[("member2", "ApplyOverridesFailed")])
        .await?;
    let m2 = cluster_status(&status, "member2").context("member2")?;
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
        config_map_data(&fed.members[0], ns, "partial")
            .await?
            .is_some(),
        "member1 propagated normally"
    );
    assert!(
        config_map_data(&fed.members[1], ns, "partial")
            .await?
            .is_none()
    );

    // A placement naming a cluster that is not registered says so in status.
    let typo = FederatedObject::config_map(ns, "typo", json!({"k": "v"}))
        .on_clusters(&["member1", "membr2"])
        .apply(&fed.host)
        .await?;
    wait_for(T, "unregistered cluster reported", || async {
        let s = typo.status().await?;
        let ghost = cluster_status(&s, "membr2").context("membr2 not in status")?;
        ensure!(
            ghost.status == "ClusterNotReady" && ghost.message.contains("no KubeFedCluster membr2"),
            "{ghost:?}"
        );
        ensure!(
            config_map_data(&fed.members[0], ns, "typo")
                .await?
                .is_some(),
            "member1 still propagated"
        );
        Ok(())
    })
    .await?;
    Ok(())
}

#[tokio::test]
async fn an_unready_member_reports_cluster_not_ready_and_catches_up_when_back() -> anyhow::Result<()>
{
    let fed = ready_federation().await?;
    let both = |v: &str| FederatedObject::config_map("demo", "both", json!({ "v": v }));
    let fboth = both("1").apply(&fed.host).await?;
    fboth.wait_propagated().await?;
    // member1 stops; an update reaches member2 and member1 reports ClusterNotReady.
    fed.env.stop_apiserver("member1").await?;
    both("2").apply(&fed.host).await?;
    wait_for(T, "member2 updated, member1 ClusterNotReady", || async {
        let d = config_map_data(&fed.members[1], "demo", "both")
            .await?
            .context("absent")?;
        ensure!(d.get("v").map(String::as_str) == Some("2"), "{d:?}");
        let s = fboth.status().await?;
        let m1 = cluster_status(&s, "member1").map(|c| c.status.as_str());
        ensure!(m1 == Some("ClusterNotReady"), "{s:?}");
        Ok(())
    })
    .await?;
    fed.env.start_apiserver("member1").await?;
    let m1 = config_maps(&fed.members[0], "demo");
    wait_object(Duration::from_secs(60), &m1, "both", data_is("v", "2")).await?;
    fboth.wait_propagated().await?;
    Ok(())
}

/// A sample of the control plane's metrics, e.g. `flotilla_sync_workers_ready{kind="..."}`.
fn metric(fed: &Federation, family: &str, labels: &str) -> u64 {
    let needle = format!("{family}{{{labels}}} ");
    fed.control_plane
        .as_ref()
        .map(|cp| cp.metrics.encode())
        .unwrap_or_default()
        .lines()
        .find_map(|l| l.strip_prefix(&needle)?.trim().parse().ok())
        .unwrap_or(0)
}

/// Guards the stream regression of 11fe24f: every sync worker must get past the start-up
/// gate (a store's readiness once woke only one of them, and a stream of creates queued up
/// behind a single worker), and the happy path of a fresh object never takes the backoff
/// path. Counts, not timings.
#[tokio::test]
async fn every_sync_worker_takes_keys_and_a_stream_of_creates_never_backs_off() -> anyhow::Result<()>
{
    let fed = ready_federation().await?;
    let kind = "kind=\"FederatedConfigMap\"";
    let workers = flotilla_api::kubefed_config::DEFAULT_MAX_CONCURRENT_RECONCILES as u64;
    wait_for(T, "every sync worker past the gate", || async {
        let ready = metric(&fed, "flotilla_sync_workers_ready", kind);
        ensure!(ready == workers, "{ready} of {workers} workers ready");
        Ok(())
    })
    .await?;
    // One writer, a GET before each create: what `kubectl apply -f` of a file does.
    let names: Vec<String> = (0..20).map(|i| format!("stream-{i:02}")).collect();
    let fcm = federated("ConfigMap", "configmaps");
    let api: Api<DynamicObject> = Api::namespaced_with(fed.host.clone(), "demo", &fcm);
    for name in &names {
        ensure!(api.get_opt(name).await?.is_none(), "{name} exists already");
        let obj = FederatedObject::config_map("demo", name, json!({ "n": name }))
            .on_clusters(&["member1", "member2"]);
        let obj: DynamicObject = serde_json::from_value(obj.to_json())?;
        api.create(&Default::default(), &obj).await?;
    }
    for m in &fed.members {
        let cms = config_maps(m, "demo");
        for name in &names {
            wait_object(T, &cms, name, data_is("n", name)).await?;
        }
    }
    let failures = metric(
        &fed,
        "flotilla_reconciles_total",
        &format!("{kind},result=\"failure\""),
    );
    ensure!(failures == 0, "{failures} reconciles took the backoff path");
    let ready = metric(&fed, "flotilla_sync_workers_ready", kind);
    ensure!(ready == workers, "{ready} of {workers} workers ready");
    Ok(())
}
