#!/usr/bin/env python3
"""Training on the GPU against the CPU backend.

Compiles SPEC for one rank (or for --np ranks with the --layout settings)
twice -- `baspc --target=cpu` and `baspc --target=cuda` -- trains both for
--steps steps on the same data and seed (the demo corpus from
data/mkcorpus), and compares:
  - the loss at every step:          |cuda - cpu| / |cpu|
  - the last step's gradients:       max|cuda - cpu| / max|cpu|, per tensor
  - the final weights:               max|cuda - cpu| / max|cpu|, per tensor
  - each parameter's training update: ||cuda - cpu|| / ||cpu - init|| (2-norms),
    per tensor: how far the CUDA run left the parameter from where the CPU
    run took it, relative to how far the CPU run moved it from its initial
    value (init: the CPU program run for 0 steps; both runs start there)
Both runs write --save-grads and --save-weights (full fp32 tensors gathered
from the shards, tests/testlib.py read_tensors), as the CPU equivalence
tests do (tests/train/equiv.py); per kind the worst tensor and its error
are printed, and every tensor over its tolerance is a mismatch.

Tolerances: --tolerances emu (the emulator) or gpu (a real GPU, the
default); --rtol, --grad-rtol, --weight-rtol and --update-rtol override one
kind.  The CUDA backend stores activations and gradients in bf16 (8
significant bits: a relative rounding of up to 2^-9 = 2e-3 each time) with
fp32 master weights, moments and accumulation; the CPU backend is fp32
throughout.  So the two runs are not expected to agree to fp32 precision
as the CPU layouts do among themselves (equiv.py: 1e-5, 1e-4, 1e-3).

  emu  loss 5e-3, gradients 0.3, weights 0.15, updates 0.2.  Under the
       emulator (emu/README.md) the GEMMs are OpenBLAS's fp32 on both
       sides, so the runs differ by bf16 rounding alone.  Worst measured
       over the 12 emulated layouts (20 steps of tiny_gqa; 30 steps on one
       rank gave no more): loss 6.9e-4; gradients 0.135 (l1.wq: the q and k
       projections' gradients are tiny -- 5e-6 against 1e-2 for the MLP --
       because the scores of a barely trained model are almost uniform, so
       they are mostly cancellation, and rounding the terms to bf16 is a
       large part of what is left); weights 0.090 (w_down: AdamW moves an
       element whose gradient is mostly noise by up to lr per step either
       way, so bf16 noise in such a gradient becomes up to 20 lr = 2e-2
       absolute, seen 4e-3, against max|w| = 0.05); updates 0.034, and
       0.084 for the 8-element k_norm of the Qwen features (one element's
       drift is a large part of its norm).  Each tolerance is about 2x the
       worst seen (the loss's 7x: it was 5e-3 before the tensor checks).
  gpu  loss 3e-2, gradients 0.6, weights 0.3, updates 0.4: twice the
       emulator's tensor tolerances, and the loss 6x.  On a GPU the roundings
       to bf16 are the same but the fp32 values rounded differ: cuBLAS sums
       in another order (tensor cores, its own tiling), the embedding and
       RMSNorm-weight backwards add with atomics in a run-dependent order,
       and the device's exp2f and rsqrtf differ from the host's in the last
       bits.  Each of these only decides which
       way some bf16 roundings go, so the drift should be of the emulator's
       size, but it is not measured here, hence the factor 2.

The update check is the one that catches a parameter that trains wrongly
(not at all, from a wrong gradient, with the wrong step): the training
update of every parameter is then off by about its own size (error ~1),
five times the tolerance on a GPU; and since AdamW's step is about lr per
element whatever the gradient's size, the loss -- an average over the
whole model -- barely notices.

--plant workspace:half halves every device workspace slot's planned size in
the generated program (rt_program.ws_slot_bytes), and expects the run to
say so: a kernel outgrowing its slot gets a buffer of its own and the
warning this script fails a run on; exit 0 when it does, 1 when not.

--plant frozen:PARAM (e.g. frozen:l1.wk) removes PARAM's `rt_adamw` call
from the generated C program of the CUDA build, so PARAM never trains,
and then expects the comparison to fail: exit 0 when the per-tensor checks
flag a mismatch, 1 when they do not (whatever the loss says).  With
--cuda-build the patched program is linked by that command; without it
(a real GPU), `baspc -v --keep-c` builds the program once, which gives the C
program and the compiler command baspc ran, and the patched program is
compiled by that same command.  Frozen l1.wk under the emulator: the loss
is off by at most 5.5e-4 (4 ranks, 20 steps; 6.3e-4 on one rank over 30),
no more than without the bug and inside both loss tolerances, while the
update of l1.wk is off by 1.0, its weights by 0.21 (0.30 at 30 steps) and
l1.wq's gradient by 0.68 (0.93).  The output says whether the loss alone
would have caught it.

With --cuda-build the CUDA binary is not linked by baspc but by that
command from `baspc --emit=c` (its {c} and {exe} are filled in): the
emulator tests (emu/README.md) link the same generated program against the
backend built for cuemu.  --np and --layout train on several ranks (both
targets get the same layout), which runs the backend's NCCL collectives;
with one rank, --layout adds other settings (train.offload=all, say).

--min-reuse-waits N (the emulator tests) checks that the CUDA run honoured
the compiler's memory plan and that buffer reuse crossed the two streams:
with BASP_CU_REUSE_STATS set the backend reports, per rank, how often the
compute stream had to wait for a collective before writing bytes a freed
buffer had held (runtime/README.md, CUDA backend); every rank must report
the plan and at least N such waits, so the run really depends on those
fences.

--documents trains on packed documents: mkcorpus also writes corpus.txt,
tests/train/mkdocs.py cuts it into documents of a long tail (some longer
than a row) ended by token 0, and both builds get --set
train.documents=on --set train.eot_token=0 (attention within each
document, RoPE positions restarting in each; runtime/README.md).

--graph-same runs the CUDA program a second time with BASP_CUDA_GRAPH=on
(runtime/README.md, "CUDA graphs": each step function eager once, captured
on its second call, launched as graphs after) and requires the same
results as the eager run it follows: every step's loss and gradient norm,
the validation loss, and the saved weights and gradients byte for byte
(--graph-rtol R: the losses and norms within R relative, and
--graph-tensor-rtol T: each tensor's largest difference within T of its
largest entry; for a GPU, where atomic sums make two eager runs differ in
the last bits, which flips bf16 roundings and grows with the steps), at least steps - 2 graph launches
(BASP_CU_GRAPH_STATS), and "a2a not timed" on the launched steps; the
graph run also validates every 2 steps, so eager work runs between its
launches.  A graph
that froze a step's scalars (the learning rate, AdamW's step count, the
clip factor) or missed work of the step's host code trains differently
from the second launched step on.

Exit status 77 (CTest: skipped) when --probe says there is no GPU.
"""
import argparse
import json
import math
import os
import re
import shlex
import subprocess
import sys

# (loss, gradients, weights, updates): relative tolerances, see above.
TOLERANCES = {
    "gpu": (3e-2, 6e-1, 3e-1, 4e-1),
    "emu": (5e-3, 3e-1, 1.5e-1, 2e-1),
}

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import read_tensors, run, tensor_errors  # noqa: E402


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


def plant_workspace(c):
    """Halves every slot size of the program's workspace region table."""
    src = open(c).read()
    m = re.search(r"\.ws_slot_bytes = \(const int64_t\[\]\)\{([^}]*)\}", src)
    if not m:
        sys.exit("--plant workspace:half: no workspace table in %s" % c)
    half = ", ".join(str(int(x) // 2) for x in m.group(1).split(","))
    open(c, "w").write(src[:m.start(1)] + half + src[m.end(1):])
    print("planted bug: every device workspace slot planned at half its size (%s)" % c)


def plant_frozen(c, param):
    """Removes the rt_adamw call of PARAM (the line after its `adamw %PARAM,`
    comment) from the C program c, in place; exits when there is not
    exactly one."""
    lines = open(c).read().split("\n")
    out, hits, i = [], 0, 0
    while i < len(lines):
        line = lines[i]
        if line.strip().startswith("/* adamw %%%s, " % param) and i + 1 < len(lines) \
                and lines[i + 1].strip().startswith("rt_adamw("):
            out.append(line.replace("/* adamw", "/* planted bug, removed: adamw", 1))
            hits += 1
            i += 2
            continue
        out.append(line)
        i += 1
    if hits != 1:
        sys.exit("--plant frozen:%s: %d adamw calls of %%%s in %s, expected 1" % (param, hits, param, c))
    open(c, "w").write("\n".join(out))
    print("planted bug: %s is never updated (its rt_adamw call removed from %s)" % (param, c))


def baspc_compile_command(log):
    """The C compiler command baspc -v printed into log (argv)."""
    for line in open(log):
        if line.startswith("baspc: ") and " -o " in line and not line.startswith("baspc: compiling"):
            return shlex.split(line[len("baspc: "):])
    sys.exit("no compile command in %s (baspc -v)" % log)


def memory_mismatch(a, layout, metrics):
    """The CUDA run's peak (arena high-water mark plus device workspaces)
    against `baspc --memory --target=cuda`'s peak_bytes_per_rank: the plan
    accounts every workspace the backend allocates, so the run must not
    exceed it (a few exchanges stage 8 KiB less than planned; the plan also
    holds cuDNN attention's workspace bound and softmax statistics, which a
    run on the basp attention kernels, e.g. under the emulator, does not
    allocate).  None when it does not, else the message."""
    r = subprocess.run([a.baspc, a.spec, "-q", "--target=cuda", "--memory", "--json"] + layout,
                       capture_output=True, text=True)
    want = json.loads(r.stdout)["peak_bytes_per_rank"]
    got = max(json.loads(l)["mem_peak_bytes"] for l in open(metrics) if l.strip())
    print("memory: measured peak %d bytes per rank, baspc --memory %d (%+d)" % (got, want, got - want))
    if got > want:
        return "FAILED: the CUDA run's peak memory %d exceeds the plan's %d" % (got, want)
    # Offloaded values: the pinned host arena's high-water mark is the
    # plan's host arena, exactly (every host buffer is live at the turn from
    # forward to backward).
    host_want = json.loads(r.stdout).get("host_bytes_per_rank")
    if host_want is not None:
        host_got = max(json.loads(l).get("mem_host_peak_bytes", -1) for l in open(metrics) if l.strip())
        print("host memory: measured peak %d bytes per rank, baspc --memory %d" % (host_got, host_want))
        if host_got != host_want:
            return "FAILED: the CUDA run's host memory peak %d is not the plan's %d" % (host_got, host_want)
    return None


def dynamic_groups(a):
    """batch_aware dynamic: the CUDA run must have placed the same groups
    with the same pieces as the CPU run in every micro-step (else the two
    trained on differently cut documents and their comparison means
    nothing), and used every size of --want-sizes.  None when so, else the
    message."""
    logs = {}
    for target in ("cpu", "cuda"):
        path = os.path.join(a.workdir, target + ".groups.jsonl")
        logs[target] = [[(g["first"], g["size"], g["pieces"]) for g in json.loads(l)["groups"]]
                        for l in open(path) if l.strip()]
    if logs["cpu"] != logs["cuda"]:
        return "FAILED: the CPU and CUDA runs assigned different groups (%s.groups.jsonl)" % os.path.join(a.workdir, "*")
    seen = sorted({(f, k) for step in logs["cuda"] for f, k, _ in step})
    sizes = {k for _, k in seen}
    print("dynamic groups: %d micro-steps, placements (first, size) %s" % (len(logs["cuda"]), seen))
    missing = [k for k in map(int, a.want_sizes.split(",")) if k not in sizes]
    if missing:
        return "FAILED: no micro-step had a group of %s rank(s)" % ", ".join(map(str, missing))
    return None


def build_cuda(a, exe, layout, log):
    """The CUDA program exe: from baspc, or, with --cuda-build or a plant,
    from the generated C program (patched by the plant)."""
    if not a.cuda_build and not a.plant:
        run([a.baspc, a.spec, "-q", "--target=cuda", "-o", exe] + layout, log)
        return
    c = exe + ".c"
    if a.cuda_build:
        run([a.baspc, a.spec, "-q", "--target=cuda", "--emit=c", "-o", c] + layout, log)
        cmd = [w.replace("{c}", c).replace("{exe}", exe) for w in shlex.split(a.cuda_build)]
    else:
        # baspc's own build, once, for its C program (--keep-c) and command (-v).
        run([a.baspc, a.spec, "-v", "--target=cuda", "--keep-c", "-o", exe] + layout, log)
        cmd = baspc_compile_command(log)
        o = cmd.index("-o")
        cmd[o - 1], cmd[o + 1] = c, exe  # baspc compiles a temporary copy: FILE.c -o EXE
    kind, param = a.plant.split(":", 1) if a.plant else (None, None)
    if kind == "frozen":
        plant_frozen(c, param)
    elif kind == "workspace":
        plant_workspace(c)
    run(cmd, log + ".cc")


def compare_kind(kind, errors, problems, rtol):
    """One kind of per-tensor error (grads, weights, updates): prints the
    worst tensor, returns the mismatch messages."""
    bad = ["%s: %s" % (kind, p) for p in problems]
    worst = max(errors.items(), key=lambda kv: kv[1], default=("-", 0.0))
    for name, err in errors.items():
        if not err <= rtol:
            bad.append("%s %s: relative error %.3g (tolerance %.2g)" % (kind, name, err, rtol))
    print("%-7s %3d tensors, worst relative error %.3g (%s), tolerance %.2g"
          % (kind, len(errors), worst[1], worst[0], rtol))
    return bad


def update_errors(init, ref, got):
    """Per parameter: ||got - ref|| / ||ref - init|| (2-norms): how far the
    CUDA run's training moved a parameter away from where the CPU run's
    moved it, relative to how far that was."""
    errors = {}
    for name, w0 in init.items():
        if name not in ref or name not in got or not len(ref[name]) == len(got[name]) == len(w0):
            continue  # reported by the weights comparison
        diff = math.sqrt(sum((x - y) ** 2 for x, y in zip(got[name], ref[name])))
        moved = math.sqrt(sum((y - z) ** 2 for y, z in zip(ref[name], w0)))
        errors[name] = diff / max(moved, 1e-30)
    return errors


def graph_same(a, data, bs):
    """The CUDA program again with BASP_CUDA_GRAPH=on against its eager run
    (cuda.*): None when the same, else what differs."""
    exe, out = os.path.join(a.workdir, "train_cuda"), os.path.join(a.workdir, "cuda_graph")
    log = os.path.join(a.workdir, "run_cuda_graph.log")
    env = dict(os.environ, BASP_CUDA_GRAPH="on", BASP_CU_GRAPH_STATS="1")
    for f in (".weights", ".grads", ".jsonl"):
        if os.path.exists(out + f):
            os.remove(out + f)
    # A validation every 2 steps besides the last: eager work between the
    # launches (its own forward, caches it may set up) must leave the graphs
    # right, and the training the same.
    cmd = [a.mpirun, "-np", str(a.np), exe, "--data", data, "--steps", str(a.steps), "--metrics", out + ".jsonl",
           "--save-weights", out + ".weights", "--save-grads", out + ".grads", "--val-data", data,
           "--val-tokens", str(2 * bs), "--val-every", "2"]
    with open(log, "w") as f:
        r = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, env=env)
    text = open(log).read()
    if r.returncode != 0:
        return "FAILED: the CUDA graph run exited %d (%s):\n%s" % (r.returncode, log, text[-3000:])
    m = re.search(r"cuda graphs: (\d+) capture\(s\), (\d+) launch\(es\)", text)
    if not m or int(m.group(2)) < a.steps - 2:
        return "FAILED: expected at least %d graph launches, the run says %s (%s)" % (
            a.steps - 2, m.group(0) if m else "nothing", log)
    if "a2a not timed (CUDA graph)" not in text and a.steps > 2:
        return "FAILED: the launched steps do not say their collectives went untimed (%s)" % log

    def close(x, y):
        if a.graph_rtol == 0:
            return x == y
        return abs(x - y) <= a.graph_rtol * max(abs(x), abs(y), 1e-12)

    tensor_rtol = a.graph_rtol if a.graph_tensor_rtol is None else a.graph_tensor_rtol
    eager = [json.loads(l) for l in open(os.path.join(a.workdir, "cuda.jsonl"))]
    graph = [json.loads(l) for l in open(out + ".jsonl")]
    if len(eager) != len(graph):
        return "FAILED: the graph run wrote %d metric lines, the eager one %d" % (len(graph), len(eager))
    for e, g in zip(eager, graph):
        for k in ("loss", "grad_norm", "val_loss"):
            if k in e and not close(e[k], g.get(k, float("nan"))):
                return "FAILED: step %d's %s: eager %r, CUDA graph %r" % (e["step"], k, e[k], g.get(k))
    for f in (".weights", ".grads"):
        ea, ga = read_tensors(os.path.join(a.workdir, "cuda" + f)), read_tensors(out + f)
        errs, problems = tensor_errors(ea, ga)
        if problems:
            return "FAILED: the CUDA graph run's %s: %s" % (f[1:], "; ".join(problems))
        for name, err in sorted(errs.items()):
            if err > tensor_rtol:  # max |graph - eager| / max |eager| per tensor: 0 when byte for byte
                return "FAILED: %s of %s differ between the eager and the CUDA graph run by %.3g (tolerance %.2g)" % (
                    f[1:], name, err, tensor_rtol)
    print("CUDA graphs: %s, %d steps: losses, norms, validation, weights and gradients %s the eager run's"
          % (m.group(0), a.steps, "equal" if a.graph_rtol == 0 and tensor_rtol == 0 else
             "within %.2g (tensors %.2g) of" % (a.graph_rtol, tensor_rtol)))
    return None


def main():
    ap = argparse.ArgumentParser()
    for a in ("--baspc", "--mpirun", "--mkcorpus", "--spec", "--workdir", "--probe"):
        ap.add_argument(a, required=True)
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--tolerances", choices=sorted(TOLERANCES), default="gpu",
                    help="gpu (a real GPU, the default) or emu (the emulator)")
    ap.add_argument("--rtol", type=float, help="per-step loss tolerance (relative; overrides --tolerances)")
    ap.add_argument("--grad-rtol", type=float, help="per-tensor gradient tolerance (overrides --tolerances)")
    ap.add_argument("--weight-rtol", type=float, help="per-tensor weight tolerance (overrides --tolerances)")
    ap.add_argument("--update-rtol", type=float, help="per-tensor update tolerance (overrides --tolerances)")
    ap.add_argument("--np", type=int, default=1)
    ap.add_argument("--layout", action="append", default=[], help="k=v for --set (the mesh with --np; other keys with any --np)")
    ap.add_argument("--cuda-build", help="command that builds {exe} from the generated C program {c}")
    ap.add_argument("--min-reuse-waits", type=int, default=0,
                    help="require the memory plan and this many cross-stream reuse waits per rank (CUDA run)")
    ap.add_argument("--memory-exact", action="store_true",
                    help="require the CUDA run's peak memory to stay within baspc --memory --target=cuda's")
    ap.add_argument("--documents", action="store_true",
                    help="train on packed documents (mkdocs.py data, train.documents=on, eot token 0)")
    ap.add_argument("--want-sizes", metavar="K,K,...",
                    help="batch_aware dynamic: both runs log their groups (--assignments); they must be the same, "
                         "and every size listed must occur")
    ap.add_argument("--graph-same", action="store_true",
                    help="also run the CUDA program with BASP_CUDA_GRAPH=on and require the eager run's results")
    ap.add_argument("--graph-rtol", type=float, default=0.0,
                    help="--graph-same's relative tolerance on losses and norms (0: byte for byte)")
    ap.add_argument("--graph-tensor-rtol", type=float,
                    help="--graph-same's tolerance per tensor, max difference over max entry (default --graph-rtol)")
    ap.add_argument("--plant", metavar="frozen:PARAM|workspace:half",
                    help="remove PARAM's adamw call from the CUDA program, or halve its workspace slots, and expect "
                         "the comparison to fail")
    a = ap.parse_args()
    if a.plant and a.plant != "workspace:half" and (not a.plant.startswith("frozen:") or
                                                   len(a.plant) == len("frozen:")):
        ap.error("--plant takes frozen:PARAM or workspace:half")
    loss_rtol, grad_rtol, weight_rtol, update_rtol = TOLERANCES[a.tolerances]
    update_rtol = a.update_rtol if a.update_rtol is not None else update_rtol
    loss_rtol = a.rtol if a.rtol is not None else loss_rtol
    grad_rtol = a.grad_rtol if a.grad_rtol is not None else grad_rtol
    weight_rtol = a.weight_rtol if a.weight_rtol is not None else weight_rtol
    probe = subprocess.run([a.probe], capture_output=True, text=True)
    print(probe.stdout.strip())
    if probe.returncode == 77:
        return 77
    os.makedirs(a.workdir, exist_ok=True)
    data, text = os.path.join(a.workdir, "corpus.bin"), os.path.join(a.workdir, "corpus.txt")
    run([a.mkcorpus, data, text], os.path.join(a.workdir, "mkcorpus.log"))
    # One rank: a 1 x 1 mesh, plus any other --layout settings (offload, say).
    sets = (["mesh.nodes=1", "mesh.devices_per_node=1"] if a.np == 1 else []) + list(a.layout)
    if a.documents:
        data = os.path.join(a.workdir, "docs.bin")
        mkdocs = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "train", "mkdocs.py")
        run([sys.executable, mkdocs, text, data], os.path.join(a.workdir, "mkdocs.log"))
        sets += ["train.documents=on", "train.eot_token=0"]
    layout = [w for kv in sets for w in ("--set", kv)]
    curves, weights, grads, vals = {}, {}, {}, {}
    reuse_bad = None
    for target in ("cpu", "cuda"):
        exe = os.path.join(a.workdir, "train_" + target)
        log = os.path.join(a.workdir, "build_%s.log" % target)
        if target == "cuda":
            build_cuda(a, exe, layout, log)
        else:
            run([a.baspc, a.spec, "-q", "--target=" + target, "-o", exe] + layout, log)
        out = os.path.join(a.workdir, target)
        for f in (".weights", ".grads"):
            if os.path.exists(out + f):
                os.remove(out + f)  # never compare a previous run's files
        runlog = os.path.join(a.workdir, "run_%s.log" % target)
        if target == "cuda" and a.min_reuse_waits:
            os.environ["BASP_CU_REUSE_STATS"] = "1"
        # One validation (two batches) after the last step: the forward-only
        # program on the device against the CPU's.
        run([a.baspc, a.spec, "--print-spec"] + layout, out + ".spec")
        spec = [l.split() for l in open(out + ".spec")]
        bs = [int(w[1]) for w in spec if w[:1] == ["micro_batch"]][0] * [int(w[1]) for w in spec if w[:1] == ["seq_len"]][0]
        run([a.mpirun, "-np", str(a.np), exe, "--data", data, "--steps", str(a.steps), "--quiet",
             "--metrics", out + ".jsonl", "--save-weights", out + ".weights", "--save-grads", out + ".grads",
             "--val-data", data, "--val-tokens", str(2 * bs)]
            + (["--assignments", out + ".groups.jsonl"] if a.want_sizes else []),
            runlog)
        vals[target] = [json.loads(l)["val_loss"] for l in open(out + ".jsonl") if '"val_loss"' in l]
        if target == "cpu":
            # The initial weights (the CUDA run starts from the same ones).
            run([a.mpirun, "-np", str(a.np), exe, "--data", data, "--steps", "0", "--quiet",
                 "--save-weights", out + ".init"],
                os.path.join(a.workdir, "init_cpu.log"))
        curves[target] = losses(out + ".jsonl")
        weights[target] = read_tensors(out + ".weights")
        grads[target] = read_tensors(out + ".grads")
        if target == "cuda" and a.min_reuse_waits:
            stats = reuse_waits(runlog, a.np)
            print("memory plan and compute-stream reuse waits per rank: %s" % stats)
            if not all(planned and n >= a.min_reuse_waits for planned, n in stats):
                reuse_bad = "FAILED: the CUDA run must honour the memory plan with at least %d cross-stream " \
                            "reuse waits on every rank (%s)" % (a.min_reuse_waits, runlog)
        if target == "cuda":
            # Without --profile the table's times are the host's launch
            # times, and the run must say so rather than pass them off as
            # each kind's work.
            log_text = open(runlog).read()
            # What ran the attention, and any warning of the run (a shape
            # a one-time check refused), for the test's output.
            for line in log_text.splitlines():
                if line.startswith(("attention:", "warning:")):
                    print("cuda run: %s" % line)
            # An attention backward without its forward's cuDNN statistics
            # (say, on an offloaded and fetched output) runs the basp
            # kernels: right, but some ten times slower on a GPU.
            if "no cuDNN softmax statistics" in log_text:
                reuse_bad = reuse_bad or "FAILED: an attention backward found no cuDNN softmax statistics " \
                                         "for its forward (%s)" % runlog
            # A kernel that asks a shared workspace slot for more than the
            # plan placed (ir/ir_mem_work.c) leaves the region: correct, but
            # past the planned peak, so the plan's size was wrong.
            if "warning: device workspace" in log_text:
                reuse_bad = reuse_bad or "FAILED: a device workspace outgrew its place in the planned region " \
                                         "(%s)" % runlog
            if "time by kind" in log_text and "kernels run asynchronously" not in log_text:
                reuse_bad = reuse_bad or "FAILED: the CUDA run's time-by-kind table does not say it holds launch " \
                                         "times (%s)" % runlog
        if target == "cuda" and a.memory_exact:
            reuse_bad = reuse_bad or memory_mismatch(a, layout, out + ".jsonl")
    reuse_bad = reuse_bad or (dynamic_groups(a) if a.want_sizes else None)
    if a.graph_same:
        reuse_bad = reuse_bad or graph_same(a, data, bs)
    cpu, gpu = curves["cpu"], curves["cuda"]
    loss_bad, worst = [], (0.0, 0)
    for i, (c, g) in enumerate(zip(cpu, gpu)):
        rel = abs(g - c) / max(abs(c), 1e-12)
        worst = max(worst, (rel, i + 1))
        flag = "" if rel <= loss_rtol else "  <-- over %.1g" % loss_rtol
        if not rel <= loss_rtol:
            loss_bad.append("loss at step %d: cuda %.6f, cpu %.6f (relative error %.3g)" % (i + 1, g, c, rel))
        print("step %3d  cpu %.6f  cuda %.6f  rel %.2e%s" % (i + 1, c, g, rel, flag))
    if len(cpu) != a.steps or len(gpu) != a.steps:
        print("expected %d steps, got cpu %d, cuda %d" % (a.steps, len(cpu), len(gpu)))
        return 1
    if a.plant == "workspace:half":
        print(reuse_bad or "no workspace warning")
        if reuse_bad and "device workspace outgrew" in reuse_bad:
            print("the halved workspace was caught, as expected")
            return 0
        print("FAILED: the planted workspace sizes went unnoticed")
        return 1
    if reuse_bad:
        print(reuse_bad)
        return 1
    if len(vals["cpu"]) != 1 or len(vals["cuda"]) != 1:
        loss_bad.append("one validation expected, got cpu %s, cuda %s" % (vals["cpu"], vals["cuda"]))
    else:
        vc, vg = vals["cpu"][0], vals["cuda"][0]
        rel = abs(vg - vc) / max(abs(vc), 1e-12)
        print("val_loss  cpu %.6f  cuda %.6f  rel %.2e (tolerance %.2g)" % (vc, vg, rel, loss_rtol))
        if not rel <= loss_rtol:
            loss_bad.append("val_loss: cuda %.6f, cpu %.6f (relative error %.3g)" % (vg, vc, rel))
    if not gpu[-1] < gpu[0]:
        loss_bad.append("the GPU loss did not fall: %.4f -> %.4f" % (gpu[0], gpu[-1]))
    print("CUDA (%s tolerances) vs CPU, %d steps, %d rank(s)%s%s"
          % (a.tolerances, a.steps, a.np, "".join(" " + s for s in a.layout),
             ", packed documents" if a.documents else ""))
    print("loss    %3d steps,   worst relative error %.3g (step %d), tolerance %.2g"
          % (len(cpu), worst[0], worst[1], loss_rtol))
    errs, problems = tensor_errors(grads["cpu"], grads["cuda"])
    tensor_bad = compare_kind("grads", errs, problems, grad_rtol)
    errs_w, problems = tensor_errors(weights["cpu"], weights["cuda"])
    tensor_bad += compare_kind("weights", errs_w, problems, weight_rtol)
    init = read_tensors(os.path.join(a.workdir, "cpu.init"))
    errs_u = update_errors(init, weights["cpu"], weights["cuda"])
    tensor_bad += compare_kind("updates", errs_u, [], update_rtol)
    for b in (loss_bad + tensor_bad)[:20]:
        print("  MISMATCH " + b)
    if len(loss_bad + tensor_bad) > 20:
        print("  ... and %d more" % (len(loss_bad + tensor_bad) - 20))
    if a.plant:
        param = a.plant.split(":", 1)[1]
        print("planted %s: the loss alone %s (worst %.3g, tolerance %.2g); per tensor: weights of %s off by "
              "%.3g (tolerance %.2g), its update by %.3g (tolerance %.2g), its gradients by %.3g (tolerance %.2g)"
              % (a.plant, "catches it" if loss_bad else "does NOT catch it", worst[0], loss_rtol, param,
                 errs_w.get(param, float("nan")), weight_rtol, errs_u.get(param, float("nan")), update_rtol,
                 errs.get(param, float("nan")), grad_rtol))
        if tensor_bad:
            print("mismatch detected by the per-tensor comparison, as expected")
            return 0
        print("FAILED: the planted bug went unnoticed by the per-tensor comparison")
        return 1
    bad = loss_bad + tensor_bad
    print("%s: %d mismatches (%d of %d steps over the loss tolerance)"
          % ("FAILED" if bad else "passed", len(bad), len(loss_bad), a.steps))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
