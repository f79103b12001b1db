#!/usr/bin/env python3
"""uneven_batch_model.py — micro-batches that do not divide into equal groups.

    python3 bench/uneven_batch_model.py --baspc PATH [--batches 3 5]
            [--models llama3_2_1b ...] [--trials 300] [--seed 1] [--json FILE]

Batch-aware sequence parallelism needs G | N and G | B.  For a micro-batch B
that no G > 1 divides (B = 3 or 5 on N = 8), this predicts with baspc's cost
model the step time of four ways to run B whole rows of S tokens:

  G=1      what is legal today: Ulysses over all N ranks (and, for reference,
           the planner's best legal layout of any strategy);
  pad      round B up to B' = a multiple of some G | N; the B' - B pad rows
           are computed and their loss is masked;
  hetero   groups of different sizes K_i (each K_i | N, sum K_i = N) holding
           r_i >= 1 whole rows (sum r_i = B); the step waits for the slowest;
  packing  G equal groups, each given B*S/G tokens of whole documents,
           assigned longest-first to the group with the least attention work.

How a group is costed.  A group of K ranks holding r rows of s tokens is
costed as the homogeneous spec in which every group looks like it: world N,
G' = N/K groups, micro_batch r*G', seq_len s, batch_aware groups G',
sequence ulysses, a2a flat, recompute auto.  Its `--trace` gives the time of
the slowest rank per op; the step is their sum (baspc's model: one stream,
no overlap).  ZeRO's collectives still span all N ranks, so they cost what
they cost in the real layout; a spec shrunk to K ranks would not.  The
attention ops (attention, attention_bwd, recomputed ones included) are
split off so that they can be rescaled by the documents a group holds:
    t_group = rest + attention * W_group / (r * s^2),
W_group = sum over the group's documents (pieces) of l^2.  The step is the
largest t_group; this is exact in the model when one group is slowest in
every op, which holds here (more tokens per rank in every op).

Three data regimes:
  dense   every row is one S-token document (causal over the row, W = S^2
          per row); packing cannot move work between groups here;
  short   documents from the stand-in mix of bench_docattn (token shares:
          50% in 16-512 tokens, 30% in 512-2048, 20% in 2048-4096);
  long    a long tail up to S (30% in 16-1024, 30% in 1024-4096,
          40% in 4096-S).
Lengths are log-uniform within a band.  For the row layouts the stream is
cut into rows (concat-and-chunk: a document crossing a row end is two
pieces) and the attention is document-masked (W = sum of piece^2); packing
keeps documents whole except the one cut where the micro-batch ends and
the ones split to fill a group exactly (a group's B*S/G tokens must be at
least the mix's longest document, so G <= B for "long").  No measured corpus distribution is
assumed; the mixes are stand-ins.  Times are means over --trials sampled
micro-batches.

Standard library only.
"""

import argparse
import functools
import json
import math
import os
import random
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODELS = ["llama3_2_1b", "llama3_2_3b", "llama3_1_8b", "qwen2_5_3b", "qwen3_8b"]
MIXES = {  # (token share, shortest, longest); "S" = the sequence length
    "short": [(0.5, 16, 512), (0.3, 512, 2048), (0.2, 2048, 4096)],
    "long": [(0.3, 16, 1024), (0.3, 1024, 4096), (0.4, 4096, "S")],
}
ATTENTION_OPS = ("attention", "attention_bwd", "ring_attention", "ring_attention_bwd")
INF = float("inf")


# ---------------------------------------------------------------- baspc calls

class Model:
    """One example spec and the cost of group shapes under baspc's model."""

    def __init__(self, baspc, name):
        self.baspc, self.name = baspc, name
        self.spec = os.path.join(ROOT, "examples", name + ".basp")
        plan = self.plan(2)
        self.world, self.seq = plan["world"], plan["seq_len"]
        self.notes = {}  # (k, rows, seq) -> "recompute" or "does not fit"

    def run(self, args):
        return subprocess.run([self.baspc, self.spec, "-q"] + args,
                              capture_output=True, text=True)

    @functools.lru_cache(maxsize=None)
    def plan(self, micro_batch):
        """--plan --json at this micro-batch (any strategy, dense rows)."""
        out = self.run(["--plan", "--json", "--set", f"train.micro_batch={micro_batch}",
                        "--set", "train.recompute=auto"])
        return json.loads(out.stdout)

    @functools.lru_cache(maxsize=None)
    def shape(self, k, rows, seq):
        """(rest_ms, attention_ms, recompute used) of one group of k ranks
        holding `rows` rows of `seq` tokens, or None when it does not fit."""
        g = self.world // k
        sets = [f"train.micro_batch={rows * g}", f"train.seq_len={seq}",
                "layout.batch_aware=" + (f"groups {g}" if g > 1 else "off"),
                "layout.sequence=ulysses", "layout.a2a=flat", "train.recompute=auto"]
        with tempfile.TemporaryDirectory() as tmp:
            trace = os.path.join(tmp, "trace.json")
            args = ["--memory", "--json", "--trace", trace]
            for s in sets:
                args += ["--set", s]
            out = self.run(args)
            if not out.stdout.strip() or not os.path.exists(trace):
                raise SystemExit(f"baspc failed on {self.name} {sets}:\n{out.stderr}")
            mem = json.loads(out.stdout)
            with open(trace) as f:
                events = json.load(f)["traceEvents"]
        if not mem["fits"]:
            self.notes[(k, rows, seq)] = "does not fit"
            return None
        rest = attn = 0.0
        recompute = False
        for e in events:
            if e.get("ph") != "X" or e["pid"] != 0:
                continue
            if e["name"] in ATTENTION_OPS:
                attn += e["dur"] / 1000
            else:
                rest += e["dur"] / 1000
            recompute |= str(e["args"].get("value", "")).endswith(".rc")
        if recompute:
            self.notes[(k, rows, seq)] = "recompute"
        return rest, attn, recompute

    def group_time(self, k, rows, seq, work):
        """One group's step time with attention work `work` (sum of l^2)."""
        s = self.shape(k, rows, seq)
        if s is None:
            return INF
        rest, attn, _ = s
        return rest + attn * work / (rows * seq * seq)


# ---------------------------------------------------------------- documents

def sample_stream(rng, mix, seq, tokens):
    """Document lengths whose sum is exactly `tokens` (the last one cut)."""
    bands = [(w, lo, seq if hi == "S" else hi) for w, lo, hi in mix]
    # pick a band with probability proportional to its token share divided by
    # its mean length, so that the bands' token shares come out as stated
    mean = [(hi - lo) / math.log(hi / lo) for _, lo, hi in bands]
    weights = [w / m for (w, _, _), m in zip(bands, mean)]
    docs, total = [], 0
    while total < tokens:
        _, lo, hi = rng.choices(bands, weights)[0]
        length = min(int(math.exp(rng.uniform(math.log(lo), math.log(hi)))), tokens - total)
        docs.append(length)
        total += length
    return docs


def row_work(docs, seq, nrows):
    """Concat-and-chunk into rows of seq tokens: sum of piece^2 per row."""
    work, row, used = [0] * nrows, 0, 0
    for length in docs:
        while length > 0 and row < nrows:
            piece = min(length, seq - used)
            work[row] += piece * piece
            length -= piece
            used += piece
            if used == seq:
                row, used = row + 1, 0
    return work


def prefix(docs, tokens):
    """The documents of the first `tokens` tokens (the last one cut)."""
    out, total = [], 0
    for length in docs:
        if total == tokens:
            break
        out.append(min(length, tokens - total))
        total += out[-1]
    return out


def pack_lpt(docs, groups, capacity):
    """Whole documents, longest first, each to the group with the least
    attention work that still has room; a document that fits nowhere is
    split over the groups with the most room.  Returns sum l^2 per group."""
    work, room = [0] * groups, [capacity] * groups
    for length in sorted(docs, reverse=True):
        fits = [g for g in range(groups) if room[g] >= length]
        if fits:
            g = min(fits, key=lambda g: work[g])
            work[g] += length * length
            room[g] -= length
            continue
        for g in sorted(range(groups), key=lambda g: -room[g]):
            piece = min(length, room[g])
            work[g] += piece * piece
            room[g] -= piece
            length -= piece
            if length == 0:
                break
    return work


# ---------------------------------------------------------------- layouts

def partitions(world, batch, sizes):
    """Multisets of groups (k, rows): sum k = world, sum rows = batch, rows >= 1."""
    def rec(n, b, bound):
        if n == 0:
            if b == 0:
                yield []
            return
        for k in sizes:
            for r in range(1, b + 1):
                if k <= n and (k, r) <= bound:
                    for rest in rec(n - k, b - r, (k, r)):
                        yield [(k, r)] + rest
    return list(rec(world, batch, (world, batch)))


def row_layout_time(model, groups, row_w):
    """Groups [(k, rows)] in order, holding consecutive rows of row_w."""
    t, i = 0.0, 0
    for k, r in groups:
        t = max(t, model.group_time(k, r, model.seq, sum(row_w[i:i + r])))
        i += r
    return t


def label(groups):
    return "+".join(f"{k}:{r}" for k, r in groups)   # ranks:rows per group


def evaluate(model, batch, regime, trials, seed):
    n, seq = model.world, model.seq
    sizes = [k for k in range(n, 0, -1) if n % k == 0]
    divisors = [g for g in range(1, n + 1) if n % g == 0]
    rng = random.Random(seed)
    # the sampled micro-batches: enough rows for the largest padding
    max_pad = max(-(-batch // g) * g for g in divisors)
    if regime == "dense":
        samples = [([seq * seq] * max_pad, None)]
    else:
        samples = []
        for _ in range(trials):
            docs = sample_stream(rng, MIXES[regime], seq, max_pad * seq)
            samples.append((row_work(docs, seq, max_pad), prefix(docs, batch * seq)))

    def mean(f):
        return sum(f(rw, docs) for rw, docs in samples) / len(samples)

    res = {"model": model.name, "batch": batch, "regime": regime}
    res["g1"] = (mean(lambda rw, d: row_layout_time(model, [(n, batch)], rw)), "G=1")
    best = (INF, "")
    for g in divisors[1:]:
        bp = -(-batch // g) * g
        t = mean(lambda rw, d: row_layout_time(model, [(n // g, bp // g)] * g, rw))
        best = min(best, (t, f"B'={bp} G={g}", batch / bp))
    res["pad"] = best
    best = (INF, "")
    for groups in partitions(n, batch, sizes):
        if len(groups) > 1:
            best = min(best, (mean(lambda rw, d: row_layout_time(model, groups, rw)), label(groups)))
    res["hetero"] = best
    if regime != "dense":
        best = (INF, "")
        longest = max(seq if hi == "S" else hi for _, _, hi in MIXES[regime])
        for g in divisors:
            cap = batch * seq // g
            if cap % (n // g) or cap < longest:   # a group must hold any document
                continue
            t = mean(lambda rw, d: max(model.group_time(n // g, 1, cap, w)
                                       for w in pack_lpt(d, g, cap)))
            best = min(best, (t, f"G={g}"))
        res["pack"] = best
    chosen = model.plan(batch)
    res["planner"] = (INF, "none fits")
    for c in chosen["candidates"]:
        if c["name"] == chosen["chosen"]:
            res["planner"] = (c["step_ms"], c["name"])
    return res


def fmt(cell, ref):
    if cell is None:
        return "–"
    t, name = cell[0], cell[1]
    if t == INF:
        return name if name == "none fits" else "does not fit"
    extra = f", {cell[2]:.0%} useful" if len(cell) > 2 else ""
    return f"{t:.0f} ({t / ref:.2f}×) {name}{extra}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--baspc", default=os.path.join(ROOT, "build", "baspc"))
    ap.add_argument("--models", nargs="+", default=MODELS)
    ap.add_argument("--batches", nargs="+", type=int, default=[3, 5])
    ap.add_argument("--regimes", nargs="+", default=["dense", "short", "long"])
    ap.add_argument("--trials", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="also write every result to this file")
    a = ap.parse_args()

    models = [Model(a.baspc, name) for name in a.models]
    results = []
    for regime in a.regimes:
        print(f"\n### {regime}: step ms (× the best option of the row) and layout\n")
        print("| model | B | G=1 Ulysses | pad | hetero (ranks:rows) | packing | "
              "planner's best legal (dense rows) |")
        print("|---|---|---|---|---|---|---|")
        for model in models:
            for b in a.batches:
                r = evaluate(model, b, regime, a.trials, a.seed)
                results.append(r)
                ref = min(r[k][0] for k in ("g1", "pad", "hetero", "pack") if k in r)
                planner = fmt(r["planner"], ref) if regime == "dense" else \
                    f"{r['planner'][0]:.0f} {r['planner'][1]}".replace("inf ", "")
                print(f"| {model.name} | {b} | {fmt(r['g1'], ref)} | {fmt(r['pad'], ref)} | "
                      f"{fmt(r['hetero'], ref)} | {fmt(r.get('pack'), ref)} | {planner} |",
                      flush=True)
    print()
    for regime in (r for r in a.regimes if r != "dense"):
        rng, b, seq = random.Random(a.seed), a.batches[0], models[0].seq
        rho = imbalance = 0.0
        for _ in range(a.trials):
            docs = sample_stream(rng, MIXES[regime], seq, b * seq)
            rho += sum(row_work(docs, seq, b)) / (b * seq * seq) / a.trials
            w = pack_lpt(docs, 2, b * seq // 2)
            imbalance += max(w) / (sum(w) / 2) / a.trials
        print(f"{regime}: a row's sum l^2 / S^2 = {rho:.3f}; B={b} packed into 2 groups: "
              f"the heavier group's attention work = {imbalance:.3f} x the mean")
    for model in models:
        for (k, rows, seq), what in sorted(model.notes.items()):
            print(f"{model.name}: a group of {k} rank(s) holding {rows} row(s) of {seq} "
                  f"tokens: {what}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)


if __name__ == "__main__":
    sys.exit(main())
