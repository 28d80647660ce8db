//! A ServiceExport's conditions as the API wants them (`metav1.Condition`): the wanted
//! ones with `lastTransitionTime` kept while a condition's status stays, and nothing to
//! write when they already say the same. Pure.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

use super::plan::WantedCondition;

fn status(b: bool) -> &'static str {
    if b { "True" } else { "False" }
}

/// The conditions to write, or `None` when `existing` already says what `wanted` does
/// (same types, statuses, reasons, messages and observed generation).
pub fn export_conditions(
    existing: &[Condition],
    wanted: &[WantedCondition],
    generation: Option<i64>,
    now: &Time,
) -> Option<Vec<Condition>> {
    let next: Vec<Condition> = wanted
        .iter()
        .map(|w| {
            let old = existing.iter().find(|c| c.type_ == w.type_);
            let since = match old {
                Some(o) if o.status == status(w.status) => o.last_transition_time.clone(),
                _ => now.clone(),
            };
            Condition {
                type_: w.type_.to_string(),
                status: status(w.status).to_string(),
                reason: w.reason.clone(),
                message: w.message.clone(),
                observed_generation: generation,
                last_transition_time: since,
            }
        })
        .collect();
    (next != existing).then_some(next)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn wanted(status: bool, reason: &str) -> Vec<WantedCondition> {
        vec![WantedCondition {
            type_: "Valid",
            status,
            reason: reason.into(),
            message: String::new(),
        }]
    }

    fn at(s: &str) -> Time {
        serde_json::from_value(serde_json::json!(s)).expect("a time")
    }

    #[test]
    fn unchanged_conditions_are_not_written_and_keep_their_transition_time() {
        let t0 = at("2026-11-22T10:00:00Z");
        let t1 = at("2026-11-22T11:00:00Z");
        let first = export_conditions(&[], &wanted(true, "Valid"), Some(1), &t0).expect("new");
        assert_eq!(first[0].status, "True");
        assert_eq!(
            export_conditions(&first, &wanted(true, "Valid"), Some(1), &t1),
            None
        );
        // A new generation is written, with the time the status last changed.
        let bumped = export_conditions(&first, &wanted(true, "Valid"), Some(2), &t1).expect("new");
        assert_eq!(bumped[0].last_transition_time, t0);
        // A flipped status moves the time.
        let flipped =
            export_conditions(&first, &wanted(false, "NoService"), Some(1), &t1).expect("new");
        assert_eq!(flipped[0].last_transition_time, t1);
        assert_eq!(flipped[0].reason, "NoService");
    }
}
