//! The benchmark keeps working: a small run of `flotilla bench` (10 ConfigMaps and 4
//! Deployments × 4 lean members without a controller-manager, joined with their admin
//! credentials, as the fleet scenario starts them, with the fleet phases and a slow member)
//! propagates every object, makes no steady-state writes and fills in every figure. Nothing
//! here asserts a timing: the benchmark measures, the test suite only keeps it from rotting.

use std::time::Duration;

use flotilla_dev::bench::{self, BenchOptions, BenchReport, FleetReport, Phase};

/// Members of the run.
const MEMBERS: usize = 4;
/// Federated ConfigMaps.
const OBJECTS: usize = 10;
/// Federated Deployments.
const DEPLOYMENTS: usize = 4;

fn assert_phase_is_sane(what: &str, p: &Phase, member_objects: usize) {
    assert_eq!(p.member_objects, member_objects, "{what}: member objects");
    assert!(
        p.seconds.is_finite() && p.seconds > 0.0,
        "{what}: seconds {}",
        p.seconds
    );
    assert!(
        p.objects_per_second.is_finite() && p.objects_per_second > 0.0,
        "{what}: throughput {}",
        p.objects_per_second
    );
    let l = p.latency_ms;
    assert!(
        l.p50 > 0.0 && l.p50 <= l.p95 && l.p95 <= l.p99 && l.p99 <= l.max,
        "{what}: latency percentiles out of order: {l:?}"
    );
    assert!(
        p.requests_per_member_object >= 1.0,
        "{what}: every member object costs at least one request, counted {} ({:?} / {:?})",
        p.requests_per_member_object,
        p.member_requests,
        p.host_requests
    );
    assert!(
        p.member_requests_per_member_object >= 1.0
            && p.member_requests_per_member_object <= p.requests_per_member_object,
        "{what}: the members' share of the requests, counted {} of {}",
        p.member_requests_per_member_object,
        p.requests_per_member_object
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_benchmark_run_propagates_everything_and_reports_complete_figures()
-> anyhow::Result<()> {
    flotilla_tests::init_tracing();
    let json =
        std::env::temp_dir().join(format!("flotilla-bench-smoke-{}.json", std::process::id()));
    let report = bench::run(BenchOptions {
        members: Some(MEMBERS),
        objects: Some(OBJECTS),
        deployments: Some(DEPLOYMENTS),
        // The fleet scenario's members (no controller-manager, a Go memory limit), at a
        // small N, and its phases with a slow member.
        lean_members: true,
        no_member_controller_manager: true,
        fleet_phases: true,
        slow_member: Some("member2".into()),
        slow_latency: Duration::from_millis(500),
        // Longer than the health checks' period (10 s), so every member is checked.
        idle_secs: 11,
        steady_secs: 3,
        phase_timeout_secs: 120,
        json: Some(json.clone()),
        ..BenchOptions::default()
    })
    .await?;

    assert_eq!(
        (report.scenario.as_str(), report.members, report.objects),
        ("10x4", MEMBERS, OBJECTS)
    );
    assert_eq!(report.kinds.len(), 2);
    let cm = &report.kinds[0];
    assert_eq!(cm.kind, "ConfigMap");
    for (k, objects) in [(cm, OBJECTS), (&report.kinds[1], DEPLOYMENTS)] {
        for (what, c) in [
            ("create", &k.create),
            ("update", &k.update),
            ("delete", &k.delete),
        ] {
            let what = format!("{} {what}", k.kind);
            assert_phase_is_sane(&format!("flotilla {what}"), &c.flotilla, objects * MEMBERS);
            assert_phase_is_sane(&format!("raw {what}"), &c.raw, objects * MEMBERS);
            assert!(
                c.time_ratio.is_finite() && c.throughput_ratio.is_finite(),
                "{what}: ratios"
            );
        }
        assert_eq!(
            (
                k.steady.member_writes,
                k.steady.host_writes,
                k.restart.objects
            ),
            (0, 0, objects),
            "{}: steady state and restart {:?} {:?}",
            k.kind,
            k.steady,
            k.restart
        );
    }
    assert!(
        cm.create.raw.member_requests.values().sum::<u64>() >= (OBJECTS * MEMBERS) as u64,
        "raw creates counted by the API servers: {:?}",
        cm.create.raw.member_requests
    );
    assert!(
        cm.create.flotilla.control_plane_cpu_s > 0.0,
        "control-plane CPU measured"
    );

    assert_eq!(
        cm.steady.member_writes, 0,
        "steady state writes to members: {:?}",
        cm.steady
    );
    assert_eq!(
        cm.steady.host_writes, 0,
        "steady state writes to the host: {:?}",
        cm.steady
    );
    assert_eq!(cm.steady.resyncs_forced, MEMBERS);

    // A hard restart with everything propagated: nothing rewritten, and the probe object
    // created right after it reached every member.
    assert_eq!(cm.restart.objects, OBJECTS);
    // With the fleet phases a slow member's cache syncs late and requeues every object;
    // two causes of a write after the restart are gone: a finalizer patch repeated over a
    // host cache that had not delivered the first (now remembered), and a workload's
    // summary written without a listing member (now kept until it has listed).
    assert_eq!(
        cm.restart.member_writes, 0,
        "member writes after a restart: {:?}",
        cm.restart
    );
    assert_eq!(
        cm.restart.host_writes, 0,
        "host writes after a restart: {:?}",
        cm.restart
    );
    assert!(
        cm.restart.member_reads > 0,
        "the new process listed: {:?}",
        cm.restart
    );
    assert!(cm.restart.first_new_object_s > 0.0);

    // The sequential client: every object created one by one (GET + POST), then one bulk
    // delete, through Flotilla and straight into the members.
    let seq = cm
        .sequential
        .as_ref()
        .expect("the sequential-client phase ran");
    for (what, p) in [("flotilla", &seq.flotilla), ("raw", &seq.raw)] {
        assert_eq!(
            p.member_objects,
            OBJECTS * MEMBERS,
            "{what} sequential: {p:?}"
        );
        assert!(
            p.writes_s > 0.0 && p.bulk_delete_call_s > 0.0,
            "{what} sequential: {p:?}"
        );
        assert!(
            p.present_after_last_write_s >= 0.0,
            "{what} sequential: {p:?}"
        );
    }
    // Raw: the client's GET and POST per member object; Flotilla's members see the apply.
    assert!(
        (seq.raw.member_requests_per_member_object - 2.0).abs() < 0.01,
        "{seq:?}"
    );
    assert!(
        seq.flotilla.member_requests_per_member_object >= 1.0,
        "{seq:?}"
    );

    assert!(report.cost.control_plane_cpu_s > 0.0);
    assert!(report.cost.control_plane_peak_rss_mib.is_finite());
    assert_eq!(report.targets.len(), 8);
    assert!(
        report.reference.is_none(),
        "only the named scenario carries reference figures"
    );

    assert_fleet_is_complete(report.fleet.as_ref().expect("the fleet phases ran"));

    let table = report.table();
    for needle in [
        "ConfigMap",
        "create -> all present",
        "steady state",
        "restart (SIGKILL",
        "sequential client",
        "targets:",
        "fleet: 4 members (no member controller-manager",
        "placement to half the fleet (2 kept, 2 left)",
        "slow member member2",
        "members drained at once",
    ] {
        assert!(table.contains(needle), "table lacks {needle:?}:\n{table}");
    }
    let written: BenchReport = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
    std::fs::remove_file(&json)?;
    assert_eq!(
        written.kinds[0].create.raw.member_objects,
        OBJECTS * MEMBERS
    );
    assert!(written.fleet.is_some(), "the JSON carries the fleet report");
    println!("{table}");
    Ok(())
}

/// The fleet phases: every member Ready, health checks counted at idle, the memory budget,
/// one object everywhere, the half-fleet moves (counts of member objects in the moved
/// half) and both slow-member phases over the other members.
fn assert_fleet_is_complete(f: &FleetReport) {
    assert!(!f.member_controller_manager);
    assert!(f.clusters_start_s > 0.0 && f.ready_s > 0.0, "{f:?}");
    assert!(
        f.idle.member_requests_per_cluster_per_min > 0.0,
        "an idle control plane checks every member's health: {:?}",
        f.idle
    );
    assert!(
        f.idle.control_plane_cpu_ms_per_cluster_per_min.is_finite(),
        "{:?}",
        f.idle
    );
    assert!(
        f.memory.peak_rss_mib.is_finite() && f.memory.idle_rss_mib > 0.0,
        "{:?}",
        f.memory
    );
    assert_eq!(f.memory.peak_member_objects, OBJECTS * MEMBERS);
    assert!(f.one_object_s > 0.0);
    assert_eq!(f.half_fleet.len(), 2, "ConfigMaps and Deployments");
    for (h, objects) in f.half_fleet.iter().zip([OBJECTS, DEPLOYMENTS]) {
        assert_eq!((h.kept, h.moved), (2, 2), "{h:?}");
        assert_phase_is_sane(&format!("{} to half", h.kind), &h.to_half, objects * 2);
        assert_phase_is_sane(&format!("{} back", h.kind), &h.back, objects * 2);
    }
    let slow = f.slow_member.as_ref().expect("the slow member phases ran");
    assert_eq!((slow.name.as_str(), slow.objects), ("member2", OBJECTS));
    for (what, p) in [
        ("without", &slow.others_without),
        ("with", &slow.others_with),
    ] {
        assert_phase_is_sane(
            &format!("slow member, {what} the fault"),
            p,
            OBJECTS * (MEMBERS - 1),
        );
    }
    assert!(slow.latency_ratio.p99.is_finite(), "{slow:?}");
    assert!(
        slow.caught_up_s.is_some(),
        "the slow member holds every object once its fault is lifted: {slow:?}"
    );
    // 4 members: one drained at once, maxClusters 1; the busiest member holds at least a
    // quarter of the objects, and every object is placed again after the moves.
    let drain = f.drain.as_ref().expect("the drain phase ran");
    assert_eq!(
        (drain.objects, drain.max_clusters, drain.drained.len()),
        (OBJECTS, 1, 1),
        "{drain:?}"
    );
    assert!(drain.moved_objects >= OBJECTS / MEMBERS, "{drain:?}");
    assert_eq!(drain.moved_copies, drain.moved_objects, "{drain:?}");
    assert_eq!(drain.placed_after, OBJECTS, "{drain:?}");
}

/// Native objects of the policy run.
const POLICY_OBJECTS: usize = 10;
/// Members of the policy run.
const POLICY_MEMBERS: usize = 2;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_policy_run_puts_the_policy_path_beside_federated_and_raw_with_every_host_request()
-> anyhow::Result<()> {
    flotilla_tests::init_tracing();
    let json =
        std::env::temp_dir().join(format!("flotilla-bench-policy-{}.json", std::process::id()));
    let report = bench::run(BenchOptions {
        members: Some(POLICY_MEMBERS),
        objects: Some(POLICY_OBJECTS),
        policy: true,
        sequential: 0,
        steady_secs: 3,
        phase_timeout_secs: 120,
        json: Some(json.clone()),
        ..BenchOptions::default()
    })
    .await?;
    let member_objects = POLICY_OBJECTS * POLICY_MEMBERS;
    let cm = &report.kinds[0];
    let p = cm.policy.as_ref().expect("the policy path ran");
    for (what, t) in [
        ("create", &p.create),
        ("update", &p.update),
        ("delete", &p.delete),
    ] {
        assert_phase_is_sane(&format!("policy {what}"), &t.policy, member_objects);
        assert!(
            t.raw_s > 0.0 && t.federated_s > 0.0 && t.policy_ratio.is_finite(),
            "{what}: the three paths timed in one run: {t:?}"
        );
        assert_eq!(t.host.native_objects, POLICY_OBJECTS, "{what}");
        assert!(
            t.host.writes_per_native_object >= 1.0,
            "{what}: the policy path writes its Federated object in the host: {:?}",
            t.host.requests
        );
    }
    let created = &p.create.host.requests;
    assert!(
        created
            .get("federatedconfigmaps POST")
            .is_some_and(|n| *n >= POLICY_OBJECTS as u64),
        "the policy controller created a Federated object per native one: {created:?}"
    );
    assert!(
        created
            .get("federatednamespaces POST")
            .is_some_and(|n| *n >= 1),
        "the policy controller federated the objects' namespace: {created:?}"
    );
    assert!(
        !created.contains_key("configmaps POST"),
        "the benchmark's own creates are taken out: {created:?}"
    );
    assert_eq!(
        (p.steady.member_writes, p.steady.host_total()),
        (0, 0),
        "policy path steady state: {:?}",
        p.steady
    );
    // The host's writes after a restart are reported, not asserted here: the policy
    // controller rewrites Federated objects whose native came from a LIST rather than a
    // watch event (docs/benchmark-log.md, 2026-11-28); the members must see nothing.
    assert_eq!(p.restart.member_writes, 0, "{:?}", p.restart);
    assert!(p.probe_after_restart_s > 0.0);
    assert!(!p.not_counted.is_empty());
    assert_eq!(report.targets.len(), 8 + 3, "{:?}", report.targets);

    let table = report.table();
    for needle in [
        "three paths on the same clusters",
        "host requests per native object",
        "policy path, steady state",
        "policy path, restart",
        "not counted apart",
        "ConfigMap policy path: member requests per member object",
    ] {
        assert!(table.contains(needle), "table lacks {needle:?}:\n{table}");
    }
    let written: BenchReport = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
    std::fs::remove_file(&json)?;
    let written = written.kinds[0]
        .policy
        .as_ref()
        .expect("the JSON carries it");
    assert_eq!(written.create.host.requests, p.create.host.requests);
    println!("{table}");
    Ok(())
}

/// Members of the pull fleet run.
const PULL_MEMBERS: usize = 2;
/// Federated ConfigMaps of the pull fleet run.
const PULL_OBJECTS: usize = 6;

/// One phase of a pull run counted every request: the host's Works, the members' objects
/// and their AppliedWork records, each per member object.
fn assert_pull_phase_is_counted(what: &str, p: &Phase, member_objects: usize) {
    assert_phase_is_sane(what, p, member_objects);
    let pull = p.pull.as_ref().expect("a pull run counts every request");
    assert!(
        pull.host_work_requests_per_member_object > 0.0
            && pull.host_works.keys().all(|k| k.starts_with("works")),
        "{what}: every member object of a Pull cluster goes through a Work: {pull:?}"
    );
    assert!(
        pull.member_requests_per_member_object
            >= p.member_requests_per_member_object + pull.record_requests_per_member_object - 1e-9,
        "{what}: the members' figure adds the AppliedWork records to the kind's: {pull:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_pull_fleet_counts_works_and_applied_work_records_and_costs_its_agents()
-> anyhow::Result<()> {
    flotilla_tests::init_tracing();
    let json =
        std::env::temp_dir().join(format!("flotilla-bench-pull-{}.json", std::process::id()));
    let report = bench::run(BenchOptions {
        members: Some(PULL_MEMBERS),
        objects: Some(PULL_OBJECTS),
        pull: true,
        lean_members: true,
        no_member_controller_manager: true,
        fleet_phases: true,
        idle_secs: 5,
        sequential: 0,
        steady_secs: 3,
        phase_timeout_secs: 120,
        json: Some(json.clone()),
        ..BenchOptions::default()
    })
    .await?;
    let cm = &report.kinds[0];
    let member_objects = PULL_OBJECTS * PULL_MEMBERS;
    for (what, c) in [
        ("create", &cm.create),
        ("update", &cm.update),
        ("delete", &cm.delete),
    ] {
        assert_pull_phase_is_counted(&format!("pull {what}"), &c.flotilla, member_objects);
        // The agents keep running through the raw part (its window is counted the same
        // way), with no Work to apply.
        let raw = c.raw.pull.as_ref().expect("the raw window counted");
        assert_eq!(raw.writes().0, 0, "{what}: the raw baseline writes no Work");
    }
    let created = cm.create.flotilla.pull.as_ref().expect("counted");
    assert!(
        created.record_requests_per_member_object > 0.0,
        "the agents record what they applied: {created:?}"
    );
    let steady = cm.steady.pull.as_ref().expect("the steady state counted");
    assert_eq!(steady.writes(), (0, 0, 0), "pull steady state: {steady:?}");
    assert!(cm.restart.pull.is_some(), "{:?}", cm.restart);
    let agents_restarted = cm.agent_restart.as_ref().expect("every agent restarted");
    assert!(
        agents_restarted.agents == PULL_MEMBERS && agents_restarted.ready_s > 0.0,
        "{agents_restarted:?}"
    );
    assert_eq!(
        agents_restarted.requests.writes(),
        (0, 0, 0),
        "new agents over applied Works write nothing: {agents_restarted:?}"
    );

    let f = report.fleet.as_ref().expect("the fleet phases ran");
    assert!(f.ready_s > 0.0 && f.one_object_s > 0.0, "{f:?}");
    let agents = f.agents.as_ref().expect("the agents' cost");
    assert_eq!(agents.agents, PULL_MEMBERS);
    assert!(
        agents.rss_per_cluster_mib.is_finite() && agents.cpu_s > 0.0,
        "{agents:?}"
    );
    assert!(f.idle.agent_cpu_ms_per_cluster_per_min.is_finite());
    let h = f.half_fleet.first().expect("the half-fleet moves ran");
    assert_pull_phase_is_counted("pull to half", &h.to_half, PULL_OBJECTS * h.moved);
    assert_pull_phase_is_counted("pull back", &h.back, PULL_OBJECTS * h.moved);

    assert_eq!(
        report
            .targets
            .iter()
            .filter(|t| t.name.starts_with("pull: "))
            .count(),
        4,
        "pull mode's targets: {:?}",
        report.targets
    );
    let table = report.table();
    for needle in [
        "host requests for Works per member object",
        "host Works: works",
        "AppliedWorks: appliedworks",
        "not in these figures",
        "pull, steady state: 0 Work writes in the host, 0 member object writes, 0 AppliedWork writes",
        "host requests per cluster per minute",
        "restart of every agent (2 agents",
        "agents: 2 in the benchmark's process",
    ] {
        assert!(table.contains(needle), "table lacks {needle:?}:\n{table}");
    }
    let written: BenchReport = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
    std::fs::remove_file(&json)?;
    assert_eq!(
        written.kinds[0].create.flotilla.pull.as_ref(),
        Some(created)
    );
    println!("{table}");
    Ok(())
}

/// The capacity-summary benchmark at a tiny size (2 members × 20 pods, 3 s windows): the
/// control plane's first lists and watches of Nodes and Pods are counted from the audit
/// logs, the pods reach the published summaries (which equal the benchmark's own
/// computation), and nothing is written or requested at steady state.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_capacity_summary_run_counts_the_watches_and_settles_without_writes()
-> anyhow::Result<()> {
    flotilla_tests::init_tracing();
    let report = bench::capacity_cost::run(&BenchOptions {
        scenario: Some(bench::Scenario::Capacity10x1000),
        members: Some(2),
        objects: Some(20),
        steady_secs: 3,
        phase_timeout_secs: 120,
        ..BenchOptions::default()
    })
    .await?;
    assert_eq!((report.members, report.pods_per_member), (2, 20));
    let first = &report.startup.member_requests;
    for what in ["pods list", "pods watch", "nodes list", "nodes watch"] {
        assert!(
            first.get(what).copied().unwrap_or(0) >= 2,
            "one {what} per member at start-up: {first:?}"
        );
    }
    assert!(
        report.creation.summary_writes >= 2,
        "each member's summary rewritten for its pods: {:?}",
        report.creation
    );
    assert!(report.summary_matches_published, "{report:?}");
    assert!(report.summary_pods >= 20 && report.summary_ms > 0.0);
    let goals = report.goals();
    assert!(goals.iter().all(|(_, met, _)| *met), "{goals:?}");
    assert!(report.table().contains("steady state"));
    Ok(())
}
