#!/usr/bin/env python3
"""include_graph.py — the folders' include rules (docs/ARCHITECTURE.md,
"Invariants"), checked on the sources.

For every .c, .h, .cu, .cuh and .def file under the layered folders, each
quoted #include is resolved as the compiler resolves it (the including
file's directory, then the include directories the CMake targets give).
An include of a file in another folder must

  1. name that folder's public header (PUBLIC below): private headers stay
     inside their folder;
  2. respect the layering (MAY_INCLUDE below, the link order of the CMake
     targets): no folder includes one above it, and the compiler and the
     runtime meet only in common/.

Inside runtime/ the same two rules hold between its rooms (ROOMS below,
runtime/README.md): the root holds only the rooms, include/ and
README/CMake files; a file includes another room's files only through that
room's header (ROOM_PUBLIC), and only of a room it may use (ROOM_MAY_INCLUDE:
no room but a backend reaches a backend, and the backends never reach each
other).  And no header is included directly by more than a third of the
runtime's .c, .cu, .h and .cuh files: a header everything includes is a
room that has become the whole runtime again.

Before the tree, the checker runs on a small tree with planted violations
and must find each of them, so that a checker which finds nothing is not
mistaken for a clean tree.

Usage: include_graph.py [--root DIR]   (exit 0: clean; 1: violations)
Standard library only."""
import argparse
import os
import re
import sys
import tempfile

FOLDERS = ["common", "support", "layout", "ir", "frontend", "passes", "codegen", "driver", "api", "tools", "runtime"]

# Each folder's public headers: what another folder may include of it.
PUBLIC = {
    "common": {"common/common.h"},
    "support": {"support/support.h"},
    "layout": {"layout/layout.h"},
    "ir": {"ir/ir.h"},
    "frontend": {"frontend/frontend.h"},
    "passes": {"passes/passes.h"},
    "codegen": {"codegen/codegen.h"},
    "driver": {"driver/driver.h"},
    "api": {"api/basp.h", "api/basp_pass.h"},
    "tools": set(),
    "runtime": {"runtime/include/basp_rt.h"},
}

# The layering, bottom up, as the CMake targets link: basp_common below
# everything; basp_support; basp_layout and basp_ir (each on support);
# basp_frontend (layout); basp_passes (ir, layout: IR to IR, no spec);
# basp_codegen (ir; it reads layout's strategy names); basp_driver
# (frontend, passes: the spec-level work); basp, the API (driver,
# codegen); the programs in tools/.  The runtime is the other stack: generated
# programs link it, never the compiler, so it shares only common/.
_COMPILER_BASE = {"common", "support"}
MAY_INCLUDE = {
    "common": set(),
    "support": {"common"},
    "layout": _COMPILER_BASE,
    "ir": _COMPILER_BASE,
    "frontend": _COMPILER_BASE | {"layout"},
    "passes": _COMPILER_BASE | {"layout", "ir"},
    "codegen": _COMPILER_BASE | {"layout", "ir"},
    "driver": _COMPILER_BASE | {"layout", "ir", "frontend", "passes"},
    "api": _COMPILER_BASE | {"layout", "ir", "frontend", "passes", "codegen", "driver"},
    "tools": _COMPILER_BASE | {"layout", "ir", "frontend", "passes", "codegen", "driver", "api"},
    "runtime": {"common"},
}

# Include directories besides the including file's own (CMakeLists.txt:
# the source root for every target, api/ for the API's users, the
# runtime's include/, runtime/, runtime/host/ and runtime/cuda/ for its
# targets).
SEARCH = ["", "api", "runtime/include", "runtime", "runtime/host", "runtime/cuda"]

# The runtime's rooms (runtime/README.md) and each one's header(s): what
# another room may include of it.  include/ is the generated programs' API.
ROOMS = ["include", "host", "core", "data", "ckpt", "obs", "cpu", "cuda"]
ROOM_PUBLIC = {
    "include": {"runtime/include/basp_rt.h"},
    "host": {"runtime/host/rt_host.h"},
    "core": {"runtime/core/rt_core.h", "runtime/core/rt_backend.h"},
    "data": {"runtime/data/rt_data.h"},
    "ckpt": {"runtime/ckpt/rt_ckpt.h"},
    "obs": {"runtime/obs/rt_obs.h"},
    "cpu": {"runtime/cpu/rt_cpu.h"},
    "cuda": {"runtime/cuda/rt_cuda.h"},
}
# Which rooms each may use.  Core orchestrates data, checkpoints and
# observation and reaches a backend only through core/rt_backend.h; the
# backends (cpu, cuda) use core, the host kernels and data's positions and
# document ids, never each other; the host kernels use nothing of the
# runtime.
ROOM_MAY_INCLUDE = {
    "include": set(),
    "host": set(),
    "core": {"include", "data", "ckpt", "obs"},
    "data": {"include", "core", "obs", "host"},
    "ckpt": {"include", "core", "data", "obs"},
    "obs": {"include", "core"},
    "cpu": {"include", "core", "data", "host"},
    "cuda": {"include", "core", "data", "host"},
}
# What the runtime's root may hold besides the rooms.
ROOT_FILES = {"README.md", "CMakeLists.txt"}
RUNTIME_EXT = (".c", ".h", ".cu", ".cuh")

# Known exceptions: (including file, include text) pairs left as they are,
# each with the reason.  None today; an entry here is a debt to pay off.
KNOWN = {}

SOURCE_EXT = (".c", ".h", ".cu", ".cuh", ".def")
INCLUDE_RE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)


def folder_of(rel):
    """The layered folder a path (relative to the root) lies in, or None."""
    top = rel.split("/", 1)[0]
    return top if top in FOLDERS else None


def resolve(root, src_rel, text):
    """The included file relative to root, or None when it is not in the
    tree (a generated header such as parser.tab.h or codegen/cg_config.h)."""
    here = os.path.dirname(src_rel)
    for base in [here] + SEARCH:
        cand = os.path.normpath(os.path.join(root, base, text))
        if os.path.isfile(cand):
            return os.path.relpath(cand, root).replace(os.sep, "/")
    return None


def room_of(rel):
    """The runtime room a path (relative to the root) lies in, "" for the
    runtime's root itself, None outside runtime/."""
    parts = rel.split("/")
    if parts[0] != "runtime":
        return None
    return parts[1] if len(parts) > 2 else ""


def sources(root):
    for folder in FOLDERS:
        top = os.path.join(root, folder)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(SOURCE_EXT):
                    path = os.path.join(dirpath, name)
                    yield os.path.relpath(path, root).replace(os.sep, "/")


def check(root, known=None):
    """Every violation under root, as 'file:line: message' strings."""
    known = KNOWN if known is None else known
    found = []
    for src in sources(root):
        src_folder = folder_of(src)
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in INCLUDE_RE.finditer(text):
            inc = m.group(1)
            line = text.count("\n", 0, m.start()) + 1
            target = resolve(root, src, inc)
            if target is None:
                # Generated: it belongs to the folder its path names, else
                # to the including folder (its own build directory).
                named = folder_of(inc)
                if named is None or named == src_folder:
                    continue
                target = inc
            dst_folder = folder_of(target)
            if dst_folder == src_folder:
                if src_folder == "runtime" and (src, inc) not in known:
                    found.extend(check_room_include(src, line, inc, target))
                continue
            if (src, inc) in known:
                continue
            where = f"{src}:{line}: #include \"{inc}\""
            if dst_folder is None:
                found.append(f"{where}: {target} is outside the layered folders")
                continue
            if target not in PUBLIC[dst_folder]:
                pub = ", ".join(sorted(PUBLIC[dst_folder])) or "none"
                found.append(f"{where}: {target} is private to {dst_folder}/ (its public header: {pub})")
            if dst_folder not in MAY_INCLUDE[src_folder]:
                found.append(f"{where}: {src_folder}/ may not include {dst_folder}/ (layering: "
                             f"{src_folder}/ may include {', '.join(sorted(MAY_INCLUDE[src_folder])) or 'nothing'})")
    return found


def check_room_include(src, line, inc, target):
    """A runtime file's include of another runtime file: through the other
    room's header, and of a room it may use."""
    src_room, dst_room = room_of(src), room_of(target)
    if src_room == dst_room or src_room not in ROOM_MAY_INCLUDE or dst_room not in ROOM_PUBLIC:
        return []  # within a room; a file outside the rooms is check_rooms' to report
    where = f"{src}:{line}: #include \"{inc}\""
    found = []
    if target not in ROOM_PUBLIC[dst_room]:
        pub = ", ".join(sorted(ROOM_PUBLIC[dst_room]))
        found.append(f"{where}: {target} is private to runtime/{dst_room}/ (its header: {pub})")
    if dst_room not in ROOM_MAY_INCLUDE[src_room]:
        found.append(f"{where}: runtime/{src_room}/ may not include runtime/{dst_room}/ (it may include "
                     f"{', '.join(sorted(ROOM_MAY_INCLUDE[src_room])) or 'nothing'})")
    return found


def runtime_files(root):
    """Every .c, .cu, .h and .cuh file under runtime/, relative to root."""
    top = os.path.join(root, "runtime")
    for dirpath, dirnames, filenames in os.walk(top):
        dirnames.sort()
        for name in sorted(filenames):
            if name.endswith(RUNTIME_EXT):
                yield os.path.relpath(os.path.join(dirpath, name), root).replace(os.sep, "/")


def check_rooms(root):
    """The runtime's root holds only its rooms (and README/CMake files), and
    no header is included directly by more than a third of the runtime's
    files.  Returns (violations, files, the most included header, its count)."""
    found = []
    top = os.path.join(root, "runtime")
    if not os.path.isdir(top):
        return found, 0, None, 0
    for name in sorted(os.listdir(top)):
        path = os.path.join(top, name)
        if os.path.isdir(path):
            if name not in ROOMS:
                found.append(f"runtime/{name}/: not a room of the runtime (rooms: {', '.join(ROOMS)})")
        elif name not in ROOT_FILES and not name.endswith(".cmake"):
            found.append(f"runtime/{name}: the runtime's root holds only its rooms; put it in one of them")
    files = list(runtime_files(root))
    includers = {}
    for src in files:
        with open(os.path.join(root, src), encoding="utf-8", errors="replace") as f:
            text = f.read()
        for m in INCLUDE_RE.finditer(text):
            target = resolve(root, src, m.group(1))
            if target and target.startswith("runtime/"):
                includers.setdefault(target, set()).add(src)
    limit = len(files) / 3
    top_hdr, top_n = None, 0
    for hdr in sorted(includers):
        n = len(includers[hdr])
        if n > top_n:
            top_hdr, top_n = hdr, n
        if n > limit:
            found.append(f"{hdr}: included directly by {n} of the runtime's {len(files)} files, more than a third "
                         f"({limit:.1f}): include it through the rooms' own headers")
    return found, len(files), top_hdr, top_n


def planted_tree(tmp):
    """A small tree with one planted violation of each kind; returns how
    many check() must report."""
    files = {
        "common/common.h": "",
        "ir/ir.h": '#include "../common/common.h"\n',
        "ir/ir_internal.h": "",
        "layout/layout.h": '#include "../common/common.h"\n',
        # layering: layout is below ir
        "layout/bad_up.c": '#include "../ir/ir.h"\n',
        # private header of another folder (allowed folder, wrong header)
        "passes/passes.h": '#include "../ir/ir_internal.h"\n',
        # the compiler reaching into the runtime
        "codegen/codegen.h": '#include "runtime/include/basp_rt.h"\n',
        "runtime/include/basp_rt.h": "",
        # the runtime reaching into the compiler, by a plain name: private and layering
        "runtime/core/rt_x.c": '#include "layout/layout.h"\n#include "ir/ir_internal.h"\n',
        # the runtime's rooms: a source file in the root, a room reaching a
        # backend's private header (private and room layering), and a header
        # included directly by 4 of the runtime's 10 files
        "runtime/rt_stray.c": "",
        "runtime/core/rt_core.h": "",
        "runtime/core/rt_a.c": '#include "rt_core.h"\n',
        "runtime/core/rt_b.c": '#include "rt_core.h"\n',
        "runtime/data/rt_data.h": '#include "../core/rt_core.h"\n',
        "runtime/cpu/rt_cpu.h": '#include "../core/rt_core.h"\n',
        "runtime/cpu/cpu_private.h": "",
        "runtime/data/rt_bad.c": '#include "../cpu/cpu_private.h"\n',
    }
    for rel, body in files.items():
        path = os.path.join(tmp, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(body)
    return 9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = ap.parse_args()

    with tempfile.TemporaryDirectory() as tmp:
        want = planted_tree(tmp)
        got = check(tmp, known={}) + check_rooms(tmp)[0]
        # runtime/core/rt_x.c's private compiler header counts twice (private
        # and layering), as does rt_bad.c's backend header: at least one
        # report per planted line.
        if len(got) < want or not all(any(p in g for g in got) for p in
                                      ("layout/bad_up.c", "passes/passes.h", "codegen/codegen.h",
                                       "runtime/core/rt_x.c", "runtime/rt_stray.c", "runtime/data/rt_bad.c",
                                       "runtime/core/rt_core.h: included directly by 4")):
            print("include_graph: the checker missed planted violations:", *got, sep="\n  ")
            return 1

    rooms, nrt, top_hdr, top_n = check_rooms(args.root)
    found = check(args.root) + rooms
    for msg in found:
        print(msg)
    stale = [k for k in KNOWN if not os.path.exists(os.path.join(args.root, k[0]))]
    for src, inc in stale:
        print(f"include_graph: known exception {src} -> {inc} names a file that no longer exists")
    if found or stale:
        print(f"include_graph: {len(found)} violation(s) (docs/ARCHITECTURE.md, Invariants)")
        return 1
    n = sum(1 for _ in sources(args.root))
    print(f"include_graph: {n} files, every cross-folder include a public header of a lower layer; runtime: "
          f"{nrt} files in rooms, the most included header {top_hdr} by {top_n} (at most {nrt / 3:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
