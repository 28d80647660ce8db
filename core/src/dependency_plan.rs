//! Which (dependency, cluster) pairs a workload must hold and let go of, and the
//! `status.dependencies` that reports them (its entries are `flotilla_api::dependency_plan`'s). Pure: the sync controller looks the
//! dependencies up in the host, carries the pairs out and writes the report.
//!
//! The previous report is the memory: a cluster listed for a dependency holds (or may
//! still hold) the workload's copy, so a cluster the workload left, or a dependency its
//! template no longer names, is let go of there.

use std::collections::{BTreeMap, BTreeSet};

use crate::dependencies::{Dependency, DependencyKind, Holder};
use flotilla_api::dependency_plan::{DependencyReason, DependencyState, DependencyStatus};

/// What the host says of a dependency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Lookup {
    /// It exists and is not federated explicitly: copies follow the workload.
    Found,
    /// It does not exist in the host namespace.
    NotFound,
    /// A Federated&lt;Kind&gt; of that name exists.
    Explicit,
}

/// A (dependency, cluster) pair.
pub type Pair = (Dependency, String);

/// The pairs to write and to let go of.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Plan {
    /// Copies to create or bring up to date.
    pub ensure: Vec<Pair>,
    /// Copies to let go of (deleted when no other workload keeps them).
    pub release: Vec<Pair>,
}

/// The clusters each dependency was reported on.
pub fn previous_pairs(previous: &[DependencyStatus]) -> BTreeSet<Pair> {
    let mut out = BTreeSet::new();
    for p in previous {
        let Some(kind) = DependencyKind::parse(&p.kind) else {
            continue;
        };
        for c in &p.clusters {
            out.insert((
                Dependency {
                    kind,
                    name: p.name.clone(),
                },
                c.clone(),
            ));
        }
    }
    out
}

/// Found dependencies go to every cluster in `clusters` (where the workload lands);
/// copies of a dependency missing in the host are kept where the workload still is;
/// explicitly federated ones are never touched; every other previous copy is let go of.
pub fn plan(
    previous: &[DependencyStatus],
    wanted: &BTreeMap<Dependency, Lookup>,
    clusters: &BTreeSet<String>,
) -> Plan {
    let mut plan = Plan::default();
    for (dep, lookup) in wanted {
        if *lookup == Lookup::Found {
            plan.ensure
                .extend(clusters.iter().map(|c| (dep.clone(), c.clone())));
        }
    }
    for (dep, cluster) in previous_pairs(previous) {
        let keep = match wanted.get(&dep) {
            Some(Lookup::Explicit) => true,
            Some(_) => clusters.contains(&cluster),
            None => false,
        };
        if !keep {
            plan.release.push((dep, cluster));
        }
    }
    plan
}

/// How carrying out one pair went.
#[derive(Clone, Debug, PartialEq)]
pub enum PairOutcome {
    /// The cluster holds the workload's current copy.
    Placed,
    /// The member object of that name is not Flotilla's copy.
    Refused(Holder),
    /// Writing failed (the message).
    Failed(String),
    /// The workload's copy is gone (or was never there).
    Released,
    /// Removing failed (the message).
    ReleaseFailed(String),
}

/// The new `status.dependencies`: one entry per dependency the template references, and
/// one per dependency no longer referenced whose copies could not all be removed yet.
pub fn report(
    namespace: &str,
    previous: &[DependencyStatus],
    wanted: &BTreeMap<Dependency, Lookup>,
    clusters: &BTreeSet<String>,
    outcomes: &BTreeMap<Pair, PairOutcome>,
) -> Vec<DependencyStatus> {
    let before = previous_pairs(previous);
    let mut out = Vec::new();
    for (dep, lookup) in wanted {
        let entry = match lookup {
            Lookup::Explicit => because(
                entry(dep, DependencyState::Explicit, vec![]),
                DependencyReason::FederatedExplicitly,
                format!(
                    "Federated{} {} propagates it; its placement decides",
                    dep.kind.as_str(),
                    dep.name
                ),
            ),
            Lookup::NotFound => {
                let release_failed = |d: &Dependency, c: &String| {
                    let pair = (d.clone(), c.clone());
                    matches!(outcomes.get(&pair), Some(PairOutcome::ReleaseFailed(_)))
                };
                let kept = (before.iter())
                    .filter(|(d, c)| d == dep && (clusters.contains(c) || release_failed(d, c)))
                    .map(|(_, c)| c.clone())
                    .collect();
                because(
                    entry(dep, DependencyState::NotFound, kept),
                    DependencyReason::DependencyNotFound,
                    format!(
                        "{} {} does not exist in namespace {namespace}",
                        dep.kind.as_str(),
                        dep.name
                    ),
                )
            }
            Lookup::Found => found_entry(dep, &before, outcomes),
        };
        out.push(entry);
    }
    out.extend(removing_entries(wanted, outcomes));
    out
}

fn found_entry(
    dep: &Dependency,
    before: &BTreeSet<Pair>,
    outcomes: &BTreeMap<Pair, PairOutcome>,
) -> DependencyStatus {
    let mut held = Vec::new();
    let mut problems: Vec<(DependencyReason, String)> = Vec::new();
    for ((d, cluster), outcome) in outcomes {
        if d != dep {
            continue;
        }
        match outcome {
            PairOutcome::Placed => held.push(cluster.clone()),
            PairOutcome::Failed(m) => {
                if before.contains(&(d.clone(), cluster.clone())) {
                    held.push(cluster.clone());
                }
                problems.push((DependencyReason::WriteFailed, format!("{cluster}: {m}")));
            }
            PairOutcome::Refused(h) => {
                let (reason, who) = match h {
                    Holder::Federated => (
                        DependencyReason::FederatedExplicitly,
                        "a federated object manages",
                    ),
                    _ => (
                        DependencyReason::ExistsInMember,
                        "an object not made by Flotilla holds",
                    ),
                };
                problems.push((reason, format!("{cluster}: {who} this name; left alone")));
            }
            PairOutcome::ReleaseFailed(m) => {
                held.push(cluster.clone());
                problems.push((DependencyReason::RemovalFailed, format!("{cluster}: {m}")));
            }
            PairOutcome::Released => {}
        }
    }
    match problems.first() {
        None => entry(dep, DependencyState::Propagated, held),
        Some((reason, _)) => {
            let message = problems.iter().map(|(_, m)| m.as_str()).collect::<Vec<_>>();
            because(
                entry(dep, DependencyState::Failed, held),
                *reason,
                message.join("; "),
            )
        }
    }
}

/// Dependencies let go of whose removal failed somewhere: still listed on those clusters,
/// so the next round tries again.
fn removing_entries(
    wanted: &BTreeMap<Dependency, Lookup>,
    outcomes: &BTreeMap<Pair, PairOutcome>,
) -> Vec<DependencyStatus> {
    let mut failed: BTreeMap<&Dependency, Vec<(&String, &String)>> = BTreeMap::new();
    for ((dep, cluster), outcome) in outcomes {
        if let PairOutcome::ReleaseFailed(m) = outcome
            && !wanted.contains_key(dep)
        {
            failed.entry(dep).or_default().push((cluster, m));
        }
    }
    failed
        .into_iter()
        .map(|(dep, list)| {
            let clusters = list.iter().map(|(c, _)| (*c).clone()).collect();
            let message: Vec<String> = list.iter().map(|(c, m)| format!("{c}: {m}")).collect();
            because(
                entry(dep, DependencyState::Removing, clusters),
                DependencyReason::RemovalFailed,
                message.join("; "),
            )
        })
        .collect()
}

/// Entries that became a problem since `previous` (a reason they did not have): each
/// warrants one Warning Event. An explicitly federated dependency is no problem.
pub fn new_problems<'a>(
    previous: &[DependencyStatus],
    next: &'a [DependencyStatus],
) -> Vec<&'a DependencyStatus> {
    let explicit = DependencyState::Explicit.as_str();
    (next.iter())
        .filter(|n| !n.reason.is_empty() && n.state != explicit)
        .filter(|n| {
            !(previous.iter()).any(|p| p.kind == n.kind && p.name == n.name && p.reason == n.reason)
        })
        .collect()
}

fn entry(dep: &Dependency, state: DependencyState, clusters: Vec<String>) -> DependencyStatus {
    DependencyStatus {
        kind: dep.kind.as_str().into(),
        name: dep.name.clone(),
        state: state.as_str().into(),
        clusters,
        reason: String::new(),
        message: String::new(),
    }
}

/// An entry with the reason it is not simply propagated.
fn because(
    mut status: DependencyStatus,
    reason: DependencyReason,
    message: String,
) -> DependencyStatus {
    status.reason = reason.as_str().into();
    status.message = message;
    status
}

#[cfg(test)]
#[path = "dependency_plan_tests.rs"]
mod tests;
