#!/usr/bin/env python3
"""offload_step.py — what each host-offload setting costs a training step,
and whether the run stays within its memory plan, on either target.

    bench/offload_step.py --baspc BASPC --spec SPEC --data CORPUS [--target cpu|cuda]
                          [--mpirun MPIRUN] [--np 1] [--set K=V ...]
                          [--modes none,activations,optimizer,all] [--steps 8]
                          [--repeats 3] [--workdir DIR] [--json FILE]

SPEC is compiled once per train.offload mode (with the --set settings).
For REPEATS rounds every mode trains STEPS steps with --metrics, in an order
that rotates each round; a run's step time is the median of its steps after
the second (the first ones warm caches and, on a GPU, build cuDNN graphs),
and a mode's figure is the median over rounds, with its ratio to `none`
from the same rounds.  Each run is also held to `baspc --memory --json` for
the same target: the device arena must be the plan's to the byte, the
measured device peak (arena high-water mark plus workspaces) at most the
plan's on cuda and within 2% of it on cpu, and the host arena's high-water
mark the plan's host bytes exactly.  On cpu the losses of every mode are
equal (tests/train/offload.sh checks them bit for bit); on cuda the host
AdamW rounds differently from the device's, so they differ in the last
digits.

Exit status 0 when every run trained and stayed within its plan, 1 otherwise.
Standard library only; OPENBLAS_NUM_THREADS=1 unless set.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys


def env():
    e = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1")
    e.setdefault("OPENBLAS_NUM_THREADS", "1")
    return e


def run(cmd):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env())
    if r.returncode != 0:
        sys.exit("offload_step: command failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stdout[-3000:]))
    return r.stdout


def gib(n):
    return "%.2f GiB" % (n / 2**30) if n >= 2**30 else "%.2f MiB" % (n / 2**20)


def plan_check(plan, last, target):
    """Problems with one run's memory against its plan (empty when none).
    The device peak: on cuda at most the plan's (it holds every workspace's
    bound, tests/gpu/train_vs_cpu.py); on cpu within 2% of it, as
    tests/train/memplan.sh holds it (the kernels' scratch outside the
    arena is sized at run time)."""
    bad = []
    if last["mem_arena_bytes"] != plan["arena_bytes"]:
        bad.append("arena %d != plan %d" % (last["mem_arena_bytes"], plan["arena_bytes"]))
    got, want = last["mem_peak_bytes"], plan["peak_bytes_per_rank"]
    if got > want if target == "cuda" else abs(got - want) > 0.02 * want:
        bad.append("peak %d, plan %d" % (got, want))
    want = plan.get("host_bytes_per_rank", 0)
    got = last.get("mem_host_peak_bytes", 0)
    if got != want:
        bad.append("host peak %d != plan %d" % (got, want))
    return bad


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--baspc", required=True)
    ap.add_argument("--spec", required=True)
    ap.add_argument("--data", required=True)
    ap.add_argument("--target", choices=["cpu", "cuda"], default="cpu")
    ap.add_argument("--mpirun", default="mpirun")
    ap.add_argument("--np", type=int, default=1)
    ap.add_argument("--set", action="append", default=[], metavar="K=V")
    ap.add_argument("--modes", default="none,activations,optimizer,all")
    ap.add_argument("--steps", type=int, default=8)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--workdir", default="/tmp/basp-offload-step")
    ap.add_argument("--json")
    a = ap.parse_args()
    modes = a.modes.split(",")
    if "none" not in modes:
        modes.insert(0, "none")
    if a.steps < 3:
        ap.error("--steps must be at least 3 (the first two are not timed)")
    os.makedirs(a.workdir, exist_ok=True)
    exes, plans = {}, {}
    for m in modes:
        sets = []
        for kv in a.set + ["train.offload=" + m]:
            sets += ["--set", kv]
        exe = os.path.join(a.workdir, "train_" + m)
        run([a.baspc, a.spec, "-q", "--target=" + a.target, "-o", exe] + sets)
        plans[m] = json.loads(run([a.baspc, a.spec, "-q", "--target=" + a.target, "--memory", "--json"] + sets))
        exes[m] = exe
        print("built %s: plan device peak %s, host %s" % (
            m, gib(plans[m]["peak_bytes_per_rank"]), gib(plans[m].get("host_bytes_per_rank", 0))), flush=True)
    times = {m: [] for m in modes}
    last = {}
    bad = []
    for r in range(a.repeats):
        order = modes[r % len(modes):] + modes[:r % len(modes)]
        for m in order:
            metrics = os.path.join(a.workdir, "metrics_%s.jsonl" % m)
            if os.path.exists(metrics):
                os.remove(metrics)
            run([a.mpirun, "-np", str(a.np), exes[m], "--data", a.data, "--steps", str(a.steps), "--quiet",
                 "--metrics", metrics])
            rows = [json.loads(x) for x in open(metrics) if '"step_ms"' in x]
            if len(rows) < a.steps:
                sys.exit("offload_step: %s trained %d of %d steps" % (m, len(rows), a.steps))
            times[m].append(statistics.median(x["step_ms"] for x in rows[2:]))
            last[m] = rows[-1]
            for b in plan_check(plans[m], rows[-1], a.target):
                bad.append("%s: %s" % (m, b))
            print("round %d/%d %s: %.1f ms/step" % (r + 1, a.repeats, m, times[m][-1]), flush=True)
    out = []
    print("| offload | median step | vs none | tokens/s | device peak (plan) | host peak (plan) | loss at step %d |"
          % a.steps)
    print("|---|---|---|---|---|---|---|")
    for m in modes:
        med = statistics.median(times[m])
        ratio = statistics.median(t / b for t, b in zip(times[m], times["none"]))
        l = last[m]
        tps = l["tokens_per_s"] * l["step_ms"] / med
        p = plans[m]
        out.append({"offload": m, "median_step_ms": med, "ratio_vs_none": ratio, "step_ms_per_round": times[m],
                    "tokens_per_s": tps, "mem_peak_bytes": l["mem_peak_bytes"],
                    "plan_peak_bytes": p["peak_bytes_per_rank"], "mem_host_peak_bytes": l.get("mem_host_peak_bytes", 0),
                    "plan_host_bytes": p.get("host_bytes_per_rank", 0), "loss": l["loss"]})
        print("| %s | %.1f ms | %.2fx | %.0f | %s (%s) | %s (%s) | %.4f |" % (
            m, med, ratio, tps, gib(l["mem_peak_bytes"]), gib(p["peak_bytes_per_rank"]),
            gib(l.get("mem_host_peak_bytes", 0)), gib(p.get("host_bytes_per_rank", 0)), l["loss"]))
    for b in bad:
        print("FAIL: outside the memory plan: " + b)
    print("memory plans: %s" % ("every run within its plan" if not bad else "%d violation(s)" % len(bad)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"spec": a.spec, "target": a.target, "np": a.np, "set": a.set, "steps": a.steps,
                       "repeats": a.repeats, "rows": out, "violations": bad}, f, indent=1)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
