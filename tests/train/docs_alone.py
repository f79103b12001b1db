#!/usr/bin/env python3
"""Packed documents are independent: a row holding documents A and B has the
losses of A and of B each trained alone.

Two documents A and B of S/2 tokens each (end-of-text token included) are
taken from the corpus.  With seq_len S and one row per step, a data file
holding only A gives rows "A A" (each half is A alone: positions restart,
attention stays inside the document), so its loss is A's mean token loss
lA; likewise lB.  A data file holding A and B gives rows AA, AB, BA or BB,
drawn by the step's seed; with the document mask, the restarted positions
and the ignored last targets, a row AB or BA has the loss (lA + lB) / 2
exactly (the same counted targets on both sides).  All runs start from the
same saved weights (--init-from; 30 steps trained on A and B, so that
what a token attends to shows in its loss) and train one step, so only the
draw differs.  Without the document mask B would see A's tokens: the mixed
rows then miss (lA + lB) / 2 by 7e-4 relative, 70x the tolerance.  (RoPE
is relative: inside a masked document, where its positions start does not
change the scores, so this test cannot see the restarted positions; the
layout equivalence tests run them through every sharding.)

Tolerance: the same weights and kernels on one rank; only the order of the
fp32 sums in the loss differs (two halves summed against one whole):
relative 1e-5, the equivalence tests' loss tolerance.

Usage: docs_alone.py --baspc B --mpirun M --corpus corpus.txt --spec SPEC
                     --workdir DIR [--np N --set k=v ...]
"""
import argparse
import json
import os
import struct
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
from testlib import run  # noqa: E402

RTOL = 1e-5
EOT = 0


def write_tokens(path, toks):
    header = [20240520, 1, len(toks)] + [0] * 253
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(toks), *toks))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--baspc", required=True)
    p.add_argument("--mpirun", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--spec", required=True)
    p.add_argument("--workdir", required=True)
    p.add_argument("--np", type=int, default=1)
    p.add_argument("--set", action="append", default=[])
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--draws", type=int, default=8)
    a = p.parse_args()
    os.makedirs(a.workdir, exist_ok=True)
    S, half = a.seq_len, a.seq_len // 2
    text = open(a.corpus, "rb").read()
    doc_a = list(text[1000:1000 + half - 1]) + [EOT]
    doc_b = list(text[5000:5000 + half - 1]) + [EOT]
    files = {"A": doc_a, "B": doc_b, "AB": doc_a + doc_b}
    for k, toks in files.items():
        write_tokens(os.path.join(a.workdir, k + ".bin"), toks)

    exe = os.path.join(a.workdir, "model")
    cmd = [a.baspc, a.spec, "-q", "-o", exe, "--set", "train.micro_batch=1", "--set", "train.seq_len=%d" % S,
           "--set", "train.documents=on", "--set", "train.eot_token=%d" % EOT, "--set", "train.packing=sequential"]
    for s in a.set:
        cmd += ["--set", s]
    run(cmd, exe + ".build.log")
    mpi = [a.mpirun, "--allow-run-as-root", "--oversubscribe", "-np", str(a.np), "-x", "OPENBLAS_NUM_THREADS=1", exe]
    init = os.path.join(a.workdir, "init.weights")
    # Weights with some structure (a few steps on A and B), so that what a
    # token attends to shows in its loss.
    run(mpi + ["--data", os.path.join(a.workdir, "AB.bin"), "--steps", "30", "--save-weights", init],
        exe + ".init.log")

    def loss(data, seed, tag):
        m = os.path.join(a.workdir, tag + ".jsonl")
        run(mpi + ["--data", os.path.join(a.workdir, data + ".bin"), "--steps", "1", "--seed", str(seed),
                   "--init-from", init, "--metrics", m], os.path.join(a.workdir, tag + ".log"))
        line = json.loads(open(m).readline())
        return line["loss"], line["counted_tokens"], line["documents"]

    la, ca, na = loss("A", 1, "A")
    lb, cb, nb = loss("B", 1, "B")
    want_counted = 2 * (half - 1)
    ok = ca == want_counted and cb == want_counted and na == 2 and nb == 2
    print("A alone: loss %.7f (%d targets, %d documents); B alone: loss %.7f" % (la, ca, na, lb))
    mixed = 0
    for seed in range(1, a.draws + 1):
        l, c, n = loss("AB", seed, "AB%d" % seed)
        cands = {"AA": la, "BB": lb, "AB": (la + lb) / 2}
        name, want = min(cands.items(), key=lambda kv: abs(kv[1] - l))
        err = abs(l - want) / abs(want)
        good = err <= RTOL and c == want_counted and n == 2
        mixed += name == "AB"
        print("  draw %d: loss %.7f = %s %.7f (relative error %.2g) %s" % (seed, l, name, want, err,
                                                                          "ok" if good else "MISMATCH"))
        ok = ok and good
    if mixed == 0:
        print("no draw mixed A and B: raise --draws")
        ok = False
    if abs(la - lb) <= 100 * RTOL * abs(lb):
        print("A and B have the same loss: the test cannot tell them apart")
        ok = False
    print("OK" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
