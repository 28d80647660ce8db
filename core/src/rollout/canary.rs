//! The canary planner by share of replicas (pure; the design is in docs/rollout.md,
//! "Canary by replica share"; [`super::canary_flow`] calls it). A Deployment whose
//! replicas are split over the clusters (a ReplicaSchedulingPreference or a scheduled
//! split) runs the new template as a second Deployment `<name>-canary` per cluster: at each
//! step a percentage of the total replicas, spread over the clusters by the same split, the
//! stable Deployment scaled down by as many ([`shares`]); the next step once every cluster's
//! canary is healthy long enough; promotion at 100 %; a canary not healthy by the deadline
//! fails the step ([`step`]).

use std::collections::BTreeMap;

/// Label on a canary Deployment, in its selector and on its pod template: `"true"`.
pub const CANARY_LABEL: &str = "flotilla.io/canary";

/// What a canary Deployment's name adds to the stable one's.
pub const CANARY_SUFFIX: &str = "-canary";

/// The name of the canary Deployment beside the stable Deployment `name`.
pub fn canary_name(name: &str) -> String {
    format!("{name}{CANARY_SUFFIX}")
}

/// The stable Deployment's name of a member object named like a canary.
pub fn stable_name(name: &str) -> Option<&str> {
    name.strip_suffix(CANARY_SUFFIX).filter(|n| !n.is_empty())
}

/// Checks that the workload has replicas to share: its total over the clusters.
pub fn replicas_to_share(split: &BTreeMap<String, i64>) -> Result<i64, String> {
    let total: i64 = split.values().map(|r| (*r).max(0)).sum();
    if total == 0 {
        return Err("a canary by replica share needs replicas: the workload has none in any placed cluster (spec.replicas, or a ReplicaSchedulingPreference)".into());
    }
    Ok(total)
}

/// One cluster's replicas at a step: of the stable Deployment and of `<name>-canary`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Share {
    /// Replicas of the stable Deployment (the old template).
    pub stable: i64,
    /// Replicas of the canary Deployment (the new template).
    pub canary: i64,
}

/// The replicas per cluster at `percent`: the canary runs `ceil(total × percent / 100)`
/// replicas in all (at least one), spread over the clusters in proportion to their split
/// (largest remainder; ties to the larger split, then by name), never more than a cluster's
/// split; the stable Deployment keeps the rest of the cluster's split.
pub fn shares(split: &BTreeMap<String, i64>, percent: u32) -> BTreeMap<String, Share> {
    let total: i64 = split.values().map(|r| (*r).max(0)).sum();
    let pct = i64::from(percent.min(100));
    let wanted = if total == 0 || pct == 0 {
        0
    } else {
        ((total * pct + 99) / 100).max(1)
    };
    let mut canary: BTreeMap<&str, i64> = BTreeMap::new();
    let mut remainders: Vec<(i64, i64, &str)> = Vec::new();
    let mut given = 0;
    for (cluster, replicas) in split {
        let replicas = (*replicas).max(0);
        let exact = if total == 0 { 0 } else { replicas * wanted };
        let floor = if total == 0 { 0 } else { exact / total };
        canary.insert(cluster, floor);
        given += floor;
        if floor < replicas {
            remainders.push((exact % total.max(1), replicas, cluster));
        }
    }
    remainders.sort_by(|a, b| b.0.cmp(&a.0).then(b.1.cmp(&a.1)).then(a.2.cmp(b.2)));
    for (_, _, cluster) in remainders
        .into_iter()
        .take(usize::try_from(wanted - given).unwrap_or(0))
    {
        *canary.entry(cluster).or_default() += 1;
    }
    split
        .iter()
        .map(|(cluster, replicas)| {
            let c = canary.get(cluster.as_str()).copied().unwrap_or(0);
            let share = Share {
                stable: (*replicas).max(0) - c,
                canary: c,
            };
            (cluster.clone(), share)
        })
        .collect()
}

/// One cluster's canary as the step planner sees it.
#[derive(Debug, Clone)]
pub struct CanaryHealth<'a> {
    /// Cluster name.
    pub name: &'a str,
    /// The canary Deployment holds this step's replicas and is healthy (rolled out, ready).
    pub healthy: bool,
    /// Why not, in the member's words.
    pub problem: Option<String>,
}

/// Where the canary stands, as kept in status: the step (index into the steps) and since
/// when it runs and since when every cluster's canary is healthy (seconds since the epoch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepState {
    /// Index into the steps.
    pub index: usize,
    /// When the step started.
    pub since: i64,
    /// Since when every cluster's canary has been healthy at this step.
    pub healthy_since: Option<i64>,
}

/// What to do now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StepDecision {
    /// Stay at this step; look again after the seconds given (a success or a deadline due).
    Hold {
        /// The step's state, with `healthy_since` updated.
        state: StepState,
        /// Seconds until something comes due.
        recheck_after: i64,
    },
    /// Go to the next step (its state starts now).
    Next(StepState),
    /// The last step (100 %) held: the stable Deployment takes the new template and every
    /// replica, the canary goes.
    Promote,
    /// A cluster's canary was not healthy within the deadline: (cluster, reason) each.
    Failed(Vec<(String, String)>),
}

/// The timing of the gates.
#[derive(Debug, Clone, Copy)]
pub struct Gates {
    /// Every canary must be healthy this long before the next step.
    pub min_success_seconds: i64,
    /// A step whose canaries are not all healthy this long after it started fails.
    pub progress_deadline_seconds: i64,
}

/// The next move of a canary at `state` among `steps`, from each cluster's canary health.
pub fn step(
    steps: &[u32],
    state: StepState,
    clusters: &[CanaryHealth<'_>],
    gates: Gates,
    now: i64,
) -> StepDecision {
    let all_healthy = clusters.iter().all(|c| c.healthy);
    if !all_healthy {
        if now - state.since >= gates.progress_deadline_seconds {
            let failed = clusters
                .iter()
                .filter(|c| !c.healthy)
                .map(|c| {
                    let why = c.problem.clone().unwrap_or_else(|| {
                        format!(
                            "the canary was not healthy within progressDeadlineSeconds ({}s)",
                            gates.progress_deadline_seconds
                        )
                    });
                    (c.name.to_string(), why)
                })
                .collect();
            return StepDecision::Failed(failed);
        }
        let state = StepState {
            healthy_since: None,
            ..state
        };
        let recheck_after = state.since + gates.progress_deadline_seconds - now;
        return StepDecision::Hold {
            state,
            recheck_after,
        };
    }
    let healthy_since = state.healthy_since.unwrap_or(now);
    // Whole seconds: one more makes minSuccessSeconds a lower bound (as the wave planner).
    let needed = if gates.min_success_seconds > 0 {
        gates.min_success_seconds + 1
    } else {
        0
    };
    if now - healthy_since < needed {
        let state = StepState {
            healthy_since: Some(healthy_since),
            ..state
        };
        return StepDecision::Hold {
            state,
            recheck_after: healthy_since + needed - now,
        };
    }
    if state.index + 1 >= steps.len() {
        return StepDecision::Promote;
    }
    StepDecision::Next(StepState {
        index: state.index + 1,
        since: now,
        healthy_since: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn split(rows: &[(&str, i64)]) -> BTreeMap<String, i64> {
        rows.iter().map(|(c, r)| (c.to_string(), *r)).collect()
    }

    fn canary_of(s: &BTreeMap<String, Share>) -> Vec<i64> {
        s.values().map(|s| s.canary).collect()
    }

    #[test]
    fn the_share_of_a_step_is_spread_by_the_split_and_the_stable_keeps_the_rest() {
        let s = split(&[("a", 6), ("b", 3), ("c", 1)]);
        // 10 % of 10: one replica, to the largest cluster.
        assert_eq!(canary_of(&shares(&s, 10)), [1, 0, 0]);
        // 50 %: 5 = 3 + 1.5 + 0.5 → a 3, b 1 or 2 by remainder, c by remainder.
        let half = shares(&s, 50);
        assert_eq!(half.values().map(|s| s.canary).sum::<i64>(), 5);
        assert_eq!(
            half["a"],
            Share {
                stable: 3,
                canary: 3
            }
        );
        assert_eq!(canary_of(&shares(&s, 100)), [6, 3, 1]);
        for (p, share) in [(10, shares(&s, 10)), (50, half)] {
            for (cluster, sh) in &share {
                assert_eq!(sh.stable + sh.canary, s[cluster], "{p} % on {cluster}");
            }
        }
    }

    #[test]
    fn a_small_step_still_runs_one_canary_and_never_more_than_a_cluster_has() {
        let s = split(&[("a", 2), ("b", 2), ("c", 0)]);
        assert_eq!(canary_of(&shares(&s, 1)), [1, 0, 0]);
        let third = split(&[("a", 1), ("b", 1), ("c", 1)]);
        assert_eq!(canary_of(&shares(&third, 34)), [1, 1, 0], "ceil(1.02) = 2");
        assert_eq!(canary_of(&shares(&s, 100)), [2, 2, 0]);
    }

    #[test]
    fn replicas_to_share_are_the_total_and_none_is_refused() {
        assert_eq!(replicas_to_share(&split(&[("a", 2), ("b", 1)])), Ok(3));
        let none = replicas_to_share(&split(&[("a", 0)])).expect_err("no replicas");
        assert!(none.contains("needs replicas"), "{none}");
    }

    const GATES: Gates = Gates {
        min_success_seconds: 10,
        progress_deadline_seconds: 60,
    };

    fn health(rows: &[(&'static str, bool)]) -> Vec<CanaryHealth<'static>> {
        rows.iter()
            .map(|(name, healthy)| CanaryHealth {
                name,
                healthy: *healthy,
                problem: (!healthy).then(|| format!("{name}: 0/1 pods ready")),
            })
            .collect()
    }

    #[test]
    fn a_step_moves_on_once_every_canary_is_healthy_for_min_success_seconds() {
        let steps = [10, 50, 100];
        let start = StepState {
            index: 0,
            since: 1000,
            healthy_since: None,
        };
        let waiting = step(
            &steps,
            start,
            &health(&[("a", true), ("b", false)]),
            GATES,
            1005,
        );
        assert_eq!(
            waiting,
            StepDecision::Hold {
                state: start,
                recheck_after: 55
            }
        );
        let all = health(&[("a", true), ("b", true)]);
        let StepDecision::Hold {
            state,
            recheck_after,
        } = step(&steps, start, &all, GATES, 1006)
        else {
            panic!("holds for minSuccessSeconds");
        };
        assert_eq!((state.healthy_since, recheck_after), (Some(1006), 11));
        assert_eq!(
            step(&steps, state, &all, GATES, 1017),
            StepDecision::Next(StepState {
                index: 1,
                since: 1017,
                healthy_since: None
            })
        );
        let last = StepState {
            index: 2,
            since: 2000,
            healthy_since: Some(2000),
        };
        assert_eq!(step(&steps, last, &all, GATES, 2011), StepDecision::Promote);
    }

    #[test]
    fn a_canary_not_healthy_by_the_deadline_fails_the_step_with_the_members_words() {
        let start = StepState {
            index: 1,
            since: 1000,
            healthy_since: Some(990),
        };
        let got = step(
            &[10, 50, 100],
            start,
            &health(&[("a", true), ("b", false)]),
            GATES,
            1060,
        );
        assert_eq!(
            got,
            StepDecision::Failed(vec![("b".into(), "b: 0/1 pods ready".into())])
        );
    }
}
