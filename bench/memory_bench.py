#!/usr/bin/env python3
"""memory_bench.py — what memory planning buys and costs.

    bench/memory_bench.py --build BUILD recompute [--spec SPEC] [--np 2]
                          [--steps 20] [--repeats 5] [--workdir DIR] [--json FILE]
    bench/memory_bench.py --build BUILD maxseq [--micro-batch 2 1] [--offload] [--json FILE]
                          [--markdown FILE]
    bench/memory_bench.py --build BUILD chunks [--model llama3_1_8b] [--json FILE] [--markdown FILE]

recompute: the step-time cost of activation recomputation and offload on the CPU.
  SPEC (default bench/small_cpu.basp) is compiled with train.recompute none,
  selective and full (and once more with none and the MLP tiled, the other
  trade of compute for memory), on NP ranks (mesh 1 node x NP).  For REPEATS
  rounds every variant trains STEPS steps with --metrics, in an order that
  rotates each round, so load from other processes hits all alike; the
  figures are medians over rounds of each run's median step time.  Reported
  per variant: the planned arena, the measured high-water mark, the median
  step time and its ratio to `none` measured in the same rounds.

maxseq: the longest sequence whose memory plan fits, for the six example
  models at the paper's setting (ZeRO-3, bf16, the cuda target) on three
  clusters: 2 x 4 A100-40GB (the examples' own mesh), 1 x H200 and 1 node of
  8 x H200, for micro-batch 2 (the paper's) and 1 (DeepSpeed ALST's), from
  `baspc SPEC --max-seq-len --json`.  Writes a JSON file of every row and a
  markdown table of the longest seq_len per model, cluster, layout and
  recompute setting.
  With --offload: train.offload all (activations, the optimizer and, under
  ZeRO, the parameters) on 1 and 8 x H100-80GB and
  8 x H200 (2 TB of host memory per node, PCIe 5: the presets), a table of
  the Ulysses rows, each recompute setting without / with offload, beside
  DeepSpeed ALST's published figures.  --chunks adds the full, offload-all
  row with the most head chunks the model and the group split
  (train.attention_chunks 8, 4 or 2).

chunks: head-chunked attention at the memory frontier: MODEL (default
  Llama-3.1-8B) at micro-batch 1, ZeRO-3, bf16, train.offload all and
  recompute full, Ulysses, on the --offload clusters, for every
  train.attention_chunks in 1, 2, 4, 8 that the model and the group allow:
  the longest seq_len (`--max-seq-len --json`), its peak and host arena per
  rank, and the cost model's predicted step at that length (`--plan --json`,
  the Ulysses row), beside the published figures (DeepSpeed ALST 500K on one
  H100 and 3.7M on 8; UPipe 5M on 8 x H100).

Standard library only.  OPENBLAS_NUM_THREADS=1 for every process started.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = ["llama3_2_1b", "llama3_2_3b", "llama3_1_8b", "qwen1_5_1_8b", "qwen2_5_3b", "qwen3_8b"]
# Activation offload against DeepSpeed ALST's published figures (micro-batch
# 1): its hardware, 80 GB H100s, and 8 x H200; the presets' 2 TB of host
# memory per node (DGX H100 / H200) and PCIe 5.
OFFLOAD_CLUSTERS = [
    ("1x H100-80GB", ["mesh.nodes=1", "mesh.devices_per_node=1", "mesh.device=h100_sxm"]),
    ("8x H100-80GB (1 node)", ["mesh.nodes=1", "mesh.devices_per_node=8", "mesh.device=h100_sxm"]),
    ("8x H200 (1 node)", ["mesh.nodes=1", "mesh.devices_per_node=8", "mesh.device=h200"]),
]
CLUSTERS = [
    ("2x4 A100-40GB", []),
    ("1x H200", ["mesh.nodes=1", "mesh.devices_per_node=1", "mesh.device=h200"]),
    ("8x H200 (1 node)", ["mesh.nodes=1", "mesh.devices_per_node=8", "mesh.device=h200"]),
]


def env():
    e = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1",
             OMPI_MCA_rmaps_base_oversubscribe="1", OMPI_MCA_mpi_yield_when_idle="1")
    return e


def run(cmd, ok=(0,), **kw):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), **kw)
    if r.returncode not in ok:
        sys.exit("command failed (%d): %s\n%s" % (r.returncode, " ".join(cmd), r.stderr[-3000:]))
    return r.stdout


def sets(xs):
    out = []
    for x in xs:
        out += ["--set", x]
    return out


def recompute(a):
    baspc = os.path.join(a.build, "baspc")
    w = a.workdir
    os.makedirs(w, exist_ok=True)
    corpus = os.path.join(w, "corpus.bin")
    if not os.path.exists(corpus):
        run([os.path.join(a.build, "data", "mkcorpus"), corpus, os.path.join(w, "corpus.txt")])
    mesh = ["mesh.nodes=1", "mesh.devices_per_node=%d" % a.np]
    variants = [("none", ["train.recompute=none", "train.mlp_chunk=0"]),
                ("selective", ["train.recompute=selective", "train.mlp_chunk=0"]),
                ("full", ["train.recompute=full", "train.mlp_chunk=0"]),
                ("none, tiled MLP", ["train.recompute=none", "train.mlp_chunk=%d" % a.mlp_chunk]),
                ("none, offload", ["train.recompute=none", "train.mlp_chunk=0", "train.offload=activations"]),
                ("full, offload", ["train.recompute=full", "train.mlp_chunk=0", "train.offload=activations"])]
    exes = {}
    for name, v in variants:
        exe = os.path.join(w, "train_" + name.replace(", ", "_").replace(" ", "_"))
        run([baspc, a.spec, "-q", "-o", exe] + sets(mesh + v))
        exes[name] = exe
    steps = {n: [] for n, _ in variants}
    mem = {}
    for r in range(a.repeats):
        order = variants[r % len(variants):] + variants[:r % len(variants)]
        for name, _ in order:
            m = os.path.join(w, "metrics.jsonl")
            run(["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(a.np), exes[name], "--data", corpus,
                 "--steps", str(a.steps), "--quiet", "--metrics", m])
            recs = [json.loads(x) for x in open(m)][2:]  # the first steps warm caches up
            steps[name].append(statistics.median(x["step_ms"] for x in recs))
            mem[name] = (recs[-1]["mem_arena_bytes"], recs[-1]["mem_peak_bytes"], recs[-1]["rss_peak_bytes"],
                         recs[-1].get("mem_host_peak_bytes", 0))
        print("round %d/%d done" % (r + 1, a.repeats), file=sys.stderr)
    base = statistics.median(steps["none"])
    rows = []
    print("| variant | arena (planned) | high-water | host arena | peak RSS | median step | vs none |")
    print("|---|---|---|---|---|---|---|")
    for name, _ in variants:
        med = statistics.median(steps[name])
        ratios = [s / b for s, b in zip(steps[name], steps["none"])]
        arena, hw, rss, host = mem[name]
        rows.append({"variant": name, "arena_bytes": arena, "mem_peak_bytes": hw, "rss_peak_bytes": rss,
                     "mem_host_peak_bytes": host,
                     "median_step_ms": med, "median_ratio_vs_none": statistics.median(ratios),
                     "step_ms_per_round": steps[name]})
        print("| %s | %.2f MiB | %.2f MiB | %.2f MiB | %.1f MiB | %.1f ms | %.2fx |" % (
            name, arena / 2**20, hw / 2**20, host / 2**20, rss / 2**20, med, statistics.median(ratios)))
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"spec": os.path.relpath(a.spec, ROOT), "np": a.np, "steps": a.steps, "repeats": a.repeats,
                       "base_median_step_ms": base, "rows": rows}, f, indent=1)


def maxseq(a):
    baspc = os.path.join(a.build, "baspc")
    results = []
    clusters = OFFLOAD_CLUSTERS if a.offload else CLUSTERS
    for model in MODELS:
        spec = os.path.join(ROOT, "examples", model + ".basp")
        for cname, cset in clusters:
            for mb in a.micro_batch:
                s = cset + ["train.micro_batch=%d" % mb, "train.global_batch=%d" % mb, "train.zero=3",
                            "train.precision=bf16"]
                if a.offload:
                    s.append("train.offload=all")
                # exit 1: no row fits at all (still a full report)
                out = json.loads(run([baspc, spec, "-q", "--max-seq-len", "--json", "--target=cuda"] + sets(s),
                                     ok=(0, 1)))
                out.update({"cluster": cname, "example": model})
                if a.offload and a.chunks:
                    out["chunked"] = most_chunks(baspc, spec, s)
                results.append(out)
                print("%s %s mb %d done" % (model, cname, mb), file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    if a.offload:
        return offload_table(a, results)
    lines = ["| model | cluster | micro-batch | layout | none | selective | full |", "|---|---|---|---|---|---|---|"]
    for r in results:
        by = {}
        for w in r["rows"]:
            by.setdefault(w["layout"], {})[w["recompute"]] = w
        for layout, modes in by.items():
            def cell(mode):
                w = modes.get(mode)
                if not w or w["illegal"]:
                    return "illegal"
                if w["max_seq_len"] == 0:
                    return "-"
                return "%s%s" % (fmt_tokens(w["max_seq_len"]), "+" if w["at_cap"] else "")
            lines.append("| %s | %s | %d | %s | %s | %s | %s |" % (r["example"], r["cluster"], r["micro_batch"], layout,
                                                              cell("none"), cell("selective"), cell("full")))
    write_table(a, lines)


def full_offload_row(baspc, spec, s):
    """`--max-seq-len --json` with the settings s: (the Ulysses row with
    recompute full and offload all, None) or (None, baspc's error) when it
    refuses them (head chunks the model or the group cannot split)."""
    p = subprocess.run([baspc, spec, "-q", "--max-seq-len", "--json", "--target=cuda"] + sets(s),
                       capture_output=True, text=True, env=env())
    if p.returncode not in (0, 1) or not p.stdout.strip():
        err = [x for x in p.stderr.splitlines() if "error:" in x] or ["exit %d" % p.returncode]
        return None, err[0].split("error: ", 1)[-1]
    for w in json.loads(p.stdout)["rows"]:
        if w["layout"] == "ulysses" and w["recompute"] == "full" and w["offload"] == "all":
            return w, None
    return None, "no Ulysses row with recompute full and offload all"


def most_chunks(baspc, spec, s):
    """That row at the most head chunks the model and the group split (8, 4,
    then 2): its longest seq_len and host arena."""
    for c in (8, 4, 2):
        w, _ = full_offload_row(baspc, spec, s + ["train.attention_chunks=%d" % c])
        if w:
            return {"chunks": c, "max_seq_len": w["max_seq_len"], "host_bytes_per_rank": w["host_bytes_per_rank"],
                    "at_cap": w["at_cap"]}
    return None


def offload_table(a, results):
    """One row per model and cluster (Ulysses, the G=1 rows): the longest
    seq_len per recompute setting, without / with offload all."""
    head = "| model | cluster | micro-batch | none | selective | full | host arena per rank (full, offload) |"
    rule = "|---|---|---|---|---|---|---|"
    if a.chunks:
        head += " full, offload, head chunks | host arena per rank (chunks) |"
        rule += "---|---|"
    lines = [head, rule]
    for r in results:
        by = {(w["recompute"], w["offload"]): w for w in r["rows"] if w["layout"] == "ulysses"}

        def cell(mode, off):
            w = by.get((mode, off))
            if not w or w["illegal"]:
                return "illegal"
            if w["max_seq_len"] == 0:
                return "-"
            return "%s%s" % (fmt_tokens(w["max_seq_len"]), "+" if w["at_cap"] else "")
        full = by.get(("full", "all"))
        host = "%.0f GiB" % (full["host_bytes_per_rank"] / 2**30) if full and full["max_seq_len"] else "-"
        row = "| %s | %s | %d | %s | %s | %s | %s |" % (
            r["example"], r["cluster"], r["micro_batch"],
            *["%s / %s" % (cell(m, "none"), cell(m, "all")) for m in ("none", "selective", "full")], host)
        if a.chunks:
            k = r.get("chunked")
            if k and k["max_seq_len"]:
                cap = "+" if k.get("at_cap", k["max_seq_len"] >= 1 << 24) else ""  # 2^24: the longest tried
                row += " %s%s (%d chunks) | %.0f GiB |" % (fmt_tokens(k["max_seq_len"]), cap, k["chunks"],
                                                          k["host_bytes_per_rank"] / 2**30)
            else:
                row += " - | - |"
        lines.append(row)
    write_table(a, lines)


def chunks(a):
    baspc = os.path.join(a.build, "baspc")
    spec = os.path.join(ROOT, "examples", a.model + ".basp")
    results = []
    for cname, cset in OFFLOAD_CLUSTERS:
        for c in (1, 2, 4, 8):
            s = cset + ["train.micro_batch=1", "train.global_batch=1", "train.zero=3", "train.precision=bf16",
                        "train.offload=all", "layout.batch_aware=off", "train.attention_chunks=%d" % c]
            row, err = full_offload_row(baspc, spec, s)
            if not row:
                results.append({"cluster": cname, "chunks": c, "error": err})
                continue
            r = {"cluster": cname, "chunks": c, "max_seq_len": row["max_seq_len"], "peak": row["peak_bytes_per_rank"],
                 "host_bytes_per_rank": row["host_bytes_per_rank"]}
            if row["max_seq_len"]:
                plan = json.loads(run([baspc, spec, "-q", "--plan", "--json", "--target=cuda"] +
                                      sets(s + ["train.recompute=full", "train.seq_len=%d" % row["max_seq_len"]]),
                                      ok=(0, 1)))
                u = [x for x in plan["candidates"] if x["name"] == "ulysses" and x["groups"] == 1][0]
                r["step_ms"] = u["step_ms"]
            results.append(r)
            print("%s chunks %d done" % (cname, c), file=sys.stderr)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    lines = ["| %s, offload all, recompute full | chunks | longest seq_len | peak per rank | host arena per rank | "
             "predicted step |" % a.model, "|---|---|---|---|---|---|"]
    for r in results:
        if "error" in r:
            lines.append("| %s | %d | – (%s) | | | |" % (r["cluster"], r["chunks"], r["error"]))
        elif not r["max_seq_len"]:
            lines.append("| %s | %d | - | | | |" % (r["cluster"], r["chunks"]))
        else:
            lines.append("| %s | %d | %s | %.1f GiB | %.0f GiB | %.0f s |" % (
                r["cluster"], r["chunks"], fmt_tokens(r["max_seq_len"]), r["peak"] / 2**30,
                r["host_bytes_per_rank"] / 2**30, r["step_ms"] / 1e3))
    write_table(a, lines)


def write_table(a, lines):
    """Prints the markdown table, and writes it to --markdown when given."""
    text = "\n".join(lines) + "\n"
    print(text)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(text)


def fmt_tokens(n):
    if n >= 1 << 20 and n % (1 << 10) == 0:
        return "%.2fM" % (n / float(1 << 20))
    return "%dK" % (n // 1024) if n % 1024 == 0 else str(n)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build", required=True)
    sub = p.add_subparsers(dest="what", required=True)
    r = sub.add_parser("recompute")
    r.add_argument("--spec", default=os.path.join(HERE, "small_cpu.basp"))
    r.add_argument("--np", type=int, default=2)
    r.add_argument("--steps", type=int, default=20)
    r.add_argument("--repeats", type=int, default=5)
    r.add_argument("--mlp-chunk", type=int, default=128)
    r.add_argument("--workdir", default="/tmp/basp-memory-bench")
    r.add_argument("--json")
    m = sub.add_parser("maxseq")
    m.add_argument("--micro-batch", type=int, nargs="+", default=[2, 1])
    m.add_argument("--json")
    m.add_argument("--markdown")
    m.add_argument("--offload", action="store_true",
                   help="offload all (activations, optimizer and, under ZeRO, the parameters): rows without and with it, on 1 and 8 x H100-80GB and 8 x H200")
    m.add_argument("--chunks", action="store_true",
                   help="with --offload: also the full, offload-all row at the most head chunks that split (8, 4, 2)")
    k = sub.add_parser("chunks")
    k.add_argument("--model", default="llama3_1_8b", choices=MODELS)
    k.add_argument("--json")
    k.add_argument("--markdown")
    a = p.parse_args()
    a.build = os.path.abspath(a.build)
    if a.what == "recompute":
        a.spec = os.path.abspath(a.spec)
        recompute(a)
    elif a.what == "chunks":
        chunks(a)
    else:
        maxseq(a)


main()
