//! The drift decision for one member object that holds what Flotilla last applied (its
//! recorded hash is the desired one) but no longer every desired value: which fields
//! differ once the policy's ignored paths are left out, who wrote them, and whether to
//! repair, report, or stop a fight — and the bounded `status.drift` entry that says so.

use serde_json::Value;

use super::{
    MAX_FIELDS, MAX_MANAGERS, MAX_VALUE_CHARS, Mode, Policy,
    diff::{Difference, differences},
    digest::{ManagerDigest, owners},
    fight::History,
};
use crate::redact;
use flotilla_api::drift::{ClusterDrift, DriftField, DriftManager, DriftState};

/// What one member object's drift calls for.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    /// Every desired value is in place.
    None,
    /// Only ignored fields differ: neither repaired nor reported.
    Ignored,
    /// Fields differ: repair, report or stop.
    Drift(Finding),
}

/// Drifted fields, their writers, and what to do.
#[derive(Clone, Debug, PartialEq)]
pub struct Finding {
    /// What to do.
    pub state: DriftState,
    /// The fields that differ (not ignored ones).
    pub differences: Vec<Difference>,
    /// The managers owning them now, latest first.
    pub managers: Vec<DriftManager>,
}

impl Finding {
    /// The drifted fields' JSON pointers.
    pub fn pointers(&self) -> Vec<&str> {
        self.differences
            .iter()
            .map(|d| d.pointer.as_str())
            .collect()
    }

    /// The writer a fight is counted against (the latest owner; `unknown` without one).
    pub fn writer(&self) -> &str {
        self.managers
            .first()
            .map_or("unknown", |m| m.manager.as_str())
    }
}

/// What the decision reads about one member object.
pub struct Input<'a> {
    /// The desired object (Flotilla's applied set).
    pub desired: &'a Value,
    /// The member object as cached.
    pub live: &'a Value,
    /// The cached digest of its `managedFields`.
    pub digest: &'a [ManagerDigest],
    /// The federated object's policy.
    pub policy: &'a Policy,
    /// Fields left to the member however the policy reads (`spec.retainReplicas`).
    pub retained: &'a [&'a str],
    /// This member object's recent repairs.
    pub history: &'a History,
    /// The cluster's previous `status.drift` entry.
    pub previous: Option<&'a ClusterDrift>,
    /// Unix seconds.
    pub now: i64,
}

/// The verdict for a member object whose recorded hash is the desired one.
pub fn decide(input: &Input<'_>) -> Verdict {
    let all = differences(input.desired, input.live);
    if all.is_empty() {
        return Verdict::None;
    }
    let differences: Vec<Difference> = all
        .into_iter()
        .filter(|d| !input.policy.ignores(&d.pointer))
        .filter(|d| {
            !input
                .retained
                .iter()
                .any(|r| super::is_within(&d.pointer, r))
        })
        .collect();
    if differences.is_empty() {
        return Verdict::Ignored;
    }
    let pointers: Vec<&str> = differences.iter().map(|d| d.pointer.as_str()).collect();
    let managers = owners(input.digest, &pointers);
    drop(pointers);
    let mut finding = Finding {
        state: DriftState::Detected,
        differences,
        managers,
    };
    let fight = || {
        still_fighting(input.previous, &finding)
            || input
                .history
                .is_fight(input.now, finding.writer(), &finding.pointers())
    };
    let state = match input.policy.mode {
        Mode::Report => DriftState::Detected,
        Mode::Repair if fight() => DriftState::Fight,
        Mode::Repair => DriftState::Repaired,
    };
    finding.state = state;
    Verdict::Drift(finding)
}

/// A fight stays declared while the same fields differ: repairing resumes once the member
/// holds the desired values again or the template changes.
fn still_fighting(previous: Option<&ClusterDrift>, finding: &Finding) -> bool {
    previous.is_some_and(|p| {
        DriftState::parse(&p.state) == Some(DriftState::Fight)
            && p.more_fields == 0
            && p.fields.len() == finding.differences.len()
            && p.fields
                .iter()
                .zip(&finding.differences)
                .all(|(f, d)| f.path == d.path())
    })
}

/// The `status.drift` entry for a finding. `repaired`: the repair write succeeded (a failed
/// one is reported as `Detected`). `secret`: the object is a Secret (values redacted).
/// The detection time is kept from `previous` while nothing about the drift changed, so an
/// unchanged drift rewrites nothing.
pub fn entry(
    cluster: &str,
    finding: &Finding,
    repaired: bool,
    secret: bool,
    previous: Option<&ClusterDrift>,
    now: &str,
) -> ClusterDrift {
    let state = match finding.state {
        DriftState::Repaired if !repaired => DriftState::Detected,
        s => s,
    };
    let fields: Vec<DriftField> = finding
        .differences
        .iter()
        .take(MAX_FIELDS)
        .map(|d| DriftField {
            path: d.path(),
            desired: shown(&d.pointer, Some(&d.desired), secret),
            live: shown(&d.pointer, d.live.as_ref(), secret),
        })
        .collect();
    let more_fields = finding.differences.len().saturating_sub(MAX_FIELDS) as u32;
    let managers: Vec<DriftManager> = finding
        .managers
        .iter()
        .take(MAX_MANAGERS)
        .cloned()
        .collect();
    let mut drift = ClusterDrift {
        cluster: cluster.to_string(),
        state: state.as_str().to_string(),
        fields,
        more_fields,
        managers,
        detected_at: now.to_string(),
        repaired_at: (state == DriftState::Repaired).then(|| now.to_string()),
    };
    if state != DriftState::Repaired
        && let Some(p) = previous
        && p.state == drift.state
        && p.fields == drift.fields
        && p.more_fields == drift.more_fields
        && p.managers == drift.managers
    {
        drift.detected_at = p.detected_at.clone();
    }
    drift
}

/// A value as `status.drift` shows it: JSON, cut to [`MAX_VALUE_CHARS`], a Secret's
/// `data`/`stringData` redacted, `<absent>` for a missing field.
fn shown(pointer: &str, value: Option<&Value>, secret: bool) -> String {
    let Some(value) = value else {
        return "<absent>".to_string();
    };
    let value = if secret {
        redact::redact_override_value(pointer, value)
    } else {
        value.clone()
    };
    let text = match &value {
        Value::String(s) => s.clone(),
        other => other.to_string(),
    };
    if text.chars().count() <= MAX_VALUE_CHARS {
        return text;
    }
    let cut: String = text.chars().take(MAX_VALUE_CHARS).collect();
    format!("{cut}…")
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::drift::fight::Repair;

    fn digest() -> Vec<ManagerDigest> {
        vec![ManagerDigest {
            manager: "kubectl-scale".into(),
            operation: "Update".into(),
            time: "2026-01-01T00:00:00Z".into(),
            fields: vec!["/spec/replicas".into()],
        }]
    }

    fn decide_with(policy: &Policy, history: &History, previous: Option<&ClusterDrift>) -> Verdict {
        let desired = json!({"kind": "Deployment", "spec": {"replicas": 2, "paused": false}});
        let live = json!({"spec": {"replicas": 5, "paused": false}, "status": {"replicas": 5}});
        decide(&Input {
            desired: &desired,
            live: &live,
            digest: &digest(),
            policy,
            retained: &[],
            history,
            previous,
            now: 100,
        })
    }

    fn finding(v: Verdict) -> Finding {
        match v {
            Verdict::Drift(f) => f,
            other => panic!("expected drift, got {other:?}"),
        }
    }

    #[test]
    fn a_scaled_member_is_repaired_naming_the_writer() {
        let f = finding(decide_with(&Policy::default(), &History::default(), None));
        assert_eq!(f.state, DriftState::Repaired);
        assert_eq!(f.pointers(), ["/spec/replicas"]);
        assert_eq!(f.writer(), "kubectl-scale");
        let e = entry("m1", &f, true, false, None, "T");
        assert_eq!(e.state, "Repaired");
        assert_eq!(e.repaired_at.as_deref(), Some("T"));
        assert_eq!(
            e.fields,
            [DriftField {
                path: "spec.replicas".into(),
                desired: "2".into(),
                live: "5".into()
            }]
        );
        assert_eq!(
            e.summary(),
            "spec.replicas changed by kubectl-scale (Update)"
        );
    }

    #[test]
    fn under_report_the_drift_is_detected_and_its_time_kept_while_unchanged() {
        let policy = Policy {
            mode: Mode::Report,
            ignore: vec![],
        };
        let f = finding(decide_with(&policy, &History::default(), None));
        assert_eq!(f.state, DriftState::Detected);
        let first = entry("m1", &f, false, false, None, "T1");
        assert_eq!(first.repaired_at, None);
        let again = entry("m1", &f, false, false, Some(&first), "T2");
        assert_eq!(again, first, "an unchanged drift is the same entry");
    }

    #[test]
    fn ignored_fields_are_neither_repaired_nor_reported() {
        let policy = Policy {
            mode: Mode::Repair,
            ignore: vec!["/spec/replicas".into()],
        };
        assert_eq!(
            decide_with(&policy, &History::default(), None),
            Verdict::Ignored
        );
    }

    #[test]
    fn a_repair_that_keeps_being_undone_becomes_a_fight_and_stays_one() {
        let mut history = History::default();
        for at in 90..94 {
            history.record(Repair {
                at,
                manager: "kubectl-scale".into(),
                pointers: vec!["/spec/replicas".into()],
            });
        }
        let f = finding(decide_with(&Policy::default(), &history, None));
        assert_eq!(f.state, DriftState::Fight);
        let e = entry("m1", &f, false, false, None, "T");
        assert_eq!(
            (e.state.as_str(), e.repaired_at.as_deref()),
            ("Fight", None)
        );
        // The fight outlives the memory of the repairs (a restart) while the field differs.
        let f = finding(decide_with(
            &Policy::default(),
            &History::default(),
            Some(&e),
        ));
        assert_eq!(f.state, DriftState::Fight);
    }

    #[test]
    fn a_failed_repair_is_reported_as_detected() {
        let f = finding(decide_with(&Policy::default(), &History::default(), None));
        let e = entry("m1", &f, false, false, None, "T");
        assert_eq!((e.state.as_str(), e.repaired_at), ("Detected", None));
    }

    #[test]
    fn a_secrets_values_are_redacted_and_long_values_cut() {
        let f = Finding {
            state: DriftState::Repaired,
            differences: vec![
                Difference {
                    pointer: "/data/password".into(),
                    desired: json!("aGVsbG8="),
                    live: Some(json!("d29ybGQh")),
                },
                Difference {
                    pointer: "/metadata/labels/x".into(),
                    desired: json!("y".repeat(500)),
                    live: None,
                },
            ],
            managers: vec![],
        };
        let e = entry("m1", &f, true, true, None, "T");
        assert_eq!(e.fields[0].desired, "<redacted: 5 bytes>");
        assert_eq!(e.fields[0].live, "<redacted: 6 bytes>");
        assert_eq!(e.fields[1].desired.chars().count(), MAX_VALUE_CHARS + 1);
        assert_eq!(e.fields[1].live, "<absent>");
        assert!(e.summary().ends_with("changed by an unknown writer"));
    }

    #[test]
    fn many_fields_are_bounded_and_counted() {
        let differences = (0..20)
            .map(|i| Difference {
                pointer: format!("/data/k{i}"),
                desired: json!("a"),
                live: Some(json!("b")),
            })
            .collect();
        let f = Finding {
            state: DriftState::Detected,
            differences,
            managers: vec![],
        };
        let e = entry("m1", &f, false, false, None, "T");
        assert_eq!(e.fields.len(), MAX_FIELDS);
        assert_eq!(e.more_fields, 20 - MAX_FIELDS as u32);
    }
}
