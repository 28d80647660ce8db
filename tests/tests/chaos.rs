//! A chaos soak on push and pull members. A workload creates, updates and deletes
//! federated ConfigMaps, rolls FederatedDeployments out progressively (new images, deletes),
//! exports and un-exports Services (Multi-Cluster Services) and creates and deletes
//! ServiceAccountImports, while a driver with a seeded random number generator injects, one
//! at a time: member and host API server restarts, etcd restarts (one etcd under every
//! cluster), control-plane kills (the in-process control plane dropped mid-flight, like a
//! SIGKILL, and started afresh), kills of the pull member's agent, network partitions
//! between the host and member2 and between member3's agent and the host (fault proxies),
//! and latency on either path. Then the faults stop and everything must converge
//! (`soak::Checker`): member objects exactly as placed, rollouts complete with their
//! revisions recorded, the pull member's Works and AppliedWorks exact, ServiceImports and
//! EndpointSlices as exported, every import's kubeconfig Secret working — 0 violations.
//!
//! Faults for 2 minutes by default (the suite's run); `FLOTILLA_CHAOS_LONG=1` for the
//! 30-minute soak, `FLOTILLA_CHAOS_SECS=<seconds>` for any length, and
//! `FLOTILLA_CHAOS_SEED=<n>` replays a run's choices (the seed is printed). Run with
//! `--no-capture` to see the report.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use crate::fault_harness::{Rng, wait_cluster_ready};
use crate::soak::{
    Checker,
    faults::{Fault, inject, pause},
    setup::soak_federation,
    workload::{self, Ops, Workload},
};
use tokio::time::Instant;

/// Faults injected in the suite's run.
const SUITE_SECS: u64 = 120;
/// Faults injected with `FLOTILLA_CHAOS_LONG=1`.
const LONG_SECS: u64 = 1_800;
/// How long everything may take to converge after the last fault.
const CONVERGE: Duration = Duration::from_secs(300);

fn env_u64(name: &str) -> Option<u64> {
    std::env::var(name).ok().and_then(|s| s.parse().ok())
}

fn fault_secs() -> u64 {
    let long = std::env::var("FLOTILLA_CHAOS_LONG").is_ok_and(|v| !v.is_empty() && v != "0");
    env_u64("FLOTILLA_CHAOS_SECS").unwrap_or(if long { LONG_SECS } else { SUITE_SECS })
}

fn seed() -> u64 {
    env_u64("FLOTILLA_CHAOS_SEED").unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn under_restarts_partitions_and_kills_push_and_pull_members_converge_with_no_violation()
-> anyhow::Result<()> {
    let secs = fault_secs();
    let seed = seed();
    println!("chaos soak: seed {seed} (FLOTILLA_CHAOS_SEED), faults for {secs} s");
    let mut rng = Rng::new(seed);
    let setup = Instant::now();
    let mut soak = soak_federation().await?;
    let checker = Checker::new(&soak);
    println!(
        "  federation up in {:.1} s; faults start",
        setup.elapsed().as_secs_f64()
    );

    let stop = Arc::new(AtomicBool::new(false));
    let load = tokio::spawn(workload::run(
        Workload {
            host: soak.fed.host.clone(),
            clusters: soak.names.clone(),
            push: soak.push_clients(),
            seed: rng.next_u64(),
        },
        stop.clone(),
    ));

    let started = Instant::now();
    let mut injected: BTreeMap<Fault, u64> = BTreeMap::new();
    while started.elapsed() < Duration::from_secs(secs) {
        tokio::time::sleep(pause(&mut rng)).await;
        let fault = Fault::ALL[rng.range(0, Fault::ALL.len() as u64) as usize];
        let at = started.elapsed();
        let detail = inject(&mut soak, fault, &mut rng).await?;
        *injected.entry(fault).or_default() += 1;
        println!(
            "  {:>7.1} s  {:<30} {detail}",
            at.as_secs_f64(),
            fault.as_str()
        );
    }
    let last_fault = Instant::now();
    stop.store(true, Ordering::Relaxed);
    let ops = load.await?;

    for name in &soak.names {
        wait_cluster_ready(&soak.fed.host, name, CONVERGE).await?;
    }
    let converged = checker.wait_converged(CONVERGE).await;
    let convergence = last_fault.elapsed();
    let left = match &converged {
        Ok(_) => checker.violations().await?,
        Err(last) => last.clone(),
    };
    report(seed, &ops, &injected, convergence, &left);
    println!("  proxies: host/member2 {:?}", soak.member_proxy.stats());
    println!(
        "           member3 agent/host {:?}",
        soak.agent_proxy.stats()
    );
    anyhow::ensure!(
        converged.is_ok() && left.is_empty(),
        "{} violations {:.0} s after the last fault",
        left.len(),
        convergence.as_secs_f64()
    );
    Ok(())
}

fn report(
    seed: u64,
    ops: &Ops,
    injected: &BTreeMap<Fault, u64>,
    convergence: Duration,
    left: &[String],
) {
    println!("chaos soak report (seed {seed}):");
    println!(
        "  operations: {} attempted, {} failed",
        ops.attempted.values().sum::<u64>(),
        ops.failed.values().sum::<u64>()
    );
    for (kind, n) in &ops.attempted {
        let failed = ops.failed.get(kind).copied().unwrap_or(0);
        println!("    {kind:<20} {n:>6} ({failed} failed)");
    }
    println!("  faults injected: {}", injected.values().sum::<u64>());
    for (fault, n) in injected {
        println!("    {:<30} {n:>4}", fault.as_str());
    }
    println!(
        "  converged {:.1} s after the last fault",
        convergence.as_secs_f64()
    );
    println!("  violations: {}", left.len());
    for v in left.iter().take(30) {
        println!("    {v}");
    }
}
