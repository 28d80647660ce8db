//! The object page's HTML: summary, per-cluster table (state, reason, message, overrides,
//! remote status), replicas per cluster when an RSP divides them ([`super::replicas`]),
//! template, placement and decision, the object each cluster gets, Events.

use std::fmt::Write as _;

use super::{badge, escape};
use crate::view::{
    Cell,
    object::{ClusterDetail, ObjectView, Rendered},
};

/// The live fragment of an object's page.
pub fn fragment(v: &ObjectView) -> String {
    let mut out = String::new();
    let place = if v.namespace.is_empty() {
        v.name.clone()
    } else {
        format!("{}/{}", v.namespace, v.name)
    };
    let _ = write!(
        out,
        r#"<p><a href="/">← Overview</a></p><h2 id="object-h">{} {}</h2><dl><dt>State</dt><dd id="overall">"#,
        escape(&v.kind),
        escape(&place)
    );
    badge(&mut out, v.overall.class(), v.overall.as_str());
    if let Some((status, reason, message)) = &v.condition {
        let _ = write!(
            out,
            " <span class=\"msg\">Propagation={} {} {}</span>",
            escape(status),
            escape(reason),
            escape(message)
        );
    }
    let _ = write!(
        out,
        "</dd><dt>Target</dt><dd>{}</dd><dt>Generation</dt><dd>{} (observed {})</dd>",
        escape(&v.target),
        v.generation.0,
        v.generation.1
    );
    if let Some(a) = &v.aggregated {
        let _ = write!(out, "<dt>Workload</dt><dd>{}</dd>", escape(a));
    }
    if let Some(m) = &v.made_by {
        out.push_str(r#"<dt>Made by</dt><dd id="made-by">"#);
        match &m.policy {
            Some(reference) => {
                let _ = write!(
                    out,
                    r##"<a href="/policies#{}">{}</a>"##,
                    escape(reference),
                    escape(&m.text)
                );
            }
            None => out.push_str(&escape(&m.text)),
        }
        out.push_str("</dd>");
    }
    out.push_str("</dl>");
    if let Some(e) = &v.spec_error {
        let _ = write!(out, r#"<p class="fail" role="alert">✗ {}</p>"#, escape(e));
    }
    clusters(&mut out, &v.clusters);
    if let Some(r) = &v.replicas {
        super::replicas::section(&mut out, r);
    }
    drift(&mut out, &v.drift);
    let _ = write!(
        out,
        r#"<section><h3>Template</h3><pre id="template">{}</pre></section><section><h3>Placement</h3><pre id="placement">{}</pre>"#,
        escape(&v.template),
        escape(&v.placement)
    );
    if let Some((chosen, moves)) = &v.decision {
        let _ = write!(
            out,
            "<p>Scheduling decision: {}</p>",
            escape(&chosen.join(", "))
        );
        for m in moves {
            let _ = write!(out, r#"<p class="msg">{}</p>"#, escape(m));
        }
    }
    out.push_str("</section>");
    rendered(&mut out, &v.clusters);
    events(&mut out, v);
    out
}

/// `status.drift`: what other writers changed in the members (nothing when none did).
fn drift(out: &mut String, drift: &[String]) {
    if drift.is_empty() {
        return;
    }
    out.push_str(r#"<section><h3>Drift</h3><ul id="drift">"#);
    for line in drift {
        let _ = write!(out, "<li>{}</li>", escape(line));
    }
    out.push_str("</ul></section>");
}

fn clusters(out: &mut String, clusters: &[ClusterDetail]) {
    out.push_str(
        r#"<section><h3>Clusters</h3><table id="object-clusters"><thead><tr><th scope="col">Cluster</th><th scope="col">Cluster state</th><th scope="col">Object state</th><th scope="col">Message</th><th scope="col">Overrides</th><th scope="col">Remote status</th></tr></thead><tbody>"#,
    );
    for c in clusters {
        let _ = write!(
            out,
            r#"<tr data-cluster="{0}"><th scope="row">{0}</th><td>"#,
            escape(&c.name)
        );
        match c.health {
            Some(h) => badge(out, if h.is_problem() { "fail" } else { "ok" }, h.as_str()),
            None => badge(out, "fail", "Not registered"),
        }
        let _ = write!(out, r#"</td><td class="{}">"#, c.cell.class());
        badge(out, c.cell.class(), c.cell.label());
        let message = match &c.cell {
            Cell::Failing { message, .. } => message.as_str(),
            _ => "",
        };
        let _ = write!(out, r#"</td><td class="msg">{}</td><td>"#, escape(message));
        if c.overrides.is_empty() {
            out.push_str(r#"<span class="none">none</span>"#);
        }
        for o in &c.overrides {
            let _ = write!(
                out,
                "<div><code>{} {} {}</code></div>",
                escape(&o.op),
                escape(&o.path),
                escape(&o.value)
            );
        }
        out.push_str("</td><td>");
        match &c.remote_status {
            Some(s) => {
                let _ = write!(out, "<pre>{}</pre>", escape(s));
            }
            None => out.push_str(r#"<span class="none">not collected</span>"#),
        }
        out.push_str("</td></tr>");
    }
    out.push_str("</tbody></table></section>");
}

fn rendered(out: &mut String, clusters: &[ClusterDetail]) {
    out.push_str(
        "<section><h3>Object per cluster</h3><p class=\"msg\">What the controllers apply in each cluster (as <code>flotilla diff</code> computes it, before the member's defaults).</p>",
    );
    for c in clusters {
        let name = escape(&c.name);
        match &c.rendered {
            Rendered::Object(text) => {
                let _ = write!(
                    out,
                    r#"<details open data-cluster="{name}"><summary>{name}</summary><pre class="rendered">{}</pre></details>"#,
                    escape(text)
                );
            }
            Rendered::Failed(why) => {
                let _ = write!(
                    out,
                    r#"<p data-cluster="{name}"><strong>{name}</strong>: <span class="fail">✗ {}</span></p>"#,
                    escape(why)
                );
            }
            Rendered::NotPlaced => {
                let _ = write!(
                    out,
                    r#"<p data-cluster="{name}"><strong>{name}</strong>: <span class="none">– not placed</span></p>"#
                );
            }
        }
    }
    out.push_str("</section>");
}

fn events(out: &mut String, v: &ObjectView) {
    out.push_str(r#"<section><h3>Recent events</h3>"#);
    if v.events.is_empty() {
        out.push_str("<p class=\"none\">No recent events.</p></section>");
        return;
    }
    out.push_str(r#"<table id="events"><thead><tr><th scope="col">Type</th><th scope="col">Reason</th><th scope="col">Message</th><th scope="col">Count</th><th scope="col">Last seen</th></tr></thead><tbody>"#);
    for e in &v.events {
        let class = if e.type_ == "Warning" { "fail" } else { "ok" };
        out.push_str("<tr><td>");
        badge(out, class, &e.type_);
        let _ = write!(
            out,
            r#"</td><td>{}</td><td class="msg">{}</td><td>{}</td><td>{}</td></tr>"#,
            escape(&e.reason),
            escape(&e.message),
            e.count,
            escape(&e.last_seen)
        );
    }
    out.push_str("</tbody></table></section>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::{Health, Overall, object::OverrideRow};

    fn view() -> ObjectView {
        ObjectView {
            namespace: "demo".into(),
            kind: "FederatedConfigMap".into(),
            name: "web".into(),
            target: "v1 ConfigMap".into(),
            generation: (2, 2),
            overall: Overall::Failing,
            condition: Some(("False".into(), "CheckClusters".into(), String::new())),
            spec_error: None,
            template: "data:\n  color: <blue>\n".into(),
            placement: "clusterSelector: {}\n".into(),
            decision: None,
            aggregated: None,
            clusters: vec![ClusterDetail {
                name: "m2".into(),
                health: Some(Health::Ready),
                cell: Cell::Failing {
                    reason: "ApplyOverridesFailed".into(),
                    message: "path /x: missing".into(),
                },
                overrides: vec![OverrideRow {
                    op: "replace".into(),
                    path: "/x".into(),
                    value: "1".into(),
                }],
                remote_status: None,
                rendered: Rendered::Failed("ApplyOverridesFailed: path /x: missing".into()),
            }],
            drift: Vec::new(),
            events: Vec::new(),
            made_by: None,
            replicas: None,
        }
    }

    #[test]
    fn an_object_a_policy_made_links_to_the_policy() {
        let mut v = view();
        v.made_by = Some(crate::view::object::MadeBy {
            policy: Some("PropagationPolicy/demo/web".into()),
            text: "PropagationPolicy demo/web".into(),
        });
        let html = fragment(&v);
        assert!(
            html.contains(
                r#"<a href="/policies#PropagationPolicy/demo/web">PropagationPolicy demo/web</a>"#
            ),
            "{html}"
        );
        assert!(!fragment(&view()).contains("Made by"));
    }

    #[test]
    fn the_object_page_shows_reason_message_and_override_of_the_failing_cluster() {
        let html = fragment(&view());
        assert!(html.contains("✗</span> ApplyOverridesFailed"), "{html}");
        assert!(html.contains("path /x: missing"), "{html}");
        assert!(html.contains("<code>replace /x 1</code>"), "{html}");
        assert!(html.contains("color: &lt;blue&gt;"), "{html}");
        assert!(html.contains("No recent events."), "{html}");
    }

    #[test]
    fn the_object_page_lists_drift_escaped_and_only_when_there_is_some() {
        assert!(!fragment(&view()).contains("id=\"drift\""));
        let mut v = view();
        v.drift =
            vec!["drift in m2 Repaired: data.color (<blue> → red) changed by kubectl-edit".into()];
        let html = fragment(&v);
        assert!(html.contains("<ul id=\"drift\"><li>drift in m2 Repaired: data.color (&lt;blue&gt; → red) changed by kubectl-edit</li>"), "{html}");
    }

    #[test]
    fn the_replicas_section_appears_only_when_an_rsp_divides_the_object() {
        assert!(!fragment(&view()).contains(r#"id="replicas""#));
        let mut v = view();
        v.replicas = Some(crate::view::replicas::Replicas {
            rsp: "demo/web".into(),
            summary: "3 replicas by static weight, rebalance: false".into(),
            recorded: true,
            rows: Vec::new(),
            next: Vec::new(),
            preview_error: None,
            rebalance: None,
        });
        let html = fragment(&v);
        assert!(
            html.contains("ReplicaSchedulingPreference <strong>demo/web</strong>: 3 replicas"),
            "{html}"
        );
    }
}
