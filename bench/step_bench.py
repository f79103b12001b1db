#!/usr/bin/env python3
"""step_bench.py — end-to-end training step time against sgemm speed.

    bench/step_bench.py --build BUILD [--spec SPEC] [--steps 30] [--warmup 5]
                        [--repeats 6] [--workdir DIR] [--json FILE]

One run, from an existing build directory (BUILD/baspc, BUILD/data/mkcorpus,
BUILD/bench/bench_sgemm):

  1. writes the demo corpus with mkcorpus unless the work directory has it;
  2. compiles SPEC (default bench/small_cpu.basp) three ways with `baspc -o`:
     on 1 rank, and on the spec's mesh as plain Ulysses and as batch-aware;
  3. counts each configuration's GEMM FLOPs per rank and step from the IR
     `baspc --emit=ir` prints (the local, per-rank shapes of every linear,
     attention and LM head op; see "FLOP counts" below and bench/README.md);
  4. for REPEATS rounds, for each configuration: times single-thread sgemm at
     the shapes of that configuration's GEMMs (bench_sgemm), then trains it
     for STEPS steps with --metrics.  Ulysses and batch-aware alternate
     which goes first.  A configuration's figures of a round are taken from
     its own run and the sgemm timing just before it, so load from other
     processes hits both alike; the report gives medians over rounds;
  5. prints a markdown table: step time, the time the step's GEMM FLOPs take
     at sgemm speed, their ratio (efficiency), the all-to-all share of the
     step, and the Ulysses / batch-aware step-time ratio.

FLOP counts per rank and step (2 FLOPs per multiply-add):
  linear [N tokens, In -> Out]   forward 2·N·In·Out; backward 4·N·In·Out
                                 (dx = dy·wᵀ and dw = xᵀ·dy)
  LM head + loss [N, D, vocab V] forward 2·N·V·D; backward 6·N·V·D (the
                                 logits are recomputed, then dx and dw)
  causal attention [b, S, H, Dh] forward 2·b·H·S²·Dh (QKᵀ and PV over half
                                 the pairs); backward 2.5× forward
Each GEMM's FLOPs are timed at the sgemm speed of its own shape and
transposition as the kernels call it (attention at its 64×128 block shapes,
the LM head at its 256 × 256 blocks), so the efficiency measures what the step
spends beyond its GEMMs: element-wise kernels, the optimizer, collectives
and, with more ranks than cores, waiting for a core.

Standard library only.  The program sets OPENBLAS_NUM_THREADS=1 for every
process it starts: each rank is one thread, as the runtime expects.
"""

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))

# Block and chunk sizes of the kernels whose GEMM shapes are timed; they
# mirror BQ/BK in runtime/host/kern_attention.c and CM_LM_HEAD_ROWS /
# CM_LM_HEAD_COLS in common/common.h (the LM head: chunks of 256 rows,
# one sgemm per block of at most 256 vocabulary columns).  A mismatch
# changes only which sgemm shape a FLOP is timed at, not the FLOP count.
ATTN_BQ, ATTN_BK = 64, 128
LMHEAD_ROWS, LMHEAD_COLS = 256, 256


# ---- the IR: per-rank shapes ---------------------------------------------------

TYPE_RE = re.compile(r"[a-z0-9]+\[([^\]]*)\]")
OP_RE = re.compile(r"^(%[^=]+?) = ([A-Za-z_][\w.-]*)\s*(.*?)\s*(\{[^}]*\})?\s*:\s*(.*)$")
DECL_RE = re.compile(r"^(param|input) (%[\w.-]+) : (.*)$")
GROUP_RE = re.compile(r"^group @([\w.-]+) = \{\[([0-9,]*)\]")


def local_dims(type_text, set_size):
    """Local dims of one type: a dim `512@sp` is 512 split over a set of @sp."""
    dims = []
    for d in filter(None, (x.strip() for x in type_text.split(","))):
        size, _, group = d.partition("@")
        dims.append(int(size) // set_size[group] if group else int(size))
    return dims


def prod(xs):
    p = 1
    for x in xs:
        p *= x
    return p


def attrs_of(text):
    out = {}
    for kv in (text or "").strip("{}").split(","):
        if "=" in kv:
            k, v = (s.strip() for s in kv.split("=", 1))
            out[k] = v
    return out


def step_gemms(ir_text):
    """The GEMMs of one step on one rank, from the pipeline's IR.

    Returns (config, gemms): the module's `config` lines as a dict, and a list
    of (shape, flops) where shape is bench_sgemm's `MxNxK:TT` (C[M,N] =
    op(A)·op(B), K the contraction, TT the transpositions of A and B as the
    kernel calls cblas_sgemm) and flops the FLOPs timed at that shape.
    Every rank of these layouts runs the same shapes, so rank 0's are used."""
    config, set_size, local, gemms = {}, {}, {}, []

    def add(m, n, k, tt, flops=None):
        gemms.append((f"{m}x{n}x{k}:{tt}", 2.0 * m * n * k if flops is None else flops))

    for line in ir_text.splitlines():
        line = line.strip()
        if line.startswith("config "):
            k, _, v = line[len("config "):].partition(" = ")
            config[k] = v
            continue
        mesh = re.match(r"mesh nodes = (\d+), devices_per_node = (\d+)", line)
        if mesh:  # the world size, as the compiled program expects it at launch
            config["world"] = str(int(mesh.group(1)) * int(mesh.group(2)))
            continue
        g = GROUP_RE.match(line)
        if g:
            set_size[g.group(1)] = len(g.group(2).split(","))
            continue
        d = DECL_RE.match(line)
        if d:
            local[d.group(2)] = local_dims(TYPE_RE.search(d.group(3)).group(1), set_size)
            continue
        m = OP_RE.match(line)
        if not m:
            continue
        results = [r.strip() for r in m.group(1).split(",")]
        op, operands = m.group(2), re.findall(r"%[\w.-]+", m.group(3))
        types = [local_dims(t, set_size) for t in TYPE_RE.findall(m.group(5))]
        for r, t in zip(results, types):
            local[r] = t
        a = attrs_of(m.group(4))
        if op == "linear":  # y[N, Out] = x[N, In] · w[In, Out]; w's first `contract` dims are In
            w = local[operands[1]]
            c = int(a.get("contract", "1"))
            i, o = prod(w[:c]), prod(w[c:])
            n = prod(types[0]) // o
            add(n, o, i, "nn")
        elif op == "linear_bwd":  # operands dy, x, w; dx = dy · wᵀ, dw = xᵀ · dy
            w = local[operands[2]]
            c = int(a.get("contract", "1"))
            i, o = prod(w[:c]), prod(w[c:])
            n = prod(local[operands[1]]) // i
            add(n, i, o, "nt")
            add(i, o, n, "tn")
        elif op in ("lm_head_loss", "lm_head_loss_bwd", "lm_head_loss_grad"):  # x[N, D], w[V, D], chunks x blocks
            v, dd = local[operands[1]]
            n = prod(local[operands[0]]) // dd
            rows = [LMHEAD_ROWS] * (n // LMHEAD_ROWS) + ([n % LMHEAD_ROWS] if n % LMHEAD_ROWS else [])
            cols = [LMHEAD_COLS] * (v // LMHEAD_COLS) + ([v % LMHEAD_COLS] if v % LMHEAD_COLS else [])
            for c in rows:
                for vc in cols:
                    add(c, vc, dd, "nt")  # a block of logits = x · wᵀ (again in a separate backward)
                    if op != "lm_head_loss":  # the backward, or the fused loss and gradient
                        add(c, dd, vc, "nn")  # dx += dlogits · w
                        add(vc, dd, c, "tn")  # dw = dlogitsᵀ · x
        elif op in ("attention", "attention_bwd"):  # [b, S, H, Dh], S whole on every rank
            b, s, h, dh = types[0] if op == "attention" else local[operands[1]]
            fwd = 2.0 * b * h * s * s * dh
            bq, bk = min(ATTN_BQ, s), min(ATTN_BK, s)
            score = f"{bq}x{bk}x{dh}:nt"  # S = Q·Kᵀ of one block (and dP = dO·Vᵀ)
            if op == "attention":  # QKᵀ and PV, half the forward FLOPs each
                gemms += [(score, fwd / 2), (f"{bq}x{dh}x{bk}:nn", fwd / 2)]
            else:  # 2.5× forward: QKᵀ again, dP, dQ = dS·K, dK = dSᵀ·Q, dV = Pᵀ·dO
                gemms += [(score, fwd), (f"{bq}x{dh}x{bk}:nn", fwd / 2), (f"{bk}x{dh}x{bq}:tn", fwd)]
    return config, gemms


# ---- running things ------------------------------------------------------------

def run(cmd, env=None, cwd=None):
    """Run cmd; on failure print what it said and stop the benchmark."""
    p = subprocess.run(cmd, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-4000:] + p.stderr[-4000:])
        sys.exit(f"step_bench: command failed (status {p.returncode}): {' '.join(cmd)}")
    return p.stdout


def mpirun_prefix(ranks):
    """mpirun for `ranks` processes.  Open MPI refuses to run as root and to
    start more ranks than cores unless told; binding is switched off so an
    oversubscribed job's ranks can share the cores as the kernel sees fit."""
    mpirun = shutil.which("mpirun") or shutil.which("mpiexec")
    if not mpirun:
        sys.exit("step_bench: no mpirun on PATH")
    cmd = [mpirun]
    version = subprocess.run([mpirun, "--version"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True).stdout
    if "Open MPI" in version or "OpenRTE" in version:
        cmd += ["--oversubscribe", "--bind-to", "none"]
        if os.geteuid() == 0:
            cmd.append("--allow-run-as-root")
    return cmd + ["-np", str(ranks)]


def sgemm_speeds(tool, shapes, env):
    """GFLOP/s per shape, one bench_sgemm run (medians of 5 samples each)."""
    out = run([tool, "--repeats", "5", "--min-ms", "10"] + sorted(shapes), env=env)
    return {s: float(g) for s, g in (line.split() for line in out.splitlines() if line.strip())}


def train(cfg, corpus, steps, warmup, workdir, env):
    """One training run; the medians over its steps after the warm-up."""
    metrics = os.path.join(workdir, cfg["name"] + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    run(cfg["mpirun"] + [cfg["binary"], "--data", corpus, "--steps", str(steps), "--metrics", metrics, "--quiet"],
        env=env, cwd=workdir)
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()][warmup:]
    if not rows:
        sys.exit(f"step_bench: {metrics}: no steps after the {warmup} warm-up step(s)")
    return {"step_ms": statistics.median(r["step_ms"] for r in rows),
            "a2a_share": statistics.median(r["a2a_ms"] / r["step_ms"] for r in rows)}


# ---- main ------------------------------------------------------------------------

def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build", help="build directory (default: build)")
    ap.add_argument("--spec", default=os.path.join(HERE, "small_cpu.basp"), help="model spec (default: bench/small_cpu.basp)")
    ap.add_argument("--steps", type=int, default=30, help="training steps per run (default 30)")
    ap.add_argument("--warmup", type=int, default=5, help="leading steps left out of each run's median (default 5)")
    ap.add_argument("--repeats", type=int, default=6,
                    help="rounds over all configurations (default 6: an even count, so Ulysses and "
                         "batch-aware go first equally often)")
    ap.add_argument("--workdir", help="binaries, corpus and metrics (default: BUILD/bench/step_bench)")
    ap.add_argument("--json", help="also write every measured figure to this file")
    ap.add_argument("--one-rank", action="store_true",
                    help="only the 1-rank configuration: the step against its GEMMs at sgemm speed, e.g. for the "
                         "real-shape specs of bench/real_shapes/")
    args = ap.parse_args()
    if args.steps <= args.warmup or args.repeats < 1:
        ap.error("need --steps > --warmup and --repeats >= 1")

    build = os.path.abspath(args.build)
    tools = {"baspc": os.path.join(build, "baspc"), "mkcorpus": os.path.join(build, "data", "mkcorpus"),
             "sgemm": os.path.join(build, "bench", "bench_sgemm")}
    for path in tools.values():
        if not os.access(path, os.X_OK):
            sys.exit(f"step_bench: {path} not found: run make -C {args.build} baspc mkcorpus bench_sgemm")
    workdir = os.path.abspath(args.workdir or os.path.join(build, "bench", "step_bench"))
    os.makedirs(workdir, exist_ok=True)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    t_start = time.monotonic()

    # 1. corpus
    corpus = os.path.join(workdir, "corpus.bin")
    if not os.path.exists(corpus):
        run([tools["mkcorpus"], corpus], env=env)

    # 2-3. configurations: binaries and per-rank GEMMs
    configs = [
        {"name": "1rank", "label": "1 rank", "set": ["mesh.nodes=1", "mesh.devices_per_node=1"]},
        {"name": "ulysses", "label": "Ulysses", "set": ["layout.batch_aware=off"]},
        {"name": "batch_aware", "label": "batch-aware", "set": []},  # the spec's own layout (auto)
    ][:1 if args.one_rank else 3]
    for cfg in configs:
        sets = [a for s in cfg["set"] for a in ("--set", s)]
        cfg["binary"] = os.path.join(workdir, cfg["name"])
        run([tools["baspc"], args.spec, "-q", "-o", cfg["binary"]] + sets, env=env)
        conf, cfg["gemms"] = step_gemms(run([tools["baspc"], args.spec, "-q", "--emit=ir"] + sets, env=env))
        cfg["ranks"] = int(conf.get("world", "1"))
        cfg["layout"] = f"G={conf.get('batch_groups', '1')} × K={conf.get('sp_size', '1')}"
        cfg["gflop"] = sum(f for _, f in cfg["gemms"]) * 1e-9
        cfg["mpirun"] = mpirun_prefix(cfg["ranks"])
        cfg["rounds"] = []
    # the model shapes are the same in every configuration: take the last one's
    model = {k: conf[k] for k in ("hidden", "layers", "heads", "kv_heads", "head_dim", "ffn", "vocab",
                                  "micro_batch", "seq_len") if k in conf}

    # 4. rounds: sgemm at the configuration's shapes, then its training run
    for r in range(args.repeats):
        order = [configs[0]] + (configs[1:] if r % 2 == 0 else configs[:0:-1])
        for cfg in order:
            speed = sgemm_speeds(tools["sgemm"], {s for s, _ in cfg["gemms"]}, env)
            gemm_ms = sum(f / (speed[s] * 1e9) for s, f in cfg["gemms"]) * 1e3
            m = train(cfg, corpus, args.steps, args.warmup, workdir, env)
            m.update(gemm_ms=gemm_ms, efficiency=gemm_ms / m["step_ms"],
                     sgemm_gflops=cfg["gflop"] / gemm_ms * 1e3)  # FLOP-weighted sgemm speed
            cfg["rounds"].append(m)
            print(f"round {r + 1}/{args.repeats} {cfg['label']:12s} step {m['step_ms']:7.1f} ms  "
                  f"GEMMs at sgemm speed {gemm_ms:6.1f} ms  a2a {100 * m['a2a_share']:4.1f}%", file=sys.stderr, flush=True)

    # 5. report: medians over rounds of per-round figures
    def med(cfg, key):
        return statistics.median(x[key] for x in cfg["rounds"])

    ul, ba = (configs[1], configs[2]) if len(configs) == 3 else (None, None)
    ratios = [u["step_ms"] / b["step_ms"] for u, b in zip(ul["rounds"], ba["rounds"])] if ul else []
    print(f"\nmodel {os.path.basename(args.spec)}: " + ", ".join(f"{k} {v}" for k, v in model.items()))
    print(f"{cores} core(s), OPENBLAS_NUM_THREADS=1, {args.steps} steps per run "
          f"(first {args.warmup} left out), medians of {args.repeats} rounds\n")
    print("| config | ranks | layout | GEMM GFLOP/rank/step | sgemm GFLOP/s | step ms: median (fastest–slowest) "
          "| GEMMs at sgemm speed, ms | efficiency: median (fastest run) | per core | a2a share |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for cfg in configs:
        steps = [x["step_ms"] for x in cfg["rounds"]]
        # ranks beyond the core count queue for a core: scale the per-rank
        # GEMM time by ranks per core to compare with what the cores could do
        share = max(1.0, cfg["ranks"] / cores)
        # the fastest run is the one least disturbed by other processes
        best = min(cfg["rounds"], key=lambda x: x["step_ms"])["efficiency"]
        eff = med(cfg, "efficiency")
        print(f"| {cfg['label']} | {cfg['ranks']} | {cfg['layout']} | {cfg['gflop']:.2f} | {med(cfg, 'sgemm_gflops'):.0f} "
              f"| {med(cfg, 'step_ms'):.1f} ({min(steps):.0f}–{max(steps):.0f}) | {med(cfg, 'gemm_ms'):.1f} "
              f"| {eff:.2f} ({best:.2f}) | {share * eff:.2f} ({share * best:.2f}) "
              f"| {100 * med(cfg, 'a2a_share'):.1f}% |")
    # Load from other processes comes and goes over seconds, so besides the
    # median of the per-round ratios give the ratio of each layout's fastest
    # run: the closest this machine gets to an unloaded comparison.
    fastest = min(x["step_ms"] for x in ul["rounds"]) / min(x["step_ms"] for x in ba["rounds"]) if ul else None
    if ul:
        print(f"\nUlysses / batch-aware step time: {statistics.median(ratios):.3f} median of per-round ratios "
              f"(range {min(ratios):.3f}–{max(ratios):.3f}); {fastest:.3f} fastest run / fastest run")
    print(f"benchmark wall time: {time.monotonic() - t_start:.0f} s")

    if args.json:
        with open(args.json, "w") as f:
            json.dump({"model": model, "cores": cores, "steps": args.steps, "warmup": args.warmup,
                       "ulysses_over_batch_aware": ratios, "ulysses_over_batch_aware_fastest": fastest,
                       "configs": [{k: c[k] for k in ("label", "ranks", "layout", "gflop", "rounds")}
                                   for c in configs]}, f, indent=1)


if __name__ == "__main__":
    main()
