//! A unified line diff (`diff -u` format) of two texts: a longest-common-subsequence
//! alignment of their lines, grouped into hunks with three lines of context. Pure; it
//! knows nothing of Kubernetes objects.
//!
//! The quadratic LCS table is fine for what it compares (one rendered object, a few
//! hundred lines); it must not be used for large files.

/// Lines of context around each change, as `diff -u`.
pub const CONTEXT: usize = 3;

/// One line of an alignment.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line<'a> {
    /// In both texts.
    Same(&'a str),
    /// Only in the old text.
    Removed(&'a str),
    /// Only in the new text.
    Added(&'a str),
}

/// Aligns the lines of `old` and `new` along a longest common subsequence; removals come
/// before additions where both happen at one place.
pub fn align<'a>(old: &[&'a str], new: &[&'a str]) -> Vec<Line<'a>> {
    let (n, m) = (old.len(), new.len());
    // lcs[i][j]: length of the LCS of old[i..] and new[j..].
    let mut lcs = vec![vec![0usize; m + 1]; n + 1];
    for i in (0..n).rev() {
        for j in (0..m).rev() {
            lcs[i][j] = if old[i] == new[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let (mut i, mut j) = (0, 0);
    let mut out = Vec::with_capacity(n.max(m));
    while i < n || j < m {
        if i < n && j < m && old[i] == new[j] {
            out.push(Line::Same(old[i]));
            i += 1;
            j += 1;
        } else if i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1]) {
            out.push(Line::Removed(old[i]));
            i += 1;
        } else {
            out.push(Line::Added(new[j]));
            j += 1;
        }
    }
    out
}

/// The unified diff of `old` and `new` under the headers `--- old_name` / `+++ new_name`;
/// empty when the texts are equal. An empty text has no lines (a created or deleted file).
pub fn unified(old: &str, new: &str, old_name: &str, new_name: &str) -> String {
    let old_lines: Vec<&str> = old.lines().collect();
    let new_lines: Vec<&str> = new.lines().collect();
    let lines = align(&old_lines, &new_lines);
    let hunks = hunk_ranges(&lines);
    if hunks.is_empty() {
        return String::new();
    }
    let mut out = format!("--- {old_name}\n+++ {new_name}\n");
    for (start, end) in hunks {
        out.push_str(&hunk(&lines, start, end));
    }
    out
}

/// Index ranges `[start, end)` of the alignment that form hunks: each change with up to
/// [`CONTEXT`] unchanged lines around it, hunks closer than twice that merged.
fn hunk_ranges(lines: &[Line<'_>]) -> Vec<(usize, usize)> {
    let mut ranges: Vec<(usize, usize)> = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        if matches!(line, Line::Same(_)) {
            continue;
        }
        let start = i.saturating_sub(CONTEXT);
        let end = (i + 1 + CONTEXT).min(lines.len());
        match ranges.last_mut() {
            Some(last) if start <= last.1 => last.1 = end,
            _ => ranges.push((start, end)),
        }
    }
    ranges
}

/// One hunk: its `@@ -a,b +c,d @@` header and lines.
fn hunk(lines: &[Line<'_>], start: usize, end: usize) -> String {
    // Line numbers (1-based) where the hunk starts in each text.
    let (mut old_at, mut new_at) = (1, 1);
    for line in &lines[..start] {
        match line {
            Line::Same(_) => {
                old_at += 1;
                new_at += 1;
            }
            Line::Removed(_) => old_at += 1,
            Line::Added(_) => new_at += 1,
        }
    }
    let mut body = String::new();
    let (mut old_len, mut new_len) = (0, 0);
    for line in &lines[start..end] {
        let (mark, text) = match line {
            Line::Same(t) => {
                old_len += 1;
                new_len += 1;
                (' ', t)
            }
            Line::Removed(t) => {
                old_len += 1;
                ('-', t)
            }
            Line::Added(t) => {
                new_len += 1;
                ('+', t)
            }
        };
        body.push(mark);
        body.push_str(text);
        body.push('\n');
    }
    format!(
        "@@ -{} +{} @@\n{body}",
        range(old_at, old_len),
        range(new_at, new_len)
    )
}

/// `start,len` as GNU diff writes it: an empty range starts one line earlier.
fn range(start: usize, len: usize) -> String {
    match len {
        0 => format!("{},0", start - 1),
        1 => format!("{start}"),
        _ => format!("{start},{len}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(lines: &[&str]) -> String {
        lines.iter().map(|l| format!("{l}\n")).collect()
    }

    #[test]
    fn equal_texts_have_no_diff() {
        let a = text(&["a", "b"]);
        assert_eq!(unified(&a, &a, "old", "new"), "");
    }

    #[test]
    fn a_changed_line_is_shown_with_three_lines_of_context() {
        let old = text(&["1", "2", "3", "4", "5", "6", "7", "8", "9"]);
        let new = text(&["1", "2", "3", "4", "FIVE", "6", "7", "8", "9"]);
        assert_eq!(
            unified(&old, &new, "live", "merged"),
            "--- live\n+++ merged\n@@ -2,7 +2,7 @@\n 2\n 3\n 4\n-5\n+FIVE\n 6\n 7\n 8\n"
        );
    }

    #[test]
    fn a_new_text_is_all_additions_from_an_empty_range() {
        assert_eq!(
            unified("", &text(&["a", "b"]), "/dev/null", "new"),
            "--- /dev/null\n+++ new\n@@ -0,0 +1,2 @@\n+a\n+b\n"
        );
    }

    #[test]
    fn a_removed_text_is_all_removals() {
        assert_eq!(
            unified(&text(&["a"]), "", "old", "/dev/null"),
            "--- old\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n"
        );
    }

    #[test]
    fn distant_changes_make_separate_hunks_and_close_ones_merge() {
        let old: Vec<String> = (1..=20).map(|i| i.to_string()).collect();
        let old: Vec<&str> = old.iter().map(String::as_str).collect();
        let mut far = old.clone();
        far[1] = "x";
        far[18] = "y";
        let diff = unified(&text(&old), &text(&far), "a", "b");
        assert_eq!(diff.matches("@@ -").count(), 2, "{diff}");
        let mut near = old.clone();
        near[5] = "x";
        near[10] = "y";
        let diff = unified(&text(&old), &text(&near), "a", "b");
        assert_eq!(diff.matches("@@ -").count(), 1, "{diff}");
        assert!(
            diff.starts_with("--- a\n+++ b\n@@ -3,12 +3,12 @@\n"),
            "{diff}"
        );
    }

    #[test]
    fn the_alignment_keeps_the_longest_common_subsequence() {
        let lines = align(&["a", "b", "c", "d"], &["a", "c", "d", "e"]);
        assert_eq!(
            lines,
            vec![
                Line::Same("a"),
                Line::Removed("b"),
                Line::Same("c"),
                Line::Same("d"),
                Line::Added("e"),
            ]
        );
    }
}
