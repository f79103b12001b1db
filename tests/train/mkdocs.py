#!/usr/bin/env python3
"""Writes an llm.c token file of documents for the packed-document tests.

The text of corpus.txt (byte-level tokens) is cut into documents whose
lengths follow a long tail, each ended by the end-of-text token (--eot,
default 0; the corpus holds no zero byte, so 0 marks only the ends):
  60% of documents 4-24 tokens, 30% 24-80, 10% 80-400 (log-uniform),
so that a row of the tests' 64 or 128 tokens holds several documents and
some documents are longer than a row and are cut.
Deterministic from --seed.  Standard library only.

--scale F multiplies every length by F (bench/packing_study.py: F = 10,
documents of 40 to 4000 tokens for rows of 4096).

--mix "L:P,L:P,..." draws each document's length from the given lengths L
(tokens, before --scale) with probabilities P instead (bench/packing_study.py
--mix, a published corpus's histogram).

Usage: mkdocs.py CORPUS_TXT OUT_BIN [--eot N] [--seed N] [--tokens N] [--scale F] [--mix L:P,...]
"""
import argparse
import math
import random
import struct


def lengths(rng):
    u = rng.random()
    lo, hi = (4, 24) if u < 0.6 else (24, 80) if u < 0.9 else (80, 400)
    return int(math.exp(rng.uniform(math.log(lo), math.log(hi))))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("corpus")
    p.add_argument("out")
    p.add_argument("--eot", type=int, default=0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--tokens", type=int, default=200000, help="about this many tokens in all")
    p.add_argument("--scale", type=float, default=1.0, help="multiply every document length by this")
    p.add_argument("--mix", default="", help="lengths and their probabilities, L:P,L:P,...")
    a = p.parse_args()
    draw = lengths
    if a.mix:
        try:
            pairs = [(int(l), float(q)) for l, q in (x.split(":") for x in a.mix.split(","))]
        except ValueError:
            raise SystemExit("mkdocs: --mix %r: write it like 256:0.4,512:0.6" % a.mix)
        if not pairs or any(l < 2 or q < 0 for l, q in pairs) or sum(q for _, q in pairs) <= 0:
            raise SystemExit("mkdocs: --mix %r: lengths of at least 2 tokens, probabilities >= 0" % a.mix)
        ls, qs = [l for l, _ in pairs], [q for _, q in pairs]
        draw = lambda rng: rng.choices(ls, weights=qs)[0]  # noqa: E731
    text = open(a.corpus, "rb").read()
    if a.eot < 256 and bytes([a.eot]) in text:
        raise SystemExit("mkdocs: the corpus holds byte %d, so it cannot mark document ends" % a.eot)
    rng = random.Random(a.seed)
    toks, at = [], 0
    while len(toks) < a.tokens:
        n = max(2, int(draw(rng) * a.scale))
        piece = text[at:at + n]
        if len(piece) < n:
            at, piece = 0, text[:n]
        at += n
        toks.extend(piece)
        toks.append(a.eot)
    width = 2 if max(toks) < 65536 else 4
    header = [20240520, 1 if width == 2 else 2, len(toks)] + [0] * 253
    with open(a.out, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%d%s" % (len(toks), "H" if width == 2 else "I"), *toks))
    print("mkdocs: %d tokens, %d documents -> %s" % (len(toks), toks.count(a.eot), a.out))


if __name__ == "__main__":
    main()
