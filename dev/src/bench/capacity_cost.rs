//! `flotilla bench --scenario capacity-10x1000`: what the members' resource summary costs
//! (the control plane's watches of every member's Nodes and Pods, the summary it computes
//! from them, its writes of KubeFedCluster `status.resources` and ClusterProfile
//! properties) at N members × P pods, against a baseline in the same run: the same control
//! plane, every member joined and summarised, before the pods exist.
//!
//! Members run a simulated kubelet with [`NODES`] nodes each ([`flotilla_localenv`]); the
//! benchmark creates the pods with `nodeName` set (no scheduler involved), each requesting
//! [`POD_CPU_M`] millicores and [`POD_MEMORY_MIB`] MiB, and the kubelet reports them
//! Running. Every API server writes an audit log (see `audit`), from which the control
//! plane's member requests (its own ServiceAccount's, watches and lists included) and the
//! host's KubeFedCluster and ClusterProfile writes are counted per window. The control
//! plane runs as a child `flotilla controller-manager` when this program is `flotilla`
//! (CPU and RSS of that process), else in this process.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use flotilla_api::{DEFAULT_NAMESPACE, KubeFedCluster, core::ClusterResources};
use flotilla_localenv::{EnvOptions, LocalEnv, NodeCapacity, PodSimulation};
use futures::{StreamExt as _, TryStreamExt as _, stream};
use k8s_openapi::{
    api::core::v1::{Node, Pod},
    jiff::Timestamp,
};
use kube::{
    Api, Client,
    api::{ListParams, PostParams},
};
use serde_json::json;
use tracing::{info, warn};

use super::{
    BENCH_LABEL, BenchOptions, MANAGER, audit,
    capacity_report::{CapacityCostReport, CapacityWindow},
    control_plane::RunningControlPlane,
    procfs,
};
use crate::bootstrap::Bootstrap;

/// Simulated nodes per member.
const NODES: usize = 4;
/// CPUs of a node.
const NODE_CPU: u64 = 16;
/// Memory of a node, GiB.
const NODE_MEMORY_GIB: u64 = 64;
/// CPU request of a pod, millicores.
const POD_CPU_M: u64 = 50;
/// Memory request of a pod, MiB.
const POD_MEMORY_MIB: u64 = 128;
/// Member namespace of the pods (its ServiceAccount exists from the start).
const POD_NS: &str = "default";
/// Waited after the summaries count every pod, so that the writes they cause (the
/// ClusterProfiles follow the KubeFedClusters) land in the creation window: one publish
/// period and some.
const SETTLE: Duration = Duration::from_secs(12);
/// Times the summary is computed to take its median.
const SUMMARY_ROUNDS: usize = 21;

/// Runs the measurement on fresh local clusters: `--members` (10) × `--objects` (1,000)
/// pods, windows of `--steady-secs`.
pub async fn run(opts: &BenchOptions) -> anyhow::Result<CapacityCostReport> {
    let (_, members, pods) = opts.resolved();
    anyhow::ensure!(members >= 1 && pods >= 1, "at least one member and one pod");
    let machine = procfs::machine();
    let audit_dir = std::env::temp_dir().join(format!("flotilla-capcost-{}", std::process::id()));
    let mut env_opts = EnvOptions::with_members(members);
    env_opts.extra_apiserver_args = audit::write_policy(&audit_dir)?;
    env_opts.pods = Some(PodSimulation {
        nodes: NODES,
        capacity: node_capacity(pods),
        ..PodSimulation::default()
    });
    info!(members, pods, "starting the local clusters");
    let env = LocalEnv::start(env_opts)
        .await
        .context("starting the local clusters")?;
    let result = measure(&env, opts, pods).await;
    if let Err(e) = env.shutdown().await {
        warn!(error = %e, "stopping the local clusters failed");
    }
    let _ = std::fs::remove_dir_all(&audit_dir);
    let mut report = result?;
    report.machine = machine;
    report.load_at_end = procfs::machine().load_at_start;
    super::write_json(opts.json.as_deref(), &report)?;
    Ok(report)
}

/// What a node offers: room for a quarter of the pods and a margin, so that every pod
/// bound by name would also fit by the scheduler's rules.
fn node_capacity(pods: usize) -> NodeCapacity {
    let room = (pods * 5 / 4).div_ceil(NODES).max(110);
    NodeCapacity {
        cpu: NODE_CPU.to_string(),
        memory: format!("{NODE_MEMORY_GIB}Gi"),
        pods: room.to_string(),
    }
}

/// A window's start: the time (for the audit logs) and the control plane's CPU.
struct Mark {
    at: Timestamp,
    clock: Instant,
    cpu: f64,
}

impl Mark {
    fn now(cp: &RunningControlPlane) -> Mark {
        Mark {
            at: Timestamp::now(),
            clock: Instant::now(),
            cpu: cp.cpu_s(),
        }
    }
}

async fn measure(
    env: &LocalEnv,
    opts: &BenchOptions,
    pods: usize,
) -> anyhow::Result<CapacityCostReport> {
    let timeout = Duration::from_secs(opts.phase_timeout_secs);
    let window = Duration::from_secs(opts.steady_secs.max(1));
    let fed = Bootstrap::new(MANAGER).federate(env, |_| {}).await?;
    let binary = opts.control_plane_binary()?;
    // Nothing of the control plane runs yet: its CPU so far is 0.
    let startup = Mark {
        at: Timestamp::now(),
        clock: Instant::now(),
        cpu: 0.0,
    };
    let mut cp = RunningControlPlane::start(env, binary.as_deref())?;
    cp.wait_ready_for(&fed.host, fed.members.len(), timeout)
        .await?;
    info!("control plane ready; waiting for every member's first summary");
    let base = wait_published(&fed.host, &fed.cluster_names, timeout, |_, r| {
        r.ready_nodes == NODES as i64
    })
    .await?;
    tokio::time::sleep(SETTLE).await;

    let idle = Mark::now(&cp);
    let startup_rss = cp.rss_mib();
    tokio::time::sleep(window).await;
    let created = Mark::now(&cp);
    let idle_rss = cp.rss_mib();
    info!(pods = pods * fed.members.len(), "creating the pods");
    create_pods(&fed.members, &fed.cluster_names, pods, opts.concurrency).await?;
    wait_running(&fed.members, timeout).await?;
    wait_published(&fed.host, &fed.cluster_names, timeout, |i, r| {
        base.get(i).is_some_and(|b| r.pods == b + pods as i64)
    })
    .await?;
    tokio::time::sleep(SETTLE).await;
    let steady = Mark::now(&cp);
    let created_rss = cp.rss_mib();
    info!("pods counted; measuring the steady state");
    tokio::time::sleep(window).await;
    let end = Mark::now(&cp);
    let steady_rss = cp.rss_mib();
    let peak_rss_mib = cp.own_peak_rss_mib();
    let control_plane = cp.describe();
    let (summary_ms, summary_pods, cut_pod_bytes, computed) = time_summary(&fed.members[0]).await?;
    let published = published_summary(&fed.host, &fed.cluster_names[0]).await?;
    cp.stop().await;
    // The audit backend writes as requests complete; give the last lines a moment.
    tokio::time::sleep(Duration::from_secs(1)).await;
    let logs = Logs::read(env)?;
    Ok(CapacityCostReport {
        members: fed.members.len(),
        pods_per_member: pods,
        nodes_per_member: NODES,
        node_cpu: NODE_CPU,
        node_memory_gib: NODE_MEMORY_GIB,
        pod_cpu_m: POD_CPU_M,
        pod_memory_mib: POD_MEMORY_MIB,
        placement: "nodeName set by the benchmark, Running reported by the simulated kubelet"
            .into(),
        build: if cfg!(debug_assertions) {
            "debug"
        } else {
            "release"
        }
        .into(),
        control_plane,
        startup: logs.window(&startup, &idle, startup_rss),
        idle: logs.window(&idle, &created, idle_rss),
        creation: logs.window(&created, &steady, created_rss),
        steady: logs.window(&steady, &end, steady_rss),
        peak_rss_mib,
        summary_ms,
        summary_pods,
        summary_matches_published: published.as_ref() == Some(&computed),
        cut_pod_bytes,
        ..CapacityCostReport::default()
    })
}

/// The audited requests of the run: the control plane's to the members, the writes of
/// KubeFedCluster status and ClusterProfiles in the host.
struct Logs {
    members: Vec<audit::Request>,
    host: Vec<audit::Request>,
}

impl Logs {
    fn read(env: &LocalEnv) -> anyhow::Result<Logs> {
        let mut members = Vec::new();
        for m in env.members() {
            let user = audit::control_plane_user(DEFAULT_NAMESPACE, m.name());
            let requests = audit::read_log(&audit::log_of(m.dir()), |l| l.contains(&user))?;
            members.extend(requests.into_iter().filter(|r| r.user == user));
        }
        if members.is_empty() {
            bail!(
                "no request of the control plane's ServiceAccount in the members' audit logs \
                 (is the member joined with another identity?)"
            );
        }
        let host = audit::read_log(&audit::log_of(env.host().dir()), |l| {
            l.contains("kubefedclusters") || l.contains("clusterprofiles")
        })?
        .into_iter()
        .filter(|r| matches!(r.verb.as_str(), "create" | "update" | "patch"))
        .filter(|r| r.what == "kubefedclusters/status" || r.what.starts_with("clusterprofiles"))
        .collect();
        Ok(Logs { members, host })
    }

    fn window(&self, from: &Mark, to: &Mark, rss_mib: f64) -> CapacityWindow {
        let in_window = |r: &&audit::Request| r.at >= from.at && r.at < to.at;
        let host: Vec<&audit::Request> = self.host.iter().filter(in_window).collect();
        let status = |summary: bool| {
            host.iter()
                .filter(|r| r.what == "kubefedclusters/status" && r.writes_resources == summary)
                .count() as u64
        };
        CapacityWindow {
            seconds: to.clock.duration_since(from.clock).as_secs_f64(),
            cp_cpu_s: to.cpu - from.cpu,
            rss_mib,
            member_requests: audit::count(&self.members, from.at, to.at, |_| true),
            summary_writes: status(true),
            other_status_writes: status(false),
            profile_writes: host
                .iter()
                .filter(|r| r.what.starts_with("clusterprofiles"))
                .count() as u64,
        }
    }
}

/// Creates `pods` pods in every member, spread over its nodes by name, `concurrency` at a
/// time over all members.
async fn create_pods(
    members: &[Client],
    names: &[String],
    pods: usize,
    concurrency: usize,
) -> anyhow::Result<()> {
    // Owned items: a stream over borrowed ones makes the caller's future not `Send` for
    // every lifetime (the CLI spawns it).
    let work: Vec<(Client, String, usize)> = (0..pods)
        .flat_map(|n| {
            members
                .iter()
                .zip(names)
                .map(move |(client, member)| (client.clone(), member.clone(), n))
        })
        .collect();
    stream::iter(work)
        .map(|(client, member, n)| async move {
            let api: Api<Pod> = Api::namespaced(client, POD_NS);
            let member = member.as_str();
            api.create(&PostParams::default(), &pod(member, n)?)
                .await
                .with_context(|| format!("creating pod {n} in {member}"))
        })
        .buffer_unordered(concurrency.max(1))
        .try_for_each(|_| async { Ok(()) })
        .await
}

/// Pod `n` of `member`, bound to one of its nodes.
fn pod(member: &str, n: usize) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": format!("cap-{n:05}"), "labels": {BENCH_LABEL: "capacity"}},
        "spec": {
            "nodeName": format!("{member}-node{}", n % NODES + 1),
            "containers": [{
                "name": "app",
                "image": "pause",
                "resources": {"requests": {
                    "cpu": format!("{POD_CPU_M}m"),
                    "memory": format!("{POD_MEMORY_MIB}Mi"),
                }},
            }],
        },
    }))?)
}

/// Waits until no benchmark pod in any member is other than Running.
async fn wait_running(members: &[Client], timeout: Duration) -> anyhow::Result<()> {
    let started = Instant::now();
    let lp = ListParams::default()
        .labels(&format!("{BENCH_LABEL}=capacity"))
        .fields("status.phase!=Running")
        .limit(1);
    loop {
        let mut waiting = 0;
        for m in members {
            let api: Api<Pod> = Api::namespaced(m.clone(), POD_NS);
            waiting += api.list_metadata(&lp).await?.items.len();
        }
        if waiting == 0 {
            return Ok(());
        }
        if started.elapsed() > timeout {
            bail!("pods still not Running after {timeout:?}");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// Waits until every member's published summary meets `done`; returns each one's pod count.
async fn wait_published(
    host: &Client,
    names: &[String],
    timeout: Duration,
    done: impl Fn(usize, &ClusterResources) -> bool,
) -> anyhow::Result<Vec<i64>> {
    let started = Instant::now();
    loop {
        let mut pods = Vec::new();
        for (i, name) in names.iter().enumerate() {
            if let Some(r) = published_summary(host, name).await?.filter(|r| done(i, r)) {
                pods.push(r.pods);
            }
        }
        if pods.len() == names.len() {
            return Ok(pods);
        }
        if started.elapsed() > timeout {
            bail!(
                "{} of {} members' published summaries as expected after {timeout:?}",
                pods.len(),
                names.len()
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
}

/// The summary the control plane published for `name`.
async fn published_summary(host: &Client, name: &str) -> anyhow::Result<Option<ClusterResources>> {
    let api: Api<KubeFedCluster> = Api::namespaced(host.clone(), DEFAULT_NAMESPACE);
    Ok(api
        .get(name)
        .await?
        .status
        .and_then(|s| s.resources)
        .map(|r| *r))
}

/// Times the control plane's summary of `member` over its Nodes and Pods cut as its cache
/// keeps them: (median ms, pods, mean bytes of a cut pod's JSON, the summary).
async fn time_summary(member: &Client) -> anyhow::Result<(f64, usize, f64, ClusterResources)> {
    let lp = ListParams::default();
    let mut nodes = Api::<Node>::all(member.clone()).list(&lp).await?.items;
    let mut pods = Api::<Pod>::all(member.clone()).list(&lp).await?.items;
    nodes
        .iter_mut()
        .for_each(flotilla_controllers::capacity::shrink_node);
    pods.iter_mut()
        .for_each(flotilla_controllers::capacity::shrink_pod);
    // The library's watch also drops managedFields before caching.
    pods.iter_mut()
        .for_each(|p| p.metadata.managed_fields = None);
    nodes
        .iter_mut()
        .for_each(|n| n.metadata.managed_fields = None);
    let bytes: usize = pods
        .iter()
        .map(|p| serde_json::to_vec(p).map_or(0, |v| v.len()))
        .sum();
    let mut times = Vec::with_capacity(SUMMARY_ROUNDS);
    let mut summary = ClusterResources::default();
    for _ in 0..SUMMARY_ROUNDS {
        let started = Instant::now();
        summary = flotilla_core::capacity::summary(&nodes, &pods);
        times.push(started.elapsed().as_secs_f64() * 1000.0);
    }
    times.sort_by(f64::total_cmp);
    let median = times.get(times.len() / 2).copied().unwrap_or(0.0);
    let mean_bytes = bytes as f64 / pods.len().max(1) as f64;
    Ok((median, pods.len(), mean_bytes, summary))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pods_are_spread_over_the_members_nodes_and_request_cpu_and_memory() {
        let p = pod("member3", 5).expect("a pod");
        let spec = p.spec.expect("a spec");
        assert_eq!(spec.node_name.as_deref(), Some("member3-node2"));
        let requests = spec.containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.requests.clone())
            .expect("requests");
        assert_eq!(requests["cpu"].0, "50m");
        assert_eq!(requests["memory"].0, "128Mi");
    }

    #[test]
    fn nodes_have_room_for_every_pod_and_a_margin() {
        assert_eq!(node_capacity(1000).pods, "313");
        assert_eq!(node_capacity(20).pods, "110");
    }
}
