//! The library's cluster providers end to end, with the test kit (three real clusters,
//! each behind a fault proxy): a kubeconfig file, kubeconfig Secrets (one that does not
//! parse: reported and skipped, the others run), ClusterProfiles of another cluster
//! manager reached through exec credential plugins (one that fails: reported and skipped),
//! namespaces as clusters, and Flotilla's KubeFedClusters. Each provider feeds a
//! controller that records what it reconciles; engagements end when clusters leave.

use std::collections::BTreeMap;

use crate::library_support::*;
use anyhow::{Context as _, ensure};
use base64::Engine as _;
use flotilla_api::KubeFedCluster;
use flotilla_localenv::testkit::{TestClusters, wait_until};
use flotilla_multicluster::{
    ClusterSet, Controller, WatchOptions,
    kubefed::KubeFedProvider,
    provider::{
        kubeconfig::KubeconfigProvider,
        namespaces::NamespaceProvider,
        profiles::{AccessProviders, ClusterProfileProvider},
        secrets::SecretProvider,
    },
};
use k8s_openapi::{
    ByteString,
    api::core::v1::{ConfigMap, Namespace, Secret},
};
use kube::{
    Api, Client,
    api::{DeleteParams, Patch, PatchParams, PostParams},
    config::Kubeconfig,
    runtime::watcher,
};
use serde_json::json;

/// Waits for a Warning Event `reason` about `name` in the host's `default` namespace, and
/// checks it quotes no secret.
async fn wait_warning(host: &Client, name: &str, reason: &str) -> anyhow::Result<()> {
    let events = wait_until(
        TIMEOUT,
        &format!("a {reason} Event about {name}"),
        || async {
            let events = flotilla_tests::assert::events_about(host, "default", name, reason)
                .await
                .map_err(|e| e.to_string())?;
            if events.is_empty() {
                Err("none yet".to_string())
            } else {
                Ok(events)
            }
        },
    )
    .await?;
    for event in events {
        let note = event.note.unwrap_or_default();
        ensure!(!note.contains("s3cr3t"), "{note}");
    }
    Ok(())
}

fn options() -> WatchOptions<ConfigMap> {
    WatchOptions::all().with_config(watcher::Config::default().labels(TEST_LABEL))
}

fn b64(data: &[u8]) -> String {
    base64::engine::general_purpose::STANDARD.encode(data)
}

#[tokio::test]
async fn providers_engage_clusters_and_skip_the_ones_they_cannot_use() -> anyhow::Result<()> {
    flotilla_tests::init_tracing();
    let kit = TestClusters::start(3).await?;
    let host = kit.client("host").await?;
    for name in ["member1", "member2"] {
        apply_configmap(&kit.client(name).await?, "default", "cm", &[]).await?;
    }
    kubeconfig_file(&kit).await?;
    kubeconfig_secrets(&kit, &host).await?;
    flotilla_tests::federation::install_crds(&host).await?;
    cluster_profiles(&kit, &host).await?;
    namespaces(&kit).await?;
    kubefed_clusters(&kit, &host).await?;
    kit.shutdown().await?;
    Ok(())
}

/// Contexts of a kubeconfig file: each a cluster, reconciled under its context's name; a
/// context removed from the file is disengaged; a file that stops parsing is reported and
/// the clusters engaged from it are kept.
async fn kubeconfig_file(kit: &TestClusters) -> anyhow::Result<()> {
    let path = kit.env().dir().join("provider.kubeconfig");
    std::fs::copy(kit.kubeconfig_path(), &path)?;
    let provider = KubeconfigProvider::file(&path)
        .contexts(["member1", "member2"])
        .period(std::time::Duration::from_secs(1));
    let controller = Controller::<ConfigMap>::with_provider("kubeconfig", provider, options());
    let set = controller.cluster_set().clone();
    let (seen, task) = run_recording(controller);
    for name in ["member1", "member2"] {
        wait_seen(&seen, name, "default", "cm").await?;
    }
    ensure!(
        set.get("host").is_none(),
        "a context not asked for was engaged"
    );
    let (member1, member2) = (
        set.engagement("member1").context("member1 engaged")?,
        set.engagement("member2").context("member2 engaged")?,
    );
    let mut kubeconfig = Kubeconfig::read_from(&path)?;
    kubeconfig.contexts.retain(|c| c.name != "member2");
    std::fs::write(&path, serde_json::to_string(&kubeconfig)?)?;
    wait_until(TIMEOUT, "member2 disengaged", || async {
        match (set.get("member2"), member2.is_cancelled()) {
            (None, true) => Ok(()),
            _ => Err("still engaged"),
        }
    })
    .await?;
    std::fs::write(&path, "clusters: [unclosed")?;
    let file = path.display().to_string();
    let reason = wait_problem(&set, &file).await?;
    ensure!(reason.contains("not a kubeconfig"), "{reason}");
    ensure!(
        !member1.is_cancelled(),
        "member1 let go because the file broke"
    );
    task.abort();
    let _ = task.await;
    // The controller (and its provider) is gone: the clusters are disengaged.
    wait_until(TIMEOUT, "member1's engagement cancelled", || async {
        if member1.is_cancelled() {
            Ok(())
        } else {
            Err("still engaged")
        }
    })
    .await?;
    Ok(())
}

/// A kubeconfig for context `context` of the kit's kubeconfig, as JSON text.
fn kubeconfig_for(kit: &TestClusters, context: &str) -> anyhow::Result<String> {
    let mut kubeconfig = Kubeconfig::read_from(kit.kubeconfig_path())?;
    kubeconfig.current_context = Some(context.into());
    Ok(serde_json::to_string(&kubeconfig)?)
}

async fn put_secret(host: &Client, name: &str, kubeconfig: &[u8]) -> anyhow::Result<()> {
    let secret = json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": "default", "labels": {"library-test/cluster": "yes"}},
        "data": {"kubeconfig": b64(kubeconfig)},
    });
    let api: Api<Secret> = Api::namespaced(host.clone(), "default");
    api.patch(
        name,
        &PatchParams::apply("library-test").force(),
        &Patch::Apply(secret),
    )
    .await?;
    Ok(())
}

/// Labelled kubeconfig Secrets in the host: one good, one that does not parse (reported,
/// without its content, and skipped), then fixed; a deleted Secret's cluster leaves.
async fn kubeconfig_secrets(kit: &TestClusters, host: &Client) -> anyhow::Result<()> {
    put_secret(host, "east", kubeconfig_for(kit, "member1")?.as_bytes()).await?;
    put_secret(
        host,
        "broken",
        b"users: [{name: u, user: {token: s3cr3t-t0ken}}\n  - [",
    )
    .await?;
    let provider = SecretProvider::new(host.clone(), "default", "library-test/cluster=yes");
    let controller = Controller::<ConfigMap>::with_provider("secrets", provider, options());
    let set = controller.cluster_set().clone();
    let (seen, task) = run_recording(controller);
    wait_seen(&seen, "east", "default", "cm").await?;
    let reason = wait_problem(&set, "broken").await?;
    ensure!(
        reason.contains("does not parse") && !reason.contains("s3cr3t"),
        "{reason}"
    );
    ensure!(
        set.get("broken").is_none(),
        "the broken Secret's cluster was engaged"
    );
    wait_warning(host, "broken", "InvalidKubeconfig").await?;
    put_secret(host, "broken", kubeconfig_for(kit, "member2")?.as_bytes()).await?;
    wait_seen(&seen, "broken", "default", "cm").await?;
    ensure!(
        !set.problems().contains_key("broken"),
        "{:?}",
        set.problems()
    );
    let east = set.engagement("east").context("east engaged")?;
    Api::<Secret>::namespaced(host.clone(), "default")
        .delete("east", &DeleteParams::default())
        .await?;
    wait_until(TIMEOUT, "east disengaged", || async {
        match (set.get("east"), east.is_cancelled()) {
            (None, true) => Ok(()),
            other => Err(format!("{:?}", other.1)),
        }
    })
    .await?;
    task.abort();
    Ok(())
}

/// ClusterProfiles of another cluster manager: one reached through a working exec plugin
/// (given the cluster's info), one whose plugin fails and one whose access provider is
/// not configured (both reported and skipped).
async fn cluster_profiles(kit: &TestClusters, host: &Client) -> anyhow::Result<()> {
    let dir = kit.env().dir().join("plugins");
    std::fs::create_dir_all(&dir)?;
    write_plugins(&dir, kit.cluster("member2")?.admin_token())?;
    let access = AccessProviders::parse(
        &json!({"providers": [
            {"name": "good-creds", "execConfig": exec_config(&dir, "good.sh")},
            {"name": "bad-creds", "execConfig": exec_config(&dir, "bad.sh")},
        ]})
        .to_string(),
    )
    .map_err(anyhow::Error::msg)?;
    let member2 = kit.cluster("member2")?;
    let (server, ca) = (member2.server(), member2.ca_pem());
    put_profile(host, "profile-good", "good-creds", server, ca).await?;
    put_profile(host, "profile-failing", "bad-creds", server, ca).await?;
    put_profile(
        host,
        "profile-unknown",
        "nobody-configured-this",
        server,
        ca,
    )
    .await?;
    let provider = ClusterProfileProvider::new(host.clone(), "default", access)
        .selector("x-k8s.io/cluster-manager=another-manager");
    let controller = Controller::<ConfigMap>::with_provider("profiles", provider, options());
    let set = controller.cluster_set().clone();
    let (seen, task) = run_recording(controller);
    wait_seen(&seen, "profile-good", "default", "cm").await?;
    let info = std::fs::read_to_string(dir.join("exec-info.json"))?;
    ensure!(
        info.contains(kit.cluster("member2")?.server()),
        "exec info: {info}"
    );
    let failing = wait_problem(&set, "profile-failing").await?;
    ensure!(
        failing.contains("exec credential plugin failed"),
        "{failing}"
    );
    ensure!(!failing.contains("s3cr3t"), "{failing}");
    wait_warning(host, "profile-failing", "AccessFailed").await?;
    let unknown = wait_problem(&set, "profile-unknown").await?;
    ensure!(unknown.contains("nobody-configured-this"), "{unknown}");
    ensure!(
        set.get("profile-failing").is_none() && set.get("profile-unknown").is_none(),
        "engaged"
    );
    task.abort();
    Ok(())
}

/// Labelled namespaces of member1 as clusters, each confined to its namespace.
async fn namespaces(kit: &TestClusters) -> anyhow::Result<()> {
    let member1 = kit.client("member1").await?;
    let api: Api<Namespace> = Api::all(member1.clone());
    for (name, tenant) in [
        ("tenant-a", true),
        ("tenant-b", true),
        ("not-a-tenant", false),
    ] {
        let labels: BTreeMap<&str, &str> = if tenant {
            [("tenant", "yes")].into()
        } else {
            BTreeMap::new()
        };
        let ns = json!({"metadata": {"name": name, "labels": labels}});
        api.create(&PostParams::default(), &serde_json::from_value(ns)?)
            .await?;
        apply_configmap(&member1, name, "cm", &[]).await?;
    }
    let provider = NamespaceProvider::new(kit.proxied_config("member1")?, "tenant=yes");
    let controller = Controller::<ConfigMap>::with_provider("namespaces", provider, options());
    let (set, cache) = (controller.cluster_set().clone(), controller.cache());
    let (seen, task) = run_recording(controller);
    for tenant in ["tenant-a", "tenant-b"] {
        wait_seen(&seen, tenant, tenant, "cm").await?;
        ensure!(
            set.namespace_of(tenant).as_deref() == Some(tenant),
            "{tenant} not confined"
        );
        let namespaces: Vec<_> = cache
            .list(tenant)
            .iter()
            .map(|c| c.metadata.namespace.clone())
            .collect();
        ensure!(
            namespaces == vec![Some(tenant.to_string())],
            "{tenant} caches {namespaces:?}"
        );
    }
    ensure!(
        set.get("not-a-tenant").is_none(),
        "an unlabelled namespace was engaged"
    );
    task.abort();
    Ok(())
}

/// A KubeFedCluster (Ready per its status, as Flotilla's health checks write it) and its
/// token Secret: engaged; deleted, disengaged.
async fn kubefed_clusters(kit: &TestClusters, host: &Client) -> anyhow::Result<()> {
    const NS: &str = "kube-federation-system";
    let nsapi: Api<Namespace> = Api::all(host.clone());
    nsapi
        .create(
            &PostParams::default(),
            &serde_json::from_value(json!({"metadata": {"name": NS}}))?,
        )
        .await?;
    let member2 = kit.cluster("member2")?;
    let mut secret = Secret::default();
    secret.metadata.name = Some("kf-member2-token".into());
    secret.data = Some(
        [(
            "token".to_string(),
            ByteString(member2.admin_token().as_bytes().to_vec()),
        )]
        .into(),
    );
    Api::<Secret>::namespaced(host.clone(), NS)
        .create(&PostParams::default(), &secret)
        .await?;
    let clusters: Api<KubeFedCluster> = Api::namespaced(host.clone(), NS);
    let cluster = json!({
        "apiVersion": "core.kubefed.io/v1beta1", "kind": "KubeFedCluster",
        "metadata": {"name": "kf-member2"},
        "spec": {"apiEndpoint": member2.server(), "caBundle": b64(member2.ca_pem().as_bytes()),
            "secretRef": {"name": "kf-member2-token"}},
    });
    clusters
        .create(&PostParams::default(), &serde_json::from_value(cluster)?)
        .await?;
    let now = "2026-01-01T00:00:00Z";
    let status = json!({"status": {"conditions": [
        {"type": "Ready", "status": "True", "lastProbeTime": now, "lastTransitionTime": now}]}});
    clusters
        .patch_status("kf-member2", &PatchParams::default(), &Patch::Merge(status))
        .await?;
    let set = ClusterSet::new();
    let provider = set.start_provider(KubeFedProvider::new(host.clone(), NS));
    let (seen, task) = run_recording(Controller::<ConfigMap>::new(
        "kubefed",
        set.clone(),
        options(),
    ));
    wait_seen(&seen, "kf-member2", "default", "cm").await?;
    let engagement = set.engagement("kf-member2").context("engaged")?;
    clusters
        .delete("kf-member2", &DeleteParams::default())
        .await?;
    wait_until(TIMEOUT, "kf-member2 disengaged", || async {
        if set.get("kf-member2").is_none() && engagement.is_cancelled() {
            Ok(())
        } else {
            Err("engaged")
        }
    })
    .await?;
    task.abort();
    provider.stop().await;
    Ok(())
}
