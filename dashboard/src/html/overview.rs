//! The overview page's HTML: the filter form, the clusters table, the summary and one page
//! of the objects × clusters grid with links to each object and to the other pages.

use std::fmt::Write as _;

use super::{badge, escape};
use crate::{
    query::encode,
    view::overview::{ClusterRow, Filter, ObjectRow, Overview, PAGE_SIZE},
};

/// The query string of `filter` on `page` (from 0).
pub fn query(filter: &Filter, page: usize) -> String {
    let mut parts = Vec::new();
    if let Some(ns) = &filter.namespace {
        parts.push(format!("ns={}", encode(ns)));
    }
    if let Some(kind) = &filter.kind {
        parts.push(format!("type={}", encode(kind)));
    }
    if filter.problems {
        parts.push("problems=1".into());
    }
    if page > 0 {
        parts.push(format!("page={}", page + 1));
    }
    parts.join("&")
}

/// The link to an object's page.
pub fn object_link(namespace: &str, kind: &str, name: &str) -> String {
    format!(
        "/object?ns={}&kind={}&name={}",
        encode(namespace),
        encode(kind),
        encode(name)
    )
}

/// The filter form (outside the live fragment, so a live update never resets it).
pub fn filters(o: &Overview) -> String {
    let mut out = String::from(
        r#"<form class="filters" method="get" action="/" aria-label="Filter federated objects">"#,
    );
    let select = |out: &mut String,
                  name: &str,
                  label: &str,
                  all: &str,
                  choices: &[String],
                  current: &Option<String>| {
        let _ = write!(
            out,
            r#"<label>{label} <select name="{name}"><option value="">{all}</option>"#
        );
        for c in choices {
            let selected = if current.as_ref() == Some(c) {
                " selected"
            } else {
                ""
            };
            let _ = write!(
                out,
                r#"<option value="{0}"{selected}>{0}</option>"#,
                escape(c)
            );
        }
        out.push_str("</select></label>");
    };
    select(
        &mut out,
        "ns",
        "Namespace",
        "All namespaces",
        &o.namespaces,
        &o.filter.namespace,
    );
    select(
        &mut out,
        "type",
        "Type",
        "All types",
        &o.kinds,
        &o.filter.kind,
    );
    let checked = if o.filter.problems { " checked" } else { "" };
    let _ = write!(
        out,
        r#"<label><input type="checkbox" name="problems" value="1"{checked}> Only problems</label><button type="submit">Show</button></form>"#
    );
    out
}

/// The live fragment: clusters, summary, grid, pages.
pub fn fragment(o: &Overview) -> String {
    let mut out = String::new();
    if !o.synced {
        out.push_str("<p>Loading: listing the host's clusters and types…</p>");
    }
    clusters(&mut out, &o.clusters);
    let c = &o.counts;
    let first = o.filter.page * PAGE_SIZE;
    let _ = write!(
        out,
        r#"<section aria-labelledby="objects-h"><h2 id="objects-h">Federated objects</h2>
<p class="summary" id="counts">{} objects: {} propagated, {} pending, {} failing.</p>
<p class="summary" id="showing">Showing {}–{} of {} matching.</p>"#,
        c.objects,
        c.propagated,
        c.pending,
        c.failing,
        if o.rows.is_empty() { 0 } else { first + 1 },
        first + o.rows.len(),
        o.matched
    );
    grid(&mut out, o);
    pages(&mut out, o);
    out.push_str("</section>");
    out
}

fn clusters(out: &mut String, rows: &[ClusterRow]) {
    out.push_str(
        r#"<section aria-labelledby="clusters-h"><h2 id="clusters-h">Clusters</h2>
<table id="clusters"><thead><tr><th scope="col">Cluster</th><th scope="col">State</th><th scope="col">Version</th><th scope="col">Labels</th><th scope="col">Taints</th><th scope="col">Capacity</th><th scope="col">Objects placed</th></tr></thead><tbody>"#,
    );
    if rows.is_empty() {
        out.push_str(r#"<tr><td colspan="7">No cluster is registered (flotilla join).</td></tr>"#);
    }
    for r in rows {
        let class = if r.health.is_problem() { "fail" } else { "ok" };
        let _ = write!(
            out,
            r#"<tr data-cluster="{0}"><th scope="row">{0}</th><td>"#,
            escape(&r.name)
        );
        badge(out, class, r.health.as_str());
        if !r.message.is_empty() {
            let _ = write!(out, r#"<div class="msg">{}</div>"#, escape(&r.message));
        }
        let _ = write!(
            out,
            r#"</td><td>{}</td><td>{}</td><td>{}</td><td data-col="capacity">{}</td><td>{} ({} propagated, {} failing)</td></tr>"#,
            escape(&r.version),
            escape(&r.labels.join(", ")),
            if r.taints.is_empty() {
                "none".to_owned()
            } else {
                escape(&r.taints.join(", "))
            },
            r.capacity.as_deref().map_or_else(
                || r#"<span class="none">no summary</span>"#.to_owned(),
                escape
            ),
            r.placed,
            r.propagated,
            r.failing
        );
    }
    out.push_str("</tbody></table></section>");
}

fn grid(out: &mut String, o: &Overview) {
    out.push_str(
        r#"<table id="objects"><thead><tr><th scope="col">Object</th><th scope="col">State</th>"#,
    );
    for c in &o.clusters {
        let _ = write!(out, r#"<th scope="col">{}</th>"#, escape(&c.name));
    }
    out.push_str("</tr></thead><tbody>");
    if o.rows.is_empty() {
        let _ = write!(
            out,
            r#"<tr><td colspan="{}">No federated object matches.</td></tr>"#,
            o.clusters.len() + 2
        );
    }
    for row in &o.rows {
        grid_row(out, o, row);
    }
    out.push_str("</tbody></table>");
}

fn grid_row(out: &mut String, o: &Overview, row: &ObjectRow) {
    let id = format!("{}/{}/{}", row.namespace, row.kind, row.name);
    let _ = write!(
        out,
        r#"<tr data-object="{}"><th scope="row"><a href="{}">{}</a> <span class="none">{}</span></th><td>"#,
        escape(&id),
        escape(&object_link(&row.namespace, &row.kind, &row.name)),
        escape(&if row.namespace.is_empty() {
            row.name.clone()
        } else {
            format!("{}/{}", row.namespace, row.name)
        }),
        escape(&row.kind)
    );
    badge(out, row.overall.class(), row.overall.as_str());
    out.push_str("</td>");
    for (cluster, cell) in o.clusters.iter().zip(&row.cells) {
        let title = match cell {
            crate::view::Cell::Failing { message, .. } => message.as_str(),
            _ => "",
        };
        let _ = write!(
            out,
            r#"<td class="{}" data-cluster="{}" title="{}">"#,
            cell.class(),
            escape(&cluster.name),
            escape(title)
        );
        badge(out, cell.class(), cell.label());
        out.push_str("</td>");
    }
    out.push_str("</tr>");
}

fn pages(out: &mut String, o: &Overview) {
    if o.pages <= 1 {
        return;
    }
    let page = o.filter.page;
    out.push_str(r#"<nav class="pages" aria-label="Pages">"#);
    if page > 0 {
        let _ = write!(
            out,
            r#"<a href="/?{}" rel="prev">← Previous</a>"#,
            escape(&query(&o.filter, page - 1))
        );
    }
    let _ = write!(out, "<span>Page {} of {}</span>", page + 1, o.pages);
    if page + 1 < o.pages {
        let _ = write!(
            out,
            r#"<a href="/?{}" rel="next">Next →</a>"#,
            escape(&query(&o.filter, page + 1))
        );
    }
    out.push_str("</nav>");
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::view::overview::{overview, tests::state};

    #[test]
    fn the_failing_cell_names_its_reason_with_an_icon_and_the_message_as_title() {
        let o = overview(&state(1), &Filter::default());
        let html = fragment(&o);
        assert!(
            html.contains(r#"<td class="fail" data-cluster="m2" title="no path">"#),
            "{html}"
        );
        assert!(html.contains("✗</span> ApplyOverridesFailed"), "{html}");
        assert!(html.contains("✓</span> Ready"), "{html}");
        assert!(
            html.contains(r#"<td data-col="capacity"><span class="none">no summary</span></td>"#),
            "{html}"
        );
        assert!(
            html.contains(r#"href="/object?ns=prod&amp;kind=FederatedDeployment&amp;name=web""#),
            "{html}"
        );
    }

    #[test]
    fn page_links_keep_the_filters() {
        let o = overview(
            &state(250),
            &Filter::from_query("ns=demo&problems=0&page=2"),
        );
        let html = fragment(&o);
        assert!(html.contains(r#"href="/?ns=demo" rel="prev""#), "{html}");
        assert!(
            html.contains(r#"href="/?ns=demo&amp;page=3" rel="next""#),
            "{html}"
        );
        assert!(html.contains("Showing 101–200 of 250 matching."), "{html}");
    }

    #[test]
    fn the_form_shows_the_current_filter() {
        let o = overview(&state(1), &Filter::from_query("ns=prod&problems=1"));
        let html = filters(&o);
        assert!(
            html.contains(r#"<option value="prod" selected>prod</option>"#),
            "{html}"
        );
        assert!(html.contains(r#"value="1" checked"#), "{html}");
    }
}
