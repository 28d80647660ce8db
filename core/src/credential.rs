//! Rotating member credentials, as decisions without I/O: what the host Secret of a push
//! member says about its bound token (the annotations `flotilla join` and the renewer
//! write beside the token), when that token is renewed, how a failed renewal backs off,
//! and what the KubeFedCluster's `CredentialRenewed` condition says about it.
//!
//! A Secret without [`SERVICE_ACCOUNT_ANNOTATION`] holds a token that is not rotated
//! (kubefedctl's, a static token, or a cluster joined before rotation): nothing here
//! touches it. Token values never pass through this module.

use std::{collections::BTreeMap, time::Duration};

use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// `namespace/name` of the member ServiceAccount whose tokens the Secret holds.
pub const SERVICE_ACCOUNT_ANNOTATION: &str = "flotilla.io/token-service-account";
/// Requested lifetime of each token, in seconds.
pub const LIFETIME_ANNOTATION: &str = "flotilla.io/token-lifetime-seconds";
/// When the current token was issued (RFC 3339).
pub const ISSUED_AT_ANNOTATION: &str = "flotilla.io/token-issued-at";
/// When the current token expires (RFC 3339), as the member's TokenRequest API said.
pub const EXPIRES_AT_ANNOTATION: &str = "flotilla.io/token-expires-at";

/// Every rotation annotation.
pub const ANNOTATIONS: [&str; 4] = [
    SERVICE_ACCOUNT_ANNOTATION,
    LIFETIME_ANNOTATION,
    ISSUED_AT_ANNOTATION,
    EXPIRES_AT_ANNOTATION,
];

/// The default lifetime of a member token.
pub const DEFAULT_LIFETIME: Duration = Duration::from_secs(3600);
/// The shortest lifetime the TokenRequest API grants.
pub const MIN_LIFETIME: Duration = Duration::from_secs(600);

/// The first retry of a failed renewal comes after this long; each next one after twice
/// as long, up to [`MAX_RETRY`].
pub const FIRST_RETRY: Duration = Duration::from_secs(1);
/// The longest wait between two renewal attempts.
pub const MAX_RETRY: Duration = Duration::from_secs(60);

/// The condition type on a KubeFedCluster whose token is rotated.
pub const CONDITION: &str = "CredentialRenewed";

/// A host Secret's rotation annotations could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RotationError {
    /// An annotation is missing or not what it should be.
    #[error("annotation {annotation} of the token Secret is {problem}")]
    Annotation {
        /// The annotation's key.
        annotation: &'static str,
        /// What is wrong with it.
        problem: &'static str,
    },
}

/// What the host Secret of a rotated member token says about the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rotation {
    /// Namespace of the member ServiceAccount.
    pub namespace: String,
    /// Name of the member ServiceAccount.
    pub service_account: String,
    /// Lifetime requested for each token.
    pub lifetime: Duration,
    /// When the current token was issued.
    pub issued_at: Timestamp,
    /// When the current token expires.
    pub expires_at: Timestamp,
}

impl Rotation {
    /// The rotation described by a Secret's annotations; `None` for a token that is not
    /// rotated (no [`SERVICE_ACCOUNT_ANNOTATION`]).
    pub fn from_annotations(
        annotations: &BTreeMap<String, String>,
    ) -> Result<Option<Rotation>, RotationError> {
        let Some(sa) = annotations.get(SERVICE_ACCOUNT_ANNOTATION) else {
            return Ok(None);
        };
        let bad = |annotation, problem| RotationError::Annotation {
            annotation,
            problem,
        };
        let (namespace, service_account) = sa
            .split_once('/')
            .filter(|(ns, name)| !ns.is_empty() && !name.is_empty())
            .ok_or(bad(SERVICE_ACCOUNT_ANNOTATION, "not namespace/name"))?;
        let get = |key| annotations.get(key).ok_or(bad(key, "missing"));
        let lifetime = get(LIFETIME_ANNOTATION)?
            .parse::<u64>()
            .map_err(|_| bad(LIFETIME_ANNOTATION, "not a number of seconds"))?;
        let time = |key| {
            get(key)?
                .parse::<Timestamp>()
                .map_err(|_| bad(key, "not an RFC 3339 time"))
        };
        Ok(Some(Rotation {
            namespace: namespace.to_owned(),
            service_account: service_account.to_owned(),
            lifetime: Duration::from_secs(lifetime),
            issued_at: time(ISSUED_AT_ANNOTATION)?,
            expires_at: time(EXPIRES_AT_ANNOTATION)?,
        }))
    }

    /// The annotations that describe this rotation on the host Secret.
    pub fn annotations(&self) -> BTreeMap<String, String> {
        BTreeMap::from([
            (
                SERVICE_ACCOUNT_ANNOTATION.to_owned(),
                format!("{}/{}", self.namespace, self.service_account),
            ),
            (
                LIFETIME_ANNOTATION.to_owned(),
                self.lifetime.as_secs().to_string(),
            ),
            (ISSUED_AT_ANNOTATION.to_owned(), self.issued_at.to_string()),
            (
                EXPIRES_AT_ANNOTATION.to_owned(),
                self.expires_at.to_string(),
            ),
        ])
    }

    /// When the token is due for renewal: two thirds into its life, or `interval` after it
    /// was issued when that comes first (the controller-manager's
    /// `--credential-renewal-interval`).
    pub fn renew_at(&self, interval: Option<Duration>) -> Timestamp {
        let life = self.expires_at.duration_since(self.issued_at);
        let mut wait = life * 2 / 3;
        if let Some(interval) = interval.and_then(|i| SignedDuration::try_from(i).ok()) {
            wait = wait.min(interval);
        }
        self.issued_at
            .checked_add(wait.max(SignedDuration::ZERO))
            .unwrap_or(self.issued_at)
    }

    /// Whether the token has expired at `now`.
    pub fn expired(&self, now: Timestamp) -> bool {
        now >= self.expires_at
    }
}

/// How long to wait before the next attempt after `failures` failed renewals in a row:
/// [`FIRST_RETRY`] doubled per failure, at most [`MAX_RETRY`], and never past a quarter
/// of the time the token has left, so that the attempts thicken as expiry nears. Once it
/// has expired, there is nothing left to save: [`MAX_RETRY`].
pub fn retry_delay(failures: u32, left: Duration) -> Duration {
    if left.is_zero() {
        return MAX_RETRY;
    }
    let doubled = FIRST_RETRY.saturating_mul(1u32 << failures.saturating_sub(1).min(16));
    doubled.min(MAX_RETRY).min(left / 4).max(FIRST_RETRY)
}

/// Why the `CredentialRenewed` condition is what it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RenewalReason {
    /// The last renewal succeeded (True).
    TokenRenewed,
    /// Renewals fail; the token is still valid (False).
    TokenRenewalFailed,
    /// Renewals failed until the token expired (False; the cluster is Offline).
    TokenExpired,
}

impl RenewalReason {
    /// The condition reason.
    pub fn as_str(self) -> &'static str {
        match self {
            RenewalReason::TokenRenewed => "TokenRenewed",
            RenewalReason::TokenRenewalFailed => "TokenRenewalFailed",
            RenewalReason::TokenExpired => "TokenExpired",
        }
    }
}

/// What the renewer knows of one cluster's token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenewalState {
    /// When the current token expires.
    pub expires_at: Timestamp,
    /// Failed renewals since the last success.
    pub failures: u32,
    /// The last failure, as an error chain (never a token).
    pub last_error: Option<String>,
}

/// The `CredentialRenewed` condition: (status, reason, message).
pub fn condition(state: &RenewalState, now: Timestamp) -> (&'static str, RenewalReason, String) {
    let expires = state.expires_at.round(k8s_openapi::jiff::Unit::Second);
    let expires = expires.unwrap_or(state.expires_at);
    if now >= state.expires_at {
        let why = match &state.last_error {
            Some(e) => format!("; the last renewal failed: {e}"),
            None => String::new(),
        };
        let message = format!("the member token expired at {expires}{why}");
        return ("False", RenewalReason::TokenExpired, message);
    }
    match (&state.last_error, state.failures) {
        (Some(error), failures) if failures > 0 => {
            let left = state.expires_at.duration_since(now).as_secs();
            let message = format!(
                "renewing the member token failed {failures} time(s), retried with backoff; \
                 the token expires at {expires} (in {left}s): {error}"
            );
            ("False", RenewalReason::TokenRenewalFailed, message)
        }
        _ => (
            "True",
            RenewalReason::TokenRenewed,
            format!("the member token is renewed before it expires (now at {expires})"),
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(s: &str) -> Timestamp {
        s.parse().expect("a time")
    }

    fn rotation() -> Rotation {
        Rotation {
            namespace: "kube-federation-system".into(),
            service_account: "member1-host".into(),
            lifetime: DEFAULT_LIFETIME,
            issued_at: at("2026-01-01T00:00:00Z"),
            expires_at: at("2026-01-01T01:00:00Z"),
        }
    }

    #[test]
    fn a_token_is_renewed_two_thirds_into_its_life() {
        assert_eq!(rotation().renew_at(None), at("2026-01-01T00:40:00Z"));
    }

    #[test]
    fn a_renewal_interval_shorter_than_two_thirds_of_the_life_comes_first() {
        let r = rotation();
        assert_eq!(
            r.renew_at(Some(Duration::from_secs(5))),
            at("2026-01-01T00:00:05Z")
        );
        assert_eq!(
            r.renew_at(Some(Duration::from_secs(7200))),
            at("2026-01-01T00:40:00Z")
        );
    }

    #[test]
    fn annotations_round_trip_and_a_secret_without_them_is_not_rotated() {
        let r = rotation();
        assert_eq!(Rotation::from_annotations(&r.annotations()), Ok(Some(r)));
        assert_eq!(Rotation::from_annotations(&BTreeMap::new()), Ok(None));
    }

    #[test]
    fn a_malformed_annotation_is_named() {
        let mut a = rotation().annotations();
        a.insert(EXPIRES_AT_ANNOTATION.into(), "tomorrow".into());
        let e = Rotation::from_annotations(&a).expect_err("malformed");
        assert!(e.to_string().contains(EXPIRES_AT_ANNOTATION), "{e}");
        a.insert(SERVICE_ACCOUNT_ANNOTATION.into(), "no-slash".into());
        assert!(Rotation::from_annotations(&a).is_err());
    }

    #[test]
    fn retries_double_up_to_a_minute_and_thicken_as_expiry_nears() {
        let plenty = Duration::from_secs(3600);
        let delays: Vec<u64> = (1..=8).map(|n| retry_delay(n, plenty).as_secs()).collect();
        assert_eq!(delays, [1, 2, 4, 8, 16, 32, 60, 60]);
        assert_eq!(retry_delay(8, Duration::from_secs(40)).as_secs(), 10);
        assert_eq!(retry_delay(8, Duration::from_millis(100)), FIRST_RETRY);
        assert_eq!(retry_delay(8, Duration::ZERO), MAX_RETRY);
    }

    #[test]
    fn the_condition_says_renewed_failing_or_expired() {
        let mut state = RenewalState {
            expires_at: at("2026-01-01T01:00:00Z"),
            failures: 0,
            last_error: None,
        };
        let now = at("2026-01-01T00:50:00Z");
        assert_eq!(condition(&state, now).1, RenewalReason::TokenRenewed);
        state.failures = 3;
        state.last_error = Some("connection refused".into());
        let (status, reason, message) = condition(&state, now);
        assert_eq!(
            (status, reason),
            ("False", RenewalReason::TokenRenewalFailed)
        );
        assert!(
            message.contains("3 time(s)") && message.contains("in 600s"),
            "{message}"
        );
        let (status, reason, message) = condition(&state, at("2026-01-01T01:00:01Z"));
        assert_eq!((status, reason), ("False", RenewalReason::TokenExpired));
        assert!(message.contains("connection refused"), "{message}");
    }
}
