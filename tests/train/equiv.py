#!/usr/bin/env python3
"""Equivalence test: a layout run on N MPI ranks against the single-rank run.

Compiles SPEC twice with baspc -- once for one rank (the reference), once with
the layout under test -- trains both for --steps steps on the same data and
seed, and compares:
  - the loss at every step:        |a - b| <= LOSS_RTOL * |b|
  - the gradients of the last step: max|a - b| <= GRAD_RTOL * max|b| per tensor
  - the final weights:              max|a - b| <= WEIGHT_RTOL * max|b| per tensor
Exit status 0 when everything matches (or, with --expect-mismatch, when
something does not: the test that proves the comparison can fail).
Only the Python standard library is used.
"""
import argparse
import hashlib
import json
import os
import shutil
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import read_tensors, run, verdict  # noqa: E402

# Layouts differ from the single rank only in floating-point summation order
# (fp32).  Losses and gradients agree to ~1e-7 and ~1e-5.  Weights get a
# looser bound: AdamW divides each update by sqrt(v), so an element whose
# gradient is close to zero moves by up to lr per step in a direction that
# rounding noise decides; after 20 steps at lr 1e-3 that is visible at the
# 1e-4 level.  A wrong shard offset or a missing reduction is off by far more
# (the detects_mismatch test and a deliberately broken offset show ~1e-1).
LOSS_RTOL = 1e-5
# The validation loss is one forward of fixed windows with the weights of
# that step: the layouts differ from the one rank in the summation order of
# the forward alone (~1e-7 relative); a wrong scale (the sum divided by the
# group size) is off by a factor of 2 or more.
VAL_RTOL = 1e-6
GRAD_RTOL = 1e-4
WEIGHT_RTOL = 1e-3


def compare_tensors(kind, ref, got, rtol):
    worst, bad = (0.0, ""), []
    if sorted(ref) != sorted(got):
        return ["%s: tensor names differ: %s vs %s" % (kind, sorted(ref), sorted(got))]
    for name in ref:
        a, b = got[name], ref[name]
        if len(a) != len(b):
            bad.append("%s %s: %d vs %d elements" % (kind, name, len(a), len(b)))
            continue
        scale = max(max(abs(x) for x in b), 1e-12)
        err = max(abs(x - y) for x, y in zip(a, b)) / scale
        if err > worst[0]:
            worst = (err, name)
        if not err <= rtol:
            bad.append("%s %s: max error %.3g of max |ref| (tolerance %.1g)" % (kind, name, err, rtol))
    print("  %-7s %3d tensors, worst relative error %.3g (%s), tolerance %.1g"
          % (kind, len(ref), worst[0], worst[1], rtol))
    return bad


def spec_ints(a, name, sets):
    """The train block's whole numbers of the spec with these overrides."""
    out = os.path.join(a.workdir, name + ".spec")
    run([a.baspc, a.spec, "--print-spec"] + a.baspc_arg + [w for s in sets for w in ("--set", s)], out)
    return {w[0]: int(w[1]) for w in (l.split() for l in open(out)) if len(w) == 2 and w[1].isdigit()}


def batch_tokens(a, name, sets):
    """micro_batch x seq_len of the spec with these overrides."""
    t = spec_ints(a, name, sets)
    return t["micro_batch"] * t["seq_len"]


def build_and_train(a, name, np_, sets, val_tokens, extra=()):
    exe = os.path.join(a.workdir, name)
    cmd = [a.baspc, a.spec, "-q", "-o", exe] + a.baspc_arg
    for s in sets:
        cmd += ["--set", s]
    run(cmd, exe + ".build.log")
    # Validation on the training data's first tokens, halfway and at the end
    # (the weights differ between the two); batch_aware dynamic has none.
    val = ["--val-data", a.data, "--val-tokens", str(val_tokens), "--val-every", str(max(a.steps // 2, 1))]
    env_cmd = [a.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(np_),
               "-x", "OPENBLAS_NUM_THREADS=1", exe, "--data", a.data, "--steps", str(a.steps),
               "--seed", str(a.seed if name != "ref" else a.ref_seed),
               "--metrics", exe + ".jsonl", "--save-weights", exe + ".weights",
               "--save-grads", exe + ".grads", "--log-every", str(a.steps)] + (val if val_tokens else []) + list(extra)
    run(env_cmd, exe + ".train.log")
    recs = [json.loads(l) for l in open(exe + ".jsonl") if l.strip()]
    losses = [r["loss"] for r in recs]
    vals = [(r["step"], r["val_loss"]) for r in recs if "val_loss" in r]
    return losses, read_tensors(exe + ".weights"), read_tensors(exe + ".grads"), vals


def cached_reference(a, sets, val_tokens):
    """The one-rank reference run, shared by every case of one CTest run with
    the same spec text, overrides, steps, seed, data and validation (the
    cache directory is emptied by the train.refcache fixture at the start of
    each run, so a rebuilt compiler or runtime never meets a stale result).
    Without --ref-cache every case runs its own."""
    if not a.ref_cache:
        return build_and_train(a, "ref", 1, sets, val_tokens)
    key = json.dumps([open(a.spec).read(), sorted(sets), a.steps, a.ref_seed, os.path.abspath(a.data), val_tokens,
                      sorted((k, v) for k, v in os.environ.items() if k.startswith("BASP_TEST_"))])
    d = os.path.join(a.ref_cache, hashlib.sha256(key.encode()).hexdigest()[:24])
    if not os.path.isdir(d):
        res = build_and_train(a, "ref", 1, sets, val_tokens)
        tmp = "%s.tmp%d" % (d, os.getpid())
        os.makedirs(tmp)
        exe = os.path.join(a.workdir, "ref")
        for ext in (".jsonl", ".weights", ".grads"):
            shutil.copyfile(exe + ext, os.path.join(tmp, "ref" + ext))
        open(os.path.join(tmp, "key.json"), "w").write(key)
        try:
            os.rename(tmp, d)
        except OSError:  # another case stored it first: the same result
            shutil.rmtree(tmp)
        return res
    print("  (the one-rank reference of this spec, overrides and data: shared, %s)" % d)
    ref = os.path.join(d, "ref")
    recs = [json.loads(l) for l in open(ref + ".jsonl") if l.strip()]
    return ([r["loss"] for r in recs], read_tensors(ref + ".weights"), read_tensors(ref + ".grads"),
            [(r["step"], r["val_loss"]) for r in recs if "val_loss" in r])


def check_assignments(path, np_, want):
    """The dynamic run's --assignments: every micro-step's groups tile the
    ranks; `want` (e.g. "3,2,1") must appear as one micro-step's sizes."""
    bad, seen = [], set()
    for line in open(path):
        if not line.strip():
            continue
        r = json.loads(line)
        sizes = [g["size"] for g in r["groups"]]
        firsts = [g["first"] for g in r["groups"]]
        if sum(sizes) != np_ or firsts != [sum(sizes[:i]) for i in range(len(sizes))]:
            bad.append("step %d micro %d: groups %s do not tile %d ranks" % (r["step"], r["micro"], sizes, np_))
        seen.add(",".join(str(s) for s in sorted(sizes, reverse=True)))
    print("  groups  seen (sizes per micro-step): %s" % "; ".join(sorted(seen)))
    if want and want not in seen:
        bad.append("no micro-step had groups of %s ranks (seen: %s)" % (want, sorted(seen)))
    return bad


def dynamic_runs(a):
    """batch_aware dynamic: the layout run first (it logs each micro-step's
    documents), then one rank training on exactly those documents
    (--pieces): one row of micro_batch * seq_len tokens per micro-step.
    Both validate on two batches of B * S tokens, one row each (the dynamic
    program validates as one group of all ranks)."""
    t = spec_ints(a, "layout", a.set + a.layout)
    bs, micro_steps = t["micro_batch"] * t["seq_len"], t.get("global_batch", t["micro_batch"]) // t["micro_batch"]
    assign = os.path.join(a.workdir, "layout.assign.jsonl")
    val = 0 if a.no_val else 2 * bs
    got = build_and_train(a, "layout", a.np, a.set + a.layout, val, ["--assignments", assign])
    one = ["mesh.nodes=1", "mesh.devices_per_node=1", "train.micro_batch=1", "train.seq_len=%d" % bs,
           "train.global_batch=%d" % micro_steps, "layout.batch_aware=off"]
    ref = build_and_train(a, "ref", 1, a.set + one, val, ["--pieces", assign])
    return ref, got, check_assignments(assign, a.np, a.want_groups)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--baspc", required=True)
    p.add_argument("--mpirun", required=True)
    p.add_argument("--data", required=True)
    p.add_argument("--spec", required=True)
    p.add_argument("--np", type=int, required=True)
    p.add_argument("--set", action="append", default=[], help="overrides for both runs")
    p.add_argument("--layout", action="append", default=[], help="overrides for the layout run only")
    p.add_argument("--baspc-arg", action="append", default=[],
                   help="an argument for every baspc call (e.g. --load-pass-plugin=FILE)")
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--ref-seed", type=int, default=None)
    p.add_argument("--workdir", required=True)
    p.add_argument("--expect-mismatch", action="store_true")
    p.add_argument("--ref-cache", default=None, help="share one-rank references in this directory")
    p.add_argument("--dynamic", action="store_true",
                   help="batch_aware dynamic: the reference trains on the documents the layout run logged")
    p.add_argument("--want-groups", default="", help="with --dynamic: sizes one micro-step must have, e.g. 3,2,1")
    p.add_argument("--no-val", action="store_true",
                   help="with --dynamic: no validation (group_sizes without a group of all ranks)")
    a = p.parse_args()
    if a.ref_seed is None:
        a.ref_seed = a.seed
    os.makedirs(a.workdir, exist_ok=True)

    one = ["mesh.nodes=1", "mesh.devices_per_node=1"]
    bad = []
    if a.dynamic:
        ref, got, bad = dynamic_runs(a)
    else:
        # Two batches of the larger micro-batch: whole batches for both runs
        # (the same windows when one micro-batch divides the other).
        val_tokens = 2 * max(batch_tokens(a, "ref", a.set + one), batch_tokens(a, "layout", a.set + a.layout))
        ref = cached_reference(a, a.set + one, val_tokens)
        got = build_and_train(a, "layout", a.np, a.set + a.layout, val_tokens)

    print("%s on %d ranks (%s) vs 1 rank, %d steps" % (os.path.basename(a.spec), a.np,
                                                       " ".join(a.set + a.layout), a.steps))
    rl, gl = ref[0], got[0]
    if len(rl) != a.steps or len(gl) != a.steps:
        bad.append("expected %d losses, got %d (ref) and %d (layout)" % (a.steps, len(rl), len(gl)))
    worst = 0.0
    for i, (x, y) in enumerate(zip(gl, rl)):
        err = abs(x - y) / max(abs(y), 1e-12)
        worst = max(worst, err)
        if not err <= LOSS_RTOL:
            bad.append("step %d: loss %.9g vs reference %.9g (relative error %.3g)" % (i + 1, x, y, err))
    print("  loss    %3d steps,   worst relative error %.3g, tolerance %.1g (first %.6f, last %.6f)"
          % (len(rl), worst, LOSS_RTOL, rl[0] if rl else 0, rl[-1] if rl else 0))
    rv, gv = ref[3], got[3]
    if a.no_val:
        pass  # the sizes hold no group of all ranks, which validates
    elif len(rv) != 2 or [x[0] for x in rv] != [x[0] for x in gv]:
        bad.append("validation after steps %s (ref) and %s (layout), wanted 2" % (rv, gv))
    worst = 0.0
    for (step, y), (_, x) in zip(rv, gv):
        err = abs(x - y) / max(abs(y), 1e-12)
        worst = max(worst, err)
        if not err <= VAL_RTOL:
            bad.append("validation after step %d: val_loss %.9g vs reference %.9g (relative error %.3g)"
                       % (step, x, y, err))
    print("  val     %3d runs,    worst relative error %.3g, tolerance %.1g (%s)"
          % (len(rv), worst, VAL_RTOL, ", ".join("step %d: %.6f" % v for v in rv)))
    bad += compare_tensors("grads", ref[2], got[2], GRAD_RTOL)
    bad += compare_tensors("weights", ref[1], got[1], WEIGHT_RTOL)
    return verdict(bad, a.expect_mismatch)


if __name__ == "__main__":
    sys.exit(main())
