//! How `flotilla status` and `flotilla diff` show `status.drift`: one line per cluster
//! whose member object another writer changed — what became of it, the fields with their
//! desired and live values (already redacted and bounded by the controller), who wrote
//! them and when ([`flotilla_api::drift::ClusterDrift::describe`], which the dashboard
//! shows too). Pure text from the status; no reads of its own.

use flotilla_api::federated::FederatedStatus;

/// Drift lines of every object that has any (`object`: how the object is named).
pub fn drift_lines<'a>(objects: impl IntoIterator<Item = (String, &'a FederatedStatus)>) -> String {
    let mut out = String::new();
    for (object, status) in objects {
        for d in &status.drift {
            out.push_str(&format!("{object}: {}\n", d.describe()));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use flotilla_api::drift::{ClusterDrift, DriftField, DriftManager};

    use super::*;

    #[test]
    fn a_drift_line_names_cluster_fields_values_writer_and_times() {
        let status = FederatedStatus {
            drift: vec![ClusterDrift {
                cluster: "member1".into(),
                state: "Repaired".into(),
                fields: vec![DriftField {
                    path: "spec.replicas".into(),
                    desired: "2".into(),
                    live: "5".into(),
                }],
                more_fields: 0,
                managers: vec![DriftManager {
                    manager: "kubectl-scale".into(),
                    operation: "Update".into(),
                    time: "T0".into(),
                }],
                detected_at: "T1".into(),
                repaired_at: Some("T1".into()),
            }],
            ..FederatedStatus::default()
        };
        assert_eq!(
            drift_lines([("demo/web".to_string(), &status)]),
            "demo/web: drift in member1 Repaired: spec.replicas (2 → 5) changed by kubectl-scale (Update) at T0; detected T1, repaired T1\n"
        );
        assert_eq!(
            drift_lines([("x".to_string(), &FederatedStatus::default())]),
            ""
        );
    }
}
