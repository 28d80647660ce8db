//! Pull mode's figures (`--pull`): every request the host and the members served in a
//! phase, split into what the per-member-object figures count (the host's Works, the
//! members' objects of the kind and their AppliedWork records) and what they leave out
//! (listed beside them, never dropped); and what the agents cost. Only data and
//! arithmetic: the counters are read in `phases`, the agents run in `pull`, the lines are
//! rendered in `pull_table`.

use std::collections::BTreeMap;

use serde::{Deserialize, Deserializer, Serialize};

use super::report::{KindReport, Target, ratio};

/// Host resources of pull mode's inventory: one Work per member object today (every
/// subresource, `works/status` included).
pub(super) const HOST_WORK_RESOURCES: &[&str] = &["works"];
/// Member resources of the agents' records of what they applied.
pub(super) const MEMBER_RECORD_RESOURCES: &[&str] = &["appliedworks"];

/// Every request of one pull-mode phase, and its figures per member object.
///
/// The API servers' counters (`apiserver_request_total`) do not name the client: every
/// map holds every request of the window on its resources, whoever sent it. Watches
/// (`WATCH`, long-running) and `CONNECT` are not requests here; `/metrics` reads are the
/// benchmark's own and left out.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct PullRequests {
    /// Host requests for Works, by `resource[/subresource] verb` (`works POST`,
    /// `works/status PATCH`).
    pub host_works: BTreeMap<String, u64>,
    /// Member requests for the objects of the kind, summed over the members.
    pub member_objects: BTreeMap<String, u64>,
    /// Member requests for AppliedWork records, summed over the members
    /// (`appliedworks POST`, `appliedworks/status PATCH`).
    pub member_records: BTreeMap<String, u64>,
    /// Host requests the per-object figures leave out: the federated type and Events (in
    /// the phase's `host_requests`), the agents' Leases and everything else.
    pub host_other: BTreeMap<String, u64>,
    /// Member requests the per-object figures leave out (the API servers' own, the
    /// agents' leases or role checks, other kinds).
    pub member_other: BTreeMap<String, u64>,
    /// Host requests for Works per member object.
    #[serde(deserialize_with = "nan_if_null")]
    pub host_work_requests_per_member_object: f64,
    /// Member requests per member object, AppliedWork records included.
    #[serde(deserialize_with = "nan_if_null")]
    pub member_requests_per_member_object: f64,
    /// The AppliedWork records' share of it.
    #[serde(deserialize_with = "nan_if_null")]
    pub record_requests_per_member_object: f64,
}

/// A ratio without a denominator is NaN, which JSON writes as `null`: read back as NaN.
fn nan_if_null<'de, D: Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

/// The resource of a `resource[/subresource] verb` key (empty for a non-resource path).
fn resource_of(key: &str) -> &str {
    let what = key.split(' ').next().unwrap_or_default();
    if what.starts_with('/') {
        return "";
    }
    what.split('/').next().unwrap_or_default()
}

/// Splits `all` into the entries whose resource is one of `resources` and the rest.
fn split(
    all: &BTreeMap<String, u64>,
    resources: &[&str],
) -> (BTreeMap<String, u64>, BTreeMap<String, u64>) {
    all.iter()
        .map(|(k, v)| (k.clone(), *v))
        .partition(|(k, _)| resources.contains(&resource_of(k)))
}

/// Requests in `m` that write (their key's verb is not a read).
fn writes(m: &BTreeMap<String, u64>) -> u64 {
    m.iter()
        .filter(|(k, _)| {
            let verb = k.rsplit(' ').next().unwrap_or_default();
            !matches!(verb, "GET" | "LIST" | "HEAD")
        })
        .map(|(_, v)| v)
        .sum()
}

fn total(m: &BTreeMap<String, u64>) -> u64 {
    m.values().sum()
}

impl PullRequests {
    /// The split of every host and member request of a phase (`resource[/sub] verb` →
    /// count) that wrote `member_objects` objects of the resource `target`.
    pub(super) fn new(
        host_all: &BTreeMap<String, u64>,
        member_all: &BTreeMap<String, u64>,
        target: &str,
        member_objects: usize,
    ) -> Self {
        let (host_works, host_other) = split(host_all, HOST_WORK_RESOURCES);
        let (member_objects_map, rest) = split(member_all, &[target]);
        let (member_records, member_other) = split(&rest, MEMBER_RECORD_RESOURCES);
        let n = member_objects as f64;
        let records = total(&member_records) as f64;
        PullRequests {
            host_work_requests_per_member_object: ratio(total(&host_works) as f64, n),
            member_requests_per_member_object: ratio(
                total(&member_objects_map) as f64 + records,
                n,
            ),
            record_requests_per_member_object: ratio(records, n),
            host_works,
            member_objects: member_objects_map,
            member_records,
            host_other,
            member_other,
        }
    }

    /// Writes (every verb but GET, LIST and HEAD) to the host's Works, to the members'
    /// objects of the kind and to their AppliedWork records: the steady state's and a
    /// restart's goal is 0 of each.
    pub fn writes(&self) -> (u64, u64, u64) {
        (
            writes(&self.host_works),
            writes(&self.member_objects),
            writes(&self.member_records),
        )
    }

    /// Requests the per-object figures leave out, host and members together.
    pub fn left_out(&self) -> u64 {
        total(&self.host_other) + total(&self.member_other)
    }
}

/// What the pull-mode agents cost the benchmark's process, where they run.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AgentCost {
    /// Where the agents ran, and what that hides.
    pub placement: String,
    /// Agents (one per member).
    pub agents: usize,
    /// Worker threads of the runtime they share.
    pub worker_threads: usize,
    /// The last agent started → every agent ready (host reached, inventory synced),
    /// seconds.
    #[serde(default)]
    pub ready_s: f64,
    /// This process's RSS growth from before the agents' runtime to every agent ready (no
    /// Work yet; the benchmark's own member client per member is in it), MiB.
    pub start_rss_mib: f64,
    /// start_rss_mib / agents: RSS per cluster at idle, MiB.
    pub rss_per_cluster_mib: f64,
    /// The agents' CPU in the fleet's idle window, ms per cluster per minute.
    pub idle_cpu_ms_per_cluster_per_min: f64,
    /// The agents' CPU over the whole Flotilla part, seconds.
    pub cpu_s: f64,
}

/// Every agent stopped at once and started again with the kind's objects applied
/// (`--pull`): what the new agents write (the goal is nothing).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct AgentRestart {
    /// Agents restarted.
    pub agents: usize,
    /// Federated objects applied when they were.
    pub objects: usize,
    /// Stop → every new agent ready, seconds.
    pub ready_s: f64,
    /// Window from just before the stop to the steady-state window after ready, seconds.
    pub window_s: f64,
    /// The agents' CPU in the window, seconds.
    pub agent_cpu_s: f64,
    /// Every request of the window.
    pub requests: PullRequests,
}

impl AgentCost {
    /// The agents' cost with its per-cluster share.
    pub(super) fn new(placement: String, agents: usize, threads: usize, rss_mib: f64) -> Self {
        AgentCost {
            placement,
            agents,
            worker_threads: threads,
            start_rss_mib: rss_mib,
            rss_per_cluster_mib: ratio(rss_mib, agents as f64),
            ..AgentCost::default()
        }
    }
}

/// Issue 54's bars for pull mode, per phase (create / update / delete).
const WORKS_PER_MEMBER_OBJECT: f64 = 0.2;
const MEMBER_REQUESTS_PER_MEMBER_OBJECT: f64 = 1.1;

/// Pull mode's targets from the first kind (ConfigMaps), when the run was in pull mode:
/// host requests for Works and member requests (AppliedWork records included) per member
/// object, and no write of a Work, member object or record at steady state.
pub(super) fn pull_targets(kinds: &[KindReport]) -> Vec<Target> {
    let Some(cm) = kinds.first() else {
        return Vec::new();
    };
    let phases = [&cm.create, &cm.update, &cm.delete];
    let Some(pulls) = phases
        .iter()
        .map(|c| c.flotilla.pull.as_ref())
        .collect::<Option<Vec<_>>>()
    else {
        return Vec::new();
    };
    let per_phase = |f: fn(&PullRequests) -> f64, goal: f64, name: &str| {
        let v: Vec<f64> = pulls.iter().map(|p| f(p)).collect();
        Target {
            name: format!("pull: {name} (create / update / delete)"),
            goal: format!("<= {goal} each"),
            measured: format!("{:.2} / {:.2} / {:.2}", v[0], v[1], v[2]),
            met: v.iter().all(|x| *x <= goal),
        }
    };
    let mut out = vec![
        per_phase(
            |p| p.host_work_requests_per_member_object,
            WORKS_PER_MEMBER_OBJECT,
            "host requests for Works per member object",
        ),
        per_phase(
            |p| p.member_requests_per_member_object,
            MEMBER_REQUESTS_PER_MEMBER_OBJECT,
            "member requests per member object, AppliedWork records included",
        ),
    ];
    if let Some(r) = &cm.agent_restart {
        let (w, o, rec) = r.requests.writes();
        out.push(Target {
            name: "pull: writes after a restart of every agent (Works / member objects / AppliedWorks)".into(),
            goal: "0 / 0 / 0".into(),
            measured: format!("{w} / {o} / {rec}"),
            met: (w, o, rec) == (0, 0, 0),
        });
    }
    if let Some(steady) = &cm.steady.pull {
        let (w, o, r) = steady.writes();
        out.push(Target {
            name: "pull: steady-state writes (Works / member objects / AppliedWorks)".into(),
            goal: "0 / 0 / 0".into(),
            measured: format!("{w} / {o} / {r}"),
            met: (w, o, r) == (0, 0, 0),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(entries: &[(&str, u64)]) -> BTreeMap<String, u64> {
        entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    #[test]
    fn works_and_applied_work_records_are_counted_per_member_object() {
        let host = counts(&[
            ("works PATCH", 400),
            ("works/status PATCH", 400),
            ("federatedconfigmaps/status PATCH", 200),
            ("leases PATCH", 6),
        ]);
        let members = counts(&[
            ("configmaps PATCH", 400),
            ("appliedworks POST", 400),
            ("appliedworks/status PATCH", 400),
            ("endpoints GET", 4),
            ("/healthz GET", 2),
        ]);
        let p = PullRequests::new(&host, &members, "configmaps", 400);
        assert_eq!(
            p.host_works,
            counts(&[("works PATCH", 400), ("works/status PATCH", 400)])
        );
        assert_eq!(p.host_work_requests_per_member_object, 2.0);
        assert_eq!(p.member_objects, counts(&[("configmaps PATCH", 400)]));
        assert_eq!(p.member_requests_per_member_object, 3.0);
        assert_eq!(p.record_requests_per_member_object, 2.0);
        assert_eq!(
            p.host_other,
            counts(&[
                ("federatedconfigmaps/status PATCH", 200),
                ("leases PATCH", 6)
            ])
        );
        assert_eq!(
            p.member_other,
            counts(&[("endpoints GET", 4), ("/healthz GET", 2)])
        );
        assert_eq!(p.left_out(), 212);
    }

    #[test]
    fn every_request_lands_in_exactly_one_map() {
        let host = counts(&[("works DELETE", 7), ("events POST", 1), ("/livez GET", 3)]);
        let members = counts(&[
            ("configmaps DELETE", 7),
            ("configmaps/status PATCH", 1),
            ("appliedworks DELETE", 7),
            ("secrets GET", 2),
        ]);
        let p = PullRequests::new(&host, &members, "configmaps", 7);
        let sum = |m: &BTreeMap<String, u64>| m.values().sum::<u64>();
        assert_eq!(sum(&p.host_works) + sum(&p.host_other), sum(&host));
        assert_eq!(
            sum(&p.member_objects) + sum(&p.member_records) + sum(&p.member_other),
            sum(&members)
        );
        // A subresource of the kind is the kind's.
        assert_eq!(p.member_objects.get("configmaps/status PATCH"), Some(&1));
        // A non-resource path is never taken for a resource.
        assert_eq!(p.host_other.get("/livez GET"), Some(&3));
    }

    #[test]
    fn a_window_without_member_objects_has_no_ratio_but_counts_its_writes() {
        let p = PullRequests::new(&BTreeMap::new(), &BTreeMap::new(), "configmaps", 0);
        assert!(p.host_work_requests_per_member_object.is_nan());
        assert_eq!((p.left_out(), p.writes()), (0, (0, 0, 0)));
        let host = counts(&[("works LIST", 4), ("works/status PATCH", 2)]);
        let members = counts(&[
            ("configmaps GET", 3),
            ("configmaps PATCH", 1),
            ("appliedworks DELETE", 5),
            ("appliedworks LIST", 4),
        ]);
        let p = PullRequests::new(&host, &members, "configmaps", 0);
        assert_eq!(p.writes(), (2, 1, 5));
        let json = serde_json::to_string(&p).expect("serializes");
        let read: PullRequests = serde_json::from_str(&json).expect("NaN comes back");
        assert!(read.member_requests_per_member_object.is_nan());
        assert_eq!(read.member_records, p.member_records);
    }

    #[test]
    fn pull_targets_hold_each_phase_to_the_issues_bars() {
        use crate::bench::{Comparison, Phase};
        let phase = |works: u64, records: u64| Phase {
            pull: Some(PullRequests::new(
                &counts(&[("works APPLY", works)]),
                &counts(&[("configmaps APPLY", 10), ("appliedworks POST", records)]),
                "configmaps",
                10,
            )),
            ..Phase::default()
        };
        let cmp = |p: Phase| Comparison::new(p, Phase::default());
        let kind = KindReport {
            kind: "ConfigMap".into(),
            create: cmp(phase(2, 1)),
            update: cmp(phase(0, 0)),
            delete: cmp(phase(20, 10)),
            steady: crate::bench::Steady {
                pull: Some(PullRequests::new(
                    &counts(&[("works LIST", 1)]),
                    &BTreeMap::new(),
                    "configmaps",
                    0,
                )),
                ..Default::default()
            },
            restart: Default::default(),
            sequential: None,
            host_input: Phase::default(),
            policy: None,
            agent_restart: None,
        };
        let t = pull_targets(std::slice::from_ref(&kind));
        assert_eq!(t.len(), 3);
        assert_eq!(t[0].measured, "0.20 / 0.00 / 2.00");
        assert!(
            !t[0].met,
            "the delete's 2 Work requests per object miss 0.2"
        );
        assert_eq!(t[1].measured, "1.10 / 1.00 / 2.00");
        assert!(!t[1].met);
        assert_eq!((t[2].measured.as_str(), t[2].met), ("0 / 0 / 0", true));
        let push = KindReport {
            create: cmp(Phase::default()),
            ..kind
        };
        assert!(
            pull_targets(&[push]).is_empty(),
            "a push run has no pull targets"
        );
    }

    #[test]
    fn agent_memory_is_shared_out_per_cluster() {
        let a = AgentCost::new("in-process".into(), 4, 2, 10.0);
        assert_eq!(a.rss_per_cluster_mib, 2.5);
        assert!(
            AgentCost::new(String::new(), 0, 2, 1.0)
                .rss_per_cluster_mib
                .is_nan()
        );
    }
}
