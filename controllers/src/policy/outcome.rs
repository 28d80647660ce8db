//! What the policy controller decided for each native object (which policy propagates it,
//! which lost, what blocked it, which override policies applied or failed), and the
//! status every policy gets from those decisions. Pure: the reconcile records, the status
//! pass reads.

use std::collections::BTreeMap;

use flotilla_api::federated::FederatedCondition;
use flotilla_api::policy::{ObjectRef, PolicyConflict, PolicyStatus};
use flotilla_core::policy_select::SelectorError;

/// Objects listed by name in a policy's status; the count covers the rest.
pub const MAX_LISTED: usize = 100;

/// The four policy kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyKind {
    /// `PropagationPolicy`.
    Propagation,
    /// `ClusterPropagationPolicy`.
    ClusterPropagation,
    /// `OverridePolicy`.
    Override,
    /// `ClusterOverridePolicy`.
    ClusterOverride,
}

impl PolicyKind {
    /// The kind's name.
    pub fn as_str(self) -> &'static str {
        match self {
            PolicyKind::Propagation => "PropagationPolicy",
            PolicyKind::ClusterPropagation => "ClusterPropagationPolicy",
            PolicyKind::Override => "OverridePolicy",
            PolicyKind::ClusterOverride => "ClusterOverridePolicy",
        }
    }
}

/// One policy.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyId {
    /// Its kind.
    pub kind: PolicyKind,
    /// Its namespace (`None` for the cluster-scoped kinds).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

impl std::fmt::Display for PolicyId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{} {ns}/{}", self.kind.as_str(), self.name),
            None => write!(f, "{} {}", self.kind.as_str(), self.name),
        }
    }
}

/// Why a chosen policy does not propagate an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Blocked {
    /// A Federated&lt;Kind&gt; of the same name that no policy made exists: it wins.
    ExplicitFederatedObject,
    /// The host runs the object itself (another writer owns its status).
    HostRunsWorkload,
}

impl Blocked {
    /// The reason in the policy's status and Events.
    pub fn as_str(self) -> &'static str {
        match self {
            Blocked::ExplicitFederatedObject => "ExplicitFederatedObject",
            Blocked::HostRunsWorkload => "HostRunsWorkload",
        }
    }
}

/// The decision about one native object.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    /// The object.
    pub object: ObjectRef,
    /// The winning propagation policy.
    pub winner: Option<PolicyId>,
    /// The other propagation policies that select it.
    pub losers: Vec<PolicyId>,
    /// Why the winner does not propagate it, with a message.
    pub blocked: Option<(Blocked, String)>,
    /// The override policies applied to it.
    pub overridden_by: Vec<PolicyId>,
    /// Override policies that failed on it, with the message.
    pub override_errors: Vec<(PolicyId, String)>,
}

/// A policy's own problems, found without looking at objects.
#[derive(Debug, Clone, Default)]
pub struct PolicyProblems {
    /// Selector problems.
    pub selectors: Vec<SelectorError>,
}

/// The status of `policy` from every object's outcome; `prev` keeps condition times.
pub fn policy_status<'a>(
    policy: &PolicyId,
    generation: i64,
    problems: &PolicyProblems,
    outcomes: impl Iterator<Item = &'a Outcome>,
    prev: Option<&PolicyStatus>,
    now: &str,
) -> PolicyStatus {
    let mut selected = Vec::new();
    let mut conflicts = Vec::new();
    let mut override_errors = Vec::new();
    for o in outcomes {
        if o.winner.as_ref() == Some(policy) {
            match &o.blocked {
                Some((b, msg)) => conflicts.push(conflict(&o.object, b.as_str(), msg.clone())),
                None => selected.push(o.object.clone()),
            }
        } else if o.losers.contains(policy) {
            let winner = o
                .winner
                .as_ref()
                .map_or_else(String::new, ToString::to_string);
            conflicts.push(conflict(
                &o.object,
                "LostToPolicy",
                format!("{winner} propagates it"),
            ));
        }
        if o.overridden_by.contains(policy) {
            selected.push(o.object.clone());
        }
        for (p, msg) in &o.override_errors {
            if p == policy {
                override_errors.push(msg.clone());
            }
        }
    }
    selected.sort();
    selected.dedup();
    conflicts.sort_by(|a, b| a.object.cmp(&b.object));
    let (status, reason, message) = if let Some(e) = problems.selectors.first() {
        (
            "False",
            e.reason(),
            joined(problems.selectors.iter().map(ToString::to_string)),
        )
    } else if !override_errors.is_empty() {
        (
            "False",
            "InvalidOverride",
            joined(override_errors.into_iter()),
        )
    } else {
        ("True", "Applied", String::new())
    };
    let prev_ready = prev.and_then(|p| p.conditions.iter().find(|c| c.type_ == "Ready"));
    PolicyStatus {
        observed_generation: generation,
        conditions: vec![FederatedCondition::updated(
            prev_ready,
            "Ready",
            status,
            reason.to_string(),
            message,
            now,
        )],
        selected_count: i64::try_from(selected.len()).unwrap_or(i64::MAX),
        selected: selected.into_iter().take(MAX_LISTED).collect(),
        conflicts: conflicts.into_iter().take(MAX_LISTED).collect(),
    }
}

fn conflict(object: &ObjectRef, reason: &str, message: String) -> PolicyConflict {
    PolicyConflict {
        object: object.clone(),
        reason: reason.into(),
        message,
    }
}

fn joined(messages: impl Iterator<Item = String>) -> String {
    let all: Vec<String> = messages.collect();
    let mut text = all.join("; ");
    if text.len() > 1000 {
        let mut cut = 1000;
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        text.truncate(cut);
        text.push('…');
    }
    text
}

/// Whether two statuses differ in more than the condition's update time.
pub fn status_changed(prev: Option<&PolicyStatus>, next: &PolicyStatus) -> bool {
    let Some(prev) = prev else { return true };
    let strip = |s: &PolicyStatus| {
        let mut s = s.clone();
        for c in &mut s.conditions {
            c.last_update_time.clear();
        }
        s
    };
    strip(prev) != strip(next)
}

/// The outcomes of every object, by the object's key.
pub type Outcomes = BTreeMap<(String, String, String), Outcome>;

#[cfg(test)]
mod tests {
    use super::*;

    fn id(kind: PolicyKind, name: &str) -> PolicyId {
        PolicyId {
            kind,
            namespace: Some("demo".into()),
            name: name.into(),
        }
    }

    fn obj(name: &str) -> ObjectRef {
        ObjectRef {
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            namespace: Some("demo".into()),
            name: name.into(),
        }
    }

    #[test]
    fn a_policy_lists_what_it_propagates_and_what_it_lost_or_was_blocked_from() {
        let a = id(PolicyKind::Propagation, "a");
        let b = id(PolicyKind::Propagation, "b");
        let outcomes = [
            Outcome {
                object: obj("web"),
                winner: Some(a.clone()),
                losers: vec![b.clone()],
                ..Default::default()
            },
            Outcome {
                object: obj("api"),
                winner: Some(a.clone()),
                blocked: Some((
                    Blocked::ExplicitFederatedObject,
                    "FederatedDeployment demo/api exists".into(),
                )),
                ..Default::default()
            },
        ];
        let sa = policy_status(
            &a,
            2,
            &PolicyProblems::default(),
            outcomes.iter(),
            None,
            "t",
        );
        assert_eq!(sa.selected, vec![obj("web")]);
        assert_eq!(sa.selected_count, 1);
        assert_eq!(sa.conflicts.len(), 1);
        assert_eq!(sa.conflicts[0].reason, "ExplicitFederatedObject");
        assert_eq!(sa.conditions[0].status, "True");
        assert_eq!(sa.observed_generation, 2);
        let sb = policy_status(
            &b,
            1,
            &PolicyProblems::default(),
            outcomes.iter(),
            None,
            "t",
        );
        assert_eq!(sb.selected_count, 0);
        assert_eq!(sb.conflicts[0].reason, "LostToPolicy");
        assert!(
            sb.conflicts[0].message.contains("PropagationPolicy demo/a"),
            "{:?}",
            sb.conflicts
        );
    }

    #[test]
    fn a_failing_override_makes_its_policy_not_ready_with_the_message() {
        let op = id(PolicyKind::Override, "images");
        let outcomes = [Outcome {
            object: obj("web"),
            override_errors: vec![(op.clone(), "path /spec/x does not exist".into())],
            ..Default::default()
        }];
        let s = policy_status(
            &op,
            1,
            &PolicyProblems::default(),
            outcomes.iter(),
            None,
            "t",
        );
        assert_eq!(s.conditions[0].status, "False");
        assert_eq!(s.conditions[0].reason, "InvalidOverride");
        assert!(s.conditions[0].message.contains("/spec/x"));
    }

    #[test]
    fn selector_problems_come_first() {
        let p = id(PolicyKind::Propagation, "p");
        let problems = PolicyProblems {
            selectors: vec![SelectorError::MissingType { index: 0 }],
        };
        let s = policy_status(&p, 1, &problems, [].iter(), None, "t");
        assert_eq!(
            (
                s.conditions[0].status.as_str(),
                s.conditions[0].reason.as_str()
            ),
            ("False", "InvalidSelector")
        );
    }

    #[test]
    fn only_a_real_change_is_a_change() {
        let p = id(PolicyKind::Propagation, "p");
        let first = policy_status(&p, 1, &PolicyProblems::default(), [].iter(), None, "t1");
        let again = policy_status(
            &p,
            1,
            &PolicyProblems::default(),
            [].iter(),
            Some(&first),
            "t2",
        );
        assert!(!status_changed(Some(&first), &again));
        let bumped = policy_status(
            &p,
            2,
            &PolicyProblems::default(),
            [].iter(),
            Some(&first),
            "t2",
        );
        assert!(status_changed(Some(&first), &bumped));
        assert!(status_changed(None, &first));
    }
}
