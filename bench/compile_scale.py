#!/usr/bin/env python3
"""compile_scale.py — compile time against model depth and cluster size.

    bench/compile_scale.py --baspc BASPC [--baseline OLD_BASPC] [--timeout 120]
                           [--repeats 3] [--markdown FILE] layers|ranks|both

layers: `baspc examples/llama3_2_1b.basp --memory --set model.layers=L
  --set train.recompute=auto` for L = 64 .. 1024 (the memory plan: three
  trial plans for auto, the final plan, and, where it does not fit, the
  plans of the suggested changes), and `--emit=ir` of the same spec with
  recompute full (one build), wall-clock seconds.
ranks: `baspc examples/llama3_1_8b.basp --schedule` with batch_aware auto
  at N = 256 .. 16384 ranks (N/4 nodes of 4, micro-batch 2 per node: every
  G dividing N and the micro-batch whose K divides the heads is costed).

Each figure is the median of REPEATS runs; a run past TIMEOUT seconds is
reported as "> TIMEOUT".  With --baseline, the other compiler runs the same
commands in the same rounds (alternating), so that load from other
processes hits both alike.  Standard library only.
"""

import argparse
import os
import statistics
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EX = os.path.join(ROOT, "examples")


def run_once(cmd, timeout):
    t0 = time.perf_counter()
    try:
        subprocess.run(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    return time.perf_counter() - t0


def cases(which):
    out = []
    if which in ("layers", "both"):
        for L in (64, 128, 256, 512, 1024):
            base = [os.path.join(EX, "llama3_2_1b.basp"), "--set", "model.layers=%d" % L]
            out.append(("layers", "%d layers, --memory, recompute auto" % L,
                        base + ["--set", "train.recompute=auto", "--memory"]))
            out.append(("layers", "%d layers, --emit=ir, recompute full" % L,
                        base + ["--set", "train.recompute=full", "--emit=ir", "-q", "-o", os.devnull]))
    if which in ("ranks", "both"):
        for N in (256, 1024, 2048, 4096, 8192, 16384):
            nodes = N // 4
            out.append(("ranks", "%d ranks, --schedule, batch_aware auto" % N,
                        [os.path.join(EX, "llama3_1_8b.basp"), "--schedule", "-q", "--set", "mesh.nodes=%d" % nodes,
                         "--set", "train.micro_batch=%d" % (2 * nodes)]))
    return out


def fmt(t, timeout):
    return "> %d" % timeout if t is None else "%.2f" % t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baspc", required=True)
    ap.add_argument("--baseline", help="another baspc, timed in the same rounds")
    ap.add_argument("--timeout", type=float, default=120)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--markdown", help="write the table here too")
    ap.add_argument("which", choices=["layers", "ranks", "both"], nargs="?", default="both")
    a = ap.parse_args()
    bins = [("new", a.baspc)] + ([("baseline", a.baseline)] if a.baseline else [])
    head = "| case | " + " | ".join("%s s" % n for n, _ in bins) + " |"
    lines = [head, "|" + "---|" * (len(bins) + 1)]
    print(head, flush=True)
    for _, what, args in cases(a.which):
        times = {n: [] for n, _ in bins}
        for r in range(a.repeats):
            for n, b in (bins if r % 2 == 0 else bins[::-1]):
                if times[n] and times[n][-1] is None:
                    continue  # timed out once: not again
                times[n].append(run_once([b] + args, a.timeout))
        med = []
        for n, _ in bins:
            ts = times[n]
            med.append(None if None in ts else statistics.median(ts))
        line = "| %s | %s |" % (what, " | ".join(fmt(t, a.timeout) for t in med))
        lines.append(line)
        print(line, flush=True)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
