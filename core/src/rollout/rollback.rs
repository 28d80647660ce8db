//! Rollback decisions (pure): with `onFailure: Rollback`, which failed clusters of a stopped
//! rollout go back to which revision ([`decide`]); and which recorded revision
//! `flotilla rollout undo` writes back into the template ([`undo_target`]).

use std::collections::BTreeSet;

use flotilla_api::rollout::{ClusterRollout, ClusterRolloutState, OnFailure, RolloutSpec};

/// Failed clusters going back to an earlier revision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollback {
    /// The revision they go back to (the stable one).
    pub to: String,
    /// The failed clusters.
    pub clusters: BTreeSet<String>,
}

/// Whether and where the failed clusters of a rollout go back: `Ok(None)` when nothing
/// goes back (`onFailure: Halt`, or the rollout has not stopped); `Err` says why a wanted
/// rollback cannot happen (no earlier revision reached every cluster, or that revision is
/// the one being rolled out: the failed clusters then keep the target, as with `Halt`).
pub fn decide(
    spec: &RolloutSpec,
    stopped: bool,
    target: &str,
    stable: Option<&str>,
    clusters: &[ClusterRollout],
) -> Result<Option<Rollback>, String> {
    if spec.on_failure != OnFailure::Rollback || !stopped {
        return Ok(None);
    }
    let to = match stable {
        None => {
            return Err(
                "no earlier revision reached every cluster: nothing to roll back to".into(),
            );
        }
        Some(s) if s == target => {
            return Err(format!(
                "the last revision that reached every cluster ({}) is the one rolled out: nothing to roll back to",
                short(s)
            ));
        }
        Some(s) => s.to_string(),
    };
    let failed = clusters
        .iter()
        .filter(|c| c.state == ClusterRolloutState::Failed)
        .map(|c| c.name.clone())
        .collect();
    Ok(Some(Rollback {
        to,
        clusters: failed,
    }))
}

/// The first characters of a revision, for messages.
pub fn short(revision: &str) -> &str {
    &revision[..revision.len().min(10)]
}

/// One recorded revision of a federated object, as `flotilla rollout history` lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordedRevision {
    /// Its number: the federated object's generation that first rolled it out
    /// (`ControllerRevision.revision`).
    pub number: i64,
    /// The revision (hash of the template and overrides).
    pub hash: String,
}

/// The revision `flotilla rollout undo` goes back to: `to` (a revision number) when given;
/// else the last revision that reached every cluster before the current one (`stable`),
/// or, without one, the newest recorded revision other than the current. An unknown
/// number, or no other revision, is an error naming what is recorded.
pub fn undo_target<'a>(
    recorded: &'a [RecordedRevision],
    current: &str,
    stable: Option<&str>,
    to: Option<i64>,
) -> Result<&'a RecordedRevision, String> {
    let numbers = || {
        let mut n: Vec<i64> = recorded.iter().map(|r| r.number).collect();
        n.sort_unstable();
        n.dedup();
        if n.is_empty() {
            return "none".to_string();
        }
        n.iter().map(i64::to_string).collect::<Vec<_>>().join(", ")
    };
    if let Some(n) = to {
        return recorded
            .iter()
            .find(|r| r.number == n)
            .ok_or_else(|| format!("revision {n} is not recorded (recorded: {})", numbers()));
    }
    let stable = stable
        .filter(|s| *s != current)
        .and_then(|s| recorded.iter().find(|r| r.hash == s));
    stable
        .or_else(|| {
            recorded
                .iter()
                .filter(|r| r.hash != current)
                .max_by_key(|r| r.number)
        })
        .ok_or_else(|| {
            format!(
                "no revision before the current one is recorded (recorded: {})",
                numbers()
            )
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn spec(on_failure: &str) -> RolloutSpec {
        serde_json::from_value(json!({"strategy": "Progressive", "onFailure": on_failure}))
            .expect("valid spec.rollout")
    }

    fn clusters(states: &[(&str, ClusterRolloutState)]) -> Vec<ClusterRollout> {
        states
            .iter()
            .map(|(name, state)| ClusterRollout {
                name: name.to_string(),
                state: *state,
                ..ClusterRollout::default()
            })
            .collect()
    }

    #[test]
    fn a_stopped_rollout_sends_only_its_failed_clusters_back_to_the_stable_revision() {
        use ClusterRolloutState::*;
        let entries = clusters(&[
            ("m1", Succeeded),
            ("m2", Failed),
            ("m3", Progressing),
            ("m4", Failed),
            ("m5", Pending),
        ]);
        let got = decide(&spec("Rollback"), true, "r2", Some("r1"), &entries);
        assert_eq!(
            got,
            Ok(Some(Rollback {
                to: "r1".into(),
                clusters: BTreeSet::from(["m2".to_string(), "m4".to_string()]),
            }))
        );
    }

    #[test]
    fn nothing_goes_back_on_halt_or_while_the_rollout_goes_on() {
        let entries = clusters(&[("m1", ClusterRolloutState::Failed)]);
        assert_eq!(
            decide(&spec("Halt"), true, "r2", Some("r1"), &entries),
            Ok(None)
        );
        assert_eq!(
            decide(&RolloutSpec::default(), true, "r2", Some("r1"), &entries),
            Ok(None),
            "Halt is the default"
        );
        assert_eq!(
            decide(&spec("Rollback"), false, "r2", Some("r1"), &entries),
            Ok(None),
            "tolerated failures"
        );
    }

    #[test]
    fn without_an_earlier_complete_revision_there_is_nothing_to_go_back_to() {
        let entries = clusters(&[("m1", ClusterRolloutState::Failed)]);
        let none = decide(&spec("Rollback"), true, "r2", None, &entries).expect_err("no stable");
        assert!(none.contains("nothing to roll back to"), "{none}");
        let same = decide(&spec("Rollback"), true, "r1", Some("r1"), &entries).expect_err("same");
        assert!(same.contains("is the one rolled out"), "{same}");
    }

    fn recorded() -> Vec<RecordedRevision> {
        [(1, "a"), (2, "b"), (4, "c")]
            .iter()
            .map(|(number, hash)| RecordedRevision {
                number: *number,
                hash: hash.to_string(),
            })
            .collect()
    }

    #[test]
    fn undo_goes_to_the_stable_revision_or_else_the_newest_other_one() {
        let r = recorded();
        assert_eq!(
            undo_target(&r, "c", Some("a"), None).map(|r| r.number),
            Ok(1)
        );
        assert_eq!(undo_target(&r, "c", None, None).map(|r| r.number), Ok(2));
        // Back at a: the newest other is c, the stable one being a itself.
        assert_eq!(
            undo_target(&r, "a", Some("a"), None).map(|r| r.number),
            Ok(4)
        );
        // A stable revision whose record is gone: the newest other.
        assert_eq!(
            undo_target(&r, "c", Some("x"), None).map(|r| r.number),
            Ok(2)
        );
    }

    #[test]
    fn undo_to_a_number_takes_that_revision_and_an_unknown_one_is_named() {
        let r = recorded();
        assert_eq!(
            undo_target(&r, "c", Some("a"), Some(2)).map(|r| r.number),
            Ok(2)
        );
        let err = undo_target(&r, "c", None, Some(3)).expect_err("unknown");
        assert_eq!(err, "revision 3 is not recorded (recorded: 1, 2, 4)");
        let only = [RecordedRevision {
            number: 1,
            hash: "a".into(),
        }];
        let err = undo_target(&only, "a", None, None).expect_err("nothing before");
        assert!(err.contains("no revision before the current one"), "{err}");
    }
}
