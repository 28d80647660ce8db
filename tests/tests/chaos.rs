//! A chaos soak: continuous creates, updates and deletes of federated ConfigMaps while a
//! driver with a seeded random number generator restarts member API servers, the host API
//! server, etcd and the in-process control plane (dropped, like a SIGKILLed process, and
//! started afresh), and flips a proxied member through black hole and latency. Then the
//! faults stop and everything must converge: each member holds exactly the placed objects
//! with the desired content, nothing stray, every federated object `Propagation=True` for
//! its generation, every deletion complete.
//!
//! About 2½ minutes by default; `FLOTILLA_CHAOS_SECS=<seconds>` sets how long faults are
//! injected, `FLOTILLA_CHAOS_SEED=<n>` replays a run's choices (the seed is printed).
//! Run with `--nocapture` to see the report.

mod fault_harness;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use fault_harness::{
    ProxiedFederation, Rng, apply_fcm, delete_fcm, fcm_api, federated_namespace_everywhere,
    proxied_federation, start_control_plane, violations, wait_cluster_ready, wait_converged,
};
use flotilla_localenv::FaultMode;
use flotilla_tests::init_tracing;
use kube::Client;
use tokio::time::Instant;

const NS: &str = "chaos";
/// Names the workload draws from, so creates, updates and deletes hit the same objects.
const NAMES: u64 = 40;
/// Default time faults are injected for.
const DEFAULT_SECS: u64 = 100;
/// Every request of the workload and of the checks gives up after this long.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
/// How long everything may take to converge after the last fault.
const CONVERGE: Duration = Duration::from_secs(180);

/// The kinds of fault the driver injects.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Fault {
    MemberApiServer,
    HostApiServer,
    Etcd,
    ControlPlane,
    BlackHole,
    Latency,
}

impl Fault {
    const ALL: [Fault; 6] = [
        Fault::MemberApiServer,
        Fault::HostApiServer,
        Fault::Etcd,
        Fault::ControlPlane,
        Fault::BlackHole,
        Fault::Latency,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Fault::MemberApiServer => "member apiserver restart",
            Fault::HostApiServer => "host apiserver restart",
            Fault::Etcd => "etcd restart",
            Fault::ControlPlane => "control plane kill+restart",
            Fault::BlackHole => "member2 black hole",
            Fault::Latency => "member2 latency",
        }
    }
}

/// The workload's counts: operations attempted and failed by kind.
#[derive(Debug, Default)]
struct Ops {
    attempted: BTreeMap<&'static str, u64>,
    failed: BTreeMap<&'static str, u64>,
}

/// Creates, updates and deletes federated ConfigMaps until `stop`, one at a time with
/// short pauses; every request bounded by [`REQUEST_TIMEOUT`]. Failures (the host API
/// server or etcd being down) are counted, not retried: the next operation goes on.
async fn workload(host: Client, clusters: Vec<String>, seed: u64, stop: Arc<AtomicBool>) -> Ops {
    let mut rng = Rng::new(seed);
    let mut ops = Ops::default();
    let api = fcm_api(&host, NS);
    let mut revision = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let name = format!("c-{}", rng.range(0, NAMES));
        let existing = tokio::time::timeout(REQUEST_TIMEOUT, api.get_opt(&name)).await;
        let kind = match existing {
            Ok(Ok(Some(o))) if o.metadata.deletion_timestamp.is_some() => "noop",
            Ok(Ok(Some(_))) if rng.chance(30) => "delete",
            Ok(Ok(Some(_))) => "update",
            Ok(Ok(None)) => "create",
            _ => "read",
        };
        if kind != "noop" {
            *ops.attempted.entry(kind).or_default() += 1;
            revision += 1;
            let placement: Vec<String> = match rng.range(0, 3) {
                0 => vec![clusters[0].clone()],
                1 => vec![clusters[1].clone()],
                _ => clusters.clone(),
            };
            let data = BTreeMap::from([("rev".to_owned(), revision.to_string())]);
            let result = match kind {
                "delete" => {
                    tokio::time::timeout(REQUEST_TIMEOUT, delete_fcm(&host, NS, &name)).await
                }
                "read" => Ok(Err(anyhow::anyhow!("read failed"))),
                _ => {
                    tokio::time::timeout(
                        REQUEST_TIMEOUT,
                        apply_fcm(&host, NS, &name, &data, &placement),
                    )
                    .await
                }
            };
            if !matches!(result, Ok(Ok(()))) {
                *ops.failed.entry(kind).or_default() += 1;
            }
        }
        tokio::time::sleep(rng.millis(50, 250)).await;
    }
    ops
}

/// Injects one fault, holds it for a random while, lifts it.
async fn inject(pf: &mut ProxiedFederation, fault: Fault, rng: &mut Rng) -> anyhow::Result<String> {
    let hold = rng.millis(2_000, 7_000);
    let detail = match fault {
        Fault::MemberApiServer => {
            let member = pf.members[rng.range(0, pf.members.len() as u64) as usize].clone();
            pf.fed.env.stop_apiserver(&member).await?;
            tokio::time::sleep(hold).await;
            pf.fed.env.start_apiserver(&member).await?;
            member
        }
        Fault::HostApiServer => {
            pf.fed.env.stop_apiserver("host").await?;
            tokio::time::sleep(hold).await;
            pf.fed.env.start_apiserver("host").await?;
            "host".to_owned()
        }
        Fault::Etcd => {
            pf.fed.env.stop_etcd().await?;
            tokio::time::sleep(hold).await;
            pf.fed.env.start_etcd_again().await?;
            String::new()
        }
        Fault::ControlPlane => {
            // Dropped, not shut down: its tasks are aborted mid-flight, as in a SIGKILL.
            drop(pf.fed.control_plane.take());
            let down = rng.millis(0, 2_000);
            tokio::time::sleep(down).await;
            pf.fed.control_plane = Some(start_control_plane(&pf.fed.host));
            return Ok(format!("down {:.1} s", down.as_secs_f64()));
        }
        Fault::BlackHole => {
            pf.proxy.set_mode(FaultMode::BlackHole);
            tokio::time::sleep(hold).await;
            pf.proxy.set_mode(FaultMode::PassThrough);
            String::new()
        }
        Fault::Latency => {
            let delay = rng.millis(500, 3_000);
            pf.proxy.set_mode(FaultMode::Latency(delay));
            tokio::time::sleep(hold).await;
            pf.proxy.set_mode(FaultMode::PassThrough);
            format!("{:.1} s", delay.as_secs_f64())
        }
    };
    Ok(format!("{detail} held {:.1} s", hold.as_secs_f64()))
}

fn seed() -> u64 {
    std::env::var("FLOTILLA_CHAOS_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(1, |d| d.as_nanos() as u64)
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_restarts_partitions_and_latency_the_federation_converges_with_no_violation()
-> anyhow::Result<()> {
    init_tracing();
    let secs = std::env::var("FLOTILLA_CHAOS_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SECS);
    let seed = seed();
    println!(
        "chaos soak: seed {seed} (FLOTILLA_CHAOS_SEED), faults for {secs} s (FLOTILLA_CHAOS_SECS)"
    );
    let mut rng = Rng::new(seed);

    let mut pf = proxied_federation(2, 2).await?;
    let members = pf.member_clients();
    federated_namespace_everywhere(&pf.fed.host, &members, NS).await?;

    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(workload(
        pf.fed.host.clone(),
        pf.members.clone(),
        rng.next_u64(),
        stop.clone(),
    ));

    let started = Instant::now();
    let mut injected: BTreeMap<Fault, u64> = BTreeMap::new();
    while started.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(rng.millis(1_000, 5_000)).await;
        let fault = Fault::ALL[rng.range(0, Fault::ALL.len() as u64) as usize];
        let at = started.elapsed();
        let detail = inject(&mut pf, fault, &mut rng).await?;
        *injected.entry(fault).or_default() += 1;
        println!(
            "  {:>6.1} s  {:<28} {detail}",
            at.as_secs_f64(),
            fault.as_str()
        );
    }
    let last_fault = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let ops = load.await?;

    for name in &pf.members {
        wait_cluster_ready(&pf.fed.host, name, CONVERGE).await?;
    }
    let converged = wait_converged(&pf.fed.host, &members, NS, CONVERGE).await;
    let convergence = last_fault.elapsed();
    let left = violations(&pf.fed.host, &members, NS).await?;
    let objects = fcm_api(&pf.fed.host, NS)
        .list(&Default::default())
        .await?
        .items
        .len();

    println!("chaos soak report (seed {seed}):");
    println!(
        "  operations: {} attempted {:?}, failed {:?}",
        ops.attempted.values().sum::<u64>(),
        ops.attempted,
        ops.failed
    );
    println!(
        "  faults injected: {} — {}",
        injected.values().sum::<u64>(),
        injected
            .iter()
            .map(|(f, n)| format!("{}: {n}", f.as_str()))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!(
        "  convergence after the last fault: {:.1} s; {objects} federated objects at the end",
        convergence.as_secs_f64()
    );
    println!("  violations: {}", left.len());
    for v in left.iter().take(20) {
        println!("    {v}");
    }
    println!("  proxy: {:?}", pf.proxy.stats());
    converged?;
    anyhow::ensure!(
        left.is_empty(),
        "{} violations after convergence",
        left.len()
    );
    Ok(())
}
