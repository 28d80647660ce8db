//! What a provider wants engaged, and bringing a [`ClusterSet`] in line with it: the plan
//! is a pure function; the [`Tracker`] applies it (engaging, disengaging, reporting) and
//! starts a health check per new engagement.

use std::collections::{BTreeMap, BTreeSet};

use tracing::{info, warn};

use super::health;
use crate::{ClusterSet, cluster_set::Engagement};

/// What a provider wants engaged now: each cluster's engagement, or why it cannot be used.
pub type Desired = BTreeMap<String, Result<Engagement, String>>;

/// What to do to bring the engaged clusters in line with what is desired.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    /// Clusters to engage (again: an unchanged identity makes it a no-op).
    pub engage: Vec<String>,
    /// Clusters to disengage: no longer desired, or desired but unusable now.
    pub disengage: Vec<String>,
    /// Clusters to report as unusable, with the reason.
    pub report: Vec<(String, String)>,
    /// Clusters whose earlier report no longer holds.
    pub clear: Vec<String>,
}

/// The plan from the clusters engaged and reported so far to `desired`.
pub fn plan(
    engaged: &BTreeSet<String>,
    reported: &BTreeSet<String>,
    desired: &BTreeMap<String, Result<(), String>>,
) -> Plan {
    let mut plan = Plan::default();
    for (name, wanted) in desired {
        match wanted {
            Ok(()) => plan.engage.push(name.clone()),
            Err(reason) => {
                plan.report.push((name.clone(), reason.clone()));
                if engaged.contains(name) {
                    plan.disengage.push(name.clone());
                }
            }
        }
    }
    plan.disengage.extend(
        engaged
            .iter()
            .filter(|n| !desired.contains_key(*n))
            .cloned(),
    );
    plan.clear.extend(
        reported
            .iter()
            .filter(|n| !matches!(desired.get(*n), Some(Err(_))))
            .cloned(),
    );
    plan
}

/// The clusters one provider engaged and reported, kept in line with what it desires.
pub struct Tracker {
    set: ClusterSet,
    provider: &'static str,
    engaged: BTreeSet<String>,
    reported: BTreeSet<String>,
}

impl Tracker {
    /// Nothing engaged yet; `provider` names the provider in logs.
    pub fn new(set: ClusterSet, provider: &'static str) -> Self {
        Tracker {
            set,
            provider,
            engaged: BTreeSet::new(),
            reported: BTreeSet::new(),
        }
    }

    /// Engages, disengages and reports so that the set holds what `desired` says; every
    /// new engagement gets a health check that ends with it.
    pub fn apply(&mut self, mut desired: Desired) {
        let outline = desired
            .iter()
            .map(|(n, r)| (n.clone(), r.as_ref().map(|_| ()).map_err(Clone::clone)))
            .collect();
        let plan = plan(&self.engaged, &self.reported, &outline);
        for name in plan.disengage {
            info!(provider = self.provider, cluster = %name, "disengaging the cluster");
            self.set.disengage(&name);
            self.engaged.remove(&name);
        }
        for name in plan.clear {
            self.set.report(&name, None);
            self.reported.remove(&name);
        }
        for (name, reason) in plan.report {
            if !self.reported.contains(&name) || self.set.problems().get(&name) != Some(&reason) {
                warn!(provider = self.provider, cluster = %name, %reason, "cluster skipped");
            }
            self.set.report(&name, Some(reason));
            self.reported.insert(name);
        }
        for name in plan.engage {
            if let Some(Ok(engagement)) = desired.remove(&name) {
                self.engage(&name, engagement);
            }
        }
    }

    fn engage(&mut self, name: &str, engagement: Engagement) {
        let before = self.set.engagement(name);
        let client = engagement.client.clone();
        let token = self.set.engage(name, engagement);
        if before.is_none_or(|b| b.is_cancelled()) {
            info!(provider = self.provider, cluster = %name, "engaged the cluster");
            tokio::spawn(health::probe(
                self.set.clone(),
                name.to_owned(),
                client,
                token,
            ));
        }
        self.engaged.insert(name.to_owned());
    }

    /// Disengages every cluster engaged and clears every report (the provider stops).
    pub fn release(&mut self) {
        for name in std::mem::take(&mut self.engaged) {
            self.set.disengage(&name);
        }
        for name in std::mem::take(&mut self.reported) {
            self.set.report(&name, None);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(list: &[&str]) -> BTreeSet<String> {
        list.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn new_clusters_are_engaged_and_gone_ones_disengaged() {
        let desired = BTreeMap::from([("a".to_string(), Ok(())), ("b".to_string(), Ok(()))]);
        let plan = plan(&names(&["b", "c"]), &names(&[]), &desired);
        assert_eq!(plan.engage, vec!["a", "b"]);
        assert_eq!(plan.disengage, vec!["c"]);
        assert!(plan.report.is_empty() && plan.clear.is_empty());
    }

    #[test]
    fn an_unusable_cluster_is_reported_and_disengaged_and_the_others_kept() {
        let desired = BTreeMap::from([
            ("bad".to_string(), Err("does not parse".to_string())),
            ("good".to_string(), Ok(())),
        ]);
        let plan = plan(&names(&["bad", "good"]), &names(&[]), &desired);
        assert_eq!(plan.engage, vec!["good"]);
        assert_eq!(plan.disengage, vec!["bad"]);
        assert_eq!(
            plan.report,
            vec![("bad".to_string(), "does not parse".to_string())]
        );
    }

    #[test]
    fn a_report_is_cleared_once_the_cluster_is_fixed_or_gone() {
        let desired = BTreeMap::from([("fixed".to_string(), Ok(()))]);
        let plan = plan(&names(&[]), &names(&["fixed", "gone"]), &desired);
        assert_eq!(plan.clear, vec!["fixed", "gone"]);
        assert_eq!(plan.engage, vec!["fixed"]);
    }
}
