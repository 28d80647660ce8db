//! The scheduling part of `flotilla status`: for each object whose placement uses
//! Flotilla's scheduling fields, the decided clusters, the `Scheduled` condition and the
//! moves under way or done. Pure text from the objects' status.

use flotilla_api::federated::FederatedStatus;

/// Lines describing each scheduled object's decision, from (object as shown, its status)
/// pairs; empty when no object has one.
pub fn scheduling_lines<'a>(
    objects: impl IntoIterator<Item = (String, &'a FederatedStatus)>,
) -> String {
    let mut out = String::new();
    for (object, status) in objects {
        let Some(p) = &status.placement else {
            continue;
        };
        let decided: Vec<&str> = p.clusters.iter().map(|c| c.name.as_str()).collect();
        let (cond, why) = match status.scheduled() {
            Some(c) => (
                format!("Scheduled={}", c.status),
                if c.status == "True" {
                    String::new()
                } else {
                    format!(" ({}: {})", c.reason, c.message)
                },
            ),
            None => ("Scheduled=Unknown".to_string(), String::new()),
        };
        let list = if decided.is_empty() {
            "no cluster".to_string()
        } else {
            decided.join(", ")
        };
        out.push_str(&format!("{object}: {cond} on {list}{why}\n"));
        for m in &p.moves {
            let to = m
                .replacement
                .as_deref()
                .map_or_else(|| "no replacement".to_string(), |r| format!("to {r}"));
            out.push_str(&format!(
                "  {} {} {to} since {}: {}\n",
                m.cluster, m.reason, m.since, m.message
            ));
        }
    }
    if out.is_empty() {
        out
    } else {
        format!("\nSCHEDULING\n{out}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_api::federated::{
        ClusterReference, FederatedCondition, PlacementMove, PlacementStatus,
    };

    fn state(
        placement: Option<PlacementStatus>,
        condition: Option<(&str, &str, &str)>,
    ) -> (String, FederatedStatus) {
        (
            "federatedconfigmap/web -n demo".into(),
            FederatedStatus {
                placement,
                conditions: condition
                    .map(|(s, r, m)| FederatedCondition {
                        type_: "Scheduled".into(),
                        status: s.into(),
                        reason: r.into(),
                        message: m.into(),
                        ..FederatedCondition::default()
                    })
                    .into_iter()
                    .collect(),
                ..FederatedStatus::default()
            },
        )
    }

    #[test]
    fn objects_without_a_decision_add_nothing() {
        let (object, status) = state(None, None);
        assert_eq!(scheduling_lines([(object, &status)]), "");
    }

    #[test]
    fn the_decision_its_condition_and_moves_are_shown() {
        let placement = PlacementStatus {
            clusters: vec![ClusterReference {
                name: "member2".into(),
            }],
            moves: vec![PlacementMove {
                cluster: "member1".into(),
                reason: "Evicted".into(),
                replacement: None,
                since: "2026-01-01T00:00:00Z".into(),
                message: "tainted drain:NoExecute".into(),
            }],
        };
        let (object, status) = state(
            Some(placement),
            Some(("False", "Unschedulable", "member1 must be left")),
        );
        let text = scheduling_lines([(object, &status)]);
        assert!(
            text.contains("Scheduled=False on member2 (Unschedulable: member1 must be left)"),
            "{text}"
        );
        assert!(
            text.contains(
                "member1 Evicted no replacement since 2026-01-01T00:00:00Z: tainted drain:NoExecute"
            ),
            "{text}"
        );
    }
}
