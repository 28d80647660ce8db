//! The import controller's decisions, without I/O: when a token is refreshed, whether the
//! stored Secret is kept or a new token is requested, which Secret name an import uses,
//! the next status and whether it warrants a Warning Event. Everything is derived from
//! what is stored in the cluster (the Secret's annotations, the import's status), never
//! from memory, so a restarted controller decides the same.

use std::{collections::BTreeMap, time::Duration};

use flotilla_api::multicluster::{
    EXPIRATION_ANNOTATION, ISSUED_ANNOTATION, ImportCondition, ImportReason, READY_CONDITION,
    SOURCE_ANNOTATION, ServiceAccountImportStatus,
};
use k8s_openapi::jiff::{SignedDuration, Timestamp};

/// Fraction of a token's lifetime after which it is refreshed.
pub const DEFAULT_REFRESH_FRACTION: f64 = 0.8;
/// The earliest a token is refreshed after it was issued, whatever the fraction says, so
/// that a tiny test fraction cannot make the controller request tokens in a loop.
pub const MIN_REFRESH_AFTER: Duration = Duration::from_secs(5);

/// What a stored Secret says about its token (from its annotations and keys).
#[derive(Clone, Debug, PartialEq)]
pub struct StoredToken {
    /// When the token was issued.
    pub issued: Timestamp,
    /// When the token expires.
    pub expires: Timestamp,
    /// Hash of the inputs the Secret was built from.
    pub source_hash: String,
    /// Whether the Secret has every key the import writes.
    pub complete: bool,
}

impl StoredToken {
    /// Reads the annotations of an import's Secret; `None` when one is missing or malformed.
    pub fn from_annotations(
        annotations: &BTreeMap<String, String>,
        complete: bool,
    ) -> Option<Self> {
        let time = |k: &str| annotations.get(k)?.parse::<Timestamp>().ok();
        Some(StoredToken {
            issued: time(ISSUED_ANNOTATION)?,
            expires: time(EXPIRATION_ANNOTATION)?,
            source_hash: annotations.get(SOURCE_ANNOTATION)?.clone(),
            complete,
        })
    }

    /// Whether the token is still valid at `now`.
    pub fn valid_at(&self, now: Timestamp) -> bool {
        now < self.expires
    }
}

/// The refresh fraction an import asks for (its test-only annotation), or the default.
/// Values outside (0, 1] are ignored.
pub fn refresh_fraction(annotation: Option<&str>) -> f64 {
    annotation
        .and_then(|a| a.trim().parse::<f64>().ok())
        .filter(|f| *f > 0.0 && *f <= 1.0)
        .unwrap_or(DEFAULT_REFRESH_FRACTION)
}

/// When a token issued at `issued` and expiring at `expires` is refreshed: after `fraction`
/// of its lifetime, but no sooner than [`MIN_REFRESH_AFTER`] after it was issued and never
/// after it expires.
pub fn refresh_at(issued: Timestamp, expires: Timestamp, fraction: f64) -> Timestamp {
    let lifetime = expires.duration_since(issued);
    let after = lifetime.mul_f64(fraction.clamp(0.0, 1.0));
    let floor = SignedDuration::try_from(MIN_REFRESH_AFTER).unwrap_or(SignedDuration::ZERO);
    let at = issued.saturating_add(after.max(floor)).unwrap_or(expires);
    at.min(expires)
}

/// Whether a cluster's readiness is not settled yet in this process: the cluster set has
/// no Ready verdict while the KubeFedCluster's stored status still says Ready — right after
/// a (re)start, before the registry's first probe. The import is left as it is then;
/// judging would flap it to ClusterNotReady and back on every restart. A cluster really
/// down gets its stored status turned unready by the registry, which settles it.
pub fn cluster_unsettled(ready_in_set: bool, stored_ready: bool) -> bool {
    !ready_in_set && stored_ready
}

/// What to do with an import's Secret.
#[derive(Clone, Debug, PartialEq)]
pub enum Decision {
    /// Request a new token and write the Secret.
    Request,
    /// The Secret is current; look again after this long.
    Keep {
        /// Until the refresh point.
        refresh_in: Duration,
    },
}

/// Whether the stored Secret is kept or a new token requested: a missing, incomplete or
/// stale Secret (built from other inputs) and one past its refresh point get a new token.
pub fn decide(
    now: Timestamp,
    stored: Option<&StoredToken>,
    source_hash: &str,
    fraction: f64,
) -> Decision {
    let Some(stored) = stored.filter(|s| s.complete && s.source_hash == source_hash) else {
        return Decision::Request;
    };
    let at = refresh_at(stored.issued, stored.expires, fraction);
    if now >= at {
        return Decision::Request;
    }
    let refresh_in = Duration::try_from(at.duration_since(now)).unwrap_or(Duration::ZERO);
    Decision::Keep { refresh_in }
}

/// The Secret name candidates of an import, in order of preference: the one its status
/// names, `<import>-kubeconfig`, and `<import>-kubeconfig-<uid prefix>` for when the
/// second is taken by a Secret the import does not own.
pub fn secret_name_candidates(import: &str, uid: &str, in_status: Option<&str>) -> Vec<String> {
    let short: String = uid.chars().filter(|c| *c != '-').take(8).collect();
    let mut names: Vec<String> = in_status.map(str::to_string).into_iter().collect();
    for name in [
        format!("{import}-kubeconfig"),
        format!("{import}-kubeconfig-{short}"),
    ] {
        if !names.contains(&name) {
            names.push(name);
        }
    }
    names
}

/// The outcome of one reconcile as the status reports it.
#[derive(Clone, Debug, PartialEq)]
pub struct Outcome {
    /// Why the import is (not) Ready.
    pub reason: ImportReason,
    /// What happened, for people; never a token.
    pub message: String,
    /// The Secret holding the kubeconfig, when there is one.
    pub secret_name: Option<String>,
    /// When the Secret's token expires, when there is one.
    pub expiration: Option<Timestamp>,
}

/// The status for `outcome`; the Ready condition keeps its transition time while its
/// status (True/False) does not change, so an unchanged outcome gives an equal status.
pub fn next_status(
    previous: Option<&ServiceAccountImportStatus>,
    outcome: &Outcome,
    now: Timestamp,
) -> ServiceAccountImportStatus {
    let status = if outcome.reason.is_ready() {
        "True"
    } else {
        "False"
    };
    let before = previous.and_then(|p| p.ready());
    let transition = before
        .filter(|c| c.status == status)
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or_else(|| now.to_string());
    ServiceAccountImportStatus {
        conditions: vec![ImportCondition {
            type_: READY_CONDITION.into(),
            status: status.into(),
            reason: Some(outcome.reason.as_str().into()),
            message: Some(outcome.message.clone()),
            last_transition_time: Some(transition),
        }],
        secret_name: outcome.secret_name.clone(),
        expiration_timestamp: outcome.expiration.map(|t| t.to_string()),
    }
}

/// Whether a failure is new — the previous Ready condition had another reason — and so
/// deserves a Warning Event (a failure repeated on every retry is announced once).
pub fn warrants_warning(
    previous: Option<&ServiceAccountImportStatus>,
    reason: ImportReason,
) -> bool {
    !reason.is_ready()
        && previous
            .and_then(|p| p.ready())
            .and_then(|c| c.reason.as_deref())
            != Some(reason.as_str())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn t(s: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + s).expect("valid")
    }

    fn stored(issued: i64, expires: i64) -> StoredToken {
        StoredToken {
            issued: t(issued),
            expires: t(expires),
            source_hash: "h".into(),
            complete: true,
        }
    }

    #[test]
    fn a_token_is_refreshed_at_eighty_percent_of_its_lifetime() {
        assert_eq!(refresh_at(t(0), t(3600), DEFAULT_REFRESH_FRACTION), t(2880));
        assert_eq!(refresh_at(t(100), t(700), 0.5), t(400));
    }

    #[test]
    fn a_tiny_fraction_still_waits_the_minimum_and_nothing_waits_past_expiry() {
        assert_eq!(refresh_at(t(0), t(600), 0.0001), t(5));
        assert_eq!(refresh_at(t(0), t(3), 0.5), t(3));
        assert_eq!(refresh_at(t(0), t(600), 1.0), t(600));
    }

    #[test]
    fn the_refresh_fraction_annotation_is_used_only_within_zero_to_one() {
        assert_eq!(refresh_fraction(None), 0.8);
        assert_eq!(refresh_fraction(Some("0.01")), 0.01);
        assert_eq!(refresh_fraction(Some("1")), 1.0);
        for bad in ["0", "-1", "1.5", "soon", "NaN"] {
            assert_eq!(refresh_fraction(Some(bad)), 0.8, "{bad}");
        }
    }

    #[test]
    fn an_unprobed_cluster_whose_stored_status_says_ready_is_not_judged() {
        assert!(cluster_unsettled(false, true));
        assert!(!cluster_unsettled(true, true));
        assert!(
            !cluster_unsettled(false, false),
            "stored unready: ClusterNotReady"
        );
        assert!(!cluster_unsettled(true, false));
    }

    #[test]
    fn a_current_secret_is_kept_until_its_refresh_point() {
        let s = stored(0, 1000);
        assert_eq!(
            decide(t(100), Some(&s), "h", 0.8),
            Decision::Keep {
                refresh_in: Duration::from_secs(700)
            }
        );
        assert_eq!(decide(t(800), Some(&s), "h", 0.8), Decision::Request);
        assert_eq!(decide(t(2000), Some(&s), "h", 0.8), Decision::Request);
    }

    #[test]
    fn a_missing_incomplete_or_stale_secret_gets_a_new_token() {
        assert_eq!(decide(t(0), None, "h", 0.8), Decision::Request);
        let mut s = stored(0, 1000);
        assert_eq!(decide(t(1), Some(&s), "other", 0.8), Decision::Request);
        s.complete = false;
        assert_eq!(decide(t(1), Some(&s), "h", 0.8), Decision::Request);
    }

    #[test]
    fn the_stored_token_is_read_from_the_annotations_only_when_all_are_there() {
        let mut a = BTreeMap::from([
            (ISSUED_ANNOTATION.to_string(), t(0).to_string()),
            (EXPIRATION_ANNOTATION.to_string(), t(600).to_string()),
            (SOURCE_ANNOTATION.to_string(), "h".to_string()),
        ]);
        let s = StoredToken::from_annotations(&a, true).expect("complete annotations");
        assert_eq!(s, stored(0, 600));
        assert!(s.valid_at(t(599)) && !s.valid_at(t(600)));
        a.insert(EXPIRATION_ANNOTATION.into(), "yesterday".into());
        assert_eq!(StoredToken::from_annotations(&a, true), None);
        a.remove(EXPIRATION_ANNOTATION);
        assert_eq!(StoredToken::from_annotations(&a, true), None);
    }

    #[test]
    fn the_secret_name_prefers_the_status_then_the_default_then_a_uid_suffix() {
        assert_eq!(
            secret_name_candidates("imp", "0123abcd-ef", None),
            vec!["imp-kubeconfig", "imp-kubeconfig-0123abcd"]
        );
        assert_eq!(
            secret_name_candidates("imp", "0123abcd-ef", Some("imp-kubeconfig-0123abcd")),
            vec!["imp-kubeconfig-0123abcd", "imp-kubeconfig"]
        );
    }

    fn outcome(reason: ImportReason) -> Outcome {
        Outcome {
            reason,
            message: "m".into(),
            secret_name: Some("s".into()),
            expiration: Some(t(600)),
        }
    }

    #[test]
    fn an_unchanged_outcome_gives_an_equal_status_and_a_changed_one_a_new_transition() {
        let first = next_status(None, &outcome(ImportReason::TokenIssued), t(0));
        let ready = first.ready().expect("ready condition");
        assert_eq!(ready.status, "True");
        assert_eq!(first.expiration_timestamp, Some(t(600).to_string()));
        let again = next_status(Some(&first), &outcome(ImportReason::TokenIssued), t(50));
        assert_eq!(again, first);
        let failed = next_status(
            Some(&first),
            &outcome(ImportReason::ServiceAccountNotFound),
            t(60),
        );
        let c = failed.ready().expect("ready condition");
        assert_eq!(
            (c.status.as_str(), c.reason.as_deref()),
            ("False", Some("ServiceAccountNotFound"))
        );
        assert_eq!(c.last_transition_time, Some(t(60).to_string()));
    }

    #[test]
    fn only_a_new_failure_reason_warrants_a_warning() {
        let ok = next_status(None, &outcome(ImportReason::TokenIssued), t(0));
        assert!(!warrants_warning(Some(&ok), ImportReason::TokenIssued));
        assert!(warrants_warning(
            Some(&ok),
            ImportReason::TokenRequestForbidden
        ));
        assert!(warrants_warning(None, ImportReason::ClusterNotFound));
        let failed = next_status(None, &outcome(ImportReason::ClusterNotFound), t(0));
        assert!(!warrants_warning(
            Some(&failed),
            ImportReason::ClusterNotFound
        ));
        assert!(warrants_warning(
            Some(&failed),
            ImportReason::ClusterNotReady
        ));
    }
}
