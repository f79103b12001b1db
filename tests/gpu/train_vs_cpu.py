#!/usr/bin/env python3
"""Training on the GPU against the CPU backend.

Compiles SPEC for one rank (or for --np ranks with the --layout settings)
twice -- `baspc --target=cpu` and
`baspc --target=cuda` -- trains both for --steps steps on the same data and
seed (the demo corpus from data/mkcorpus), and compares the loss at every
step.

Tolerance: the CUDA backend stores activations, gradients and weights in
bf16 (8 significant bits, relative rounding 2^-9 = 2e-3 per operation) with
fp32 master weights and fp32 accumulation; the CPU backend is fp32
throughout.  Over a few dozen ops per layer the per-step loss differs by
well under 1%, and the two runs do not drift apart because both update the
same fp32 masters from nearly the same gradients.  LOSS_RTOL = 3e-2 per step
leaves headroom while still failing on any real bug (a wrong kernel moves
the loss by far more, or stops it from falling).  Under the emulator the
GEMMs are OpenBLAS's, as on the CPU, and the runs differ by bf16 rounding
alone (at most 6.9e-4 seen over 20 steps): those tests pass --rtol 5e-3.

With --cuda-build the CUDA binary is not linked by baspc but by that
command from `baspc --emit=c` (its {c} and {exe} are filled in): the
emulator tests (emu/README.md) link the same generated program against the
backend built for cuemu.  --np and --layout train on several ranks (both
targets get the same layout), which runs the backend's NCCL collectives.

--min-reuse-waits N (the emulator tests) checks that the CUDA run honoured
the compiler's memory plan and that buffer reuse crossed the two streams:
with BASP_CU_REUSE_STATS set the backend reports, per rank, how often the
compute stream had to wait for a collective before writing bytes a freed
buffer had held (runtime/README.md, CUDA backend); every rank must report
the plan and at least N such waits, so the run really depends on those
fences.

Exit status 77 (CTest: skipped) when --probe says there is no GPU.
"""
import argparse
import json
import os
import re
import shlex
import subprocess
import sys

LOSS_RTOL = 3e-2


# run(cmd, log): the training-equivalence test's runner (tests/train/equiv.py).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train"))
from equiv import run  # noqa: E402


def losses(path):
    return [json.loads(line)["loss"] for line in open(path) if line.strip()]


def reuse_waits(log, np):
    """Per rank: (memory plan honoured, compute-stream reuse waits) from the
    lines BASP_CU_REUSE_STATS makes the CUDA backend print."""
    got = {}
    for line in open(log):
        m = re.match(r"cuda reuse: rank (\d+): (.*), (\d+) compute-stream waits", line)
        if m:
            got[int(m.group(1))] = (m.group(2) == "memory plan", int(m.group(3)))
    return [got.get(r, (False, 0)) for r in range(np)]


def main():
    ap = argparse.ArgumentParser()
    for a in ("--baspc", "--mpirun", "--mkcorpus", "--spec", "--workdir", "--probe"):
        ap.add_argument(a, required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rtol", type=float, default=LOSS_RTOL, help="per-step loss tolerance (relative)")
    ap.add_argument("--np", type=int, default=1)
    ap.add_argument("--layout", action="append", default=[], help="k=v for --set (with --np)")
    ap.add_argument("--cuda-build", help="command that builds {exe} from the generated C program {c}")
    ap.add_argument("--min-reuse-waits", type=int, default=0,
                    help="require the memory plan and this many cross-stream reuse waits per rank (CUDA run)")
    a = ap.parse_args()
    probe = subprocess.run([a.probe], capture_output=True, text=True)
    print(probe.stdout.strip())
    if probe.returncode == 77:
        return 77
    os.makedirs(a.workdir, exist_ok=True)
    data = os.path.join(a.workdir, "corpus.bin")
    run([a.mkcorpus, data], os.path.join(a.workdir, "mkcorpus.log"))
    sets = ["mesh.nodes=1", "mesh.devices_per_node=1"] if a.np == 1 else a.layout
    layout = [w for kv in sets for w in ("--set", kv)]
    curves = {}
    reuse_bad = None
    for target in ("cpu", "cuda"):
        exe = os.path.join(a.workdir, "train_" + target)
        log = os.path.join(a.workdir, "build_%s.log" % target)
        if target == "cuda" and a.cuda_build:
            c = exe + ".c"
            run([a.baspc, a.spec, "-q", "--target=cuda", "--emit=c", "-o", c] + layout, log)
            run([w.replace("{c}", c).replace("{exe}", exe) for w in shlex.split(a.cuda_build)], log + ".cc")
        else:
            run([a.baspc, a.spec, "-q", "--target=" + target, "-o", exe] + layout, log)
        metrics = os.path.join(a.workdir, "metrics_%s.jsonl" % target)
        runlog = os.path.join(a.workdir, "run_%s.log" % target)
        if target == "cuda" and a.min_reuse_waits:
            os.environ["BASP_CU_REUSE_STATS"] = "1"
        run([a.mpirun, "-np", str(a.np), exe, "--data", data, "--steps", str(a.steps), "--quiet",
             "--metrics", metrics], runlog)
        curves[target] = losses(metrics)
        if target == "cuda" and a.min_reuse_waits:
            stats = reuse_waits(runlog, a.np)
            print("memory plan and compute-stream reuse waits per rank: %s" % stats)
            if not all(planned and n >= a.min_reuse_waits for planned, n in stats):
                reuse_bad = "FAILED: the CUDA run must honour the memory plan with at least %d cross-stream " \
                            "reuse waits on every rank (%s)" % (a.min_reuse_waits, runlog)
    cpu, gpu = curves["cpu"], curves["cuda"]
    bad = 0
    for i, (c, g) in enumerate(zip(cpu, gpu)):
        rel = abs(g - c) / abs(c)
        flag = "" if rel <= a.rtol else "  <-- over %.0e" % a.rtol
        bad += rel > a.rtol
        print("step %3d  cpu %.6f  cuda %.6f  rel %.2e%s" % (i + 1, c, g, rel, flag))
    if len(cpu) != a.steps or len(gpu) != a.steps:
        print("expected %d steps, got cpu %d, cuda %d" % (a.steps, len(cpu), len(gpu)))
        return 1
    if reuse_bad:
        print(reuse_bad)
        return 1
    if not gpu[-1] < gpu[0]:
        print("the GPU loss did not fall: %.4f -> %.4f" % (gpu[0], gpu[-1]))
        return 1
    print("%s: %d of %d steps over the tolerance" % ("FAILED" if bad else "passed", bad, a.steps))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
