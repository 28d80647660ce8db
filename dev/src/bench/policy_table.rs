//! The policy path as plain text: each phase by the three paths (raw, `Federated<Kind>`,
//! policy), the policy path's host requests per native object by resource and verb, its
//! quiet windows and what cannot be counted. Rendering only; `policy_report` owns the
//! figures.

use std::{collections::BTreeMap, fmt::Write as _};

use super::policy_report::{PolicyPath, Quiet, ThreePaths};

// Writing into a String cannot fail, so `let _ = writeln!(...)` drops an always-Ok result.

/// The policy path's section of a kind.
pub(super) fn policy_section(s: &mut String, kind: &str, p: &PolicyPath) {
    let _ = writeln!(s);
    let _ = writeln!(
        s,
        "{kind}: three paths on the same clusters (plain objects + PropagationPolicy -> Federated<{kind}> -> members)"
    );
    let _ = writeln!(
        s,
        "{:<10} {:>9} {:>18} {:>18} {:>22} {:>18}",
        "phase", "raw", "Federated<Kind>", "policy", "member req/obj r/F/p", "host writes/obj F/p"
    );
    for (label, t) in [
        ("create", &p.create),
        ("update", &p.update),
        ("delete", &p.delete),
    ] {
        three_row(s, label, t);
    }
    let _ = writeln!(
        s,
        "policy path, host requests per native object by resource and verb (the benchmark's own excluded):"
    );
    for (label, t) in [
        ("create", &p.create),
        ("update", &p.update),
        ("delete", &p.delete),
    ] {
        let _ = writeln!(
            s,
            "  {label}: {} = {:.2} requests, {:.2} writes; other host resources: {} requests",
            per_object(&t.host.per_native_object),
            t.host.requests_per_native_object,
            t.host.writes_per_native_object,
            t.host.other
        );
    }
    quiet_line(s, "policy path, steady state", &p.steady);
    quiet_line(s, "policy path, restart", &p.restart);
    let _ = writeln!(
        s,
        "policy path, a new object after the restart window: in every member after {:.2} s",
        p.probe_after_restart_s
    );
    for n in &p.not_counted {
        let _ = writeln!(s, "  not counted apart: {n}");
    }
}

fn three_row(s: &mut String, label: &str, t: &ThreePaths) {
    let [r, f, p] = t.member_requests_per_member_object;
    let _ = writeln!(
        s,
        "{:<10} {:>9} {:>18} {:>18} {:>22} {:>18}",
        label,
        format!("{:.2} s", t.raw_s),
        format!("{:.2} s ({})", t.federated_s, times(t.federated_ratio)),
        format!("{:.2} s ({})", t.policy_s, times(t.policy_ratio)),
        format!("{r:.2} / {f:.2} / {p:.2}"),
        format!(
            "{:.2} / {:.2}",
            t.federated_host_writes_per_object, t.host.writes_per_native_object
        ),
    );
}

/// A ratio as `2.10x`, `-` when there is none.
fn times(r: f64) -> String {
    if r.is_finite() {
        format!("{r:.2}x")
    } else {
        "-".into()
    }
}

/// `key value, key value`, or `none`.
fn per_object(m: &BTreeMap<String, f64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v:.2}"))
        .collect::<Vec<_>>()
        .join(", ")
}

fn quiet_line(s: &mut String, head: &str, q: &Quiet) {
    let host: Vec<String> = q
        .host_writes
        .iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect();
    let _ = writeln!(
        s,
        "{head} ({:.0} s after {}): {} member writes, {} host writes{}",
        q.window_s,
        q.cause,
        q.member_writes,
        q.host_total(),
        if host.is_empty() {
            String::new()
        } else {
            format!(" ({})", host.join(", "))
        }
    );
}

#[cfg(test)]
mod tests {
    use super::super::policy_report::HostCost;
    use super::*;

    #[test]
    fn the_section_shows_every_path_the_breakdown_and_the_quiet_windows() {
        let t = ThreePaths {
            raw_s: 1.0,
            federated_s: 2.0,
            policy_s: 3.0,
            federated_ratio: 2.0,
            policy_ratio: 3.0,
            member_requests_per_member_object: [1.0, 1.0, 1.0],
            federated_host_writes_per_object: 2.0,
            host: HostCost {
                per_native_object: [("federatedconfigmaps POST".to_string(), 1.0)].into(),
                writes_per_native_object: 3.0,
                ..HostCost::default()
            },
            ..ThreePaths::default()
        };
        let p = PolicyPath {
            create: t.clone(),
            update: t.clone(),
            delete: t,
            restart: Quiet {
                host_writes: [("federatedconfigmaps/status PATCH".to_string(), 2)].into(),
                ..Quiet::default()
            },
            not_counted: vec!["who sent it".into()],
            ..PolicyPath::default()
        };
        let mut s = String::new();
        policy_section(&mut s, "ConfigMap", &p);
        for needle in [
            "3.00 s (3.00x)",
            "2.00 s (2.00x)",
            "2.00 / 3.00",
            "federatedconfigmaps POST 1.00",
            "restart (0 s after ): 0 member writes, 2 host writes (federatedconfigmaps/status PATCH 2)",
            "not counted apart: who sent it",
        ] {
            assert!(s.contains(needle), "{needle:?} missing from:\n{s}");
        }
    }
}
