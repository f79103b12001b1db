#!/usr/bin/env python3
"""val_bench.py — what a validation batch costs against a training step.

    bench/val_bench.py --build BUILD [--spec SPEC] [--np N] [--steps 12]
                       [--val-batches 4] [--repeats 5] [--workdir DIR]

Compiles SPEC (default bench/small_cpu.basp) for N ranks (default 1; N > 1
keeps the spec's mesh) with `baspc -o`, then REPEATS times trains it for STEPS
steps with a validation of VAL_BATCHES batches after every step (--val-every
1, the training corpus as --val-data), reading the metrics file: step_ms (the
training step alone: a validation's time is not in it) and val_ms / batches
(one validation batch: the forward-only program on micro_batch × seq_len
tokens).  The first two steps of each run are warm-up and left out.  Prints
the medians over all steps of all runs and their ratio, measured side by side
in the same processes.  A forward is about a third of a step's FLOPs
(backward ≈ 2× forward) and skips the optimizer, so the ratio should be
near 0.3.

Standard library only; OPENBLAS_NUM_THREADS=1 for every process.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys


def run(cmd, env=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit("command failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stdout[-2000:] + r.stderr[-2000:]))
    return r.stdout


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser()
    p.add_argument("--build", required=True)
    p.add_argument("--spec", default=os.path.join(here, "small_cpu.basp"))
    p.add_argument("--np", type=int, default=1)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--val-batches", type=int, default=4)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--workdir", default=None)
    a = p.parse_args()
    work = a.workdir or os.path.join(a.build, "bench", "val_bench")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
    corpus = os.path.join(work, "corpus.bin")
    if not os.path.exists(corpus):
        run([os.path.join(a.build, "data", "mkcorpus"), corpus], env)
    exe = os.path.join(work, "train")
    sets = [] if a.np > 1 else ["--set", "mesh.nodes=1", "--set", "mesh.devices_per_node=1"]
    run([os.path.join(a.build, "baspc"), a.spec, "-q", "-o", exe] + sets, env)
    spec = [l.split() for l in run([os.path.join(a.build, "baspc"), a.spec, "--print-spec"] + sets, env).splitlines()]
    bs = 1
    for key in ("micro_batch", "seq_len"):
        bs *= [int(w[1]) for w in spec if w[:1] == [key]][0]
    steps, vals = [], []
    for r in range(a.repeats):
        metrics = os.path.join(work, "m%d.jsonl" % r)
        run(["mpirun", "--oversubscribe", "-np", str(a.np), exe, "--data", corpus, "--steps", str(a.steps),
             "--quiet", "--metrics", metrics, "--val-data", corpus, "--val-tokens", str(a.val_batches * bs),
             "--val-every", "1"], env)
        recs = [json.loads(l) for l in open(metrics) if l.strip()][2:]
        steps += [x["step_ms"] for x in recs]
        vals += [x["val_ms"] / a.val_batches for x in recs]
    s, v = statistics.median(steps), statistics.median(vals)
    print("%s on %d rank(s), %d tokens per batch; medians over %d steps of %d runs:"
          % (os.path.basename(a.spec), a.np, bs, len(steps), a.repeats))
    print("| training step | validation batch | batch / step |")
    print("|---|---|---|")
    print("| %.1f ms | %.1f ms | %.3f |" % (s, v, v / s))


if __name__ == "__main__":
    main()
