//! HTML of the dashboard: the page frame (style, the small script that follows the live
//! version and swaps in a fresh fragment) and the escaping every text goes through. The
//! pages' bodies are in [`overview`], [`object`] and [`policies`]. Pure string building: no templates,
//! no JavaScript build.

pub mod object;
pub mod overview;
pub mod policies;
pub mod replicas;

use std::fmt::Write as _;

/// `text` safe inside HTML text and quoted attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// The icon of a state class: states never rely on colour alone (the word is always
/// written next to it).
pub fn icon(class: &str) -> &'static str {
    match class {
        "ok" => "✓",
        "pending" => "…",
        "fail" => "✗",
        _ => "–",
    }
}

/// A state badge: icon (hidden from screen readers) and the word.
pub fn badge(out: &mut String, class: &str, label: &str) {
    let _ = write!(
        out,
        r#"<span class="state {class}"><span class="icon" aria-hidden="true">{}</span> {}</span>"#,
        icon(class),
        escape(label)
    );
}

/// The stylesheet, served as `/app.css` (a strict Content-Security-Policy allows no inline style).
pub const STYLE: &str = r#"
body{font-family:system-ui,sans-serif;margin:0;color:#1b1f24;background:#fff}
header{display:flex;gap:1.5em;align-items:baseline;padding:.6em 1.2em;background:#0b3d5c;color:#fff}
header h1{font-size:1.2em;margin:0}header a{color:#fff}header nav{display:flex;gap:1em}
ul.selected,ul.conflicts{margin:0;padding-left:1.1em}
#updated{font-size:.85em;margin:0}
main,form.filters{padding:0 1.2em}
form.filters{display:flex;gap:1em;align-items:center;padding-top:.8em;flex-wrap:wrap}
table{border-collapse:collapse;margin:.5em 0 1em}
th,td{border:1px solid #c9d1d9;padding:.25em .5em;text-align:left;vertical-align:top;font-size:.9em}
thead th{background:#f0f3f6}
.state{white-space:nowrap;font-weight:600}
.ok{color:#116329}.pending{color:#7d4e00}.fail{color:#b3261e}.none{color:#57606a;font-weight:400}
td.fail{background:#ffebe9}td.pending{background:#fff8c5}
pre{background:#f6f8fa;padding:.5em;overflow:auto;max-height:24em;font-size:.85em}
.msg{font-size:.85em;color:#3d444d;max-width:40em}
nav.pages{display:flex;gap:1em;margin-bottom:1em}
.summary{margin:.3em 0}
dl{display:grid;grid-template-columns:max-content 1fr;gap:.2em 1em}dt{font-weight:600}dd{margin:0}
"#;

/// The script, served as `/app.js`: follows the version over server-sent events and swaps
/// in a fresh `#live` fragment of the same URL when it changes.
pub const SCRIPT: &str = r#"
(function () {
  var live = document.getElementById('live');
  var note = document.getElementById('updated');
  var seen = document.body.getAttribute('data-version');
  var busy = false, again = false;
  function refresh() {
    if (busy) { again = true; return; }
    busy = true;
    var url = new URL(window.location.href);
    url.searchParams.set('fragment', '1');
    fetch(url).then(function (r) { return r.text(); }).then(function (html) {
      live.innerHTML = html;
      note.textContent = 'Live: updated ' + new Date().toLocaleTimeString();
    }).catch(function () {
      note.textContent = 'Live: update failed, retrying';
    }).finally(function () {
      busy = false;
      if (again) { again = false; refresh(); }
    });
  }
  var events = new EventSource('/events');
  events.onmessage = function (e) {
    if (e.data !== seen) { seen = e.data; refresh(); }
  };
  events.onerror = function () { note.textContent = 'Live: reconnecting'; };
  events.onopen = function () { note.textContent = 'Live'; };
})();
"#;

/// A whole page: `filters` (kept across live updates) above the `live` fragment.
pub fn page(title: &str, version: u64, filters: &str, live: &str) -> String {
    format!(
        r#"<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{title}</title><link rel="stylesheet" href="/app.css"></head>
<body data-version="{version}">
<header><h1><a href="/">Flotilla</a></h1><nav><a href="/">Overview</a> <a href="/policies">Policies</a></nav><p id="updated" role="status" aria-live="polite">Live</p></header>
{filters}
<main id="live">{live}</main>
<script src="/app.js"></script>
</body></html>
"#,
        title = escape(title),
    )
}

/// A page for a missing object or a bad request.
pub fn not_found(version: u64, what: &str) -> String {
    page(
        "Not found — Flotilla",
        version,
        "",
        &format!(
            "<h2>Not found</h2><p>{}</p><p><a href=\"/\">Back to the overview</a></p>",
            escape(what)
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markup_characters_are_escaped_in_text_and_attributes() {
        assert_eq!(
            escape(r#"<script>alert("x&y")</script> it's"#),
            "&lt;script&gt;alert(&quot;x&amp;y&quot;)&lt;/script&gt; it&#39;s"
        );
        assert_eq!(escape("plain ✓"), "plain ✓");
    }

    #[test]
    fn a_badge_carries_an_icon_and_its_word() {
        let mut out = String::new();
        badge(&mut out, "fail", "Apply<Overrides>Failed");
        assert!(out.contains("✗"), "{out}");
        assert!(out.contains("Apply&lt;Overrides&gt;Failed"), "{out}");
        assert!(out.contains(r#"aria-hidden="true""#), "{out}");
    }

    #[test]
    fn the_page_title_is_escaped_and_the_version_is_given_to_the_script() {
        let html = page("<x>", 7, "", "");
        assert!(html.contains("<title>&lt;x&gt;</title>"));
        assert!(html.contains(r#"data-version="7""#));
        assert!(html.contains(r#"<script src="/app.js"></script>"#));
        assert!(SCRIPT.contains("new EventSource('/events')"));
    }
}
