//! Leader election with a `coordination.k8s.io/v1` Lease, the way client-go's
//! `leaderelection` package does it: candidates poll the Lease every retry period; the
//! holder renews it and gives up when it could not renew within the renew deadline; a
//! candidate takes it over once it has seen no renewal for a whole lease duration (measured
//! on its own clock, so clock skew between machines does not matter). Every write carries
//! the `resourceVersion` that was read, so two candidates can never both win a round.
//!
//! The decision of one round is the pure [`decide`]; [`LeaderElector`] does the I/O.

use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// Name of the Lease, as kubefed names its lock.
pub const DEFAULT_LEASE_NAME: &str = "kubefed-controller-manager";

/// Errors of leader election.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The timings cannot work: a leader must give up (renew deadline) before a candidate
    /// may take over (lease duration), and retry more than once within the deadline.
    #[error(
        "invalid leader election timings: need lease duration ({lease_duration:?}) > renew deadline ({renew_deadline:?}) > retry period ({retry_period:?}) > 0"
    )]
    InvalidTimings {
        /// The lease duration.
        lease_duration: Duration,
        /// The renew deadline.
        renew_deadline: Duration,
        /// The retry period.
        retry_period: Duration,
    },
    /// A request for the Lease failed.
    #[error("{action} Lease {namespace}/{name} failed")]
    Kube {
        /// What was being done.
        action: &'static str,
        /// Namespace of the Lease.
        namespace: String,
        /// Name of the Lease.
        name: String,
        /// kube's error (boxed: it is large, and this error is rare).
        #[source]
        source: Box<kube::Error>,
    },
}

/// Where the lock lives, who this candidate is, and the timings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaderElectionConfig {
    /// Namespace of the Lease (the control-plane namespace).
    pub namespace: String,
    /// Name of the Lease.
    pub lease_name: String,
    /// This candidate's identity, written as `holderIdentity`.
    pub identity: String,
    /// How long a lease is valid without renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it gives up leadership.
    pub renew_deadline: Duration,
    /// Pause between attempts to acquire or renew.
    pub retry_period: Duration,
}

impl LeaderElectionConfig {
    /// A configuration with kubefed's defaults (15 s / 10 s / 5 s) and the default lock name.
    pub fn new(namespace: &str, identity: &str) -> Self {
        LeaderElectionConfig {
            namespace: namespace.to_owned(),
            lease_name: DEFAULT_LEASE_NAME.to_owned(),
            identity: identity.to_owned(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(5),
        }
    }

    /// Checks that the timings can work (see [`Error::InvalidTimings`]).
    pub fn validate(&self) -> Result<(), Error> {
        let ok = self.lease_duration > self.renew_deadline
            && self.renew_deadline > self.retry_period
            && !self.retry_period.is_zero();
        if ok {
            Ok(())
        } else {
            Err(Error::InvalidTimings {
                lease_duration: self.lease_duration,
                renew_deadline: self.renew_deadline,
                retry_period: self.retry_period,
            })
        }
    }
}

/// This candidate's identity: `POD_NAME` when set (the Deployment passes it through the
/// downward API), else `<hostname>_<pid>`.
pub fn default_identity() -> String {
    if let Some(pod) = std::env::var("POD_NAME").ok().filter(|p| !p.is_empty()) {
        return pod;
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .ok()
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
        .or_else(|| std::env::var("HOSTNAME").ok())
        .unwrap_or_else(|| "localhost".to_owned());
    format!("{host}_{}", std::process::id())
}

/// What one round of the election should do.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Step {
    /// There is no Lease: create it, held by us.
    Create,
    /// We hold the Lease: renew it.
    Renew,
    /// Nobody holds the Lease, or its holder let it expire: take it over.
    Takeover,
    /// Someone else holds a valid Lease.
    Follow {
        /// The current holder.
        holder: String,
    },
}

/// Decides one round. `observed_for` is how long this candidate has seen the Lease's record
/// (holder, renew time, duration) unchanged; `default_duration` applies when the Lease does
/// not say how long it is valid.
pub fn decide(
    lease: Option<&LeaseSpec>,
    me: &str,
    observed_for: Duration,
    default_duration: Duration,
) -> Step {
    let Some(spec) = lease else {
        return Step::Create;
    };
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    if holder == me {
        return Step::Renew;
    }
    if holder.is_empty() {
        return Step::Takeover;
    }
    let duration = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .filter(|s| *s > 0)
        .map(Duration::from_secs)
        .unwrap_or(default_duration);
    if observed_for >= duration {
        Step::Takeover
    } else {
        Step::Follow {
            holder: holder.to_owned(),
        }
    }
}

/// The parts of a Lease whose change proves its holder is alive.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Record {
    holder: Option<String>,
    renew_time: Option<MicroTime>,
    duration: Option<i32>,
    transitions: Option<i32>,
}

impl Record {
    fn of(spec: &LeaseSpec) -> Self {
        Record {
            holder: spec.holder_identity.clone(),
            renew_time: spec.renew_time.clone(),
            duration: spec.lease_duration_seconds,
            transitions: spec.lease_transitions,
        }
    }
}

/// How a period of leadership ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeadershipEnd {
    /// The leader was asked to stop; it still holds the Lease until it releases it.
    Cancelled,
    /// The Lease could not be renewed within the renew deadline, or another candidate took
    /// it: the leader must stop writing at once.
    Lost,
}

/// One candidate in the election.
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderElectionConfig,
    observed: Option<(Record, Instant)>,
}

fn seconds(d: Duration) -> i32 {
    // The Lease counts whole seconds; round up so a lease never looks shorter than it is.
    let secs = d.as_secs() + u64::from(d.subsec_nanos() > 0);
    i32::try_from(secs.max(1)).unwrap_or(i32::MAX)
}

fn now() -> MicroTime {
    MicroTime(Timestamp::now())
}

impl LeaderElector {
    /// A candidate for the Lease described by `config`.
    pub fn new(client: Client, config: LeaderElectionConfig) -> Result<Self, Error> {
        config.validate()?;
        Ok(LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
            observed: None,
        })
    }

    /// The configuration in use.
    pub fn config(&self) -> &LeaderElectionConfig {
        &self.config
    }

    fn err(&self, action: &'static str) -> impl FnOnce(kube::Error) -> Error + use<> {
        let namespace = self.config.namespace.clone();
        let name = self.config.lease_name.clone();
        move |source| Error::Kube {
            action,
            namespace,
            name,
            source: Box::new(source),
        }
    }

    /// Runs one round: reads the Lease and creates, renews or takes it over when allowed.
    /// Returns whether this candidate holds the Lease afterwards. A write that loses a race
    /// with another candidate (409 Conflict) is a lost round, not an error.
    pub async fn try_acquire_or_renew(&mut self) -> Result<bool, Error> {
        let name = self.config.lease_name.clone();
        let current = self.api.get_opt(&name).await.map_err(self.err("reading"))?;
        let observed_for = self.observe(current.as_ref());
        // A Lease without a spec is held by nobody.
        let empty = LeaseSpec::default();
        let step = decide(
            current.as_ref().map(|l| l.spec.as_ref().unwrap_or(&empty)),
            &self.config.identity,
            observed_for,
            self.config.lease_duration,
        );
        let result = match step {
            Step::Follow { holder } => {
                debug!(%holder, lease = %name, "lease held by another candidate");
                return Ok(false);
            }
            Step::Create => self.create_lease(&name).await,
            Step::Renew | Step::Takeover => {
                self.replace_lease(&name, current.unwrap_or_default(), step == Step::Renew)
                    .await
            }
        };
        match result {
            Ok(written) => {
                if let Some(spec) = written.spec.as_ref() {
                    self.observed = Some((Record::of(spec), Instant::now()));
                }
                if step == Step::Takeover || step == Step::Create {
                    info!(identity = %self.config.identity, lease = %name, "acquired the leader lease");
                }
                Ok(true)
            }
            Err(kube::Error::Api(status)) if status.code == 409 => {
                debug!(lease = %name, "lost a race for the lease");
                Ok(false)
            }
            Err(e) => Err(self.err("writing")(e)),
        }
    }

    /// How long the Lease has looked the same to this candidate; a changed record restarts
    /// the clock, since its holder has proved it is alive.
    fn observe(&mut self, current: Option<&Lease>) -> Duration {
        let Some(spec) = current.and_then(|l| l.spec.as_ref()) else {
            return Duration::ZERO;
        };
        let now = Instant::now();
        let record = Record::of(spec);
        match &self.observed {
            Some((seen, since)) if *seen == record => now - *since,
            _ => {
                self.observed = Some((record, now));
                Duration::ZERO
            }
        }
    }

    /// This candidate's claim on the Lease, renewed now.
    fn my_spec(&self, acquire_time: Option<MicroTime>, transitions: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(seconds(self.config.lease_duration)),
            acquire_time,
            renew_time: Some(now()),
            lease_transitions: transitions,
            ..LeaseSpec::default()
        }
    }

    /// Creates the Lease, held by this candidate.
    async fn create_lease(&self, name: &str) -> Result<Lease, kube::Error> {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(self.my_spec(Some(now()), Some(0))),
        };
        self.api.create(&PostParams::default(), &lease).await
    }

    /// Renews this candidate's Lease, or takes over another's (a new acquire time and one
    /// more transition).
    async fn replace_lease(
        &self,
        name: &str,
        mut lease: Lease,
        renew: bool,
    ) -> Result<Lease, kube::Error> {
        let old = lease.spec.take().unwrap_or_default();
        let spec = if renew {
            self.my_spec(
                old.acquire_time.clone().or_else(|| Some(now())),
                old.lease_transitions,
            )
        } else {
            self.my_spec(
                Some(now()),
                Some(old.lease_transitions.unwrap_or(0).saturating_add(1)),
            )
        };
        lease.spec = Some(spec);
        // `lease.metadata.resourceVersion` is the one just read: the write fails with 409
        // if anyone changed the Lease in between.
        self.api.replace(name, &PostParams::default(), &lease).await
    }

    /// Polls until this candidate holds the Lease. Returns `false` when `cancel` fires
    /// first.
    pub async fn acquire(&mut self, cancel: &CancellationToken) -> bool {
        info!(identity = %self.config.identity, lease = %self.config.lease_name, "waiting for the leader lease");
        loop {
            match self.try_acquire_or_renew().await {
                Ok(true) => return true,
                Ok(false) => {}
                Err(error) => {
                    warn!(error = %error_chain(&error), "leader election round failed; retrying")
                }
            }
            tokio::select! {
                _ = cancel.cancelled() => return false,
                _ = tokio::time::sleep(self.config.retry_period) => {}
            }
        }
    }

    /// Keeps renewing the Lease every retry period until `cancel` fires or leadership is
    /// lost: no successful renewal within the renew deadline, or another holder in the
    /// Lease. After `Cancelled`, stop the work and then [`LeaderElector::release`] the Lease.
    pub async fn hold(&mut self, cancel: &CancellationToken) -> LeadershipEnd {
        let mut last_renewal = Instant::now();
        let mut pause = self.config.retry_period;
        loop {
            let deadline = last_renewal + self.config.renew_deadline;
            tokio::select! {
                _ = cancel.cancelled() => return LeadershipEnd::Cancelled,
                _ = tokio::time::sleep_until((Instant::now() + pause).min(deadline)) => {}
            }
            // Measured from the last successful renewal, so the leader always stops before
            // a standby (which waits a whole lease duration) can take over.
            match tokio::time::timeout_at(deadline, self.try_acquire_or_renew()).await {
                Ok(Ok(true)) => {
                    last_renewal = Instant::now();
                    pause = self.config.retry_period;
                    continue;
                }
                Ok(Ok(false)) => {
                    let holder = self.observed.as_ref().and_then(|(r, _)| r.holder.clone());
                    if holder.as_deref() != Some(self.config.identity.as_str()) {
                        warn!(holder = ?holder, "another candidate holds the leader lease; leadership lost");
                        return LeadershipEnd::Lost;
                    }
                }
                Ok(Err(error)) => {
                    warn!(error = %error_chain(&error), "renewing the leader lease failed; retrying");
                }
                Err(_) => {}
            }
            if Instant::now() >= deadline {
                warn!(
                    renew_deadline = ?self.config.renew_deadline,
                    "could not renew the leader lease within the renew deadline; leadership lost"
                );
                return LeadershipEnd::Lost;
            }
            // Retry sooner after a failure, to get more than one attempt into the deadline.
            pause = self.config.retry_period / 2;
        }
    }

    /// Gives the Lease up (holder cleared, duration 1 s) so a standby takes over at once
    /// instead of after a whole lease duration. Best effort: failures are logged.
    pub async fn release(&mut self) {
        let name = self.config.lease_name.clone();
        let current = match self.api.get_opt(&name).await {
            Ok(Some(lease)) => lease,
            Ok(None) => return,
            Err(error) => {
                warn!(%error, "reading the leader lease to release it failed");
                return;
            }
        };
        let mut lease = current;
        let Some(spec) = lease.spec.as_mut() else {
            return;
        };
        if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
            return;
        }
        spec.holder_identity = None;
        spec.lease_duration_seconds = Some(1);
        spec.renew_time = Some(now());
        match self
            .api
            .replace(&name, &PostParams::default(), &lease)
            .await
        {
            Ok(_) => {
                info!(identity = %self.config.identity, lease = %name, "released the leader lease")
            }
            Err(error) => warn!(%error, "releasing the leader lease failed"),
        }
    }
}

fn error_chain(error: &dyn std::error::Error) -> String {
    crate::registry::error_chain(error)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: &str, seconds: i32) -> LeaseSpec {
        LeaseSpec {
            holder_identity: Some(holder.into()),
            lease_duration_seconds: Some(seconds),
            ..LeaseSpec::default()
        }
    }

    const FIFTEEN: Duration = Duration::from_secs(15);

    #[test]
    fn a_missing_lease_is_created() {
        assert_eq!(decide(None, "a", Duration::ZERO, FIFTEEN), Step::Create);
    }

    #[test]
    fn the_holder_renews_its_own_lease() {
        assert_eq!(
            decide(
                Some(&held_by("a", 15)),
                "a",
                Duration::from_secs(60),
                FIFTEEN
            ),
            Step::Renew
        );
    }

    #[test]
    fn a_fresh_lease_of_another_holder_is_followed() {
        assert_eq!(
            decide(
                Some(&held_by("b", 15)),
                "a",
                Duration::from_secs(14),
                FIFTEEN
            ),
            Step::Follow { holder: "b".into() }
        );
    }

    #[test]
    fn a_lease_unrenewed_for_its_whole_duration_is_taken_over() {
        assert_eq!(
            decide(Some(&held_by("b", 3)), "a", Duration::from_secs(3), FIFTEEN),
            Step::Takeover
        );
    }

    #[test]
    fn a_released_lease_is_taken_over_at_once() {
        let released = LeaseSpec {
            holder_identity: None,
            lease_duration_seconds: Some(1),
            ..LeaseSpec::default()
        };
        assert_eq!(
            decide(Some(&released), "a", Duration::ZERO, FIFTEEN),
            Step::Takeover
        );
    }

    #[test]
    fn a_lease_without_a_duration_uses_the_configured_one() {
        let spec = LeaseSpec {
            holder_identity: Some("b".into()),
            ..LeaseSpec::default()
        };
        assert!(matches!(
            decide(Some(&spec), "a", Duration::from_secs(10), FIFTEEN),
            Step::Follow { .. }
        ));
        assert_eq!(decide(Some(&spec), "a", FIFTEEN, FIFTEEN), Step::Takeover);
    }

    #[test]
    fn timings_where_the_leader_could_outlive_its_lease_are_rejected() {
        let mut config = LeaderElectionConfig::new("ns", "a");
        assert!(config.validate().is_ok());
        config.renew_deadline = config.lease_duration;
        assert!(config.validate().is_err());
        config = LeaderElectionConfig::new("ns", "a");
        config.retry_period = config.renew_deadline;
        assert!(config.validate().is_err());
    }

    #[test]
    fn lease_seconds_round_up_and_are_at_least_one() {
        assert_eq!(seconds(Duration::from_millis(1500)), 2);
        assert_eq!(seconds(Duration::from_millis(10)), 1);
        assert_eq!(seconds(Duration::from_secs(15)), 15);
    }
}
