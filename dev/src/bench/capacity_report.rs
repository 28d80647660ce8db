//! The figures of `flotilla bench --scenario capacity-10x1000` (see `capacity_cost`), the
//! ratios against its baseline (the same control plane before the pods existed), the goals
//! they are held to, and the table for people. Pure: it measures nothing.

use std::{collections::BTreeMap, fmt::Write as _};

use serde::{Deserialize, Serialize};

use super::report::Machine;

/// One measured window of the run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CapacityWindow {
    /// Length, seconds.
    pub seconds: f64,
    /// CPU seconds of the control plane in the window.
    pub cp_cpu_s: f64,
    /// The control plane's RSS at the window's end, MiB.
    pub rss_mib: f64,
    /// Every request the control plane sent to the members (all members together), by
    /// `"<resource or path> <verb>"`, watches and lists included (from the audit logs).
    pub member_requests: BTreeMap<String, u64>,
    /// KubeFedCluster status writes carrying `status.resources` (all members).
    pub summary_writes: u64,
    /// Other KubeFedCluster status writes (health), for comparison.
    pub other_status_writes: u64,
    /// ClusterProfile writes, any subresource (all members).
    pub profile_writes: u64,
}

impl CapacityWindow {
    /// Requests the control plane sent to the members, all together.
    pub fn member_requests_total(&self) -> u64 {
        self.member_requests.values().sum()
    }

    /// Requests to Nodes and Pods (the summary's own watches and lists).
    pub fn summary_requests(&self) -> u64 {
        self.member_requests
            .iter()
            .filter(|(k, _)| k.starts_with("pods ") || k.starts_with("nodes "))
            .map(|(_, v)| v)
            .sum()
    }

    /// Control plane CPU, seconds per second.
    pub fn cpu_per_s(&self) -> f64 {
        ratio(self.cp_cpu_s, self.seconds)
    }
}

/// What the run measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CapacityCostReport {
    /// Members.
    pub members: usize,
    /// Pods created per member.
    pub pods_per_member: usize,
    /// Simulated nodes per member, and what each offers (CPUs, GiB).
    pub nodes_per_member: usize,
    /// CPUs of one node.
    pub node_cpu: u64,
    /// Memory of one node, GiB.
    pub node_memory_gib: u64,
    /// CPU request of one pod, millicores.
    pub pod_cpu_m: u64,
    /// Memory request of one pod, MiB.
    pub pod_memory_mib: u64,
    /// How pods reach nodes.
    pub placement: String,
    /// `debug` or `release`.
    pub build: String,
    /// Where the control plane ran and how its cost is read.
    pub control_plane: String,
    /// The machine, with its load at the start (other work included).
    pub machine: Machine,
    /// The 1-minute load average at the end.
    pub load_at_end: f64,
    /// From the control plane's start until every member's first summary is published and
    /// its writes settled: the watches' first lists.
    pub startup: CapacityWindow,
    /// The baseline: every member joined and summarised, no benchmark pod yet.
    pub idle: CapacityWindow,
    /// From the first pod created until every member's published summary counts them all,
    /// every pod reports Running, and one more publish period passed.
    pub creation: CapacityWindow,
    /// After the creation, nothing changing.
    pub steady: CapacityWindow,
    /// Peak RSS of the control plane's process over the run (child process only).
    pub peak_rss_mib: Option<f64>,
    /// Time to compute one member's summary from its cut Nodes and Pods (median), ms.
    pub summary_ms: f64,
    /// Pods in that member's summary.
    pub summary_pods: usize,
    /// Whether the summary computed here equals the one the control plane published.
    pub summary_matches_published: bool,
    /// Mean JSON size of a Pod as cut for the cache, bytes.
    pub cut_pod_bytes: f64,
}

/// `a / b`, 0 when `b` is 0.
fn ratio(a: f64, b: f64) -> f64 {
    if b == 0.0 { 0.0 } else { a / b }
}

impl CapacityCostReport {
    /// Thousands of pods per member.
    fn thousands(&self) -> f64 {
        self.pods_per_member as f64 / 1000.0
    }

    /// Tenths of a member's CPU and of its memory that its pods fill (whole tenths, summed):
    /// the most ClusterProfile writes the coarse steps allow per member while they are
    /// created.
    pub fn tenths_filled(&self) -> u64 {
        let pods = self.pods_per_member as u64;
        let nodes = self.nodes_per_member as u64;
        let cpu = 10 * pods * self.pod_cpu_m / (nodes * self.node_cpu * 1000).max(1);
        let memory = 10 * pods * self.pod_memory_mib / (nodes * self.node_memory_gib * 1024).max(1);
        cpu + memory
    }

    /// Growth of the control plane's RSS from the baseline to the steady state, MiB per
    /// member per 1,000 pods.
    pub fn rss_per_member_per_1000_pods(&self) -> f64 {
        ratio(
            self.steady.rss_mib - self.idle.rss_mib,
            self.members as f64 * self.thousands(),
        )
    }

    /// Control plane CPU of the creation beyond the baseline's rate, seconds per 1,000 pods.
    pub fn creation_cpu_per_1000_pods(&self) -> f64 {
        let extra = self.creation.cp_cpu_s - self.idle.cpu_per_s() * self.creation.seconds;
        ratio(extra, self.members as f64 * self.thousands())
    }

    /// Requests per member per minute in a window.
    pub fn per_member_per_min(&self, w: &CapacityWindow, count: u64) -> f64 {
        ratio(count as f64 * 60.0, self.members as f64 * w.seconds)
    }

    /// The goals and whether the run met them: `(goal, met, measured)`.
    pub fn goals(&self) -> Vec<(String, bool, String)> {
        let members = self.members.max(1) as f64;
        let profile = self.creation.profile_writes as f64 / members;
        let tenths = self.tenths_filled();
        let steady = self.steady.summary_writes + self.steady.profile_writes;
        vec![
            (
                format!(
                    "ClusterProfile writes while pods are created: at most one per tenth of capacity filled ({tenths} per member)"
                ),
                profile <= tenths as f64,
                format!("{profile:.1} per member"),
            ),
            (
                "no KubeFedCluster summary or ClusterProfile write at steady state".into(),
                steady == 0,
                format!("{steady}"),
            ),
            (
                "no Node or Pod request at steady state (the watches stay open)".into(),
                self.steady.summary_requests() == 0,
                format!("{}", self.steady.summary_requests()),
            ),
            (
                "the summary computed from the members' objects equals the published one".into(),
                self.summary_matches_published,
                format!("{}", self.summary_matches_published),
            ),
        ]
    }

    /// The report as a table for people.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(
            s,
            "capacity summary cost: {} members x {} pods ({} nodes of {} CPU / {} GiB each; pods request {}m / {} MiB; {}), {} build",
            self.members,
            self.pods_per_member,
            self.nodes_per_member,
            self.node_cpu,
            self.node_memory_gib,
            self.pod_cpu_m,
            self.pod_memory_mib,
            self.placement,
            self.build
        );
        let _ = writeln!(s, "control plane: {}", self.control_plane);
        let _ = writeln!(
            s,
            "machine: {} CPUs, {} MiB, load {:.1} at start, {:.1} at end (other work included)",
            self.machine.cpus,
            self.machine.memory_mib,
            self.machine.load_at_start,
            self.load_at_end
        );
        let _ = writeln!(
            s,
            "{:<26} {:>8} {:>9} {:>8} {:>8} {:>13} {:>11} {:>11} {:>11}",
            "window",
            "seconds",
            "cp CPU s",
            "CPU/s",
            "RSS MiB",
            "member req/m",
            "Node+Pod rq",
            "summary wr",
            "profile wr"
        );
        for (name, w) in [
            ("start-up (first lists)", &self.startup),
            ("before the pods (baseline)", &self.idle),
            ("creation", &self.creation),
            ("steady state", &self.steady),
        ] {
            let _ = writeln!(
                s,
                "{:<26} {:>8.1} {:>9.2} {:>8.3} {:>8.1} {:>13.2} {:>11} {:>11} {:>11}",
                name,
                w.seconds,
                w.cp_cpu_s,
                w.cpu_per_s(),
                w.rss_mib,
                self.per_member_per_min(w, w.member_requests_total()),
                w.summary_requests(),
                w.summary_writes,
                w.profile_writes
            );
        }
        let _ = writeln!(
            s,
            "  member req/m: the control plane's requests per member per minute; Node+Pod rq, summary wr, profile wr: all members together"
        );
        self.ratios(&mut s);
        self.requests_by_kind(&mut s);
        let _ = writeln!(s, "goals:");
        for (goal, met, measured) in self.goals() {
            let mark = if met { "met" } else { "MISSED" };
            let _ = writeln!(s, "  [{mark}] {goal}: {measured}");
        }
        s
    }

    fn ratios(&self, s: &mut String) {
        let members = self.members.max(1) as f64;
        let _ = writeln!(
            s,
            "against the baseline: RSS x{:.2} ({:+.1} MiB = {:.2} MiB per member per 1,000 pods{}); CPU/s at steady state x{:.2}; member requests per minute at steady state x{:.2}",
            ratio(self.steady.rss_mib, self.idle.rss_mib),
            self.steady.rss_mib - self.idle.rss_mib,
            self.rss_per_member_per_1000_pods(),
            self.peak_rss_mib
                .map_or(String::new(), |p| format!(", peak {p:.1} MiB")),
            ratio(self.steady.cpu_per_s(), self.idle.cpu_per_s()),
            ratio(
                self.steady.member_requests_total() as f64 / self.steady.seconds.max(f64::EPSILON),
                self.idle.member_requests_total() as f64 / self.idle.seconds.max(f64::EPSILON)
            ),
        );
        let _ = writeln!(
            s,
            "creation: {:.2} CPU s per 1,000 pods beyond the baseline's rate; per member {:.1} summary writes and {:.1} profile writes for {} tenths of capacity filled; {:.1} member requests",
            self.creation_cpu_per_1000_pods(),
            self.creation.summary_writes as f64 / members,
            self.creation.profile_writes as f64 / members,
            self.tenths_filled(),
            self.creation.member_requests_total() as f64 / members,
        );
        let _ = writeln!(
            s,
            "one summary: {:.2} ms for {} pods and {} nodes (median, the control plane's function run in the benchmark process); a cut pod is {:.0} bytes of JSON",
            self.summary_ms, self.summary_pods, self.nodes_per_member, self.cut_pod_bytes
        );
    }

    fn requests_by_kind(&self, s: &mut String) {
        let _ = writeln!(
            s,
            "the control plane's member requests by kind (start-up / baseline / creation / steady):"
        );
        let mut keys: Vec<&String> = self
            .startup
            .member_requests
            .keys()
            .chain(self.idle.member_requests.keys())
            .chain(self.creation.member_requests.keys())
            .chain(self.steady.member_requests.keys())
            .collect();
        keys.sort();
        keys.dedup();
        for k in keys {
            let get = |w: &CapacityWindow| w.member_requests.get(k).copied().unwrap_or(0);
            let _ = writeln!(
                s,
                "  {:<40} {:>6} {:>6} {:>6} {:>6}",
                k,
                get(&self.startup),
                get(&self.idle),
                get(&self.creation),
                get(&self.steady)
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report() -> CapacityCostReport {
        let window = |seconds, cpu, rss| CapacityWindow {
            seconds,
            cp_cpu_s: cpu,
            rss_mib: rss,
            ..CapacityWindow::default()
        };
        CapacityCostReport {
            members: 10,
            pods_per_member: 1000,
            nodes_per_member: 4,
            node_cpu: 16,
            node_memory_gib: 64,
            pod_cpu_m: 50,
            pod_memory_mib: 128,
            idle: window(60.0, 0.6, 100.0),
            creation: CapacityWindow {
                profile_writes: 70,
                summary_writes: 40,
                ..window(100.0, 21.0, 150.0)
            },
            steady: window(60.0, 1.2, 150.0),
            summary_matches_published: true,
            ..CapacityCostReport::default()
        }
    }

    #[test]
    fn tenths_filled_count_whole_tenths_of_cpu_and_memory() {
        // 50 of 64 CPUs (7 whole tenths) and 125 of 256 GiB (4 whole tenths).
        assert_eq!(report().tenths_filled(), 11);
    }

    #[test]
    fn costs_are_taken_per_member_and_thousand_pods_beyond_the_baseline() {
        let r = report();
        assert!((r.rss_per_member_per_1000_pods() - 5.0).abs() < 1e-9);
        // 21 s in 100 s, of which the baseline's 0.01/s accounts for 1 s: 20 s for 10,000.
        assert!((r.creation_cpu_per_1000_pods() - 2.0).abs() < 1e-9);
    }

    #[test]
    fn the_goals_hold_the_profile_writes_to_the_tenths_and_the_steady_state_to_zero() {
        let mut r = report();
        assert!(r.goals().iter().all(|(_, met, _)| *met), "{:?}", r.goals());
        r.creation.profile_writes = 120;
        r.steady.member_requests.insert("pods list".into(), 1);
        let missed: Vec<_> = r.goals().into_iter().filter(|g| !g.1).collect();
        assert_eq!(missed.len(), 2, "{missed:?}");
        let table = r.table();
        assert!(
            table.contains("[MISSED]") && table.contains("pods list"),
            "{table}"
        );
    }
}
