#!/usr/bin/env python3
"""docs.check: the documentation's links and the README's promises.

Checks, standard library only:
  (a) README.md has at most 200 lines (it is the front door; the reference
      lives in docs/ and the folders' README.md files);
  (b) every relative link and image in README.md, docs/*.md and every
      README.md below the root (tests/, bench/, each folder's) resolves to an
      existing file or folder, and every #anchor to a heading of the target
      page (GitHub's rule: lowercase, punctuation dropped, spaces to '-',
      a repeated heading gets -1, -2, ...);
  (c) README.md's "Set-up" section opens with a fenced block holding exactly
      the two set-up commands below, and both scripts exist.

Usage: docs_check.py [--root DIR] [FILE.md ...]   (files: check only these
for (b)).  Exit 0 when everything holds, 1 naming each failure as
FILE:LINE: message.
"""
import argparse
import os
import re
import sys
import unicodedata
import urllib.parse

MAX_README_LINES = 200
SETUP_HEADING = "Set-up"
SETUP_LINES = [
    "scripts/demo    # main job: compile examples/tiny_llama.basp, train it on 4 CPU ranks with the generated corpus",
    "scripts/test    # the test suite: installs what is missing, builds, runs CTest",
]

FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")
ATX = re.compile(r"^ {0,3}(#{1,6})(?:[ \t]+(.*?))?[ \t]*$")
SETEXT = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
# [text](target "title") and ![alt](target); text may hold one level of [].
INLINE = re.compile(r"(!?)\[((?:[^\[\]\\]|\\.|\[[^\[\]]*\])*)\]\(\s*(<[^>\n]*>|(?:[^()\s]|\([^()\s]*\))*)"
                    r"(?:\s+(?:\"[^\"]*\"|'[^']*'|\([^()]*\)))?\s*\)")
REFDEF = re.compile(r"^ {0,3}\[([^\]]+)\]:\s*(<[^>]*>|\S+)")
HTML = re.compile(r"<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*[\"']([^\"']+)[\"']", re.I)
HTML_ID = re.compile(r"<[a-z][^>]*?\b(?:id|name)\s*=\s*[\"']([^\"']+)[\"']", re.I)
SCHEME = re.compile(r"^[a-zA-Z][a-zA-Z0-9+.-]*:")


def slug(text):
    """GitHub's heading anchor: markup and punctuation dropped, lowercase,
    each space a '-'."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", text)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text)                     # inline HTML
    out = []
    for ch in text.lower():
        cat = unicodedata.category(ch)
        if ch in " -" or cat[0] in "LMN" or cat == "Pc":
            out.append("-" if ch == " " else ch)
    return "".join(out)


def code_spans(line):
    """[start, end) of each inline code span on a line."""
    spans, i = [], 0
    while True:
        m = re.compile(r"`+").search(line, i)
        if not m:
            return spans
        tick = m.group(0)
        close = re.compile(r"(?<!`)" + tick + r"(?!`)").search(line, m.end())
        if not close:
            i = m.end()
            continue
        spans.append((m.start(), close.end()))
        i = close.end()


def prose_lines(text):
    """(line number, line) outside fenced code blocks."""
    fence = None
    for n, line in enumerate(text.split("\n"), 1):
        m = FENCE.match(line)
        if fence:
            if m and m.group(1)[0] == fence[0] and len(m.group(1)) >= len(fence) \
                    and not line.strip()[len(m.group(1)):].strip():
                fence = None
            continue
        if m:
            fence = m.group(1)
            continue
        yield n, line


_anchor_cache = {}


def anchors(path):
    """The anchors a Markdown page defines: its headings' slugs (repeats
    numbered as GitHub numbers them) and HTML id/name attributes."""
    if path in _anchor_cache:
        return _anchor_cache[path]
    with open(path, encoding="utf-8") as f:
        text = f.read()
    seen, found, prev = {}, set(), None
    for _, line in prose_lines(text):
        title = None
        m = ATX.match(line)
        if m:
            title = re.sub(r"[ \t]+#+[ \t]*$", "", m.group(2) or "")
        elif prev is not None and prev.strip() and SETEXT.match(line) and not ATX.match(prev) \
                and not prev.lstrip().startswith(("|", "-", "*", "+", ">")):
            title = prev.strip()
        if title is not None:
            base = slug(title)
            k = seen.get(base, 0)
            found.add(base if k == 0 else f"{base}-{k}")
            seen[base] = k + 1
        found.update(a.lower() for a in HTML_ID.findall(line))
        prev = line
    _anchor_cache[path] = found
    return found


def links(text):
    """(line, target) for every inline link, image, reference definition and
    HTML href/src outside code."""
    for n, line in prose_lines(text):
        spans = code_spans(line)
        inside = lambda pos: any(a <= pos < b for a, b in spans)
        for m in INLINE.finditer(line):
            if not inside(m.start()):
                yield n, m.group(3).strip("<>")
        m = REFDEF.match(line)
        if m and not m.group(1).startswith("^"):
            yield n, m.group(2).strip("<>")
        for m in HTML.finditer(line):
            if not inside(m.start()):
                yield n, m.group(1)


def check_links(root, page, errors):
    with open(page, encoding="utf-8") as f:
        text = f.read()
    rel = os.path.relpath(page, root)
    for n, target in links(text):
        if not target or SCHEME.match(target) or target.startswith("//"):
            continue  # absolute URLs are not checked (no network)
        path, _, frag = target.partition("#")
        path = urllib.parse.unquote(path.split("?")[0])
        if path.startswith("/"):
            dest = os.path.join(root, path.lstrip("/"))
        elif path:
            dest = os.path.join(os.path.dirname(page), path)
        else:
            dest = page
        dest = os.path.normpath(dest)
        if not os.path.exists(dest):
            errors.append(f"{rel}:{n}: broken link '{target}': {os.path.relpath(dest, root)} does not exist")
            continue
        if frag and dest.endswith(".md") and os.path.isfile(dest):
            if urllib.parse.unquote(frag).lower() not in anchors(dest):
                errors.append(f"{rel}:{n}: broken anchor '{target}': no heading "
                              f"'#{frag}' in {os.path.relpath(dest, root)}")


def pages(root):
    """README.md, docs/*.md and every README.md below the root (build trees,
    hidden folders and caches left out)."""
    found = []
    for d, dirs, files in os.walk(root):
        dirs[:] = sorted(x for x in dirs if not x.startswith((".", "build", "__pycache__")))
        for f in sorted(files):
            if f == "README.md":
                found.append(os.path.join(d, f))
    docs = os.path.join(root, "docs")
    if os.path.isdir(docs):
        found += [os.path.join(docs, f) for f in sorted(os.listdir(docs)) if f.endswith(".md")]
    return found


def check_readme(root, errors):
    readme = os.path.join(root, "README.md")
    with open(readme, encoding="utf-8") as f:
        text = f.read()
    lines = text.rstrip("\n").split("\n")
    if len(lines) > MAX_README_LINES:
        errors.append(f"README.md: {len(lines)} lines, at most {MAX_README_LINES}: "
                      "move reference material to docs/")
    # The first fenced block after the "## Set-up" heading.
    start = next((i for i, l in enumerate(lines) if re.match(r"^##\s+" + re.escape(SETUP_HEADING) + r"\s*$", l)),
                 None)
    if start is None:
        errors.append(f"README.md: no '## {SETUP_HEADING}' heading holding the set-up commands")
        return
    block, i = None, start + 1
    while i < len(lines) and not lines[i].startswith("## "):
        if FENCE.match(lines[i]):
            j = i + 1
            while j < len(lines) and not FENCE.match(lines[j]):
                j += 1
            block = (i + 1, lines[i + 1:j])
            break
        i += 1
    if block is None:
        errors.append(f"README.md:{start + 1}: no fenced block under '## {SETUP_HEADING}'")
        return
    at, body = block
    if body != SETUP_LINES:
        errors.append(f"README.md:{at}: the set-up block must hold exactly these two lines:\n    "
                      + "\n    ".join(SETUP_LINES) + "\n  it holds:\n    " + "\n    ".join(body))
    for cmd in SETUP_LINES:
        script = os.path.join(root, cmd.split()[0])
        if not (os.path.isfile(script) and os.access(script, os.X_OK)):
            errors.append(f"README.md:{at}: {cmd.split()[0]} is not an executable file")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
    ap.add_argument("files", nargs="*", help="Markdown files to check for links (default: all)")
    args = ap.parse_args()
    root = os.path.abspath(args.root)
    errors = []
    check_readme(root, errors)
    todo = [os.path.abspath(f) for f in args.files] or pages(root)
    for page in todo:
        check_links(root, page, errors)
    for e in errors:
        print(e, file=sys.stderr)
    if errors:
        print(f"docs.check: {len(errors)} failure(s)", file=sys.stderr)
        return 1
    print(f"docs.check: {len(todo)} page(s), README.md "
          f"{len(open(os.path.join(root, 'README.md'), encoding='utf-8').read().rstrip(chr(10)).split(chr(10)))} lines: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
