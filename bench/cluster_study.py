#!/usr/bin/env python3
"""cluster_study.py — Ulysses against batch-aware on an emulated 2 × 4 cluster.

    bench/cluster_study.py [--build DIR] [--quick] [--out DIR] [--bandwidth 2gbit]
                           [--repeats R] [--steps N] [--warmup W] [--device NAME]

One command, as root, from an existing build directory (BUILD/baspc,
BUILD/data/mkcorpus, BUILD/bench/bench_a2a):

  0. calibrates the machine as it is now (bench/calibrate.py, about 50 s;
     --no-calibrate skips it): its device file gives a second column of
     predictions, the model with this day's rates, beside the preset's;
  1. compiles bench/cluster_model.basp (or --spec) for every point of two
     sweeps — micro-batch B = 1, 2, 4, 8 at the spec's sequence length, and
     sequence lengths 512 … 4096 at B = 2 — once as plain Ulysses
     (layout.batch_aware=off) and once as batch-aware (the spec's `auto`: the
     cost model picks G), and asks the cost model (`baspc --plan --json`, and
     the cost pass's compute/communication split) what it predicts for each;
  2. brings up the emulated cluster (bench/cluster: 2 nodes × 4 ranks, the
     inter-node links shaped to --bandwidth) once, and inside it
       a. runs bench_a2a — one 8-way all-to-all against G groups of K-way
          all-to-alls at the per-rank sizes of the example models' attention
          exchanges — across the two nodes and again with all 8 ranks on one
          node (shared memory only);
       b. trains every binary for --steps steps with --metrics and
          --profile, REPEATS rounds, Ulysses and batch-aware alternating which
          goes first, so load from other processes hits both alike;
       c. trains both layouts once more for a longer loss curve;
  3. writes to --out (default bench/results/cluster/): results.md (tables,
     the machine, the command), results.csv, a2a.csv, raw.json and the plots
     batch_scaling.png, seq_scaling.png, loss.png, a2a.png (gnuplot; installed
     with apt-get when missing, skipped with a warning when that fails).

Figures: a run's step and all-to-all times are medians over its steps after
the warm-up (rank 0's wall time, as --metrics reports them); a layout's
figures at a point are those of its least-disturbed round (the one with the
shortest step: other processes on the shared cores only add time, and a
burst of them can cover a whole run), and the Ulysses / batch-aware ratios
are ratios of those figures.  Both layouts start from the same seed and see the
same batches, so their losses must agree step by step within
tests/train/equiv.py's LOSS_RTOL; the study checks it for every run.

Standard library only.
"""

import argparse
import importlib.util
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
CLUSTER = os.path.join(HERE, "cluster")

# Example models whose attention exchanges size the all-to-all benchmark
# (qwen2_5_3b_hf.basp is the same model as qwen2_5_3b.basp).
A2A_EXAMPLES = ["llama3_2_1b", "llama3_2_3b", "llama3_1_8b", "qwen1_5_1_8b", "qwen2_5_3b", "qwen3_8b"]


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def sh(cmd, env=None, check=True, **kw):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, **kw)
    if check and r.returncode:
        sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
        sys.exit(f"cluster_study: command failed (status {r.returncode}): {' '.join(cmd)}")
    return r


def loss_rtol():
    """LOSS_RTOL of the equivalence tests, so both compare alike."""
    path = os.path.join(ROOT, "tests", "train", "equiv.py")
    spec = importlib.util.spec_from_file_location("equiv", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.LOSS_RTOL


# ---- the example models' exchange sizes ----------------------------------------

def spec_values(baspc, path, sets=()):
    """The checked spec (`--print-spec`) as {block.key: value}."""
    args = [a for s in sets for a in ("--set", s)]
    out = sh([baspc, path, "-q", "--print-spec"] + args).stdout
    vals, block = {}, None
    for line in out.splitlines():
        m = re.match(r"^(model|mesh|train|layout)\b", line)
        if m:
            block = m.group(1)
            continue
        parts = line.split()
        if block and len(parts) >= 2 and not line.startswith("}"):
            vals[f"{block}.{parts[0]}"] = parts[1] if parts[0] != "link" else " ".join(parts[1:])
    return vals


def cores_per_node(nodes):
    """The cores each emulated node's ranks share: bench/cluster --pin splits
    the machine's CPUs evenly over the nodes (one each on 2 cores), and
    unpinned ranks share all of them alike."""
    return max(1, (os.cpu_count() or 1) // nodes)


def exchange_bytes(v, k):
    """Per-rank bytes of one attention exchange, the rank's whole buffer.

    T = B·S/N tokens per rank (the same under Ulysses and batch-aware), e the
    element size, Dh the head dim, and a group of K ranks:
      q, k, v before attention (fused):  T · (H + 2·max(Hkv, K)) · Dh · e
      o after attention:                 T · H · Dh · e
    (max(Hkv, K): with fewer KV heads than K each KV head is sent once to each
    of the K/Hkv ranks sharing it.)  The backward moves the same sizes the
    other way (dq, dk, dv and do).  A rank sends (K−1)/K of its buffer."""
    n = int(v["mesh.nodes"]) * int(v["mesh.devices_per_node"])
    t = int(v["train.micro_batch"]) * int(v["train.seq_len"]) // n
    e = 2 if v["train.precision"] == "bf16" else 4
    h, hkv, dh = int(v["model.heads"]), int(v["model.kv_heads"]), int(v["model.head_dim"])
    return t * (h + 2 * max(hkv, k)) * dh * e, t * h * dh * e


def a2a_sizes(baspc):
    """[(label, bytes)] of the Ulysses exchanges of the example models,
    checked against the compiler's schedule (bytes sent per rank)."""
    sizes = []
    for ex in A2A_EXAMPLES:
        path = os.path.join(ROOT, "examples", ex + ".basp")
        v = spec_values(baspc, path)
        n = int(v["mesh.nodes"]) * int(v["mesh.devices_per_node"])
        qkv, o = exchange_bytes(v, n)
        sched = json.loads(sh([baspc, path, "-q", "--schedule", "--json", "--set", "layout.batch_aware=off"]).stdout)
        l0 = [c["bytes_per_rank"] for c in sched["collectives"] if c["op"] == "all_to_all" and c["layer"] == 0]
        want = [qkv * (n - 1) // n, o * (n - 1) // n]
        if l0[:2] != want:
            log(f"warning: {ex}: formula gives {want} bytes sent per rank, the schedule {l0[:2]}")
        sizes += [(f"{ex}.qkv", qkv), (f"{ex}.o", o)]
    return sizes


# ---- predictions ------------------------------------------------------------------

COST_RE = re.compile(r"cost: step ([0-9.]+) ms \(compute ([0-9.]+) ms, communication ([0-9.]+) ms\), "
                     r"all-to-all ([0-9.]+) ms")


def program_ir(baspc, spec, sets, extra=()):
    """The IR of the program these overrides build (its own pipeline,
    fusions and overlap included).  extra: more baspc arguments
    (--device-file FILE)."""
    return sh([baspc, spec, "-q", "--emit=ir"] + list(extra) + [a for s in sets for a in ("--set", s)]).stdout


def predict(baspc, ir, sets):
    """The cost pass's step, compute, communication and all-to-all ms, on the
    IR of the program that runs (`basp-opt --passes=cost`)."""
    r = sh([os.path.join(os.path.dirname(baspc), "basp-opt"), "-", "--passes=cost", "-o", os.devnull], input=ir)
    m = COST_RE.search(r.stderr + r.stdout)
    if not m:
        sys.exit(f"cluster_study: no cost remark from baspc for {sets}:\n{r.stderr}")
    return dict(zip(("step_ms", "compute_ms", "comm_ms", "a2a_ms"), map(float, m.groups())))


def calibrate_now(build, workdir, like):
    """bench/calibrate.py on this machine now (2 ranks on the cores, before
    the cluster comes up): its fit as a device file, and the fit itself."""
    w = os.path.join(workdir, "calibrate")
    dev_file, js = os.path.join(w, "measured_now.json"), os.path.join(w, "calibration.json")
    log("calibrating the machine as it is now (bench/calibrate.py, about 50 s)")
    t0 = time.monotonic()
    sh([sys.executable, os.path.join(HERE, "calibrate.py"), "--build", build, "--workdir", w, "--preset",
        like or "cpu", "--device-file", dev_file, "--device-name", "measured_now", "--json", js])
    with open(js) as f:
        fit = json.load(f)
    return {"device": "measured_now", "device_file": dev_file, "seconds": time.monotonic() - t0,
            "fit": {k: fit[k] for k in ("compute_fraction", "attention_fraction", "mem_bw_fraction",
                                         "op_overhead_s", "exp_rate", "shared_core_efficiency")}}


def layout_of(ir):
    """(G, K) the pipeline lowered to, from the IR's config lines."""
    cfg = dict(re.findall(r"^config (\S+) = (\S+)", ir, re.M))
    return int(cfg.get("batch_groups", "1")), int(cfg.get("sp_size", "1"))


# ---- inside the cluster -----------------------------------------------------------

# ---- what the studies on the emulated cluster share (strategy_study.py,
# packing_study.py, choice_study.py) ------------------------------------------

def study_setup(ap, args, tool, repeats, steps):
    """Checks a study's common arguments and tools: returns a dict with
    repeats, steps, warmup (the defaults: --quick 2 rounds of 4 steps, else
    `repeats` and `steps`), baspc, mkcorpus, spec, workdir
    (BUILD/bench/TOOL), bw (bits/s of --bandwidth) and known (whether the
    cpu_calibrated device preset exists).  Exits with TOOL's name on an
    error."""
    s = {"repeats": args.repeats or (2 if args.quick else repeats),
         "steps": args.steps or (4 if args.quick else steps),
         "warmup": args.warmup if args.warmup is not None else 1}
    if s["steps"] <= s["warmup"]:
        ap.error("need --steps > --warmup")
    if os.geteuid() != 0:
        sys.exit(f"{tool}: must run as root (bench/cluster creates network namespaces)")
    build = os.path.abspath(args.build)
    s["baspc"], s["mkcorpus"] = os.path.join(build, "baspc"), os.path.join(build, "data", "mkcorpus")
    for t in (s["baspc"], s["mkcorpus"]):
        if not os.access(t, os.X_OK):
            sys.exit(f"{tool}: {t} not found: cmake --build {args.build} --target baspc mkcorpus")
    s["spec"] = os.path.abspath(args.spec)
    s["workdir"] = os.path.join(build, "bench", tool)
    os.makedirs(s["workdir"], exist_ok=True)
    os.makedirs(args.out, exist_ok=True)
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", args.bandwidth.lower())
    if not m:
        sys.exit(f"{tool}: --bandwidth must be NUMBER[k|m|g]bit")
    s["bw"] = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
    s["known"] = sh([s["baspc"], s["spec"], "-q", "--check", "--set", "mesh.device=cpu_calibrated"],
                    check=False).returncode == 0
    return s


def study_run(plan, bandwidth, name, tool):
    """Writes plan (runs on 8 ranks, see inner) next to its result, runs it
    inside an emulated 2 x 4 cluster whose inter-node links are shaped to
    bandwidth, and returns the result."""
    plan_path = os.path.join(plan["workdir"], "plan.json")
    with open(plan_path, "w") as f:
        json.dump(plan, f)
    here = os.path.dirname(os.path.abspath(__file__))
    cmd = [os.path.join(here, "cluster"), "--nodes", "2", "--ranks-per-node", "4", "--bandwidth", bandwidth,
           "--name", name, "--pin", "--exec", "--", sys.executable, os.path.abspath(__file__), "--inner", plan_path]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_MCA_mpi_yield_when_idle="1")
    log(f"{len(plan['runs'])} training runs on the emulated 2 x 4 cluster ({bandwidth})")
    if subprocess.run(cmd, env=env).returncode:
        sys.exit(f"{tool}: the measurements on the emulated cluster failed (see above)")
    with open(plan["result"]) as f:
        return json.load(f)


def inner(plan_path):
    """Runs the measurement plan; called by bench/cluster --exec inside node 0.
    A run may carry "mpirun_args", placed before -np on $BASP_MPIRUN's line."""
    with open(plan_path) as f:
        plan = json.load(f)
    mpirun, node0 = os.environ["BASP_MPIRUN"], os.environ["BASP_MPIRUN_NODE0"]
    np_ = str(plan["ranks"])
    out = {"a2a": {}, "runs": [], "hosts": []}
    r = sh([mpirun, "-np", np_, "hostname"])
    out["hosts"] = sorted(set(r.stdout.split()))
    for where, launcher in (("cluster", mpirun), ("shm", node0)):
        if not plan["a2a"]:
            break
        a = plan["a2a"]
        csv = os.path.join(plan["workdir"], f"a2a_{where}.csv")
        log(f"bench_a2a on {'the 2 nodes' if where == 'cluster' else 'one node (shared memory)'}: "
            f"{len(a['sizes'])} sizes, G = 1, {a['groups']}, {a['repeats']} repeats")
        r = sh([launcher, "-np", np_, a["binary"], "--groups", a["groups"], "--repeats", str(a["repeats"]),
                "--warmup", "1", "--csv", csv] + [f"{l}={b}" for l, b in a["sizes"]])
        with open(csv) as f:
            out["a2a"][where] = {"table": r.stdout, "csv": f.read()}
    for i, run in enumerate(plan["runs"]):
        for p in (run["metrics"], run["profile"]):
            if os.path.exists(p):
                os.remove(p)
        t0 = time.monotonic()
        # a run's "mpirun_args" (e.g. --map-by node for round-robin placement) go to the launcher
        r = sh([mpirun] + run.get("mpirun_args", []) + ["-np", np_, run["binary"], "--data", plan["corpus"],
                "--steps", str(run["steps"]), "--quiet", "--split-wait", "--metrics", run["metrics"],
                "--profile", run["profile"]], check=False)
        if r.returncode:
            sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
            sys.exit(f"cluster_study: training run {run['tag']} failed (status {r.returncode})")
        with open(run["metrics"]) as f:
            steps = [json.loads(line) for line in f if line.strip()]
        with open(run["profile"]) as f:
            prof = json.load(f)
        res = dict(run, steps_data=steps, profile_data=prof, wall_s=time.monotonic() - t0)
        out["runs"].append(res)
        w = steps[plan["warmup"]:] or steps
        log(f"run {i + 1}/{len(plan['runs'])} {run['tag']:34s} step {statistics.median(s['step_ms'] for s in w):8.1f} ms"
            f"  a2a {statistics.median(s['a2a_ms'] + s.get('a2a_wait_ms', 0) for s in w):7.1f} ms"
            f" (exchange {statistics.median(s['a2a_ms'] for s in w):.1f})")
    with open(plan["result"], "w") as f:
        json.dump(out, f)


# ---- the report ------------------------------------------------------------------------

def least(rounds):
    """The figures of the least-disturbed round: the one with the shortest step."""
    return min(rounds, key=lambda x: x["step_ms"])


def med(xs):
    xs = list(xs)
    return statistics.median(xs) if xs else float("nan")


def pct_err(pred, meas):
    return f"{100 * (pred - meas) / meas:+.0f}%" if meas > 0 else "—"


def gnuplot_available(allow_install):
    if shutil.which("gnuplot"):
        return True
    if not allow_install:
        return False
    log("gnuplot not found: apt-get install -y gnuplot-nox")
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive")
    r = subprocess.run(["apt-get", "install", "-y", "gnuplot-nox"], capture_output=True, text=True, env=env)
    if r.returncode:
        log("warning: cannot install gnuplot-nox; no plots: " + r.stderr.strip().splitlines()[-1:][0]
            if r.stderr.strip() else "warning: cannot install gnuplot-nox; no plots")
        return False
    return bool(shutil.which("gnuplot"))


def plot(out, name, script, data):
    """Writes NAME.dat blocks and runs gnuplot on SCRIPT (PNG)."""
    dat = os.path.join(out, name + ".dat")
    with open(dat, "w") as f:
        f.write(data)
    full = (f"set terminal pngcairo size 1000,420 font ',10'\nset output '{os.path.join(out, name + '.png')}'\n"
            + script.replace("DATA", dat))
    r = subprocess.run(["gnuplot"], input=full, capture_output=True, text=True)
    os.remove(dat)
    if r.returncode:
        log(f"warning: gnuplot failed for {name}: {r.stderr.strip()}")


def machine_description(args, hosts):
    """nproc, CPU model, Open MPI, kernel, load, the emulated links and CPUs."""
    lscpu = sh(["lscpu"], check=False).stdout
    model = next((l.split(":", 1)[1].strip() for l in lscpu.splitlines() if l.startswith("Model name")), "?")
    ompi = sh(["mpirun", "--version"], check=False).stdout.splitlines()[:1]
    with open("/proc/loadavg") as f:
        load = " ".join(f.read().split()[:3])
    return {"nproc": os.cpu_count(), "cpu": model, "openmpi": ompi[0] if ompi else "?",
            "kernel": os.uname().release, "load_at_start": load, "hosts": hosts,
            "shaping": f"tc tbf {args.bandwidth} per direction on every node's veth (egress both ways), "
                       f"bucket = 1 ms of traffic (min 64 KiB), queue limit 10 ms; no added latency",
            "cpus": "all ranks on all CPUs" if args.no_pin else
                    "each emulated node pinned to CPUs of its own (bench/cluster --pin: node i on CPU i)"}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory (default: build)")
    ap.add_argument("--spec", default=os.path.join(HERE, "cluster_model.basp"))
    ap.add_argument("--quick", action="store_true", help="fewer points, 1 round, shorter runs (under 3 minutes)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "cluster"), help="results directory")
    ap.add_argument("--workdir", help="binaries, corpus, metrics (default: BUILD/bench/cluster_study)")
    ap.add_argument("--bandwidth", default="2gbit", help="inter-node bandwidth per direction (default 2gbit)")
    ap.add_argument("--repeats", type=int, help="rounds (default 4; --quick 2)")
    ap.add_argument("--steps", type=int, help="steps per run (default 8; --quick 4)")
    ap.add_argument("--warmup", type=int, help="leading steps left out (default 2; --quick 1)")
    ap.add_argument("--loss-steps", type=int, help="steps of the loss-curve runs (default 40; --quick 12)")
    ap.add_argument("--device", help="device preset for the predictions (default: cpu_calibrated when "
                                     "baspc knows it, else the spec's)")
    ap.add_argument("--no-calibrate", action="store_true",
                    help="skip the calibration before the cluster comes up (bench/calibrate.py, about 50 s), "
                         "whose device file gives the second column of predictions: the machine as measured now")
    ap.add_argument("--no-pin", action="store_true",
                    help="let every node's ranks run on every CPU (default: bench/cluster --pin, each emulated "
                         "node on CPUs of its own, as separate machines would be)")
    ap.add_argument("--no-a2a", action="store_true", help="skip the all-to-all micro-benchmark")
    ap.add_argument("--no-install", action="store_true", help="do not apt-get install gnuplot-nox")
    ap.add_argument("--inner", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.inner:
        return inner(args.inner)

    q = args.quick
    repeats = args.repeats or (2 if q else 4)
    steps = args.steps or (4 if q else 8)
    warmup = args.warmup if args.warmup is not None else (1 if q else 2)
    loss_steps = args.loss_steps or (12 if q else 40)
    if steps <= warmup or repeats < 1:
        ap.error("need --steps > --warmup and --repeats >= 1")
    if os.geteuid() != 0:
        sys.exit("cluster_study: must run as root (bench/cluster creates network namespaces)")
    build = os.path.abspath(args.build)
    tools = {"baspc": os.path.join(build, "baspc"), "mkcorpus": os.path.join(build, "data", "mkcorpus"),
             "a2a": os.path.join(build, "bench", "bench_a2a")}
    for t in tools.values():
        if not os.access(t, os.X_OK):
            sys.exit(f"cluster_study: {t} not found: cmake --build {args.build} --target baspc mkcorpus bench_a2a")
    baspc, spec = tools["baspc"], os.path.abspath(args.spec)
    workdir = os.path.abspath(args.workdir or os.path.join(build, "bench", "cluster_study"))
    out = os.path.abspath(args.out)
    os.makedirs(workdir, exist_ok=True)
    os.makedirs(out, exist_ok=True)
    t_start = time.monotonic()
    have_plots = gnuplot_available(not args.no_install)

    # the spec, the device preset of the predictions, the inter-node bandwidth
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", args.bandwidth.lower())
    if not m:
        sys.exit("cluster_study: --bandwidth must be NUMBER[k|m|g]bit, e.g. 2gbit")
    bw_bits = float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]
    device = args.device
    if not device:
        known = sh([baspc, spec, "-q", "--check", "--set", "mesh.device=cpu_calibrated"], check=False).returncode == 0
        device = "cpu_calibrated" if known else None
    base_sets = [f"mesh.inter.bandwidth={bw_bits / 1e6:g}Mb/s"] + ([f"mesh.device={device}"] if device else [])
    v = spec_values(baspc, spec, base_sets)
    base_sets.append(f"mesh.cores_per_node={cores_per_node(int(v['mesh.nodes']))}")
    nodes, rpn = int(v["mesh.nodes"]), int(v["mesh.devices_per_node"])
    ranks, s0 = nodes * rpn, int(v["train.seq_len"])
    device = v["mesh.device"]

    # the points: (sweep, B, S)
    if q:
        batch_pts, seq_pts = [1, 2, 4, 8], [512, 1024, 2048]
        s_batch = 512
    else:
        batch_pts, seq_pts = [1, 2, 4, 8], [512, 1024, 2048, 4096]
        s_batch = s0
    points = [("batch", b, s_batch) for b in batch_pts] + [("seq", 2, s) for s in seq_pts]
    uniq = []
    for _, b, s in points:
        if (b, s) not in uniq:
            uniq.append((b, s))

    # 0. the machine as it is now: a CPU preset holds the rates of the day it
    # was fitted, and this container's moved by 10-20% between days
    calib = None
    if not args.no_calibrate:
        calib = calibrate_now(build, workdir, device)
    now_args = ["--device-file", calib["device_file"]] if calib else []

    # 1. binaries and predictions
    corpus = os.path.join(workdir, "corpus.bin")
    if not os.path.exists(corpus):
        sh([tools["mkcorpus"], corpus])
    cfgs = {}
    log(f"compiling {len(uniq)} points x 2 layouts of {os.path.relpath(spec, ROOT)} (device {device})")
    for b, s in uniq:
        for lay in ("ulysses", "batch_aware"):
            sets = base_sets + [f"train.micro_batch={b}", f"train.seq_len={s}"]
            if lay == "ulysses":
                sets.append("layout.batch_aware=off")
            tag = f"{lay}_b{b}_s{s}"
            binary = os.path.join(workdir, tag)
            sh([baspc, spec, "-q", "-o", binary] + [a for x in sets for a in ("--set", x)])
            ir = program_ir(baspc, spec, sets)
            g, k = layout_of(ir)
            sched = json.loads(sh([baspc, spec, "-q", "--schedule", "--json"]
                                  + [a for x in sets for a in ("--set", x)]).stdout)
            # the model as specified: the spec's nics_per_node 1 (a node's
            # ranks share its one link) and cores_per_node (they share its
            # cores); nothing adjusted by hand
            pred = predict(baspc, ir, sets)
            pred_now = predict(baspc, program_ir(baspc, spec, sets + [f"mesh.device={calib['device']}"], now_args),
                               sets) if calib else None
            cfgs[(b, s, lay)] = {"tag": tag, "binary": binary, "G": g, "K": k, "pred": pred, "pred_now": pred_now,
                                 "a2a_bytes": sched["all_to_all"]["bytes_per_rank"],
                                 "a2a_inter_bytes": sched["all_to_all"]["inter_node_bytes_per_rank"]}
    plans = {}
    for b, s in uniq:  # the planner's view, for the record
        p = json.loads(sh([baspc, spec, "-q", "--plan", "--json"] + [a for x in base_sets + [
            f"train.micro_batch={b}", f"train.seq_len={s}"] for a in ("--set", x)], check=False).stdout or "{}")
        plans[f"b{b}_s{s}"] = {"chosen": p.get("chosen"), "candidates": [
            {k: c.get(k) for k in ("name", "groups", "group_size", "a2a_ms", "step_ms", "legal", "keeps_batch")}
            for c in p.get("candidates", [])]}

    # 2. the measurement plan: rounds of every point, layouts alternating
    runs = []
    for r in range(repeats):
        for i, (b, s) in enumerate(uniq):
            order = ("ulysses", "batch_aware") if (r + i) % 2 == 0 else ("batch_aware", "ulysses")
            for lay in order:
                c = cfgs[(b, s, lay)]
                runs.append({"tag": f"r{r + 1} {c['tag']}", "key": [b, s, lay], "round": r, "steps": steps,
                             "binary": c["binary"], "metrics": os.path.join(workdir, c["tag"] + ".jsonl"),
                             "profile": os.path.join(workdir, c["tag"] + ".profile.json")})
    lb, ls = 2, (1024 if 1024 in seq_pts else s_batch)
    for lay in ("ulysses", "batch_aware"):
        c = cfgs[(lb, ls, lay)]
        runs.append({"tag": f"loss {c['tag']}", "key": [lb, ls, lay], "round": -1, "steps": loss_steps,
                     "binary": c["binary"], "metrics": os.path.join(workdir, c["tag"] + ".loss.jsonl"),
                     "profile": os.path.join(workdir, c["tag"] + ".loss.profile.json")})
    a2a = None
    if not args.no_a2a:
        sizes = a2a_sizes(baspc)
        uniq_sizes = {}
        for label, nbytes in sizes:  # one row per distinct size, every model that has it named
            uniq_sizes.setdefault(nbytes, []).append(label)
        size_rows = sorted(uniq_sizes.items())
        if q:
            size_rows = size_rows[:3]
        a2a = {"binary": tools["a2a"], "groups": f"{ranks // rpn},{ranks // 2}" if ranks // 2 > ranks // rpn
               else str(ranks // rpn), "repeats": 3 if q else 7,
               "sizes": [("+".join(ls_), nb) for nb, ls_ in size_rows]}
    plan = {"ranks": ranks, "corpus": corpus, "warmup": warmup, "workdir": workdir, "runs": runs, "a2a": a2a,
            "result": os.path.join(workdir, "result.json")}
    plan_path = os.path.join(workdir, "plan.json")
    with open(plan_path, "w") as f:
        json.dump(plan, f)
    machine = machine_description(args, [])
    log(f"{len(runs)} training runs on the emulated cluster ({nodes} x {rpn}, {args.bandwidth}); load {machine['load_at_start']}")
    cmd = [CLUSTER, "--nodes", str(nodes), "--ranks-per-node", str(rpn), "--bandwidth", args.bandwidth,
           "--name", "study"] + ([] if args.no_pin else ["--pin"]) + ["--exec", "--", sys.executable, os.path.abspath(__file__), "--inner", plan_path]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_MCA_mpi_yield_when_idle="1")
    if subprocess.run(cmd, env=env).returncode:
        sys.exit("cluster_study: the measurements on the emulated cluster failed (see above)")
    with open(plan["result"]) as f:
        res = json.load(f)
    machine["hosts"] = res["hosts"]
    with open("/proc/loadavg") as f:
        machine["load_at_end"] = " ".join(f.read().split()[:3])

    # 3. figures per run, per point
    rtol = loss_rtol()
    per = {}  # (b, s, lay) -> list of per-round dicts
    loss_runs = {}
    for run in res["runs"]:
        b, s, lay = run["key"]
        st = run["steps_data"]
        w = st[warmup:]
        prof = run["profile_data"]["ops"]
        nsteps = run["profile_data"]["steps"]
        # --split-wait: a2a_ms is the exchange alone, a2a_wait_ms the wait
        # for the group's slowest rank at the barrier before it
        fig = {"round": run["round"], "step_ms": med(x["step_ms"] for x in w),
               "a2a_ms": med(x["a2a_ms"] + x.get("a2a_wait_ms", 0) for x in w),
               "xchg_ms": med(x["a2a_ms"] for x in w),
               "allreduce_ms": 1e3 * prof.get("all_reduce", {}).get("seconds", 0) / nsteps,
               "loss": [x["loss"] for x in st]}
        if run["round"] < 0:
            loss_runs[lay] = fig
        else:
            per.setdefault((b, s, lay), []).append(fig)
    loss_bad = []
    for b, s in uniq:
        for fu, fb in zip(per[(b, s, "ulysses")], per[(b, s, "batch_aware")]):
            for i, (x, y) in enumerate(zip(fu["loss"], fb["loss"])):
                if abs(x - y) > rtol * abs(x):
                    loss_bad.append(f"B={b} S={s} step {i + 1}: {x} vs {y}")
    lu, lba = loss_runs["ulysses"]["loss"], loss_runs["batch_aware"]["loss"]
    loss_maxrel = max(abs(x - y) / abs(x) for x, y in zip(lu, lba))
    if loss_maxrel > rtol:
        loss_bad.append(f"loss curve: max relative difference {loss_maxrel:.2e}")

    rows = []
    for sweep, b, s in points:
        u, ba = per[(b, s, "ulysses")], per[(b, s, "batch_aware")]
        cu, cb = cfgs[(b, s, "ulysses")], cfgs[(b, s, "batch_aware")]
        fu, fb = least(u), least(ba)
        su, sb = fu["step_ms"], fb["step_ms"]
        au, ab = fu["a2a_ms"], fb["a2a_ms"]
        step_ratio = su / sb
        a2a_ratio = au / ab if ab > 0 else float("inf")
        xu, xb = fu["xchg_ms"], fb["xchg_ms"]
        xchg_ratio = xu / xb if xb > 0 else float("inf")
        rows.append({"sweep": sweep, "B": b, "S": s, "G": cb["G"], "K": cb["K"],
                     "ulysses_step_ms": su, "ba_step_ms": sb, "step_ratio": step_ratio,
                     "ulysses_step_range": (min(x["step_ms"] for x in u), max(x["step_ms"] for x in u)),
                     "ba_step_range": (min(x["step_ms"] for x in ba), max(x["step_ms"] for x in ba)),
                     "ulysses_a2a_ms": au, "ba_a2a_ms": ab, "a2a_ratio": a2a_ratio,
                     "ulysses_xchg_ms": xu, "ba_xchg_ms": xb, "xchg_ratio": xchg_ratio,
                     "ulysses_a2a_share": au / su, "ba_a2a_share": ab / sb,
                     "ulysses_allreduce_ms": fu["allreduce_ms"],
                     "ba_allreduce_ms": fb["allreduce_ms"],
                     "ulysses_a2a_mib": cu["a2a_bytes"] / 2**20, "ulysses_a2a_inter_mib": cu["a2a_inter_bytes"] / 2**20,
                     "ba_a2a_mib": cb["a2a_bytes"] / 2**20, "ba_a2a_inter_mib": cb["a2a_inter_bytes"] / 2**20,
                     "pred": {"ulysses": cu["pred"], "batch_aware": cb["pred"]},
                     "pred_now": {"ulysses": cu["pred_now"], "batch_aware": cb["pred_now"]} if calib else None})

    # 4. write the results
    wall = time.monotonic() - t_start
    command = "bench/cluster_study.py " + " ".join(a for a in sys.argv[1:])
    write_csv(out, rows)
    a2a_md = ""
    if res["a2a"]:
        with open(os.path.join(out, "a2a.csv"), "w") as f:
            lines = res["a2a"]["cluster"]["csv"].splitlines()
            f.write("where," + lines[0] + "\n")
            for where in ("cluster", "shm"):
                for line in res["a2a"][where]["csv"].splitlines()[1:]:
                    f.write(f"{where},{line}\n")
        a2a_md = a2a_table(res["a2a"])
    md = report(rows, machine, command, args, device, repeats, steps, warmup, loss_steps, wall, rtol, loss_maxrel,
                loss_bad, a2a_md, v, (lb, ls), plans, calib)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write(md)
    with open(os.path.join(out, "raw.json"), "w") as f:
        json.dump({"command": command, "machine": machine, "device": device, "calibration": calib, "rows": rows,
                   "plans": plans,
                   "rounds": {f"{k[0]},{k[1]},{k[2]}": x for k, x in per.items()}, "loss_curves": loss_runs,
                   "a2a": res["a2a"]}, f, indent=1)
    if have_plots:
        plots(out, rows, loss_runs, res["a2a"], (lb, ls))
    print(md)
    log(f"results in {out} ({wall:.0f} s)")
    if loss_bad:
        sys.exit("cluster_study: the two layouts' losses differ beyond LOSS_RTOL:\n  " + "\n  ".join(loss_bad[:10]))


def write_csv(out, rows):
    keys = ["sweep", "B", "S", "G", "K", "ulysses_step_ms", "ba_step_ms", "step_ratio", "ulysses_a2a_ms",
            "ba_a2a_ms", "a2a_ratio", "ulysses_xchg_ms", "ba_xchg_ms", "xchg_ratio", "ulysses_a2a_share", "ba_a2a_share", "ulysses_allreduce_ms", "ba_allreduce_ms",
            "ulysses_a2a_mib", "ulysses_a2a_inter_mib", "ba_a2a_mib", "ba_a2a_inter_mib"]
    pk = ["pred_ulysses_step_ms", "pred_ba_step_ms", "pred_ulysses_a2a_ms", "pred_ba_a2a_ms",
          "pred_now_ulysses_step_ms", "pred_now_ba_step_ms"]
    with open(os.path.join(out, "results.csv"), "w") as f:
        f.write(",".join(keys + pk) + "\n")
        for r in rows:
            vals = [r[k] for k in keys]
            vals += [r["pred"]["ulysses"]["step_ms"], r["pred"]["batch_aware"]["step_ms"],
                     r["pred"]["ulysses"]["a2a_ms"], r["pred"]["batch_aware"]["a2a_ms"]]
            now = r.get("pred_now")
            vals += [now["ulysses"]["step_ms"], now["batch_aware"]["step_ms"]] if now else ["", ""]
            f.write(",".join(f"{x:.4g}" if isinstance(x, float) else str(x) for x in vals) + "\n")


def a2a_table(a2a):
    """One row per size: N-way and each G×K, on the cluster and on shared memory."""
    def parse(csv):
        lines = csv.splitlines()
        hdr = lines[0].split(",")
        return [dict(zip(hdr, l.split(","))) for l in lines[1:]]
    cl, sm = parse(a2a["cluster"]["csv"]), parse(a2a["shm"]["csv"])
    groups = sorted({int(r["groups"]) for r in cl})
    head = "| exchange (per-rank buffer) | MiB | " + " | ".join(
        f"2 nodes: {'N-way' if g == 1 else f'G={g}'} ms" for g in groups) + " | 2 nodes: N-way / G=" + str(groups[1]) + \
        " | " + " | ".join(f"1 node: {'N-way' if g == 1 else f'G={g}'} ms" for g in groups) + \
        f" | 1 node: N-way / G={groups[1]} |"
    lines = [head, "|" + "---|" * (2 + 2 * len(groups) + 2)]
    labels = []
    for r in cl:
        if r["label"] not in labels:
            labels.append(r["label"])
    for lab in labels:
        c = {int(r["groups"]): float(r["median_ms"]) for r in cl if r["label"] == lab}
        s = {int(r["groups"]): float(r["median_ms"]) for r in sm if r["label"] == lab}
        mib = int(next(r["bytes_per_rank"] for r in cl if r["label"] == lab)) / 2**20
        lines.append(f"| {lab.replace('+', ', ')} | {mib:.0f} | " + " | ".join(f"{c[g]:.1f}" for g in groups)
                     + f" | {c[1] / c[groups[1]]:.1f}× | " + " | ".join(f"{s[g]:.1f}" for g in groups)
                     + f" | {s[1] / s[groups[1]]:.1f}× |")
    return "\n".join(lines) + "\n"


def report(rows, machine, command, args, device, repeats, steps, warmup, loss_steps, wall, rtol, loss_maxrel,
           loss_bad, a2a_md, v, loss_pt, plans, calib=None):
    L = []
    L.append("# Ulysses vs batch-aware on an emulated 2-node cluster\n")
    L.append(f"Command: `{command}` ({wall / 60:.1f} min).  Model `{os.path.relpath(args.spec, ROOT)}`: hidden "
             f"{v['model.hidden']}, {v['model.layers']} layers, {v['model.heads']} heads × {v['model.head_dim']} "
             f"({v['model.kv_heads']} KV), ffn {v['model.ffn']}, vocab {v['model.vocab']}, fp32, ZeRO-{v['train.zero']}; "
             f"{v['mesh.nodes']} nodes × {v['mesh.devices_per_node']} ranks.  {steps} steps per run, the first "
             f"{warmup} left out; each layout's least-disturbed of {repeats} round(s), Ulysses and batch-aware "
             "alternating.\n")
    L.append("Machine: " + f"{machine['nproc']} cores ({machine['cpu']}), {machine['openmpi']}, Linux "
             f"{machine['kernel']}; load average {machine['load_at_start']} at the start, {machine['load_at_end']} at "
             f"the end (other jobs share the cores).  Emulated nodes: {', '.join(machine['hosts'])}; "
             f"{machine['shaping']}; {machine['cpus']}.  Inside a node: Open MPI's shared-memory transport (vader); "
             "between nodes: TCP.  The load at the end includes the study's own 8 ranks.\n")
    L.append("## Measured\n")
    L.append("Step and all-to-all (a2a) times are rank 0's wall times per step (`--metrics`); a2a includes waiting "
             "for the slowest peer of the group, **exchange** is the all-to-all alone (the runs use `--split-wait`: "
             "each collective starts at a barrier of its group, whose time is the wait).  A layout's figures are "
             "those of its round with the shortest step; ratios are ratios of those.  "
             "`a2a MiB/rank` is what a rank sends per step in all-to-alls (across nodes in brackets).\n")
    L.append("| sweep | B | S | batch-aware G×K | Ulysses step ms | batch-aware step ms | step U/BA | Ulysses a2a ms (share) "
             "| batch-aware a2a ms (share) | a2a U/BA | exchange ms U / BA | exchange U/BA "
             "| grad all-reduce ms U / BA | a2a MiB/rank U | a2a MiB/rank BA |")
    L.append("|---|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in rows:
        ar = "∞ (no a2a)" if r["a2a_ratio"] == float("inf") else f"{r['a2a_ratio']:.2f}×"
        xr = "∞ (no a2a)" if r["xchg_ratio"] == float("inf") else f"{r['xchg_ratio']:.2f}×"
        L.append(f"| {r['sweep']} | {r['B']} | {r['S']} | {r['G']}×{r['K']} | {r['ulysses_step_ms']:.0f} "
                 f"| {r['ba_step_ms']:.0f} | **{r['step_ratio']:.2f}×** | {r['ulysses_a2a_ms']:.1f} "
                 f"({100 * r['ulysses_a2a_share']:.0f}%) | {r['ba_a2a_ms']:.1f} ({100 * r['ba_a2a_share']:.0f}%) | {ar} "
                 f"| {r['ulysses_xchg_ms']:.1f} / {r['ba_xchg_ms']:.1f} | {xr} "
                 f"| {r['ulysses_allreduce_ms']:.0f} / {r['ba_allreduce_ms']:.0f} "
                 f"| {r['ulysses_a2a_mib']:.1f} ({r['ulysses_a2a_inter_mib']:.1f}) "
                 f"| {r['ba_a2a_mib']:.1f} ({r['ba_a2a_inter_mib']:.1f}) |")
    L.append("")
    L.append("Spread over rounds (fastest–slowest step ms): " + "; ".join(
        f"{r['sweep']} B={r['B']} S={r['S']}: U {r['ulysses_step_range'][0]:.0f}–{r['ulysses_step_range'][1]:.0f}, "
        f"BA {r['ba_step_range'][0]:.0f}–{r['ba_step_range'][1]:.0f}" for r in rows) + ".\n")
    verdict = "identical within" if not loss_bad else "NOT within"
    L.append(f"Losses: for every run the two layouts' losses are {verdict} LOSS_RTOL = {rtol:g} (relative, as "
             f"tests/train/equiv.py); the {loss_steps}-step loss curves at B = {loss_pt[0]}, S = {loss_pt[1]} "
             f"differ by at most {loss_maxrel:.1e} relative (`loss.png`).\n")
    if loss_bad:
        L.append("Mismatches: " + "; ".join(loss_bad[:10]) + "\n")
    L.append("## Cost model against the measurements\n")
    L.append(f"The cost pass on the IR each binary was built from (`baspc --emit=ir`, then `basp-opt --passes=cost`), "
             f"same spec and overrides (inter link {args.bandwidth}, `nics_per_node {v.get('mesh.nics_per_node', '?')}`: "
             f"the node's one link is shared by its {v['mesh.devices_per_node']} ranks, and `cores_per_node "
             f"{cores_per_node(int(v['mesh.nodes']))}`: they share the node's cores); nothing adjusted by hand.  "
             f"**preset**: device `{device}` as the compiler ships it.  ")
    if calib:
        L.append(f"**measured now**: the device file `bench/calibrate.py` wrote at the start of this study "
                 f"({calib['seconds']:.0f} s, 2 ranks on the 2 cores before the cluster came up: GEMMs "
                 f"{calib['fit']['compute_fraction'] * 100:.0f}, attention {calib['fit']['attention_fraction'] * 100:.0f} "
                 f"GFLOP/s, memory {calib['fit']['mem_bw_fraction'] * 20:.1f} GB/s, per-op overhead "
                 f"{calib['fit']['op_overhead_s'] * 1e6:.2f} µs, 4 ranks on a core each keeping "
                 f"{calib['fit']['shared_core_efficiency']:.2f} of their turn), `baspc --device-file`: the same model "
                 f"with this day's rates.  ")
    L.append("Error = (predicted − measured) / measured.\n")
    now_h = " | measured now: step ms (err)" if calib else ""
    L.append("| sweep | B | S | layout | measured step ms | preset: step ms (err)" + now_h +
             " | measured a2a exchange ms | preset: a2a ms (err) |")
    L.append("|---|---:|---:|---|---:|---:|" + ("---:|" if calib else "") + "---:|---:|")
    errs, errs_now = [], []
    for r in rows:
        for lay, key in (("Ulysses", "ulysses"), ("batch-aware", "batch_aware")):
            pre = "ulysses" if key == "ulysses" else "ba"
            ms, ma = r[f"{pre}_step_ms"], r[f"{pre}_xchg_ms"]  # the model has no wait for a slow peer
            p = r["pred"][key]
            errs.append(abs(p["step_ms"] / ms - 1))
            now = ""
            if calib:
                pn = r["pred_now"][key]["step_ms"]
                errs_now.append(abs(pn / ms - 1))
                now = f" | {pn:.0f} ({pct_err(pn, ms)})"
            L.append(f"| {r['sweep']} | {r['B']} | {r['S']} | {lay} | {ms:.0f} | {p['step_ms']:.0f} ({pct_err(p['step_ms'], ms)})"
                     f"{now} | {ma:.1f} | {p['a2a_ms']:.1f} ({pct_err(p['a2a_ms'], ma)}) |")
    L.append("")
    for name, e in (("preset", errs), ("measured now", errs_now)):
        if e:
            L.append(f"Step time, {name}: mean absolute error {100 * statistics.mean(e):.1f}%, largest "
                     f"{100 * max(e):.1f}%, {sum(x > 0.15 for x in e)} of the {len(e)} points beyond 15%.\n")
    L.append("Predicted Ulysses / batch-aware step ratio next to the measured one: " + "; ".join(
        f"B={r['B']} S={r['S']}: {r['pred']['ulysses']['step_ms'] / r['pred']['batch_aware']['step_ms']:.2f} "
        f"vs {r['step_ratio']:.2f}" for r in rows) + ".\n")
    L.append("Planner's choice per point (`baspc --plan --json`): " + "; ".join(
        f"B={k.split('_')[0][1:]} S={k.split('_')[1][1:]}: {p['chosen']}" for k, p in plans.items()) + ".\n")
    if a2a_md:
        L.append("## All-to-all micro-benchmark\n")
        L.append("`bench_a2a` (medians of the slowest rank over repeats) at the per-rank buffer sizes of the "
                 "example models' attention exchanges under Ulysses on 8 ranks (micro-batch 2 × 16K, bf16): "
                 "q,k,v = T·(H + 2·max(Hkv, K))·Dh·2 bytes, o = T·H·Dh·2 bytes, T = B·S/N tokens per rank.  "
                 "Every layout moves the same buffer per rank; G groups of K = 8/G ranks exchange inside their "
                 "group.  2 nodes: the emulated cluster; 1 node: the same 8 ranks on one emulated node (shared "
                 "memory only).\n")
        L.append(a2a_md)
    L.append("## Plots\n")
    L.append("`batch_scaling.png` (step and a2a time against B), `seq_scaling.png` (against S at B = 2), "
             "`loss.png` (both layouts' loss curves), `a2a.png` (the micro-benchmark).\n")
    return "\n".join(L) + "\n"


def plots(out, rows, loss_runs, a2a, loss_pt):
    for sweep, xkey, xlabel, name in (("batch", "B", "micro-batch B (sequences per step)", "batch_scaling"),
                                      ("seq", "S", "sequence length S (tokens, B = 2)", "seq_scaling")):
        rs = [r for r in rows if r["sweep"] == sweep]
        data = "".join(f"{r[xkey]} {r['ulysses_step_ms']:.3f} {r['ba_step_ms']:.3f} {r['ulysses_a2a_ms']:.3f} "
                       f"{r['ba_a2a_ms']:.3f} {r['step_ratio']:.4f} {r['pred']['ulysses']['step_ms']:.3f} "
                       f"{r['pred']['batch_aware']['step_ms']:.3f}\n" for r in rs)
        xt = ", ".join(f'"{r[xkey]}" {r[xkey]}' for r in rs)
        script = f"""
set multiplot layout 1,2 title "Ulysses vs batch-aware on an emulated 2 nodes x 4 ranks (medians)"
set logscale x 2
set xrange [{rs[0][xkey] / 1.2}:{rs[-1][xkey] * 1.2}]
set xtics ({xt})
set xlabel "{xlabel}"
set ylabel "ms per step"
set key top left
set grid
plot 'DATA' u 1:2 w lp pt 7 lc rgb '#c0392b' t 'Ulysses step', \\
     'DATA' u 1:3 w lp pt 5 lc rgb '#2471a3' t 'batch-aware step', \\
     'DATA' u 1:4 w lp pt 6 dt 2 lc rgb '#c0392b' t 'Ulysses all-to-all', \\
     'DATA' u 1:5 w lp pt 4 dt 2 lc rgb '#2471a3' t 'batch-aware all-to-all'
set ylabel "Ulysses / batch-aware step time"
set yrange [0.8:*]
unset key
plot 'DATA' u 1:6 w lp pt 7 lc rgb 'black', 1 dt 3 lc rgb 'gray'
unset multiplot
"""
        plot(out, name, script, data)
    lu, lb = loss_runs["ulysses"]["loss"], loss_runs["batch_aware"]["loss"]
    data = "".join(f"{i + 1} {x:.7f} {y:.7f}\n" for i, (x, y) in enumerate(zip(lu, lb)))
    script = f"""
set title "training loss, B = {loss_pt[0]}, S = {loss_pt[1]}, same seed and batches"
set xlabel "step"
set ylabel "loss"
set grid
plot 'DATA' u 1:2 w l lw 4 lc rgb '#c0392b' t 'Ulysses (G=1, K=8)', \\
     'DATA' u 1:3 w lp lw 1 pt 6 lc rgb '#2471a3' t 'batch-aware'
"""
    plot(out, "loss", script, data)
    if a2a:
        lines = a2a["cluster"]["csv"].splitlines()
        hdr = lines[0].split(",")
        cl = [dict(zip(hdr, l.split(","))) for l in lines[1:]]
        sm = [dict(zip(hdr, l.split(","))) for l in a2a["shm"]["csv"].splitlines()[1:]]
        groups = sorted({int(r["groups"]) for r in cl})
        data = ""
        for gi, g in enumerate(groups):
            for src in (cl, sm):
                pts = sorted((int(r["bytes_per_rank"]) / 2**20, float(r["median_ms"])) for r in src
                             if int(r["groups"]) == g)
                data += "".join(f"{x:.2f} {y:.3f}\n" for x, y in pts) + "\n\n"
        plot_lines = []
        colors = ["#c0392b", "#2471a3", "#27ae60", "#8e44ad"]
        for gi, g in enumerate(groups):
            name = "N-way (G=1)" if g == 1 else f"G={g} groups"
            plot_lines.append(f"'DATA' index {2 * gi} u 1:2 w lp pt 7 lc rgb '{colors[gi]}' t '{name}, 2 nodes'")
            plot_lines.append(f"'DATA' index {2 * gi + 1} u 1:2 w lp pt 6 dt 2 lc rgb '{colors[gi]}' "
                              f"t '{name}, 1 node (shm)'")
        script = ("set title 'all-to-all of 8 ranks, per-rank buffer of the example models'\n"
                  "set xlabel 'bytes per rank (MiB)'\nset ylabel 'ms (median, slowest rank)'\nset grid\n"
                  "set key top left\nset logscale y\nplot " + ", \\\n     ".join(plot_lines) + "\n")
        plot(out, "a2a", script, data)


if __name__ == "__main__":
    main()
