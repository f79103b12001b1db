#!/usr/bin/env python3
"""overlap_study.py — ZeRO-3's collectives and the sequence-parallel exchanges
hidden under compute (train.overlap) on an emulated 2 × 4 cluster.

    bench/overlap_study.py [--build DIR] [--quick] [--out DIR] [--bandwidth 2gbit]
                           [--ranks-per-node 4] [--repeats R] [--steps N] [--warmup W]
                           [--batches 2,8]

One command, as root, from an existing build directory (BUILD/baspc,
BUILD/basp-opt, BUILD/data/mkcorpus).  For bench/cluster_model.basp with
ZeRO 3 at micro-batch 2 and 8 (sequence 1024), plain Ulysses and batch-aware
(the spec's `auto`), it

  1. compiles every layout twice, overlap off and on, and asks the cost
     model for the step (the two-stream model: the cost pass on the lowered
     IR), once as specified and once with the compute slowed by the one
     thing the model does not know here, the ranks sharing the machine's
     cores (the device's peak FLOP/s, memory bandwidth and exponential rate
     divided, its per-op overhead multiplied, by ranks / cores when there are
     more ranks than cores — cluster_study.py makes the same adjustment to
     the serial sum);
  2. brings up the emulated cluster (bench/cluster: 2 nodes of
     --ranks-per-node ranks, inter-node links shaped to --bandwidth, each
     node pinned to a CPU of its own) and trains every
     binary for --steps steps, REPEATS rounds, rotating the order each round,
     with --metrics and --profile (no --split-wait: its barrier before every
     collective would itself block);
  3. checks that overlap on and off give identical losses at every step, and
     writes results.md, results.csv and raw.json to --out (default
     bench/results/overlap/): per point the step time off and on (medians
     over the steps after the warm-up, then over rounds; the gain is the
     median of per-round ratios), ZeRO's collective time per step as the
     rank sees it (blocking: the call; started: the start and wait calls,
     what is left exposed), the fraction of it hidden, the exchanges' time
     (all_to_all) the same way, and the prediction against the measurement.

Standard library only.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import cluster_study as cs  # noqa: E402  (sh, log, study_setup, machine_description)

LAYOUTS = [("Ulysses", "layout.batch_aware=off"), ("batch-aware", "layout.batch_aware=auto")]
ZERO_KINDS = ("all_gather", "reduce_scatter", "all_reduce")
COLL_KINDS = ZERO_KINDS + ("all_to_all",)  # and the sequence-parallel exchanges
COST_RE = re.compile(r"cost: step ([0-9.]+) ms \(compute ([0-9.]+) ms, communication ([0-9.]+) ms\)")


def sets_args(sets):
    return [a for s in sets for a in ("--set", s)]


def predict(opt, ir_path, slow):
    """The cost pass's step, compute and communication ms on the lowered IR,
    the device slowed by `slow` (1: as specified)."""
    text = open(ir_path).read()
    if slow != 1:
        def scale(key, f):
            nonlocal text
            pat = re.compile(r"^(config %s = )([0-9.e+-]+)$" % re.escape(key), re.M)
            if not pat.search(text):
                sys.exit(f"overlap_study: no `config {key}` in {ir_path}")
            text = pat.sub(lambda m: m.group(1) + repr(float(m.group(2)) * f), text)
        for key in ("device_peak_flops", "device_mem_bw", "device_exp_rate"):
            scale(key, 1 / slow)
        if re.search(r"^config cost.op_overhead = ", text, re.M):
            scale("cost.op_overhead", slow)
    path = ir_path + (".slow.bir" if slow != 1 else ".bir")
    with open(path, "w") as f:
        f.write(text)
    r = cs.sh([opt, path, "--passes=cost", "-o", os.devnull])
    m = COST_RE.search(r.stderr + r.stdout)
    if not m:
        sys.exit(f"overlap_study: no cost remark for {ir_path}:\n{r.stderr[-2000:]}")
    return {"step_ms": float(m.group(1)), "compute_ms": float(m.group(2)), "comm_ms": float(m.group(3))}


def inner(plan_path):
    """Runs the plan's training runs; called by bench/cluster --exec in node 0."""
    with open(plan_path) as f:
        plan = json.load(f)
    mpirun, np_ = os.environ["BASP_MPIRUN"], str(plan["ranks"])
    out = {"runs": [], "hosts": sorted(set(cs.sh([mpirun, "-np", np_, "hostname"]).stdout.split()))}
    for i, run in enumerate(plan["runs"]):
        for p in (run["metrics"], run["profile"]):
            if os.path.exists(p):
                os.remove(p)
        r = cs.sh([mpirun, "-np", np_, run["binary"], "--data", plan["corpus"], "--steps", str(plan["steps"]),
                   "--quiet", "--metrics", run["metrics"], "--profile", run["profile"]], check=False)
        if r.returncode:
            sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
            sys.exit(f"overlap_study: training run {run['tag']} failed (status {r.returncode})")
        with open(run["metrics"]) as f:
            steps = [json.loads(line) for line in f if line.strip()]
        with open(run["profile"]) as f:
            prof = json.load(f)
        out["runs"].append(dict(run, steps_data=steps, profile_data=prof))
        w = steps[plan["warmup"]:] or steps
        cs.log(f"run {i + 1}/{len(plan['runs'])} {run['tag']:28s} step "
               f"{statistics.median(s['step_ms'] for s in w):8.1f} ms")
    with open(plan["result"], "w") as f:
        json.dump(out, f)


def zero_ms(prof):
    """ZeRO's collectives and the exchanges: ms per step per kind, as the rank spent them."""
    ops, n = prof["ops"], max(prof["steps"], 1)
    return {k: ops.get(k, {}).get("seconds", 0.0) * 1e3 / n for k in COLL_KINDS}


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "--inner":
        inner(sys.argv[2])
        return
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--spec", default=os.path.join(HERE, "cluster_model.basp"))
    ap.add_argument("--quick", action="store_true", help="2 rounds of 4 steps")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "overlap"))
    ap.add_argument("--bandwidth", default="2gbit")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--batches", default="2,8")
    ap.add_argument("--ranks-per-node", type=int, default=4)
    args = ap.parse_args()
    st = cs.study_setup(ap, args, "overlap_study", 3, 6)
    repeats, steps, warmup, bw, known = st["repeats"], st["steps"], st["warmup"], st["bw"], st["known"]
    baspc, mkcorpus, spec, workdir = st["baspc"], st["mkcorpus"], st["spec"], st["workdir"]
    opt = os.path.join(os.path.dirname(baspc), "basp-opt")
    cores = os.cpu_count() or 1
    ranks = 2 * args.ranks_per_node
    slow = max(1.0, ranks / cores)
    base = [f"mesh.inter.bandwidth={bw / 1e6:g}Mb/s", f"mesh.devices_per_node={args.ranks_per_node}",
            "train.zero=3", "train.seq_len=1024"] + \
        (["mesh.device=cpu_calibrated"] if known else [])
    batches = [int(b) for b in args.batches.split(",")]
    t0 = time.monotonic()
    corpus = os.path.join(workdir, "corpus.bin")
    if not os.path.exists(corpus):
        cs.sh([mkcorpus, corpus])

    points = []  # one per (B, layout), each with off and on
    for b in batches:
        for lname, lset in LAYOUTS:
            pt = {"B": b, "layout": lname, "cfg": {}}
            for o in ("off", "on"):
                tag = f"b{b}_{'ulysses' if lname == 'Ulysses' else 'basp'}_{o}"
                sets = base + [f"train.micro_batch={b}", lset, f"train.overlap={o}"]
                binary = os.path.join(workdir, tag)
                cs.sh([baspc, spec, "-q", "-o", binary] + sets_args(sets))
                ir = os.path.join(workdir, tag + ".ir")
                cs.sh([baspc, spec, "-q", "--emit=ir", "-o", ir] + sets_args(sets))
                groups = re.search(r"^config groups = (\d+)$", open(ir).read(), re.M)
                pt["G"] = int(groups.group(1)) if groups else 1
                pt["cfg"][o] = {"tag": tag, "binary": binary, "pred": predict(opt, ir, 1),
                                "pred_adj": predict(opt, ir, slow)}
            cs.log(f"B={b} {lname:12s} G={pt['G']}: predicted {pt['cfg']['off']['pred_adj']['step_ms']:.1f} -> "
                   f"{pt['cfg']['on']['pred_adj']['step_ms']:.1f} ms (compute slowed {slow:g}x: {ranks} ranks on {cores} cores)")
            points.append(pt)

    order = [(pi, o) for pi in range(len(points)) for o in ("off", "on")]
    runs = []
    for r in range(repeats):
        k = (r * 3) % len(order)
        for pi, o in order[k:] + order[:k]:
            c = points[pi]["cfg"][o]
            runs.append({"tag": f"r{r + 1} {c['tag']}", "point": pi, "overlap": o, "round": r,
                         "binary": c["binary"], "metrics": os.path.join(workdir, c["tag"] + ".jsonl"),
                         "profile": os.path.join(workdir, c["tag"] + ".profile.json")})
    plan = {"corpus": corpus, "warmup": warmup, "steps": steps, "runs": runs, "ranks": ranks,
            "result": os.path.join(workdir, "result.json")}
    plan_path = os.path.join(workdir, "plan.json")
    with open(plan_path, "w") as f:
        json.dump(plan, f)
    cmd = [os.path.join(HERE, "cluster"), "--nodes", "2", "--ranks-per-node", str(args.ranks_per_node),
           "--bandwidth", args.bandwidth,
           "--name", "overlap", "--pin", "--exec", "--", sys.executable, os.path.abspath(__file__), "--inner",
           plan_path]
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_MCA_mpi_yield_when_idle="1")
    cs.log(f"{len(runs)} training runs on the emulated 2 x {args.ranks_per_node} cluster ({args.bandwidth})")
    if subprocess.run(cmd, env=env).returncode:
        sys.exit("overlap_study: the measurements on the emulated cluster failed (see above)")
    with open(plan["result"]) as f:
        res = json.load(f)
    report(args, points, res, warmup, base, time.monotonic() - t0, repeats, steps, cores, ranks, slow)


def report(args, points, res, warmup, base, wall, repeats, steps, cores, ranks, slow):
    by = {}  # (point, overlap) -> list of (round, step ms, zero ms dict, losses)
    for run in res["runs"]:
        w = run["steps_data"][warmup:] or run["steps_data"]
        by.setdefault((run["point"], run["overlap"]), []).append(
            (run["round"], statistics.median(x["step_ms"] for x in w), zero_ms(run["profile_data"]),
             [x["loss"] for x in run["steps_data"]]))
    rows, csv, bad = [], ["B,layout,G,off_step_ms,on_step_ms,gain,zero_off_ms,zero_on_ms,hidden_pct,gather_hidden_pct,"
                          "reduce_hidden_pct,a2a_off_ms,a2a_on_ms,pred_off_ms,pred_on_ms,pred_on_adj_ms,pred_err_pct"], []
    for pi, pt in enumerate(points):
        off, on = by[(pi, "off")], by[(pi, "on")]
        for a in off + on:
            if a[3] != off[0][3]:
                bad.append(f"B={pt['B']} {pt['layout']}: losses {a[3]} vs {off[0][3]}")
        m_off, m_on = statistics.median(a[1] for a in off), statistics.median(a[1] for a in on)
        ratios = [a[1] / b[1] for a in off for b in on if a[0] == b[0]]
        gain = statistics.median(ratios)
        z = {o: {k: statistics.median(a[2][k] for a in by[(pi, o)]) for k in COLL_KINDS} for o in ("off", "on")}
        zoff, zon = (sum(z[o][k] for k in ZERO_KINDS) for o in ("off", "on"))
        aoff, aon = z["off"]["all_to_all"], z["on"]["all_to_all"]
        hid = 100 * (1 - zon / zoff) if zoff > 0 else 0
        ghid = 100 * (1 - z["on"]["all_gather"] / z["off"]["all_gather"]) if z["off"]["all_gather"] > 0 else 0
        roff = z["off"]["reduce_scatter"] + z["off"]["all_reduce"]
        rhid = 100 * (1 - (z["on"]["reduce_scatter"] + z["on"]["all_reduce"]) / roff) if roff > 0 else 0
        p = pt["cfg"]
        err = 100 * (p["on"]["pred_adj"]["step_ms"] - m_on) / m_on
        rows.append(f"| {pt['B']} | {pt['layout']} | {pt['G']} | {m_off:.0f} | {m_on:.0f} | **{gain:.2f}×** | "
                    f"{zoff:.1f} | {zon:.1f} | **{hid:.0f}%** | {ghid:.0f}% | {rhid:.0f}% | {aoff:.1f} → {aon:.1f} | "
                    f"{p['off']['pred']['step_ms']:.0f} → {p['on']['pred']['step_ms']:.0f} | "
                    f"{p['off']['pred_adj']['step_ms']:.0f} → {p['on']['pred_adj']['step_ms']:.0f} | {err:+.0f}% |")
        csv.append(f"{pt['B']},{pt['layout']},{pt['G']},{m_off:.3f},{m_on:.3f},{gain:.4f},{zoff:.3f},{zon:.3f},"
                   f"{hid:.1f},{ghid:.1f},{rhid:.1f},{aoff:.3f},{aon:.3f},{p['off']['pred']['step_ms']:.3f},{p['on']['pred']['step_ms']:.3f},"
                   f"{p['on']['pred_adj']['step_ms']:.3f},{err:.1f}")
    load = os.getloadavg()
    md = [f"# ZeRO-3 collectives under compute (train.overlap) on an emulated 2 × {args.ranks_per_node} cluster "
          f"({args.bandwidth} between nodes)", "",
          f"`{' '.join(['bench/overlap_study.py'] + sys.argv[1:])}` — {wall:.0f} s, {repeats} rounds of {steps} "
          f"steps (first {warmup} left out), medians; model bench/cluster_model.basp, overrides: `{' '.join(base)}`; "
          f"{cores} cores for the {ranks} ranks; load average at the end {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}.", "",
          "Step times are rank 0's (`--metrics`).  **ZeRO ms** is the time per step the rank spends in ZeRO's "
          "collectives (all_gather, reduce_scatter, all_reduce; `--profile`): for a blocking collective the call, "
          "for a started one the start and wait calls — what is left exposed.  **Hidden** = 1 − on / off.  The "
          "gain is the median of per-round off / on ratios.  **a2a ms** is the same for the sequence-parallel "
          "exchanges (all_to_all), which overlap on splits where the cost model finds it pays.  **Predicted** is the cost model's two-stream step "
          f"(as specified, then with the compute slowed {slow:g}× for {ranks} ranks on {cores} cores); the "
          "error is the adjusted "
          "prediction's against the measured step with overlap on.", "",
          "| B | layout | G | step ms off | step ms on | gain | ZeRO ms off | ZeRO ms on | hidden | gathers "
          "hidden | reductions hidden | a2a ms off → on | predicted ms off → on | adjusted off → on | error |",
          "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"] + rows + [
          "", "Losses with overlap on equal overlap off at every step, bit for bit, in every round: "
          + ("yes." if not bad else "NO:\n\n    " + "\n    ".join(bad[:10]))]
    os.makedirs(args.out, exist_ok=True)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(args.out, "results.csv"), "w") as f:
        f.write("\n".join(csv) + "\n")
    with open(os.path.join(args.out, "raw.json"), "w") as f:
        json.dump({"points": points, "runs": [{k: v for k, v in r.items() if k != "profile_data"}
                                              for r in res["runs"]]}, f, indent=1)
    print("\n".join(md))
    if bad:
        sys.exit("overlap_study: overlap changed the losses")


if __name__ == "__main__":
    main()
