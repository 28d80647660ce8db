//! Upgrading a running federation — member1 in push mode, member2 in pull mode: the objects
//! the previous version wrote (`tests/fixtures/upgrade/previous.json`, captured from a real
//! run of that version by the ignored test below), the previous CRDs
//! (`config/crds-compat/`), then the new CRDs applied and the new binaries (control plane
//! and pull agent) started — which write nothing to the members and nothing to the host,
//! and still propagate what is new (the restart guarantee, across versions).
//!
//! Refresh the fixture at a release (with the released code checked out):
//! `cargo nextest run -p flotilla-tests --run-ignored only upgrade::capture`.

use std::{collections::BTreeMap, path::PathBuf, sync::Arc, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_api::{DEFAULT_NAMESPACE, FederatedStatus, MANAGED_LABEL, crdgen, work};
use flotilla_controllers::{install, manager::ControlPlane, metrics::Metrics};
use flotilla_tests::{
    env,
    federation::{apply, bootstrap, federated, install_crds},
    fixture::{self, Fixture, Group},
    init_tracing,
    mixed::{AGENT_RESYNC, Mixed, PULL, join_mixed},
    requests::writes,
    wait_for,
};
use k8s_openapi::{
    api::core::v1::ServiceAccount,
    apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
};
use kube::{
    Api, Client, ResourceExt,
    api::{DynamicObject, ListParams},
};
use serde_json::{Value, json};

const T: Duration = Duration::from_secs(90);
const NS: &str = "upgrade";
/// The group of Works and AppliedWorks (the SIG-Multicluster Work API).
const WORK_GROUP: &str = "multicluster.x-k8s.io";

/// The federated kinds of the scenario: (target kind, plural).
const KINDS: [(&str, &str); 5] = [
    ("Namespace", "namespaces"),
    ("ConfigMap", "configmaps"),
    ("Secret", "secrets"),
    ("Service", "services"),
    ("Deployment", "deployments"),
];

fn fixture_path() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("fixtures/upgrade/previous.json")
}

fn group(group: &str, version: &str, kind: &str, plural: &str, status: bool) -> Group {
    Group {
        group: group.into(),
        version: version.into(),
        kind: kind.into(),
        plural: plural.into(),
        status_subresource: status,
        objects: Vec::new(),
    }
}

fn core(kind: &str, plural: &str) -> Group {
    group("", "v1", kind, plural, false)
}

fn federated_group(kind: &str, plural: &str) -> Group {
    let ar = federated(kind, plural);
    group(&ar.group, &ar.version, &ar.kind, &ar.plural, true)
}

fn kubefed(kind: &str, plural: &str, status: bool) -> Group {
    group(
        flotilla_api::CORE_GROUP,
        flotilla_api::V1BETA1,
        kind,
        plural,
        status,
    )
}

/// The scenario the previous version propagates: every federated kind, overrides, an
/// orphaning deletion annotation, a placement on one member, a Secret.
fn scenario() -> Vec<(&'static str, &'static str, Value)> {
    let all = json!({"clusterSelector": {}});
    let cm = |name: &str, spec: Value| json!({"metadata": {"name": name}, "spec": spec});
    let password = "bm90LWEtcmVhbC1zZWNyZXQ="; // "not-a-real-secret"
    vec![
        (
            "ConfigMap",
            "configmaps",
            cm(
                "plain",
                json!({"template": {"data": {"k": "v"}}, "placement": all}),
            ),
        ),
        (
            "ConfigMap",
            "configmaps",
            cm(
                "overridden",
                json!({
            "template": {"data": {"k": "v"}}, "placement": all,
            "overrides": [{"clusterName": "member2", "clusterOverrides": [{"path": "/data/k", "value": "m2"}]}]}),
            ),
        ),
        (
            "ConfigMap",
            "configmaps",
            json!({
            "metadata": {"name": "kept", "annotations": {"kubefed.io/orphan": "true"}},
            "spec": {"template": {"data": {"k": "v"}}, "placement": all}}),
        ),
        (
            "ConfigMap",
            "configmaps",
            cm(
                "one-member",
                json!({
            "template": {"data": {"k": "v"}}, "placement": {"clusters": [{"name": "member1"}]}}),
            ),
        ),
        (
            "Secret",
            "secrets",
            cm(
                "creds",
                json!({
            "template": {"type": "Opaque", "data": {"password": password}}, "placement": all}),
            ),
        ),
        (
            "Service",
            "services",
            cm(
                "web",
                json!({
            "template": {"spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "protocol": "TCP"}]}},
            "placement": all}),
            ),
        ),
        (
            "Deployment",
            "deployments",
            cm(
                "web",
                json!({
            "template": {"spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}},
                "template": {"metadata": {"labels": {"app": "web"}},
                    "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}},
            "placement": all,
            "overrides": [{"clusterName": "member2", "clusterOverrides": [{"path": "/spec/replicas", "value": 1}]}]}),
            ),
        ),
    ]
}

/// Every federated object of the namespace is `Propagation=True` for its generation.
async fn wait_all_propagated(host: &Client) -> anyhow::Result<()> {
    wait_for(T, "every object propagated", || async {
        for (kind, plural) in KINDS {
            let api: Api<DynamicObject> =
                Api::namespaced_with(host.clone(), NS, &federated(kind, plural));
            for o in api.list(&ListParams::default()).await? {
                let s = FederatedStatus::from_dynamic(&o);
                ensure!(
                    s.observed_generation == o.metadata.generation.unwrap_or(0)
                        && s.propagation().is_some_and(|c| c.status == "True"),
                    "{kind} {} not propagated: {s:?}",
                    o.name_any()
                );
            }
        }
        Ok(())
    })
    .await
}

/// Creates namespace `NS` in the host and a FederatedNamespace placing it everywhere.
async fn federated_namespace(host: &Client) -> anyhow::Result<()> {
    flotilla_tests::objects::create_namespace(host, NS).await?;
    let obj = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedNamespace",
        "metadata": {"name": NS, "namespace": NS},
        "spec": {"placement": {"clusterSelector": {}}}
    });
    apply(host, &federated("Namespace", "namespaces"), Some(NS), &obj).await?;
    Ok(())
}

fn applied_works() -> Group {
    group(WORK_GROUP, "v1alpha1", "AppliedWork", "appliedworks", true)
}

/// What this version wrote: in the host and in each member.
async fn capture_all(fed: &Mixed) -> anyhow::Result<BTreeMap<String, Vec<Group>>> {
    let cp_ns = Some(DEFAULT_NAMESPACE);
    let (config, ftcs, kfcs) = (
        kubefed("KubeFedConfig", "kubefedconfigs", false),
        kubefed("FederatedTypeConfig", "federatedtypeconfigs", true),
        kubefed("KubeFedCluster", "kubefedclusters", true),
    );
    let mut host = Vec::new();
    for g in [config, ftcs, kfcs] {
        host.push(fixture::capture(&fed.host, g, cp_ns, None).await?);
    }
    // Only the KubeFedClusters' status is restored: their spec (endpoint, CA) is the
    // fresh members' own, written by joining them.
    for kfc in &mut host[2].objects {
        kfc.as_object_mut().map(|o| o.remove("spec"));
    }
    for (kind, plural) in KINDS {
        host.push(
            fixture::capture(&fed.host, federated_group(kind, plural), Some(NS), None).await?,
        );
    }
    let works = group(WORK_GROUP, "v1alpha1", "Work", "works", true);
    let pull_ns = work::cluster_namespace(PULL);
    host.push(fixture::capture(&fed.host, works, Some(&pull_ns), None).await?);
    let managed = format!("{MANAGED_LABEL}=true");
    let mut clusters = BTreeMap::from([("host".to_string(), host)]);
    for (i, member) in fed.members().iter().enumerate() {
        let namespaces = core("Namespace", "namespaces");
        let mut groups = vec![fixture::capture(member, namespaces, None, Some(&managed)).await?];
        for (kind, plural) in &KINDS[1..] {
            let g = match *kind {
                "Deployment" => group("apps", "v1", kind, plural, false),
                _ => core(kind, plural),
            };
            groups.push(fixture::capture(member, g, Some(NS), Some(&managed)).await?);
        }
        if i == 1 {
            groups.push(fixture::capture(member, applied_works(), None, None).await?);
        }
        clusters.insert(format!("member{}", i + 1), groups);
    }
    Ok(clusters)
}

/// Runs the scenario on this version and writes the fixture. Ignored: run it at a release.
#[tokio::test]
#[ignore = "captures tests/fixtures/upgrade/previous.json from this version; run at a release"]
async fn capture_the_objects_this_version_writes_as_the_upgrade_fixture() -> anyhow::Result<()> {
    init_tracing();
    let env = env(2).await;
    let host = env.host().client().await?;
    let boot = bootstrap();
    boot.install(&host).await?;
    let fed = join_mixed(env, host, &boot, crdgen::applied_work_crd()).await?;
    let agent = fed.start_agent().await?;
    let cp = boot.start_control_plane(&fed.host, 2).await?;
    federated_namespace(&fed.host).await?;
    for (kind, plural, mut obj) in scenario() {
        obj["apiVersion"] = json!("types.kubefed.io/v1beta1");
        obj["kind"] = json!(format!("Federated{kind}"));
        obj["metadata"]["namespace"] = json!(NS);
        apply(&fed.host, &federated(kind, plural), Some(NS), &obj).await?;
    }
    wait_all_propagated(&fed.host).await?;
    // Late status writes of the first run settle; the agent goes over every Work again.
    tokio::time::sleep(Duration::from_secs(3) + AGENT_RESYNC * 2).await;
    let clusters = capture_all(&fed).await?;
    cp.shutdown().await;
    agent.stop().await;
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let fixture = Fixture {
        captured_from: format!("flotilla {} at {commit}", env!("CARGO_PKG_VERSION")),
        clusters,
    };
    let path = fixture_path();
    std::fs::create_dir_all(path.parent().context("fixture dir")?)?;
    std::fs::write(&path, serde_json::to_string_pretty(&fixture)? + "\n")?;
    Ok(())
}

/// The previous version's CRDs, from the snapshot the compatibility check compares with.
fn previous_crds() -> anyhow::Result<Vec<CustomResourceDefinition>> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../config/crds-compat");
    let mut crds = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        let text = std::fs::read_to_string(&path)?;
        crds.push(serde_saphyr::from_str(&text).with_context(|| format!("{}", path.display()))?);
    }
    Ok(crds)
}

fn groups<'a>(fixture: &'a Fixture, cluster: &str) -> anyhow::Result<&'a [Group]> {
    Ok(fixture
        .clusters
        .get(cluster)
        .with_context(|| format!("no {cluster} in the fixture"))?)
}

/// Writes served so far: per member the target kinds, then member2's AppliedWorks, the
/// host's federated kinds, type configs, the KubeFedConfig and the KubeFedClusters, and
/// last the host's Works. The agent's heartbeat Lease is renewed by design and not counted.
async fn write_counts(fed: &Mixed) -> anyhow::Result<Vec<u64>> {
    let member = [
        "namespaces",
        "configmaps",
        "secrets",
        "services",
        "deployments",
    ];
    let mut counts = Vec::new();
    for m in fed.members() {
        counts.push(writes(&m, &member).await?);
    }
    counts.push(writes(&fed.pull, &["appliedworks"]).await?);
    let mut host: Vec<String> = KINDS.iter().map(|(_, p)| format!("federated{p}")).collect();
    host.extend(["federatedtypeconfigs", "kubefedconfigs", "kubefedclusters"].map(String::from));
    let refs: Vec<&str> = host.iter().map(String::as_str).collect();
    counts.push(writes(&fed.host, &refs).await?);
    counts.push(writes(&fed.host, &["works"]).await?);
    Ok(counts)
}

/// The previous version's one-object Works are taken over: every Work of member2's
/// inventory is a bundle (or an MCS Work), and every AppliedWork names a Work that exists.
async fn taken_over_by_bundles(fed: &Mixed) -> anyhow::Result<()> {
    let works: Api<work::Work> = Api::namespaced(fed.host.clone(), &work::cluster_namespace(PULL));
    let works = works.list(&ListParams::default()).await?.items;
    let legacy: Vec<String> = works
        .iter()
        .filter(|w| !w.is_bundle() && w.annotations().contains_key(work::WORK_SOURCE_NAME))
        .map(|w| w.name_any())
        .collect();
    ensure!(legacy.is_empty(), "one-object Works left: {legacy:?}");
    let names: Vec<String> = works.iter().map(|w| w.name_any()).collect();
    let applied: Api<work::AppliedWork> = Api::all(fed.pull.clone());
    for a in applied.list(&ListParams::default()).await?.items {
        ensure!(
            names.contains(&a.spec.work_name),
            "AppliedWork {} of a Work that is gone",
            a.name_any()
        );
    }
    Ok(())
}

/// A sample of the control plane's metrics, e.g. `flotilla_queue_depth{kind="..."}`.
fn sample(metrics: &Metrics, family: &str, labels: &str) -> u64 {
    let needle = format!("{family}{{{labels}}} ");
    metrics
        .encode()
        .lines()
        .find_map(|l| l.strip_prefix(&needle)?.trim().parse().ok())
        .unwrap_or(0)
}

/// The member's own controllers are done with what was restored: the namespace's default
/// ServiceAccount has its token Secret, each Deployment's status is for its generation.
async fn wait_members_settled(members: &[Client]) -> anyhow::Result<()> {
    for m in members {
        let sas: Api<ServiceAccount> = Api::namespaced(m.clone(), NS);
        let deployments: Api<k8s_openapi::api::apps::v1::Deployment> =
            Api::namespaced(m.clone(), NS);
        wait_for(T, "the member's controllers settled", || async {
            let sa = sas.get("default").await?;
            ensure!(
                sa.secrets.is_some_and(|s| !s.is_empty()),
                "no token Secret yet"
            );
            for d in deployments.list(&ListParams::default()).await? {
                let observed = d.status.as_ref().and_then(|s| s.observed_generation);
                ensure!(
                    observed == d.metadata.generation,
                    "{} not observed",
                    d.name_any()
                );
            }
            Ok(())
        })
        .await?;
    }
    Ok(())
}

/// The previous version's host side, then its members joined, then what it wrote there.
/// Takes the rotation annotations off every member's token Secret, as the previous
/// version wrote it.
async fn previous_credentials(host: &kube::Client) -> anyhow::Result<()> {
    use k8s_openapi::api::core::v1::Secret;
    let clusters: Api<flotilla_api::KubeFedCluster> =
        Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    let secrets: Api<Secret> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    for c in clusters.list(&Default::default()).await? {
        let name = c.spec.secret_ref.name.clone();
        if name.is_empty() {
            continue;
        }
        let nulls: serde_json::Map<String, serde_json::Value> =
            flotilla_core::credential::ANNOTATIONS
                .iter()
                .map(|a| (a.to_string(), serde_json::Value::Null))
                .collect();
        let patch = json!({"metadata": {"annotations": nulls}});
        secrets
            .patch(
                &name,
                &kube::api::PatchParams::default(),
                &kube::api::Patch::Merge(&patch),
            )
            .await?;
    }
    Ok(())
}

async fn restore_previous(fixture: &Fixture) -> anyhow::Result<Mixed> {
    let env = env(2).await;
    let host = env.host().client().await?;
    let crds = previous_crds()?;
    install::install_crds(&host, &crds, "flotilla-tests", T).await?;
    flotilla_tests::objects::create_namespace(&host, DEFAULT_NAMESPACE).await?;
    let host_groups = groups(fixture, "host")?;
    let (registry, objects) = host_groups.split_at(3);
    fixture::restore(&host, &registry[0]).await?;
    fixture::restore(&host, &registry[1]).await?;
    let applied_work_crd = crds
        .into_iter()
        .find(|c| c.metadata.name.as_deref() == Some("appliedworks.multicluster.x-k8s.io"))
        .context("no AppliedWork CRD in the snapshot")?;
    let fed = join_mixed(env, host, &bootstrap(), applied_work_crd).await?;
    // The previous version's join left a token without rotation: today's join's bound
    // token, its rotation annotations taken off, stands for it.
    previous_credentials(&fed.host).await?;
    fixture::restore_statuses(&fed.host, &registry[2]).await?;
    flotilla_tests::objects::create_namespace(&fed.host, NS).await?;
    for g in objects {
        fixture::restore(&fed.host, g).await?;
    }
    for (i, m) in fed.members().iter().enumerate() {
        for g in groups(fixture, &format!("member{}", i + 1))? {
            let mut g = g.clone();
            if g.kind == "AppliedWork" {
                fixture::remap_applied_uids(m, &mut g).await?;
            }
            fixture::restore(m, &g).await?;
        }
    }
    Ok(fed)
}

#[tokio::test]
async fn new_binaries_on_the_previous_versions_objects_and_new_crds_write_nothing()
-> anyhow::Result<()> {
    init_tracing();
    let fixture: Fixture = serde_json::from_str(&std::fs::read_to_string(fixture_path())?)?;
    let fed = restore_previous(&fixture).await?;
    // The upgrade: new CRDs, then the new binaries.
    install_crds(&fed.host).await?;
    install::install_crds(
        &fed.pull,
        &[crdgen::applied_work_crd()],
        "flotilla-tests",
        T,
    )
    .await?;
    wait_members_settled(&fed.members()).await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    let before = write_counts(&fed).await?;

    let agent = fed.start_agent().await?;
    let metrics = Arc::new(Metrics::new());
    let cp = ControlPlane::start(fed.host.clone(), DEFAULT_NAMESPACE, metrics.clone());
    let federated_groups: Vec<&Group> = groups(&fixture, "host")?
        .iter()
        .filter(|g| g.group == flotilla_api::TYPES_GROUP)
        .collect();
    wait_for(
        T,
        "the new binary reconciled every restored object",
        || async {
            for g in &federated_groups {
                let kind = format!("kind=\"{}\"", g.kind);
                let success = format!("{kind},result=\"success\"");
                let done = sample(&metrics, "flotilla_reconciles_total", &success);
                let queued = sample(&metrics, "flotilla_queue_depth", &kind);
                let n = g.objects.len();
                ensure!(
                    done >= n as u64 && queued == 0,
                    "{}: {done} reconciles of {n} objects, {queued} queued",
                    g.kind
                );
            }
            Ok(())
        },
    )
    .await?;
    // Late writes, and the agent over every Work a few times.
    tokio::time::sleep(Duration::from_secs(3) + AGENT_RESYNC * 4).await;
    // New in this version: each push member's resource summary on its KubeFedCluster
    // (`status.resources`), published once by the new binary — new data, the one host
    // write an upgrade to it makes. Everything else stays as it was.
    let clusters: Api<flotilla_api::KubeFedCluster> =
        Api::namespaced(fed.host.clone(), DEFAULT_NAMESPACE);
    wait_for(
        T,
        "the push member's resource summary published",
        || async {
            let c = clusters.get("member1").await?;
            ensure!(
                c.status
                    .as_ref()
                    .and_then(|s| s.resources.as_ref())
                    .is_some()
            );
            Ok(())
        },
    )
    .await?;
    wait_for(T, "the one-object Works taken over by bundles", || async {
        taken_over_by_bundles(&fed).await
    })
    .await?;
    let after = write_counts(&fed).await?;
    // Member objects: no write (the agent finds them up to date in the bundles). The host:
    // member1's resource summary. Works and AppliedWorks: the bundles written, the old
    // ones deleted — measured, not fixed.
    ensure!(
        after[1] == before[1],
        "the take-over of member2's one-object Works by bundles wrote {} member objects",
        after[1] - before[1]
    );
    let expected = vec![before[0], before[1], before[3] + 1];
    let got = vec![after[0], after[1], after[3]];
    ensure!(
        got == expected,
        "writes after the upgrade (member1, member2, host): before {before:?}, after {after:?}, expected {expected:?} (the host's one: member1's resource summary)"
    );
    eprintln!(
        "upgrade: {} AppliedWork writes in member2, {} Work writes in the host",
        after[2] - before[2],
        after[4] - before[4]
    );
    // And then, at rest, nothing more.
    tokio::time::sleep(Duration::from_secs(3) + AGENT_RESYNC * 2).await;
    let rest = write_counts(&fed).await?;
    ensure!(
        rest == after,
        "writes at rest after the take-over: {after:?} -> {rest:?}"
    );
    wait_all_propagated(&fed.host).await?;

    // Still propagating: a new object reaches both members.
    let obj = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
        "metadata": {"name": "after-upgrade", "namespace": NS},
        "spec": {"template": {"data": {"k": "v"}}, "placement": {"clusterSelector": {}}}
    });
    apply(
        &fed.host,
        &federated("ConfigMap", "configmaps"),
        Some(NS),
        &obj,
    )
    .await?;
    for m in fed.members() {
        let api: Api<k8s_openapi::api::core::v1::ConfigMap> = Api::namespaced(m, NS);
        wait_for(T, "the new object in a member", || async {
            api.get("after-upgrade").await?;
            Ok(())
        })
        .await?;
    }
    cp.shutdown().await;
    agent.stop().await;
    Ok(())
}
