//! What the fault tests (`faults.rs`) and the chaos soak (`chaos.rs`) share: a federation
//! with one member joined through a [`FaultProxy`], federated ConfigMaps, the cluster
//! health read from the host, the convergence invariant, first-seen times in a member,
//! percentiles and a seeded random number generator.
//!
//! Not a test target of its own (it lives in a directory); each test file includes it.

#![allow(dead_code)] // each including test file uses a different part of it

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use flotilla_api::{DEFAULT_NAMESPACE, FederatedStatus, KubeFedCluster, MANAGED_LABEL};
use flotilla_controllers::{
    join::{JoinOptions, join},
    manager::ControlPlane,
    metrics::Metrics,
};
use flotilla_localenv::{FaultProxy, LocalEnv};
use flotilla_tests::{
    EnvOptions,
    federation::{Federation, apply, bootstrap, federated, install_host, seeded_env},
    wait_for,
};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kube::{
    Api, Client, ResourceExt,
    api::{DeleteParams, DynamicObject, ListParams, Patch, PatchParams},
    runtime::watcher,
};
use serde_json::{Value, json};
use tokio::time::Instant;

/// Health checks every second, timeout 1 s, failure threshold 2 (as `federation()` sets).
pub const HEALTH_PERIOD: Duration = Duration::from_secs(1);
/// Probe timeout of the test federations.
pub const HEALTH_TIMEOUT: Duration = Duration::from_secs(1);
/// Failed probes in a row before a member turns not Ready.
pub const FAILURE_THRESHOLD: u32 = 2;

/// A federation whose member `proxied` (1-based index) is joined through a proxy.
pub struct ProxiedFederation {
    /// The proxy in front of the proxied member; dropped after the federation.
    pub proxy: FaultProxy,
    /// The federation; its control plane reaches the proxied member only via the proxy.
    pub fed: Federation,
    /// Names of the members, in order.
    pub members: Vec<String>,
}

impl ProxiedFederation {
    /// `(name, admin client)` of every member. The admin clients reach the members
    /// directly, never through the proxy, so checks see the truth during a fault.
    pub fn member_clients(&self) -> Vec<(String, Client)> {
        self.members
            .iter()
            .cloned()
            .zip(self.fed.members.iter().cloned())
            .collect()
    }
}

/// Like `flotilla_tests::federation::federation(members)` (CRDs, KubeFedConfig with 1 s
/// health checks, members joined, default types enabled, control plane in-process), but
/// member number `proxied` is joined with a [`FaultProxy`]'s URL as its `apiEndpoint`.
pub async fn proxied_federation(
    members: usize,
    proxied: usize,
) -> anyhow::Result<ProxiedFederation> {
    // The tests' bootstrap (CRDs, KubeFedConfig with 1 s health checks, the default types
    // before any join); only the proxied member's join differs.
    let boot = bootstrap();
    let env: LocalEnv = seeded_env(EnvOptions::with_members(members), &boot).await;
    let host = env.host().client().await?;
    install_host(&env, &boot, &host).await?;
    let proxy = FaultProxy::for_cluster(&env.members()[proxied - 1]).await?;
    let mut member_clients = Vec::new();
    let mut names = Vec::new();
    for (i, m) in env.members().iter().enumerate() {
        let client = if i + 1 == proxied {
            let client = m.client().await?;
            let mut opts = JoinOptions::new(m.name(), &proxy.url());
            opts.ca_pem = Some(m.ca_pem().to_string());
            opts.labels.insert("name".into(), m.name().into());
            join(&host, &client, &opts).await?;
            client
        } else {
            boot.join(&host, m).await?
        };
        member_clients.push(client);
        names.push(m.name().to_owned());
    }
    let fed = Federation {
        control_plane: Some(start_control_plane(&host)),
        host,
        members: member_clients,
        env,
    };
    for name in &names {
        wait_cluster_ready(&fed.host, name, Duration::from_secs(60)).await?;
    }
    Ok(ProxiedFederation {
        proxy,
        fed,
        members: names,
    })
}

/// A new in-process control plane on the host, as a restarted controller-manager would be.
pub fn start_control_plane(host: &Client) -> ControlPlane {
    ControlPlane::start(host.clone(), DEFAULT_NAMESPACE, Arc::new(Metrics::new()))
}

/// The FederatedConfigMap API in `ns`.
pub fn fcm_api(host: &Client, ns: &str) -> Api<DynamicObject> {
    Api::namespaced_with(host.clone(), ns, &federated("ConfigMap", "configmaps"))
}

/// Creates or replaces (server-side apply) a FederatedConfigMap with this data, placed on
/// exactly `clusters`.
pub async fn apply_fcm(
    host: &Client,
    ns: &str,
    name: &str,
    data: &BTreeMap<String, String>,
    clusters: &[String],
) -> anyhow::Result<()> {
    let clusters: Vec<Value> = clusters.iter().map(|c| json!({"name": c})).collect();
    let obj = json!({
        "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedConfigMap",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"template": {"data": data}, "placement": {"clusters": clusters}}
    });
    apply(host, &federated("ConfigMap", "configmaps"), Some(ns), &obj).await?;
    Ok(())
}

/// Deletes a FederatedConfigMap (its finalizer then removes the member objects).
pub async fn delete_fcm(host: &Client, ns: &str, name: &str) -> anyhow::Result<()> {
    fcm_api(host, ns)
        .delete(name, &DeleteParams::default())
        .await?;
    Ok(())
}

/// Creates namespace `ns` in the host with a FederatedNamespace placing it everywhere, and
/// waits until every member has it.
pub async fn federated_namespace_everywhere(
    host: &Client,
    members: &[(String, Client)],
    ns: &str,
) -> anyhow::Result<()> {
    let ns_api: Api<Namespace> = Api::all(host.clone());
    ns_api
        .patch(
            ns,
            &PatchParams::apply("flotilla-tests"),
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
            ),
        )
        .await?;
    apply(
        host,
        &federated("Namespace", "namespaces"),
        Some(ns),
        &json!({
            "apiVersion": "types.kubefed.io/v1beta1", "kind": "FederatedNamespace",
            "metadata": {"name": ns, "namespace": ns},
            "spec": {"placement": {"clusterSelector": {}}}
        }),
    )
    .await?;
    for (name, client) in members {
        let api: Api<Namespace> = Api::all(client.clone());
        wait_for(
            Duration::from_secs(60),
            &format!("namespace {ns} in {name}"),
            || async {
                api.get(ns).await?;
                Ok(())
            },
        )
        .await?;
    }
    Ok(())
}

/// Whether the host says member `name` is Ready (`Ready=True`); `None` when its
/// KubeFedCluster has no Ready condition yet.
pub async fn cluster_ready(host: &Client, name: &str) -> anyhow::Result<Option<bool>> {
    let api: Api<KubeFedCluster> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    let cluster = api.get(name).await?;
    Ok(cluster
        .status
        .as_ref()
        .and_then(|s| s.condition(flotilla_api::core::condition::READY))
        .map(|c| c.status == "True"))
}

/// Waits until the host reports member `name` Ready.
pub async fn wait_cluster_ready(
    host: &Client,
    name: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    wait_for(timeout, &format!("{name} Ready"), || async {
        anyhow::ensure!(cluster_ready(host, name).await? == Some(true), "not Ready");
        Ok(())
    })
    .await
}

/// Polls member `name`'s KubeFedCluster every 100 ms from now and returns how long it took
/// to turn not Ready, or `None` after `timeout`.
pub async fn time_until_not_ready(
    host: &Client,
    name: &str,
    timeout: Duration,
) -> Option<Duration> {
    let started = Instant::now();
    while started.elapsed() < timeout {
        if let Ok(Ok(Some(false))) =
            tokio::time::timeout(Duration::from_secs(2), cluster_ready(host, name)).await
        {
            return Some(started.elapsed());
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    None
}

/// Everything that keeps namespace `ns` from having converged, as readable lines (empty
/// when converged): every FederatedConfigMap has `Propagation=True` for its generation and
/// no pending deletion, and each member holds exactly the managed ConfigMaps placed on it,
/// each with the template's data — nothing missing, nothing stray, nothing stale.
pub async fn violations(
    host: &Client,
    members: &[(String, Client)],
    ns: &str,
) -> anyhow::Result<Vec<String>> {
    let mut found = Vec::new();
    let mut expected: BTreeMap<&str, BTreeMap<String, Value>> = BTreeMap::new();
    for (name, _) in members {
        expected.insert(name, BTreeMap::new());
    }
    for obj in fcm_api(host, ns).list(&ListParams::default()).await? {
        let name = obj.name_any();
        if obj.metadata.deletion_timestamp.is_some() {
            found.push(format!("{name}: deletion not complete"));
            continue;
        }
        let status = FederatedStatus::from_dynamic(&obj);
        let generation = obj.metadata.generation.unwrap_or(0);
        let propagated = status.propagation().is_some_and(|c| c.status == "True");
        if status.observed_generation != generation || !propagated {
            found.push(format!(
                "{name}: generation {generation}, observed {}, propagation {:?}",
                status.observed_generation,
                status.propagation().map(|c| (&c.status, &c.reason))
            ));
        }
        let data = obj.data["spec"]["template"]["data"].clone();
        let placed = obj.data["spec"]["placement"]["clusters"]
            .as_array()
            .cloned()
            .unwrap_or_default();
        for cluster in placed.iter().filter_map(|c| c["name"].as_str()) {
            if let Some(objects) = expected.get_mut(cluster) {
                objects.insert(name.clone(), data.clone());
            }
        }
    }
    let managed = ListParams::default().labels(&format!("{MANAGED_LABEL}=true"));
    for (cluster, client) in members {
        let api: Api<ConfigMap> = Api::namespaced(client.clone(), ns);
        let actual: BTreeMap<String, Value> = api
            .list(&managed)
            .await?
            .into_iter()
            .map(|cm| (cm.name_any(), json!(cm.data.unwrap_or_default())))
            .collect();
        let want = &expected[cluster.as_str()];
        for (name, data) in want {
            match actual.get(name) {
                None => found.push(format!("{cluster}/{name}: missing")),
                Some(got) if got != data && !(data.is_null() && got == &json!({})) => {
                    found.push(format!("{cluster}/{name}: data {got} instead of {data}"));
                }
                Some(_) => {}
            }
        }
        for name in actual.keys().filter(|n| !want.contains_key(*n)) {
            found.push(format!("{cluster}/{name}: stray (not placed there)"));
        }
    }
    Ok(found)
}

/// Waits until [`violations`] finds nothing; on timeout fails listing what was left.
/// Returns how long it took.
pub async fn wait_converged(
    host: &Client,
    members: &[(String, Client)],
    ns: &str,
    timeout: Duration,
) -> anyhow::Result<Duration> {
    let started = Instant::now();
    let mut last = Vec::new();
    while started.elapsed() < timeout {
        match tokio::time::timeout(Duration::from_secs(10), violations(host, members, ns)).await {
            Ok(Ok(found)) if found.is_empty() => return Ok(started.elapsed()),
            Ok(Ok(found)) => last = found,
            Ok(Err(e)) => last = vec![format!("checking failed: {e:#}")],
            Err(_) => last = vec!["checking timed out".to_owned()],
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    anyhow::bail!(
        "not converged after {timeout:?}; {} violations, first ones:\n{}",
        last.len(),
        last.iter().take(20).cloned().collect::<Vec<_>>().join("\n")
    )
}

/// When each managed ConfigMap of a member namespace was first seen there, from a watch
/// (so the resolution is the watch's, not a poll interval's). Stops when dropped.
pub struct FirstSeen {
    seen: Arc<Mutex<HashMap<String, Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl FirstSeen {
    /// Starts watching managed ConfigMaps in `ns` of `member`, and waits until the watch's
    /// initial list is done so nothing created afterwards is missed.
    pub async fn start(member: &Client, ns: &str) -> anyhow::Result<FirstSeen> {
        let api: Api<ConfigMap> = Api::namespaced(member.clone(), ns);
        let config = watcher::Config::default().labels(&format!("{MANAGED_LABEL}=true"));
        let seen = Arc::new(Mutex::new(HashMap::new()));
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let record = seen.clone();
        let task = tokio::spawn(async move {
            let mut ready_tx = Some(ready_tx);
            let mut events = std::pin::pin!(watcher(api, config));
            while let Some(event) = events.next().await {
                let now = Instant::now();
                match event {
                    Ok(watcher::Event::Apply(cm) | watcher::Event::InitApply(cm)) => {
                        let mut seen = record.lock().unwrap_or_else(|e| e.into_inner());
                        seen.entry(cm.name_any()).or_insert(now);
                    }
                    Ok(watcher::Event::InitDone) => {
                        if let Some(tx) = ready_tx.take() {
                            let _ = tx.send(());
                        }
                    }
                    _ => {}
                }
            }
        });
        tokio::time::timeout(Duration::from_secs(30), ready_rx)
            .await
            .context("the member watch did not list within 30 s")?
            .context("the member watch ended")?;
        Ok(FirstSeen { seen, task })
    }

    /// When `name` was first seen, if it has been.
    pub fn get(&self, name: &str) -> Option<Instant> {
        self.seen
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(name)
            .copied()
    }

    /// How many of `names` have been seen.
    pub fn count(&self, names: &BTreeSet<String>) -> usize {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        names.iter().filter(|n| seen.contains_key(*n)).count()
    }
}

impl Drop for FirstSeen {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The `p`-th percentile (0–100, nearest rank) of some durations; zero when empty.
pub fn percentile(values: &[Duration], p: f64) -> Duration {
    if values.is_empty() {
        return Duration::ZERO;
    }
    let mut sorted = values.to_vec();
    sorted.sort();
    let rank = ((p / 100.0) * sorted.len() as f64).ceil() as usize;
    sorted[rank.clamp(1, sorted.len()) - 1]
}

/// A small seeded generator (SplitMix64): the soak prints its seed so a run can be
/// replayed with `FLOTILLA_CHAOS_SEED`. Not for anything but test choices.
pub struct Rng(u64);

impl Rng {
    /// A generator from this seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number in `low..high` (`low` when the range is empty).
    pub fn range(&mut self, low: u64, high: u64) -> u64 {
        if high <= low {
            return low;
        }
        low + self.next_u64() % (high - low)
    }

    /// `true` with probability `percent`/100.
    pub fn chance(&mut self, percent: u64) -> bool {
        self.range(0, 100) < percent
    }

    /// A duration in `low..high` milliseconds.
    pub fn millis(&mut self, low: u64, high: u64) -> Duration {
        Duration::from_millis(self.range(low, high))
    }
}
