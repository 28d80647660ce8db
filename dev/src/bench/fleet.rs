//! The fleet report (`--fleet-phases`, `--scenario fleet-100`): what every cluster costs —
//! start-to-Ready, the idle cost per cluster (health checks, CPU, memory), one new object to
//! every member, placement by label to half the fleet and back, and one slow member among
//! the others. Only data and arithmetic; the phases that measure it are in
//! `fleet_phases`, the table lines in `table`.

use std::{collections::BTreeMap, time::Duration};

use serde::{Deserialize, Serialize};

use super::{
    report::{Percentiles, Phase, ratio},
    requests::RequestCounts,
};

/// Label on the KubeFedClusters that splits the fleet in two halves (`a`, `b`).
pub(super) const HALF_LABEL: &str = "flotilla-bench/half";
/// Label on the KubeFedClusters naming their zone (`z0` … `z4`), the drain phase's spread key.
pub(super) const ZONE_LABEL: &str = "flotilla-bench/zone";
/// Zones the members are spread over (member i is in zone i mod ZONES).
pub(super) const ZONES: usize = 5;

/// The fleet phases' figures.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct FleetReport {
    /// Members started with a kube-controller-manager (else joined with admin credentials).
    pub member_controller_manager: bool,
    /// Starting every cluster (etcd, apiservers, controller-managers), seconds.
    pub clusters_start_s: f64,
    /// Control plane started → every member Ready, seconds.
    pub ready_s: f64,
    /// The idle control plane, every member Ready and no object.
    pub idle: IdleCost,
    /// The control plane's memory per cluster and per cached member object.
    pub memory: MemoryBudget,
    /// One federated ConfigMap created at idle → present in every member, seconds.
    pub one_object_s: f64,
    /// Per kind: placement to half of the fleet, then back to all of it.
    pub half_fleet: Vec<HalfFleet>,
    /// The slow member phase (`--slow-member`).
    pub slow_member: Option<SlowMember>,
    /// The scheduler in the loop: placements with maxClusters and spread, then clusters
    /// drained at once (absent with fewer than 2 members).
    pub drain: Option<DrainPhase>,
    /// The pull-mode agents' memory and CPU (`--pull`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub agents: Option<super::pull_report::AgentCost>,
}

/// Scheduled placements (`maxClusters`, a spread over zones) decided and propagated, then
/// several clusters tainted `NoExecute` at once: every copy on them moves elsewhere
/// (replacement first, then the old copy removed).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DrainPhase {
    /// Federated ConfigMaps placed.
    pub objects: usize,
    /// Their `maxClusters`.
    pub max_clusters: usize,
    /// Their spread: at least this many zones (of ZONES).
    pub min_zones: usize,
    /// First create → every object in its `maxClusters` members, seconds.
    pub decided_s: f64,
    /// Members drained at once (the ones holding the most copies).
    pub drained: Vec<String>,
    /// Objects with a copy on a drained member, which had to move.
    pub moved_objects: usize,
    /// Copies on the drained members before the drain.
    pub moved_copies: usize,
    /// Taints written → every copy gone from the drained members (each replaced first).
    pub moves_s: f64,
    /// Per moved object: taints written → its last copy gone from the drained members.
    pub move_latency_ms: Percentiles,
    /// Requests the members served for ConfigMaps during the moves, per moved copy.
    pub member_requests_per_moved_copy: f64,
    /// Objects in their `maxClusters` members again after the moves (all of them).
    pub placed_after: usize,
}

/// The drain phase's shape for `members`: how many members are drained at once (a
/// quarter, at most 10; none below 2 members) and the placements' `maxClusters` (half of
/// the rest, at most 10, at least 1).
pub(super) fn drain_shape(members: usize) -> Option<(usize, usize)> {
    if members < 2 {
        return None;
    }
    let drained = (members / 4).clamp(1, 10);
    let max_clusters = ((members - drained) / 2).clamp(1, 10);
    Some((drained, max_clusters))
}

/// The `count` members holding the most copies (ties: the lower index), from copies held
/// per member.
pub(super) fn busiest(held: &[usize], count: usize) -> Vec<usize> {
    let mut order: Vec<usize> = (0..held.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(held[i]), i));
    order.truncate(count);
    order.sort_unstable();
    order
}

/// What the idle control plane costs, per cluster and per minute.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct IdleCost {
    /// The window, seconds.
    pub window_s: f64,
    /// Requests each member served (watches excluded), per member per minute: the health
    /// checks, and whatever else an idle control plane sends.
    pub member_requests_per_cluster_per_min: f64,
    /// The same requests, summed over the members, by `resource[/subresource] verb`
    /// (non-resource paths have an empty resource).
    pub member_requests: BTreeMap<String, u64>,
    /// Requests the host served (watches and the benchmark's own reads excluded), per
    /// minute.
    pub host_requests_per_min: f64,
    /// Control-plane CPU, milliseconds per member per minute.
    pub control_plane_cpu_ms_per_cluster_per_min: f64,
    /// host_requests_per_min per member: in pull mode what each agent sends the host.
    #[serde(default)]
    pub host_requests_per_cluster_per_min: f64,
    /// The host's requests by `resource[/subresource] verb` (watches excluded).
    #[serde(default)]
    pub host_requests: BTreeMap<String, u64>,
    /// The pull-mode agents' CPU, milliseconds per member per minute (0 without agents).
    #[serde(default)]
    pub agent_cpu_ms_per_cluster_per_min: f64,
}

/// The control plane's memory, split into a part per cluster and a part per object.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MemoryBudget {
    /// RSS at idle (every member Ready, no object), MiB.
    pub idle_rss_mib: f64,
    /// idle_rss_mib / members: an upper bound of the cost per cluster (the process's base
    /// is in it).
    pub rss_per_cluster_mib: f64,
    /// Peak RSS of the Flotilla part, MiB.
    pub peak_rss_mib: f64,
    /// The most member objects the control plane held at once (one kind's objects ×
    /// members).
    pub peak_member_objects: usize,
    /// (peak - idle) / peak_member_objects, KiB.
    pub rss_per_member_object_kib: f64,
}

impl MemoryBudget {
    /// The budget from the idle and peak RSS of a fleet of `members` that held at most
    /// `peak_member_objects` member objects at once.
    pub(super) fn new(
        idle_rss_mib: f64,
        peak_rss_mib: f64,
        members: usize,
        peak_member_objects: usize,
    ) -> Self {
        MemoryBudget {
            idle_rss_mib,
            rss_per_cluster_mib: ratio(idle_rss_mib, members as f64),
            peak_rss_mib,
            peak_member_objects,
            rss_per_member_object_kib: ratio(
                (peak_rss_mib - idle_rss_mib).max(0.0) * 1024.0,
                peak_member_objects as f64,
            ),
        }
    }
}

/// Placement of every federated object of a kind narrowed to half the fleet (by a
/// KubeFedCluster label), then widened back to every member.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HalfFleet {
    /// Target kind.
    pub kind: String,
    /// Members that keep the objects (label `a`).
    pub kept: usize,
    /// Members the objects leave and come back to (label `b`).
    pub moved: usize,
    /// Placement narrowed → the objects gone from the moved half.
    pub to_half: Phase,
    /// Placement widened → the objects back in the moved half.
    pub back: Phase,
}

/// One member behind a fault proxy: the other members' latency without and with a delay on
/// its traffic, in the same run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SlowMember {
    /// The slow member.
    pub name: String,
    /// The delay its proxy adds to every chunk of traffic, milliseconds.
    pub latency_ms: f64,
    /// Federated ConfigMaps created in each of the two phases.
    pub objects: usize,
    /// The other members, no fault: create → present in every other member.
    pub others_without: Phase,
    /// The other members while the slow member is delayed.
    pub others_with: Phase,
    /// others_with / others_without latency percentiles (1 = not held back).
    pub latency_ratio: Percentiles,
    /// After the fault was lifted: seconds until the slow member too held every object of
    /// the delayed phase; `None` when it did not within 120 s (its copies are then left
    /// behind, and the members' own state says why: Ready, reachable).
    pub caught_up_s: Option<f64>,
}

impl SlowMember {
    /// The comparison of the two phases.
    pub(super) fn new(
        name: String,
        latency: Duration,
        objects: usize,
        without: Phase,
        with: Phase,
    ) -> Self {
        let (a, b) = (&without.latency_ms, &with.latency_ms);
        SlowMember {
            name,
            latency_ms: latency.as_secs_f64() * 1000.0,
            objects,
            latency_ratio: Percentiles {
                p50: ratio(b.p50, a.p50),
                p95: ratio(b.p95, a.p95),
                p99: ratio(b.p99, a.p99),
                max: ratio(b.max, a.max),
            },
            others_without: without,
            others_with: with,
            caught_up_s: None,
        }
    }
}

/// Which members (indexes from 0) form half `a` and which half `b`: the first ⌈N/2⌉ are `a`.
pub(super) fn halves(members: usize) -> (Vec<usize>, Vec<usize>) {
    let kept = members.div_ceil(2);
    ((0..kept).collect(), (kept..members).collect())
}

/// The member a `--slow-member` value names: `memberK` or `K` (from 1), as an index from 0.
pub(super) fn slow_member_index(value: &str, names: &[String]) -> anyhow::Result<usize> {
    if let Some(i) = names.iter().position(|n| n == value) {
        return Ok(i);
    }
    match value.parse::<usize>() {
        Ok(k) if (1..=names.len()).contains(&k) => Ok(k - 1),
        _ => anyhow::bail!(
            "--slow-member {value:?} names no member: give a name (member1 … member{n}) or an index from 1 to {n}",
            n = names.len()
        ),
    }
}

/// Every member but `except`.
pub(super) fn all_but(members: usize, except: usize) -> Vec<usize> {
    (0..members).filter(|&i| i != except).collect()
}

/// Parses a delay: `2s`, `1.5s`, `500ms`.
pub fn parse_latency(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    let (number, scale) = if let Some(ms) = s.strip_suffix("ms") {
        (ms, 0.001)
    } else if let Some(secs) = s.strip_suffix('s') {
        (secs, 1.0)
    } else {
        return Err(format!("{s:?}: give a unit, e.g. 2s or 500ms"));
    };
    match number.trim().parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(Duration::from_secs_f64(v * scale)),
        _ => Err(format!("{s:?} is not a duration such as 2s or 500ms")),
    }
}

/// Every request served between two counter readings of a set of API servers, summed, by
/// `resource[/subresource] verb` (a non-resource path has an empty resource, its path as the
/// subresource). Watches and the benchmark's own `/metrics` readings are left out.
pub(super) fn all_requests(
    before: &[RequestCounts],
    after: &[RequestCounts],
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (b, a) in before.iter().zip(after) {
        for (k, v) in a {
            let (_, resource, sub, verb) = k;
            if verb == "WATCH" || verb == "CONNECT" || sub == "/metrics" {
                continue;
            }
            let d = (v - b.get(k).copied().unwrap_or(0.0)).max(0.0).round() as u64;
            if d == 0 {
                continue;
            }
            let what = match (resource.as_str(), sub.as_str()) {
                (r, "") => r.to_string(),
                ("", s) => s.to_string(),
                (r, s) => format!("{r}/{s}"),
            };
            *out.entry(format!("{what} {verb}")).or_insert(0) += d;
        }
    }
    out
}

/// Requests per cluster per minute from a count over `window_s`.
pub(super) fn per_cluster_per_min(count: f64, clusters: usize, window_s: f64) -> f64 {
    ratio(count * 60.0, clusters as f64 * window_s)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn halves_split_the_fleet_with_the_larger_half_first() {
        assert_eq!(halves(4), (vec![0, 1], vec![2, 3]));
        assert_eq!(halves(5), (vec![0, 1, 2], vec![3, 4]));
        assert_eq!(halves(1), (vec![0], vec![]));
    }

    #[test]
    fn a_slow_member_is_named_or_numbered_from_one() {
        let names: Vec<String> = (1..=3).map(|i| format!("member{i}")).collect();
        assert_eq!(slow_member_index("member2", &names).ok(), Some(1));
        assert_eq!(slow_member_index("3", &names).ok(), Some(2));
        assert!(slow_member_index("0", &names).is_err());
        assert!(slow_member_index("4", &names).is_err());
        let err = slow_member_index("member9", &names)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default();
        assert!(err.contains("member1 … member3"), "{err}");
        assert_eq!(all_but(3, 1), vec![0, 2]);
    }

    #[test]
    fn latencies_take_seconds_or_milliseconds() {
        assert_eq!(parse_latency("2s"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_latency("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_latency("500ms"), Ok(Duration::from_millis(500)));
        assert!(parse_latency("2").is_err());
        assert!(parse_latency("-1s").is_err());
        assert!(parse_latency("fast s").is_err());
    }

    #[test]
    fn the_memory_budget_splits_idle_and_growth() {
        let b = MemoryBudget::new(40.0, 140.0, 10, 10_000);
        assert_eq!(b.rss_per_cluster_mib, 4.0);
        assert!((b.rss_per_member_object_kib - 10.24).abs() < 1e-9);
        let none = MemoryBudget::new(40.0, 30.0, 0, 0);
        assert!(none.rss_per_cluster_mib.is_nan() && none.rss_per_member_object_kib.is_nan());
        assert_eq!(per_cluster_per_min(30.0, 10, 30.0), 6.0);
    }

    #[test]
    fn idle_requests_are_summed_over_members_without_watches_or_metrics() {
        let key = |r: &str, s: &str, v: &str| {
            (String::new(), r.to_string(), s.to_string(), v.to_string())
        };
        let before: RequestCounts = [(key("", "/healthz", "GET"), 5.0)].into();
        let after: RequestCounts = [
            (key("", "/healthz", "GET"), 8.0),
            (key("", "/metrics", "GET"), 2.0),
            (key("configmaps", "", "WATCH"), 4.0),
            (key("namespaces", "status", "PATCH"), 1.0),
        ]
        .into();
        let total = all_requests(&[before.clone(), before], &[after.clone(), after]);
        assert_eq!(
            total,
            [
                ("/healthz GET".to_string(), 6),
                ("namespaces/status PATCH".to_string(), 2)
            ]
            .into()
        );
    }

    #[test]
    fn the_drain_takes_a_quarter_of_the_fleet_and_places_on_half_of_the_rest() {
        assert_eq!(drain_shape(1), None);
        assert_eq!(drain_shape(2), Some((1, 1)));
        assert_eq!(drain_shape(4), Some((1, 1)));
        assert_eq!(drain_shape(20), Some((5, 7)));
        assert_eq!(drain_shape(100), Some((10, 10)));
        assert_eq!(busiest(&[3, 9, 9, 0, 5], 2), vec![1, 2]);
        assert_eq!(busiest(&[1, 1, 1], 2), vec![0, 1]);
    }

    #[test]
    fn the_slow_member_ratio_is_with_over_without() {
        let phase = |p99: f64| Phase {
            latency_ms: Percentiles {
                p50: p99 / 2.0,
                p95: p99,
                p99,
                max: p99,
            },
            ..Phase::default()
        };
        let s = SlowMember::new(
            "member2".into(),
            Duration::from_secs(2),
            10,
            phase(100.0),
            phase(150.0),
        );
        assert_eq!(s.latency_ms, 2000.0);
        assert_eq!(s.latency_ratio.p99, 1.5);
        assert_eq!(s.latency_ratio.p50, 1.5);
    }
}
