#!/usr/bin/env python3
"""Lists non-test functions over 80 lines and non-test files over 600 lines (not counting
their `#[cfg(test)]` modules) in the workspace's Rust sources.

Usage: python3 scripts/long_code.py [MAX_FN_LINES] [MAX_FILE_LINES]
Test code is skipped: the `tests/` crate, `tests/` and `benches/` directories, `*_tests.rs`
files and `#[cfg(test)]` modules. A function's length runs from its `fn` line to its
closing brace, both included.
"""
import os
import re
import sys

SKIP_DIRS = {"target", "tests", "benches", "fuzz", ".git", "node_modules"}
FN = re.compile(r"^\s*(pub(\([^)]*\))?\s+)?(const\s+)?(async\s+)?(unsafe\s+)?(extern\s+\"[^\"]*\"\s+)?fn\s+(\w+)")


def code_only(text):
    """The text with comments, strings and char literals blanked (newlines kept)."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            j = text.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif text.startswith("/*", i):
            depth, j = 1, i + 2
            while j < n and depth:
                if text.startswith("/*", j):
                    depth, j = depth + 1, j + 2
                elif text.startswith("*/", j):
                    depth, j = depth - 1, j + 2
                else:
                    j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif re.match(r'b?r#*"', text[i:i + 40]) and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == "_")):
            m = re.match(r'b?r(#*)"', text[i:])
            end = '"' + m.group(1)
            j = text.find(end, i + m.end())
            j = n if j < 0 else j + len(end)
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == '"':
            j = i + 1
            while j < n and text[j] != '"':
                j += 2 if text[j] == "\\" else 1
            j += 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif c == "'":
            m = re.match(r"'(\\.|\\u\{[0-9a-fA-F]+\}|\\x[0-9a-fA-F]{2}|[^\\'])'", text[i:])
            if m:
                out.append(" " * m.end())
                i += m.end()
            else:
                out.append(c)
                i += 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def block_end(lines, start):
    """The index of the line closing the first `{` at or after line `start` (None: `;` first)."""
    depth, opened = 0, False
    for k in range(start, len(lines)):
        for ch in lines[k]:
            if ch == "{":
                depth, opened = depth + 1, True
            elif ch == "}":
                depth -= 1
                if opened and depth == 0:
                    return k
            elif ch == ";" and not opened and depth == 0:
                return None
    return None


def test_ranges(lines):
    ranges, k = [], 0
    while k < len(lines):
        if re.match(r"\s*#\[cfg\(test\)\]", lines[k]):
            j = k + 1
            while j < len(lines) and lines[j].strip().startswith("#["):
                j += 1
            if j < len(lines) and re.match(r"\s*(pub(\([^)]*\))?\s+)?mod\s+\w+\s*\{", lines[j]):
                end = block_end(lines, j)
                if end is not None:
                    ranges.append((k, end))
                    k = end
        k += 1
    return ranges


def scan(path, max_fn, max_file):
    text = open(path, encoding="utf-8").read()
    lines = code_only(text).split("\n")
    tests = test_ranges(lines)
    in_test = lambda k: any(a <= k <= b for a, b in tests)
    found = []
    non_test = sum(1 for k in range(len(text.splitlines())) if not in_test(k))
    if non_test > max_file:
        found.append(f"FILE {path}: {non_test} lines (without test modules)")
    for k, line in enumerate(lines):
        m = FN.match(line)
        if not m or in_test(k):
            continue
        end = block_end(lines, k)
        if end is not None and end - k + 1 > max_fn:
            found.append(f"FN   {path}:{k + 1} {m.group(7)}: {end - k + 1} lines")
    return found


def main():
    max_fn = int(sys.argv[1]) if len(sys.argv) > 1 else 80
    max_file = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    found = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if x not in SKIP_DIRS)
        for f in sorted(files):
            if f.endswith(".rs") and not f.endswith("_tests.rs") and f != "tests.rs":
                found += scan(os.path.join(d, f), max_fn, max_file)
    for line in found:
        print(line.replace(root + "/", ""))
    sys.exit(1 if found else 0)


if __name__ == "__main__":
    main()
