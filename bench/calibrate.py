#!/usr/bin/env python3
"""calibrate.py — fit the cost model to what this machine measures.

    bench/calibrate.py --build BUILD [--steps 30] [--workdir DIR]

From an existing build directory (BUILD/baspc, BUILD/basp-opt,
BUILD/data/mkcorpus):

  1. compiles the tiny examples with `baspc -o` (examples/tiny_llama.basp on
     4 ranks, examples/tiny_gqa_8.basp on 8), each at its own seq_len and at
     4x it (--set train.seq_len=...), so the collectives come in several
     message sizes;
  2. trains each for STEPS steps with --profile and reads rank 0's per-kind
     calls and seconds;
  3. runs the cost pass (`basp-opt --passes=cost` on the IR that
     `baspc --passes=ulysses,batch-aware,place,zero --emit=ir` prints) with
     probe parameters, which separate each op's model into its parts:
       GEMM ops (linear, attention, lm_head_loss and their backwards):
         compute time at compute_fraction 1, memory bandwidth unlimited;
       the other compute ops: memory time at mem_bw_fraction 1;
       collectives: the α count (latency 1, bandwidth unlimited) and the
         bytes on the wire (latency 0, bandwidth 1 B/s);
  4. fits compute_fraction = Σ GEMM model time / Σ GEMM measured time,
     mem_bw_fraction likewise for the element-wise ops, and one (α, β) for
     every collective by least squares over (run, collective kind) — every
     rank shares the machine's memory, so the spec's "inter" link is the same
     shared-memory MPI transport as its "intra" link and both get the fit;
  5. re-runs the cost pass with the fitted values and prints, per run, a
     table of predicted vs measured ms per step by op kind, the step time and
     the all-to-all share, with the errors.

The machine's cores are shared by all ranks (mpirun --oversubscribe): the
measured times include waiting for a core, and the fit absorbs that — the
fitted figures describe what this machine delivers to this many ranks, not
its peak.  Standard library only; OPENBLAS_NUM_THREADS=1 for every rank.
"""

import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

GEMM = {"linear", "linear_bwd", "attention", "attention_bwd", "lm_head_loss", "lm_head_loss_bwd"}
COLL = {"all_to_all", "all_gather", "reduce_scatter", "all_reduce", "send", "recv"}
# The cpu preset's figures (frontend/presets.c), kept as the reference the
# fractions scale.
PEAK, MEM_BW = 1e11, 2e10

RUNS = [  # (name, spec, ranks, seq_len override or None)
    ("tiny_llama", "examples/tiny_llama.basp", 4, None),
    ("tiny_llama s512", "examples/tiny_llama.basp", 4, 512),
    ("tiny_gqa_8", "examples/tiny_gqa_8.basp", 8, None),
    ("tiny_gqa_8 s1024", "examples/tiny_gqa_8.basp", 8, 1024),
]

# An op line: optional results ("%a, %b = "), the op name, ..., its cost.
# Ops without results (adamw, free, send) must match too.
OP_RE = re.compile(r"^(?:%\S+(?:, %\S+)* = )?([a-z_]+) .*cost_us = ([0-9.e+-]+)")


def sh(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode:
        sys.exit(f"error: {' '.join(cmd)} failed:\n{r.stderr}")
    return r.stdout


def cost_by_kind(build, ir, cf, mbf, alpha, bw, peak=PEAK, mem_bw=MEM_BW):
    """µs per step per op kind from the cost pass under the given parameters."""
    lines = []
    for line in ir.splitlines():
        if line.startswith(("config device_peak_flops", "config device_mem_bw", "config cost.")):
            continue
        if line.startswith("link "):
            kind = line.split()[1]
            line = f"link {kind} kind = shm, bandwidth = {bw:.17g}, latency = {alpha:.17g}, efficiency = 1"
        lines.append(line)
        if line.startswith("config device_mem "):
            lines += [f"config device_peak_flops = {peak:.17g}", f"config device_mem_bw = {mem_bw:.17g}",
                      f"config cost.compute_fraction = {cf:.17g}", f"config cost.mem_bw_fraction = {mbf:.17g}"]
    out = sh([os.path.join(build, "basp-opt"), "-", "--passes=cost"], input="\n".join(lines) + "\n")
    kinds = {}
    for line in out.splitlines():
        m = OP_RE.search(line)
        if m:
            kinds[m.group(1)] = kinds.get(m.group(1), 0.0) + float(m.group(2))
    return kinds


def measure(build, work, name, spec, ranks, seq, steps):
    tag = re.sub(r"\W", "_", name)
    sets = ["--set", f"train.seq_len={seq}"] if seq else []
    exe = os.path.join(work, tag)
    sh([os.path.join(build, "baspc"), os.path.join(ROOT, spec), *sets, "-o", exe])
    ir = sh([os.path.join(build, "baspc"), os.path.join(ROOT, spec), *sets,
             "--passes=ulysses,batch-aware,place,zero", "--emit=ir"])
    prof = os.path.join(work, tag + ".json")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_MCA_mpi_yield_when_idle="1")
    sh(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(ranks), exe, "--data",
        os.path.join(work, "corpus.bin"), "--steps", str(steps), "--quiet", "--profile", prof], env=env)
    with open(prof) as f:
        p = json.load(f)
    # ms per step by kind; the median step is the step figure (robust to a
    # slow first step), the kinds are means over all steps
    meas = {k: 1e3 * v["seconds"] / p["steps"] for k, v in p["ops"].items()}
    return {"name": name, "ir": ir, "meas": meas, "step_ms": p["median_step_ms"],
            "mean_step_ms": 1e3 * p["total_s"] / p["steps"], "a2a_ms": p["median_a2a_ms"]}


def lstsq2(rows):
    """Least squares y ≈ a·x1 + b·x2 with a, b ≥ 0 (rows of (x1, x2, y))."""
    s11 = sum(r[0] * r[0] for r in rows); s22 = sum(r[1] * r[1] for r in rows)
    s12 = sum(r[0] * r[1] for r in rows)
    t1 = sum(r[0] * r[2] for r in rows); t2 = sum(r[1] * r[2] for r in rows)
    det = s11 * s22 - s12 * s12
    a, b = ((t1 * s22 - t2 * s12) / det, (t2 * s11 - t1 * s12) / det) if det else (0.0, 0.0)
    if a < 0 or b < 0:  # clamp: refit the other alone
        a, b = (0.0, t2 / s22) if a < 0 else (t1 / s11, 0.0)
    return a, b


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--workdir", default="/tmp/basp-calibrate")
    ap.add_argument("--json", help="write the fitted values and the table here")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    os.makedirs(a.workdir, exist_ok=True)
    if not os.path.exists(os.path.join(a.workdir, "corpus.bin")):
        sh([os.path.join(build, "data", "mkcorpus"), os.path.join(a.workdir, "corpus.bin"),
            os.path.join(a.workdir, "corpus.txt")])

    runs = [measure(build, a.workdir, *r, a.steps) for r in RUNS]

    # Probes: each separates one part of the model (µs per step → ms below).
    huge = 1e30
    gemm_model = gemm_meas = elem_model = elem_meas = 0.0
    rows = []
    for r in runs:
        comp = cost_by_kind(build, r["ir"], 1.0, 1.0, 0.0, huge, PEAK, huge)   # compute at cf 1
        mem = cost_by_kind(build, r["ir"], 1.0, 1.0, 0.0, huge, huge, MEM_BW)  # memory at mbf 1
        lat = cost_by_kind(build, r["ir"], 1.0, 1.0, 1.0, huge)                # α count
        byt = cost_by_kind(build, r["ir"], 1.0, 1.0, 0.0, 1.0)                 # bytes
        for k, ms in r["meas"].items():
            if k in GEMM:
                gemm_model += comp.get(k, 0) / 1e3; gemm_meas += ms
            elif k in COLL:
                # the latency probe's µs are α counts × 1e6
                rows.append((lat.get(k, 0) / 1e6, byt.get(k, 0) / 1e6, ms / 1e3))
            else:
                elem_model += mem.get(k, 0) / 1e3; elem_meas += ms
    cf = gemm_model / gemm_meas
    mbf = elem_model / elem_meas
    alpha, beta = lstsq2(rows)
    bw = 1.0 / beta if beta > 0 else huge

    print(f"fitted: compute_fraction {cf:.4g} (effective {PEAK * cf / 1e9:.3g} GFLOP/s of the cpu preset's "
          f"{PEAK / 1e9:.0f}), mem_bw_fraction {mbf:.4g} (effective {MEM_BW * mbf / 1e9:.3g} GB/s), "
          f"collective alpha {alpha * 1e6:.3g} us, beta -> {bw / 1e9:.3g} GB/s")
    report = {"compute_fraction": cf, "mem_bw_fraction": mbf, "alpha_s": alpha, "bandwidth_Bps": bw, "runs": []}
    for r in runs:
        pred = {k: v / 1e3 for k, v in cost_by_kind(build, r["ir"], cf, mbf, alpha, bw).items()}
        print(f"\n### {r['name']}\n")
        print("| op kind | predicted ms/step | measured ms/step | error |")
        print("|---|---:|---:|---:|")
        kinds = sorted(set(pred) | set(r["meas"]), key=lambda k: -r["meas"].get(k, 0))
        for k in kinds:
            p, m = pred.get(k, 0.0), r["meas"].get(k, 0.0)
            err = f"{100 * (p - m) / m:+.0f}%" if m > 0 else "—"
            print(f"| {k} | {p:.3f} | {m:.3f} | {err} |")
        ps = sum(pred.values())
        pa = pred.get("all_to_all", 0.0)
        ms, ma = r["mean_step_ms"], r["meas"].get("all_to_all", 0.0)
        print(f"| **step** | {ps:.3f} | {ms:.3f} (median {r['step_ms']:.3f}) | {100 * (ps - ms) / ms:+.0f}% |")
        print(f"| **all-to-all share** | {100 * pa / ps:.1f}% | {100 * ma / ms:.1f}% | "
              f"{100 * pa / ps - 100 * ma / ms:+.1f} pp |")
        report["runs"].append({"name": r["name"], "pred": pred, "meas": r["meas"], "step_pred_ms": ps,
                               "step_meas_ms": ms, "step_median_ms": r["step_ms"],
                               "a2a_share_pred": pa / ps, "a2a_share_meas": ma / ms})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
