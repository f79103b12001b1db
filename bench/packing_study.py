#!/usr/bin/env python3
"""packing_study.py — packed documents on an emulated 2 × 4 cluster: Ulysses,
batch-aware with sequential packing, batch-aware with balanced packing and
batch_aware dynamic (with --micro-batch 1, where no static batch-aware layout
is legal: Ulysses, ring, Ulysses x Ring R=2 and batch_aware dynamic).

    bench/packing_study.py [--build DIR] [--quick] [--out DIR] [--bandwidth 2gbit]
                           [--repeats R] [--steps N] [--warmup W] [--seq-len S] [--micro-batch B]
                           [--mix dclm|L:P,...]

--mix draws the documents' lengths from a histogram instead of the stand-in
below; `dclm` is DCLM-Baseline's (DCLM_MIX).  bench/results/dynamic/ holds
its runs (docs/dynamic.md, "Measured").

One command, as root, from an existing build directory (BUILD/baspc,
BUILD/data/mkcorpus).  The data is documents of a long tail: the length mix
of tests/train/mkdocs.py scaled by 10 (60% of documents 40–240 tokens, 30%
240–800, 10% 800–4000, log-uniform within each band; about half the tokens
are in the longest band), text from mkcorpus, each ended by the end-of-text
token 0.  It is a stand-in with the shape of a pretraining corpus, not a
measured one: many short documents and a few long ones that hold most of the
attention work.  With rows of 4096 a row holding two 3000-token documents
costs about 10x the attention of a row of short ones.

For bench/cluster_model.basp (--micro-batch rows, default 4, of --seq-len
tokens, default 4096) it

  1. compiles three binaries: Ulysses over all 8 ranks (G = 1, sequential
     packing), batch-aware G = 2 with sequential packing (documents back to
     back in draw order, cut at row ends) and batch-aware G = 2 with
     balanced packing (the same pieces laid out again longest first into the
     row of least expected work, the rows dealt to the groups by cost), and
     records the cost model's
     predictions for each (`baspc --plan --json --doc-lengths DATA`);
  2. trains each on the emulated cluster (bench/cluster: 2 network
     namespaces, the inter-node link shaped to --bandwidth) for --steps
     steps, --repeats rounds in rotating order; every binary draws the same
     documents at the same step (same seed), so step times pair up;
  3. writes results.md, results.csv and raw.json to --out (default
     bench/results/packing/): mean step times (the same documents at each
     step in every configuration; median over rounds), the mean group imbalance
     the runtime logged, the predictions beside them, and checks that the
     two sequential runs have equal losses (same rows: equiv.py's LOSS_RTOL).

Predictions are adjusted like strategy_study.py's: the model's compute
times 8 ranks over the cores they share, plus its communication.
Standard library only.
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
import cluster_study as cs  # noqa: E402

# DCLM-Baseline's sequence lengths after Dataset Decomposition (Pouransari et
# al., NeurIPS 2024, arXiv 2405.13226; the README of
# github.com/apple/ml-dataset-decomposition, "Step 4": sequences per bucket of
# a 34.5B-token DCLM-Baseline subset): the share of sequences of 256, 512, 1K,
# 2K, 4K and 8K tokens (36.8, 31.0, 19.2, 8.2, 3.3, 1.5%; of tokens 10.8,
# 18.2, 22.5, 19.2, 15.7, 13.7%).  A published corpus's histogram, up to 8K.
DCLM_MIX = "256:0.368,512:0.310,1024:0.192,2048:0.082,4096:0.033,8192:0.015"

CONFIGS = [  # (name, planner candidate, packing index, --set overrides)
    ("ulysses", "ulysses", 0, ["layout.batch_aware=off", "train.packing=sequential"]),
    ("batch-aware G=2, sequential", "batch-aware G=2", 0, ["layout.batch_aware=groups 2", "train.packing=sequential"]),
    ("batch-aware G=2, balanced", "batch-aware G=2", 1, ["layout.batch_aware=groups 2", "train.packing=balanced"]),
    ("batch-aware dynamic", "batch-aware dynamic", 1, ["layout.batch_aware=dynamic"]),
]
# micro_batch 1: no static batch-aware layout is legal; the static
# layouts left are Ulysses, ring and Ulysses x Ring over all 8 ranks.
CONFIGS_B1 = [
    ("ulysses", "ulysses", 1, ["layout.batch_aware=off"]),
    ("ring", "ring", 1, ["layout.batch_aware=off", "layout.sequence=ring"]),
    ("hybrid R=2", "hybrid R=2", 1, ["layout.batch_aware=off", "layout.sequence=hybrid", "layout.ring_degree=2"]),
    ("batch-aware dynamic", "batch-aware dynamic", 1, ["layout.batch_aware=dynamic"]),
]


def sets_args(sets):
    return [a for s in sets for a in ("--set", s)]


def predictions(baspc, spec, base, data):
    """The planner's candidates with packed documents of data's lengths."""
    r = cs.sh([baspc, spec, "-q", "--plan", "--json", "--doc-lengths", data] + sets_args(base), check=False)
    try:
        cands = {c["name"]: c for c in json.loads(r.stdout)["candidates"]}
        # batch_aware dynamic: the row of every legal group size (the binary's default set)
        dyn = [c for c in cands.values() if c.get("dynamic")]
        if dyn:
            cands["batch-aware dynamic"] = dyn[0]
        return cands
    except (ValueError, KeyError):
        sys.exit(f"packing_study: baspc --plan failed:\n{r.stderr[-2000:]}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--spec", default=os.path.join(HERE, "cluster_model.basp"))
    ap.add_argument("--quick", action="store_true", help="2 rounds of 4 steps")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "packing"))
    ap.add_argument("--bandwidth", default="2gbit")
    ap.add_argument("--repeats", type=int)
    ap.add_argument("--steps", type=int)
    ap.add_argument("--warmup", type=int)
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--micro-batch", type=int, default=4, help="rows per step (G = 2 groups of B/2 rows)")
    ap.add_argument("--mix", default="", help="document lengths and probabilities, L:P,... (tests/train/mkdocs.py "
                    "--mix; default: its long tail scaled by 10); --mix dclm: DCLM-Baseline's histogram (below)")
    args = ap.parse_args()
    if args.mix == "dclm":
        args.mix = DCLM_MIX
    global CONFIGS
    if args.micro_batch == 1:
        CONFIGS = CONFIGS_B1
    st = cs.study_setup(ap, args, "packing_study", 3, 8)
    repeats, steps, warmup, bw, known = st["repeats"], st["steps"], st["warmup"], st["bw"], st["known"]
    baspc, mkcorpus, spec, workdir = st["baspc"], st["mkcorpus"], st["spec"], st["workdir"]
    base = [f"mesh.inter.bandwidth={bw / 1e6:g}Mb/s", f"train.micro_batch={args.micro_batch}",
            f"train.seq_len={args.seq_len}",
            "train.documents=on", "train.eot_token=0"] + (["mesh.device=cpu_calibrated"] if known else [])
    t0 = time.monotonic()

    tag = "docs_" + re.sub(r"[^0-9a-z]+", "_", args.mix)[:40] if args.mix else "docs"
    corpus, text, data = (os.path.join(workdir, f) for f in ("corpus.bin", "corpus.txt", tag + ".bin"))
    if not os.path.exists(data):
        if not os.path.exists(corpus):
            cs.sh([mkcorpus, corpus, text])
        mix = ["--mix", args.mix] if args.mix else ["--scale", "10"]
        cs.sh([sys.executable, os.path.join(ROOT, "tests", "train", "mkdocs.py"), text, data, "--tokens", "3000000"]
              + mix)
    cands = predictions(baspc, spec, base, data)
    cfg = {}
    for name, cand, k, sets in CONFIGS:
        tag = re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")
        binary = os.path.join(workdir, tag)
        cs.sh([baspc, spec, "-q", "-o", binary] + sets_args(base + sets))
        c = cands[cand]
        pred = c["step_ms_sequential"] if k == 0 else c["step_ms_balanced"]
        imb = c["imbalance_sequential"] if k == 0 else c["imbalance_balanced"]
        cfg[name] = {"tag": tag, "binary": binary, "pred_ms": pred, "pred_imbalance": imb,
                     "dense_ms": c["dense_step_ms"], "attention_ms": c["attention_ms"]}
        cs.log(f"{name:30s} predicted {pred:.1f} ms, imbalance {imb:.2f}")

    runs = []
    for r in range(repeats):
        order = CONFIGS[r % len(CONFIGS):] + CONFIGS[:r % len(CONFIGS)]
        for name, *_ in order:
            c = cfg[name]
            runs.append({"tag": f"r{r + 1} {c['tag']}", "key": [name], "round": r, "steps": steps,
                         "binary": c["binary"], "metrics": os.path.join(workdir, c["tag"] + ".jsonl"),
                         "profile": os.path.join(workdir, c["tag"] + ".profile.json")})
    plan = {"ranks": 8, "corpus": data, "warmup": warmup, "workdir": workdir, "runs": runs, "a2a": None,
            "result": os.path.join(workdir, "result.json")}
    res = cs.study_run(plan, args.bandwidth, "pack", "packing_study")
    report(args, cfg, res, warmup, base, time.monotonic() - t0, repeats, steps)


def report(args, cfg, res, warmup, base, wall, repeats, steps):
    # A step's time follows the documents it draws (a step holding an 8K
    # document costs several times one of short ones), and every
    # configuration draws the same documents at the same step: the mean over
    # the steps is the throughput, and pairs up across configurations.  The
    # median step would drop the dear steps and favour a layout that is
    # slow on exactly those.  Rounds differ only by noise: their median.
    per, med, step_ms, imb, losses = {}, {}, {}, {}, {}
    for run in res["runs"]:
        name = run["key"][0]
        w = run["steps_data"][warmup:]
        per.setdefault(name, []).append(statistics.mean(x["step_ms"] for x in w))
        med.setdefault(name, []).append(statistics.median(x["step_ms"] for x in w))
        step_ms.setdefault(name, []).append([round(x["step_ms"], 3) for x in w])
        imb.setdefault(name, []).extend(x["imbalance"] for x in w)
        losses.setdefault(name, []).append([x["loss"] for x in run["steps_data"]])
    # the static layouts drawing the same rows: Ulysses and the second one
    # (batch-aware sequential, or ring) must train to equal losses
    same = CONFIGS[1][0]
    rtol, bad = cs.loss_rtol(), []
    for i, (x, y) in enumerate(zip(losses[same][0], losses["ulysses"][0])):
        if abs(x - y) > rtol * abs(y):
            bad.append(f"step {i + 1}: {x} vs {y}")
    meas = {n: statistics.median(v) for n, v in per.items()}
    ref = meas["ulysses"]
    tokens = args.micro_batch * args.seq_len
    rows, csv = [], ["config,predicted_ms,measured_ms,min_ms,max_ms,median_step_ms,predicted_imbalance,"
                     "measured_imbalance,error_pct,tokens_per_s,vs_ulysses"]
    for name, *_ in CONFIGS:
        c, mm, md_ = cfg[name], meas[name], statistics.median(med[name])
        err = 100 * (c["pred_ms"] - mm) / mm
        mi = statistics.mean(imb[name])
        rows.append(f"| {name} | {c['pred_ms']:.1f} | {mm:.1f} ({min(per[name]):.1f}–{max(per[name]):.1f}) | "
                    f"{err:+.0f}% | {md_:.1f} | {c['pred_imbalance']:.2f} | {mi:.2f} | {1e3 * tokens / mm:.0f} | "
                    f"{ref / mm:.2f}x |")
        csv.append(f"{name},{c['pred_ms']:.3f},{mm:.3f},{min(per[name]):.3f},{max(per[name]):.3f},{md_:.3f},"
                   f"{c['pred_imbalance']:.4f},{mi:.4f},{err:.1f},{1e3 * tokens / mm:.1f},{ref / mm:.4f}")
    data = (f"documents of the lengths `{args.mix}` (tests/train/mkdocs.py --mix; when it is `dclm`: "
            "DCLM-Baseline's sequence-length histogram after Dataset Decomposition, arXiv 2405.13226)"
            if args.mix else "tests/train/mkdocs.py's long tail scaled by 10 (60% of documents 40–240 tokens, "
            "30% 240–800, 10% 800–4000, log-uniform within each band), a stand-in, not a measured corpus")
    md = [f"# Packed documents on an emulated 2 × 4 cluster ({args.bandwidth} between nodes)", "",
          f"`{' '.join(['bench/packing_study.py'] + sys.argv[1:])}` — {wall:.0f} s, {repeats} rounds of {steps} "
          f"steps (first {warmup} left out), the mean step of each round (every configuration draws the same "
          f"documents at each step: the mean is the throughput), then the median over rounds, the configurations "
          f"interleaved in rotating order; overrides: `{' '.join(base)}`.", "",
          f"Data: {data}.  Imbalance is the max over mean of the groups' predicted work per step, averaged over "
          "steps (the runtime's `imbalance` metric; the prediction's from 64 sampled steps).  The prediction is "
          "`baspc --plan --doc-lengths`' (the cost model counts the 8 ranks sharing the 2 cores: "
          "`cores_per_node`).", "",
          "| configuration | predicted step ms | measured mean step ms (range over rounds) | error | median step "
          "ms | predicted imbalance | measured imbalance | tokens/s | vs Ulysses |",
          "|---|---|---|---|---|---|---|---|---|"] + rows + [
          "", f"Ulysses and {same} train on the same rows; their losses are equal within LOSS_RTOL at every step: "
          + ("yes." if not bad else "NO:\n\n    " + "\n    ".join(bad[:10]))]
    with open(os.path.join(args.out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(args.out, "results.csv"), "w") as f:
        f.write("\n".join(csv) + "\n")
    with open(os.path.join(args.out, "raw.json"), "w") as f:
        json.dump({"cfg": cfg, "per_round_ms": per, "per_round_median_ms": med, "step_ms": step_ms}, f, indent=1)
    print("\n".join(md))
    if bad:
        sys.exit("packing_study: losses differ beyond LOSS_RTOL")


if __name__ == "__main__":
    main()
