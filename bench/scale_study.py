#!/usr/bin/env python3
"""Scale study (simulation): predicted Ulysses vs batch-aware all-to-all and
step time from `baspc SPEC --plan --json`, for the six example models on
H100-SXM nodes of 8 GPUs (NVLink4 inside a node, one IB NDR 400 Gb/s link per
GPU between nodes), worlds 8..4096, micro-batch B 1..64, seq 8K..1M, ZeRO 3.

These are cost-model predictions, not measurements (no overlap of
communication with compute, uncalibrated for GPUs).

    bench/scale_study.py --baspc build-sc/baspc --out bench/scale [--full] [-j 2]

Writes OUT/scale.csv, OUT/scale.md and, when gnuplot is installed,
OUT/a2a_ratio_vs_B.png and OUT/step_speedup_vs_seq.png.  Python stdlib only.
"""
import argparse
import concurrent.futures as cf
import csv
import json
import os
import shutil
import subprocess
import sys
import time

MODELS = ["llama3_2_1b", "qwen1_5_1_8b", "llama3_2_3b", "qwen2_5_3b",
          "llama3_1_8b", "qwen3_8b"]
WORLDS = [8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096]
BATCHES = [1, 2, 4, 8, 16, 32, 64]
SEQS = [8192, 32768, 131072, 524288, 1048576]
SEQ_MODEL = "llama3_1_8b"          # the model swept across seq lengths
PER_NODE = 8

MESH = [  # H100-SXM node; links written out so the A100 example's own
          # explicit link lines are replaced by the nvlink4 / ib_ndr presets
    "mesh.device=h100_sxm",
    "mesh.intra.kind=nvlink4", "mesh.intra.bandwidth=450GB/s",
    "mesh.intra.latency=2us", "mesh.intra.efficiency=0.8",
    "mesh.inter.kind=ib_ndr", "mesh.inter.bandwidth=50GB/s",
    "mesh.inter.latency=5us", "mesh.inter.efficiency=0.9",
    "train.zero=3",
]

FIELDS = ["model", "world", "nodes", "B", "seq",
          "ul_legal", "ul_fits", "ul_a2a_ms", "ul_step_ms", "ul_a2a_frac",
          "ul_mem_gib", "ul_why",
          "hier_a2a_ms",
          "ba_G", "ba_K", "ba_legal", "ba_fits", "ba_a2a_ms", "ba_step_ms",
          "ba_a2a_frac", "ba_mem_gib", "ba_spans_nodes",
          "a2a_ratio", "step_speedup", "chosen", "note"]


def seq_name(s):
    return f"{s // 1048576}M" if s % 1048576 == 0 else f"{s // 1024}K"


def grid(full):
    pts = set()
    for m in MODELS:                                   # all models at 32K
        for w in WORLDS:
            for b in BATCHES:
                if b <= w:
                    pts.add((m, w, b, 32768))
    seq_models = MODELS if full else [SEQ_MODEL]       # one model across seq
    for m in seq_models:
        for s in SEQS:
            for w in WORLDS:
                for b in BATCHES:
                    if b <= w:
                        pts.add((m, w, b, s))
    return sorted(pts, key=lambda p: (MODELS.index(p[0]), p[3], p[1], p[2]))


def run_one(baspc, root, pt):
    m, w, b, s = pt
    cmd = [baspc, os.path.join(root, "examples", m + ".basp"), "--plan", "--json",
           "--set", f"mesh.nodes={w // PER_NODE}",
           "--set", f"mesh.devices_per_node={PER_NODE}",
           "--set", f"train.micro_batch={b}", "--set", f"train.seq_len={s}"]
    for kv in MESH:
        cmd += ["--set", kv]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    # exit 1 when nothing fits (stdout still holds the plan) or when the
    # spec rules reject every layout (stdout empty, reason on stderr)
    try:
        plan = json.loads(p.stdout)
    except ValueError:
        err = [l for l in p.stderr.splitlines() if "error:" in l]
        return pt, None, (err[0].split("error:", 1)[1].strip() if err else "no plan")
    return pt, plan, None


def gib(x):
    return None if x is None else x / 2**30


def summarise(pt, plan, err):
    m, w, b, s = pt
    r = dict.fromkeys(FIELDS, "")
    r.update(model=m, world=w, nodes=w // PER_NODE, B=b, seq=s)
    if plan is None:
        r.update(ul_legal=0, ba_legal=0, ul_why=err, note="rejected: " + err)
        return r
    cands = {c["name"]: c for c in plan["candidates"]}
    ul = cands.get("ulysses")
    if ul:
        r.update(ul_legal=int(ul["legal"]), ul_fits=int(bool(ul["fits"])),
                 ul_a2a_ms=ul["a2a_ms"], ul_step_ms=ul["step_ms"],
                 ul_a2a_frac=ul["a2a_fraction"], ul_mem_gib=gib(ul["mem_bytes_per_rank"]),
                 ul_why="" if ul["legal"] else ul["reason"])
    hier = cands.get("ulysses-hier")
    if hier:
        r["hier_a2a_ms"] = hier["a2a_ms"]
    ba = [c for c in plan["candidates"]
          if c["name"].startswith("batch-aware") and c["legal"] and c["step_ms"] is not None]
    best = None
    if plan.get("chosen", "") and plan["chosen"].startswith("batch-aware"):
        best = cands[plan["chosen"]]
    elif ba:  # the planner chose Ulysses or nothing fits: best batch-aware by step
        fitting = [c for c in ba if c["fits"]]
        best = min(fitting or ba, key=lambda c: c["step_ms"])
    if best:
        K = best["group_size"]
        r.update(ba_G=best["groups"], ba_K=K, ba_legal=1, ba_fits=int(bool(best["fits"])),
                 ba_a2a_ms=best["a2a_ms"], ba_step_ms=best["step_ms"],
                 ba_a2a_frac=best["a2a_fraction"], ba_mem_gib=gib(best["mem_bytes_per_rank"]),
                 ba_spans_nodes=int(K > PER_NODE))
    else:
        r["ba_legal"] = 0
    r["chosen"] = plan.get("chosen") or "none"
    if ul and ul["legal"] and best:
        if best["a2a_ms"] > 0:
            r["a2a_ratio"] = ul["a2a_ms"] / best["a2a_ms"]
        else:
            r["a2a_ratio"] = "inf"
        r["step_speedup"] = ul["step_ms"] / best["step_ms"]
    notes = []
    if b == 1:
        notes.append("B=1: G=1 only, batch-aware = Ulysses")
    if ul and not ul["legal"]:
        notes.append("Ulysses illegal")
    if best and best["group_size"] == 1:
        notes.append("K=1: pure data parallel, no a2a")
    if not plan.get("chosen"):
        notes.append("nothing fits")
    r["note"] = "; ".join(notes)
    return r


def fmt(x, nd=1):
    if x in ("", None):
        return "-"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


def md_table(rows, cols, heads):
    out = ["| " + " | ".join(heads) + " |", "|" + "---|" * len(heads)]
    for r in rows:
        out.append("| " + " | ".join(c(r) if callable(c) else fmt(r[c]) for c in cols) + " |")
    return "\n".join(out)


def ratio_s(r):
    x = r["a2a_ratio"]
    return "∞ (K=1)" if x == "inf" else (f"{x:.1f}×" if x != "" else "-")


def speed_s(r):
    x = r["step_speedup"]
    return f"{x:.3f}" if x != "" else "-"


def fits_s(r, p):
    if r[p + "_legal"] in ("", 0):
        return "illegal"
    return "yes" if r[p + "_fits"] == 1 else "no"


def write_md(path, rows, elapsed, njobs, full):
    L = ["# Scale study: predicted Ulysses vs batch-aware (simulation)", "",
         "Cost-model predictions from `baspc --plan --json`, **not measurements**: the model "
         "assumes no overlap of communication with compute and is not calibrated for GPUs. "
         "Mesh: H100-SXM, 8 per node, NVLink4 (450 GB/s, 0.8) inside a node, IB NDR "
         "(50 GB/s per GPU, 0.9, 5 µs) between nodes; ZeRO 3, bf16.  "
         "Batch-aware = the planner's chosen batch-aware layout (or, when the planner chose "
         "Ulysses / nothing fits, the batch-aware layout with the lowest predicted step).  "
         f"{len(rows)} plans, {elapsed:.0f} s with {njobs} process(es)"
         f"{' (--full)' if full else ''}.", ""]
    # 1. all models at 32K, worlds where Ulysses is legal
    L += ["## 1. All models, seq 32K: all-to-all ratio and step speedup", "",
          "Only worlds where Ulysses is legal (N divides heads) can be compared; larger "
          "worlds are in section 2.", ""]
    sel = [r for r in rows if r["seq"] == 32768 and r["ul_legal"] == 1]
    L.append(md_table(sel,
                      ["model", "world", "B", "ul_a2a_ms", "ba_G", "ba_K", "ba_a2a_ms",
                       ratio_s, "ul_step_ms", "ba_step_ms", speed_s,
                       lambda r: fits_s(r, "ul"), lambda r: fits_s(r, "ba")],
                      ["model", "N", "B", "Ulysses a2a ms", "G", "K", "BA a2a ms",
                       "a2a ratio", "Ulysses step ms", "BA step ms", "step speedup",
                       "Ulysses fits", "BA fits"]))
    L += ["", "## 2. Legality at scale, seq 32K", "",
          "Largest world at which each layout is legal (any B ≤ 64), and at each world the "
          "smallest B with a legal batch-aware layout.", ""]
    L.append("| model | Ulysses legal up to N | batch-aware legal up to N | "
             + " | ".join(f"N={w}: min B" for w in WORLDS) + " |")
    L.append("|" + "---|" * (3 + len(WORLDS)))
    for m in MODELS:
        mr = [r for r in rows if r["model"] == m and r["seq"] == 32768]
        ulmax = max([r["world"] for r in mr if r["ul_legal"] == 1], default=0)
        bamax = max([r["world"] for r in mr if r["ba_legal"] == 1], default=0)
        cells = []
        for w in WORLDS:
            bs = [r["B"] for r in mr if r["world"] == w and r["ba_legal"] == 1]
            cells.append(str(min(bs)) if bs else "none ≤ 64")
        L.append(f"| {m} | {ulmax or '-'} | {bamax or '-'} | " + " | ".join(cells) + " |")
    L += ["", f"## 3. {SEQ_MODEL} across worlds (seq 32K): batch-aware a2a and step", "",
          "K > 8 means a group spans nodes (its all-to-all runs at IB speed).", ""]
    sel = [r for r in rows if r["model"] == SEQ_MODEL and r["seq"] == 32768 and r["ba_legal"] == 1]
    L.append(md_table(sel,
                      ["world", "B", "ul_a2a_ms", "hier_a2a_ms", "ba_G", "ba_K",
                       "ba_spans_nodes", "ba_a2a_ms",
                       lambda r: fmt(100 * r["ba_a2a_frac"] if r["ba_a2a_frac"] != "" else "", 1),
                       "ba_step_ms", lambda r: fits_s(r, "ba"), "note"],
                      ["N", "B", "Ulysses a2a ms", "Ulysses two-level est. ms", "G", "K",
                       "spans nodes", "BA a2a ms", "BA a2a % of step", "BA step ms",
                       "BA fits", "note"]))
    L += ["", f"## 4. {SEQ_MODEL} across seq lengths (Ulysses-legal worlds)", ""]
    sel = [r for r in rows if r["model"] == SEQ_MODEL and r["ul_legal"] == 1 and r["B"] > 1]
    sel.sort(key=lambda r: (r["world"], r["B"], r["seq"]))
    L.append(md_table(sel,
                      ["world", "B", lambda r: seq_name(r["seq"]), "ul_a2a_ms", "ba_K",
                       "ba_a2a_ms", ratio_s,
                       lambda r: fmt(100 * r["ul_a2a_frac"], 1),
                       "ul_step_ms", "ba_step_ms", speed_s,
                       lambda r: fits_s(r, "ul"), lambda r: fits_s(r, "ba")],
                      ["N", "B", "seq", "Ulysses a2a ms", "BA K", "BA a2a ms", "a2a ratio",
                       "Ulysses a2a % of step", "Ulysses step ms", "BA step ms",
                       "step speedup", "Ulysses fits", "BA fits"]))
    L += ["", f"## 5. {SEQ_MODEL}, seq sweep at scale (batch-aware only)", ""]
    sel = [r for r in rows if r["model"] == SEQ_MODEL and r["world"] >= 64
           and r["ba_legal"] == 1 and r["world"] in (64, 256, 1024, 2048)]
    sel.sort(key=lambda r: (r["world"], r["B"], r["seq"]))
    L.append(md_table(sel,
                      ["world", "B", lambda r: seq_name(r["seq"]), "ba_G", "ba_K",
                       "ba_a2a_ms", lambda r: fmt(100 * r["ba_a2a_frac"], 1), "ba_step_ms",
                       "ba_mem_gib", lambda r: fits_s(r, "ba")],
                      ["N", "B", "seq", "G", "K", "BA a2a ms", "a2a % of step",
                       "BA step ms", "mem GiB", "fits"]))
    L.append("")
    with open(path, "w") as f:
        f.write("\n".join(L))


def plot(out, rows):
    gp = shutil.which("gnuplot")
    if not gp:
        print("scale_study: gnuplot not found; skipping the PNG plots "
              "(apt-get install -y gnuplot-nox)")
        return []
    made = []
    # (a) a2a ratio vs B, one model, worlds where Ulysses is legal
    dat_a = os.path.join(out, "a2a_ratio.dat")
    worlds_a = []
    with open(dat_a, "w") as f:
        for w in WORLDS:
            pts = [r for r in rows if r["model"] == SEQ_MODEL and r["seq"] == 32768
                   and r["world"] == w and r["ul_legal"] == 1 and r["a2a_ratio"] not in ("", "inf")]
            if not pts:
                continue
            worlds_a.append(w)
            f.write(f'"N={w}"\n')
            for r in sorted(pts, key=lambda r: r["B"]):
                f.write(f'{r["B"]} {r["a2a_ratio"]:.4f} {r["ba_K"]}\n')
            f.write("\n\n")
    # (b) step speedup vs seq
    dat_b = os.path.join(out, "step_speedup.dat")
    series_b = []
    with open(dat_b, "w") as f:
        for w in WORLDS:
            for b in BATCHES:
                pts = [r for r in rows if r["model"] == SEQ_MODEL and r["world"] == w
                       and r["B"] == b and r["ul_legal"] == 1 and r["step_speedup"] != ""]
                if b < 2 or len(pts) < 3 or b == w:
                    continue
                series_b.append((w, b))
                f.write(f'"N={w} B={b} (K={w // b})"\n')
                for r in sorted(pts, key=lambda r: r["seq"]):
                    f.write(f'{r["seq"] / 1024:.0f} {r["step_speedup"]:.5f} {r["ul_a2a_frac"]:.5f}\n')
                f.write("\n\n")
    script = f"""
set terminal pngcairo size 900,560 font ",11" noenhanced
set output "{out}/a2a_ratio_vs_B.png"
set title "{SEQ_MODEL}, seq 32K, H100 x8/node: predicted all-to-all time, Ulysses / batch-aware"
set xlabel "micro-batch B"
set ylabel "a2a ratio (Ulysses / batch-aware, chosen G)"
set logscale x 2
set logscale y 2
set key top left
set grid
plot for [i=0:{len(worlds_a) - 1}] "{dat_a}" index i using 1:2 with linespoints lw 2 pt 7 lc i+1 title columnheader(1)
set output "{out}/step_speedup_vs_seq.png"
set title "{SEQ_MODEL}, H100 x8/node, ZeRO 3: predicted step speedup of batch-aware over Ulysses"
set xlabel "sequence length (K tokens)"
set ylabel "step time Ulysses / batch-aware"
set logscale x 2
unset logscale y
set key top right
plot for [i=0:{len(series_b) - 1}] "{dat_b}" index i using 1:2 with linespoints lw 2 pt (i%5)+5 lc i+1 title columnheader(1)
"""
    p = subprocess.run([gp], input=script, text=True, capture_output=True)
    if p.returncode != 0:
        print("scale_study: gnuplot failed:\n" + p.stderr)
        return []
    for n in ("a2a_ratio_vs_B.png", "step_speedup_vs_seq.png"):
        made.append(os.path.join(out, n))
    return made


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baspc", default="build-sc/baspc")
    ap.add_argument("--out", default="bench/scale")
    ap.add_argument("-j", type=int, default=2, help="parallel baspc processes (≤ 2 here)")
    ap.add_argument("--full", action="store_true",
                    help="sweep every model across seq lengths (default: one model)")
    a = ap.parse_args()
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    os.makedirs(a.out, exist_ok=True)
    pts = grid(a.full)
    t0 = time.time()
    rows = []
    with cf.ThreadPoolExecutor(max_workers=max(1, a.j)) as ex:
        for i, (pt, plan, err) in enumerate(ex.map(lambda p: run_one(a.baspc, root, p), pts)):
            rows.append(summarise(pt, plan, err))
            if (i + 1) % 100 == 0:
                print(f"scale_study: {i + 1}/{len(pts)} plans, {time.time() - t0:.0f} s",
                      file=sys.stderr)
    elapsed = time.time() - t0
    with open(os.path.join(a.out, "scale.csv"), "w", newline="") as f:
        w = csv.DictWriter(f, FIELDS)
        w.writeheader()
        for r in rows:
            w.writerow({k: (f"{v:.6g}" if isinstance(v, float) else v) for k, v in r.items()})
    write_md(os.path.join(a.out, "scale.md"), rows, elapsed, a.j, a.full)
    pngs = plot(a.out, rows)
    print(f"scale_study: {len(rows)} plans in {elapsed:.1f} s; wrote {a.out}/scale.csv, "
          f"{a.out}/scale.md" + "".join(", " + p for p in pngs))


if __name__ == "__main__":
    main()
