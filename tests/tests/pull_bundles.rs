//! Bundle Works end to end, on a federation with one Pull member (member1) whose agent runs
//! in this process with the scoped host token `join_pull` issued: many ConfigMaps of one
//! namespace travel in a few bundle Works, split at a small bound (this process sets the
//! bound to 4 KiB through `bundles::set_max_bytes_for_tests`, so a dozen 1 KiB ConfigMaps
//! need several chunks); one bad manifest fails alone and is reported on its own federated
//! object while the others apply; a restart of the agent writes nothing (every member
//! object's, Work's — its status included — and AppliedWork's resourceVersion unchanged),
//! also after an object joined a bundle and left it again; one object deleted with
//! `kubefed.io/orphan` leaves its bundle and keeps its member object, unlabelled, the
//! others untouched.

use std::{collections::BTreeMap, time::Duration};

use anyhow::{Context as _, ensure};
use flotilla_agent::{Agent, AgentOptions};
use flotilla_api::{
    KubeFedCluster, MANAGED_LABEL, ORPHAN_ANNOTATION,
    work::{APPLYING_ANNOTATION, AppliedWork, Work, cluster_namespace},
};
use flotilla_controllers::{
    install,
    manager::ControlPlane,
    pull_join::{PullJoinOptions, join_pull},
    sync::bundles::set_max_bytes_for_tests,
};
use flotilla_tests::{
    EnvOptions, LocalEnv,
    federation::{bootstrap, install_host, seeded_env},
    host::cluster_status,
    member::config_maps,
    mixed::{client_of_kubeconfig, holds},
    objects::FederatedObject,
    wait::{wait_absent, wait_namespace_in, wait_object, wait_present},
    wait_for,
};
use kube::{Api, Client, ResourceExt, api::ListParams};
use serde_json::json;

const T: Duration = Duration::from_secs(60);
const PULL: &str = "member1";
const NS: &str = "bundled";
/// The bound of one bundle's manifests in this test.
const LIMIT: usize = 4096;
/// ConfigMaps of about 1 KiB each: four per chunk at most.
const COUNT: usize = 12;

struct Fed {
    control_plane: Option<ControlPlane>,
    agent: Option<Agent>,
    host: Client,
    pull: Client,
    agent_host: Client,
    _env: LocalEnv,
}

impl Fed {
    fn start_agent(&mut self) {
        let mut opts = AgentOptions::new(PULL, self.agent_host.clone(), self.pull.clone());
        opts.resync = Duration::from_secs(600);
        opts.lease_duration = Duration::from_secs(3);
        self.agent = Some(Agent::start(opts));
    }
}

impl Drop for Fed {
    fn drop(&mut self) {
        self.agent.take();
        self.control_plane.take();
    }
}

async fn start() -> anyhow::Result<Fed> {
    set_max_bytes_for_tests(LIMIT);
    let boot = bootstrap();
    let env = seeded_env(EnvOptions::with_members(1), &boot).await;
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let member = &env.members()[0];
    ensure!(member.name() == PULL);
    let mut opts = PullJoinOptions::new(PULL, env.host().server());
    opts.namespace = boot.namespace.clone();
    opts.host_ca_pem = Some(env.host().ca_pem().to_owned());
    let joined = join_pull(&host, &opts).await?;
    let pull = member.client().await?;
    let crds = [flotilla_api::crdgen::applied_work_crd()];
    install::install_crds(&pull, &crds, "flotilla-tests", T).await?;
    let mut fed = Fed {
        control_plane: None,
        agent: None,
        host: host.clone(),
        pull,
        agent_host: client_of_kubeconfig(&joined.kubeconfig).await?,
        _env: env,
    };
    fed.start_agent();
    fed.control_plane = Some(boot.start_control_plane(&host, 1).await?);
    Ok(fed)
}

async fn wait_ready(fed: &Fed) -> anyhow::Result<()> {
    let kfcs: Api<KubeFedCluster> =
        Api::namespaced(fed.host.clone(), flotilla_api::DEFAULT_NAMESPACE);
    wait_object(T, &kfcs, PULL, |k| {
        ensure!(k.status.as_ref().is_some_and(|s| s.is_ready()));
        Ok(())
    })
    .await?;
    Ok(())
}

/// The ConfigMap bundles of the test namespace in member1's inventory.
async fn config_map_bundles(host: &Client) -> anyhow::Result<Vec<Work>> {
    let works: Api<Work> = Api::namespaced(host.clone(), &cluster_namespace(PULL));
    let list = works
        .list(&ListParams::default().labels("work.flotilla.io/type=configmaps"))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|w| w.is_bundle())
        .filter(|w| {
            w.annotations().get("work.flotilla.io/bundle-namespace") == Some(&NS.to_string())
        })
        .collect())
}

/// resourceVersions of every member ConfigMap of the namespace, every Work of member1's
/// inventory and every AppliedWork.
async fn versions(fed: &Fed) -> anyhow::Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    let lp = ListParams::default();
    for cm in config_maps(&fed.pull, NS).list(&lp).await?.items {
        out.insert(
            format!("cm/{}", cm.name_any()),
            cm.resource_version().unwrap_or_default(),
        );
    }
    let works: Api<Work> = Api::namespaced(fed.host.clone(), &cluster_namespace(PULL));
    for w in works.list(&lp).await?.items {
        out.insert(
            format!("work/{}", w.name_any()),
            w.resource_version().unwrap_or_default(),
        );
    }
    let applied: Api<AppliedWork> = Api::all(fed.pull.clone());
    for a in applied.list(&lp).await?.items {
        out.insert(
            format!("aw/{}", a.name_any()),
            a.resource_version().unwrap_or_default(),
        );
    }
    Ok(out)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bundles_split_at_the_bound_fail_one_manifest_alone_and_an_agent_restart_writes_nothing()
-> anyhow::Result<()> {
    let mut fed = start().await?;
    wait_ready(&fed).await?;
    flotilla_tests::objects::create_namespace(&fed.host, NS).await?;
    FederatedObject::namespace(NS).apply(&fed.host).await?;
    wait_namespace_in(std::slice::from_ref(&fed.pull), NS).await?;

    // A dozen ConfigMaps of about 1 KiB, and one the member refuses.
    let payload = "x".repeat(1000);
    let mut refs = Vec::new();
    for i in 0..COUNT {
        let cm = FederatedObject::config_map(NS, &format!("cm{i:02}"), json!({"k": payload}));
        refs.push(cm.apply(&fed.host).await?);
    }
    let bad = FederatedObject::config_map(NS, "bad", json!({"not a valid key!": "x"}))
        .apply(&fed.host)
        .await?;
    let status = bad
        .wait_cluster_reasons(&[(PULL, "CreationFailed")])
        .await?;
    let message = &cluster_status(&status, PULL).context("member1")?.message;
    ensure!(message.contains("valid config key"), "{message}");
    for (i, r) in refs.iter().enumerate() {
        r.wait_cluster_reasons(&[(PULL, "")]).await?;
        wait_present(T, &config_maps(&fed.pull, NS), &format!("cm{i:02}")).await?;
    }

    // Split at the bound: several chunks, each within it (one manifest may stand alone).
    let bundles = config_map_bundles(&fed.host).await?;
    let manifests: usize = bundles
        .iter()
        .map(|w| w.spec.workload.manifests.len())
        .sum();
    ensure!(manifests == COUNT + 1, "{manifests} manifests in bundles");
    ensure!(
        bundles.len() >= 3,
        "{} bundles for {} KiB",
        bundles.len(),
        COUNT
    );
    for w in &bundles {
        let size: usize = w
            .spec
            .workload
            .manifests
            .iter()
            .map(|m| m.to_string().len())
            .sum();
        ensure!(
            size <= LIMIT || w.spec.workload.manifests.len() == 1,
            "{} holds {size} bytes",
            w.name_any()
        );
        // The bad manifest's failure is on its own condition; the others are applied.
        let report = w.status.as_ref().context("a report")?;
        for m in &report.manifest_conditions {
            let applied = m
                .conditions
                .iter()
                .any(|c| c.type_ == "Applied" && c.status == "True");
            ensure!(applied == (m.identifier.name != "bad"), "{m:?}");
        }
    }
    // Each bundle's AppliedWork names the objects it was to apply in the compact form (one
    // group of the kind and namespace, names only).
    let records: Api<AppliedWork> = Api::all(fed.pull.clone());
    for w in &bundles {
        let record = records.get(&w.name_any()).await?;
        let applying = record
            .annotations()
            .get(APPLYING_ANNOTATION)
            .context("no applying annotation")?;
        ensure!(applying.starts_with(r#"{"objects":[{"#), "{applying}");
        let named = flotilla_agent::intent::decode(applying);
        ensure!(
            !named.is_empty()
                && named
                    .iter()
                    .all(|n| n.kind == "ConfigMap" && n.namespace == NS),
            "{applying}"
        );
    }
    eprintln!(
        "{} ConfigMaps in {} bundles: {:?}",
        COUNT + 1,
        bundles.len(),
        bundles
            .iter()
            .map(|w| w.spec.workload.manifests.len())
            .collect::<Vec<_>>()
    );

    // An agent restart writes nothing: every resourceVersion stays.
    tokio::time::sleep(Duration::from_secs(3)).await;
    restart_writes_nothing(&mut fed).await?;
    // Nor after an object joined a bundle and left it again (the bench's restart probe):
    // once its removal is recorded and reported, a restart finds nothing to write.
    probe_joins_and_leaves_a_bundle(&fed).await?;
    restart_writes_nothing(&mut fed).await?;

    // The object that was refused leaves alone; the others stay.
    bad.delete().await?;
    bad.wait_gone(T).await?;
    wait_for(T, "the bad manifest out of every bundle", || async {
        let bundles = config_map_bundles(&fed.host).await?;
        let n: usize = bundles
            .iter()
            .map(|w| w.spec.workload.manifests.len())
            .sum();
        ensure!(n == COUNT, "{n} manifests");
        Ok(())
    })
    .await?;
    let left = config_maps(&fed.pull, NS)
        .list(&ListParams::default())
        .await?;
    ensure!(
        left.items
            .iter()
            .filter(|c| c.name_any().starts_with("cm"))
            .count()
            == COUNT,
        "{:?}",
        left.items.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    );
    one_manifest_orphaned(&fed, &payload).await
}

/// Restarts the agent and checks that it wrote nothing: every member ConfigMap's, Work's
/// (its status included) and AppliedWork's resourceVersion is what it was.
async fn restart_writes_nothing(fed: &mut Fed) -> anyhow::Result<()> {
    let before = versions(fed).await?;
    if let Some(a) = fed.agent.take() {
        a.stop().await;
    }
    fed.start_agent();
    wait_ready(fed).await?;
    tokio::time::sleep(Duration::from_secs(6)).await;
    let after = versions(fed).await?;
    let changed: Vec<_> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .map(|k| format!("{k}: {:?} -> {:?}", before.get(k), after.get(k)))
        .collect();
    ensure!(changed.is_empty(), "written by a restart: {changed:?}");
    Ok(())
}

/// A small ConfigMap joins a bundle that holds others, is applied and reported, then is
/// deleted; returns once its removal is complete: the member object gone, no Work
/// reporting it and no AppliedWork recording it. What the agent writes after the member
/// object is gone (the record, then the report) belongs to the removal, not to a restart
/// that follows it.
async fn probe_joins_and_leaves_a_bundle(fed: &Fed) -> anyhow::Result<()> {
    let name = "probe";
    let probe = FederatedObject::config_map(NS, name, json!({"k": "p"}))
        .apply(&fed.host)
        .await?;
    probe.wait_cluster_reasons(&[(PULL, "")]).await?;
    wait_present(T, &config_maps(&fed.pull, NS), name).await?;
    let bundles = config_map_bundles(&fed.host).await?;
    let holder = bundles
        .iter()
        .find(|w| holds(w, name))
        .context("no bundle holds the probe")?;
    ensure!(
        holder.spec.workload.manifests.len() > 1,
        "the probe has a bundle of its own"
    );
    probe.delete().await?;
    probe.wait_gone(T).await?;
    wait_absent(T, &config_maps(&fed.pull, NS), name).await?;
    let applied: Api<AppliedWork> = Api::all(fed.pull.clone());
    wait_for(T, "the probe's removal recorded and reported", || async {
        for w in config_map_bundles(&fed.host).await? {
            let reported = w.status.iter().flat_map(|s| &s.manifest_conditions);
            ensure!(
                !reported.into_iter().any(|m| m.identifier.name == name),
                "{} still reports it",
                w.name_any()
            );
        }
        for a in applied.list(&ListParams::default()).await?.items {
            let recorded = a.status.iter().flat_map(|s| &s.applied_resources);
            ensure!(
                !recorded.into_iter().any(|r| r.identifier.name == name),
                "{} still records it",
                a.name_any()
            );
        }
        Ok(())
    })
    .await
}

/// One ConfigMap of a bundle is deleted with `kubefed.io/orphan`: its member object stays,
/// unlabelled; its manifest leaves the bundle; every other member ConfigMap is untouched
/// (same resourceVersion).
async fn one_manifest_orphaned(fed: &Fed, payload: &str) -> anyhow::Result<()> {
    let name = "cm00";
    let others = |v: BTreeMap<String, String>| -> BTreeMap<String, String> {
        v.into_iter()
            .filter(|(k, _)| k.starts_with("cm/cm") && k != &format!("cm/{name}"))
            .collect()
    };
    let before = others(versions(fed).await?);
    ensure!(before.len() == COUNT - 1, "{before:?}");
    let kept = FederatedObject::config_map(NS, name, json!({"k": payload}))
        .annotate(ORPHAN_ANNOTATION, "true")
        .apply(&fed.host)
        .await?;
    kept.delete().await?;
    kept.wait_gone(T).await?;
    wait_for(T, "the orphaned manifest out of every bundle", || async {
        let listed: Vec<String> = config_map_bundles(&fed.host)
            .await?
            .iter()
            .filter(|w| holds(w, name))
            .map(|w| w.name_any())
            .collect();
        ensure!(listed.is_empty(), "still in {listed:?}");
        Ok(())
    })
    .await?;
    let cm = config_maps(&fed.pull, NS).get(name).await?;
    let label = cm.labels().get(MANAGED_LABEL);
    ensure!(
        label.is_none_or(|v| v != "true"),
        "the orphaned ConfigMap is still labelled managed: {label:?}"
    );
    ensure!(cm.data.as_ref().and_then(|d| d.get("k")).map(String::len) == Some(payload.len()));
    let after = others(versions(fed).await?);
    ensure!(
        before == after,
        "other ConfigMaps written: {before:?} -> {after:?}"
    );
    // And it stays: the agent forgot it, nothing prunes it later.
    tokio::time::sleep(Duration::from_secs(3)).await;
    ensure!(config_maps(&fed.pull, NS).get_opt(name).await?.is_some());
    Ok(())
}
