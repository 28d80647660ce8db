//! The object page's Replicas section in HTML: the RSP in brief, a row per cluster (replicas,
//! reason, its numbers, the preference that applies, the capacity the division read), and
//! the division the scheduler would make now when it is not the recorded one.

use std::fmt::Write as _;

use flotilla_api::scheduling::ClusterDivision;

use super::escape;
use crate::view::replicas::Replicas;

/// Appends the section.
pub fn section(out: &mut String, r: &Replicas) {
    let _ = write!(
        out,
        r#"<section id="replicas"><h3>Replicas</h3><p>ReplicaSchedulingPreference <strong>{}</strong>: {}.</p><p class="msg" id="division-source">{}</p>"#,
        escape(&r.rsp),
        escape(&r.summary),
        if r.recorded {
            "As the scheduler recorded it in the RSP's status."
        } else {
            "Not recorded yet: the division the scheduler would make, as <code>flotilla diff</code> previews it."
        }
    );
    out.push_str(
        r#"<table id="division"><thead><tr><th scope="col">Cluster</th><th scope="col">Replicas</th><th scope="col">Reason</th><th scope="col">Why</th><th scope="col">Preference</th><th scope="col" title="kubefed's estimate: pods unschedulable past the threshold">Capacity estimate</th><th scope="col" title="Replicas of the pod template that fit the cluster's free room">Available replicas</th></tr></thead><tbody>"#,
    );
    for row in &r.rows {
        let d = &row.division;
        let _ = write!(
            out,
            r#"<tr data-cluster="{0}"><th scope="row">{0}</th><td data-col="replicas">{1}</td><td data-col="reason">{2}</td><td data-col="message" class="msg">{3}</td><td data-col="preference">{4}</td><td data-col="capacityEstimate">{5}</td><td data-col="availableReplicas">{6}</td></tr>"#,
            escape(&d.name),
            d.replicas,
            d.reason.as_str(),
            escape(&d.message),
            escape(&row.preference),
            number(d.capacity_estimate),
            number(d.available_replicas),
        );
    }
    out.push_str("</tbody></table>");
    if !r.next.is_empty() {
        let _ = write!(
            out,
            r#"<p class="pending" id="division-next">… Not recorded yet: the scheduler would now write {} (as <code>flotilla diff</code> previews it).</p>"#,
            escape(&brief(&r.next))
        );
    }
    if let Some(e) = &r.preview_error {
        let _ = write!(
            out,
            r#"<p class="fail" role="alert">✗ The division cannot be previewed: {}</p>"#,
            escape(e)
        );
    }
    if let Some(text) = &r.rebalance {
        let _ = write!(
            out,
            r#"<p id="division-rebalance">Last one-off rebalance: {}</p>"#,
            escape(text)
        );
    }
    out.push_str("</section>");
}

/// A number, or a dash (with words for screen readers) when the division read none.
fn number(n: Option<i64>) -> String {
    match n {
        Some(n) => n.to_string(),
        None => r#"<span class="none" title="none">–</span>"#.into(),
    }
}

/// `m1 4 (Weight), m2 2 (Weight)`.
fn brief(division: &[ClusterDivision]) -> String {
    division
        .iter()
        .map(|d| format!("{} {} ({})", d.name, d.replicas, d.reason.as_str()))
        .collect::<Vec<_>>()
        .join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::replicas::ReplicaRow;
    use flotilla_api::scheduling::DivisionReason;

    fn section_of(r: &Replicas) -> String {
        let mut out = String::new();
        section(&mut out, r);
        out
    }

    fn replicas() -> Replicas {
        Replicas {
            rsp: "demo/web".into(),
            summary: "10 replicas by static weight, rebalance: true".into(),
            recorded: true,
            rows: vec![
                ReplicaRow {
                    division: ClusterDivision {
                        name: "m1".into(),
                        replicas: 7,
                        reason: DivisionReason::CapacityEstimate,
                        message: "capacity estimate 4 <pods>".into(),
                        capacity_estimate: Some(4),
                        available_replicas: None,
                    },
                    preference: "weight 2".into(),
                },
                ReplicaRow {
                    division: ClusterDivision {
                        name: "m2".into(),
                        reason: DivisionReason::NotSelected,
                        message: "the cluster is not Ready".into(),
                        ..ClusterDivision::default()
                    },
                    preference: "weight 1 (\"*\")".into(),
                },
            ],
            next: Vec::new(),
            preview_error: None,
            rebalance: None,
        }
    }

    #[test]
    fn each_cluster_row_has_replicas_reason_numbers_preference_and_capacity() {
        let html = section_of(&replicas());
        assert!(
            html.contains(r#"<tr data-cluster="m1"><th scope="row">m1</th><td data-col="replicas">7</td><td data-col="reason">CapacityEstimate</td><td data-col="message" class="msg">capacity estimate 4 &lt;pods&gt;</td><td data-col="preference">weight 2</td><td data-col="capacityEstimate">4</td>"#),
            "{html}"
        );
        assert!(
            html.contains(r#"<td data-col="reason">NotSelected</td><td data-col="message" class="msg">the cluster is not Ready</td><td data-col="preference">weight 1 (&quot;*&quot;)</td><td data-col="capacityEstimate"><span class="none" title="none">–</span>"#),
            "{html}"
        );
        assert!(html.contains("recorded it in the RSP's status"), "{html}");
        assert!(!html.contains("division-next"), "{html}");
    }

    #[test]
    fn a_division_not_recorded_yet_and_a_failed_preview_are_said() {
        let mut r = replicas();
        r.next = vec![ClusterDivision {
            name: "m1".into(),
            replicas: 4,
            ..ClusterDivision::default()
        }];
        r.preview_error = Some("bad <selector>".into());
        r.rebalance = Some("now: Rebalanced".into());
        let html = section_of(&r);
        assert!(
            html.contains("the scheduler would now write m1 4 (Weight)"),
            "{html}"
        );
        assert!(html.contains("cannot be previewed: bad &lt;selector&gt;"));
        assert!(html.contains("Last one-off rebalance: now: Rebalanced"));
        r.recorded = false;
        assert!(section_of(&r).contains("Not recorded yet: the division the scheduler would make"));
    }
}
