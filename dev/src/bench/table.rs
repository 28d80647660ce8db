//! The report as a plain-text table for people: every Flotilla figure beside its raw
//! baseline, then cost, the reference figures and the targets. Rendering only; what the
//! figures are is [`super::report`]'s.

use std::fmt::Write as _;

use super::{
    SequentialComparison,
    report::{BenchReport, Comparison, KindReport, Phase, ratio},
};

// Writing into a String cannot fail, so `let _ = writeln!(...)` drops an always-Ok result.

impl BenchReport {
    /// The report as a plain-text table, every figure beside its raw baseline.
    pub fn table(&self) -> String {
        let mut s = String::new();
        self.header(&mut s);
        for k in &self.kinds {
            self.kind_section(&mut s, k);
        }
        self.fleet_lines(&mut s);
        self.cost_lines(&mut s);
        self.target_lines(&mut s);
        s
    }

    fn header(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "Flotilla bench {}: {} objects per kind x {} members, {} concurrent writes, {} sync workers",
            self.scenario, self.objects, self.members, self.concurrency, self.workers
        );
        let _ = writeln!(
            s,
            "machine: {} CPUs, {:.1} GiB, Linux {}, load {:.2} at start; control plane: {}",
            self.machine.cpus,
            self.machine.memory_mib as f64 / 1024.0,
            self.machine.kernel,
            self.machine.load_at_start,
            self.control_plane
        );
        if let Some(e) = &self.raw_error {
            let _ = writeln!(
                s,
                "raw baseline did not finish ({e}): the Flotilla figures stand, raw columns it did not reach are empty, their ratios NaN"
            );
        }
    }

    fn kind_section(&self, s: &mut String, k: &KindReport) {
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "{:<34} {:>16} {:>16} {:>9}",
            format!(
                "{} ({} member objects)",
                k.kind, k.create.flotilla.member_objects
            ),
            "raw (direct)",
            "flotilla",
            "ratio"
        );
        for (label, c) in [
            ("create -> all present", &k.create),
            ("update -> new data everywhere", &k.update),
            ("delete -> members empty", &k.delete),
        ] {
            comparison_rows(s, label, c);
            self.cpu_lines(s, c);
            if let Some(p) = &c.flotilla.pull {
                super::pull_table::phase_lines(s, p, c.flotilla.agent_cpu_s);
            }
        }
        if let Some(q) = &k.sequential {
            sequential_rows(s, q);
        }
        let hi = &k.host_input;
        let _ = writeln!(
            s,
            "host input alone ({} federated creates, no controller running): {:.2} s, {:.0} obj/s, host apiserver {:.2} CPU s",
            hi.member_objects,
            hi.seconds,
            hi.objects_per_second,
            hi.clusters_cpu_by_process
                .get("apiserver (host)")
                .copied()
                .unwrap_or(0.0),
        );
        let st = &k.steady;
        let head = format!(
            "steady state ({:.0} s after {} forced resyncs)",
            st.window_s, st.resyncs_forced
        );
        figures(
            s,
            &head,
            &[
                (st.member_writes.to_string(), "member writes"),
                (st.host_writes.to_string(), "host status writes"),
                (st.member_requests.to_string(), "member requests"),
                (
                    format!("{:.3}", st.control_plane_cpu_s),
                    "control-plane CPU s",
                ),
            ],
        );
        let r = &k.restart;
        let head = format!(
            "restart (SIGKILL + start with {} objects propagated; first new object in every member after {:.2} s)",
            r.objects, r.first_new_object_s
        );
        let window = format!("{:.0} s window", r.window_s);
        let writes = [
            (r.member_writes, "member writes"),
            (r.host_writes, "host writes"),
            (r.member_reads, "member reads"),
        ];
        let mut parts: Vec<(String, &str)> = vec![(window, "")];
        parts.extend(writes.into_iter().map(|(n, label)| (n.to_string(), label)));
        parts.push((
            format!("{:.3}", r.control_plane_cpu_s),
            "control-plane CPU s",
        ));
        figures(s, &head, &parts);
        for (what, p) in [("steady state", &st.pull), ("restart", &r.pull)] {
            if let Some(p) = p {
                super::pull_table::writes_line(s, what, p);
            }
        }
        if let Some(r) = &k.agent_restart {
            super::pull_table::agent_restart_line(s, r);
        }
        if let Some(p) = &k.policy {
            super::policy_table::policy_section(s, &k.kind, p);
        }
    }

    /// Where the CPU time of one phase went, Flotilla's beside the raw baseline's.
    fn cpu_lines(&self, s: &mut String, c: &Comparison) {
        let cpus = self.machine.cpus as f64;
        let idle = self.clusters_idle_cpu_per_s;
        let _ = writeln!(
            s,
            "  CPU s in the window ({:.1} s, raw {:.1} s): control plane {:.2}, generator+watchers {:.2} (raw {:.2}), clusters above idle {:.2} (raw {:.2}), machine busy {:.1} of {:.1}",
            c.flotilla.window_s,
            c.raw.window_s,
            c.flotilla.control_plane_cpu_s,
            c.flotilla.generator_cpu_s,
            c.raw.generator_cpu_s,
            c.flotilla.clusters_cpu_s - idle * c.flotilla.window_s,
            c.raw.clusters_cpu_s - idle * c.raw.window_s,
            c.flotilla.machine_busy_cpu_s,
            c.flotilla.window_s * cpus,
        );
        let by: Vec<String> = c
            .flotilla
            .clusters_cpu_by_process
            .iter()
            .map(|(p, v)| {
                let r = c.raw.clusters_cpu_by_process.get(p).copied().unwrap_or(0.0);
                format!("{p} {v:.2} (raw {r:.2})")
            })
            .collect();
        let _ = writeln!(s, "  cluster CPU s by process: {}", by.join(", "));
        let _ = writeln!(
            s,
            "  until the last object landed ({:.2} s, raw {:.2} s): machine busy {:.2} of {:.2} CPU s (raw {:.2} of {:.2}), clusters {:.2} (raw {:.2})",
            c.flotilla.active_s,
            c.raw.active_s,
            c.flotilla.machine_busy_active_cpu_s,
            c.flotilla.active_s * cpus,
            c.raw.machine_busy_active_cpu_s,
            c.raw.active_s * cpus,
            c.flotilla.clusters_active_cpu_s,
            c.raw.clusters_active_cpu_s,
        );
    }

    fn cost_lines(&self, s: &mut String) {
        let c = &self.cost;
        let _ = writeln!(s);
        let _ = writeln!(
            s,
            "cost: control plane {:.1} MiB peak RSS ({}{}), {:.2} CPU s ({:.3} ms per member object), {:.2} requests per created member object",
            c.control_plane_peak_rss_mib,
            c.rss_method,
            if c.peak_reset {
                ""
            } else {
                "; peak not resettable, estimate unreliable"
            },
            c.control_plane_cpu_s,
            c.control_plane_cpu_ms_per_member_object,
            c.requests_per_created_member_object,
        );
        let Some(r) = &self.reference else {
            return;
        };
        let ours = self
            .kinds
            .first()
            .map(|k| (k.create.raw.seconds, k.create.flotilla.seconds))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "reference ({}): raw {:.1} s, Karmada v1.3.6 push {:.0}-{:.0} s ({:.0}-{:.0}x raw); this run: raw {:.2} s, Flotilla {:.2} s ({:.2}x raw)",
            r.source,
            r.raw_s,
            r.karmada_s.0,
            r.karmada_s.1,
            r.karmada_s.0 / r.raw_s,
            r.karmada_s.1 / r.raw_s,
            ours.0,
            ours.1,
            ratio(ours.1, ours.0),
        );
    }

    fn target_lines(&self, s: &mut String) {
        let _ = writeln!(s);
        let _ = writeln!(s, "targets:");
        for t in &self.targets {
            let _ = writeln!(
                s,
                "  [{}] {:<44} goal {:<14} measured {}",
                if t.met { "met " } else { "MISS" },
                t.name,
                t.goal,
                t.measured
            );
        }
    }
}

/// Time, throughput, latency and request rows of one phase.
fn comparison_rows(s: &mut String, label: &str, c: &Comparison) {
    row(
        s,
        label,
        c.raw.seconds,
        c.flotilla.seconds,
        "s",
        c.time_ratio,
    );
    row(
        s,
        "  throughput (obj/s)",
        c.raw.objects_per_second,
        c.flotilla.objects_per_second,
        "",
        c.throughput_ratio,
    );
    let (r, f, q) = (&c.raw.latency_ms, &c.flotilla.latency_ms, &c.latency_ratio);
    row(s, "  latency p50", r.p50, f.p50, "ms", q.p50);
    row(s, "  latency p95", r.p95, f.p95, "ms", q.p95);
    row(s, "  latency p99", r.p99, f.p99, "ms", q.p99);
    type Figure = fn(&Phase) -> f64;
    let per_object: [(&str, Figure); 2] = [
        ("  requests per member object", |p| {
            p.requests_per_member_object
        }),
        ("    of which members'", |p| {
            p.member_requests_per_member_object
        }),
    ];
    for (label, req) in per_object {
        row(
            s,
            label,
            req(&c.raw),
            req(&c.flotilla),
            "",
            ratio(req(&c.flotilla), req(&c.raw)),
        );
    }
    let _ = writeln!(
        s,
        "{:<34} {:>16} {:>16.2}",
        "  host requests per federated object", "", c.flotilla.host_requests_per_federated_object
    );
    if !c.flotilla.host_events.is_empty() {
        let events: Vec<String> = (c.flotilla.host_events.iter())
            .map(|(reason, n)| format!("{reason} {n}"))
            .collect();
        let _ = writeln!(s, "  host Events: {}", events.join(", "));
    }
}

/// The sequential client's rows: what a `kubectl apply -f` user waits for.
fn sequential_rows(s: &mut String, q: &SequentialComparison) {
    let (r, f) = (&q.raw, &q.flotilla);
    let _ = writeln!(
        s,
        "sequential client ({} member objects; one writer, GET + POST each: {:.2} s of writes, raw {:.2} s; bulk delete call {:.2} s, raw {:.2} s)",
        f.member_objects, f.writes_s, r.writes_s, f.bulk_delete_call_s, r.bulk_delete_call_s
    );
    row(
        s,
        "  all present after last write",
        r.present_after_last_write_s,
        f.present_after_last_write_s,
        "s",
        q.present_ratio.unwrap_or(f64::NAN),
    );
    row(
        s,
        "  per object p50 (returned->all)",
        r.latency_ms.p50,
        f.latency_ms.p50,
        "ms",
        ratio(f.latency_ms.p50, r.latency_ms.p50),
    );
    row(
        s,
        "  per object p99 (returned->all)",
        r.latency_ms.p99,
        f.latency_ms.p99,
        "ms",
        ratio(f.latency_ms.p99, r.latency_ms.p99),
    );
    row(
        s,
        "  member requests per object",
        r.member_requests_per_member_object,
        f.member_requests_per_member_object,
        "",
        ratio(
            f.member_requests_per_member_object,
            r.member_requests_per_member_object,
        ),
    );
    row(
        s,
        "  members empty after bulk delete",
        r.empty_after_bulk_delete_s,
        f.empty_after_bulk_delete_s,
        "s",
        q.empty_ratio.unwrap_or(f64::NAN),
    );
}

fn row(s: &mut String, label: &str, raw: f64, ours: f64, unit: &str, ratio: f64) {
    let fmt = |v: f64| match unit {
        "s" => format!("{v:.2} s"),
        "ms" => format!("{v:.0} ms"),
        _ => format!("{v:.2}"),
    };
    // A raw figure of 0 (an object present the moment its write returned) has no ratio.
    let ratio = if ratio.is_finite() {
        format!("{ratio:.2}x")
    } else {
        "-".into()
    };
    let _ = writeln!(
        s,
        "{:<34} {:>16} {:>16} {:>9}",
        label,
        fmt(raw),
        fmt(ours),
        ratio
    );
}

/// One line of labelled figures: `head: v1 label1, v2 label2, ...`.
fn figures(s: &mut String, head: &str, figures: &[(String, &str)]) {
    let parts: Vec<String> = figures
        .iter()
        .map(|(v, label)| format!("{v} {label}").trim_end().to_string())
        .collect();
    let _ = writeln!(s, "{head}: {}", parts.join(", "));
}
