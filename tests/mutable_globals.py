#!/usr/bin/env python3
"""mutable_globals.py - fails when a compiler folder gains a file-level or
function-static mutable variable that tests/mutable_globals.allow does not
list.  State belongs in the compilation context (sup_context,
support/support.h): settings, diagnostics, sources and the registries; the
one process-wide variable left, the context itself, is listed with the
reason in docs/ARCHITECTURE.md (Invariants)."""
import argparse, os, re, sys

FOLDERS = ["frontend", "layout", "ir", "passes", "driver", "codegen", "api", "support", "tools"]
DECL = re.compile(r"^\s*static\s+(?:_Thread_local\s+)?([^();{]*?)\b([A-Za-z_]\w*)\s*(\[[^]]*\])?\s*(=|;)")
# A static of an anonymous struct or union type whose body spans lines:
# `static struct {` at the start of a line, the variable after its `}`.
ANON = re.compile(r"^static\s+(?:const\s+)?(struct|union)\s*\{[^()]*$")

def mutable(type_words):
    # "const T *p" is a mutable pointer; "T *const p" and "const T x" are not.
    if "*" in type_words:
        return not type_words.rsplit("*", 1)[1].strip().startswith("const")
    return not re.search(r"\bconst\b", type_words)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    root = ap.parse_args().root
    allow_path = os.path.join(root, "tests", "mutable_globals.allow")
    allowed = set()
    for line in open(allow_path):
        line = line.split("#", 1)[0].strip()
        if line: allowed.add(line)
    found, bad = set(), []
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for f in sorted(files):
                if not f.endswith((".c", ".h", ".y", ".l")): continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                for no, line in enumerate(open(path, errors="replace"), 1):
                    a = ANON.match(line)
                    if a and "const" not in line.split(a.group(1))[0]:
                        key = "%s:<anonymous %s at line %d>" % (rel, a.group(1), no)
                        found.add(key)
                        if key not in allowed: bad.append("%s:%d: %s" % (rel, no, line.strip()))
                        continue
                    m = DECL.match(line)
                    if not m or not mutable(m.group(1)): continue
                    key = "%s:%s" % (rel, m.group(2))
                    found.add(key)
                    if key not in allowed: bad.append("%s:%d: %s" % (rel, no, line.strip()))
    for b in bad:
        print("mutable global not in tests/mutable_globals.allow: " + b)
    for stale in sorted(allowed - found):
        print("tests/mutable_globals.allow lists what no longer exists: " + stale)
    return 1 if bad or allowed - found else 0

if __name__ == "__main__":
    sys.exit(main())
