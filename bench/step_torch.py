#!/usr/bin/env python3
"""step_torch.py — a one-rank CPU training step of basp beside the same step
in PyTorch (bench/torch_step.py: Llama in torch.nn, SDPA, AdamW), fp32, one
thread each, side by side in one run.

    bench/step_torch.py [--build DIR] [--spec bench/small_cpu.basp]
                        [--seqs 1024,2048,8192] [--rounds 3] [--steps 6]
                        [--warmup 2] [--basp-set KEY=VALUE ...]
                        [--basp-alt KEY=VALUE ...] [--basp-alt-build DIR]
                        [--torch-impl plain|hf] [--torch-compile] [--out DIR]

For every sequence length S (micro-batch 1), basp's program is compiled
from the spec on one rank (`--set mesh.nodes=1 --set mesh.devices_per_node=1
--set train.micro_batch=1 --set train.seq_len=S`) and trains --steps steps
(OpenBLAS at one thread, its step times from --metrics); PyTorch runs
bench/torch_step.py --device cpu --dtype fp32 --threads 1 on the same model
block, batch and sequence, --steps steps.  --basp-set adds a `--set` to
basp's compile (train.mlp_chunk=0: the unfused MLP, which keeps g and u
for the backward as PyTorch does, instead of the tiled default that
recomputes them).  --basp-alt adds a second basp program, compiled with
these `--set`s on top, timed in the same rounds right after the first
(e.g. --basp-alt train.fuse_loss=off: the LM head's loss and gradient as
two ops); the table gains its step and its time over the first's.
--basp-alt-build DIR compiles that second program with DIR's baspc (another
commit's build: its compiler and its runtime), with or without --basp-alt,
so a change is timed against the code before it in the same rounds.
--torch-impl hf times transformers' LlamaForCausalLM
(attn_implementation="sdpa") instead of the torch.nn Llama; it needs
transformers as well.  --torch-compile runs PyTorch's forward and loss
through torch.compile (torch_step.py --compile; inductor, default mode):
the first steps compile, so give --warmup at least 1.  The two alternate which goes first
from round to round; each run's step time is the median over the steps
after --warmup, the table the medians over rounds and the median of the
per-round ratios PyTorch / basp (above 1: basp is faster).  Writes
results.md and results.csv to --out (default bench/results/step_torch/).

PyTorch is a benchmark-only dependency: run this with a python that has it;
the basp side needs the build's baspc, data/mkcorpus and an mpirun.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import step_bench as sb  # noqa: E402  (run, mpirun_prefix)
import attention_torch as at  # noqa: E402  (cpu_model, write_results)


def basp_step(binary, corpus, steps, warmup, workdir, env, mpirun):
    metrics = os.path.join(workdir, os.path.basename(binary) + ".jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    sb.run(mpirun + [binary, "--data", corpus, "--steps", str(steps), "--metrics", metrics, "--quiet"], env=env,
           cwd=workdir)
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if line.strip()][warmup:]
    if not rows:
        sys.exit(f"step_torch: {metrics}: no steps after the warm-up")
    return statistics.median(r["step_ms"] for r in rows)


def torch_step(spec, S, steps, warmup, workdir, env, impl, compiled=False):
    out = os.path.join(workdir, f"torch_{impl}_{S}.json")
    cmd = [sys.executable, os.path.join(HERE, "torch_step.py"), "--model", spec, "--device", "cpu", "--dtype",
           "fp32", "--threads", "1", "--batch", "1", "--seq", str(S), "--steps", str(steps), "--impl", impl,
           "--json", out] + (["--compile"] if compiled else [])
    p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if p.returncode == 77:
        sys.exit("step_torch: PyTorch is not importable from this python (a benchmark-only dependency)")
    if p.returncode:
        sys.exit(f"step_torch: torch_step.py failed:\n{p.stdout[-3000:]}")
    with open(out) as f:
        res = json.load(f)
    rec = [r for r in res["results"] if r.get("kind") == "step"][0]
    if "skipped" in rec:  # --impl hf without transformers
        sys.exit(f"step_torch: torch_step.py --impl {impl}: skipped: {rec['skipped']}")
    return statistics.median(rec["step_ms"][warmup:] or rec["step_ms"]), res.get("torch", "?")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--spec", default=os.path.join(HERE, "small_cpu.basp"))
    ap.add_argument("--seqs", default="1024,2048,8192")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--basp-set", action="append", default=[], metavar="KEY=VALUE",
                    help="a --set for basp's compile (repeatable)")
    ap.add_argument("--basp-alt", action="append", default=[], metavar="KEY=VALUE",
                    help="a --set for a second basp program timed beside the first (repeatable)")
    ap.add_argument("--basp-alt-build", metavar="DIR",
                    help="compile the second basp program with DIR's baspc (another commit's build)")
    ap.add_argument("--torch-impl", choices=("plain", "hf"), default="plain",
                    help="PyTorch's model: the torch.nn Llama (default) or transformers' (hf)")
    ap.add_argument("--torch-compile", action="store_true",
                    help="PyTorch's forward and loss through torch.compile (the first steps compile: --warmup >= 1)")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "step_torch"))
    args = ap.parse_args()
    if args.rounds < 1 or args.steps <= args.warmup:
        ap.error("--rounds must be at least 1 and --steps more than --warmup")
    # the runs start in their work directory: every path absolute
    args.build, args.spec, args.out = (os.path.abspath(p) for p in (args.build, args.spec, args.out))
    baspc, mkcorpus = os.path.join(args.build, "baspc"), os.path.join(args.build, "data", "mkcorpus")
    alt_baspc = os.path.join(os.path.abspath(args.basp_alt_build), "baspc") if args.basp_alt_build else baspc
    want_alt = bool(args.basp_alt or args.basp_alt_build)
    for tool in (baspc, mkcorpus, alt_baspc):
        if not os.access(tool, os.X_OK):
            sys.exit(f"step_torch: {tool} not found: build basp first")
    # one directory per spec and set of overrides: binaries are named by S alone
    workdir = os.path.join(args.build, "bench", "step_torch",
                           "_".join([os.path.splitext(os.path.basename(args.spec))[0]] +
                                    [kv.replace("=", "-") for kv in args.basp_set]))
    os.makedirs(workdir, exist_ok=True)
    corpus = os.path.join(workdir, "corpus.bin")
    if not os.path.exists(corpus):
        sb.run([mkcorpus, corpus])
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    mpirun = sb.mpirun_prefix(1)
    seqs = [int(s) for s in args.seqs.split(",")]
    binaries, alts = {}, {}
    for S in seqs:
        for name, extra, into in ((f"basp_{S}", [], binaries), (f"basp_alt_{S}", args.basp_alt, alts)):
            if into is alts and not want_alt:
                continue
            b = os.path.join(workdir, name)
            sb.run([alt_baspc if into is alts else baspc, args.spec, "-q", "-o", b, "--set", "mesh.nodes=1", "--set", "mesh.devices_per_node=1",
                    "--set", "train.micro_batch=1", "--set", f"train.seq_len={S}"] +
                   [a for kv in args.basp_set + extra for a in ("--set", kv)])
            into[S] = b
    t0 = time.monotonic()
    runs, tv = {}, "?"
    for r in range(args.rounds):
        for i, S in enumerate(seqs):
            if (r + i) % 2 == 0:
                b = basp_step(binaries[S], corpus, args.steps, args.warmup, workdir, env, mpirun)
                t, tv = torch_step(args.spec, S, args.steps, args.warmup, workdir, env, args.torch_impl,
                                   args.torch_compile)
            else:
                t, tv = torch_step(args.spec, S, args.steps, args.warmup, workdir, env, args.torch_impl,
                                   args.torch_compile)
                b = basp_step(binaries[S], corpus, args.steps, args.warmup, workdir, env, mpirun)
            a = basp_step(alts[S], corpus, args.steps, args.warmup, workdir, env, mpirun) if alts else None
            runs.setdefault(S, []).append((b, t, a))
            alt = f", basp alt {a:.1f} ms, alt/basp {a / b:.2f}" if alts else ""
            print(f"[round {r + 1}] S={S}: basp {b:.1f} ms, PyTorch {t:.1f} ms, PyTorch/basp {t / b:.2f}{alt}",
                  flush=True)
    med = statistics.median
    rows, csv = [], ["seq,basp_step_ms,torch_step_ms,torch_over_basp" + (",alt_step_ms,alt_over_basp" if alts else "")]
    for S, rs in sorted(runs.items()):
        b, t, ratio = med(x for x, _, _ in rs), med(y for _, y, _ in rs), med(y / x for x, y, _ in rs)
        alt_md = alt_csv = ""
        if alts:
            a, aratio = med(z for _, _, z in rs), med(z / x for x, _, z in rs)
            alt_md, alt_csv = f" {a:.1f} | {aratio:.3f}× |", f",{a:.2f},{aratio:.4f}"
        rows.append(f"| {S} | {b:.1f} | {t:.1f} | **{ratio:.2f}×** |{alt_md}")
        csv.append(f"{S},{b:.2f},{t:.2f},{ratio:.3f}{alt_csv}")
    model_txt = "torch.nn Llama"
    if args.torch_impl == "hf":
        import importlib.metadata
        model_txt = (f"transformers {importlib.metadata.version('transformers')} LlamaForCausalLM "
                     "(Qwen2ForCausalLM for q/k/v biases)")
    md = ["# One-rank CPU training step: basp against PyTorch, fp32, one thread", "",
          f"`{' '.join(['bench/step_torch.py'] + sys.argv[1:])}` — {time.monotonic() - t0:.0f} s, {args.rounds} "
          f"rounds of {args.steps} steps (the first {args.warmup} left out), medians; model "
          f"`{os.path.relpath(args.spec, ROOT)}` at micro-batch 1; {at.cpu_model()}; PyTorch {tv} "
          f"(bench/torch_step.py --impl {args.torch_impl}: {model_txt}, SDPA, AdamW, fp32, one thread"
          f"{', torch.compile (inductor)' if args.torch_compile else ''}); basp: OpenBLAS at one "
          f"thread{', ' + ' '.join(args.basp_set) if args.basp_set else ', the spec as it is'}"
          f"{'; basp alt: ' + (' '.join(args.basp_alt) + ' on top') if args.basp_alt else ''}"
          f"{(', ' if args.basp_alt else '; basp alt: ') + 'compiled by ' + args.basp_alt_build if args.basp_alt_build else ''}"
          f"{', timed right after basp in each round' if alts else ''}"
          f"; load average at the end {' '.join(f'{x:.2f}' for x in os.getloadavg())}.", "",
          "| S | basp step ms | PyTorch step ms | PyTorch / basp |" + (" basp alt step ms | alt / basp |" if alts else ""),
          "|---:|---:|---:|---:|" + ("---:|---:|" if alts else "")] + rows
    at.write_results(args.out, md, csv)


if __name__ == "__main__":
    main()
