//! Request counts as the API servers themselves report them (`apiserver_request_total` on
//! `/metrics`), and their differences over a phase. Parsing is pure; only
//! [`request_counts`] does I/O.

use std::collections::{BTreeMap, HashMap};

use anyhow::Context as _;
use kube::Client;

/// Request counters of one API server: (group, resource, subresource, verb) → count.
pub type RequestCounts = BTreeMap<(String, String, String, String), f64>;

/// Parses `apiserver_request_total` from a Prometheus text page, summed over the labels
/// other than group, resource, subresource and verb.
pub fn parse_request_totals(text: &str) -> RequestCounts {
    let mut out = RequestCounts::new();
    for line in text.lines() {
        let Some(rest) = line.strip_prefix("apiserver_request_total{") else {
            continue;
        };
        let Some(close) = rest.rfind('}') else {
            continue;
        };
        let Ok(value) = rest[close + 1..].trim().parse::<f64>() else {
            continue;
        };
        let labels = parse_labels(&rest[..close]);
        let get = |k: &str| labels.get(k).cloned().unwrap_or_default();
        *out.entry((
            get("group"),
            get("resource"),
            get("subresource"),
            get("verb"),
        ))
        .or_default() += value;
    }
    out
}

fn parse_labels(s: &str) -> HashMap<String, String> {
    let mut out = HashMap::new();
    let mut rest = s;
    while let Some(eq) = rest.find("=\"") {
        let key = rest[..eq].trim_start_matches(',').trim().to_string();
        let mut value = String::new();
        let mut chars = rest[eq + 2..].char_indices();
        let mut end = rest.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        value.push(n);
                    }
                }
                '"' => {
                    end = eq + 2 + i + 1;
                    break;
                }
                c => value.push(c),
            }
        }
        out.insert(key, value);
        rest = &rest[end.min(rest.len())..];
    }
    out
}

/// The request counters of the API server behind `client`.
pub(super) async fn request_counts(client: &Client) -> anyhow::Result<RequestCounts> {
    let req = http::Request::get("/metrics").body(Vec::new())?;
    let text = client
        .request_text(req)
        .await
        .context("reading the API server's /metrics")?;
    Ok(parse_request_totals(&text))
}

/// Requests in `after - before` whose resource is `resource` (any subresource), watches
/// excluded, summed under the label `key(subresource, verb)`.
pub(super) fn delta(
    before: &RequestCounts,
    after: &RequestCounts,
    resource: &str,
    key: impl Fn(&str, &str) -> String,
) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    for (k, v) in after {
        let (_, res, sub, verb) = k;
        if res != resource || verb == "WATCH" || verb == "CONNECT" {
            continue;
        }
        let b = before.get(k).copied().unwrap_or(0.0);
        let d = (v - b).max(0.0).round() as u64;
        if d > 0 {
            *out.entry(key(sub, verb)).or_default() += d;
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn request_totals_are_summed_over_codes_and_other_labels() {
        let text = r#"# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",contentType="application/json",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="POST",version="v1"} 5
apiserver_request_total{code="409",component="apiserver",contentType="application/json",dry_run="",group="",resource="configmaps",scope="namespace",subresource="",verb="POST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="types.kubefed.io",resource="federatedconfigmaps",scope="namespace",subresource="status",verb="PATCH",version="v1beta1"} 3
apiserver_request_total_other{verb="POST"} 9
"#;
        let c = parse_request_totals(text);
        let key = |g: &str, r: &str, s: &str, v: &str| {
            (g.to_string(), r.to_string(), s.to_string(), v.to_string())
        };
        assert_eq!(c.get(&key("", "configmaps", "", "POST")), Some(&7.0));
        assert_eq!(
            c.get(&key(
                "types.kubefed.io",
                "federatedconfigmaps",
                "status",
                "PATCH"
            )),
            Some(&3.0)
        );
        assert_eq!(c.len(), 2);
    }

    #[test]
    fn request_deltas_skip_watches_and_other_resources() {
        let key = |r: &str, s: &str, v: &str| {
            (String::new(), r.to_string(), s.to_string(), v.to_string())
        };
        let before: RequestCounts = [(key("configmaps", "", "POST"), 10.0)].into();
        let after: RequestCounts = [
            (key("configmaps", "", "POST"), 14.0),
            (key("configmaps", "", "WATCH"), 3.0),
            (key("configmaps", "", "GET"), 4.0),
            (key("secrets", "", "GET"), 4.0),
        ]
        .into();
        let d = delta(&before, &after, "configmaps", |_, v| v.to_string());
        assert_eq!(d, [("GET".to_string(), 4), ("POST".to_string(), 4)].into());
    }
}
