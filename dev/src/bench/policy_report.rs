//! The policy path's figures (`--policy`): plain objects in the host selected by one
//! PropagationPolicy, beside the `Federated<Kind>` path and the raw writes of the same run.
//! What the host served is split by resource and verb from the API server's own counters;
//! the benchmark's own requests are taken out. Only pure data and arithmetic: the phases
//! are measured in `policy_path`, rendered in `policy_table`.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    report::{Comparison, KindReport, Phase, Target, ratio},
    requests::RequestCounts,
};

/// Request verbs that write.
pub(super) const WRITE_VERBS: [&str; 5] = ["POST", "PUT", "PATCH", "APPLY", "DELETE"];

/// What `apiserver_request_total` cannot say, printed with the figures.
pub const NOT_COUNTED: [&str; 4] = [
    "the API server's counters do not name the client: host figures are every request of the window on the listed resources, the benchmark's own taken out; on delete they include the host garbage collector's (kube-controller-manager) GET and DELETE of each owned Federated object, which Flotilla does not send (an audit log showed 1 + 1 per object, docs/benchmarks.md)",
    "kube-apiserver 1.20 counts some GETs as LIST (kubernetes/kubernetes#95556): a `LIST` per object is a GET (on delete, the garbage collector's)",
    "member figures are the kind's requests only, as for the other paths: the namespace the FederatedNamespace creates in each member (one POST per member per namespace) is not in them",
    "requests on other host resources (leases, KubeFedCluster health, kube-controller-manager's own work) are background, not per object: their total is shown as `other`",
];

/// The policy path of one kind beside the other two.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PolicyPath {
    /// Native create → member objects present.
    pub create: ThreePaths,
    /// Native change → new data in every member.
    pub update: ThreePaths,
    /// Native delete → members empty.
    pub delete: ThreePaths,
    /// Writes after a forced resync of every object (the goal is 0).
    pub steady: Quiet,
    /// Writes after a hard restart of the control plane (the goal is 0).
    pub restart: Quiet,
    /// A native object created once the restart window ended: create → every member, s.
    pub probe_after_restart_s: f64,
    /// What the figures cannot tell apart ([`NOT_COUNTED`]).
    pub not_counted: Vec<String>,
}

/// One phase by the three paths: times and member requests beside each other, the policy
/// path's full figures and its host requests by resource and verb.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ThreePaths {
    /// Raw writes into the members, seconds.
    pub raw_s: f64,
    /// Through `Federated<Kind>` objects, seconds.
    pub federated_s: f64,
    /// Through plain objects and a PropagationPolicy, seconds.
    pub policy_s: f64,
    /// federated_s / raw_s.
    pub federated_ratio: f64,
    /// policy_s / raw_s.
    pub policy_ratio: f64,
    /// Member requests per member object: raw, Federated<Kind>, policy.
    pub member_requests_per_member_object: [f64; 3],
    /// Host write requests per object of the Federated<Kind> path (the benchmark's own
    /// writes excluded): what it costs beside the user's own write.
    pub federated_host_writes_per_object: f64,
    /// The policy path's phase (its `host_requests` are [`HostCost::requests`]).
    pub policy: Phase,
    /// The policy path's host requests by resource and verb.
    pub host: HostCost,
}

/// Host requests of a window on the resources of the policy path.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct HostCost {
    /// Native objects written in the phase.
    pub native_objects: usize,
    /// `resource[/subresource] VERB` → requests, the benchmark's own taken out.
    pub requests: BTreeMap<String, u64>,
    /// The same per native object.
    pub per_native_object: BTreeMap<String, f64>,
    /// All of them per native object.
    pub requests_per_native_object: f64,
    /// The writes among them (POST, PUT, PATCH, APPLY, DELETE) per native object.
    pub writes_per_native_object: f64,
    /// Requests on every other host resource in the window (background).
    pub other: u64,
}

/// Writes in a window where none are expected.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Quiet {
    /// Window length, seconds.
    pub window_s: f64,
    /// What started the window (a forced resync, a restart).
    pub cause: String,
    /// Write requests for the kind the members served.
    pub member_writes: u64,
    /// Write requests on the policy path's host resources, by `resource VERB`.
    pub host_writes: BTreeMap<String, u64>,
}

impl Quiet {
    /// Host writes, all resources together.
    pub fn host_total(&self) -> u64 {
        self.host_writes.values().sum()
    }
}

/// The benchmark's own requests of a window, taken out of the host's figures.
pub(super) type Own = BTreeMap<String, u64>;

/// The key of a request count: `resource[/subresource] VERB`.
pub(super) fn key(resource: &str, sub: &str, verb: &str) -> String {
    if sub.is_empty() {
        format!("{resource} {verb}")
    } else {
        format!("{resource}/{sub} {verb}")
    }
}

/// The host's requests between two counter readings on `resources`, less `own`, and the
/// total on every other resource. Watches and the benchmark's own Event LISTs are left out.
pub(super) fn host_cost(
    before: &RequestCounts,
    after: &RequestCounts,
    resources: &[String],
    own: &Own,
    native_objects: usize,
) -> HostCost {
    let mut requests = BTreeMap::new();
    let mut other = 0u64;
    for (k, v) in after {
        let (_, res, sub, verb) = k;
        if verb == "WATCH" || verb == "CONNECT" {
            continue;
        }
        let d = (v - before.get(k).copied().unwrap_or(0.0)).max(0.0).round() as u64;
        if d == 0 {
            continue;
        }
        if resources.contains(res) {
            *requests.entry(key(res, sub, verb)).or_insert(0) += d;
        } else {
            other += d;
        }
    }
    // The benchmark reads the Events itself (a LIST per snapshot); Flotilla sends none.
    requests.remove("events LIST");
    for (k, n) in own {
        take_own(&mut requests, k, *n);
    }
    requests.retain(|_, v| *v > 0);
    let per = |n: u64| ratio(n as f64, native_objects as f64);
    let writes: u64 = requests
        .iter()
        .filter(|(k, _)| is_write(k))
        .map(|(_, v)| v)
        .sum();
    HostCost {
        native_objects,
        per_native_object: requests.iter().map(|(k, v)| (k.clone(), per(*v))).collect(),
        requests_per_native_object: per(requests.values().sum()),
        writes_per_native_object: per(writes),
        requests,
        other,
    }
}

/// Takes `n` of the benchmark's own requests out of `requests[key]`. A kube-apiserver 1.20
/// counts some GETs as LIST (kubernetes/kubernetes#95556), so what a GET does not cover is
/// taken from the LIST of the same resource.
fn take_own(requests: &mut BTreeMap<String, u64>, key: &str, n: u64) {
    let mut left = n;
    let list = key.strip_suffix(" GET").map(|r| format!("{r} LIST"));
    for k in std::iter::once(key.to_string()).chain(list) {
        if let Some(v) = requests.get_mut(&k) {
            let taken = left.min(*v);
            *v -= taken;
            left -= taken;
        }
    }
}

/// Whether a `resource VERB` key is a write.
pub(super) fn is_write(key: &str) -> bool {
    key.rsplit(' ')
        .next()
        .is_some_and(|verb| WRITE_VERBS.contains(&verb))
}

/// Only the writes of a count.
pub(super) fn writes_of(requests: &BTreeMap<String, u64>) -> BTreeMap<String, u64> {
    requests
        .iter()
        .filter(|(k, _)| is_write(k))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

impl ThreePaths {
    /// The policy path's phase beside the comparison of the other two.
    pub(super) fn new(other: &Comparison, mut policy: Phase, host: HostCost) -> Self {
        let member_objects = policy.member_objects as f64;
        let member_total: u64 = policy.member_requests.values().sum();
        let host_total: u64 = host.requests.values().sum();
        policy.host_requests = host.requests.clone();
        policy.host_requests_per_federated_object = host.requests_per_native_object;
        policy.requests_per_member_object =
            ratio((member_total + host_total) as f64, member_objects);
        // Both paths write the same objects: as many Federated ones as native ones.
        let fed_writes: u64 = writes_of(&other.flotilla.host_requests).values().sum();
        ThreePaths {
            raw_s: other.raw.seconds,
            federated_s: other.flotilla.seconds,
            policy_s: policy.seconds,
            federated_ratio: other.time_ratio,
            policy_ratio: ratio(policy.seconds, other.raw.seconds),
            member_requests_per_member_object: [
                other.raw.member_requests_per_member_object,
                other.flotilla.member_requests_per_member_object,
                policy.member_requests_per_member_object,
            ],
            federated_host_writes_per_object: ratio(fed_writes as f64, host.native_objects as f64),
            policy,
            host,
        }
    }
}

/// Relative slack on request counts: 1 %, so a retried write among thousands does not
/// flip a verdict.
const SLACK: f64 = 1.01;
/// What the policy path may write in the host per object beyond the Federated path: the
/// Federated object the policy controller writes for the user (1), and a share of the
/// once-per-namespace FederatedNamespace and the batched policy status (≤ 0.1).
const POLICY_EXTRA_WRITES: f64 = 1.1;

/// The targets for the policy path of every kind that ran it.
pub(super) fn policy_targets(kinds: &[KindReport]) -> Vec<Target> {
    let mut out = Vec::new();
    for k in kinds {
        let Some(p) = &k.policy else { continue };
        let phases = [
            ("create", &p.create),
            ("update", &p.update),
            ("delete", &p.delete),
        ];
        let member: Vec<f64> = phases
            .iter()
            .map(|(_, t)| t.member_requests_per_member_object[2])
            .collect();
        out.push(Target {
            name: format!(
                "{} policy path: member requests per member object (create / update / delete)",
                k.kind
            ),
            goal: "<= 1.1 each".into(),
            measured: format!("{:.2} / {:.2} / {:.2}", member[0], member[1], member[2]),
            met: member.iter().all(|m| *m <= 1.1 * SLACK),
        });
        let within = phases.iter().all(|(_, t)| {
            t.host.writes_per_native_object
                <= (t.federated_host_writes_per_object + POLICY_EXTRA_WRITES) * SLACK
        });
        let show: Vec<String> = phases
            .iter()
            .map(|(_, t)| {
                format!(
                    "{:.2} (Federated {:.2})",
                    t.host.writes_per_native_object, t.federated_host_writes_per_object
                )
            })
            .collect();
        out.push(Target {
            name: format!("{} policy path: host writes per native object (create / update / delete)", k.kind),
            goal: format!("<= the Federated path's + {POLICY_EXTRA_WRITES} (its own Federated object, shares of namespace and policy status)"),
            measured: show.join(" / "),
            met: within,
        });
        let (sm, sh) = (p.steady.member_writes, p.steady.host_total());
        let (rm, rh) = (p.restart.member_writes, p.restart.host_total());
        out.push(Target {
            name: format!(
                "{} policy path: writes at steady state / after a restart (members + host)",
                k.kind
            ),
            goal: "0 / 0".into(),
            measured: format!("{} / {}", sm + sh, rm + rh),
            met: sm + sh == 0 && rm + rh == 0,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts(entries: &[(&str, &str, &str, f64)]) -> RequestCounts {
        entries
            .iter()
            .map(|(r, s, v, n)| {
                (
                    (String::new(), r.to_string(), s.to_string(), v.to_string()),
                    *n,
                )
            })
            .collect()
    }

    #[test]
    fn host_cost_takes_out_the_benchmarks_own_requests_and_splits_the_background() {
        let before = counts(&[("configmaps", "", "POST", 10.0), ("leases", "", "PUT", 5.0)]);
        let after = counts(&[
            ("configmaps", "", "POST", 14.0),
            ("federatedconfigmaps", "", "POST", 4.0),
            ("federatedconfigmaps", "status", "PATCH", 8.0),
            ("federatedconfigmaps", "", "WATCH", 3.0),
            ("events", "", "LIST", 2.0),
            ("leases", "", "PUT", 9.0),
        ]);
        let resources = ["configmaps", "federatedconfigmaps", "events"].map(String::from);
        let own: Own = [("configmaps POST".to_string(), 4)].into();
        let c = host_cost(&before, &after, &resources, &own, 4);
        assert_eq!(
            c.requests,
            [
                ("federatedconfigmaps POST".to_string(), 4),
                ("federatedconfigmaps/status PATCH".to_string(), 8)
            ]
            .into()
        );
        assert_eq!(c.other, 4);
        assert_eq!(c.requests_per_native_object, 3.0);
        assert_eq!(c.writes_per_native_object, 3.0);
        assert_eq!(
            c.per_native_object.get("federatedconfigmaps POST"),
            Some(&1.0)
        );
    }

    #[test]
    fn own_gets_the_server_counted_as_lists_are_taken_out_too() {
        let mut r: BTreeMap<String, u64> = [
            ("propagationpolicies GET".to_string(), 2),
            ("propagationpolicies LIST".to_string(), 5),
        ]
        .into();
        take_own(&mut r, "propagationpolicies GET", 6);
        assert_eq!(r.get("propagationpolicies GET"), Some(&0));
        assert_eq!(r.get("propagationpolicies LIST"), Some(&1));
        take_own(&mut r, "federatedconfigmaps LIST", 3);
        assert_eq!(r.len(), 2, "a key that is not there is left alone");
    }

    #[test]
    fn only_mutating_verbs_count_as_writes() {
        assert!(is_write("federatedconfigmaps/status PATCH"));
        assert!(is_write("federatedconfigmaps APPLY"));
        assert!(is_write("configmaps DELETE"));
        assert!(!is_write("configmaps GET"));
        assert!(!is_write("federatednamespaces LIST"));
        let all: BTreeMap<String, u64> =
            [("a GET".to_string(), 2), ("a PUT".to_string(), 3)].into();
        assert_eq!(writes_of(&all), [("a PUT".to_string(), 3)].into());
    }

    fn phase(seconds: f64, member_objects: usize, member: u64, host: &[(&str, u64)]) -> Phase {
        Phase {
            seconds,
            member_objects,
            member_requests: [("POST".to_string(), member)].into(),
            member_requests_per_member_object: ratio(member as f64, member_objects as f64),
            host_requests: host.iter().map(|(k, v)| (k.to_string(), *v)).collect(),
            ..Phase::default()
        }
    }

    fn three(policy_writes: u64, member: u64) -> ThreePaths {
        // 10 objects x 2 members; the Federated path wrote 2 per object in the host.
        let fed = phase(
            2.0,
            20,
            20,
            &[
                ("federatedconfigmaps PATCH", 20),
                ("federatedconfigmaps LIST", 3),
            ],
        );
        let raw = phase(1.0, 20, 20, &[]);
        let host = HostCost {
            native_objects: 10,
            requests: [("federatedconfigmaps POST".to_string(), policy_writes)].into(),
            writes_per_native_object: policy_writes as f64 / 10.0,
            requests_per_native_object: policy_writes as f64 / 10.0,
            ..HostCost::default()
        };
        ThreePaths::new(
            &Comparison::new(fed, raw),
            phase(4.0, 20, member, &[]),
            host,
        )
    }

    #[test]
    fn three_paths_put_the_policy_phase_beside_raw_and_federated() {
        let t = three(30, 22);
        assert_eq!((t.raw_s, t.federated_s, t.policy_s), (1.0, 2.0, 4.0));
        assert_eq!((t.federated_ratio, t.policy_ratio), (2.0, 4.0));
        assert_eq!(t.member_requests_per_member_object, [1.0, 1.0, 1.1]);
        assert_eq!(t.federated_host_writes_per_object, 2.0);
        assert_eq!(t.policy.host_requests_per_federated_object, 3.0);
        // (22 member + 30 host) / 20 member objects.
        assert_eq!(t.policy.requests_per_member_object, 2.6);
    }

    fn kind(t: ThreePaths, steady_host: u64) -> KindReport {
        let c = Comparison::new(Phase::default(), Phase::default());
        KindReport {
            kind: "ConfigMap".into(),
            create: c.clone(),
            update: c.clone(),
            delete: c,
            steady: Default::default(),
            restart: Default::default(),
            sequential: None,
            host_input: Phase::default(),
            agent_restart: None,
            policy: Some(PolicyPath {
                create: t.clone(),
                update: t.clone(),
                delete: t,
                steady: Quiet {
                    host_writes: [("federatedconfigmaps PATCH".to_string(), steady_host)].into(),
                    ..Quiet::default()
                },
                ..PolicyPath::default()
            }),
        }
    }

    #[test]
    fn policy_targets_judge_member_requests_host_writes_and_quiet_windows() {
        let met = policy_targets(&[kind(three(30, 22), 0)]);
        assert_eq!(met.len(), 3);
        assert!(met.iter().all(|t| t.met), "{met:?}");
        // One member request too many per ten objects, one host write beyond the floor,
        // one steady-state write: each bar fails on its own.
        let failed = policy_targets(&[kind(three(32, 24), 1)]);
        assert_eq!(failed.iter().filter(|t| !t.met).count(), 3, "{failed:?}");
        let without = KindReport {
            policy: None,
            ..kind(three(30, 22), 0)
        };
        assert!(policy_targets(&[without]).is_empty());
    }
}
