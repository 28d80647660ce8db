//! The documentation site: docs/ builds into a book with mdBook (book.toml at the
//! repository root, docs/SUMMARY.md its table of contents), every page is in the table of
//! contents, and every relative link and anchor in docs/*.md resolves — a file that exists
//! in the repository, a heading that exists in the page it points to.

use std::{
    collections::{BTreeMap, BTreeSet},
    path::{Path, PathBuf},
};

use anyhow::Context as _;

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The docs pages, by file name, with their text.
fn pages() -> anyhow::Result<BTreeMap<String, String>> {
    let mut pages = BTreeMap::new();
    for entry in std::fs::read_dir(repo().join("docs"))? {
        let path = entry?.path();
        if path.extension().is_some_and(|e| e == "md") {
            let name = path.file_name().context("a file name")?.to_string_lossy();
            pages.insert(name.into_owned(), std::fs::read_to_string(&path)?);
        }
    }
    Ok(pages)
}

/// The lines of a page outside fenced code blocks, with inline code spans blanked.
fn prose(text: &str) -> Vec<String> {
    let mut fenced = false;
    let mut lines = Vec::new();
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut out = String::new();
        let mut in_code = false;
        for c in line.chars() {
            if c == '`' {
                in_code = !in_code;
            } else if !in_code {
                out.push(c);
            }
        }
        lines.push(out);
    }
    lines
}

/// The anchor of a heading as mdBook and GitHub make it: lower case, letters, digits, `-`
/// and `_` kept, spaces turned into `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a page's headings; a repeated heading gets `-1`, `-2`… as both do.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let mut anchors = BTreeSet::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
        }
        let Some(heading) = line.strip_prefix('#').filter(|_| !fenced) else {
            continue;
        };
        let base = slug(heading.trim_start_matches('#').replace('`', "").as_str());
        let n = seen.entry(base.clone()).or_default();
        anchors.insert(if *n == 0 {
            base.clone()
        } else {
            format!("{base}-{n}")
        });
        *n += 1;
    }
    anchors
}

/// The targets of a line's inline links `[text](target)` and of a reference definition
/// `[label]: target`.
fn link_targets(line: &str) -> Vec<String> {
    let mut targets = Vec::new();
    if line.trim_start().starts_with('[')
        && let Some((_, rest)) = line.split_once("]: ")
    {
        targets.extend(rest.split_whitespace().next().map(str::to_owned));
    }
    let mut rest = line;
    while let Some(i) = rest.find("](") {
        let after = &rest[i + 2..];
        let end = after.find(')').unwrap_or(after.len());
        let target = after[..end].split_whitespace().next().unwrap_or_default();
        targets.push(target.trim_matches(['<', '>']).to_owned());
        rest = &after[end..];
    }
    targets
}

/// Every relative link of every page that does not resolve, as `page: target (why)`.
fn broken_links(pages: &BTreeMap<String, String>) -> Vec<String> {
    let docs = repo().join("docs");
    let mut broken = Vec::new();
    for (page, text) in pages {
        for target in prose(text).iter().flat_map(|l| link_targets(l)) {
            if target.contains("://") || target.starts_with("mailto:") || target.is_empty() {
                continue;
            }
            let (path, anchor) = target.split_once('#').unwrap_or((&target, ""));
            let file = if path.is_empty() { page.as_str() } else { path };
            if !docs.join(file).exists() {
                broken.push(format!("{page}: {target} (no file {file})"));
                continue;
            }
            let linked = pages.get(file.trim_start_matches("./"));
            if let Some(linked) = linked.filter(|_| !anchor.is_empty())
                && !anchors(linked).contains(anchor)
            {
                broken.push(format!("{page}: {target} (no heading #{anchor} in {file})"));
            }
        }
    }
    broken
}

#[test]
fn a_heading_anchor_keeps_letters_digits_and_dashes_and_numbers_repeats() {
    assert_eq!(slug(" Faults and recovery"), "faults-and-recovery");
    assert_eq!(
        slug(
            "Sharded member work (`--shard-member-work`, opt-in)"
                .replace('`', "")
                .as_str()
        ),
        "sharded-member-work---shard-member-work-opt-in"
    );
    let text = "# A\n## Notes\n```\n# not a heading\n```\n## Notes\n";
    let found: Vec<String> = anchors(text).into_iter().collect();
    assert_eq!(found, ["a", "notes", "notes-1"]);
}

#[test]
fn links_are_found_outside_code_and_in_reference_definitions() {
    let lines = prose("see [a](a.md#x) and `[b](b.md)`\n```\n[c](c.md)\n```\n[d]: d.md \"D\"\n");
    let targets: Vec<String> = lines.iter().flat_map(|l| link_targets(l)).collect();
    assert_eq!(targets, ["a.md#x", "d.md"]);
}

#[test]
fn every_relative_link_and_anchor_in_the_docs_resolves() -> anyhow::Result<()> {
    let pages = pages()?;
    let broken = broken_links(&pages);
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
    Ok(())
}

#[test]
fn every_docs_page_is_in_the_books_table_of_contents() -> anyhow::Result<()> {
    let pages = pages()?;
    let summary = pages.get("SUMMARY.md").context("docs/SUMMARY.md")?;
    let listed: BTreeSet<String> = prose(summary)
        .iter()
        .flat_map(|l| link_targets(l))
        .collect();
    let missing: Vec<&String> = (pages.keys())
        .filter(|p| *p != "SUMMARY.md" && !listed.contains(*p))
        .collect();
    assert!(missing.is_empty(), "not in docs/SUMMARY.md: {missing:?}");
    Ok(())
}

/// mdBook builds the site without a warning (scripts/test.sh installs it when missing).
#[test]
fn the_docs_build_into_a_site_with_mdbook() -> anyhow::Result<()> {
    let Ok(version) = std::process::Command::new("mdbook")
        .arg("--version")
        .output()
    else {
        eprintln!("mdbook is not installed (cargo install mdbook --locked); skipped");
        return Ok(());
    };
    anyhow::ensure!(version.status.success());
    let out = std::env::temp_dir().join(format!("flotilla-book-{}", std::process::id()));
    let built = std::process::Command::new("mdbook")
        .arg("build")
        .arg("--dest-dir")
        .arg(&out)
        .arg(repo())
        .output()?;
    let log = String::from_utf8_lossy(&built.stderr);
    assert!(built.status.success(), "mdbook build failed:\n{log}");
    assert!(!log.contains("WARN") && !log.contains("ERROR"), "{log}");
    for page in pages()?.keys().filter(|p| *p != "SUMMARY.md") {
        let html = out.join(page.replace(".md", ".html"));
        assert!(html.exists(), "{} was not built", html.display());
    }
    std::fs::remove_dir_all(&out)?;
    Ok(())
}
