//! Choosing clusters: `maxClusters`, spread constraints over label values and preference
//! order. Works on clusters already filtered (may stay / may be placed on); knows nothing
//! about taints, time or moves.

use std::collections::{BTreeMap, BTreeSet};

use flotilla_api::federated::SpreadConstraint;

/// A cluster as the chooser sees it.
#[derive(Debug, Clone)]
pub struct Candidate<'a> {
    /// Cluster name.
    pub name: &'a str,
    /// Its value of each spread constraint's topology key (same order as the constraints).
    pub groups: Vec<&'a str>,
    /// Total weight of the preferences it matches.
    pub score: i64,
    /// Only untolerated `PreferNoSchedule` taints: chosen after every other cluster.
    pub disfavoured: bool,
}

/// The limits a choice must respect.
pub struct Limits<'a> {
    /// `maxClusters` (or unlimited).
    pub max_clusters: usize,
    /// The spread constraints.
    pub spread: &'a [SpreadConstraint],
}

/// Orders clusters for new placement: not disfavoured first, then higher score, then name.
pub fn rank(options: &mut [Candidate<'_>]) {
    options
        .sort_by(|a, b| (a.disfavoured, -a.score, a.name).cmp(&(b.disfavoured, -b.score, b.name)));
}

/// Tracks the distinct group values used per constraint.
struct Groups<'a, 'b> {
    limits: &'b Limits<'b>,
    used: Vec<BTreeSet<&'a str>>,
}

impl<'a, 'b> Groups<'a, 'b> {
    fn new(limits: &'b Limits<'b>) -> Self {
        Groups {
            limits,
            used: vec![BTreeSet::new(); limits.spread.len()],
        }
    }

    /// Whether adding `o` keeps every constraint within its `maxGroups`.
    fn allows(&self, o: &Candidate<'a>) -> bool {
        self.limits
            .spread
            .iter()
            .zip(&self.used)
            .zip(&o.groups)
            .all(|((c, used), g)| {
                used.contains(g)
                    || c.max_groups
                        .is_none_or(|max| used.len() < usize::try_from(max).unwrap_or(usize::MAX))
            })
    }

    fn add(&mut self, o: &Candidate<'a>) {
        for (used, g) in self.used.iter_mut().zip(&o.groups) {
            used.insert(g);
        }
    }
}

/// Keeps as many of the previously decided clusters (in their order) as the limits allow;
/// returns (kept, dropped).
pub fn trim<'a>(
    kept: Vec<Candidate<'a>>,
    limits: &Limits<'_>,
) -> (Vec<Candidate<'a>>, Vec<Candidate<'a>>) {
    let mut groups = Groups::new(limits);
    let (mut stay, mut dropped) = (Vec::new(), Vec::new());
    for o in kept {
        if stay.len() < limits.max_clusters && groups.allows(&o) {
            groups.add(&o);
            stay.push(o);
        } else {
            dropped.push(o);
        }
    }
    (stay, dropped)
}

/// What a choice made: the clusters added, and each unmet `minGroups` as a message.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Choice {
    /// New clusters, in order of choice.
    pub added: Vec<String>,
    /// "need 3 distinct topology.kubernetes.io/region, 2 available", per unmet constraint.
    pub unmet: Vec<String>,
}

/// Adds clusters from `pool` (ranked with [`rank`]) to `kept`: first one per missing group
/// of each constraint with `minGroups`, then the best remaining up to `maxClusters`.
pub fn fill(kept: &[Candidate<'_>], pool: &[Candidate<'_>], limits: &Limits<'_>) -> Choice {
    let mut groups = Groups::new(limits);
    for o in kept {
        groups.add(o);
    }
    let mut count = kept.len();
    let mut taken = vec![false; pool.len()];
    let mut choice = Choice::default();
    for (i, c) in limits.spread.iter().enumerate() {
        let Some(min) = c.min_groups.map(|m| m as usize) else {
            continue;
        };
        while groups.used[i].len() < min && count < limits.max_clusters {
            let next = pool.iter().enumerate().find(|(j, o)| {
                !taken[*j] && !groups.used[i].contains(o.groups[i]) && groups.allows(o)
            });
            let Some((j, o)) = next else { break };
            taken[j] = true;
            groups.add(o);
            choice.added.push(o.name.to_string());
            count += 1;
        }
        if groups.used[i].len() < min {
            let available: BTreeSet<&str> = kept.iter().chain(pool).map(|o| o.groups[i]).collect();
            choice.unmet.push(format!(
                "need {min} distinct {}, {} available",
                c.topology_key,
                available.len()
            ));
        }
    }
    for (j, o) in pool.iter().enumerate() {
        if count >= limits.max_clusters {
            break;
        }
        if !taken[j] && groups.allows(o) {
            taken[j] = true;
            groups.add(o);
            choice.added.push(o.name.to_string());
            count += 1;
        }
    }
    choice
}

/// Each cluster's value of every topology key, or `None` when one is missing.
pub fn group_values<'a>(
    labels: &'a BTreeMap<String, String>,
    spread: &[SpreadConstraint],
) -> Option<Vec<&'a str>> {
    spread
        .iter()
        .map(|c| labels.get(&c.topology_key).map(String::as_str))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opt<'a>(name: &'a str, region: &'a str, score: i64) -> Candidate<'a> {
        Candidate {
            name,
            groups: vec![region],
            score,
            disfavoured: false,
        }
    }

    fn region(min: Option<u32>, max: Option<u32>) -> Vec<SpreadConstraint> {
        vec![SpreadConstraint {
            topology_key: "region".into(),
            min_groups: min,
            max_groups: max,
        }]
    }

    #[test]
    fn fill_spreads_before_filling_and_respects_max_clusters() {
        struct Case {
            what: &'static str,
            max: usize,
            spread: Vec<SpreadConstraint>,
            want: Vec<&'static str>,
            unmet: usize,
        }
        let cases = [
            Case {
                what: "one per region first",
                max: 3,
                spread: region(Some(3), None),
                want: vec!["a1", "b1", "c1"],
                unmet: 0,
            },
            Case {
                what: "no spread: by name",
                max: 3,
                spread: region(None, None),
                want: vec!["a1", "a2", "b1"],
                unmet: 0,
            },
            Case {
                what: "max groups 1",
                max: 3,
                spread: region(None, Some(1)),
                want: vec!["a1", "a2"],
                unmet: 0,
            },
            Case {
                what: "more groups needed than exist",
                max: 5,
                spread: region(Some(4), None),
                want: vec!["a1", "b1", "c1", "a2"],
                unmet: 1,
            },
            Case {
                what: "max clusters below min groups",
                max: 2,
                spread: region(Some(3), None),
                want: vec!["a1", "b1"],
                unmet: 1,
            },
        ];
        for case in cases {
            let mut pool = vec![
                opt("c1", "c", 0),
                opt("a2", "a", 0),
                opt("b1", "b", 0),
                opt("a1", "a", 0),
            ];
            rank(&mut pool);
            let limits = Limits {
                max_clusters: case.max,
                spread: &case.spread,
            };
            let choice = fill(&[], &pool, &limits);
            assert_eq!(choice.added, case.want, "{}", case.what);
            assert_eq!(choice.unmet.len(), case.unmet, "{}", case.what);
        }
    }

    #[test]
    fn the_unmet_message_says_what_is_missing() {
        let pool = vec![opt("a1", "a", 0), opt("b1", "b", 0)];
        let spread = region(Some(3), Some(3));
        let choice = fill(
            &[],
            &pool,
            &Limits {
                max_clusters: 3,
                spread: &spread,
            },
        );
        assert_eq!(choice.unmet, ["need 3 distinct region, 2 available"]);
    }

    #[test]
    fn preferences_then_names_order_new_clusters_and_disfavoured_come_last() {
        let mut pool = vec![opt("b", "x", 0), opt("a", "x", 0), opt("c", "x", 10)];
        pool[1].disfavoured = true;
        rank(&mut pool);
        let names: Vec<&str> = pool.iter().map(|o| o.name).collect();
        assert_eq!(names, ["c", "b", "a"]);
    }

    #[test]
    fn kept_clusters_count_toward_groups_and_the_limit() {
        let kept = vec![opt("a1", "a", 0)];
        let pool = vec![opt("a2", "a", 0), opt("b1", "b", 0), opt("c1", "c", 0)];
        let spread = region(Some(2), None);
        let choice = fill(
            &kept,
            &pool,
            &Limits {
                max_clusters: 2,
                spread: &spread,
            },
        );
        assert_eq!(choice.added, ["b1"]);
    }

    #[test]
    fn trim_keeps_the_first_clusters_within_the_limits() {
        let kept = vec![opt("a1", "a", 0), opt("b1", "b", 0), opt("a2", "a", 0)];
        let spread = region(None, Some(1));
        let (stay, dropped) = trim(
            kept,
            &Limits {
                max_clusters: 2,
                spread: &spread,
            },
        );
        assert_eq!(
            stay.iter().map(|o| o.name).collect::<Vec<_>>(),
            ["a1", "a2"]
        );
        assert_eq!(dropped.iter().map(|o| o.name).collect::<Vec<_>>(), ["b1"]);
    }
}
