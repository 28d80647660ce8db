//! One-off rebalancing of a ReplicaSchedulingPreference (`flotilla rebalance`, the
//! `scheduling.flotilla.io/rebalance` annotation): whether a request is waiting, whether
//! the target's rollout lets it happen, and how to say what changed. Shared by the CLI,
//! which refuses early, and the RSP controller, which decides. Pure.

use std::collections::BTreeMap;

use flotilla_api::{
    federated::FederatedStatus,
    rollout::RolloutReason,
    scheduling::{REBALANCE_ANNOTATION, ReplicaSchedulingPreference},
};

/// The rebalance request on `rsp` not answered yet in its status (its token).
pub fn pending(rsp: &ReplicaSchedulingPreference) -> Option<&str> {
    let asked = rsp
        .metadata
        .annotations
        .as_ref()?
        .get(REBALANCE_ANNOTATION)?;
    let answered = rsp
        .status
        .as_ref()
        .and_then(|s| s.rebalance.as_ref())
        .is_some_and(|r| r.request == *asked);
    (!asked.is_empty() && !answered).then_some(asked.as_str())
}

/// Whether the target's rollout lets its replicas move now: `Err` with the reason when it
/// is in progress, paused, failed, rolled back or invalid. A target without a rollout (no
/// `Rollout` condition) may always move.
pub fn rollout_gate(status: &FederatedStatus) -> Result<(), String> {
    let Some(c) = status.rollout_condition() else {
        return Ok(());
    };
    if c.reason == RolloutReason::Complete.as_str() {
        return Ok(());
    }
    let message = if c.message.is_empty() {
        String::new()
    } else {
        format!(": {}", c.message)
    };
    Err(format!(
        "the target's rollout is {}{message}; rebalance once it is Complete",
        c.reason
    ))
}

/// The division before and after, for the status message: `member1 4→7, member2 6→3`, or
/// that nothing changed.
pub fn describe(before: &BTreeMap<String, i64>, after: &BTreeMap<String, i64>) -> String {
    let mut names: Vec<&String> = before.keys().chain(after.keys()).collect();
    names.sort();
    names.dedup();
    let moved: Vec<String> = names
        .iter()
        .filter_map(|n| {
            let (b, a) = (
                before.get(*n).copied().unwrap_or(0),
                after.get(*n).copied().unwrap_or(0),
            );
            (a != b).then(|| format!("{n} {b}→{a}"))
        })
        .collect();
    if moved.is_empty() {
        "the division already matches the current capacity".into()
    } else {
        format!("replicas moved: {}", moved.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use flotilla_api::{
        federated::FederatedCondition,
        rollout::ROLLOUT_CONDITION,
        scheduling::{
            RebalanceOutcome, RebalanceStatus, ReplicaSchedulingPreferenceSpec,
            ReplicaSchedulingPreferenceStatus,
        },
    };

    use super::*;

    fn rsp(asked: Option<&str>, answered: Option<&str>) -> ReplicaSchedulingPreference {
        let mut r =
            ReplicaSchedulingPreference::new("web", ReplicaSchedulingPreferenceSpec::default());
        r.metadata.annotations =
            asked.map(|a| BTreeMap::from([(REBALANCE_ANNOTATION.to_string(), a.to_string())]));
        r.status = Some(ReplicaSchedulingPreferenceStatus {
            rebalance: answered.map(|a| RebalanceStatus {
                request: a.into(),
                outcome: RebalanceOutcome::Rebalanced,
                message: String::new(),
            }),
            ..Default::default()
        });
        r
    }

    #[test]
    fn a_request_is_pending_until_its_token_is_answered() {
        assert_eq!(pending(&rsp(None, None)), None);
        assert_eq!(pending(&rsp(Some("t1"), None)), Some("t1"));
        assert_eq!(pending(&rsp(Some("t1"), Some("t1"))), None);
        assert_eq!(pending(&rsp(Some("t2"), Some("t1"))), Some("t2"));
        assert_eq!(
            pending(&rsp(Some(""), None)),
            None,
            "an empty token asks nothing"
        );
    }

    fn with_rollout(reason: &str, message: &str) -> FederatedStatus {
        FederatedStatus {
            conditions: vec![FederatedCondition {
                type_: ROLLOUT_CONDITION.into(),
                status: RolloutReason::Complete.status().into(),
                reason: reason.into(),
                message: message.into(),
                ..Default::default()
            }],
            ..Default::default()
        }
    }

    #[test]
    fn only_a_complete_rollout_or_none_lets_replicas_move() {
        assert!(rollout_gate(&FederatedStatus::default()).is_ok());
        assert!(rollout_gate(&with_rollout("Complete", "2 of 2")).is_ok());
        for reason in [
            "Progressing",
            "Paused",
            "Failed",
            "RolledBack",
            "InvalidSpec",
        ] {
            let e = rollout_gate(&with_rollout(reason, "wave 1/2")).expect_err(reason);
            assert!(e.contains(reason) && e.contains("wave 1/2"), "{e}");
        }
    }

    #[test]
    fn the_message_names_each_moved_cluster() {
        let before = BTreeMap::from([("a".to_string(), 4), ("b".to_string(), 6)]);
        let after = BTreeMap::from([("a".to_string(), 7), ("b".to_string(), 3)]);
        assert_eq!(describe(&before, &after), "replicas moved: a 4→7, b 6→3");
        assert!(describe(&before, &before).contains("already matches"));
        let gained = BTreeMap::from([("c".to_string(), 1)]);
        assert_eq!(describe(&BTreeMap::new(), &gained), "replicas moved: c 0→1");
    }
}
