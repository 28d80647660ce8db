//! What a cluster's taints decide for an object with tolerations (Flotilla extension:
//! `KubeFedCluster.spec.taints`, `spec.placement.tolerations`, whose types and matching are
//! `flotilla_api::taint`): whether it fits, is placed there only as a last resort, may stay
//! but not be placed anew, or must leave, and when ([`verdict`]). Nothing here knows about
//! time zones or clocks: times are Unix seconds handed in by the caller.

use flotilla_api::taint::{Taint, TaintEffect, Toleration, UNREACHABLE_TAINT_KEY};

/// How an object stands with one cluster's taints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TaintVerdict {
    /// Nothing stands in the way.
    Fits,
    /// Only `PreferNoSchedule` taints are not tolerated: chosen last.
    Disfavoured,
    /// New placement is not allowed (an untolerated NoSchedule taint, or a NoExecute taint
    /// tolerated only for a while); an object already there may stay, until `evict_at`
    /// (Unix seconds) when that is set.
    NoNewPlacement {
        /// The taint that keeps new placements off, for messages.
        taint: String,
        /// When an object already there must leave, if ever.
        evict_at: Option<i64>,
    },
    /// An untolerated (or no longer tolerated) NoExecute taint: objects must leave now.
    Evict {
        /// The taint, for messages.
        taint: String,
    },
}

/// The verdict of `taints` for an object with `tolerations`, at `now` (Unix seconds).
/// Objects that do not tolerate the unreachable taint get `default_unreachable_seconds`.
pub fn verdict(
    taints: &[Taint],
    tolerations: &[Toleration],
    default_unreachable_seconds: i64,
    now: i64,
) -> TaintVerdict {
    let mut result = TaintVerdict::Fits;
    for taint in taints {
        let covering: Vec<&Toleration> =
            tolerations.iter().filter(|t| t.tolerates(taint)).collect();
        let next = match taint.effect {
            TaintEffect::PreferNoSchedule if covering.is_empty() => TaintVerdict::Disfavoured,
            TaintEffect::PreferNoSchedule => continue,
            TaintEffect::NoSchedule if covering.is_empty() => TaintVerdict::NoNewPlacement {
                taint: taint.describe(),
                evict_at: None,
            },
            TaintEffect::NoSchedule => continue,
            TaintEffect::NoExecute => {
                let seconds = if covering.is_empty() {
                    if taint.key != UNREACHABLE_TAINT_KEY {
                        return TaintVerdict::Evict {
                            taint: taint.describe(),
                        };
                    }
                    Some(default_unreachable_seconds)
                } else {
                    // The most generous covering toleration wins; absent seconds = forever.
                    covering
                        .iter()
                        .map(|t| t.toleration_seconds)
                        .max_by_key(|s| s.unwrap_or(i64::MAX))
                        .flatten()
                };
                let Some(seconds) = seconds else { continue };
                let added = taint.time_added.as_deref().and_then(unix_seconds);
                let evict_at = added.map_or(i64::MIN, |a| a.saturating_add(seconds.max(0)));
                if evict_at <= now {
                    return TaintVerdict::Evict {
                        taint: taint.describe(),
                    };
                }
                TaintVerdict::NoNewPlacement {
                    taint: taint.describe(),
                    evict_at: Some(evict_at),
                }
            }
        };
        result = worse(result, next);
    }
    result
}

/// The stricter of two verdicts (the earlier eviction among two delayed ones).
fn worse(a: TaintVerdict, b: TaintVerdict) -> TaintVerdict {
    fn rank(v: &TaintVerdict) -> u8 {
        match v {
            TaintVerdict::Fits => 0,
            TaintVerdict::Disfavoured => 1,
            TaintVerdict::NoNewPlacement { .. } => 2,
            TaintVerdict::Evict { .. } => 3,
        }
    }
    match (&a, &b) {
        (
            TaintVerdict::NoNewPlacement { evict_at: ea, .. },
            TaintVerdict::NoNewPlacement { evict_at: eb, .. },
        ) => {
            let earlier_b = match (ea, eb) {
                (None, Some(_)) => true,
                (Some(x), Some(y)) => y < x,
                _ => false,
            };
            if earlier_b { b } else { a }
        }
        _ if rank(&b) > rank(&a) => b,
        _ => a,
    }
}

/// Unix seconds of an RFC 3339 time; `None` when it does not parse.
pub fn unix_seconds(rfc3339: &str) -> Option<i64> {
    rfc3339
        .parse::<k8s_openapi::jiff::Timestamp>()
        .ok()
        .map(|t| t.as_second())
}

/// RFC 3339 (one-second precision, as Kubernetes writes times) of Unix seconds.
pub fn rfc3339(unix: i64) -> String {
    k8s_openapi::jiff::Timestamp::from_second(unix)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::taint::TolerationOperator;

    fn taint(key: &str, value: Option<&str>, effect: TaintEffect, added: Option<i64>) -> Taint {
        Taint {
            key: key.into(),
            value: value.map(Into::into),
            effect,
            time_added: added.map(rfc3339),
        }
    }

    fn tol(
        key: &str,
        op: TolerationOperator,
        effect: Option<TaintEffect>,
        secs: Option<i64>,
    ) -> Toleration {
        Toleration {
            key: Some(key.into()),
            operator: Some(op),
            value: None,
            effect,
            toleration_seconds: secs,
        }
    }

    #[test]
    fn toleration_matching_follows_kubernetes() {
        use TaintEffect::*;
        use TolerationOperator::*;
        let t = taint("gpu", Some("a100"), NoSchedule, None);
        let cases = [
            (tol("gpu", Exists, None, None), true),
            (tol("gpu", Exists, Some(NoExecute), None), false),
            (tol("cpu", Exists, None, None), false),
            (tol("", Exists, None, None), true),
            (
                Toleration {
                    value: Some("a100".into()),
                    ..tol("gpu", Equal, None, None)
                },
                true,
            ),
            (
                Toleration {
                    value: Some("h100".into()),
                    ..tol("gpu", Equal, None, None)
                },
                false,
            ),
            // An empty key with Equal matches nothing.
            (tol("", Equal, None, None), false),
        ];
        for (toleration, want) in cases {
            assert_eq!(toleration.tolerates(&t), want, "{toleration:?}");
        }
    }

    #[test]
    fn verdicts_per_effect_and_toleration() {
        use TaintEffect::*;
        let now = 1_000;
        let drain = taint("drain", None, NoExecute, Some(900));
        let unreachable = taint(UNREACHABLE_TAINT_KEY, None, NoExecute, Some(900));
        let cases: Vec<(Vec<Taint>, Vec<Toleration>, TaintVerdict)> = vec![
            (vec![], vec![], TaintVerdict::Fits),
            (
                vec![taint("soft", None, PreferNoSchedule, None)],
                vec![],
                TaintVerdict::Disfavoured,
            ),
            (
                vec![taint("cordon", None, NoSchedule, None)],
                vec![],
                TaintVerdict::NoNewPlacement {
                    taint: "cordon:NoSchedule".into(),
                    evict_at: None,
                },
            ),
            (
                vec![drain.clone()],
                vec![],
                TaintVerdict::Evict {
                    taint: "drain:NoExecute".into(),
                },
            ),
            // Tolerated forever: fits.
            (
                vec![drain.clone()],
                vec![tol("drain", TolerationOperator::Exists, None, None)],
                TaintVerdict::Fits,
            ),
            // Tolerated for 200 s from 900: may stay until 1100.
            (
                vec![drain.clone()],
                vec![tol("drain", TolerationOperator::Exists, None, Some(200))],
                TaintVerdict::NoNewPlacement {
                    taint: "drain:NoExecute".into(),
                    evict_at: Some(1_100),
                },
            ),
            // Tolerated for 50 s from 900: past.
            (
                vec![drain.clone()],
                vec![tol("drain", TolerationOperator::Exists, None, Some(50))],
                TaintVerdict::Evict {
                    taint: "drain:NoExecute".into(),
                },
            ),
            // The unreachable taint gets the default seconds (300 from 900).
            (
                vec![unreachable.clone()],
                vec![],
                TaintVerdict::NoNewPlacement {
                    taint: "flotilla.io/unreachable:NoExecute".into(),
                    evict_at: Some(1_200),
                },
            ),
            // An explicit toleration replaces the default.
            (
                vec![unreachable],
                vec![tol(
                    UNREACHABLE_TAINT_KEY,
                    TolerationOperator::Exists,
                    Some(NoExecute),
                    Some(10),
                )],
                TaintVerdict::Evict {
                    taint: "flotilla.io/unreachable:NoExecute".into(),
                },
            ),
        ];
        for (taints, tolerations, want) in cases {
            assert_eq!(
                verdict(&taints, &tolerations, 300, now),
                want,
                "{taints:?} {tolerations:?}"
            );
        }
    }

    #[test]
    fn a_tolerated_no_execute_taint_without_time_added_counts_as_old() {
        let t = taint("drain", None, TaintEffect::NoExecute, None);
        let tl = tol("drain", TolerationOperator::Exists, None, Some(3600));
        assert!(matches!(
            verdict(&[t], &[tl], 300, 10),
            TaintVerdict::Evict { .. }
        ));
    }

    #[test]
    fn the_strictest_taint_wins() {
        let taints = [
            taint("soft", None, TaintEffect::PreferNoSchedule, None),
            taint("cordon", None, TaintEffect::NoSchedule, None),
        ];
        assert!(matches!(
            verdict(&taints, &[], 300, 0),
            TaintVerdict::NoNewPlacement { evict_at: None, .. }
        ));
    }

    #[test]
    fn times_round_trip() {
        assert_eq!(unix_seconds(&rfc3339(1_700_000_000)), Some(1_700_000_000));
        assert_eq!(unix_seconds("not a time"), None);
    }
}
