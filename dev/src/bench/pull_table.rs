//! Pull mode's lines of the table (`--pull`): per phase, every request by resource and
//! verb with its per-member-object figures and what they leave out; the writes of the
//! steady state and the restart; the agents' memory and CPU in the fleet section.
//! Rendering only; the figures are [`super::pull_report`]'s.

use std::{collections::BTreeMap, fmt::Write as _};

use super::{
    fleet::FleetReport,
    pull_report::{AgentCost, AgentRestart, PullRequests},
};

// Writing into a String cannot fail, so `let _ = writeln!(...)` drops an always-Ok result.

/// `key count, key count, …` (or `none`).
fn keyed(m: &BTreeMap<String, u64>) -> String {
    if m.is_empty() {
        return "none".into();
    }
    m.iter()
        .map(|(k, v)| format!("{k} {v}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// A phase's pull-mode requests: the per-object figures, then every request behind them
/// and every request they leave out.
pub(super) fn phase_lines(s: &mut String, p: &PullRequests, agent_cpu_s: f64) {
    let _ = writeln!(
        s,
        "  pull: {:.2} host requests for Works per member object; {:.2} member requests per member object ({:.2} of them AppliedWork records); agents {:.2} CPU s",
        p.host_work_requests_per_member_object,
        p.member_requests_per_member_object,
        p.record_requests_per_member_object,
        agent_cpu_s
    );
    let _ = writeln!(s, "    host Works: {}", keyed(&p.host_works));
    let _ = writeln!(
        s,
        "    member objects: {}; AppliedWorks: {}",
        keyed(&p.member_objects),
        keyed(&p.member_records)
    );
    let _ = writeln!(
        s,
        "    not in these figures ({} requests; the federated type and Events are the host requests above): host {}; members {}",
        p.left_out(),
        keyed(&p.host_other),
        keyed(&p.member_other)
    );
}

/// A window that writes no member object (steady state, restart): its writes to Works,
/// member objects and AppliedWorks.
pub(super) fn writes_line(s: &mut String, what: &str, p: &PullRequests) {
    let (works, objects, records) = p.writes();
    let _ = writeln!(
        s,
        "  pull, {what}: {works} Work writes in the host, {objects} member object writes, {records} AppliedWork writes; every request: host {}; members {}",
        keyed(&merged(&p.host_works, &p.host_other)),
        keyed(&merged(
            &merged(&p.member_objects, &p.member_records),
            &p.member_other
        )),
    );
}

fn merged(a: &BTreeMap<String, u64>, b: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    let mut out = a.clone();
    for (k, v) in b {
        *out.entry(k.clone()).or_insert(0) += v;
    }
    out
}

/// The fleet section's pull-mode lines: what each agent sends the host at idle, and the
/// agents' memory and CPU.
pub(super) fn fleet_lines(s: &mut String, f: &FleetReport) {
    let Some(a) = &f.agents else {
        return;
    };
    let i = &f.idle;
    let _ = writeln!(
        s,
        "  pull, idle: {:.1} host requests per cluster per minute ({}), agents' CPU {:.1} ms per cluster per minute",
        i.host_requests_per_cluster_per_min,
        keyed(&i.host_requests),
        i.agent_cpu_ms_per_cluster_per_min
    );
    agent_line(s, a);
}

fn agent_line(s: &mut String, a: &AgentCost) {
    let _ = writeln!(
        s,
        "  agents: {} {}; last started -> all ready {:.2} s; RSS {:.1} MiB at start = {:.2} MiB per cluster; {:.2} CPU s over the measured phases",
        a.agents, a.placement, a.ready_s, a.start_rss_mib, a.rss_per_cluster_mib, a.cpu_s
    );
}

/// Every agent restarted: how long until ready, and what the new agents wrote.
pub(super) fn agent_restart_line(s: &mut String, r: &AgentRestart) {
    let what = format!(
        "restart of every agent ({} agents, {} objects applied; all ready after {:.2} s; {:.0} s window; agents {:.2} CPU s)",
        r.agents, r.objects, r.ready_s, r.window_s, r.agent_cpu_s
    );
    writes_line(s, &what, &r.requests);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bench::IdleCost;

    fn counts(entries: &[(&str, u64)]) -> BTreeMap<String, u64> {
        entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn a_pull_phase_lists_every_request_and_what_the_figures_leave_out() {
        let p = PullRequests::new(
            &counts(&[("works POST", 4), ("leases PATCH", 2)]),
            &counts(&[("configmaps PATCH", 4), ("appliedworks POST", 4)]),
            "configmaps",
            4,
        );
        let mut s = String::new();
        phase_lines(&mut s, &p, 0.5);
        for needle in [
            "1.00 host requests for Works per member object",
            "2.00 member requests per member object (1.00 of them AppliedWork records)",
            "host Works: works POST 4",
            "member objects: configmaps PATCH 4; AppliedWorks: appliedworks POST 4",
            "not in these figures (2 requests",
            "host leases PATCH 2; members none",
        ] {
            assert!(s.contains(needle), "{needle:?} missing:\n{s}");
        }
    }

    #[test]
    fn a_quiet_window_reports_its_writes_by_inventory() {
        let p = PullRequests::new(
            &counts(&[("works LIST", 2)]),
            &counts(&[("appliedworks/status PATCH", 1), ("configmaps LIST", 3)]),
            "configmaps",
            0,
        );
        let mut s = String::new();
        writes_line(&mut s, "steady state", &p);
        assert!(
            s.contains("0 Work writes in the host, 0 member object writes, 1 AppliedWork writes"),
            "{s}"
        );
        assert!(s.contains("host works LIST 2;"), "{s}");
        assert!(
            s.contains("appliedworks/status PATCH 1, configmaps LIST 3"),
            "{s}"
        );
    }

    #[test]
    fn the_fleet_lines_name_the_agents_cost_only_in_pull_mode() {
        let mut s = String::new();
        fleet_lines(&mut s, &FleetReport::default());
        assert!(s.is_empty());
        let f = FleetReport {
            idle: IdleCost {
                host_requests_per_cluster_per_min: 3.0,
                host_requests: counts(&[("leases PATCH", 6)]),
                ..IdleCost::default()
            },
            agents: Some(AgentCost::new("in-process".into(), 2, 2, 8.0)),
            ..FleetReport::default()
        };
        fleet_lines(&mut s, &f);
        for needle in [
            "3.0 host requests per cluster per minute (leases PATCH 6)",
            "agents: 2 in-process; last started -> all ready",
            "RSS 8.0 MiB at start = 4.00 MiB per cluster",
        ] {
            assert!(s.contains(needle), "{needle:?} missing:\n{s}");
        }
    }

    #[test]
    fn an_agent_restart_says_how_long_until_ready_and_what_was_written() {
        let r = AgentRestart {
            agents: 3,
            objects: 200,
            ready_s: 1.5,
            window_s: 12.0,
            agent_cpu_s: 0.25,
            requests: PullRequests::new(
                &counts(&[("works LIST", 3)]),
                &counts(&[("appliedworks LIST", 3)]),
                "configmaps",
                0,
            ),
        };
        let mut s = String::new();
        agent_restart_line(&mut s, &r);
        for needle in [
            "restart of every agent (3 agents, 200 objects applied; all ready after 1.50 s; 12 s window; agents 0.25 CPU s)",
            "0 Work writes in the host, 0 member object writes, 0 AppliedWork writes",
            "host works LIST 3; members appliedworks LIST 3",
        ] {
            assert!(s.contains(needle), "{needle:?} missing:\n{s}");
        }
    }
}
