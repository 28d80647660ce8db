//! Whether a member cache has merely not caught up with Flotilla's own last operation on a
//! member object. Acting on such a cache would send the same write or delete twice: the
//! host watch often delivers a reconcile's status write, and every other member's watch
//! event requeues the object, before this member's watch delivers the operation.
//!
//! Push clusters are judged by version: the operation remembers the resourceVersion the
//! cache held when it was decided (or that the object was absent), and while the cache
//! still shows exactly that, it has not delivered the operation — however long a loaded
//! member takes (at 100 members under a burst, longer than any fixed window; a 10 s one
//! sent 1.57 deletes per member object narrowing a placement and 2.67 applies widening it
//! back). Only equality is compared, never the order of versions. The memory is dropped as
//! soon as the cache moves past that version (see [`super::super::memory`]); [`VERSION_TTL`]
//! is a safety net. Pull clusters have no such version (the agent's report is what they
//! show), so they keep the older rule: the hash, for [`HASH_TTL`].

use std::time::Duration;

use serde_json::Value;

use super::{Observed, recorded_hash};

/// How long a push cluster's operation is remembered at most, when the cache never moves
/// past the version it was decided on (a watch that stalls).
pub const VERSION_TTL: Duration = Duration::from_secs(120);

/// How long a Pull cluster's write is remembered: within this time a cache that does not
/// show the hash is taken to lag, not to disagree.
pub const HASH_TTL: Duration = Duration::from_secs(10);

/// What Flotilla last did to a member object.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LastOp {
    /// Created or updated it with this hash.
    Wrote(String),
    /// Deleted it.
    Deleted,
}

/// What the cache showed when the operation was decided.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Basis {
    /// The cached object's resourceVersion (`None`: absent).
    Version(Option<String>),
    /// Nothing comparable (Pull clusters): judged by the hash.
    Hash,
}

impl Basis {
    /// How long an operation on this basis is remembered at most.
    pub fn ttl(&self) -> Duration {
        match self {
            Basis::Version(_) => VERSION_TTL,
            Basis::Hash => HASH_TTL,
        }
    }

    /// The basis of an operation decided on `observed` in a push cluster.
    pub fn of(observed: &Observed) -> Basis {
        match observed {
            Observed::Present(obj) => Basis::Version(resource_version(obj).map(str::to_owned)),
            _ => Basis::Version(None),
        }
    }
}

/// Flotilla's last operation on one member object, and how long ago it landed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Recent {
    pub op: LastOp,
    pub basis: Basis,
    pub age: Duration,
}

/// What the lag check says about one cluster.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LagCheck {
    /// The cache can be trusted: decide normally.
    Trust,
    /// The cache has not caught up with our own last operation: send nothing now, and look
    /// again after `recheck_after` (when set) in case it never does.
    Skip {
        /// When the memory of the operation expires.
        recheck_after: Option<Duration>,
    },
}

/// Whether to trust a cluster's cache, given our own last operation on the object
/// (`recent`, within its TTL) and what is wanted now (`selected` with `desired_hash`, or
/// removal when not selected). Only the same operation again is held back: a new template
/// is written at once.
pub fn lag_check(
    selected: bool,
    observed: &Observed,
    recent: Option<&Recent>,
    desired_hash: Option<&str>,
) -> LagCheck {
    let Some(recent) = recent.filter(|r| r.age < r.basis.ttl()) else {
        return LagCheck::Trust;
    };
    let repeats = match (&recent.op, selected, desired_hash) {
        (LastOp::Wrote(hash), true, Some(desired)) => hash == desired,
        (LastOp::Deleted, false, _) => true,
        _ => false,
    };
    if !repeats || !still_before(observed, recent) {
        return LagCheck::Trust;
    }
    let until_expiry = recent.basis.ttl().saturating_sub(recent.age) + Duration::from_millis(100);
    let recheck_after = match (&recent.basis, observed) {
        // A Pull cluster's present object shows the agent's next report anyway.
        (Basis::Hash, Observed::Present(_)) => None,
        _ => Some(until_expiry),
    };
    LagCheck::Skip { recheck_after }
}

/// Whether the cache still shows the member object as it was before the operation.
fn still_before(observed: &Observed, recent: &Recent) -> bool {
    match (&recent.basis, observed) {
        (Basis::Version(version), Observed::Absent) => version.is_none(),
        (Basis::Version(version), Observed::Present(obj)) => {
            version.is_some() && resource_version(obj) == version.as_deref()
        }
        (Basis::Hash, Observed::Absent) => matches!(recent.op, LastOp::Wrote(_)),
        (Basis::Hash, Observed::Present(obj)) => match &recent.op {
            LastOp::Wrote(hash) => recorded_hash(obj) != Some(hash.as_str()),
            LastOp::Deleted => false,
        },
        (_, Observed::NotReady | Observed::NotSynced | Observed::Excluded) => false,
    }
}

/// A cached member object's resourceVersion.
pub fn resource_version(obj: &Value) -> Option<&str> {
    obj.pointer("/metadata/resourceVersion")
        .and_then(Value::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn member(version: &str, hash: &str) -> Observed {
        Observed::Present(json!({
            "metadata": {
                "name": "a",
                "resourceVersion": version,
                "annotations": {super::super::HASH_ANNOTATION: hash},
            },
            "data": {"k": "v"},
        }))
    }

    fn recent(op: LastOp, basis: Basis, secs: u64) -> Recent {
        Recent {
            op,
            basis,
            age: Duration::from_secs(secs),
        }
    }

    fn wrote(version: Option<&str>, secs: u64) -> Recent {
        let basis = Basis::Version(version.map(str::to_owned));
        recent(LastOp::Wrote("h1".into()), basis, secs)
    }

    fn deleted(version: &str, secs: u64) -> Recent {
        recent(LastOp::Deleted, Basis::Version(Some(version.into())), secs)
    }

    fn skip(after_ms: u64) -> LagCheck {
        LagCheck::Skip {
            recheck_after: Some(Duration::from_millis(after_ms)),
        }
    }

    #[test]
    fn a_create_is_not_sent_again_while_the_cache_still_shows_no_object_even_after_a_minute() {
        let r = wrote(None, 60);
        assert_eq!(
            lag_check(true, &Observed::Absent, Some(&r), Some("h1")),
            skip(60_100)
        );
        // Once the cache shows any version, it is trusted (normal drift detection).
        let shown = member("7", "h1");
        assert_eq!(
            lag_check(true, &shown, Some(&r), Some("h1")),
            LagCheck::Trust
        );
    }

    #[test]
    fn an_update_waits_while_the_cache_shows_the_version_it_was_decided_on() {
        let r = wrote(Some("5"), 30);
        let before = member("5", "h0");
        assert_eq!(lag_check(true, &before, Some(&r), Some("h1")), skip(90_100));
        // Someone else's later change (another version, even without our hash) is acted on.
        assert_eq!(
            lag_check(true, &member("9", "h0"), Some(&r), Some("h1")),
            LagCheck::Trust
        );
    }

    #[test]
    fn a_delete_is_not_sent_again_while_the_cache_still_holds_the_deleted_version() {
        let r = deleted("5", 40);
        let held = member("5", "h1");
        assert_eq!(lag_check(false, &held, Some(&r), None), skip(80_100));
        // Selected again: not the same operation, decided normally.
        assert_eq!(
            lag_check(true, &held, Some(&r), Some("h1")),
            LagCheck::Trust
        );
        // A new object of that name (another version) is the user's: decided normally.
        let new = member("11", "h1");
        assert_eq!(lag_check(false, &new, Some(&r), None), LagCheck::Trust);
    }

    #[test]
    fn a_new_template_or_an_expired_memory_is_decided_normally() {
        let r = wrote(None, 1);
        assert_eq!(
            lag_check(true, &Observed::Absent, Some(&r), Some("h2")),
            LagCheck::Trust
        );
        assert_eq!(
            lag_check(true, &Observed::Absent, Some(&r), None),
            LagCheck::Trust
        );
        assert_eq!(
            lag_check(false, &Observed::Absent, Some(&r), None),
            LagCheck::Trust
        );
        let old = wrote(None, VERSION_TTL.as_secs());
        assert_eq!(
            lag_check(true, &Observed::Absent, Some(&old), Some("h1")),
            LagCheck::Trust
        );
        assert_eq!(
            lag_check(true, &Observed::Absent, None, Some("h1")),
            LagCheck::Trust
        );
        assert_eq!(
            lag_check(true, &Observed::NotReady, Some(&r), Some("h1")),
            LagCheck::Trust
        );
    }

    #[test]
    fn a_pull_clusters_write_is_judged_by_its_hash_for_ten_seconds() {
        let r = recent(LastOp::Wrote("h1".into()), Basis::Hash, 4);
        assert_eq!(
            lag_check(true, &Observed::Absent, Some(&r), Some("h1")),
            skip(6_100)
        );
        let older = member("5", "h0");
        assert_eq!(
            lag_check(true, &older, Some(&r), Some("h1")),
            LagCheck::Skip {
                recheck_after: None
            }
        );
        assert_eq!(
            lag_check(true, &member("6", "h1"), Some(&r), Some("h1")),
            LagCheck::Trust
        );
        let expired = recent(LastOp::Wrote("h1".into()), Basis::Hash, 10);
        assert_eq!(
            lag_check(true, &Observed::Absent, Some(&expired), Some("h1")),
            LagCheck::Trust
        );
    }

    #[test]
    fn the_basis_is_the_cached_version_or_absence() {
        assert_eq!(
            Basis::of(&member("5", "h1")),
            Basis::Version(Some("5".into()))
        );
        assert_eq!(Basis::of(&Observed::Absent), Basis::Version(None));
    }
}
