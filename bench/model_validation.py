#!/usr/bin/env python3
"""model_validation.py — the cost model's collective times against measurements.

    bench/model_validation.py [--build DIR] [--out DIR] [--extra FILE.json ...]
                              [--modules DIR]

For every validation point (a published nccl-tests figure, or one of our own
measurements added through --extra or own_measurements() below):

  1. writes a textual-IR module (.bir) holding the point's mesh (nodes x
     devices, the link kinds and bandwidths of its hardware, the NICs per
     node) and one collective over P ranks on a buffer of the published
     size;
  2. asks the cost model for that op's time: `baspc MODULE.bir --trace
     OUT.json`, the op's duration on the slowest rank;
  3. compares it with the measured time: error = (predicted - measured) /
     measured, and the mean absolute percentage error (MAPE) over all points
     and over the points whose figures no model parameter was fitted on.

Links start from the device preset the point names (layout/presets.c, read
back through `baspc --emit=lowered`, so a change of the presets shows up
here), with the point's overrides (another NVLink or NIC bandwidth, another
link kind).  nccl-tests times the library's exchange alone, while the cost
model of an all-to-all adds the pack and unpack copies of basp's runtime;
published points are therefore predicted with the copies off (`config
cost.a2a_copies = off`).

How a published figure becomes a time (nccl-tests, doc/PERFORMANCE.md): the
table's `size` is the per-rank buffer of an all-to-all and the whole output
of an all-gather; algbw = size / time and busbw = algbw x (P-1)/P for both,
so time = size x (P-1)/P / busbw.  A point read off a table's time column is
"M" (measured); one computed from a busbw figure is "D" (derived).

Writes to --out (default bench/results/validation/): results.md (the table,
the MAPEs, how each figure was read, the command) and results.csv; prints the
table.  Standard library only.
"""

import argparse
import csv
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

KiB, MiB, GiB = 1024, 1024**2, 1024**3

# ---- sources --------------------------------------------------------------
# The keys are the citation keys of docs/link-model.md.
SOURCES = {
    "ndmv4": "https://github.com/microsoft/mscclpp/blob/main/docs/performance-ndmv4.md",
    "nccl#2169": "https://github.com/NVIDIA/nccl/issues/2169",
    "nccl#1531": "https://github.com/NVIDIA/nccl/issues/1531",
    "nccl-tests#78": "https://github.com/NVIDIA/nccl-tests/issues/78",
    "nccl-tests#139": "https://github.com/NVIDIA/nccl-tests/issues/139",
    "own: bench_a2a": "bench/results/validation/emulated_a2a.md",
    "own: H200": "bench/results/gpu/summary.txt",
    "own: cluster_study": "bench/results/cluster/results.md",
}

# Published figures found but left out: none of them gives a time at a known
# size on a known mesh.
NOT_USED = [
    ("nccl-tests#59", "https://github.com/NVIDIA/nccl-tests/pull/59",
     "2 Selene nodes, all-to-all busbw ~25 GB/s: the size is not stated"),
    ("nccl-tests#149", "https://github.com/NVIDIA/nccl-tests/issues/149",
     "A100 NVLink ~230 GB/s: a maintainer's figure for large sizes, no size"),
    ("nccl-tests#212", "https://github.com/NVIDIA/nccl-tests/issues/212",
     "NVLink 4 ~370 GB/s effective: a maintainer's figure, no size"),
    ("nccl#412", "https://github.com/NVIDIA/nccl/issues/412",
     "8 x A800 ~160 GB/s: the maintainer's expected figure, not a measurement"),
    ("nccl-tests#267", "https://github.com/NVIDIA/nccl-tests/issues/267",
     "6 x H100 nodes, 8 x 400 Gb/s RoCE: the tables are images"),
    ("nccl-tests#181", "https://github.com/NVIDIA/nccl-tests/issues/181",
     "2 nodes x 8 GPUs busbw 3.92 GB/s: neither the NICs nor the size stated"),
    ("ucc#223", "https://github.com/openucx/ucc/pull/223",
     "UCC, not NCCL, and the node count is not stated"),
]


# ---- points ---------------------------------------------------------------
class Point:
    """One validation point.

    collective  'all_to_all' or 'all_gather' (the built-in predictor writes
                a module for it), or anything else with `predict` set
    size        nccl-tests' size column: an all-to-all's per-rank buffer, an
                all-gather's whole output (bytes)
    device      the device preset whose links the mesh starts from
    intra/inter overrides of the preset's links: kind, bandwidth (B/s per
                direction), latency (s), efficiency
    nics        nics_per_node (None: one per device, the model's default)
    copies      whether the prediction includes basp's pack/unpack copies
                (False for library benchmarks such as nccl-tests)
    fitted      whether a model parameter was fitted on (or checked against)
                this figure: such a point is in-sample
    predict     for points the built-in predictor does not handle: a function
                (point, ctx) -> predicted seconds
    """

    def __init__(self, key, source, hardware, collective, nodes, gpus, size, measured_s, status, fitted, basis,
                 fit_note="", device="a100_80gb", intra=None, inter=None, nics=None, copies=False, note="",
                 url=None, predict=None, predicted_s=None, cores=None):
        self.key, self.source, self.hardware, self.collective = key, source, hardware, collective
        self.nodes, self.gpus, self.size = nodes, gpus, size
        self.measured_s, self.status, self.fitted = measured_s, status, fitted
        self.basis, self.fit_note, self.note = basis, fit_note, note
        self.device, self.intra, self.inter, self.nics = device, intra or {}, inter or {}, nics
        self.cores = cores  # cores_per_node (CPU ranks sharing cores), None: a core per rank
        self.copies = copies
        self.url = url or SOURCES.get(source, "")
        self.predict = predict
        self.predicted_s = predicted_s
        self.modelled_size = size
        self.predicted_copies_s = None

    @property
    def ranks(self):
        return self.nodes * self.gpus


def from_busbw(size, ranks, busbw_gbs):
    """nccl-tests: busbw = size / time x (P-1)/P (all-to-all and all-gather)."""
    return size * (ranks - 1) / ranks / (busbw_gbs * 1e9)


def busbw_basis(busbw, size, ranks):
    return (f"busbw {busbw:g} GB/s; t = size x (P-1)/P / busbw = "
            f"{fmt_size(size)} x {ranks - 1}/{ranks} / {busbw:g} GB/s")


def published_points():
    """The published figures, each with where it was read and whether a model
    parameter was set from it (docs/link-model.md, passes/cost.c)."""
    pts = []
    ndmv4_hw = "A100 80GB, NVLink 3; 8 x HDR 200 Gb/s per node (Azure NDmv4)"
    ndmv4_note = "NCCL 2.17.1, in-place"
    nv3_eff = "NVLink efficiency 0.80 (255 of 300 GB/s on 8 A100s)"
    nv3_peer = "NVLink latency 1.33 us per peer, this figure / 7 peers"
    ib_lat = "IB call 27.0 us and 2.84 us per off-node peer, solved from this figure and its 2 x 1 / 2 x 8 twin"
    ib_eff = "IB efficiency 0.80 (0.81 of HDR derived from this figure)"
    ib_alone = "one rank per node 0.77 of the IB efficiency: this figure's 15.48 GB/s per GPU over 2 x 8's 20.2"
    nv3_ring = "NVLink ring efficiency 0.845 (254 of 300 GB/s busbw on 8 A100s)"
    ib_ring = "IB ring efficiency 0.885 (177 GB/s busbw over 8 HDR NICs: 22.1 of 25 GB/s each)"
    # (collective, nodes, gpus, size, kind of figure, value, fitted, fit note)
    ndmv4 = [
        ("all_to_all", 1, 8, 1 * KiB, "time", 9.34e-6, True, nv3_peer),
        ("all_to_all", 1, 8, 1 * GiB, "busbw", 254.69, True, nv3_eff),
        ("all_to_all", 2, 1, 1 * KiB, "time", 29.84e-6, True, ib_lat),
        ("all_to_all", 2, 1, 1 * GiB, "busbw", 15.48, True, ib_alone),
        ("all_to_all", 2, 8, 1 * KiB, "time", 49.75e-6, True, ib_lat),
        ("all_to_all", 2, 8, 1 * GiB, "busbw", 37.80, True, ib_eff),
        ("all_to_all", 2, 8, 4 * GiB, "busbw", 37.81, True, ib_eff),
        ("all_gather", 1, 8, 1 * KiB, "time", 12.53e-6, False, ""),
        ("all_gather", 1, 8, 1 * GiB, "busbw", 253.59, True, nv3_ring),
        ("all_gather", 2, 1, 1 * KiB, "time", 16.08e-6, False, ""),
        ("all_gather", 2, 1, 1 * GiB, "busbw", 15.84, False, ""),
        ("all_gather", 2, 8, 1 * KiB, "time", 33.74e-6, False, ""),
        ("all_gather", 2, 8, 1 * GiB, "busbw", 177.05, True, ib_ring),
        ("all_gather", 2, 8, 4 * GiB, "busbw", 186.01, False, ""),
    ]
    for coll, n, g, size, kind, value, fitted, fit_note in ndmv4:
        short = "a2a" if coll == "all_to_all" else "ag"
        if kind == "time":
            t, status, basis = value, "M", f"time {value * 1e6:g} us (latency table)"
        else:
            t, status, basis = from_busbw(size, n * g, value), "D", busbw_basis(value, size, n * g)
        pts.append(Point(f"ndmv4-{short}-{n}x{g}-{fmt_size(size).replace(' ', '')}", "ndmv4", ndmv4_hw, coll, n, g,
                         size, t, status, fitted, basis, fit_note, device="a100_80gb", note=ndmv4_note))

    pts.append(Point(
        "nccl2169-a2a-1x4-500MiB", "nccl#2169", "4 x H100 80GB HBM3 in one node, NVLink 4", "all_to_all", 1, 4,
        524288000, 1174.14e-6, "M", True,
        "out-of-place time 1174.14 us (busbw 334.90 GB/s), -b 500M, NCCL_ALGO=Ring NCCL_PROTO=Simple",
        "NVLink efficiency 0.80 (335 of 450 GB/s on H100)", device="h100_sxm", note="NCCL 2.30.4"))
    pts.append(Point(
        "nccl1531-a2a-8x8-8MiB", "nccl#1531",
        "8 nodes x 8 H800; NVLink 400 GB/s bidirectional; one 400 Gb/s NIC per GPU assumed (not stated)",
        "all_to_all", 8, 8, 8 * MiB, 337.8e-6, "M", False,
        "out-of-place time 337.8 us (busbw 24.44 GB/s)",
        device="h100_sxm", intra={"bandwidth": 200e9}))
    v100 = ("8 nodes x 8 V100, NVLink 2 (150 GB/s per direction); InfiniBand 100 Gb/s, "
            "one NIC per node assumed (not stated)")
    for size, t_us in ((256 * MiB, 520935), (512 * MiB, 1041974)):
        pts.append(Point(
            f"nccltests78-a2a-8x8-{fmt_size(size).replace(' ', '')}", "nccl-tests#78", v100, "all_to_all", 8, 8,
            size, t_us * 1e-6, "M", True, f"out-of-place time {t_us} us (busbw 0.51 GB/s)",
            "shared-NIC factor s_share 0.36, the median of this figure's 0.36 and others' 0.33 and 0.67",
            device="a100_40gb", intra={"bandwidth": 150e9}, inter={"bandwidth": 100e9 / 8}, nics=1,
            note="NCCL 2.8; device preset a100_40gb for the latencies only"))
    pts.append(Point(
        "nccltests139-a2a-4x4-4GiB", "nccl-tests#139",
        "Perlmutter: 4 nodes x 4 A100 40GB, NVLink 3; Slingshot-11, one 200 Gb/s NIC per GPU (modelled as roce)",
        "all_to_all", 4, 4, 4 * GiB, 0.200, "M", False,
        "\"around 200 ms\" for `alltoall_perf -b 4G -e 4G -d double`, one process per GPU (approximate)",
        device="a100_40gb", inter={"kind": "roce", "bandwidth": 200e9 / 8}))
    return pts


# ---- our own measurements ----------------------------------------------------------

EMULATED_A2A = os.path.join(HERE, "results", "validation", "emulated_a2a.csv")
CLUSTER_CSV = os.path.join(HERE, "results", "cluster", "results.csv")
CLUSTER_SPEC = os.path.join(HERE, "cluster_model.basp")
# The emulated cluster's links (bench/cluster, bench/cluster_model.basp): one
# tc-shaped 2 Gbit/s TCP link per node, which the node's 4 ranks share, and
# MPI's shared memory inside; each node pinned to one of the 2 cores.
EMU_INTER = {"kind": "tcp", "bandwidth": 2e9 / 8, "latency": 50e-6, "efficiency": 1.0}


def emulated_a2a_points():
    """bench_a2a on the emulated 2 x 4 cluster (emulated_a2a.csv): the
    8-way all-to-all across both nodes, and the 4-way one inside a node
    (G = 2), whose 4 ranks share the node's core.  MPI_Alltoall alone: no
    pack copies."""
    if not os.path.exists(EMULATED_A2A):
        return []
    pts = []
    with open(EMULATED_A2A) as f:
        for r in csv.DictReader(f):
            g, size = int(r["groups"]), int(r["bytes_per_rank"])
            if g not in (1, 2) or size < 256 * 1024:
                continue
            cross = g == 1
            pts.append(Point(
                f"emu-a2a-{'2x4' if cross else '1x4'}-{r['label']}", "own: bench_a2a",
                "emulated cluster: 2 namespaces x 4 MPI ranks on 2 cores, 2 Gbit/s tc-shaped TCP between",
                "all_to_all", 2 if cross else 1, 4, size, float(r["median_ms"]) * 1e-3, "M",
                cross and size >= 4 << 20, "median of 7 repeats, the slowest rank",
                fit_note="TCP efficiency 0.86 from the 4-16 MiB rows" if cross and size >= 4 << 20 else "",
                device="cpu_calibrated", inter=EMU_INTER, nics=1, cores=1,
                note="8-way across the nodes" if cross else "4-way inside a node (G = 2 groups of 4)"))
    return pts


def spec_step_point(key, source, hardware, measured_s, spec, sets, target, basis, fitted=False, note=""):
    """A predicted step: the end of `baspc SPEC --trace` with the sets."""
    args = [f"--target={target}"] + [a for x in sets for a in ("--set", x)]
    p = Point(key, source, hardware, "step", 1, 1, 0, measured_s, "M", fitted, basis, note=note,
              predict=predict_trace(spec, None, args))
    p.url = SOURCES.get(source, "")
    return p


def h200_points():
    """The H200 training runs of scripts/gpu-check (bench/results/gpu/)."""
    one = ["mesh.nodes=1", "mesh.devices_per_node=1", "train.micro_batch=1", "train.zero=0", "mesh.device=h200"]
    return [
        spec_step_point("h200-llama3.2-1b-8k", "own: H200", "1 x H200, cuDNN attention", 8192 / 42343,
                        os.path.join(ROOT, "examples", "llama3_2_1b.basp"), one + ["train.seq_len=8192"], "cuda",
                        "42343 tokens/s, median of steps 3-8 (summary.txt, train_1b.jsonl)"),
        spec_step_point("h200-llama3.1-8b-32k", "own: H200", "1 x H200, cuDNN attention, full recomputation",
                        32768 / 5952, os.path.join(ROOT, "examples", "llama3_1_8b.basp"),
                        one + ["train.seq_len=32768", "train.recompute=full"], "cuda",
                        "5952 tokens/s (summary.txt, train_8b.jsonl)"),
    ]


def cluster_points():
    """bench/cluster_study.py's step times (results.csv), predicted from the
    spec as the study compiles it (device cpu_calibrated, the node's one
    link and one core shared by its 4 ranks)."""
    if not os.path.exists(CLUSTER_CSV):
        return []
    pts = []
    with open(CLUSTER_CSV) as f:
        rows = [r for r in csv.DictReader(f) if r["sweep"] == "batch" or r["S"] != "1024"]
    for r in rows:
        b, s = int(r["B"]), int(r["S"])
        for lay, col in (("ulysses", "ulysses_step_ms"), ("batch-aware", "ba_step_ms")):
            sets = ["mesh.device=cpu_calibrated", "mesh.inter.bandwidth=2000Mb/s", "mesh.cores_per_node=1",
                    f"train.micro_batch={b}", f"train.seq_len={s}"] + (["layout.batch_aware=off"] if lay == "ulysses"
                                                                       else [])
            pts.append(spec_step_point(f"emu-step-{lay}-b{b}-s{s}", "own: cluster_study",
                                       "emulated 2 x 4 cluster, 2 Gbit/s", float(r[col]) * 1e-3, CLUSTER_SPEC, sets,
                                       "cpu", "median over rounds of rank 0's median step"))
    return pts


def own_measurements(args):
    """Our own measurements: the emulated cluster's all-to-alls and steps,
    the H200 steps.  --extra FILE.json adds more points without editing
    this file (load_extra)."""
    if args.no_own:
        return []
    return emulated_a2a_points() + h200_points() + cluster_points()


def load_extra(path):
    """Points from a JSON list.  Each entry: label, source, url, hardware,
    measured_ms, status (M/D), fitted (bool), note; and one way to predict:
      predicted_ms                        a prediction made elsewhere
      bir [, value]                       a module: that op's duration on the
                                          slowest rank, or the step (the
                                          trace's end) without value
      spec [, set: [BLOCK.KEY=VALUE ...]] a spec: the predicted step (the end
                                          of `baspc SPEC --trace`)
      collective, nodes, gpus, size_bytes [, device, intra, inter, nics,
      copies]                             a collective, as the published points
    Relative paths are taken from the JSON file's folder."""
    with open(path) as f:
        entries = json.load(f)
    base = os.path.dirname(os.path.abspath(path))
    pts = []
    for i, e in enumerate(entries):
        label = e.get("label") or f"{os.path.basename(path)}#{i}"
        common = dict(url=e.get("url", ""), note=e.get("note", ""), fit_note=e.get("fit_note", ""))
        measured = float(e["measured_ms"]) * 1e-3
        status, fitted, basis = e.get("status", "M"), bool(e.get("fitted", False)), e.get("basis", "")
        if e.get("collective") in ("all_to_all", "all_gather") and "size_bytes" in e:
            p = Point(label, e.get("source", "extra"), e.get("hardware", ""), e["collective"], int(e["nodes"]),
                      int(e["gpus"]), int(e["size_bytes"]), measured, status, fitted, basis,
                      device=e.get("device", "a100_80gb"), intra=e.get("intra"), inter=e.get("inter"),
                      nics=e.get("nics"), copies=bool(e.get("copies", False)), **common)
        else:
            p = Point(label, e.get("source", "extra"), e.get("hardware", ""), e.get("collective", "step"),
                      int(e.get("nodes", 1)), int(e.get("gpus", 1)), int(e.get("size_bytes", 0)), measured, status,
                      fitted, basis, **common)
            if "predicted_ms" in e:
                p.predicted_s = float(e["predicted_ms"]) * 1e-3
            elif "bir" in e:
                p.predict = predict_trace(os.path.join(base, e["bir"]), e.get("value"), [])
            elif "spec" in e:
                sets = [a for s in e.get("set", []) for a in ("--set", s)]
                p.predict = predict_trace(os.path.join(base, e["spec"]), None, sets)
            else:
                sys.exit(f"model_validation: {path} entry {i}: no prediction (predicted_ms, bir, spec or a collective)")
        pts.append(p)
    return pts


# ---- the cost model -------------------------------------------------------
def sh(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode:
        sys.stderr.write(r.stdout[-3000:] + r.stderr[-3000:])
        sys.exit(f"model_validation: command failed (status {r.returncode}): {' '.join(cmd)}")
    return r.stdout


class Ctx:
    def __init__(self, baspc, workdir):
        self.baspc, self.workdir = baspc, workdir
        self.presets = {}
        self.serial = 0

    def path(self, name):
        self.serial += 1
        return os.path.join(self.workdir, f"{self.serial:03d}-{name}")


PRESET_SPEC = """\
model m {{ hidden 64 layers 1 heads 4 kv_heads 4 head_dim 16 ffn 128 vocab 256 rope_theta 10000 norm_eps 1e-5 tie_embeddings false }}
mesh m {{ nodes 2 devices_per_node 2 device {device} }}
train {{ micro_batch 2 seq_len 128 precision bf16 zero 0 optimizer adamw lr 1e-3 }}
layout {{ sequence ulysses batch_aware off }}
"""
LINK_RE = re.compile(r"^link (intra|inter) kind = (\S+), bandwidth = (\S+), latency = (\S+), efficiency = (\S+)$")


def preset_links(ctx, device):
    """The device preset's intra and inter links and memory bandwidth, as
    baspc lowers a spec that names only the device."""
    if device not in ctx.presets:
        spec = ctx.path(f"preset-{device}.basp")
        with open(spec, "w") as f:
            f.write(PRESET_SPEC.format(device=device))
        out = sh([ctx.baspc, spec, "--emit=lowered", "-q"])
        links = {}
        for line in out.splitlines():
            m = LINK_RE.match(line.strip())
            if m:
                links[m.group(1)] = {"kind": m.group(2), "bandwidth": float(m.group(3)),
                                     "latency": float(m.group(4)), "efficiency": float(m.group(5))}
        if set(links) != {"intra", "inter"}:
            sys.exit(f"model_validation: no intra/inter links in the lowered IR of device {device}")
        ctx.presets[device] = links
    return ctx.presets[device]


def link_line(which, link):
    return (f"link {which} kind = {link['kind']}, bandwidth = {link['bandwidth']:.6g}, "
            f"latency = {link['latency']:.6g}, efficiency = {link['efficiency']:.6g}")


def collective_module(ctx, p, copies):
    """The .bir text of one collective over all n x g ranks, and the bytes it
    models (the published size rounded to whole bf16 elements per peer)."""
    links = preset_links(ctx, p.device)
    intra, inter = dict(links["intra"], **p.intra), dict(links["inter"], **p.inter)
    P = p.ranks
    m = max(1, round(p.size / (2 * P)))  # bf16 elements per peer block
    lines = ["module @validate", f"config device = {p.device}"]
    if not p.device.startswith("cpu"):
        # NCCL's collectives (rings, not MPI's recursive algorithms): the
        # cuda target, as a bf16 spec for this device would lower to
        lines.append("config mem.target = cuda")
    if not copies:
        lines.append("config cost.a2a_copies = off")
    if p.nics:
        lines.append(f"config nics_per_node = {p.nics}")
    if p.cores:
        lines.append(f"config cores_per_node = {p.cores}")
    lines += [f"mesh nodes = {p.nodes}, devices_per_node = {p.gpus}", link_line("intra", intra),
              link_line("inter", inter), "group @g = {[" + ",".join(str(r) for r in range(P)) + "]}"]
    if p.collective == "all_to_all":
        # per rank: P blocks of m elements in, P blocks out = the size
        lines += [f"input %x : bf16[{P}@g,{P},{m}]",
                  f"%y = all_to_all %x {{group = @g, split = 1, concat = 0}} : bf16[{P},{P}@g,{m}]"]
        modelled = 2 * P * m
    elif p.collective == "all_gather":
        # per rank: one block of m elements in, the P blocks out = the size
        lines += [f"input %x : bf16[{P}@g,{m}]", f"%y = all_gather %x {{group = @g, dim = 0}} : bf16[{P},{m}]"]
        modelled = 2 * P * m
    else:
        sys.exit(f"model_validation: {p.key}: no module for collective {p.collective}")
    return "\n".join(lines) + "\n", modelled


def trace_events(ctx, path, extra_args):
    out = ctx.path(os.path.basename(path) + ".trace.json")
    sh([ctx.baspc, path, "--trace", out, "-q"] + extra_args)
    with open(out) as f:
        return [e for e in json.load(f)["traceEvents"] if e.get("ph") == "X"]


def op_seconds(events, value):
    durs = [e["dur"] for e in events if e.get("args", {}).get("value") == value]
    if not durs:
        sys.exit(f"model_validation: the trace has no op for %{value}")
    return max(durs) * 1e-6


def step_seconds(events):
    return max((e["ts"] + e["dur"] for e in events), default=0) * 1e-6


def predict_trace(path, value, extra_args):
    """A `predict` function: the op's duration (value) or the whole step from
    `baspc PATH --trace`."""
    def predict(p, ctx):
        ev = trace_events(ctx, path, extra_args)
        return op_seconds(ev, value) if value else step_seconds(ev)
    return predict


def predict_collective(ctx, p, copies):
    text, modelled = collective_module(ctx, p, copies)
    path = ctx.path(f"{p.key}{'-copies' if copies else ''}.bir")
    with open(path, "w") as f:
        f.write(text)
    return op_seconds(trace_events(ctx, path, []), "y"), modelled


def probe_copies(ctx):
    """Checks that this baspc honours `cost.a2a_copies = off`: the same
    all-to-all with the key and without it, on the cpu preset (whose memory
    bandwidth makes the copies large)."""
    p = Point("probe", "", "", "all_to_all", 1, 2, 4 * MiB, 1, "M", False, "", device="cpu")
    on, _ = predict_collective(ctx, p, copies=True)
    off, _ = predict_collective(ctx, p, copies=False)
    if not off < on * 0.999:
        sys.exit("model_validation: this baspc ignores `config cost.a2a_copies = off`: rebuild it")


# ---- formatting -----------------------------------------------------------
def fmt_size(b):
    for unit, v in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if b >= v and b % v == 0:
            return f"{b // v} {unit}"
    for unit, v in (("GiB", GiB), ("MiB", MiB), ("KiB", KiB)):
        if b >= v:
            return f"{b / v:.3g} {unit}"
    return f"{b} B"


def fmt_time(s):
    if s is None:
        return "–"
    if s < 1e-3:
        return f"{s * 1e6:.4g} us"
    if s < 1:
        return f"{s * 1e3:.4g} ms"
    return f"{s:.4g} s"


def err_pct(p):
    return (p.predicted_s - p.measured_s) / p.measured_s * 100


def mape(points):
    return sum(abs(err_pct(p)) for p in points) / len(points) if points else None


def summary_rows(points):
    published = [p for p in points if not p.source.startswith("own")]
    a2a = [p for p in published if p.collective == "all_to_all"]
    ring = [p for p in published if p.collective in ("all_gather", "reduce_scatter", "all_reduce")]
    groups = [("published all-to-all", a2a), ("published all-gather (ring model)", ring)]
    for src in sorted({p.source for p in points if p.source.startswith("own")}):
        groups.append((src, [p for p in points if p.source == src]))
    groups += [("all all-to-all points", [p for p in points if p.collective == "all_to_all"]),
               ("all points", points)]
    rows = []
    for name, pts in groups:
        if not pts:
            continue
        out = [p for p in pts if not p.fitted]
        rows.append((name, len(pts), mape(pts), len(out), mape(out)))
    return rows


def fmt_pct(v):
    return "–" if v is None else f"{v:.1f}%"


def table_rows(points):
    rows = []
    for i, p in enumerate(points, 1):
        rows.append([str(i), p.key, p.source, p.collective.replace("_", "-"), f"{p.nodes}x{p.gpus}",
                     fmt_size(p.size) if p.size else "–", fmt_time(p.measured_s), p.status, fmt_time(p.predicted_s),
                     f"{err_pct(p):+.1f}%", "yes" if p.fitted else "no"])
    return rows


HEAD = ["#", "point", "source", "op", "n x g", "size", "measured", "M/D", "predicted", "error", "fitted"]


def print_table(points):
    rows = [HEAD] + table_rows(points)
    w = [max(len(r[i]) for r in rows) for i in range(len(HEAD))]
    for r in rows:
        print("  ".join(c.ljust(w[i]) if i in (1, 2, 3) else c.rjust(w[i]) for i, c in enumerate(r)))
    print()
    for name, n, m_all, n_out, m_out in summary_rows(points):
        print(f"MAPE {name}: {fmt_pct(m_all)} over {n} points; {fmt_pct(m_out)} over the {n_out} not fitted")


def write_csv(path, points):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["point", "source", "url", "hardware", "collective", "nodes", "gpus_per_node", "ranks",
                    "size_bytes", "modelled_bytes", "measured_s", "status", "predicted_s", "error_pct",
                    "predicted_with_copies_s", "fitted", "fit_note", "basis", "note"])
        for p in points:
            w.writerow([p.key, p.source, p.url, p.hardware, p.collective, p.nodes, p.gpus, p.ranks, p.size,
                        p.modelled_size, f"{p.measured_s:.6g}", p.status, f"{p.predicted_s:.6g}",
                        f"{err_pct(p):.2f}",
                        "" if p.predicted_copies_s is None else f"{p.predicted_copies_s:.6g}",
                        "yes" if p.fitted else "no", p.fit_note, p.basis, p.note])


def md_cell(s):
    return str(s).replace("|", "\\|")


def write_md(path, points, ctx, argv):
    L = []
    L.append("# Cost model validation: collective times against measurements\n")
    L.append("Written by `bench/model_validation.py`; the method is in "
             "[docs/link-model.md](../../../docs/link-model.md#validation).  Every point is one "
             "collective on the mesh of a published nccl-tests run (or one of our own "
             "measurements), predicted by the cost model (`baspc MODULE.bir --trace`) and compared "
             "with the measured time: error = (predicted − measured) / measured.  Negative errors are "
             "predictions that are too fast.\n")
    L.append("The published points time NCCL's exchange alone, so they are predicted with the "
             "runtime's pack/unpack copies off (`config cost.a2a_copies = off`).\n")
    L.append("| " + " | ".join(["#", "point", "source", "hardware", "op", "n × g", "size", "measured", "M/D",
                                  "predicted", "error", "fitted"]) + " |")
    L.append("|" + "---|" * 12)
    for i, p in enumerate(points, 1):
        src = f"[{p.source}]({p.url})" if p.url else p.source
        L.append("| " + " | ".join(md_cell(c) for c in [
            i, p.key, src, p.hardware, p.collective.replace("_", "-"), f"{p.nodes} × {p.gpus}",
            fmt_size(p.size) if p.size else "–", fmt_time(p.measured_s), p.status, fmt_time(p.predicted_s),
            f"{err_pct(p):+.1f}%", "yes" if p.fitted else "no"]) + " |")
    L.append("")
    L.append("M: read off the source's time column; D: derived from its busbw (the arithmetic below).  "
             "size: nccl-tests' size column, an all-to-all's per-rank buffer and an all-gather's whole "
             "output.  fitted: a model parameter was fitted on, or checked against, that figure "
             "(in-sample).\n")
    L.append("## Mean absolute percentage error\n")
    L.append("| points | n | MAPE | n not fitted | MAPE not fitted |")
    L.append("|---|---|---|---|---|")
    for name, n, m_all, n_out, m_out in summary_rows(points):
        L.append(f"| {name} | {n} | {fmt_pct(m_all)} | {n_out} | {fmt_pct(m_out)} |")
    L.append("")
    worst = sorted(points, key=lambda p: -abs(err_pct(p)))[:5]
    L.append("Largest misses: " + "; ".join(f"{p.key} {err_pct(p):+.0f}%" for p in worst) + ".\n")
    L.append("## How each figure was read\n")
    for i, p in enumerate(points, 1):
        extra = []
        if p.modelled_size and p.modelled_size != p.size:
            extra.append(f"modelled as {p.modelled_size} B (whole bf16 elements per peer)")
        if p.fitted and p.fit_note:
            extra.append(f"fitted: {p.fit_note}")
        if p.note:
            extra.append(p.note)
        if p.predicted_copies_s is not None:
            extra.append(f"with basp's pack/unpack copies the model predicts {fmt_time(p.predicted_copies_s)}")
        L.append(f"{i}. **{p.key}** [{p.source}]: {md_cell(p.basis) or 'see the source'} → "
                 f"{fmt_time(p.measured_s)} ({p.status})" + (". " + "; ".join(extra) if extra else "") + ".")
    L.append("")
    L.append("## Published figures not used\n")
    for key, url, why in NOT_USED:
        L.append(f"- [{key}]({url}): {why}.")
    L.append("")
    L.append("## Command\n")
    L.append("```")
    L.append("bench/model_validation.py " + " ".join(argv))
    L.append("```")
    L.append(f"\n`{sh([ctx.baspc, '--version']).strip()}`; link presets as `baspc --emit=lowered` reads them "
             "for each point's device.")
    with open(path, "w") as f:
        f.write("\n".join(L) + "\n")


# ---- main -----------------------------------------------------------------
def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"), help="build directory holding baspc")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "validation"), help="where results go")
    ap.add_argument("--extra", action="append", default=[], metavar="FILE.json",
                    help="more points (load_extra); repeatable")
    ap.add_argument("--modules", metavar="DIR", help="keep the generated modules and traces in DIR")
    ap.add_argument("--no-own", action="store_true", help="published points only (no emulated cluster, no H200)")
    args = ap.parse_args()

    baspc = os.path.join(args.build, "baspc")
    if not os.access(baspc, os.X_OK):
        sys.exit(f"model_validation: no baspc in {args.build} (cmake --build {args.build} --target baspc)")
    workdir = args.modules or tempfile.mkdtemp(prefix="basp-validation-")
    os.makedirs(workdir, exist_ok=True)
    ctx = Ctx(baspc, workdir)
    try:
        probe_copies(ctx)
        points = published_points() + own_measurements(args)
        for path in args.extra:
            points += load_extra(path)
        for p in points:
            if p.predicted_s is not None:
                continue
            if p.predict:
                p.predicted_s = p.predict(p, ctx)
            else:
                p.predicted_s, p.modelled_size = predict_collective(ctx, p, p.copies)
                if p.collective == "all_to_all" and not p.copies:
                    p.predicted_copies_s, _ = predict_collective(ctx, p, True)
    finally:
        if not args.modules:
            shutil.rmtree(workdir, ignore_errors=True)

    os.makedirs(args.out, exist_ok=True)
    write_csv(os.path.join(args.out, "results.csv"), points)
    argv = [a if not a.startswith(ROOT + os.sep) else os.path.relpath(a, ROOT) for a in sys.argv[1:]]
    write_md(os.path.join(args.out, "results.md"), points, ctx, argv)
    print_table(points)
    print(f"\nall-to-all copies excluded through cost.a2a_copies = off; results in {os.path.relpath(args.out)}/")


if __name__ == "__main__":
    main()
