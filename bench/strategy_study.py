#!/usr/bin/env python3
"""strategy_study.py — the layout strategies on an emulated 2 × 4 cluster.

    bench/strategy_study.py [--build DIR] [--quick] [--out DIR] [--bandwidth 2gbit]
                            [--repeats R] [--steps N] [--warmup W] [--seq-len S] [--kv-heads H]

One command, as root, from an existing build directory (BUILD/baspc,
BUILD/data/mkcorpus).  With micro-batch 1 no batch-aware split exists, so a
Ulysses group is all 8 ranks of both nodes (K = 8 > 4 devices per node): the
case batch-aware cannot keep inside a node.  For bench/cluster_model.basp
with Qwen2.5-3B's attention shape (--heads 16, --kv-heads 2: GQA 8:1, the
kv exchange fanning out 4 ways over 8 ranks; heads x head_dim kept at 512) it

  1. compiles one binary per strategy — flat Ulysses, Ulysses with the
     two-level all-to-all, Ulysses x Ring (hybrid, ring degree 2: Ulysses
     inside each node, the ring across), and ring attention over all 8 —
     and records, from the compiler, the bytes each rank sends per step over
     each link class (`--schedule --json`), the cost model's predicted step
     (the cost pass) and the planner's choice (`--plan --json` with
     `sequence auto` and `a2a auto`);
  2. brings up the emulated cluster (bench/cluster, inter-node links shaped
     to --bandwidth, each node pinned to a CPU of its own) and trains every
     binary for --steps steps, REPEATS rounds, rotating the order each
     round, with cluster_study.py's in-cluster runner;
  3. checks every strategy's losses against flat Ulysses (equiv.py's
     LOSS_RTOL) and writes results.md, results.csv and raw.json to --out
     (default bench/results/strategies/): per strategy the inter-node bytes,
     the prediction, the median measured step time, the prediction's error,
     and whether the planner's choice is within 10% of the fastest measured.

Figures are rank 0's step times from --metrics, medians over the steps after
the warm-up, then over rounds.  Standard library only.
"""

import argparse
import json
import os
import re
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import cluster_study as cs  # noqa: E402  (sh, log, loss_rtol, machine_description)

STRATEGIES = [  # (name, --set overrides)
    ("ulysses", ["layout.sequence=ulysses", "layout.a2a=flat"]),
    ("ulysses+two_level", ["layout.sequence=ulysses", "layout.a2a=two_level"]),
    ("hybrid R=2", ["layout.sequence=hybrid", "layout.ring_degree=2"]),
    ("ring", ["layout.sequence=ring"]),
]
COST_RE = re.compile(r"cost: step ([0-9.]+) ms \(compute ([0-9.]+) ms, communication ([0-9.]+) ms\)")


def sets_args(sets):
    return [a for s in sets for a in ("--set", s)]


def predict(baspc, spec, sets):
    """The cost pass's predicted step and compute ms (default pipeline + cost)."""
    r = cs.sh([baspc, spec, "--passes=" + pipeline(baspc) + ",cost", "--emit=ir", "-o", os.devnull]
              + sets_args(sets))
    m = COST_RE.search(r.stderr + r.stdout)
    if not m:
        sys.exit(f"strategy_study: no cost remark from baspc for {sets}:\n{r.stderr[-2000:]}")
    return {"step_ms": float(m.group(1)), "compute_ms": float(m.group(2)), "comm_ms": float(m.group(3))}


def pipeline(baspc):
    """The default pass pipeline, as baspc --help names it."""
    out = cs.sh([baspc, "--help"], check=False).stdout
    m = re.search(r"default pipeline\s*\n?\s*\(([a-z,\-]+)\)", out)
    return m.group(1) if m else "batch-aware,ulysses,ring,two-level,place,zero,fuse-loss,fuse-elem,fuse-rope,attention-lse,recompute"


def traffic(baspc, spec, sets):
    """Bytes per rank per step: (all communication, of which inter-node,
    the attention's exchanges (all-to-alls and ring blocks) across nodes)."""
    j = json.loads(cs.sh([baspc, spec, "-q", "--schedule", "--json"] + sets_args(sets)).stdout)
    lc = j.get("link_classes", {})
    intra, inter = lc.get("intra", {}).get("bytes_per_rank", 0), lc.get("inter", {}).get("bytes_per_rank", 0)
    attn = sum(c["inter_node_bytes_per_rank"] for c in j["collectives"]
               if c["op"] in ("all_to_all", "ring_attention", "ring_attention_bwd"))
    return intra + inter, inter, attn


def planner_choice(baspc, spec, sets):
    p = json.loads(cs.sh([baspc, spec, "-q", "--plan", "--json"] + sets_args(sets), check=False).stdout or "{}")
    return p.get("chosen"), p.get("candidates", [])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--spec", default=os.path.join(HERE, "cluster_model.basp"))
    ap.add_argument("--quick", action="store_true", help="2 rounds of 4 steps (about 2 minutes)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "strategies"))
    ap.add_argument("--bandwidth", default="2gbit")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--seq-len", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--kv-heads", type=int, default=2)
    args = ap.parse_args()
    st = cs.study_setup(ap, args, "strategy_study", 4, 6)
    repeats, steps, warmup, bw, known = st["repeats"], st["steps"], st["warmup"], st["bw"], st["known"]
    baspc, mkcorpus, spec, workdir = st["baspc"], st["mkcorpus"], st["spec"], st["workdir"]
    base = [f"mesh.inter.bandwidth={bw / 1e6:g}Mb/s", "train.micro_batch=1", f"train.seq_len={args.seq_len}",
            f"model.heads={args.heads}", f"model.head_dim={512 // args.heads}", f"model.kv_heads={args.kv_heads}",
            "layout.batch_aware=off"] + (["mesh.device=cpu_calibrated"] if known else [])
    t0 = time.monotonic()

    corpus = os.path.join(workdir, "corpus.bin")
    if not os.path.exists(corpus):
        cs.sh([mkcorpus, corpus])
    cfg = {}
    for name, sets in STRATEGIES:
        tag = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
        binary = os.path.join(workdir, tag)
        cs.sh([baspc, spec, "-q", "-o", binary] + sets_args(base + sets))
        total, inter, attn = traffic(baspc, spec, base + sets)
        pred = predict(baspc, spec, base + sets)
        # the one thing the model does not know here: 8 ranks share 2 cores
        # (cluster_study.py makes the same adjustment)
        pred["adj_ms"] = pred["compute_ms"] * 8 / (os.cpu_count() or 1) + pred["comm_ms"]
        cfg[name] = {"tag": tag, "binary": binary, "bytes": total, "inter_bytes": inter, "attn_inter_bytes": attn,
                     "pred": pred}
        cs.log(f"{name:20s} {attn / 2**20:8.2f} MiB/rank of attention traffic across nodes "
               f"({inter / 2**20:.2f} in all), predicted {cfg[name]['pred']['step_ms']:.1f} ms")
    chosen, cands = planner_choice(baspc, spec, [s for s in base if s != "layout.batch_aware=off"]
                                   + ["layout.sequence=auto", "layout.a2a=auto"])

    runs = []
    for r in range(repeats):
        order = STRATEGIES[r % len(STRATEGIES):] + STRATEGIES[:r % len(STRATEGIES)]
        for name, _ in order:
            c = cfg[name]
            runs.append({"tag": f"r{r + 1} {c['tag']}", "key": [name], "round": r, "steps": steps,
                         "binary": c["binary"], "metrics": os.path.join(workdir, c["tag"] + ".jsonl"),
                         "profile": os.path.join(workdir, c["tag"] + ".profile.json")})
    plan = {"ranks": 8, "corpus": corpus, "warmup": warmup, "workdir": workdir, "runs": runs, "a2a": None,
            "result": os.path.join(workdir, "result.json")}
    res = cs.study_run(plan, args.bandwidth, "strat", "strategy_study")
    report(args, cfg, res, warmup, chosen, cands, base, time.monotonic() - t0, repeats, steps)


def report(args, cfg, res, warmup, chosen, cands, base, wall, repeats, steps):
    per, losses = {}, {}
    for run in res["runs"]:
        name = run["key"][0]
        w = run["steps_data"][warmup:]
        per.setdefault(name, []).append(statistics.median(x["step_ms"] for x in w))
        losses.setdefault(name, []).append([x["loss"] for x in run["steps_data"]])
    rtol, bad = cs.loss_rtol(), []
    ref = losses["ulysses"][0]
    for name, curves in losses.items():
        for c in curves:
            for i, (a, b) in enumerate(zip(c, ref)):
                if abs(a - b) > rtol * abs(b):
                    bad.append(f"{name} step {i + 1}: {a} vs {b}")
    meas = {n: statistics.median(v) for n, v in per.items()}
    fastest = min(meas, key=meas.get)
    rows, csv = [], ["strategy,bytes_per_rank,inter_node_bytes_per_rank,attention_inter_node_bytes_per_rank,"
                     "predicted_step_ms,predicted_adjusted_ms,measured_step_ms,min_ms,max_ms,error_pct"]
    for name, _ in STRATEGIES:
        c, mm = cfg[name], meas[name]
        err = 100 * (c["pred"]["adj_ms"] - mm) / mm
        rows.append(f"| {name} | {c['bytes'] / 2**20:.2f} | {c['inter_bytes'] / 2**20:.2f} | "
                    f"{c['attn_inter_bytes'] / 2**20:.2f} | {c['pred']['step_ms']:.1f} | {c['pred']['adj_ms']:.1f} | "
                    f"{mm:.1f} ({min(per[name]):.1f}–{max(per[name]):.1f}) | "
                    f"{err:+.0f}% | {meas['ulysses'] / mm:.2f}x |")
        csv.append(f"{name},{c['bytes']:.0f},{c['inter_bytes']:.0f},{c['attn_inter_bytes']:.0f},"
                   f"{c['pred']['step_ms']:.3f},{c['pred']['adj_ms']:.3f},{mm:.3f},"
                   f"{min(per[name]):.3f},{max(per[name]):.3f},{err:.1f}")
    pick = next((n for n, _ in STRATEGIES if chosen and chosen.replace(" ", "") == n.replace(" ", "")), None)
    within = pick is not None and meas[pick] <= 1.10 * meas[fastest]
    md = [f"# Layout strategies on an emulated 2 × 4 cluster ({args.bandwidth} between nodes)", "",
          f"`{' '.join(['bench/strategy_study.py'] + sys.argv[1:])}` — {wall:.0f} s, {repeats} rounds of {steps} "
          f"steps (first {warmup} left out), medians; overrides: `{' '.join(base)}`.", "",
          "Micro-batch 1 leaves no batch-aware split, so every strategy works over one group of all 8 ranks "
          "across both nodes.  MiB are per rank and step (max over ranks, `--schedule --json`); the "
          "attention exchanges are the all-to-alls and the ring's kv blocks, the rest is the gradient "
          "all-reduce.  The prediction is the cost pass's; the next column multiplies its compute by the "
          f"{os.cpu_count()} cores' share of 8 ranks, as cluster_study.py does.  Error is that column's.", "",
          "| strategy | MiB/rank/step | across nodes | attention exchanges across nodes | predicted step ms | "
          "predicted, 8 ranks on the cores | measured step ms (range) | error | vs flat Ulysses |",
          "|---|---|---|---|---|---|---|---|---|"] + rows + [
          "", f"Fastest measured: **{fastest}**.  Planner's choice (`--plan`, sequence auto, a2a auto): "
          f"**{chosen}**" + (f", measured {meas[pick]:.1f} ms, within 10% of the fastest: **{'yes' if within else 'no'}**."
                             if pick else " (not one of the measured strategies)."),
          "", "Losses of every strategy equal flat Ulysses' within LOSS_RTOL at every step: "
          + ("yes." if not bad else "NO:\n\n    " + "\n    ".join(bad[:10]))]
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(args.out, "results.csv"), "w") as f:
        f.write("\n".join(csv) + "\n")
    with open(os.path.join(args.out, "raw.json"), "w") as f:
        json.dump({"cfg": cfg, "per_round_ms": per, "chosen": chosen, "candidates": cands}, f, indent=1)
    print("\n".join(md))
    if bad:
        sys.exit("strategy_study: losses differ beyond LOSS_RTOL")


if __name__ == "__main__":
    main()
