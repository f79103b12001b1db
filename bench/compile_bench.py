#!/usr/bin/env python3
"""compile_bench.py — how long planning takes against model depth.

    bench/compile_bench.py --baspc BASPC [--baseline OLD_BASPC] [--repeats 3]
                           [--timeout 60] [--layers 64,128,256,512,1024]
                           [--out bench/results/compile]

`baspc examples/tiny_llama.basp` on 2 ranks (mesh.nodes=1) at L layers, for
L = 64 .. 1024, with Ulysses (layout.batch_aware=off) and with batch_aware
auto (the planner builds and costs every candidate):

  --memory        with train.recompute=auto (trial plans, then the plan)
  --max-seq-len   (a search: every probe builds the spec and plans it)

Each figure is the median of REPEATS runs: wall-clock seconds, and the CPU
seconds (user + system) of the compiler, which load from other processes
does not inflate.  A run past TIMEOUT seconds is reported as "> TIMEOUT",
and the case is not run at larger depths.  With --baseline, the other
compiler runs the same commands in the same rounds, alternating.  Writes
OUT/results.json and OUT/results.md, with the machine (nproc, CPU model).
Standard library only.
"""

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import time

from machine import cpu_model  # bench/machine.py

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(ROOT, "examples", "tiny_llama.basp")
LAYOUTS = (("ulysses", "off"), ("batch_aware auto", "auto"))
ACTIONS = (("--memory", ["--memory", "--set", "train.recompute=auto"]), ("--max-seq-len", ["--max-seq-len"]))


def run_once(baspc, args, timeout):
    """(wall s, cpu s) of one run, or None past the timeout."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    try:
        subprocess.run([baspc, SPEC] + args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu




def cases(layers):
    for action, aargs in ACTIONS:
        for lname, ba in LAYOUTS:
            for L in layers:
                args = aargs + ["--set", "model.layers=%d" % L, "--set", "mesh.nodes=1", "--set",
                                "layout.batch_aware=%s" % ba]
                yield {"action": action, "layout": lname, "layers": L, "args": args}


def measure(compilers, layers, repeats, timeout):
    rows = []
    gave_up = set()  # (compiler, action, layout): timed out at a smaller depth
    for case in cases(layers):
        row = {k: case[k] for k in ("action", "layout", "layers")}
        row["command"] = "baspc examples/tiny_llama.basp " + " ".join(case["args"])
        runs = {name: [] for name, _ in compilers}
        for _ in range(repeats):  # the compilers alternate, so that load hits both alike
            for name, baspc in compilers:
                key = (name, case["action"], case["layout"])
                if key in gave_up or runs[name] is None:
                    continue
                r = run_once(baspc, case["args"], timeout)
                if r is None:
                    gave_up.add(key)
                    runs[name] = None
                else:
                    runs[name].append(r)
        for name, _ in compilers:
            got = runs[name]
            if got:
                row[name] = {"wall_s": statistics.median(w for w, _ in got),
                             "cpu_s": statistics.median(c for _, c in got), "runs": len(got)}
            else:  # skipped: a smaller depth was past the timeout
                row[name] = {"wall_s": None, "cpu_s": None, "timeout_s": timeout, "skipped": got is not None}
            print(case["action"], case["layout"], case["layers"], name, row[name], flush=True)
        rows.append(row)
    return rows


def fmt(cell, key):
    if cell.get(key) is not None:
        return "%.2f" % cell[key]
    return "(> %g)" % cell["timeout_s"] if cell.get("skipped") else "> %g" % cell["timeout_s"]


def write_md(path, rows, names, machine, repeats):
    with open(path, "w") as f:
        f.write("# Planning time against depth\n\n")
        f.write("`bench/compile_bench.py`: `baspc examples/tiny_llama.basp` on 2 ranks (`--set mesh.nodes=1`) "
                "with `--set model.layers=L`, Ulysses (`layout.batch_aware=off`) and batch-aware auto; "
                "`--memory` with `train.recompute=auto`, and `--max-seq-len`.  Median of %d runs, seconds "
                "(wall clock, and CPU = user + system of the compiler).  \"> T\": past the timeout; "
                "\"(> T)\": not run, a smaller depth was past it.\n\n" % repeats)
        f.write("Machine: %s, nproc %d.\n\n" % (machine["cpu_model"], machine["nproc"]))
        head = "| action | layout | layers |" + "".join(" %s wall | %s CPU |" % (n, n) for n in names)
        f.write(head + "\n|" + "---|" * (3 + 2 * len(names)) + "\n")
        for r in rows:
            cells = "".join(" %s | %s |" % (fmt(r[n], "wall_s"), fmt(r[n], "cpu_s")) for n in names)
            f.write("| %s | %s | %d |%s\n" % (r["action"], r["layout"], r["layers"], cells))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baspc", default=os.path.join(ROOT, "build", "baspc"))
    ap.add_argument("--baseline", help="another compiler to time beside it")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=60)
    ap.add_argument("--layers", default="64,128,256,512,1024")
    ap.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "compile"))
    a = ap.parse_args()
    compilers = [("new", a.baspc)] + ([("baseline", a.baseline)] if a.baseline else [])
    layers = [int(x) for x in a.layers.split(",")]
    machine = {"nproc": os.cpu_count(), "cpu_model": cpu_model(), "platform": platform.platform()}
    rows = measure(compilers, layers, a.repeats, a.timeout)
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.json"), "w") as f:
        json.dump({"machine": machine, "repeats": a.repeats, "timeout_s": a.timeout,
                   "compilers": {n: os.path.relpath(b, ROOT) for n, b in compilers}, "rows": rows}, f, indent=1)
        f.write("\n")
    write_md(os.path.join(a.out, "results.md"), rows, [n for n, _ in compilers], machine, a.repeats)


if __name__ == "__main__":
    main()
