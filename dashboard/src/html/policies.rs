//! The policies page's HTML: one table of propagation and override policies — kind,
//! namespace, name, priority, Ready with reason and message, how many objects each selects,
//! those objects linked to their pages, and the conflicts with their reasons.

use std::fmt::Write as _;

use super::{badge, escape, overview::object_link};
use crate::view::policies::{Conflict, Policies, PolicyRow, Readiness, Selected};

/// The live fragment of the policies page.
pub fn fragment(v: &Policies) -> String {
    let mut out = String::from(r#"<h2 id="policies-h">Policies</h2>"#);
    if !v.synced {
        out.push_str("<p>Loading…</p>");
        return out;
    }
    if v.rows.is_empty() {
        out.push_str(
            r#"<p id="no-policies">No propagation or override policies (or none you may list).</p>"#,
        );
        return out;
    }
    let not_ready = v
        .rows
        .iter()
        .filter(|r| r.readiness == Readiness::NotReady)
        .count();
    let conflicts: usize = v.rows.iter().map(|r| r.conflicts.len()).sum();
    let _ = write!(
        out,
        r#"<p class="summary" id="policy-counts">{} policies, {not_ready} not ready, {conflicts} conflicts</p>"#,
        v.rows.len()
    );
    out.push_str(
        r#"<table id="policies"><thead><tr><th scope="col">Kind</th><th scope="col">Namespace</th><th scope="col">Name</th><th scope="col">Priority</th><th scope="col">Ready</th><th scope="col">Selected</th><th scope="col">Objects</th><th scope="col">Conflicts</th></tr></thead><tbody>"#,
    );
    for r in &v.rows {
        row(&mut out, r);
    }
    out.push_str("</tbody></table>");
    out
}

fn row(out: &mut String, r: &PolicyRow) {
    let _ = write!(
        out,
        r#"<tr id="{0}" data-policy="{0}"><td>{1}</td><td>{2}</td><th scope="row">{3}</th><td>{4}</td><td class="{5}">"#,
        escape(&r.reference),
        escape(r.kind.as_str()),
        escape(&r.namespace),
        escape(&r.name),
        r.priority.map(|p| p.to_string()).unwrap_or_default(),
        r.readiness.class(),
    );
    let label = match (r.readiness, r.reason.as_str()) {
        (Readiness::NotReady, reason) if !reason.is_empty() => reason,
        (readiness, _) => readiness.as_str(),
    };
    badge(out, r.readiness.class(), label);
    if r.readiness == Readiness::Ready && !r.reason.is_empty() {
        let _ = write!(out, r#" <span class="none">{}</span>"#, escape(&r.reason));
    }
    if !r.message.is_empty() {
        let _ = write!(out, r#"<div class="msg">{}</div>"#, escape(&r.message));
    }
    let _ = write!(
        out,
        r#"</td><td class="count">{}</td><td><ul class="selected">"#,
        r.selected_count
    );
    for s in &r.selected {
        out.push_str("<li>");
        object(out, s);
        out.push_str("</li>");
    }
    out.push_str(r#"</ul></td><td><ul class="conflicts">"#);
    for c in &r.conflicts {
        conflict(out, c);
    }
    out.push_str("</ul></td></tr>");
}

/// An object, linked to its Federated object's page when there is one to show.
fn object(out: &mut String, s: &Selected) {
    let place = if s.namespace.is_empty() {
        s.name.clone()
    } else {
        format!("{}/{}", s.namespace, s.name)
    };
    let text = format!("{} {place}", s.kind);
    match &s.federated {
        Some(f) => {
            let _ = write!(
                out,
                r#"<a href="{}">{}</a>"#,
                escape(&object_link(&f.namespace, &f.kind, &f.name)),
                escape(&text)
            );
        }
        None => out.push_str(&escape(&text)),
    }
}

fn conflict(out: &mut String, c: &Conflict) {
    out.push_str(r#"<li class="conflict">"#);
    badge(out, "fail", &c.reason);
    out.push(' ');
    object(out, &c.object);
    if !c.message.is_empty() {
        let _ = write!(out, r#"<div class="msg">{}</div>"#, escape(&c.message));
    }
    out.push_str("</li>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::policies::{policies, tests::state};

    #[test]
    fn each_policy_row_links_its_objects_and_names_its_conflicts_with_the_reason() {
        let html = fragment(&policies(&state()));
        assert!(
            html.contains(r#"data-policy="PropagationPolicy/shop/web""#),
            "{html}"
        );
        assert!(
            html.contains(r#"href="/object?ns=shop&amp;kind=FederatedDeployment&amp;name=web""#),
            "{html}"
        );
        assert!(html.contains("LostToPolicy"), "{html}");
        assert!(html.contains("PropagationPolicy/shop/web wins"), "{html}");
        assert!(
            html.contains("2 policies, 0 not ready, 1 conflicts"),
            "{html}"
        );
    }

    #[test]
    fn no_policies_says_so_rather_than_showing_an_empty_table() {
        let mut s = state();
        s.policies.clear();
        let html = fragment(&policies(&s));
        assert!(html.contains(r#"id="no-policies""#), "{html}");
        assert!(!html.contains("<table"), "{html}");
    }
}
