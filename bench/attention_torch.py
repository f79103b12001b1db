#!/usr/bin/env python3
"""attention_torch.py — basp's CPU attention kernels beside PyTorch's
scaled_dot_product_attention, one thread each, side by side in one run.

    bench/attention_torch.py [--build DIR] [--seqs 1024,2048,8192] [--dh 64]
                             [--rounds 3] [--out DIR]

For every sequence length S and head dim Dh (b = 1, 4 query heads over 2
kv heads, causal), each round runs

  - build/bench/bench_attention --dh Dh S (basp: kern_attention_fwd_lse and
    kern_attention_bwd_lse on [b, S, H, Dh], as training runs them: the
    backward reads the forward's logsumexp; OpenBLAS at one thread; it prints
    the median of its own 7 repeats, with sgemm 1024³ timed beside them);
  - torch.nn.functional.scaled_dot_product_attention(is_causal=True,
    enable_gqa=True) on [b, H, S, Dh] (its own layout), forward under
    no_grad and forward + backward, torch.set_num_threads(1), the median of
    --torch-repeats runs after a warm-up;

alternating which goes first from round to round.  FLOPs are the
flash-attention convention of bench_attention (forward 4·b·H·S²·Dh/2, the
backward 2.5× that), so the GFLOP/s compare directly.  The table gives
medians over rounds and the median of the per-round ratios basp / PyTorch.
Writes results.md and results.csv to --out (default
bench/results/attention/).

PyTorch is a benchmark-only dependency (as for torch_step.py): the script
stops with a message when it is missing.  Standard library otherwise.
"""

import argparse
import os
import re
import statistics
import subprocess
import sys
import time

from machine import cpu_model  # bench/machine.py

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
B, H, HKV = 1, 4, 2
LINE = re.compile(r"attention S=(\d+)\s.*sgemm\s+([0-9.]+) \| fwd\s+([0-9.]+) \| fwd\+bwd\s+([0-9.]+) GFLOP/s"
                  r"(?: \(([a-z0-9-]+)\))?")
# where the fused kernels run, bench_attention also times the blocked BLAS ones in the same repeats
VS_BLAS = re.compile(r"fused / blas-blocked: fwd ([0-9.]+)x\s+fwd\+bwd ([0-9.]+)x")




def write_results(out, md, csv):
    """results.md and results.csv under out, and the table on stdout."""
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "results.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    with open(os.path.join(out, "results.csv"), "w") as f:
        f.write("\n".join(csv) + "\n")
    print("\n".join(md))


def basp_run(exe, S, dh):
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    out = subprocess.run([exe, "--dh", str(dh), str(S)], env=env, capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"attention_torch: {exe} failed:\n{out.stderr}")
    m = LINE.search(out.stdout)
    if not m:
        sys.exit(f"attention_torch: no result line in bench_attention's output:\n{out.stdout}")
    head = out.stdout.splitlines()[0]
    res = {"sgemm": float(m.group(2)), "fwd": float(m.group(3)), "fb": float(m.group(4)), "head": head,
           "impl": m.group(5) or "blas-blocked"}
    v = VS_BLAS.search(out.stdout)
    if v:
        res["xf"], res["xfb"] = float(v.group(1)), float(v.group(2))
    return res


def torch_run(torch, S, dh, repeats):
    F = torch.nn.functional
    g = torch.Generator().manual_seed(S * 131 + dh)
    q = torch.randn(B, H, S, dh, generator=g, requires_grad=True)
    k = torch.randn(B, HKV, S, dh, generator=g, requires_grad=True)
    v = torch.randn(B, HKV, S, dh, generator=g, requires_grad=True)
    dout = torch.randn(B, H, S, dh, generator=g)
    flops = 4.0 * B * H * S * S * dh / 2

    def fwd():
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)

    def fwd_bwd():
        q.grad = k.grad = v.grad = None
        o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
        o.backward(dout)

    res = {}
    for name, fn, f in (("fwd", fwd, flops), ("fb", fwd_bwd, 3.5 * flops)):
        fn()
        ts = []
        for _ in range(repeats):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        res[name] = f / statistics.median(ts) * 1e-9
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--seqs", default="1024,2048,8192")
    ap.add_argument("--dh", default="64", help="head dims, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--torch-repeats", type=int, default=5)
    ap.add_argument("--out", default=os.path.join(HERE, "results", "attention"))
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("attention_torch: needs PyTorch (a benchmark-only dependency): pip install torch")
    exe = os.path.join(args.build, "bench", "bench_attention")
    if not os.access(exe, os.X_OK):
        sys.exit(f"attention_torch: {exe} not found: build it first (make -C {args.build} bench_attention)")
    if args.rounds < 1:
        sys.exit("attention_torch: --rounds must be at least 1")
    torch.set_num_threads(1)
    seqs = [int(s) for s in args.seqs.split(",")]
    dhs = [int(d) for d in args.dh.split(",")]
    t0 = time.monotonic()
    runs = {}  # (S, dh) -> list of (basp, torch)
    head = ""
    for r in range(args.rounds):
        for S in seqs:
            for dh in dhs:
                if (r + len(runs)) % 2 == 0:
                    a = basp_run(exe, S, dh)
                    t = torch_run(torch, S, dh, args.torch_repeats)
                else:
                    t = torch_run(torch, S, dh, args.torch_repeats)
                    a = basp_run(exe, S, dh)
                head = a["head"]
                runs.setdefault((S, dh), []).append((a, t))
                print(f"[round {r + 1}] S={S} Dh={dh}: basp fwd {a['fwd']:.1f} fwd+bwd {a['fb']:.1f} | "
                      f"SDPA fwd {t['fwd']:.1f} fwd+bwd {t['fb']:.1f} GFLOP/s | sgemm {a['sgemm']:.1f}", flush=True)
    report(args, runs, head, torch, time.monotonic() - t0)


def report(args, runs, head, torch, wall):
    med = statistics.median
    rows, csv = [], ["S,dh,basp_fwd,sdpa_fwd,fwd_ratio,basp_fb,sdpa_fb,fb_ratio,sgemm,basp_fwd_vs_sgemm,basp_fb_vs_sgemm,"
                     "impl,fwd_vs_blas_blocked,fb_vs_blas_blocked"]
    for (S, dh), rs in sorted(runs.items()):
        bf, tf = med(a["fwd"] for a, _ in rs), med(t["fwd"] for _, t in rs)
        bb, tb = med(a["fb"] for a, _ in rs), med(t["fb"] for _, t in rs)
        rf, rb = med(a["fwd"] / t["fwd"] for a, t in rs), med(a["fb"] / t["fb"] for a, t in rs)
        sg = med(a["sgemm"] for a, _ in rs)
        sf, sb = med(a["fwd"] / a["sgemm"] for a, _ in rs), med(a["fb"] / a["sgemm"] for a, _ in rs)
        impl = rs[0][0]["impl"]
        xs = [a for a, _ in rs if "xf" in a]
        xf = f"{med(a['xf'] for a in xs):.2f}" if xs else ""
        xfb = f"{med(a['xfb'] for a in xs):.2f}" if xs else ""
        rows.append(f"| {S} | {dh} | {bf:.1f} | {tf:.1f} | **{rf:.2f}×** | {bb:.1f} | {tb:.1f} | **{rb:.2f}×** | "
                    f"{sg:.1f} | {sf:.2f} | {sb:.2f} | {impl} | {xf + '×' if xf else '–'} | "
                    f"{xfb + '×' if xfb else '–'} |")
        csv.append(f"{S},{dh},{bf:.2f},{tf:.2f},{rf:.3f},{bb:.2f},{tb:.2f},{rb:.3f},{sg:.2f},{sf:.3f},{sb:.3f},"
                   f"{impl},{xf},{xfb}")
    cap = getattr(torch.backends.cpu, "get_cpu_capability", lambda: "?")()
    md = [f"# Causal GQA attention on one core: basp against PyTorch SDPA", "",
          f"`{' '.join(['bench/attention_torch.py'] + sys.argv[1:])}` — {wall:.0f} s, {args.rounds} rounds "
          f"(basp: the median of bench_attention's 7 repeats; PyTorch: the median of {args.torch_repeats}), "
          f"b = {B}, {H} query heads over {HKV} kv heads; {cpu_model()}; basp: {head}; "
          f"PyTorch {torch.__version__} (CPU capability {cap}), one thread; load average at the end "
          f"{' '.join(f'{x:.2f}' for x in os.getloadavg())}.", "",
          "GFLOP/s in the flash-attention convention (forward 4·b·H·S²·Dh/2, forward + backward 3.5× that), "
          "medians over rounds; the ratios are medians of per-round basp / PyTorch ratios.  The last two "
          "columns but three are basp against sgemm 1024³ timed in the same repeats (the goals: 0.75 forward, "
          "0.6 forward + backward); then which kernels basp ran, and where they were the fused AVX-512 ones, "
          "fused / blocked BLAS kernels timed in the same repeats (bench_attention's own line, medians).", "",
          "| S | Dh | basp fwd | SDPA fwd | fwd basp/SDPA | basp fwd+bwd | SDPA fwd+bwd | fwd+bwd basp/SDPA | "
          "sgemm | basp fwd / sgemm | basp fwd+bwd / sgemm | basp kernels | fwd fused / blocked | "
          "fwd+bwd fused / blocked |",
          "|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|"] + rows
    write_results(args.out, md, csv)


if __name__ == "__main__":
    main()
