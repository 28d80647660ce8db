//! Indexes and the per-cluster cache-sync timeout end to end, with the test kit: a
//! controller over three clusters, one of them black-holed (its health check said Ready
//! just before the partition). Its cache misses the sync timeout and is reported with a
//! reason; waiting for the caches does not stall on it; the other clusters are reconciled
//! and their indexes (by label, by owner) answer. Healed, the cluster syncs, and the
//! indexes — kept for every cluster, including those that come later — cover it too.
//!
//! A cluster that does not serve a watched kind (its CRD not installed) is said once — one
//! WARN line naming the cluster and the resource, a gauge, `MemberWatch::unserved` — not
//! every few seconds, and the watch starts once the CRD is installed.

use std::time::Duration;

use crate::library_support::*;
use anyhow::ensure;
use flotilla_localenv::testkit::{TestClusters, wait_until};
use flotilla_multicluster::{
    Cache, ClusterSet, Controller, Engagement, SyncState, WatchOptions,
    index::{Indexer, OWNER_INDEX},
    provider::kubeconfig::KubeconfigProvider,
};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Client, runtime::watcher};

const SYNC_TIMEOUT: Duration = Duration::from_secs(3);

#[tokio::test]
async fn a_black_holed_cluster_misses_its_sync_timeout_and_the_others_run() -> anyhow::Result<()> {
    flotilla_tests::init_tracing();
    let kit = TestClusters::start(3).await?;
    let set = ClusterSet::new();
    let _provider = set.start_provider(
        KubeconfigProvider::file(kit.kubeconfig_path()).contexts(["host", "member1"]),
    );
    // member2 was Ready a moment ago; now nothing answers.
    kit.black_hole("member2");
    let client = Client::try_from(kit.proxied_config("member2")?)?;
    let engagement = Engagement {
        client,
        labels: Default::default(),
        identity: "partitioned".into(),
        namespace: None,
    };
    set.engage("member2", engagement);
    set.set_ready("member2", true);
    let options = WatchOptions::all()
        .with_config(watcher::Config::default().labels(TEST_LABEL))
        .index(Indexer::label("app"))
        .index(Indexer::owner())
        .sync_timeout(SYNC_TIMEOUT);
    let controller = Controller::<ConfigMap>::new("indexed", set.clone(), options);
    let cache = controller.cache();
    let (seen, _task) = run_recording(controller);
    wait_ready(&set, "member1").await?;
    wait_ready(&set, "host").await?;
    let member1 = kit.client("member1").await?;
    let owner = apply_configmap(&member1, "default", "owner", &[("app", "db")]).await?;
    let owner_uid = owner.metadata.uid.clone().unwrap_or_default();
    apply_configmap(&member1, "default", "web", &[("app", "web")]).await?;
    apply_owned(&member1, "owned", &owner).await?;

    // Waiting for the caches ends with member2 reported, not stalled on it.
    let waiting = std::time::Instant::now();
    let problems = wait_until(TIMEOUT, "every cache synced or timed out", || async {
        let problems = cache.wait_for_sync().await;
        if ["host", "member1", "member2"]
            .iter()
            .all(|c| cache.clusters().contains(&c.to_string()))
        {
            Ok(problems)
        } else {
            Err(format!("watched: {:?}", cache.clusters()))
        }
    })
    .await?;
    // Measured, not asserted: how long waiting for the caches took, against the timeout.
    let waited = waiting.elapsed();
    println!(
        "waited {waited:.1?} for the caches ({:.1}x the {SYNC_TIMEOUT:?} sync timeout)",
        waited.as_secs_f64() / SYNC_TIMEOUT.as_secs_f64()
    );
    let reason = problems.get("member2").cloned().unwrap_or_default();
    ensure!(
        reason.contains("not synced within"),
        "problems: {problems:?}"
    );
    ensure!(problems.len() == 1, "only member2 misses: {problems:?}");
    ensure!(
        cache.sync_state("member1") == Some(SyncState::Synced),
        "member1 not synced"
    );

    wait_seen(&seen, "member1", "default", "web").await?;
    let web = cache.by_index("member1", "app", "web");
    ensure!(names(&web) == ["web"], "app=web: {:?}", names(&web));
    let owned = cache.by_index("member1", OWNER_INDEX, &owner_uid);
    ensure!(names(&owned) == ["owned"], "owned: {:?}", names(&owned));

    healed_and_reindexed(&kit, &cache, &seen).await?;
    kit.shutdown().await?;
    Ok(())
}

fn names(list: &[std::sync::Arc<ConfigMap>]) -> Vec<String> {
    let mut names: Vec<String> = list
        .iter()
        .map(|c| c.metadata.name.clone().unwrap_or_default())
        .collect();
    names.sort();
    names
}

/// A ConfigMap with an owner reference to `owner`.
async fn apply_owned(client: &Client, name: &str, owner: &ConfigMap) -> anyhow::Result<()> {
    use kube::api::{Api, Patch, PatchParams};
    let cm = serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default", "labels": {"library-test": "yes"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap",
                "name": owner.metadata.name, "uid": owner.metadata.uid}]},
    });
    Api::<ConfigMap>::namespaced(client.clone(), "default")
        .patch(
            name,
            &PatchParams::apply("library-test").force(),
            &Patch::Apply(cm),
        )
        .await?;
    Ok(())
}

/// Healed, member2 syncs and its objects are indexed like everyone else's; a change moves
/// an object between values.
async fn healed_and_reindexed(
    kit: &TestClusters,
    cache: &Cache<ConfigMap>,
    seen: &Seen,
) -> anyhow::Result<()> {
    let member1 = kit.client("member1").await?;
    let member2 = kit.client("member2").await?;
    apply_configmap(&member2, "default", "web", &[("app", "web")]).await?;
    kit.heal("member2");
    wait_seen(seen, "member2", "default", "web").await?;
    wait_until(TIMEOUT, "app=web indexed in both members", || async {
        let mut found: Vec<String> = cache
            .by_index_all("app", "web")
            .into_iter()
            .map(|(c, _)| c)
            .collect();
        found.sort();
        if found == ["member1", "member2"] {
            Ok(())
        } else {
            Err(format!("{found:?}"))
        }
    })
    .await?;
    ensure!(
        cache.sync_problems().is_empty(),
        "{:?}",
        cache.sync_problems()
    );
    apply_configmap(&member1, "default", "web", &[("app", "db")]).await?;
    wait_until(TIMEOUT, "web re-indexed under app=db", || async {
        let db = names(&cache.by_index("member1", "app", "db"));
        if db == ["owner", "web"] {
            Ok(())
        } else {
            Err(format!("{db:?}"))
        }
    })
    .await?;
    Ok(())
}

/// Every line the test's tasks log (the test runs on one thread, so a thread-local
/// subscriber sees the watch tasks too).
#[derive(Clone, Default)]
struct Logs(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl Logs {
    fn lines(&self, wanted: impl Fn(&str) -> bool) -> Vec<String> {
        let bytes = self.0.lock().unwrap_or_else(|e| e.into_inner());
        String::from_utf8_lossy(&bytes)
            .lines()
            .filter(|l| wanted(l))
            .map(str::to_owned)
            .collect()
    }
}

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Logs {
        self.clone()
    }
}

/// The gauge of unserved kinds for the cluster `host` and widgets, as `/metrics` shows it.
fn unserved_gauge(registry: &prometheus_client::registry::Registry) -> String {
    let mut text = String::new();
    let _ = prometheus_client::encoding::text::encode(&mut text, registry);
    let series = "member_watch_unserved_kinds{cluster=\"host\",resource=\"widgets.example.com\"}";
    text.lines()
        .find(|l| l.starts_with(series))
        .map(|l| l[series.len()..].trim().to_owned())
        .unwrap_or_default()
}

#[tokio::test]
async fn a_cluster_without_the_kinds_crd_is_reported_once_and_watched_once_it_serves_it()
-> anyhow::Result<()> {
    use flotilla_multicluster::{MemberEvent, MemberWatch};
    use kube::api::{Api, DynamicObject, Patch, PatchParams};

    let logs = Logs::default();
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter("info")
        .with_ansi(false)
        .with_writer(logs.clone())
        .finish();
    let _logging = tracing::subscriber::set_default(subscriber);
    let mut registry = prometheus_client::registry::Registry::default();
    flotilla_multicluster::member_watch::register_metrics(&mut registry);

    let kit = TestClusters::start(1).await?;
    let set = ClusterSet::new();
    let _provider =
        set.start_provider(KubeconfigProvider::file(kit.kubeconfig_path()).contexts(["host"]));
    let widgets = flotilla_tests::objects::widget_resource();
    let (events, mut received) = tokio::sync::mpsc::unbounded_channel();
    let options = WatchOptions::all().unserved_recheck(Duration::from_secs(2));
    let watch = MemberWatch::<DynamicObject>::start_with_events(
        set.clone(),
        widgets.clone(),
        options,
        events,
    );
    wait_ready(&set, "host").await?;
    wait_until(TIMEOUT, "host reported as not serving widgets", || async {
        match watch.unserved().as_slice() {
            [one] if one == "host" => Ok(()),
            other => Err(format!("unserved: {other:?}")),
        }
    })
    .await?;
    // Long enough for several retries at the old pace (1, 2, 4, 8 s, then every 10 s).
    tokio::time::sleep(Duration::from_secs(16)).await;
    let warned = logs.lines(|l| l.contains("WARN") && l.contains("host"));
    ensure!(
        warned.len() == 1 && warned[0].contains("resource=widgets.example.com"),
        "one WARN line naming the resource, not {}:\n{}",
        warned.len(),
        warned.join("\n")
    );
    ensure!(
        unserved_gauge(&registry) == "1",
        "gauge: {:?}",
        unserved_gauge(&registry)
    );
    eprintln!("the one line: {}", warned[0]);

    let host = kit.client("host").await?;
    let crd = flotilla_tests::objects::widget_crd(&[])?;
    flotilla_controllers::install::install_crds(&host, &[crd], "library-test", TIMEOUT).await?;
    let widget = serde_json::json!({
        "apiVersion": "example.com/v1", "kind": "Widget",
        "metadata": {"name": "w1", "namespace": "default"}, "spec": {"size": 1}
    });
    Api::<DynamicObject>::namespaced_with(host, "default", &widgets)
        .patch(
            "w1",
            &PatchParams::apply("library-test"),
            &Patch::Apply(widget),
        )
        .await?;
    let seen = tokio::time::timeout(TIMEOUT, async {
        while let Some(event) = received.recv().await {
            if matches!(&event, MemberEvent::Object { name, .. } if name == "w1") {
                return true;
            }
        }
        false
    })
    .await;
    ensure!(
        matches!(seen, Ok(true)) && watch.get("host", Some("default"), "w1").is_some(),
        "the widget was not seen by the watch; unserved: {:?}",
        watch.unserved()
    );
    ensure!(watch.unserved().is_empty(), "{:?}", watch.unserved());
    ensure!(
        unserved_gauge(&registry) == "0",
        "gauge: {:?}",
        unserved_gauge(&registry)
    );
    let served = logs.lines(|l| l.contains("INFO") && l.contains("serves this kind now"));
    ensure!(served.len() == 1, "{}", served.join("\n"));
    eprintln!("once served: {}", served[0]);
    // Every line about the watch names what it watches (no `kind=()`).
    for line in logs.lines(|l| l.contains("member watch")) {
        ensure!(line.contains("resource=widgets.example.com"), "{line}");
    }
    drop(watch);
    kit.shutdown().await?;
    Ok(())
}
