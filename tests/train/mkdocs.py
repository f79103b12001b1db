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

Usage: mkdocs.py CORPUS_TXT OUT_BIN [--eot N] [--seed N] [--tokens N] [--scale F]
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
    a = p.parse_args()
    text = open(a.corpus, "rb").read()
    if a.eot < 256 and bytes([a.eot]) in text:
        raise SystemExit("mkdocs: the corpus holds byte %d, so it cannot mark document ends" % a.eot)
    rng = random.Random(a.seed)
    toks, at = [], 0
    while len(toks) < a.tokens:
        n = max(2, int(lengths(rng) * a.scale))
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
