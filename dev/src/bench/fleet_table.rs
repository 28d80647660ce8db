//! The fleet report's lines of the table (`--fleet-phases`): per cluster and per object,
//! the half-fleet moves beside the raw baseline's throughput, and the slow member's ratio.
//! Rendering only; the figures are [`super::fleet`]'s.

use std::fmt::Write as _;

use super::{
    fleet::{DrainPhase, SlowMember},
    report::{BenchReport, Phase, ratio},
};

// Writing into a String cannot fail, so `let _ = writeln!(...)` drops an always-Ok result.

impl BenchReport {
    /// The fleet section, when the fleet phases ran.
    pub(super) fn fleet_lines(&self, s: &mut String) {
        let Some(f) = &self.fleet else {
            return;
        };
        let n = self.members;
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "fleet: {n} members ({}); clusters started in {:.1} s; control plane start -> all {n} Ready {:.2} s",
            if f.member_controller_manager {
                "each with a controller-manager"
            } else {
                "no member controller-manager, joined with admin credentials"
            },
            f.clusters_start_s,
            f.ready_s
        );
        let i = &f.idle;
        let _ = writeln!(
            s,
            "  idle ({:.0} s): {:.1} member requests per cluster per minute, {:.1} host requests per minute, control-plane CPU {:.1} ms per cluster per minute",
            i.window_s,
            i.member_requests_per_cluster_per_min,
            i.host_requests_per_min,
            i.control_plane_cpu_ms_per_cluster_per_min
        );
        super::pull_table::fleet_lines(s, f);
        let m = &f.memory;
        let _ = writeln!(
            s,
            "  control-plane RSS: {:.1} MiB idle = {:.2} MiB per cluster; peak {:.1} MiB with {} member objects = {:.2} KiB per member object above idle",
            m.idle_rss_mib,
            m.rss_per_cluster_mib,
            m.peak_rss_mib,
            m.peak_member_objects,
            m.rss_per_member_object_kib
        );
        let _ = writeln!(
            s,
            "  one new object at idle -> in all {n} members: {:.2} s",
            f.one_object_s
        );
        for h in &f.half_fleet {
            let raw = self.kinds.iter().find(|k| k.kind == h.kind);
            let raw_delete = raw.map_or(f64::NAN, |k| k.delete.raw.objects_per_second);
            let raw_create = raw.map_or(f64::NAN, |k| k.create.raw.objects_per_second);
            let _ = writeln!(
                s,
                "  {} placement to half the fleet ({} kept, {} left):",
                h.kind, h.kept, h.moved
            );
            move_line(
                s,
                "to half (objects leave)",
                &h.to_half,
                "delete",
                raw_delete,
            );
            move_line(s, "back (objects return)", &h.back, "create", raw_create);
        }
        if let Some(w) = &f.slow_member {
            slow_member_lines(s, w, n);
        }
        if let Some(d) = &f.drain {
            drain_line(s, d);
        }
    }
}

/// One half-fleet move: time, latency and requests, and its throughput against the raw
/// baseline's `raw_what` throughput of the same kind.
fn move_line(s: &mut String, label: &str, p: &Phase, raw_what: &str, raw_per_s: f64) {
    let _ = writeln!(
        s,
        "    {label}: {} member objects in {:.2} s ({:.0} obj/s, {:.2}x the raw {raw_what}'s), latency p50 {:.0} ms p99 {:.0} ms, {:.2} member + {:.2} host requests per object",
        p.member_objects,
        p.seconds,
        p.objects_per_second,
        ratio(p.objects_per_second, raw_per_s),
        p.latency_ms.p50,
        p.latency_ms.p99,
        p.member_requests_per_member_object,
        p.host_requests_per_federated_object
    );
    if let Some(pull) = &p.pull {
        super::pull_table::phase_lines(s, pull, p.agent_cpu_s);
    }
}

/// The fleet section of a report with every figure zero renders; the table's text is the
/// format people read, so its labels are checked.
/// The slow member's lines: the other members' latency without and with the fault.
fn slow_member_lines(s: &mut String, w: &SlowMember, n: usize) {
    let _ = writeln!(
        s,
        "  slow member {} (+{:.0} ms per chunk of its traffic), {} objects per phase, latency in the other {} members:",
        w.name,
        w.latency_ms,
        w.objects,
        n.saturating_sub(1)
    );
    let (a, b, q) = (
        &w.others_without.latency_ms,
        &w.others_with.latency_ms,
        &w.latency_ratio,
    );
    for (label, x, y, r) in [
        ("p50", a.p50, b.p50, q.p50),
        ("p99", a.p99, b.p99, q.p99),
        ("max", a.max, b.max, q.max),
    ] {
        let _ = writeln!(
            s,
            "    {label}: {x:.0} ms without the fault, {y:.0} ms with it, ratio {r:.2}"
        );
    }
    let _ = match w.caught_up_s {
        Some(t) => writeln!(
            s,
            "    the slow member held every object {t:.2} s after the fault was lifted"
        ),
        None => writeln!(
            s,
            "    the slow member did NOT catch up within 120 s after the fault was lifted"
        ),
    };
}

/// The scheduler's line: the placed objects and the drain's moves.
fn drain_line(s: &mut String, d: &DrainPhase) {
    let _ = writeln!(
        s,
        "  scheduler: {} objects with maxClusters {} over >= {} zones decided and in their members in {:.2} s; {} members drained at once ({}): {} objects ({} copies) moved in {:.2} s, move latency p50 {:.0} ms p99 {:.0} ms, {:.2} member requests per moved copy, {} of {} placed after",
        d.objects,
        d.max_clusters,
        d.min_zones,
        d.decided_s,
        d.drained.len(),
        d.drained.join(", "),
        d.moved_objects,
        d.moved_copies,
        d.moves_s,
        d.move_latency_ms.p50,
        d.move_latency_ms.p99,
        d.member_requests_per_moved_copy,
        d.placed_after,
        d.objects
    );
}

#[cfg(test)]
mod tests {
    use super::super::fleet::{DrainPhase, FleetReport, HalfFleet, SlowMember};
    use super::*;

    #[test]
    fn the_fleet_section_names_every_figure() {
        let report = BenchReport {
            scenario: "fleet-100".into(),
            members: 4,
            objects: 10,
            concurrency: 16,
            workers: 16,
            control_plane: String::new(),
            clusters_idle_cpu_per_s: 0.0,
            machine: super::super::procfs::machine(),
            kinds: Vec::new(),
            cost: Default::default(),
            reference: None,
            targets: Vec::new(),
            fleet: Some(FleetReport {
                half_fleet: vec![HalfFleet {
                    kind: "ConfigMap".into(),
                    kept: 2,
                    moved: 2,
                    ..HalfFleet::default()
                }],
                slow_member: Some(SlowMember {
                    name: "member2".into(),
                    ..SlowMember::default()
                }),
                drain: Some(DrainPhase {
                    drained: vec!["member1".into()],
                    ..DrainPhase::default()
                }),
                ..FleetReport::default()
            }),
            raw_error: None,
            finished_at: String::new(),
        };
        let mut s = String::new();
        report.fleet_lines(&mut s);
        for needle in [
            "all 4 Ready",
            "member requests per cluster per minute",
            "MiB per cluster",
            "KiB per member object",
            "one new object at idle",
            "placement to half the fleet (2 kept, 2 left)",
            "back (objects return)",
            "slow member member2",
            "p99:",
            "members drained at once (member1)",
        ] {
            assert!(s.contains(needle), "{needle:?} missing:\n{s}");
        }
    }
}
