//! The replica planner of ReplicaSchedulingPreference: spreads a total replica count over
//! clusters by weight, after each cluster's minimum, never above its maximum nor above
//! kubefed's capacity estimate (the overflow is reported apart, as kubefed's planner does),
//! and says per cluster why ([`Plan::reasons`]). Pure.
//!
//! Order matters when replicas do not divide evenly: clusters are sorted by weight
//! (descending), then by an FNV-1a hash of cluster name + object key, so the same object
//! always favours the same clusters while different objects spread their remainders.

use std::collections::BTreeMap;

use flotilla_api::scheduling::{ClusterPreferences, DivisionReason};

/// What the planner needs to know.
#[derive(Clone, Debug)]
pub struct PlanInput<'a> {
    /// Replicas to spread.
    pub total_replicas: i64,
    /// Preferences by cluster name, `*` for every unlisted cluster. Empty = `{"*": {weight: 1}}`.
    pub preferences: &'a BTreeMap<String, ClusterPreferences>,
    /// Clusters that may receive replicas (Ready, and matching the selector when asked).
    pub clusters: &'a [String],
    /// Replicas each cluster has now (used when `rebalance` is false).
    pub current: &'a BTreeMap<String, i64>,
    /// Whether existing replicas may move to follow the weights.
    pub rebalance: bool,
    /// `namespace/name` of the object, for the tie-breaking hash.
    pub key: &'a str,
    /// kubefed's capacity estimate per cluster (replicas it can run); absent: no cap.
    pub capacity: &'a BTreeMap<String, i64>,
    /// `weightPreference: AvailableReplicas`: the replicas that fit each cluster, used as
    /// its weight (absent: 0), the static weight breaking ties. `None`: static weights.
    pub available: Option<&'a BTreeMap<String, i64>>,
}

/// Replicas per cluster and why.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Replicas per cluster. Clusters that get no preference (not listed and no `*`) are
    /// absent; clusters with a preference but no replicas map to 0.
    pub replicas: BTreeMap<String, i64>,
    /// kubefed's overflow: replicas a cluster's capacity estimate kept off it. With
    /// `rebalance`, all of them (they stay Pending there while running elsewhere, so freed
    /// capacity is seen); without, only those placed nowhere else.
    pub overflow: BTreeMap<String, i64>,
    /// Per planned cluster: what decided its replicas, and the numbers behind it.
    pub reasons: BTreeMap<String, (DivisionReason, String)>,
}

impl Plan {
    /// What is written per cluster: its replicas plus its overflow (kubefed's schedule).
    pub fn written(&self) -> BTreeMap<String, i64> {
        let mut out = self.replicas.clone();
        for (c, n) in &self.overflow {
            *out.entry(c.clone()).or_default() += n;
        }
        out
    }
}

struct Pref {
    cluster: String,
    min: i64,
    max: Option<i64>,
    weight: i64,
    static_weight: i64,
    capacity: Option<i64>,
    hash: u32,
}

/// What capped or set a cluster's replicas along the way.
#[derive(Default)]
struct Marks {
    capped: BTreeMap<String, DivisionReason>,
    kept: BTreeMap<String, i64>,
    /// Without rebalancing: the division with it.
    ideal: Option<BTreeMap<String, i64>>,
}

fn fnv1a(s: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// The division of `input.total_replicas` (see [`Plan`]).
pub fn plan(input: &PlanInput<'_>) -> Plan {
    let prefs = preferences(input);
    let mut remaining = input.total_replicas.max(0);
    let mut marks = Marks::default();
    let mut plan = minimums(&prefs, &mut remaining, &mut marks);
    if !input.rebalance {
        keep_current(&prefs, input.current, &mut plan, &mut remaining, &mut marks);
    }
    let mut overflow = BTreeMap::new();
    let remaining = spread_by_weight(&prefs, &mut plan, remaining, &mut overflow, &mut marks);
    if !input.rebalance {
        // kubefed: without rebalancing, only what found no room anywhere stays behind.
        overflow = overflow
            .into_iter()
            .map(|(c, n)| (c, n.min(remaining)))
            .filter(|(_, n)| *n > 0)
            .collect();
    }
    // What the weights alone would give, to tell a kept count apart from a weighed one.
    if !input.rebalance {
        let ideal = self::plan(&PlanInput {
            rebalance: true,
            ..input.clone()
        });
        marks.ideal = Some(ideal.replicas);
    }
    let reasons = reasons(&prefs, &plan, &marks, input.available.is_some());
    Plan {
        replicas: plan,
        overflow,
        reasons,
    }
}

/// A cluster that gets nothing because not one pod of the template can run there: its
/// capacity estimate is 0 (every pod stayed unschedulable past the threshold), or, dividing
/// by available replicas, not one fits its Ready, schedulable nodes.
fn unschedulable(p: &Pref, n: i64, available: bool) -> Option<(DivisionReason, String)> {
    if n != 0 {
        return None;
    }
    let message = if p.capacity == Some(0) {
        "capacity estimate 0: every pod stayed unschedulable past the threshold"
    } else if available && p.weight == 0 {
        "no Ready, schedulable node has room for one pod of the template (0 replicas fit)"
    } else {
        return None;
    };
    Some((DivisionReason::Unschedulable, message.to_owned()))
}

/// Why each planned cluster got what it got.
fn reasons(
    prefs: &[Pref],
    plan: &BTreeMap<String, i64>,
    marks: &Marks,
    available: bool,
) -> BTreeMap<String, (DivisionReason, String)> {
    let weight_sum: i64 = prefs.iter().map(|p| p.weight).sum();
    prefs
        .iter()
        .map(|p| {
            let n = plan[&p.cluster];
            if let Some(why) = unschedulable(p, n, available) {
                return (p.cluster.clone(), why);
            }
            let capped = marks.capped.get(&p.cluster).copied().or_else(|| {
                p.capacity
                    .is_some_and(|c| n >= c)
                    .then_some(DivisionReason::CapacityEstimate)
            });
            let why = match capped {
                Some(DivisionReason::CapacityEstimate) => (
                    DivisionReason::CapacityEstimate,
                    format!(
                        "capacity estimate {}: pods unschedulable past the threshold",
                        p.capacity.unwrap_or(n)
                    ),
                ),
                Some(r) => (r, format!("maxReplicas {}", p.max.unwrap_or(n))),
                None if marks.kept.contains_key(&p.cluster)
                    && let Some(ideal) = marks.ideal.as_ref().and_then(|i| i.get(&p.cluster))
                    && *ideal != n =>
                {
                    (
                        DivisionReason::Current,
                        format!(
                            "kept where they run (rebalance: false); the weights alone would give {ideal}"
                        ),
                    )
                }
                None if p.min > 0 && n == p.min => (
                    DivisionReason::MinReplicas,
                    format!("minReplicas {}", p.min),
                ),
                None if available => (
                    DivisionReason::AvailableReplicas,
                    format!(
                        "{} replicas fit (of {weight_sum} in all clusters)",
                        p.weight
                    ),
                ),
                None => (
                    DivisionReason::Weight,
                    format!("weight {} of {weight_sum}", p.weight),
                ),
            };
            (p.cluster.clone(), why)
        })
        .collect()
}

/// The preference of every candidate cluster that has one, in the order that receives
/// replicas first: heavier weight, then the tie-breaking hash, then the name.
fn preferences(input: &PlanInput<'_>) -> Vec<Pref> {
    let default_prefs = BTreeMap::from([(
        "*".to_string(),
        ClusterPreferences {
            min_replicas: 0,
            max_replicas: None,
            weight: 1,
        },
    )]);
    let prefs_map = if input.preferences.is_empty() {
        &default_prefs
    } else {
        input.preferences
    };
    let mut prefs: Vec<Pref> = input
        .clusters
        .iter()
        .filter_map(|c| {
            let p = prefs_map.get(c).or_else(|| prefs_map.get("*"))?;
            let static_weight = p.weight.max(0);
            Some(Pref {
                cluster: c.clone(),
                min: p.min_replicas.max(0),
                max: p.max_replicas.map(|m| m.max(0)),
                weight: input
                    .available
                    .map_or(static_weight, |a| a.get(c).copied().unwrap_or(0).max(0)),
                static_weight,
                capacity: input.capacity.get(c).map(|n| (*n).max(0)),
                hash: fnv1a(&format!("{c}{}", input.key)),
            })
        })
        .collect();
    prefs.sort_by(|a, b| {
        b.weight
            .cmp(&a.weight)
            .then(b.static_weight.cmp(&a.static_weight))
            .then(a.hash.cmp(&b.hash))
            .then(a.cluster.cmp(&b.cluster))
    });
    prefs
}

/// Each cluster's minimum (capped by its maximum and its capacity), in order, while
/// `remaining` lasts.
fn minimums(prefs: &[Pref], remaining: &mut i64, marks: &mut Marks) -> BTreeMap<String, i64> {
    let mut plan = BTreeMap::new();
    for p in prefs {
        let mut min = p.min.min(*remaining);
        if let Some(max) = p.max {
            min = min.min(max);
        }
        if let Some(cap) = p.capacity
            && cap < min
        {
            min = cap;
            marks
                .capped
                .insert(p.cluster.clone(), DivisionReason::CapacityEstimate);
        }
        *remaining -= min;
        plan.insert(p.cluster.clone(), min);
    }
    plan
}

/// Without rebalancing, a cluster keeps the replicas it has now (up to its maximum and its
/// capacity) before anything is spread by weight.
fn keep_current(
    prefs: &[Pref],
    current: &BTreeMap<String, i64>,
    plan: &mut BTreeMap<String, i64>,
    remaining: &mut i64,
    marks: &mut Marks,
) {
    for p in prefs {
        let planned = plan[&p.cluster];
        if let Some(&count) = current.get(&p.cluster)
            && count > planned
        {
            let mut target = p.max.map_or(count, |m| m.min(count));
            if let Some(cap) = p.capacity {
                target = target.min(cap);
            }
            let extra = (target - planned).clamp(0, *remaining);
            *remaining -= extra;
            plan.insert(p.cluster.clone(), planned + extra);
            if extra > 0 {
                marks.kept.insert(p.cluster.clone(), planned + extra);
            }
        }
    }
}

/// Spreads `remaining` over the clusters below their maximum and capacity in proportion to
/// weight, round after round, until nothing is left or no cluster can take more; what a
/// capacity kept off a cluster goes to `overflow`. Returns what was placed nowhere.
fn spread_by_weight(
    prefs: &[Pref],
    plan: &mut BTreeMap<String, i64>,
    mut remaining: i64,
    overflow: &mut BTreeMap<String, i64>,
    marks: &mut Marks,
) -> i64 {
    let mut open: Vec<&Pref> = prefs
        .iter()
        // A cluster at its capacity stays in the first round, as in kubefed, so that the
        // share it cannot take is counted as its overflow.
        .filter(|p| p.max.is_none_or(|m| plan[&p.cluster] < m))
        .collect();
    while remaining > 0 {
        let weight_sum: i64 = open.iter().map(|p| p.weight).sum();
        if weight_sum <= 0 {
            break;
        }
        let to_distribute = remaining;
        let mut modified = false;
        let mut still_open = Vec::new();
        for p in open {
            let start = plan[&p.cluster];
            // Round fractions up so small remainders are not lost.
            let extra = ((to_distribute * p.weight + weight_sum - 1) / weight_sum).min(remaining);
            let mut total = start + extra;
            let mut full = false;
            if let Some(m) = p.max
                && total >= m
            {
                full = true;
                total = m;
                marks
                    .capped
                    .insert(p.cluster.clone(), DivisionReason::MaxReplicas);
            }
            if let Some(c) = p.capacity
                && total >= c
            {
                full = true;
                if total > c {
                    overflow.insert(p.cluster.clone(), total - c);
                }
                total = c;
                marks
                    .capped
                    .insert(p.cluster.clone(), DivisionReason::CapacityEstimate);
            }
            let increase = total - start;
            remaining -= increase;
            modified |= increase > 0;
            plan.insert(p.cluster.clone(), total);
            if !full {
                still_open.push(p);
            }
        }
        open = still_open;
        if !modified {
            break;
        }
    }
    remaining
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prefs(list: &[(&str, i64, Option<i64>, i64)]) -> BTreeMap<String, ClusterPreferences> {
        list.iter()
            .map(|(c, min, max, weight)| {
                (
                    c.to_string(),
                    ClusterPreferences {
                        min_replicas: *min,
                        max_replicas: *max,
                        weight: *weight,
                    },
                )
            })
            .collect()
    }

    fn run(
        total: i64,
        p: &BTreeMap<String, ClusterPreferences>,
        clusters: &[&str],
    ) -> BTreeMap<String, i64> {
        let clusters: Vec<String> = clusters.iter().map(|s| s.to_string()).collect();
        plan(&PlanInput {
            total_replicas: total,
            preferences: p,
            clusters: &clusters,
            current: &BTreeMap::new(),
            rebalance: true,
            key: "demo/web",
            capacity: &BTreeMap::new(),
            available: None,
        })
        .replicas
    }

    #[test]
    fn no_preferences_spread_evenly() {
        let r = run(10, &BTreeMap::new(), &["a", "b"]);
        assert_eq!(r.values().sum::<i64>(), 10);
        assert_eq!(r["a"], 5);
        assert_eq!(r["b"], 5);
    }

    #[test]
    fn weights_split_in_proportion() {
        let r = run(
            9,
            &prefs(&[("a", 0, None, 2), ("b", 0, None, 1)]),
            &["a", "b"],
        );
        assert_eq!((r["a"], r["b"]), (6, 3));
    }

    #[test]
    fn minimums_come_first_and_maximums_cap() {
        let r = run(
            10,
            &prefs(&[("a", 4, None, 1), ("b", 0, Some(2), 10)]),
            &["a", "b"],
        );
        assert_eq!(r["b"], 2);
        assert_eq!(r["a"], 8);
    }

    #[test]
    fn unlisted_clusters_without_a_star_get_nothing() {
        let r = run(6, &prefs(&[("a", 0, None, 1)]), &["a", "b"]);
        assert_eq!(r.get("b"), None);
        assert_eq!(r["a"], 6);
    }

    #[test]
    fn the_star_entry_covers_unlisted_clusters() {
        let r = run(6, &prefs(&[("*", 0, None, 1)]), &["a", "b", "c"]);
        assert_eq!(r.values().sum::<i64>(), 6);
        assert!(r.values().all(|n| *n == 2));
    }

    #[test]
    fn replicas_beyond_every_maximum_stay_unplaced() {
        let r = run(
            10,
            &prefs(&[("a", 0, Some(3), 1), ("b", 0, Some(3), 1)]),
            &["a", "b"],
        );
        assert_eq!((r["a"], r["b"]), (3, 3));
    }

    #[test]
    fn unavailable_clusters_get_nothing() {
        let r = run(8, &prefs(&[("a", 0, None, 1), ("b", 0, None, 1)]), &["b"]);
        assert_eq!(r.get("a"), None);
        assert_eq!(r["b"], 8);
    }

    #[test]
    fn without_rebalance_current_replicas_stay_put() {
        let p = prefs(&[("a", 0, None, 1), ("b", 0, None, 1)]);
        let clusters = vec!["a".to_string(), "b".to_string()];
        let current = BTreeMap::from([("a".to_string(), 7)]);
        let r = plan(&PlanInput {
            total_replicas: 8,
            preferences: &p,
            clusters: &clusters,
            current: &current,
            rebalance: false,
            key: "k",
            capacity: &BTreeMap::new(),
            available: None,
        })
        .replicas;
        assert!(r["a"] >= 7, "existing replicas are not moved away: {r:?}");
        assert_eq!(r["a"] + r["b"], 8);
    }

    #[test]
    fn the_total_is_always_placed_when_capacity_allows() {
        for total in 0..40 {
            let r = run(
                total,
                &prefs(&[("a", 1, None, 3), ("b", 0, None, 2), ("c", 2, Some(5), 1)]),
                &["a", "b", "c"],
            );
            assert_eq!(r.values().sum::<i64>(), total, "total {total}: {r:?}");
        }
    }

    fn with_capacity(
        total: i64,
        p: &BTreeMap<String, ClusterPreferences>,
        capacity: &[(&str, i64)],
        current: &[(&str, i64)],
        rebalance: bool,
    ) -> Plan {
        let clusters = vec!["a".to_string(), "b".to_string()];
        let capacity: BTreeMap<String, i64> =
            capacity.iter().map(|(c, n)| (c.to_string(), *n)).collect();
        let current: BTreeMap<String, i64> =
            current.iter().map(|(c, n)| (c.to_string(), *n)).collect();
        plan(&PlanInput {
            total_replicas: total,
            preferences: p,
            clusters: &clusters,
            current: &current,
            rebalance,
            key: "demo/web",
            capacity: &capacity,
            available: None,
        })
    }

    #[test]
    fn a_capacity_estimate_sends_the_overflow_to_the_other_clusters() {
        let p = prefs(&[("a", 0, None, 2), ("b", 0, None, 1)]);
        let r = with_capacity(10, &p, &[("a", 4)], &[], true);
        assert_eq!((r.replicas["a"], r.replicas["b"]), (4, 6));
        assert_eq!(
            r.reasons["a"].0,
            DivisionReason::CapacityEstimate,
            "{:?}",
            r.reasons
        );
        assert_eq!(r.reasons["b"].0, DivisionReason::Weight);
    }

    #[test]
    fn with_rebalance_the_overflow_stays_pending_where_it_did_not_fit() {
        // kubefed: the unschedulable replicas stay, so freed capacity shows (they start)
        // and the division moves back.
        let p = prefs(&[("a", 0, None, 2), ("b", 0, None, 1)]);
        let r = with_capacity(10, &p, &[("a", 4)], &[], true);
        assert_eq!(r.overflow.get("a"), Some(&3), "a's weight share was 7");
        assert_eq!(r.written()["a"], 7);
        assert_eq!(r.written()["b"], 6);
    }

    #[test]
    fn without_rebalance_only_replicas_placed_nowhere_stay_as_overflow() {
        let p = prefs(&[("a", 0, None, 2), ("b", 0, Some(5), 1)]);
        let r = with_capacity(10, &p, &[("a", 4)], &[("a", 7), ("b", 3)], false);
        assert_eq!((r.replicas["a"], r.replicas["b"]), (4, 5));
        assert_eq!(r.overflow, BTreeMap::from([("a".to_string(), 1)]));
        assert_eq!(r.reasons["b"].0, DivisionReason::MaxReplicas);
        let r = with_capacity(8, &p, &[("a", 4)], &[("a", 7), ("b", 3)], false);
        assert!(r.overflow.is_empty(), "{r:?}");
        assert_eq!(r.written().values().sum::<i64>(), 8);
    }

    #[test]
    fn a_capacity_caps_the_minimum_too() {
        let p = prefs(&[("a", 5, None, 1), ("b", 0, None, 1)]);
        let r = with_capacity(6, &p, &[("a", 2)], &[], true);
        assert_eq!((r.replicas["a"], r.replicas["b"]), (2, 4));
        assert_eq!(r.reasons["a"].0, DivisionReason::CapacityEstimate);
    }

    #[test]
    fn kept_replicas_and_minimums_are_named_as_reasons() {
        let p = prefs(&[("a", 3, None, 0), ("b", 0, None, 1)]);
        let r = with_capacity(10, &p, &[], &[], true);
        assert_eq!(r.reasons["a"].0, DivisionReason::MinReplicas);
        let p = prefs(&[("a", 0, None, 1), ("b", 0, None, 1)]);
        let r = with_capacity(8, &p, &[], &[("a", 8)], false);
        assert_eq!(r.reasons["a"].0, DivisionReason::Current, "{r:?}");
        assert!(r.reasons["a"].1.contains("would give 4"), "{r:?}");
        let r = with_capacity(10, &p, &[], &[("a", 5), ("b", 5)], false);
        assert_eq!(
            r.reasons["a"].0,
            DivisionReason::Weight,
            "kept 5, as the weights say"
        );
    }

    #[test]
    fn available_replicas_are_the_weights_and_static_weights_break_ties() {
        let p = prefs(&[("a", 0, None, 1), ("b", 0, None, 5)]);
        let clusters = vec!["a".to_string(), "b".to_string()];
        let available = BTreeMap::from([("a".to_string(), 4), ("b".to_string(), 16)]);
        let input = PlanInput {
            total_replicas: 10,
            preferences: &p,
            clusters: &clusters,
            current: &BTreeMap::new(),
            rebalance: true,
            key: "demo/web",
            capacity: &BTreeMap::new(),
            available: Some(&available),
        };
        let r = plan(&input);
        assert_eq!((r.replicas["a"], r.replicas["b"]), (2, 8));
        assert_eq!(r.reasons["a"].0, DivisionReason::AvailableReplicas);
        assert!(r.reasons["b"].1.contains("16 replicas fit"), "{r:?}");
        let even = BTreeMap::from([("a".to_string(), 5), ("b".to_string(), 5)]);
        let r = plan(&PlanInput {
            total_replicas: 1,
            available: Some(&even),
            ..input
        });
        assert_eq!(
            r.replicas["b"], 1,
            "the heavier static weight wins the odd replica"
        );
    }

    #[test]
    fn a_cluster_where_not_one_pod_fits_is_named_unschedulable() {
        let p = prefs(&[("a", 0, None, 1), ("b", 0, None, 1)]);
        let r = with_capacity(6, &p, &[("a", 0)], &[], true);
        assert_eq!((r.replicas["a"], r.replicas["b"]), (0, 6));
        assert_eq!(r.reasons["a"].0, DivisionReason::Unschedulable, "{r:?}");
        assert!(r.reasons["a"].1.contains("capacity estimate 0"), "{r:?}");
        assert_eq!(r.reasons["b"].0, DivisionReason::Weight);
        let clusters = vec!["a".to_string(), "b".to_string()];
        let available = BTreeMap::from([("a".to_string(), 0), ("b".to_string(), 3)]);
        let r = plan(&PlanInput {
            total_replicas: 3,
            preferences: &p,
            clusters: &clusters,
            current: &BTreeMap::new(),
            rebalance: true,
            key: "demo/web",
            capacity: &BTreeMap::new(),
            available: Some(&available),
        });
        assert_eq!((r.replicas["a"], r.replicas["b"]), (0, 3));
        assert_eq!(r.reasons["a"].0, DivisionReason::Unschedulable, "{r:?}");
        assert!(r.reasons["a"].1.contains("0 replicas fit"), "{r:?}");
        assert_eq!(r.reasons["b"].0, DivisionReason::AvailableReplicas);
    }

    #[test]
    fn kubefeds_user_guide_examples_divide_as_documented() {
        // "totalReplicas: 9, A weight 1, B weight 2" → 3 and 6.
        let p = prefs(&[("A", 0, None, 1), ("B", 0, None, 2)]);
        let r = run(9, &p, &["A", "B"]);
        assert_eq!((r["A"], r["B"]), (3, 6));
        // "A minReplicas 4, maxReplicas 6, weight 1; B weight 1; total 9" → 5 and 4
        // (A's minimum first, then the rest split evenly, rounding up in A's favour by hash
        // order, never above A's maximum).
        let p = prefs(&[("A", 4, Some(6), 1), ("B", 0, None, 1)]);
        let r = run(9, &p, &["A", "B"]);
        assert_eq!(r["A"] + r["B"], 9);
        assert!(r["A"] >= 4 && r["A"] <= 6, "{r:?}");
    }
}
