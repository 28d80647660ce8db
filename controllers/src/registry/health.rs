//! Health decisions, without I/O: what one probe means, when a run of probes changes the
//! published state (thresholds), which conditions describe a state, and whether a new
//! status differs from the written one enough to be worth a write.

use flotilla_api::core::{condition, reason};
use flotilla_api::{ClusterCondition, KubeFedClusterStatus};

use crate::metrics::ProbeResult;
use flotilla_core::credential::{self, RenewalState};
use k8s_openapi::jiff::Timestamp;

/// Longest excerpt of a `/healthz` body or error kept in a condition message.
const MAX_DETAIL: usize = 256;

/// What is known about a cluster's health: one probe's outcome, or the published state.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Health {
    /// `/healthz` answered `ok`.
    Ready,
    /// The member answered, but not `ok`.
    NotReady {
        /// HTTP status of the answer.
        status: u16,
        /// The start of the answer's body.
        body: String,
    },
    /// The member rejected the credentials (HTTP 401 or 403).
    Unauthorized {
        /// 401 or 403.
        status: u16,
        /// `namespace/name` of the token Secret.
        secret: String,
    },
    /// The request failed or timed out.
    Offline {
        /// Why, as the error chain.
        error: String,
    },
    /// No client could be built from the KubeFedCluster and its Secret.
    Malformed {
        /// The exact problem.
        problem: String,
    },
    /// The member refused or could not be asked, and the rotating token the control plane
    /// holds has expired (every renewal before its expiry failed).
    CredentialExpired {
        /// The `CredentialRenewed` condition's message.
        message: String,
    },
}

impl Health {
    /// Whether this state counts as Ready.
    pub fn is_ready(&self) -> bool {
        matches!(self, Health::Ready)
    }

    /// Reason of the Ready condition for this state.
    pub fn reason(&self) -> &'static str {
        match self {
            Health::Ready => reason::CLUSTER_READY,
            Health::NotReady { .. } => reason::CLUSTER_NOT_READY,
            Health::Unauthorized { .. } => reason::CLUSTER_UNAUTHORIZED,
            Health::Offline { .. } => reason::CLUSTER_NOT_REACHABLE,
            Health::Malformed { .. } => reason::CLUSTER_CONFIG_MALFORMED,
            Health::CredentialExpired { .. } => reason::CLUSTER_CREDENTIAL_EXPIRED,
        }
    }

    /// The bounded metric label of a probe outcome; `None` for a malformed configuration,
    /// which is not a probe.
    pub fn probe_result(&self) -> Option<ProbeResult> {
        match self {
            Health::Ready => Some(ProbeResult::Ready),
            Health::NotReady { .. } => Some(ProbeResult::NotReady),
            Health::Unauthorized { .. } | Health::CredentialExpired { .. } => {
                Some(ProbeResult::Unauthorized)
            }
            Health::Offline { .. } => Some(ProbeResult::Offline),
            Health::Malformed { .. } => None,
        }
    }

    /// The Ready condition's message for this state.
    pub fn message(&self) -> String {
        match self {
            Health::Ready => "/healthz responded with ok".into(),
            Health::NotReady { status, body } => {
                format!("/healthz responded without ok (HTTP {status}): {body}")
            }
            Health::Unauthorized { status, secret } => format!(
                "the cluster rejected the credentials (HTTP {status}); check the bearer token \
                 in key `token` of Secret {secret} and the permissions of its service account \
                 (get on /healthz and /version)"
            ),
            Health::Offline { error } => format!("cluster is not reachable: {error}"),
            Health::Malformed { problem } => problem.clone(),
            Health::CredentialExpired { message } => format!(
                "{message}; renew it with `flotilla join --rotate-credentials` (docs/operations.md)"
            ),
        }
    }
}

/// The verdict once the rotating token is past its expiry: any unready outcome is the
/// expired credential (the member refuses it, or cannot even be asked); a Ready probe
/// means the member still took it (clock skew) and stands.
pub fn expired_credential(
    outcome: Health,
    credential: Option<&RenewalState>,
    now: Timestamp,
) -> Health {
    match credential {
        Some(state) if !outcome.is_ready() && now >= state.expires_at => {
            Health::CredentialExpired {
                message: credential::condition(state, now).2,
            }
        }
        _ => outcome,
    }
}

/// The `CredentialRenewed` condition of a cluster whose token is rotated.
pub fn credential_condition(state: &RenewalState, now: Timestamp) -> Cond {
    let (status, reason, message) = credential::condition(state, now);
    (credential::CONDITION, status, reason.as_str(), message)
}

/// Cuts a probe detail to a bounded, single-line excerpt.
pub fn excerpt(text: &str) -> String {
    let one_line: String = text
        .trim()
        .chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect();
    if one_line.chars().count() <= MAX_DETAIL {
        one_line
    } else {
        let cut: String = one_line.chars().take(MAX_DETAIL).collect();
        format!("{cut}…")
    }
}

/// How many consecutive probes it takes to change the published readiness.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    /// Consecutive unready probes before a Ready cluster turns unready.
    pub failure: u32,
    /// Consecutive Ready probes before an unready cluster turns Ready.
    pub success: u32,
}

/// Turns a run of probe outcomes into the published state.
///
/// The first outcome (and the first after a malformed configuration) is published at once;
/// afterwards readiness flips only after `failure` (or `success`) consecutive outcomes of
/// the other readiness. While readiness stays the same, the details (say Offline →
/// NotReady, or a new error text) follow the latest outcome immediately. A malformed
/// configuration is a fact about the spec, not a flaky probe, so it is published at once.
#[derive(Clone, Debug, Default)]
pub struct HealthTracker {
    published: Option<Health>,
    run: u32,
}

impl HealthTracker {
    /// The state published so far, if any.
    pub fn published(&self) -> Option<&Health> {
        self.published.as_ref()
    }

    /// Takes one outcome and returns the state to publish now.
    pub fn observe(&mut self, outcome: Health, thresholds: Thresholds) -> Health {
        let publish = match &self.published {
            None | Some(Health::Malformed { .. }) => true,
            _ if matches!(outcome, Health::Malformed { .. }) => true,
            Some(current) if current.is_ready() == outcome.is_ready() => true,
            Some(_) => {
                self.run += 1;
                let needed = if outcome.is_ready() {
                    thresholds.success
                } else {
                    thresholds.failure
                };
                self.run >= needed.max(1)
            }
        };
        match &self.published {
            Some(current) if !publish => current.clone(),
            _ => {
                self.run = 0;
                self.published = Some(outcome.clone());
                outcome
            }
        }
    }
}

/// One condition without its times: (type, status, reason, message).
pub type Cond = (&'static str, &'static str, &'static str, String);

/// The conditions describing a state, Ready first.
///
/// Ready is always present (`kubectl get kfc` shows it); Offline is present whenever a probe
/// reached a verdict about reachability; ConfigMalformed only while the configuration is
/// malformed.
pub fn conditions(health: &Health) -> Vec<Cond> {
    let ready = |status| (condition::READY, status, health.reason(), health.message());
    let reachable = (
        condition::OFFLINE,
        "False",
        reason::CLUSTER_REACHABLE,
        "cluster is reachable".to_owned(),
    );
    match health {
        Health::Ready => vec![ready("True"), reachable],
        Health::NotReady { .. } | Health::Unauthorized { .. } => vec![ready("False"), reachable],
        Health::Offline { .. } => vec![
            ready("False"),
            (
                condition::OFFLINE,
                "True",
                reason::CLUSTER_NOT_REACHABLE,
                health.message(),
            ),
        ],
        Health::CredentialExpired { .. } => vec![
            ready("False"),
            (
                condition::OFFLINE,
                "True",
                reason::CLUSTER_CREDENTIAL_EXPIRED,
                health.message(),
            ),
        ],
        Health::Malformed { problem } => vec![
            ready("False"),
            (
                condition::CONFIG_MALFORMED,
                "True",
                reason::CLUSTER_CONFIG_MALFORMED,
                problem.clone(),
            ),
        ],
    }
}

/// The status to write for `health`, carrying over from `previous` what did not change:
/// a condition's `lastTransitionTime` stays while its status stays, and its `lastProbeTime`
/// stays while its status, reason and message stay — so `lastProbeTime` is the time of the
/// last probe that changed the condition (or of the last periodic refresh, see
/// [`status_changed`]). The Kubernetes version is `version`, or the previous one when the
/// member could not be asked.
pub fn next_status(
    previous: &KubeFedClusterStatus,
    health: &Health,
    version: Option<&str>,
    now: &str,
    refresh: bool,
    extra: &[Cond],
) -> KubeFedClusterStatus {
    let conditions = conditions(health)
        .into_iter()
        .chain(extra.iter().cloned())
        .map(|(type_, status, reason, message)| {
            let old = previous.condition(type_);
            let same_status = old.is_some_and(|o| o.status == status);
            let unchanged = same_status
                && old.is_some_and(|o| {
                    o.reason.as_deref() == Some(reason) && o.message.as_deref() == Some(&message)
                });
            ClusterCondition {
                type_: type_.to_owned(),
                status: status.to_owned(),
                last_probe_time: match old {
                    Some(o) if unchanged && !refresh => o.last_probe_time.clone(),
                    _ => now.to_owned(),
                },
                last_transition_time: match old {
                    Some(o) if same_status => o
                        .last_transition_time
                        .clone()
                        .or_else(|| Some(now.to_owned())),
                    _ => Some(now.to_owned()),
                },
                reason: Some(reason.to_owned()),
                message: Some(message),
            }
        })
        .collect();
    KubeFedClusterStatus {
        conditions,
        kubernetes_version: version
            .map(str::to_owned)
            .or_else(|| previous.kubernetes_version.clone()),
        zones: previous.zones.clone(),
        region: previous.region.clone(),
        // The capacity controller's: left out of the probe's merge patch, so kept.
        resources: None,
    }
}

/// Whether `next` says something `previous` does not: a condition's type, status, reason or
/// message, or the version. Probe and transition times alone never warrant a write.
pub fn status_changed(previous: &KubeFedClusterStatus, next: &KubeFedClusterStatus) -> bool {
    let essence = |s: &KubeFedClusterStatus| {
        let mut conds: Vec<(String, String, Option<String>, Option<String>)> = s
            .conditions
            .iter()
            .map(|c| {
                (
                    c.type_.clone(),
                    c.status.clone(),
                    c.reason.clone(),
                    c.message.clone(),
                )
            })
            .collect();
        conds.sort();
        (conds, s.kubernetes_version.clone())
    };
    essence(previous) != essence(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    const T3: Thresholds = Thresholds {
        failure: 3,
        success: 2,
    };

    fn offline() -> Health {
        Health::Offline {
            error: "connection refused".into(),
        }
    }

    #[test]
    fn the_first_probe_is_published_at_once() {
        let mut t = HealthTracker::default();
        assert_eq!(t.observe(offline(), T3), offline());
    }

    #[test]
    fn a_ready_cluster_turns_unready_only_after_the_failure_threshold() {
        let mut t = HealthTracker::default();
        t.observe(Health::Ready, T3);
        assert_eq!(t.observe(offline(), T3), Health::Ready);
        assert_eq!(t.observe(offline(), T3), Health::Ready);
        assert_eq!(t.observe(offline(), T3), offline());
    }

    #[test]
    fn a_success_in_between_restarts_the_failure_count() {
        let mut t = HealthTracker::default();
        t.observe(Health::Ready, T3);
        t.observe(offline(), T3);
        t.observe(offline(), T3);
        t.observe(Health::Ready, T3);
        t.observe(offline(), T3);
        assert_eq!(t.observe(offline(), T3), Health::Ready);
    }

    #[test]
    fn an_unready_cluster_turns_ready_after_the_success_threshold() {
        let mut t = HealthTracker::default();
        t.observe(offline(), T3);
        assert_eq!(t.observe(Health::Ready, T3), offline());
        assert_eq!(t.observe(Health::Ready, T3), Health::Ready);
    }

    #[test]
    fn details_of_an_unready_state_follow_the_latest_probe() {
        let mut t = HealthTracker::default();
        t.observe(offline(), T3);
        let not_ready = Health::NotReady {
            status: 500,
            body: "etcd failed".into(),
        };
        assert_eq!(t.observe(not_ready.clone(), T3), not_ready);
    }

    #[test]
    fn a_malformed_configuration_is_published_at_once_and_its_fix_too() {
        let mut t = HealthTracker::default();
        t.observe(Health::Ready, T3);
        let malformed = Health::Malformed {
            problem: "Secret x does not exist".into(),
        };
        assert_eq!(t.observe(malformed.clone(), T3), malformed);
        assert_eq!(t.observe(Health::Ready, T3), Health::Ready);
    }

    #[test]
    fn offline_sets_offline_true_and_ready_false() {
        let conds = conditions(&offline());
        assert_eq!(conds[0].0, condition::READY);
        assert_eq!(conds[0].1, "False");
        assert_eq!(
            (conds[1].0, conds[1].1, conds[1].2),
            (condition::OFFLINE, "True", reason::CLUSTER_NOT_REACHABLE)
        );
    }

    #[test]
    fn a_not_ok_answer_is_not_ready_but_reachable() {
        let conds = conditions(&Health::NotReady {
            status: 500,
            body: "[-]etcd failed".into(),
        });
        assert_eq!(
            (conds[0].1, conds[0].2),
            ("False", reason::CLUSTER_NOT_READY)
        );
        assert_eq!(
            (conds[1].0, conds[1].1, conds[1].2),
            (condition::OFFLINE, "False", reason::CLUSTER_REACHABLE)
        );
    }

    #[test]
    fn unauthorized_tells_the_user_to_check_the_token_secret() {
        let h = Health::Unauthorized {
            status: 401,
            secret: "kube-federation-system/member1".into(),
        };
        assert_eq!(h.reason(), reason::CLUSTER_UNAUTHORIZED);
        assert!(
            h.message()
                .contains("Secret kube-federation-system/member1")
        );
    }

    #[test]
    fn a_repeated_probe_with_the_same_outcome_needs_no_write() {
        let first = next_status(
            &KubeFedClusterStatus::default(),
            &Health::Ready,
            Some("v1.20.2"),
            "2024-01-01T00:00:00Z",
            false,
            &[],
        );
        let second = next_status(
            &first,
            &Health::Ready,
            None,
            "2024-01-01T00:00:10Z",
            false,
            &[],
        );
        assert!(!status_changed(&first, &second));
        assert_eq!(first, second);
        assert_eq!(second.kubernetes_version.as_deref(), Some("v1.20.2"));
    }

    #[test]
    fn a_changed_condition_needs_a_write_and_keeps_transition_times_of_unchanged_statuses() {
        let ready = next_status(
            &KubeFedClusterStatus::default(),
            &Health::Ready,
            None,
            "t0",
            false,
            &[],
        );
        let not_ready = next_status(
            &ready,
            &Health::NotReady {
                status: 500,
                body: "x".into(),
            },
            None,
            "t1",
            false,
            &[],
        );
        assert!(status_changed(&ready, &not_ready));
        let ready_cond = not_ready.condition(condition::READY).cloned();
        assert_eq!(
            ready_cond.and_then(|c| c.last_transition_time).as_deref(),
            Some("t1")
        );
        let offline = not_ready.condition(condition::OFFLINE).cloned();
        assert_eq!(
            offline.and_then(|c| c.last_transition_time).as_deref(),
            Some("t0")
        );
    }

    #[test]
    fn a_refresh_moves_probe_times_without_changing_anything_else() {
        let first = next_status(
            &KubeFedClusterStatus::default(),
            &Health::Ready,
            None,
            "t0",
            false,
            &[],
        );
        let refreshed = next_status(&first, &Health::Ready, None, "t9", true, &[]);
        assert!(!status_changed(&first, &refreshed));
        assert!(
            refreshed
                .conditions
                .iter()
                .all(|c| c.last_probe_time == "t9")
        );
        assert!(
            refreshed
                .conditions
                .iter()
                .all(|c| c.last_transition_time.as_deref() == Some("t0"))
        );
    }

    #[test]
    fn an_expired_rotating_token_turns_an_unready_probe_into_offline_with_that_reason() {
        let state = RenewalState {
            expires_at: "2026-01-01T01:00:00Z".parse().expect("a time"),
            failures: 4,
            last_error: Some("no answer".into()),
        };
        let before: Timestamp = "2026-01-01T00:59:00Z".parse().expect("a time");
        let after: Timestamp = "2026-01-01T01:00:01Z".parse().expect("a time");
        let refused = || Health::Unauthorized {
            status: 401,
            secret: "ns/member1-token".into(),
        };
        assert_eq!(
            expired_credential(refused(), Some(&state), before),
            refused()
        );
        assert_eq!(expired_credential(refused(), None, after), refused());
        assert_eq!(
            expired_credential(Health::Ready, Some(&state), after),
            Health::Ready
        );
        let expired = expired_credential(offline(), Some(&state), after);
        let conds = conditions(&expired);
        assert_eq!(
            (conds[1].0, conds[1].1, conds[1].2),
            (
                condition::OFFLINE,
                "True",
                reason::CLUSTER_CREDENTIAL_EXPIRED
            )
        );
        assert!(conds[1].3.contains("expired at"), "{}", conds[1].3);
    }

    #[test]
    fn long_bodies_are_cut_to_one_bounded_line() {
        let body = "line\n".repeat(200);
        let e = excerpt(&body);
        assert!(!e.contains('\n'));
        assert!(e.chars().count() <= MAX_DETAIL + 1);
    }
}
