#!/usr/bin/env python3
"""Checks a measured trace (--trace-run) against what the run must contain.

  trace_check.py TRACE --ranks N [--step K] [--profile FILE --steps S] [--ir FILE] [--predicted FILE]

- the Chrome trace form of baspc --trace: per rank a process with a compute
  (tid 0) and a communication (tid 1) thread, complete events ("ph": "X")
  with ts >= 0 and dur >= 0, kernels on tid 0 and collectives on tid 1;
- a rank's kernels run one after another on the CPU: they do not overlap;
- with --profile (rank 0's counters over S identical steps): rank 0's
  events of each kind are that kind's calls / S;
- with --ir (the program's IR after the pipeline, one runtime call per op):
  every rank has one event per op of each kernel and collective kind;
- with --predicted (baspc --trace of the same program): every attention
  event names the implementation ("impl") the cost model priced it at, so
  the runtime and the cost model agree about which kernel runs each op.
Only the standard library."""
import argparse
import collections
import json
import re
import sys

COLL = {"all_to_all", "all_gather", "reduce_scatter", "all_reduce", "send", "recv", "offload", "fetch"}
KERNELS = {"embedding", "embedding_bwd", "rmsnorm", "rmsnorm_bwd", "linear", "linear_bwd", "rope", "rope_bwd",
           "attention", "attention_bwd", "swiglu", "swiglu_bwd", "add", "lm_head_loss", "lm_head_loss_bwd",
           "lm_head_loss_grad", "add_rmsnorm", "add_rmsnorm_bwd", "adamw",
           "mlp", "mlp_bwd", "bias_add", "bias_add_bwd", "ring_attention", "ring_attention_bwd"}
BLOCKS = {"ring_attention", "ring_attention_bwd"}  # one event per block, not per call
ATTENTION = {"attention", "attention_bwd"} | BLOCKS


def main():
    p = argparse.ArgumentParser()
    p.add_argument("trace")
    p.add_argument("--ranks", type=int, required=True)
    p.add_argument("--step", type=int)
    p.add_argument("--profile")
    p.add_argument("--steps", type=int, default=1)
    p.add_argument("--ir")
    p.add_argument("--predicted")
    a = p.parse_args()
    bad = []
    d = json.load(open(a.trace))
    ev = d["traceEvents"]
    if a.step is not None and d["otherData"]["step"] != a.step:
        bad.append("traced step %s, wanted %d" % (d["otherData"]["step"], a.step))
    procs = {e["pid"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    if procs != set(range(a.ranks)):
        bad.append("processes %s, wanted ranks 0..%d" % (sorted(procs), a.ranks - 1))
    per = collections.defaultdict(collections.Counter)
    compute = collections.defaultdict(list)
    for e in (e for e in ev if e["ph"] == "X"):
        if e["ts"] < 0 or e["dur"] < 0:
            bad.append("negative time: %s" % e)
        if e["tid"] != (1 if e["name"] in COLL else 0):
            bad.append("%s on thread %d" % (e["name"], e["tid"]))
        per[e["pid"]][e["name"]] += 1
        if e["tid"] == 0:
            compute[e["pid"]].append((e["ts"], e["ts"] + e["dur"], e["name"]))
    for r, spans in compute.items():
        spans.sort()
        for (s0, e0, n0), (s1, _, n1) in zip(spans, spans[1:]):
            if e0 > s1 + 0.002:  # the file keeps 1 ns
                bad.append("rank %d: %s ends at %.3f us after %s starts at %.3f" % (r, n0, e0, n1, s1))
                break
    if a.profile:
        ops = json.load(open(a.profile))["ops"]
        for name, o in ops.items():
            if name in BLOCKS:
                continue
            want = o["calls"] / a.steps
            if per[0][name] != want:
                bad.append("rank 0: %d %s events, the profile's %d calls over %d steps" % (per[0][name], name,
                                                                                          o["calls"], a.steps))
    if a.ir:
        ir = collections.Counter(m.group(1) for m in re.finditer(r"=\s*([a-z_]+) ", open(a.ir).read()))
        kinds = {k: n for k, n in ir.items() if k not in BLOCKS and (k in COLL or k in KERNELS)}
        for r in range(a.ranks):
            for k, n in sorted(kinds.items()):
                if per[r][k] != n:
                    bad.append("rank %d: %d %s events, the IR has %d %s ops" % (r, per[r][k], k, n, k))
        if not any(k in kinds for k in COLL):
            bad.append("the IR has no collective to compare")
    if a.predicted:
        def impls(events):
            got = collections.defaultdict(set)
            for e in events:
                if e.get("ph") == "X" and e["name"] in ATTENTION:
                    got[e["name"]].add(e.get("args", {}).get("impl"))
            return got
        want, got = impls(json.load(open(a.predicted))["traceEvents"]), impls(ev)
        if not want:
            bad.append("the predicted trace has no attention event to compare")
        for name in sorted(set(want) | set(got)):
            if want[name] != got[name]:
                bad.append("%s: the cost model priced %s, the runtime ran %s" % (name, sorted(map(str, want[name])),
                                                                                sorted(map(str, got[name]))))
    n = sum(sum(c.values()) for c in per.values())
    for b in bad[:20]:
        print("FAIL:", b)
    if bad:
        return 1
    print("trace_check: %d events on %d ranks: %s" % (n, a.ranks, ", ".join(
        "%s %d" % kv for kv in sorted(per[0].items()))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
