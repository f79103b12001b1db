#!/usr/bin/env python3
"""blas_compare.py — the CPU BLAS candidates on basp's GEMM shapes, side by side.

    bench/blas_compare.py [--rounds R] [--out DIR] NAME=BUILD_DIR ...

Each BUILD_DIR is a build of this tree configured with one BLAS (CMake
BASP_BLAS=OpenBLAS, the default, or BLIS) holding bench/bench_sgemm.  For
every shape the benchmarks run one after another, R rounds in rotating order
(these machines are noisy), each round bench_sgemm's median of 5 samples on
one thread; the table gives the median over rounds and the ratio of each BLAS
to the first.  The shapes are the GEMMs of a training step, as the kernels
call them (M x N x K, op(A) op(B)):

  - linear forward [tokens, in] x [in, out] and its backward's dx (nt) and
    dw (tn) at tokens 512..4096 and hidden 256..1024 (the MLP's 3 x hidden);
  - attention's tiles (runtime/host/kern_attention.c: 64 query rows against
    128 keys) at head dims 32, 64 and 128: scores q k^T (nt) and p v (nn);
  - the LM head's row chunk against the vocabulary (nt) and its dw (tn);
  - 1024^3 for reference.

Writes DIR/results.md and results.csv (default bench/results/blas/).
Standard library only.
"""

import argparse
import os
import statistics
import subprocess
import sys

from machine import cpu_model  # bench/machine.py

HERE = os.path.dirname(os.path.abspath(__file__))
SHAPES = [
    "1024x1024x1024",
    # linear forward, dx, dw
    "512x256x256", "512x256x256:nt", "256x256x512:tn",
    "2048x768x256", "2048x256x768:nt", "256x768x2048:tn",
    "4096x1024x1024", "4096x1024x1024:nt", "1024x1024x4096:tn",
    # attention tiles: scores (q k^T) and p v
    "64x128x32:nt", "64x32x128", "64x128x64:nt", "64x64x128", "64x128x128:nt", "64x128x128",
    # LM head: a row chunk against the vocabulary, and its dw
    "256x32000x512:nt", "32000x512x256:tn",
]




def run(tool, shape):
    r = subprocess.run([tool, "--repeats", "5", shape], capture_output=True, text=True,
                       env=dict(os.environ, OPENBLAS_NUM_THREADS="1", BLIS_NUM_THREADS="1", OMP_NUM_THREADS="1"))
    if r.returncode:
        sys.exit(f"blas_compare: {tool} {shape} failed:\n{r.stderr}")
    return float(r.stdout.split()[-1])


def banner(build):
    """The BLAS the build links, from its CMake cache."""
    try:
        with open(os.path.join(build, "CMakeCache.txt")) as f:
            for line in f:
                if line.startswith("BASP_BLAS:"):
                    return line.split("=", 1)[1].strip()
    except OSError:
        pass
    return "?"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "blas"))
    ap.add_argument("--shapes", help="comma-separated MxNxK[:TT] (default: a training step's)")
    ap.add_argument("builds", nargs="+", metavar="NAME=BUILD_DIR")
    a = ap.parse_args()
    builds = []
    for b in a.builds:
        name, _, path = b.partition("=")
        tool = os.path.join(path, "bench", "bench_sgemm")
        if not path or not os.access(tool, os.X_OK):
            sys.exit(f"blas_compare: {b}: no {tool} (cmake --build DIR --target bench_sgemm)")
        builds.append((name, tool, banner(path)))
    shapes = a.shapes.split(",") if a.shapes else SHAPES
    got = {(s, n): [] for s in shapes for n, _, _ in builds}
    for r in range(a.rounds):
        for s in shapes:
            order = builds[r % len(builds):] + builds[:r % len(builds)]
            for name, tool, _ in order:
                got[(s, name)].append(run(tool, s))
        print(f"round {r + 1}/{a.rounds} done", file=sys.stderr)
    first = builds[0][0]
    head = "| shape | " + " | ".join(f"{n} GFLOP/s" for n, _, _ in builds) + " | " + \
        " | ".join(f"{n} / {first}" for n, _, _ in builds[1:]) + " |"
    md = ["# CPU BLAS candidates on basp's GEMM shapes", "",
          f"`bench/blas_compare.py {' '.join(sys.argv[1:])}` on {cpu_model()} ({os.cpu_count()} cores), one "
          f"thread, {a.rounds} rounds in rotating order, medians of bench_sgemm's medians.  Builds: "
          + ", ".join(f"{n} (CMake BASP_BLAS={blas})" for n, _, blas in builds) + ".", "",
          head, "|---|" + "---:|" * (2 * len(builds) - 1)]
    csv = ["shape," + ",".join(n for n, _, _ in builds)]
    ratios = {n: [] for n, _, _ in builds[1:]}
    for s in shapes:
        med = {n: statistics.median(got[(s, n)]) for n, _, _ in builds}
        for n in ratios:
            ratios[n].append(med[n] / med[first])
        md.append(f"| {s} | " + " | ".join(f"{med[n]:.1f}" for n, _, _ in builds) + " | " +
                  " | ".join(f"{med[n] / med[first]:.2f}" for n, _, _ in builds[1:]) + " |")
        csv.append(s + "," + ",".join(f"{med[n]:.3f}" for n, _, _ in builds))
    md.append("")
    for n, rs in ratios.items():
        geo = 1.0
        for x in rs:
            geo *= x
        md.append(f"{n} / {first}: geometric mean {geo ** (1 / len(rs)):.2f}, range {min(rs):.2f}–{max(rs):.2f}.")
    os.makedirs(a.out, exist_ok=True)
    with open(os.path.join(a.out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(a.out, "results.csv"), "w") as f:
        f.write("\n".join(csv) + "\n")
    print("\n".join(md))


if __name__ == "__main__":
    main()
