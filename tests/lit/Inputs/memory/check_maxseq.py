#!/usr/bin/env python3
"""Checks `baspc --max-seq-len --json` against `baspc --memory --json`.

usage: check_maxseq.py BASPC SPEC MAXSEQ.json [--set K=V ...]

For every row: the spec with that row's layout (sequence, a2a, groups,
ring_degree written out), recompute and offload settings and its max_seq_len must fit (and have that
peak and host arena; with offload the node's host memory must hold the host arena too), and one step more
must not (unless the row is at the search's cap).  Standard library only.
"""
import json
import subprocess
import sys


def memory(baspc, spec, sets):
    cmd = [baspc, spec, "-q", "--memory", "--json"]
    for s in sets:
        cmd += ["--set", s]
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    return json.loads(r.stdout)


def main():
    baspc, spec, path = sys.argv[1:4]
    extra = [a for a in sys.argv[4:] if a != "--set"]
    rows = json.load(open(path))["rows"]
    bad = 0
    for w in rows:
        if w["illegal"] or w["max_seq_len"] == 0:
            continue
        # the row's own layout, written out (the spec's may be another)
        layout = ["layout.sequence=" + w["sequence"], "layout.a2a=" + w["a2a"],
                  "layout.batch_aware=off" if w["groups"] == 1 else "layout.batch_aware=groups %d" % w["groups"]]
        if w["sequence"] == "hybrid":
            layout.append("layout.ring_degree=%d" % w["ring_degree"])
        base = extra + layout + ["train.recompute=" + w["recompute"], "train.offload=" + w["offload"]]
        at = memory(baspc, spec, base + ["train.seq_len=%d" % w["max_seq_len"]])
        fits = lambda m: m["fits"] and m.get("host_fits", True)
        ok = fits(at) and at["peak_bytes_per_rank"] == w["peak_bytes_per_rank"] and \
            at.get("host_bytes_per_rank", 0) == w["host_bytes_per_rank"]
        if not w["at_cap"]:
            past = memory(baspc, spec, base + ["train.seq_len=%d" % (w["max_seq_len"] + w["step"])])
            ok = ok and not fits(past)
        print("%s %s %s offload %s: max_seq_len %d" % ("ok  " if ok else "FAIL", w["layout"], w["recompute"],
                                                       w["offload"], w["max_seq_len"]))
        bad += not ok
    sys.exit(1 if bad else 0)


main()
