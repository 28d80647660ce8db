//! The replica planner of ReplicaSchedulingPreference: spreads a total replica count over
//! clusters by weight, after each cluster's minimum, never above its maximum. Pure.
//!
//! Order matters when replicas do not divide evenly: clusters are sorted by weight
//! (descending), then by an FNV-1a hash of cluster name + object key, so the same object
//! always favours the same clusters while different objects spread their remainders.

use std::collections::BTreeMap;

use flotilla_api::scheduling::ClusterPreferences;

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
}

struct Pref {
    cluster: String,
    min: i64,
    max: Option<i64>,
    weight: i64,
    hash: u32,
}

fn fnv1a(s: &str) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for b in s.bytes() {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

/// Replicas per cluster. Clusters that get no preference (not listed and no `*`) are absent;
/// clusters with a preference but no replicas map to 0.
pub fn plan(input: &PlanInput<'_>) -> BTreeMap<String, i64> {
    let prefs = preferences(input);
    let mut remaining = input.total_replicas.max(0);
    let mut plan = minimums(&prefs, &mut remaining);
    if !input.rebalance {
        keep_current(&prefs, input.current, &mut plan, &mut remaining);
    }
    spread_by_weight(&prefs, &mut plan, remaining);
    plan
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
            Some(Pref {
                cluster: c.clone(),
                min: p.min_replicas.max(0),
                max: p.max_replicas.map(|m| m.max(0)),
                weight: p.weight.max(0),
                hash: fnv1a(&format!("{c}{}", input.key)),
            })
        })
        .collect();
    prefs.sort_by(|a, b| {
        b.weight
            .cmp(&a.weight)
            .then(a.hash.cmp(&b.hash))
            .then(a.cluster.cmp(&b.cluster))
    });
    prefs
}

/// Each cluster's minimum (capped by its maximum), in order, while `remaining` lasts.
fn minimums(prefs: &[Pref], remaining: &mut i64) -> BTreeMap<String, i64> {
    let mut plan = BTreeMap::new();
    for p in prefs {
        let mut min = p.min.min(*remaining);
        if let Some(max) = p.max {
            min = min.min(max);
        }
        *remaining -= min;
        plan.insert(p.cluster.clone(), min);
    }
    plan
}

/// Without rebalancing, a cluster keeps the replicas it has now (up to its maximum) before
/// anything is spread by weight.
fn keep_current(
    prefs: &[Pref],
    current: &BTreeMap<String, i64>,
    plan: &mut BTreeMap<String, i64>,
    remaining: &mut i64,
) {
    for p in prefs {
        let planned = plan[&p.cluster];
        if let Some(&count) = current.get(&p.cluster)
            && count > planned
        {
            let target = p.max.map_or(count, |m| m.min(count));
            let extra = (target - planned).clamp(0, *remaining);
            *remaining -= extra;
            plan.insert(p.cluster.clone(), planned + extra);
        }
    }
}

/// Spreads `remaining` over the clusters below their maximum in proportion to weight,
/// round after round, until nothing is left or no cluster can take more.
fn spread_by_weight(prefs: &[Pref], plan: &mut BTreeMap<String, i64>, mut remaining: i64) {
    let mut open: Vec<&Pref> = prefs
        .iter()
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
            let total = p.max.map_or(start + extra, |m| (start + extra).min(m));
            let increase = total - start;
            remaining -= increase;
            modified |= increase > 0;
            plan.insert(p.cluster.clone(), total);
            if p.max.is_none_or(|m| total < m) {
                still_open.push(p);
            }
        }
        open = still_open;
        if !modified {
            break;
        }
    }
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
        })
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
        });
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
}
