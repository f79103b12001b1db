#!/usr/bin/env python3
"""calibrate.py — fit the cost model to what this machine measures.

    bench/calibrate.py --build BUILD [--steps 30] [--repeats 3] [--ranks R]
                       [--preset cpu_calibrated] [--workdir DIR] [--json FILE]

From an existing build directory (BUILD/baspc, BUILD/basp-opt,
BUILD/data/mkcorpus):

  1. compiles the tiny examples with `baspc -o` (examples/tiny_llama.basp and
     examples/tiny_gqa_8.basp, each at its own seq_len and at 4x it) and the
     emulated cluster's model (bench/cluster_model.basp at 1024 and 2048
     tokens, micro-batch 1), re-meshed
     onto one node of R ranks (default: the machine's cores) as plain Ulysses,
     so every layer has real all-to-alls; R <= cores, because with more ranks
     than cores a rank's time is mostly waiting to be scheduled, which no
     per-op model expresses;
  2. trains each for STEPS steps with --profile, REPEATS times interleaved,
     and keeps per op kind the median over the repeats of the ms per step;
  3. runs the cost pass (`basp-opt --passes=cost` on the IR that
     `baspc --emit=ir` prints: the program's own pipeline, fusions
     included, so the op kinds priced are the op kinds timed) with
     probe parameters, which separate each op's model into its parts: GEMM
     FLOPs, attention FLOPs, bytes moved, exponentials, op count; the
     collectives' α count and bytes on the wire;
  4. fits, by non-negative least squares weighted by 1 / the run's step time
     (every run counts alike):
        measured = GEMM / compute_fraction + attention / attention_fraction
                   + bytes / mem_bw_fraction + exps / exp_rate + ops · op_overhead
     over every (run, compute op kind), and α, β over every (run,
     collective kind) — all ranks share the machine's memory, so the spec's
     links are one shared-memory MPI transport;
  5. measures how much of its share of a core a rank keeps when --share
     ranks take turns on one (the emulated cluster runs 4 per core): one
     copy of the cluster's model alone on the last CPU, then --share copies
     at once there (the device's shared_core_efficiency);
  6. prints the fitted values (and the preset line for layout/presets.c),
     then per run a table of predicted vs measured ms per step by op kind,
     the step time and the all-to-all share, with the errors — under the
     fitted values, and under the device preset --preset alone (the spec with
     `device PRESET` and no link lines, as a user would write it), which is
     the check that the preset kept in the compiler predicts this machine;
  7. with --device-file FILE, writes the fit as a device file: a device
     NAME (--device-name, default measured_cpu) like the --preset device,
     with the fitted GEMM, attention and memory fractions, per-op
     overhead, exponential rate and shared-core efficiency.  `baspc
     --device-file FILE` then plans with the machine as measured now
     (`device NAME` in the spec, or --set mesh.device=NAME); the links
     stay the preset's (its shared-memory
     rate is bench_a2a's, not this fit's β, which also holds the ranks'
     waits for each other).

Standard library only; OPENBLAS_NUM_THREADS=1 for every rank.
"""

import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

GEMM = {"linear", "linear_bwd", "lm_head_loss", "lm_head_loss_bwd", "lm_head_loss_grad"}
ATTN = {"attention", "attention_bwd"}
COLL = {"all_to_all", "all_gather", "reduce_scatter", "all_reduce", "send", "recv"}
# The cpu preset's figures (layout/presets.c), kept as the reference the
# fractions scale.
PEAK, MEM_BW = 1e11, 2e10

# (name, spec, ranks, --set overrides).  Every run uses at most as many ranks
# as the machine has cores (see --ranks): with more, a rank's time is mostly
# waiting to be scheduled, which no per-op model expresses.  The examples
# are re-meshed onto one node of R ranks and laid out as plain Ulysses, so
# every layer has real all-to-alls (batch-aware with G = R would leave K = 1).
RUNS = [
    ("tiny_llama", "examples/tiny_llama.basp", []),
    ("tiny_llama s512", "examples/tiny_llama.basp", ["train.seq_len=512"]),
    ("tiny_gqa_8", "examples/tiny_gqa_8.basp", []),
    ("tiny_gqa_8 s1024", "examples/tiny_gqa_8.basp", ["train.seq_len=1024"]),
    # the emulated cluster's model (bench/cluster_study.py) at two of its
    # lengths: attention-heavy steps with MiB-scale exchanges
    ("cluster_small s1024", "bench/cluster_model.basp", ["train.micro_batch=1", "train.seq_len=1024"]),
    ("cluster_small s2048", "bench/cluster_model.basp", ["train.micro_batch=1", "train.seq_len=2048"]),
]


# An op line: optional results ("%a, %b = "), the op name, ..., its cost.
# Ops without results (adamw, free, send) must match too.
OP_RE = re.compile(r"^(?:%\S+(?:, %\S+)* = )?([a-z_]+) .*cost_us = ([0-9.e+-]+)")


def sh(cmd, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, **kw)
    if r.returncode:
        sys.exit(f"error: {' '.join(cmd)} failed:\n{r.stderr}")
    return r.stdout


def cost_by_kind(build, ir, cf, mbf, alpha, bw, peak=PEAK, mem_bw=MEM_BW, af=None, ovh=0.0, exp_rate=0.0):
    """µs per step per op kind from the cost pass under the given parameters."""
    lines = []
    for line in ir.splitlines():
        if line.startswith(("config device_peak_flops", "config device_mem_bw", "config device_exp_rate",
                            "config cost.")):
            continue
        if line.startswith("link "):
            kind = line.split()[1]
            line = f"link {kind} kind = shm, bandwidth = {bw:.17g}, latency = {alpha:.17g}, efficiency = 1"
        lines.append(line)
        if line.startswith("config device_mem "):
            lines += [f"config device_peak_flops = {peak:.17g}", f"config device_mem_bw = {mem_bw:.17g}",
                      f"config cost.compute_fraction = {cf:.17g}", f"config cost.mem_bw_fraction = {mbf:.17g}",
                      f"config cost.attention_fraction = {cf if af is None else af:.17g}",
                      f"config cost.op_overhead = {ovh:.17g}", f"config device_exp_rate = {exp_rate:.17g}"]
    out = sh([os.path.join(build, "basp-opt"), "-", "--passes=cost"], input="\n".join(lines) + "\n")
    kinds = {}
    for line in out.splitlines():
        m = OP_RE.search(line)
        if m:
            kinds[m.group(1)] = kinds.get(m.group(1), 0.0) + float(m.group(2))
    return kinds


def compile_run(build, work, name, spec, overrides, ranks):
    """Builds one run's executable; returns its description with the IR."""
    tag = re.sub(r"\W", "_", name)
    sets = []
    for o in overrides + ["mesh.nodes=1", f"mesh.devices_per_node={ranks}", f"mesh.cores_per_node={ranks}",
                          "layout.batch_aware=off"]:
        sets += ["--set", o]
    exe = os.path.join(work, tag)
    sh([os.path.join(build, "baspc"), os.path.join(ROOT, spec), *sets, "-o", exe])
    # the IR of the program that runs: its own pipeline (fusions included),
    # so the ops the cost pass prices are the ops the profile times
    ir = sh([os.path.join(build, "baspc"), os.path.join(ROOT, spec), *sets, "-q", "--emit=ir"])
    return {"name": name, "spec": spec, "sets": sets, "exe": exe, "ir": ir, "ranks": ranks, "reps": []}


def measure_once(r, work, steps):
    """One training run with --profile: ms per step by op kind (means over
    the steps), the mean and the median step."""
    prof = r["exe"] + ".json"
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_MCA_mpi_yield_when_idle="1")
    sh(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(r["ranks"]), r["exe"], "--data",
        os.path.join(work, "corpus.bin"), "--steps", str(steps), "--quiet", "--profile", prof], env=env)
    with open(prof) as f:
        p = json.load(f)
    return {"meas": {k: 1e3 * v["seconds"] / p["steps"] for k, v in p["ops"].items()},
            "calls": {k: v["calls"] / p["steps"] for k, v in p["ops"].items()},
            "mean_step_ms": 1e3 * p["total_s"] / p["steps"], "step_ms": p["median_step_ms"]}


def shared_core(build, work, steps, share, repeats):
    """The fraction of its share of a core a rank keeps when `share` ranks
    take turns on it: one copy of the emulated cluster's model (one rank,
    1024 tokens) alone on the machine's last CPU, then `share` copies at
    once on that CPU, REPEATS times interleaved; share x the lone step over
    the shared step, medians.  Below 1 because every switch leaves the next
    rank a cache the others have refilled."""
    exe = os.path.join(work, "shared_core")
    sets = ["mesh.nodes=1", "mesh.devices_per_node=1", "train.micro_batch=1", "train.seq_len=1024"]
    sh([os.path.join(build, "baspc"), os.path.join(ROOT, "bench", "cluster_model.basp"), "-q", "-o", exe,
        *[a for x in sets for a in ("--set", x)]])
    cpu = str((os.cpu_count() or 1) - 1)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")

    def step_ms(metrics):
        with open(metrics) as f:
            rows = [json.loads(line) for line in f if line.strip()]
        return median([r["step_ms"] for r in rows[1:]])  # the first step warms up

    def start(i):
        m = os.path.join(work, f"shared_core.{i}.jsonl")
        return m, subprocess.Popen(["taskset", "-c", cpu, exe, "--data", os.path.join(work, "corpus.bin"), "--steps",
                                    str(steps), "--quiet", "--metrics", m], env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    def finish(procs):
        for m, p in procs:
            if p.wait():
                sys.exit(f"error: {exe} failed:\n{p.stderr.read()}")
        return [step_ms(m) for m, _ in procs]

    alone, shared = [], []
    for _ in range(repeats):
        alone += finish([start(0)])
        shared += finish([start(i) for i in range(share)])
    eff = share * median(alone) / median(shared)
    return {"shared_core_efficiency": min(eff, 1.0), "alone_ms": median(alone), "shared_ms": median(shared),
            "share": share}


def median(xs):
    xs = sorted(xs)
    n = len(xs)
    return xs[n // 2] if n % 2 else 0.5 * (xs[n // 2 - 1] + xs[n // 2])


def summarise(r):
    """Medians over the repeats, per op kind and for the step: a repeat that
    another process on the machine slowed down does not move them."""
    kinds = set().union(*(x["meas"] for x in r["reps"]))
    r["meas"] = {k: median([x["meas"].get(k, 0.0) for x in r["reps"]]) for k in kinds}
    r["calls"] = r["reps"][0]["calls"]
    r["mean_step_ms"] = median([x["mean_step_ms"] for x in r["reps"]])
    r["step_ms"] = median([x["step_ms"] for x in r["reps"]])


def preset_prediction(build, r, preset):
    """ms per step by op kind as baspc predicts it from the device preset
    alone: the run's spec with `device PRESET` and no link lines, so both
    links are the preset's."""
    with open(os.path.join(ROOT, r["spec"])) as f:
        text = f.read()
    text = re.sub(r"^\s*link .*$", "", text, flags=re.M)
    text = re.sub(r"\bdevice\s+\S+", f"device {preset}", text)
    path = r["exe"] + ".preset.basp"
    with open(path, "w") as f:
        f.write(text)
    ir = sh([os.path.join(build, "baspc"), path, *r["sets"], "-q", "--emit=ir"])
    out = sh([os.path.join(build, "basp-opt"), "-", "--passes=cost"], input=ir)
    kinds = {}
    for line in out.splitlines():
        m = OP_RE.search(line)
        if m:
            kinds[m.group(1)] = kinds.get(m.group(1), 0.0) + float(m.group(2)) / 1e3
    return kinds


def print_table(title, pred, r):
    """Predicted vs measured ms per step by op kind; returns (step error,
    all-to-all share error in percentage points)."""
    print(f"\n### {title}\n")
    print("| op kind | predicted ms/step | measured ms/step | error |")
    print("|---|---:|---:|---:|")
    kinds = sorted(set(pred) | set(r["meas"]), key=lambda k: -r["meas"].get(k, 0))
    for k in kinds:
        p, m = pred.get(k, 0.0), r["meas"].get(k, 0.0)
        err = f"{100 * (p - m) / m:+.0f}%" if m > 0 else "—"
        print(f"| {k} | {p:.3f} | {m:.3f} | {err} |")
    ps, pa = sum(pred.values()), pred.get("all_to_all", 0.0)
    ms, ma = r["mean_step_ms"], r["meas"].get("all_to_all", 0.0)
    step_err, share_err = (ps - ms) / ms, 100 * (pa / ps - ma / ms)
    print(f"| **step** | {ps:.3f} | {ms:.3f} (median step {r['step_ms']:.3f}) | {100 * step_err:+.0f}% |")
    print(f"| **all-to-all share** | {100 * pa / ps:.1f}% | {100 * ma / ms:.1f}% | {share_err:+.1f} pp |")
    return step_err, share_err


def lstsq2(rows):
    """Least squares y ≈ a·x1 + b·x2 with a, b ≥ 0 (rows of (x1, x2, y))."""
    x = nnls([r[:2] for r in rows], [r[2] for r in rows])
    return x[0], x[1]


def solve(a, b):
    """Gaussian elimination with partial pivoting; None when singular."""
    n = len(b)
    m = [row[:] + [b[i]] for i, row in enumerate(a)]
    for c in range(n):
        piv = max(range(c, n), key=lambda r: abs(m[r][c]))
        if abs(m[piv][c]) < 1e-300:
            return None
        m[c], m[piv] = m[piv], m[c]
        for r in range(n):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][n] / m[i][i] for i in range(n)]


def nnls(rows, ys):
    """Least squares rows·x ≈ ys with x ≥ 0: the normal equations over the
    free variables; the most negative variable is fixed at 0 and the rest
    refitted until none is negative (enough for a handful of unknowns)."""
    n = len(rows[0])
    free = [j for j in range(n) if any(r[j] for r in rows)]
    while free:
        ata = [[sum(r[i] * r[j] for r in rows) for j in free] for i in free]
        aty = [sum(r[i] * y for r, y in zip(rows, ys)) for i in free]
        sol = solve(ata, aty)
        if sol is None:
            free.pop()
            continue
        worst = min(range(len(free)), key=lambda k: sol[k])
        if sol[worst] >= 0:
            x = [0.0] * n
            for j, v in zip(free, sol):
                x[j] = v
            return x
        free.pop(worst)
    return [0.0] * n


def fit(build, runs):
    """The fitted parameters from probe runs of the cost pass (µs per step
    → ms): each probe isolates one part of every op's model.  The compute
    ops are fitted jointly,
        measured = probe_gemm / compute_fraction + probe_attn / attention_fraction
                   + probe_mem / mem_bw_fraction + calls · op_overhead + exps / exp_rate
    (each op kind in one of the three classes), the collectives as
    α · count + β · bytes.  Every row is weighted by 1 / its run's step time,
    so that each run counts alike and the fit minimises relative errors (a
    plain fit would serve the longest run and miss the short ones)."""
    huge = 1e30
    crow, cy, rows = [], [], []
    for r in runs:
        comp = cost_by_kind(build, r["ir"], 1.0, 1.0, 0.0, huge, PEAK, huge)   # compute at fraction 1
        mem = cost_by_kind(build, r["ir"], 1.0, 1.0, 0.0, huge, huge, MEM_BW)  # memory at fraction 1
        lat = cost_by_kind(build, r["ir"], 1.0, 1.0, 1.0, huge)                # α count
        byt = cost_by_kind(build, r["ir"], 1.0, 1.0, 0.0, 1.0)                 # bytes
        exps = cost_by_kind(build, r["ir"], 1.0, 1.0, 0.0, huge, huge, huge, exp_rate=1.0)  # exp count
        w = 1.0 / r["mean_step_ms"]
        for k, ms in r["meas"].items():
            if k in COLL:
                # the latency probe's µs are α counts × 1e6
                rows.append((w * lat.get(k, 0) / 1e6, w * byt.get(k, 0) / 1e6, w * ms / 1e3))
                continue
            row = [0.0, 0.0, 0.0, r["calls"].get(k, 0.0), exps.get(k, 0) / 1e6]
            if k in GEMM:
                row[0] = comp.get(k, 0) / 1e3
            elif k in ATTN:
                row[1] = comp.get(k, 0) / 1e3
            else:
                row[2] = mem.get(k, 0) / 1e3
            crow.append([w * x for x in row])
            cy.append(w * ms)
    inv = nnls(crow, cy)
    alpha, beta = lstsq2(rows)
    frac = [1.0 / v if v > 0 else 1.0 for v in inv[:3]]
    return {"compute_fraction": frac[0], "attention_fraction": frac[1], "mem_bw_fraction": frac[2],
            "op_overhead_s": inv[3] / 1e3, "exp_rate": 1e3 / inv[4] if inv[4] > 0 else 0.0, "alpha_s": alpha, "bandwidth_Bps": 1.0 / beta if beta > 0 else huge}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--repeats", type=int, default=3, help="runs of each example, interleaved (default 3)")
    ap.add_argument("--workdir", default="/tmp/basp-calibrate")
    ap.add_argument("--json", help="write the fitted values and the tables here")
    ap.add_argument("--device-file", help="write the fit as a device file for baspc --device-file")
    ap.add_argument("--share", type=int, default=4,
                    help="ranks per core of the shared-core measurement (default 4, the emulated cluster's)")
    ap.add_argument("--device-name", default="measured_cpu", help="its device's name (default measured_cpu)")
    ap.add_argument("--ranks", type=int, default=min(os.cpu_count() or 2, 4),
                    help="ranks per run (default: the machine's cores, at most 4; at least 2)")
    ap.add_argument("--preset", default="cpu_calibrated",
                    help="also predict each run from this device preset alone and compare (default "
                         "cpu_calibrated, the preset this script fitted on the development machine; "
                         "'' to skip)")
    a = ap.parse_args()
    build = os.path.abspath(a.build)
    if a.ranks < 2:
        sys.exit("error: --ranks must be at least 2 (the collectives need peers)")
    if a.ranks > (os.cpu_count() or 1):
        print(f"warning: {a.ranks} ranks on {os.cpu_count()} cores: ranks wait for a core and the fit "
              "describes that waiting, not the machine", file=sys.stderr)
    os.makedirs(a.workdir, exist_ok=True)
    if not os.path.exists(os.path.join(a.workdir, "corpus.bin")):
        sh([os.path.join(build, "data", "mkcorpus"), os.path.join(a.workdir, "corpus.bin"),
            os.path.join(a.workdir, "corpus.txt")])

    runs = [compile_run(build, a.workdir, *r, a.ranks) for r in RUNS]
    for rep in range(a.repeats):  # interleaved, so a noisy minute hits every run once at most
        print(f"repeat {rep + 1}/{a.repeats}: " + ", ".join(r["name"] for r in runs), file=sys.stderr)
        for r in runs:
            r["reps"].append(measure_once(r, a.workdir, a.steps))
    for r in runs:
        summarise(r)

    f = fit(build, runs)
    print(f"shared core: {a.share} copies of one rank on CPU {(os.cpu_count() or 1) - 1}", file=sys.stderr)
    f.update(shared_core(build, a.workdir, 8, a.share, a.repeats))
    cf, af, mbf, ovh, er, alpha, bw = (f[k] for k in ("compute_fraction", "attention_fraction", "mem_bw_fraction",
                                                      "op_overhead_s", "exp_rate", "alpha_s", "bandwidth_Bps"))
    print(f"fitted on {a.ranks} ranks, {os.cpu_count()} cores, medians of {a.repeats} repeats x {a.steps} steps:")
    print(f"  compute_fraction {cf:.4g} (GEMMs: {PEAK * cf / 1e9:.3g} GFLOP/s of the cpu preset's "
          f"{PEAK / 1e9:.0f}), attention_fraction {af:.4g} ({PEAK * af / 1e9:.3g} GFLOP/s)")
    print(f"  mem_bw_fraction {mbf:.4g} ({MEM_BW * mbf / 1e9:.3g} GB/s), op_overhead {ovh * 1e6:.3g} us, "
          f"exp_rate {er / 1e9:.3g} G/s, "
          f"collectives alpha {alpha * 1e6:.3g} us, beta -> {bw / 1e9:.3g} GB/s")
    print(f"  shared core: {f['share']} ranks on one core keep {f['shared_core_efficiency']:.3f} of their share "
          f"each (one alone {f['alone_ms']:.1f} ms a step, {f['share']} at once {f['shared_ms']:.1f} ms)")
    print("  as a device preset (layout/presets.c):")
    print(f'    {{"cpu_calibrated", 16 * GiB, {PEAK:g}, {PEAK:g}, {MEM_BW:g}, {{"shm", {bw:.3g}, {alpha:.3g}, 1.0}}, '
          f'{{"tcp", 10e9 / 8, 50e-6, 1.0}}, {cf:.3g}, {af:.3g}, {mbf:.3g}, {ovh:.3g}, {er:.3g}, '
          f'64 * GiB, MEMCPY, MODEL_ERROR, {f["shared_core_efficiency"]:.3g}}},')
    report = dict(f, ranks=a.ranks, repeats=a.repeats, steps=a.steps, runs=[])
    for r in runs:
        pred = {k: v / 1e3 for k, v in cost_by_kind(build, r["ir"], cf, mbf, alpha, bw, af=af, ovh=ovh, exp_rate=er).items()}
        step_err, share_err = print_table(f"{r['name']} (fitted values)", pred, r)
        row = {"name": r["name"], "meas": r["meas"], "step_meas_ms": r["mean_step_ms"],
               "step_median_ms": r["step_ms"], "fit": {"pred": pred, "step_err": step_err, "share_err_pp": share_err}}
        if a.preset:
            pp = preset_prediction(build, r, a.preset)
            step_err, share_err = print_table(f"{r['name']} (preset {a.preset})", pp, r)
            row["preset"] = {"pred": pp, "step_err": step_err, "share_err_pp": share_err}
        report["runs"].append(row)
    if a.preset:
        print(f"\n### summary: preset {a.preset} vs measured\n")
        print("| run | step error | all-to-all share error |")
        print("|---|---:|---:|")
        for row in report["runs"]:
            print(f"| {row['name']} | {100 * row['preset']['step_err']:+.0f}% | "
                  f"{row['preset']['share_err_pp']:+.1f} pp |")
    if a.json:
        with open(a.json, "w") as out:
            json.dump(report, out, indent=1)
    if a.device_file:
        write_device_file(a.device_file, a.device_name, a.preset or "cpu", f, a)


def write_device_file(path, name, like, f, a):
    """The fit as a device file (frontend/devfile.c's format)."""
    dev = {"name": name, "like": like, "compute_fraction": f["compute_fraction"],
           "attention_fraction": f["attention_fraction"], "mem_bw_fraction": f["mem_bw_fraction"],
           "op_overhead": f["op_overhead_s"]}
    if f["exp_rate"] > 0:
        dev["exp_rate"] = f["exp_rate"]
    dev["shared_core_efficiency"] = f["shared_core_efficiency"]
    doc = {"devices": [dev]}
    with open(path, "w") as out:
        json.dump(doc, out, indent=1)
        out.write("\n")
    print(f"device file {path}: device {name} (like {like}), fitted on {a.ranks} ranks, "
          f"{a.repeats} repeats x {a.steps} steps")


if __name__ == "__main__":
    main()
