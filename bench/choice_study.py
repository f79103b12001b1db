#!/usr/bin/env python3
"""choice_study.py — the layout choice, proven: every candidate measured.

    bench/choice_study.py [--build DIR] [--quick] [--out DIR] [--repeats R]
                          [--steps N] [--warmup W] [--configs A,B,...] [--dry-run]

One command, as root, from an existing build directory (BUILD/baspc,
BUILD/data/mkcorpus).  For each configuration of bench/cluster_model.basp —
micro-batch 2, 4, 8 at 1024 tokens and 2 Gbit/s between the nodes;
micro-batch 2 at 512 and 2048 tokens; micro-batch 2 × 1024 at 1 and at
8 Gbit/s; micro-batch 4 × 1024 with the ranks placed round-robin over the
nodes (`mesh.placement=round_robin`, launched with `mpirun --map-by node`)
— it

  1. asks the planner (`baspc --plan --json`, device cpu_calibrated, the
     spec's inter-node link set to the emulated bandwidth, sequence, a2a and
     batch_aware auto) for its candidates and its choice, and compiles one
     binary for every candidate that is legal, fits, keeps the global batch
     and is available — from the candidate's `set` overrides — plus the
     planner's pick a second time
     as a control; each binary's lowered layout (the IR's config lines) is
     checked against the candidate;
  2. brings up the emulated cluster (bench/cluster: 2 nodes × 4 ranks, each
     node pinned to a CPU of its own, the links shaped to the
     configuration's bandwidth) once per distinct bandwidth, and trains
     every binary for --steps steps, REPEATS rounds, rotating the order each
     round, with cluster_study.py's in-cluster runner;
  3. checks that every candidate's losses equal the first candidate's at
     every step within tests/train/equiv.py's LOSS_RTOL (same seed, same
     batches), and writes results.md, results.csv and raw.json to --out
     (default bench/results/choice/): per configuration every candidate's
     predicted and measured step, the prediction's error, the model's
     within-error mark, the pick and the measured fastest; and a summary of
     the pick's measured step against the best (pass: at most 1.05×) with
     the control's spread, |a − b| / mean of the pick's two binaries'
     figures (flagged above 3%: the noise floor of that configuration).

Figures are rank 0's step times from --metrics: a run's figure is the median
over its steps after the warm-up, a candidate's the least of its rounds'
figures.  Other processes on the shared cores only ever add time, and a
burst of them can cover a whole run, which no median over that run's steps
removes; the least-disturbed round is the closest to the undisturbed step
(with 3 rounds the medians of identical binaries differed by up to 14%,
their minimums by at most 4%).  A missed pick is a finding, not a failure:
the exit status is 0 unless a run fails or losses differ.  --dry-run
compiles everything and prints the plan without bringing the cluster up.
Standard library only.
"""

import argparse
import json
import os
import re
import statistics
import sys
import time
import types

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import cluster_study as cs  # noqa: E402  (sh, log, study_setup, study_run, loss_rtol, ...)

CONFIGS = [  # (name, inter-node bandwidth, --set overrides, extra mpirun arguments)
    ("b2_s1024", "2gbit", ["train.micro_batch=2", "train.seq_len=1024"], []),
    ("b4_s1024", "2gbit", ["train.micro_batch=4", "train.seq_len=1024"], []),
    ("b8_s1024", "2gbit", ["train.micro_batch=8", "train.seq_len=1024"], []),
    ("b2_s512", "2gbit", ["train.micro_batch=2", "train.seq_len=512"], []),
    ("b2_s2048", "2gbit", ["train.micro_batch=2", "train.seq_len=2048"], []),
    ("b2_s1024_1g", "1gbit", ["train.micro_batch=2", "train.seq_len=1024"], []),
    ("b2_s1024_8g", "8gbit", ["train.micro_batch=2", "train.seq_len=1024"], []),
    ("b4_s1024_rr", "2gbit", ["train.micro_batch=4", "train.seq_len=1024", "mesh.placement=round_robin"],
     ["--map-by", "node"]),
]
PASS_RATIO = 1.05      # the pick passes when its measured step is at most this × the best's
CONTROL_SPREAD = 0.03  # a control spread above this is flagged
NAME_RE = re.compile(r"^(?:batch-aware G=(\d+))?\s*(ulysses|ring|hybrid)?\s*(?:R=(\d+))?(\+two_level)?$")


def sets_args(sets):
    return [a for s in sets for a in ("--set", s)]


def slug(name):
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def bits(bandwidth):
    m = re.fullmatch(r"([0-9.]+)([kmg]?)bit", bandwidth.lower())
    return float(m.group(1)) * {"": 1, "k": 1e3, "m": 1e6, "g": 1e9}[m.group(2)]


# ---- candidates ---------------------------------------------------------------

def parse_name(name):
    """The layout a candidate's name describes: {sequence, R, a2a, G}, or
    None for a name of another form ("ulysses", "ulysses+two_level", "ring",
    "hybrid R=2", "batch-aware G=2", "batch-aware G=2 ring", "batch-aware G=2
    hybrid R=2", "batch-aware G=2 ulysses+two_level")."""
    m = NAME_RE.match(name.strip())
    if not m or not (m.group(1) or m.group(2)):
        return None
    seq = m.group(2) or "ulysses"
    if (m.group(3) is not None) != (seq == "hybrid") or (m.group(4) and seq != "ulysses"):
        return None
    return {"sequence": seq, "R": int(m.group(3) or 0), "a2a": "two_level" if m.group(4) else "flat",
            "G": int(m.group(1) or 1)}


def candidate_sets(c):
    """The --set overrides that build candidate c: baspc's `set` array."""
    if not (isinstance(c.get("set"), list) and c["set"]):
        sys.exit(f"choice_study: baspc --plan --json gives no `set` for candidate '{c['name']}': rebuild baspc")
    return [str(s) for s in c["set"]]


def lowered(baspc, spec, sets):
    """The layout the pipeline lowers to, from the IR's config lines."""
    ir = cs.sh([baspc, spec, "-q", "--emit=ir"] + sets_args(sets)).stdout
    cfg = dict(re.findall(r"^config (\S+) = (\S+)", ir, re.M))
    return {k: cfg.get(k) for k in ("sequence", "ring_degree", "a2a", "sp_size", "batch_groups")}


def check_lowered(c, low):
    """A mismatch between candidate C (name, groups, group_size) and the
    lowered layout LOW, as a message; None when they agree."""
    want = {"batch_groups": str(c["groups"]), "sp_size": str(c["group_size"])}
    lay = parse_name(c["name"])
    if lay:
        want.update(sequence=lay["sequence"], a2a=lay["a2a"])
        if lay["sequence"] == "hybrid":
            want["ring_degree"] = str(lay["R"])
    bad = [f"{k} {low.get(k)} (want {v})" for k, v in want.items() if low.get(k) != v]
    return f"{c['name']}: lowered to " + ", ".join(bad) if bad else None


def planner(baspc, spec, sets):
    """--plan --json with every layout choice left to the planner."""
    auto = ["layout.sequence=auto", "layout.a2a=auto", "layout.batch_aware=auto"]
    r = cs.sh([baspc, spec, "-q", "--plan", "--json"] + sets_args(sets + auto))
    return json.loads(r.stdout)


def prepare_config(st, name, bandwidth, sets, mpirun_args):
    """Plans, compiles and checks one configuration's candidates and control."""
    baspc, spec = st["baspc"], st["spec"]
    base = [f"mesh.inter.bandwidth={bits(bandwidth) / 1e6:g}Mb/s", f"mesh.cores_per_node={cs.cores_per_node(2)}"] + (
        ["mesh.device=cpu_calibrated"] if st["known"] else []) + sets
    p = planner(baspc, spec, base)
    keep = [c for c in p["candidates"] if all(c.get(k) for k in ("legal", "fits", "keeps_batch", "available"))]
    wdir = os.path.join(st["workdir"], name)
    os.makedirs(wdir, exist_ok=True)
    cands = []
    for c in keep:
        csets = candidate_sets(c)
        bad = check_lowered(c, lowered(baspc, spec, base + csets))
        if bad:
            sys.exit(f"choice_study: {name}: {bad} (overrides {csets})")
        cands.append({"name": c["name"], "sets": csets, "G": c["groups"], "K": c["group_size"],
                      "pred_ms": c["step_ms"], "within_error": bool(c.get("within_error")),
                      "pick": c["name"] == p.get("chosen"), "control": False, "planner": c})
    pick = next((c for c in cands if c["pick"]), None)
    if pick:
        cands.append(dict(pick, name=pick["name"] + " (control)", pick=False, control=True))
    for c in cands:
        c["tag"] = slug(c["name"])  # the control's ends in _control
        c["binary"] = os.path.join(wdir, c["tag"])
        cs.sh([baspc, spec, "-q", "-o", c["binary"]] + sets_args(base + c["sets"]))
    auto_low = lowered(baspc, spec, base + ["layout.sequence=auto", "layout.a2a=auto", "layout.batch_aware=auto"])
    return {"name": name, "bandwidth": bandwidth, "sets": sets, "base": base, "mpirun_args": mpirun_args, "workdir": wdir,
            "chosen": p.get("chosen"), "why": p.get("why"), "model_error": p.get("model_error"),
            "auto_is_pick": bool(pick) and auto_low == lowered(baspc, spec, base + pick["sets"]),
            "dropped": [c["name"] for c in p["candidates"] if c not in keep], "candidates": cands}


# ---- the measurements ---------------------------------------------------------

def round_order(cands, r, repeats):
    """Round r's order: the control half the list away from the pick, the
    start moved on by len/repeats every round."""
    lst = [c for c in cands if not c["control"]]
    ctl = [c for c in cands if c["control"]]
    if ctl:
        at = next(i for i, c in enumerate(lst) if c["pick"])
        lst.insert((at + len(lst) // 2) % len(lst) + 1, ctl[0])
    k = (r * len(lst)) // repeats % len(lst)
    return lst[k:] + lst[:k]


def make_plan(st, cfgs, bandwidth, corpus):
    """The runs of every configuration at BANDWIDTH, in rounds (cs.inner)."""
    runs = []
    for r in range(st["repeats"]):
        for cfg in cfgs:
            for c in round_order(cfg["candidates"], r, st["repeats"]):
                runs.append({"tag": f"r{r + 1} {cfg['name']} {c['tag']}", "key": [cfg["name"], c["name"]],
                             "round": r, "steps": st["steps"], "binary": c["binary"],
                             "mpirun_args": cfg["mpirun_args"],
                             "metrics": os.path.join(cfg["workdir"], c["tag"] + ".jsonl"),
                             "profile": os.path.join(cfg["workdir"], c["tag"] + ".profile.json")})
    return {"ranks": 8, "corpus": corpus, "warmup": st["warmup"], "workdir": st["workdir"], "runs": runs,
            "a2a": None, "result": os.path.join(st["workdir"], f"result_{bandwidth}.json")}


def print_plan(cfgs, plans):
    for cfg in cfgs:
        print(f"{cfg['name']}: {cfg['bandwidth']}, {' '.join(cfg['base'])}"
              + (f", mpirun {' '.join(cfg['mpirun_args'])}" if cfg["mpirun_args"] else "")
              + f"; planner's pick: {cfg['chosen']} (auto lowers to it: {'yes' if cfg['auto_is_pick'] else 'NO'})")
        for c in cfg["candidates"]:
            mark = "*" if c["pick"] else "~" if c["within_error"] else " "
            print(f"  {mark} {c['name']:36s} G={c['G']} K={c['K']}  predicted {c['pred_ms']:8.1f} ms  "
                  f"{' '.join(c['sets'])}")
        if cfg["dropped"]:
            print(f"    not run (illegal, does not fit, changes the batch or unavailable): {', '.join(cfg['dropped'])}")
    for bw, plan in plans.items():
        print(f"{bw}: {len(plan['runs'])} training runs, e.g. "
              f"{' | '.join(r['tag'] for r in plan['runs'][:3])} ...")


# ---- figures ------------------------------------------------------------------

def collect(results, warmup):
    """{config: {candidate: [per-round median step ms]}}, {config: [(candidate, round, losses)]}."""
    per, losses = {}, {}
    for res in results:
        for run in res["runs"]:
            cfg, name = run["key"]
            w = run["steps_data"][warmup:]
            per.setdefault(cfg, {}).setdefault(name, []).append(statistics.median(x["step_ms"] for x in w))
            losses.setdefault(cfg, []).append((name, run["round"], [x["loss"] for x in run["steps_data"]]))
    return per, losses


def loss_mismatches(cfg, runs, rtol):
    """Every run's losses against the first candidate's first run."""
    first = cfg["candidates"][0]["name"]
    ref = next(curve for name, _, curve in runs if name == first)
    bad = []
    for name, rnd, curve in runs:
        if len(curve) != len(ref):
            bad.append(f"{cfg['name']} {name} round {rnd + 1}: {len(curve)} steps, {first} {len(ref)}")
        for i, (a, b) in enumerate(zip(curve, ref)):
            if abs(a - b) > rtol * abs(b):
                bad.append(f"{cfg['name']} {name} round {rnd + 1} step {i + 1}: {a} vs {first}'s {b}")
    return bad


def analyse(cfg, per):
    """Adds measured figures to the candidates; returns the summary row."""
    for c in cfg["candidates"]:
        xs = per[c["name"]]
        c.update(rounds_ms=xs, meas_ms=min(xs), med_ms=statistics.median(xs), min_ms=min(xs), max_ms=max(xs))
        c["err_pct"] = 100 * (c["pred_ms"] - c["meas_ms"]) / c["meas_ms"]
    real = [c for c in cfg["candidates"] if not c["control"]]
    best = min(real, key=lambda c: c["meas_ms"])
    for rank, c in enumerate(sorted(real, key=lambda c: c["meas_ms"])):
        c["meas_rank"] = rank + 1
    for rank, c in enumerate(sorted(real, key=lambda c: c["pred_ms"])):
        c["pred_rank"] = rank + 1
    for c in cfg["candidates"]:
        c["best"], c["vs_best"] = c is best, c["meas_ms"] / best["meas_ms"]
    pick = next((c for c in real if c["pick"]), None)
    ctl = next((c for c in cfg["candidates"] if c["control"]), None)
    row = {"config": cfg["name"], "bandwidth": cfg["bandwidth"], "pick": cfg["chosen"], "best": best["name"],
           "n": len(real), "ratio": None, "pass": False, "spread": None, "pick_rank": None,
           "best_marked": best["within_error"]}
    if pick:
        row.update({"ratio": pick["vs_best"], "pass": pick["vs_best"] <= PASS_RATIO, "pick_rank": pick["meas_rank"]})
    if pick and ctl:
        a, b = pick["meas_ms"], ctl["meas_ms"]
        row["spread"] = abs(a - b) / ((a + b) / 2)
    return row


# ---- the report ---------------------------------------------------------------

def config_table(cfg):
    L = [f"### {cfg['name']}: {cfg['bandwidth']} between nodes, "
         f"`{' '.join(cfg['sets'])}`"
         + (f", launched `mpirun {' '.join(cfg['mpirun_args'])}`" if cfg["mpirun_args"] else ""), "",
         f"Planner's pick: **{cfg['chosen']}** — {cfg['why']}.  Compiling with `sequence`, `a2a` and "
         f"`batch_aware` `auto` lowers to the pick: {'yes' if cfg['auto_is_pick'] else '**no**'}."
         + (f"  Not run: {', '.join(cfg['dropped'])}." if cfg["dropped"] else ""), "",
         "| | candidate | G×K | predicted ms | measured ms (median, max) | error | within model error | "
         "rank predicted / measured | vs best |",
         "|---|---|---|---:|---:|---:|---|---|---:|"]
    for c in cfg["candidates"]:
        mark = " ".join(m for m, on in (("*", c["pick"]), ("best", c["best"])) if on)
        rank = "control" if c["control"] else f"{c['pred_rank']} / {c['meas_rank']}"
        L.append(f"| {mark} | {c['name']} | {c['G']}×{c['K']} | {c['pred_ms']:.1f} | {c['meas_ms']:.1f} "
                 f"({c['med_ms']:.1f}, {c['max_ms']:.1f}) | {c['err_pct']:+.0f}% | {'~' if c['within_error'] else ''} "
                 f"| {rank} | {c['vs_best']:.2f}× |")
    return L + [""]


def summary_table(rows):
    L = ["| configuration | bandwidth | planner's pick | measured best | pick / best | pass (≤ "
         f"{PASS_RATIO:.2f}) | pick's measured rank | best marked ~ | control spread |",
         "|---|---|---|---|---:|---|---|---|---:|"]
    for r in rows:
        ratio = f"{r['ratio']:.3f}×" if r["ratio"] is not None else "—"
        spread = "—" if r["spread"] is None else f"{100 * r['spread']:.1f}%" + (
            " **(> 3%)**" if r["spread"] > CONTROL_SPREAD else "")
        rank = f"{r['pick_rank']} of {r['n']}" if r["pick_rank"] else "—"
        L.append(f"| {r['config']} | {r['bandwidth']} | {r['pick']} | {r['best']} | {ratio} | "
                 f"{'pass' if r['pass'] else '**miss**'} | {rank} | "
                 f"{'—' if r['best'] == r['pick'] else 'yes' if r['best_marked'] else 'no'} | {spread} |")
    return L


def verdict(rows):
    """The one-line summary."""
    ok = [r for r in rows if r["pass"]]
    miss = [f"{r['config']} ({r['pick']}: {r['ratio']:.2f}× {r['best']})" if r["ratio"] else f"{r['config']} (no pick)"
            for r in rows if not r["pass"]]
    noisy = [r["config"] for r in rows if r["spread"] is not None and r["spread"] > CONTROL_SPREAD]
    return (f"choice_study: the planner's pick is within {100 * (PASS_RATIO - 1):.0f}% of the measured best in "
            f"{len(ok)} of {len(rows)} configurations" + (f"; misses: {', '.join(miss)}" if miss else "")
            + (f"; control spread above {100 * CONTROL_SPREAD:.0f}% in {', '.join(noisy)}" if noisy else ""))


def report(st, cfgs, rows, machine, bad, rtol, wall, command):
    L = ["# The layout choice, proven: every candidate on the emulated 2 × 4 cluster", "",
         f"Command: `{command}` ({wall / 60:.1f} min).  Spec `{os.path.relpath(st['spec'], ROOT)}`, device "
         f"`{'cpu_calibrated' if st['known'] else 'as in the spec'}`, the spec's inter-node link set to the "
         f"emulated bandwidth; {st['steps']} steps per run, the first {st['warmup']} left out; the least of "
         f"{st['repeats']} rounds in rotating order.", "",
         f"Machine: {machine['nproc']} cores ({machine['cpu']}), {machine['openmpi']}, Linux {machine['kernel']}; "
         f"load average {machine['load_at_start']} at the start, {machine['load_at_end']} at the end (the study's "
         f"own 8 ranks included).  Emulated "
         f"nodes: {', '.join(machine['hosts'])}; {machine['shaping']}; {machine['cpus']}.", "",
         "## Summary", "",
         f"The pick passes when its measured step is at most {PASS_RATIO:.2f}× the fastest candidate's.  "
         "The control is the pick compiled a second time and measured like any candidate; its spread "
         "(|a − b| / mean of the two figures) is the noise floor of the configuration, flagged above "
         f"{100 * CONTROL_SPREAD:.0f}%.", ""] + summary_table(rows) + ["", verdict(rows), ""]
    L += ["## Per configuration", "",
          "`*` the planner's pick, `best` the fastest measured, `~` predicted within the model's error "
          "(`model_error`) of the pick.  Predicted: the planner's step time (one core per rank); error = "
          "(predicted − measured) / measured.  Measured: the least over rounds of each run's median step "
          "(background load only adds time), the median and the largest over rounds in brackets.", ""]
    for cfg in cfgs:
        L += config_table(cfg)
    L += [f"Losses: every run of every candidate equals the configuration's first candidate step by step within "
          f"LOSS_RTOL = {rtol:g}: " + ("yes." if not bad else "**NO**:\n\n    " + "\n    ".join(bad[:10])), ""]
    return "\n".join(L)


def write_csv(path, cfgs):
    keys = ["config", "bandwidth", "candidate", "pick", "control", "best", "G", "K", "predicted_step_ms",
            "within_error", "measured_step_ms", "min_ms", "max_ms", "error_pct", "vs_best", "rounds_ms", "sets"]
    with open(path, "w") as f:
        f.write(",".join(keys) + "\n")
        for cfg in cfgs:
            for c in cfg["candidates"]:
                vals = [cfg["name"], cfg["bandwidth"], c["name"], int(c["pick"]), int(c["control"]), int(c["best"]),
                        c["G"], c["K"], f"{c['pred_ms']:.3f}", int(c["within_error"]), f"{c['meas_ms']:.3f}",
                        f"{c['min_ms']:.3f}", f"{c['max_ms']:.3f}", f"{c['err_pct']:.1f}", f"{c['vs_best']:.4f}",
                        " ".join(f"{x:.3f}" for x in c["rounds_ms"]), " ".join(c["sets"])]
                f.write(",".join(f'"{v}"' if isinstance(v, str) and ("," in v or " " in v) else str(v)
                                 for v in vals) + "\n")


# ---- main ---------------------------------------------------------------------

def parse_args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory (default: build)")
    ap.add_argument("--spec", default=os.path.join(HERE, "cluster_model.basp"))
    ap.add_argument("--quick", action="store_true", help="2 rounds of 4 steps")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "choice"), help="results directory")
    ap.add_argument("--repeats", type=int, help="rounds (default 5; --quick 2)")
    ap.add_argument("--steps", type=int, help="steps per run (default 8; --quick 4)")
    ap.add_argument("--warmup", type=int, help="leading steps left out (default 2; --quick 1)")
    ap.add_argument("--configs", help="comma-separated subset of: " + ", ".join(c[0] for c in CONFIGS))
    ap.add_argument("--dry-run", action="store_true", help="compile and print the plan; no cluster, no results")
    args = ap.parse_args()
    if args.warmup is None:
        args.warmup = 1 if args.quick else 2
    if args.repeats is not None and args.repeats < 1:
        ap.error("need --repeats >= 1")
    names = [c[0] for c in CONFIGS]
    args.selected = names if not args.configs else [s.strip() for s in args.configs.split(",") if s.strip()]
    unknown = [s for s in args.selected if s not in names]
    if unknown or not args.selected:
        ap.error(f"unknown configuration(s) {', '.join(unknown) or '(none given)'}; known: {', '.join(names)}")
    args.out = os.path.abspath(args.out)
    args.bandwidth = next(c[1] for c in CONFIGS if c[0] == args.selected[0])  # for study_setup's check
    return ap, args


def main():
    ap, args = parse_args()
    st = cs.study_setup(ap, args, "choice_study", 5, 8)
    t0 = time.monotonic()
    corpus = os.path.join(st["workdir"], "corpus.bin")
    if not os.path.exists(corpus):
        cs.sh([st["mkcorpus"], corpus])
    cfgs = []
    for name, bw, sets, margs in (c for c in CONFIGS if c[0] in args.selected):
        cfgs.append(prepare_config(st, name, bw, sets, margs))
        cs.log(f"{name}: {len(cfgs[-1]['candidates'])} binaries, the pick {cfgs[-1]['chosen']}")
    bws = list(dict.fromkeys(c["bandwidth"] for c in cfgs))
    plans = {bw: make_plan(st, [c for c in cfgs if c["bandwidth"] == bw], bw, corpus) for bw in bws}
    if args.dry_run:
        print_plan(cfgs, plans)
        return
    machine = cs.machine_description(types.SimpleNamespace(bandwidth=" / ".join(bws), no_pin=False), [])
    results = [cs.study_run(plans[bw], bw, "choice", "choice_study") for bw in bws]
    with open("/proc/loadavg") as f:
        machine["load_at_end"] = " ".join(f.read().split()[:3])
    machine["hosts"] = results[0]["hosts"]
    finish(st, args, cfgs, results, machine, time.monotonic() - t0)


def finish(st, args, cfgs, results, machine, wall):
    per, losses = collect(results, st["warmup"])
    rtol, bad = cs.loss_rtol(), []
    rows = []
    for cfg in cfgs:
        bad += loss_mismatches(cfg, losses[cfg["name"]], rtol)
        rows.append(analyse(cfg, per[cfg["name"]]))
    command = " ".join(["bench/choice_study.py"] + sys.argv[1:])
    md = report(st, cfgs, rows, machine, bad, rtol, wall, command)
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write(md + "\n")
    write_csv(os.path.join(args.out, "results.csv"), cfgs)
    with open(os.path.join(args.out, "raw.json"), "w") as f:
        json.dump({"command": command, "machine": machine, "repeats": st["repeats"], "steps": st["steps"],
                   "warmup": st["warmup"], "configs": cfgs, "summary": rows, "loss_mismatches": bad,
                   "wall_s": wall}, f, indent=1)
    print(md)
    cs.log(f"results in {args.out} ({wall:.0f} s)")
    print(verdict(rows))
    if bad:
        sys.exit("choice_study: losses differ beyond LOSS_RTOL:\n  " + "\n  ".join(bad[:10]))


if __name__ == "__main__":
    main()
