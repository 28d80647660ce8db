//! Faults on real clusters: one member black-holed or slow behind a fault proxy must not
//! hold back propagation to the others, must be marked not Ready within the health
//! thresholds, and must converge once the fault is lifted; an etcd restart under every API
//! server is ridden out and everything converges afterwards.
//!
//! Latencies and recovery times are printed (run with `--nocapture` to see them), not
//! asserted: they depend on the machine. docs/faults.md records measured values.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::fault_harness::{
    FAILURE_THRESHOLD, FirstSeen, HEALTH_PERIOD, HEALTH_TIMEOUT, ProxiedFederation, apply_fcm,
    delete_fcm, federated_namespace_everywhere, percentile, proxied_federation,
    time_until_not_ready, violations, wait_cluster_ready, wait_converged,
};
use anyhow::{Context as _, ensure};
use flotilla_localenv::FaultMode;
use flotilla_tests::{federation::federation, init_tracing, wait_for};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::{Api, Client};
use tokio::time::Instant;

const NS: &str = "faults";
/// Federated ConfigMaps created per phase.
const OBJECTS: usize = 30;
/// How long every object of a phase may take to reach the healthy member. Generous: the
/// point is that each arrives while the other member is faulty; the latencies are printed.
const REACH_HEALTHY: Duration = Duration::from_secs(120);
/// How long a member may take to converge once its fault is lifted.
const CONVERGE: Duration = Duration::from_secs(120);

/// A propagation to the healthy member slower than this waited on something else.
const SLOW: Duration = Duration::from_secs(5);

/// How long the test waits for a faulty member to be reported not Ready. The expected time
/// (`FAILURE_THRESHOLD` failed probes, each up to a period plus the probe timeout, one more
/// period of phase) is printed next to the measured one.
const NOT_READY_WAIT: Duration = Duration::from_secs(30);

fn expected_not_ready() -> Duration {
    (HEALTH_PERIOD + HEALTH_TIMEOUT) * FAILURE_THRESHOLD + HEALTH_PERIOD
}

/// What one phase measured.
struct Phase {
    label: String,
    p50: Duration,
    p99: Duration,
    max: Duration,
    /// Objects that took longer than [`SLOW`] to reach member1.
    slow: usize,
    not_ready_after: Option<Duration>,
    converged_after_heal: Option<Duration>,
}

fn data(i: usize, phase: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        ("i".to_owned(), i.to_string()),
        ("phase".to_owned(), phase.to_owned()),
    ])
}

/// Creates `OBJECTS` federated ConfigMaps placed on both members, under `fault` on the
/// proxied member (none for the baseline), and measures how long each takes to reach
/// member1. Then lifts the fault and waits for everything to converge.
async fn phase(
    pf: &ProxiedFederation,
    member1: &FirstSeen,
    label: &str,
    fault: Option<FaultMode>,
) -> anyhow::Result<Phase> {
    let host = &pf.fed.host;
    let members = pf.member_clients();
    let both = pf.members.clone();
    let proxied = pf.members[1].clone();
    wait_cluster_ready(host, &proxied, Duration::from_secs(60)).await?;

    let not_ready = fault.map(|mode| {
        pf.proxy.set_mode(mode);
        let (host, proxied) = (host.clone(), proxied.clone());
        tokio::spawn(async move { time_until_not_ready(&host, &proxied, NOT_READY_WAIT).await })
    });

    // Created right after the fault starts, while the member still counts as Ready: the
    // controller tries it and must not make member1 wait for it.
    let mut created = BTreeMap::new();
    for i in 0..OBJECTS {
        let name = format!("{label}-{i}");
        apply_fcm(host, NS, &name, &data(i, label), &both).await?;
        created.insert(name, Instant::now());
    }
    let names: BTreeSet<String> = created.keys().cloned().collect();
    let member1_api: Api<ConfigMap> = Api::namespaced(pf.fed.members[0].clone(), NS);
    let reached = wait_for(
        REACH_HEALTHY,
        &format!("every {label} object in member1"),
        || async {
            // The watch gives the arrival times; a direct read double-checks what it has not
            // reported yet, so a watch hiccup cannot pass for a propagation failure.
            let mut missing = Vec::new();
            for name in names.iter().filter(|n| member1.get(n).is_none()) {
                if member1_api.get_opt(name).await?.is_none() {
                    missing.push(name.clone());
                }
            }
            ensure!(missing.is_empty(), "not in member1: {missing:?}");
            Ok(())
        },
    )
    .await;
    if let Err(e) = reached {
        let found = violations(host, &members, NS).await.unwrap_or_default();
        return Err(e.context(format!("state: {found:#?}")));
    }
    let latencies: Vec<Duration> = created
        .iter()
        .map(|(name, at)| {
            // Seen by the direct read only: count it as arriving when the wait ended.
            let seen = member1.get(name).unwrap_or_else(Instant::now);
            seen.saturating_duration_since(*at)
        })
        .collect();

    let mut not_ready_after = None;
    let mut converged_after_heal = None;
    if let Some(task) = not_ready {
        not_ready_after = task.await?;
        let healed = Instant::now();
        pf.proxy.set_mode(FaultMode::PassThrough);
        wait_cluster_ready(host, &proxied, CONVERGE).await?;
        wait_converged(host, &members, NS, CONVERGE)
            .await
            .with_context(|| format!("{proxied} converging after {label}"))?;
        converged_after_heal = Some(healed.elapsed());
    } else {
        wait_converged(host, &members, NS, CONVERGE).await?;
    }
    Ok(Phase {
        label: label.to_owned(),
        p50: percentile(&latencies, 50.0),
        p99: percentile(&latencies, 99.0),
        max: percentile(&latencies, 100.0),
        slow: latencies.iter().filter(|l| **l > SLOW).count(),
        not_ready_after,
        converged_after_heal,
    })
}

fn report(phases: &[Phase]) {
    let base = &phases[0];
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64().max(0.001);
    println!("member1 propagation latency per object ({OBJECTS} objects per phase):");
    for p in phases {
        println!(
            "  {:<11} P50 {:>6.0} ms ({:>5.1}x baseline)  P99 {:>6.0} ms ({:>5.1}x)  max {:>6.0} ms  over {}s: {:>2}  member2 not Ready after {}  converged {} after the fault was lifted",
            p.label,
            p.p50.as_secs_f64() * 1000.0,
            ratio(p.p50, base.p50),
            p.p99.as_secs_f64() * 1000.0,
            ratio(p.p99, base.p99),
            p.max.as_secs_f64() * 1000.0,
            SLOW.as_secs(),
            p.slow,
            p.not_ready_after
                .map_or("-".to_owned(), |d| format!("{:.1} s", d.as_secs_f64())),
            p.converged_after_heal
                .map_or("-".to_owned(), |d| format!("{:.1} s", d.as_secs_f64())),
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_black_holed_or_slow_member_neither_holds_back_the_others_nor_misses_objects_once_healed()
-> anyhow::Result<()> {
    init_tracing();
    let pf = proxied_federation(2, 2).await?;
    let members = pf.member_clients();
    federated_namespace_everywhere(&pf.fed.host, &members, NS).await?;
    let member1 = FirstSeen::start(&pf.fed.members[0], NS).await?;

    // The first objects after start-up also wait for caches and namespaces to settle;
    // the baseline is taken once warm.
    phase(&pf, &member1, "warm-up", None).await?;
    let mut phases = vec![phase(&pf, &member1, "baseline", None).await?];
    phases.push(phase(&pf, &member1, "black-hole", Some(FaultMode::BlackHole)).await?);
    phases.push(
        phase(
            &pf,
            &member1,
            "latency-2s",
            Some(FaultMode::Latency(Duration::from_secs(2))),
        )
        .await?,
    );
    report(&phases);
    println!(
        "member2 expected not Ready within about {:.1} s (health period, timeout and threshold)",
        expected_not_ready().as_secs_f64()
    );
    println!("proxy: {:?}", pf.proxy.stats());

    // Each faulty member must have been reported not Ready while its fault lasted (how
    // soon is printed above, not asserted: it depends on the machine's load).
    for p in &phases[1..] {
        ensure!(
            p.not_ready_after.is_some(),
            "member2 never turned not Ready during {}",
            p.label
        );
    }
    // That the healthy member does not wait on the faulty one is measured, not asserted
    // here: the table above and docs/faults.md give member1's latency per phase as a ratio
    // to this run's fault-free baseline.
    Ok(())
}

/// `(name, client)` of every member of a plain federation.
fn named(members: &[Client]) -> Vec<(String, Client)> {
    members
        .iter()
        .enumerate()
        .map(|(i, c)| (format!("member{}", i + 1), c.clone()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_etcd_restart_under_every_api_server_is_ridden_out_and_everything_converges()
-> anyhow::Result<()> {
    init_tracing();
    let fed = federation(2).await?;
    let members = named(&fed.members);
    let everywhere: Vec<String> = members.iter().map(|(n, _)| n.clone()).collect();
    let only_member1 = vec![everywhere[0].clone()];
    federated_namespace_everywhere(&fed.host, &members, NS).await?;
    for i in 0..20 {
        let placement = if i % 4 == 0 {
            &only_member1
        } else {
            &everywhere
        };
        apply_fcm(
            &fed.host,
            NS,
            &format!("cm-{i}"),
            &data(i, "before"),
            placement,
        )
        .await?;
    }
    let first = wait_converged(&fed.host, &members, NS, CONVERGE).await?;
    println!("20 objects propagated in {:.1} s", first.as_secs_f64());

    fed.env.stop_etcd().await?;
    let stopped = Instant::now();
    tokio::time::sleep(Duration::from_secs(5)).await;
    fed.env.start_etcd_again().await?;
    let restarted = Instant::now();
    println!(
        "etcd down for {:.1} s",
        restarted.duration_since(stopped).as_secs_f64()
    );

    // Writes right after the restart: the host API server may still be reconnecting, so
    // each is retried for a while, as a user's kubectl would be.
    for i in 20..23 {
        let (name, data) = (format!("cm-{i}"), data(i, "after"));
        wait_for(Duration::from_secs(60), &format!("creating {name}"), || {
            apply_fcm(&fed.host, NS, &name, &data, &everywhere)
        })
        .await?;
    }
    for i in 1..4 {
        let (name, data) = (format!("cm-{i}"), data(i, "updated"));
        wait_for(Duration::from_secs(60), &format!("updating {name}"), || {
            apply_fcm(&fed.host, NS, &name, &data, &only_member1)
        })
        .await?;
    }
    for i in 4..7 {
        let name = format!("cm-{i}");
        wait_for(
            Duration::from_secs(60),
            &format!("deleting {name}"),
            || async {
                match delete_fcm(&fed.host, NS, &name).await {
                    Err(e)
                        if e.downcast_ref::<kube::Error>()
                            .is_some_and(|k| matches!(k, kube::Error::Api(s) if s.code == 404)) =>
                    {
                        Ok(())
                    }
                    other => other,
                }
            },
        )
        .await?;
    }
    let converged = wait_converged(&fed.host, &members, NS, CONVERGE).await?;
    println!(
        "converged {:.1} s after etcd was back ({:.1} s after the last write)",
        restarted.elapsed().as_secs_f64(),
        converged.as_secs_f64()
    );
    let left = violations(&fed.host, &members, NS).await?;
    ensure!(left.is_empty(), "violations: {left:?}");
    Ok(())
}
