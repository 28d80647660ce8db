//! The benchmark keeps working: a small run of `flotilla bench` (10 ConfigMaps × 2 lean
//! members, as the fleet scenario starts them) propagates every object, makes no
//! steady-state writes and fills in every figure. Nothing here asserts a timing: the
//! benchmark measures, the test suite only keeps it from rotting.

use flotilla_dev::bench::{self, BenchOptions, BenchReport, Phase};

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
        members: Some(2),
        objects: Some(10),
        // The fleet scenario's members (no controller-manager, a Go memory limit), at a
        // small N.
        lean_members: true,
        steady_secs: 3,
        phase_timeout_secs: 120,
        json: Some(json.clone()),
        ..BenchOptions::default()
    })
    .await?;

    assert_eq!(
        (report.scenario.as_str(), report.members, report.objects),
        ("10x2", 2, 10)
    );
    assert_eq!(report.kinds.len(), 1);
    let cm = &report.kinds[0];
    assert_eq!(cm.kind, "ConfigMap");
    for (what, c) in [
        ("create", &cm.create),
        ("update", &cm.update),
        ("delete", &cm.delete),
    ] {
        assert_phase_is_sane(&format!("flotilla {what}"), &c.flotilla, 20);
        assert_phase_is_sane(&format!("raw {what}"), &c.raw, 20);
        assert!(
            c.time_ratio.is_finite() && c.throughput_ratio.is_finite(),
            "{what}: ratios"
        );
    }
    assert!(
        cm.create.raw.member_requests.values().sum::<u64>() >= 20,
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
    assert_eq!(cm.steady.resyncs_forced, 2);

    // A hard restart with everything propagated: nothing rewritten, and the probe object
    // created right after it reached every member.
    assert_eq!(cm.restart.objects, 10);
    assert_eq!(
        (cm.restart.member_writes, cm.restart.host_writes),
        (0, 0),
        "writes after a restart: {:?}",
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
        assert_eq!(p.member_objects, 20, "{what} sequential: {p:?}");
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

    let table = report.table();
    for needle in [
        "ConfigMap",
        "create -> all present",
        "steady state",
        "restart (SIGKILL",
        "sequential client",
        "targets:",
    ] {
        assert!(table.contains(needle), "table lacks {needle:?}:\n{table}");
    }
    let written: BenchReport = serde_json::from_str(&std::fs::read_to_string(&json)?)?;
    std::fs::remove_file(&json)?;
    assert_eq!(written.kinds[0].create.raw.member_objects, 20);
    println!("{table}");
    Ok(())
}
