//! Health of a Pull cluster: the host cannot reach the member, so instead of probing
//! `/healthz` it reads the Lease the cluster's agent renews in the cluster's namespace
//! (`flotilla-cluster-<name>/flotilla-agent`). A Lease renewed within its duration means
//! Ready; one that lapsed (or was never written) means Offline. The verdict goes through
//! the same thresholds, conditions and status writes as a probe's.
//!
//! Clock skew: once the host has seen the Lease change, its age is measured on the host's
//! own clock from that moment; only the first look (after a restart) compares the agent's
//! `renewTime` with the host's clock.

use std::time::{Duration, Instant};

use flotilla_api::work::{AGENT_LEASE, cluster_namespace};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::jiff::Timestamp;
use kube::{Api, Client, ResourceExt};

use super::health::Health;

pub use flotilla_core::member::VERSION_ANNOTATION;

/// Lease duration assumed when the Lease does not say.
const DEFAULT_LEASE_DURATION: Duration = Duration::from_secs(40);

/// What the host read of an agent's Lease.
#[derive(Clone, Debug, PartialEq)]
pub struct LeaseFacts {
    /// `spec.renewTime`, as written.
    pub renew_time: Option<String>,
    /// `spec.leaseDurationSeconds`.
    pub duration: Duration,
    /// The member's version, from [`VERSION_ANNOTATION`].
    pub version: Option<String>,
}

impl LeaseFacts {
    /// The facts of a Lease object.
    pub fn of(lease: &Lease) -> Self {
        let spec = lease.spec.clone().unwrap_or_default();
        LeaseFacts {
            renew_time: spec.renew_time.map(|t| t.0.to_string()),
            duration: spec
                .lease_duration_seconds
                .map(|s| Duration::from_secs(s.max(1).unsigned_abs().into()))
                .unwrap_or(DEFAULT_LEASE_DURATION),
            version: lease.annotations().get(VERSION_ANNOTATION).cloned(),
        }
    }
}

/// A worker's memory of one Lease: the last `renewTime` seen and when (host clock).
#[derive(Clone, Debug, Default)]
pub struct HeartbeatTracker {
    seen: Option<(String, Instant)>,
    changed_since_start: bool,
}

impl HeartbeatTracker {
    /// The health the Lease says now. `now` is the host's wall clock, `at` its monotonic one.
    pub fn judge(&mut self, lease: Option<&LeaseFacts>, now: Timestamp, at: Instant) -> Health {
        let Some(lease) = lease else {
            return Health::Offline {
                error: "no heartbeat from the cluster's agent (its Lease does not exist)".into(),
            };
        };
        let Some(renewed) = lease.renew_time.clone() else {
            return Health::Offline {
                error: "the agent's Lease has no renewTime".into(),
            };
        };
        match &self.seen {
            Some((last, _)) if *last == renewed => {}
            Some(_) => {
                self.seen = Some((renewed.clone(), at));
                self.changed_since_start = true;
            }
            None => self.seen = Some((renewed.clone(), at)),
        }
        let age = match &self.seen {
            Some((_, since)) if self.changed_since_start => at.saturating_duration_since(*since),
            _ => wall_age(&renewed, now),
        };
        if age <= lease.duration {
            Health::Ready
        } else {
            Health::Offline {
                error: format!(
                    "the agent's heartbeat lapsed: its Lease was last renewed {}s ago (lease duration {}s)",
                    age.as_secs(),
                    lease.duration.as_secs()
                ),
            }
        }
    }
}

/// How long ago `renewed` (RFC 3339) was on the host's clock; unparsable means long ago.
fn wall_age(renewed: &str, now: Timestamp) -> Duration {
    match renewed.parse::<Timestamp>() {
        Ok(t) => {
            let secs = now.as_second() - t.as_second();
            Duration::from_secs(secs.max(0).unsigned_abs())
        }
        Err(_) => Duration::MAX,
    }
}

/// The Lease API of a Pull cluster's agent, in the host.
pub fn lease_api(host: &Client, cluster: &str) -> Api<Lease> {
    Api::namespaced(host.clone(), &cluster_namespace(cluster))
}

/// Reads the agent's Lease within `timeout`: `Ok(None)` when it does not exist.
pub async fn read_lease(api: &Api<Lease>, timeout: Duration) -> Result<Option<LeaseFacts>, String> {
    match tokio::time::timeout(timeout, api.get_opt(AGENT_LEASE)).await {
        Ok(Ok(lease)) => Ok(lease.as_ref().map(LeaseFacts::of)),
        Ok(Err(e)) => Err(super::error_chain(&e)),
        Err(_) => Err(format!(
            "reading the agent's Lease timed out after {timeout:?}"
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lease(renewed: &str) -> LeaseFacts {
        LeaseFacts {
            renew_time: Some(renewed.into()),
            duration: Duration::from_secs(10),
            version: None,
        }
    }

    fn t(s: &str) -> Timestamp {
        s.parse().expect("timestamp")
    }

    #[test]
    fn a_missing_lease_is_offline() {
        let mut h = HeartbeatTracker::default();
        let health = h.judge(None, t("2026-01-01T00:00:00Z"), Instant::now());
        assert!(matches!(health, Health::Offline { .. }));
    }

    #[test]
    fn a_fresh_lease_at_first_sight_is_ready_and_a_stale_one_offline() {
        let now = t("2026-01-01T00:00:30Z");
        let mut h = HeartbeatTracker::default();
        assert_eq!(
            h.judge(Some(&lease("2026-01-01T00:00:25Z")), now, Instant::now()),
            Health::Ready
        );
        let mut h = HeartbeatTracker::default();
        assert!(matches!(
            h.judge(Some(&lease("2026-01-01T00:00:00Z")), now, Instant::now()),
            Health::Offline { .. }
        ));
    }

    #[test]
    fn after_a_renewal_is_seen_the_hosts_own_clock_decides() {
        let start = Instant::now();
        // The agent's clock is an hour behind: its renewTime looks stale to the host.
        let now = t("2026-01-01T01:00:00Z");
        let mut h = HeartbeatTracker::default();
        h.judge(Some(&lease("2026-01-01T00:00:00Z")), now, start);
        let renewed = lease("2026-01-01T00:00:05Z");
        assert_eq!(
            h.judge(Some(&renewed), now, start + Duration::from_secs(5)),
            Health::Ready
        );
        assert_eq!(
            h.judge(Some(&renewed), now, start + Duration::from_secs(14)),
            Health::Ready
        );
        assert!(matches!(
            h.judge(Some(&renewed), now, start + Duration::from_secs(16)),
            Health::Offline { .. }
        ));
    }
}
