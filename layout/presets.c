/* presets.c — device and link presets: `device NAME` and `link intra|inter
 * KIND` in a mesh block (frontend), and the cost model's peaks for a module
 * that names only its device (passes/cost.c).
 *
 * Figures are the vendors' datasheet peaks (dense, no sparsity), which the
 * cost model scales by link/compute efficiency; they are not measurements.
 *   A100: NVIDIA A100 Tensor Core GPU datasheet (2021): BF16 312 TFLOPS dense,
 *         FP32 19.5 TFLOPS, HBM2 40GB at 1,555 GB/s, HBM2e 80GB at 2,039 GB/s
 *         (SXM); NVLink 3 600 GB/s bidirectional = 300 GB/s per direction.
 *   H100: NVIDIA H100 Tensor Core GPU datasheet (SXM5): BF16 989 TFLOPS dense
 *         (1,979 with sparsity), FP32 67 TFLOPS, 80GB HBM3 at 3.35 TB/s;
 *         NVLink 4 900 GB/s bidirectional = 450 GB/s per direction.
 *   H200: NVIDIA H200 Tensor Core GPU datasheet (SXM): BF16 989 TFLOPS dense,
 *         FP32 67 TFLOPS, 141GB HBM3e at 4.8 TB/s; NVLink 4 as H100.
 *   cpu:  a nominal multi-core host for the CPU/MPI backend: 16 GiB, 1e11
 *         flop/s, 2e10 B/s (shared memory between ranks, TCP between nodes).
 *   cpu_calibrated: the cpu preset with the efficiencies
 *         bench/calibrate.py fitted on the development machine (its
 *         shared-core efficiency included) and the shared-memory link
 *         bench_a2a measured there (measurements, not datasheet figures).
 *         A machine measured elsewhere comes as a device file (baspc
 *         --device-file, frontend/devfile.c), not as a row here.
 * The A100/H100 "40GB"/"80GB" parts expose 40960/81920 MiB, i.e. GiB; the
 * H200's 141GB is decimal.  Default inter-node links: 200Gb/s HDR InfiniBand
 * for A100 systems (DGX A100: 8x200Gb/s HDR, one per GPU), 400Gb/s NDR for
 * H100/H200 (DGX H100: 8x400Gb/s), ~5 us end-to-end latency.  A device
 * preset's links keep efficiency 1 (the spec states what it measured).
 * Host memory per node and the host link (offload): DGX A100 40GB 1 TB,
 * DGX A100 80GB, DGX H100 and DGX H200 2 TB of system memory (the user
 * guides' system specifications); each GPU sits on its own PCIe x16 link,
 * Gen4 on A100 and Gen5 on H100/H200 boards (the pcie4 / pcie5 presets
 * below).  The cpu presets: 64 GiB and a 10 GB/s memcpy, nominal.
 *
 * model_error, the largest measured miss of the predicted step time:
 *   GPUs 0.12: one H200, Llama-3.2-1B at 8K predicted 192.1 ms against
 *     193.0 measured (-0.5%), Llama-3.1-8B at 32K with full recomputation
 *     6139 ms against 5506 (+11.5%) (bench/results/gpu/train_1b.jsonl,
 *     train_8b.jsonl); the A100 and H100 presets are not measured and
 *     take the H200's figure.
 *   cpu 0.62: the emulated 2 x 4 cluster, nominal preset (bench/
 *     cluster_study.py), errs -62% to +13% per point.
 *   cpu_calibrated 0.18: the emulated 2 x 4 cluster on the machine it
 *     was fitted on, the same day.  Its steps of Ulysses and batch-aware
 *     are predicted within -11%..+13% (bench/results/cluster/), and 64 of
 *     the choice study's 71 runs of every candidate within 15%, all within
 *     18% (bench/results/choice/) but those whose traffic loses packets in
 *     the shaped TCP links: rings under round-robin placement (-69%, -43%)
 *     and at 8 Gbit/s (-29%), and flat Ulysses at 1 Gbit/s (-37%, its own
 *     rounds 413-778 ms), which a lossless fabric does not do.
 *
 * Link presets, for `link inter ib_ndr` with no numbers (explicit bandwidth,
 * latency or efficiency still win).  Bandwidth is per direction:
 *   nvlink3  A100 datasheet: NVLink 600 GB/s bidirectional -> 300 GB/s.
 *   nvlink4  H100 datasheet: NVLink 900 GB/s bidirectional -> 450 GB/s.
 *   pcie4    PCI Express 4.0 x16 (16 GT/s, 128b/130b): ~31.5 GB/s -> 32 GB/s.
 *   pcie5    PCI Express 5.0 x16 (32 GT/s): ~63 GB/s -> 64 GB/s.
 *   ib_hdr   NVIDIA ConnectX-6 / HDR InfiniBand: 200 Gb/s = 25 GB/s.
 *   ib_ndr   NVIDIA ConnectX-7 / NDR InfiniBand: 400 Gb/s = 50 GB/s.
 *   ethernet_100g  IEEE 802.3 100GbE: 100 Gb/s = 12.5 GB/s (RoCE).
 * Latencies are end-to-end collective-library small-message figures (a
 * few us inside a node, ~5 us over InfiniBand, ~10 us over Ethernet), not
 * wire latencies.  Efficiency is the assumed achievable fraction of the
 * line rate under NCCL-style collectives (0.8 for NVLink/PCIe/Ethernet,
 * 0.9 for InfiniBand, whose large-message bus bandwidth comes close to the
 * line rate); these are modelling assumptions, not datasheet values. */
#include <math.h>
#include <string.h>

#include "layout.h"

#define GiB 1073741824.0
#define NVLINK3                                                                                                        \
    { "nvlink", 300e9, 2e-6, 1.0 }
#define NVLINK4                                                                                                        \
    { "nvlink", 450e9, 2e-6, 1.0 }
#define IB_HDR                                                                                                         \
    { "ib", 200e9 / 8, 5e-6, 1.0 }
#define IB_NDR                                                                                                         \
    { "ib", 400e9 / 8, 5e-6, 1.0 }
/* Host links: named after the link presets below, whose numbers they take. */
#define PCIE4                                                                                                          \
    { "pcie4", 32e9, 3e-6, 0.8 }
#define PCIE5                                                                                                          \
    { "pcie5", 64e9, 3e-6, 0.8 }
/* The CPU backend's "device" and host share DRAM: a copy between arenas. */
#define MEMCPY                                                                                                         \
    { "memcpy", 10e9, 1e-6, 1.0 }

static const layout_device_preset presets[] = {
    {"a100_40gb", 40 * GiB, 312e12, 19.5e12, 1555e9, NVLINK3, IB_HDR, 0, 0, 0, 0, 0, 1e12, PCIE4, 0.12, 0},
    {"a100_80gb", 80 * GiB, 312e12, 19.5e12, 2039e9, NVLINK3, IB_HDR, 0, 0, 0, 0, 0, 2e12, PCIE4, 0.12, 0},
    {"h100_sxm", 80 * GiB, 989e12, 67e12, 3.35e12, NVLINK4, IB_NDR, 0, 0, 0, 0, 0, 2e12, PCIE5, 0.12, 0},
    {"h200", 141e9, 989e12, 67e12, 4.8e12, NVLINK4, IB_NDR, 0, 0, 0, 0, 0, 2e12, PCIE5, 0.12, 0},
    {"cpu",
     16 * GiB,
     1e11,
     1e11,
     2e10,
     {"shm", 10e9, 1e-6, 1.0},
     {"tcp", 10e9 / 8, 50e-6, 1.0},
     0,
     0,
     0,
     0,
     0,
     64 * GiB,
     MEMCPY,
     0.62,
     0},
    /* Fitted by `bench/calibrate.py --build build --repeats 3` on the
     * 2-core development machine (an Intel Xeon with AVX-512, OpenBLAS's
     * SkylakeX kernels), quiet (2 ranks, medians of 3 repeats x 30 steps
     * of the four tiny runs and the emulated cluster's model at 1024 and
     * 2048 tokens, each priced on the IR its program was built from;
     * bench/results/calibration/): the cpu preset's nominal peaks with the
     * fitted GEMM (137 GFLOP/s), attention (145 GFLOP/s) and memory (38
     * GB/s) fractions, per-op overhead and exponential rate, and the
     * shared-core efficiency (4 copies of the cluster's model on one core
     * each keep 0.90 of their quarter).  Of four fits that day this one is
     * the median; the others ranged 133-147 and 142-152 GFLOP/s and 0.90-0.95,
     * and the day before this machine fitted 159 and 157 GFLOP/s: a CPU
     * preset describes its machine on one day, which is why
     * bench/cluster_study.py also calibrates at its start (baspc
     * --device-file).  The shared-memory link is bench_a2a's rate for 2
     * ranks on 2 cores at 4 and 16 MiB (6.3 and 5.9 GB/s sent per rank);
     * the fit's own beta (1.8 GB/s) also holds the ranks' waits for each
     * other.  The inter link stays nominal: one machine has no network.
     * The fit before these, on an AMD EPYC machine (GEMMs 79 and attention
     * 92 GFLOP/s, shm 3.0 GB/s), over-predicted this machine's steps by
     * 44-88% at 2 ranks. */
    {"cpu_calibrated",
     16 * GiB,
     1e11,
     1e11,
     2e10,
     {"shm", 6.0e9, 0, 1.0},
     {"tcp", 10e9 / 8, 50e-6, 1.0},
     1.37,
     1.45,
     1.92,
     1.28e-6,
     1.93e9,
     64 * GiB,
     MEMCPY,
     0.18,
     0.90},
};

static const layout_link link_presets[] = {
    {"nvlink3", 300e9, 2e-6, 0.8},
    {"nvlink4", 450e9, 2e-6, 0.8},
    {"pcie4", 32e9, 3e-6, 0.8},
    {"pcie5", 64e9, 3e-6, 0.8},
    {"ib_hdr", 200e9 / 8, 5e-6, 0.9},
    {"ib_ndr", 400e9 / 8, 5e-6, 0.9},
    {"ethernet_100g", 100e9 / 8, 10e-6, 0.8},
};

const layout_link *layout_link_presets(int *n) {
    if (n) *n = (int)(sizeof link_presets / sizeof link_presets[0]);
    return link_presets;
}

const layout_link *layout_link_lookup(const char *kind) {
    int n;
    const layout_link *p = layout_link_presets(&n);
    for (int i = 0; i < n; i++)
        if (!strcmp(p[i].kind, kind)) return &p[i];
    return NULL;
}

const layout_device_preset *layout_device_presets(int *n) {
    if (n) *n = (int)(sizeof presets / sizeof presets[0]);
    return presets;
}

/* ---- attention kernels' rates ----------------------------------------------
 * Fraction of the bf16 dense peak reached by one causal attention op, by
 * implementation (common.h, cm_attention_impl), head dim and sequence
 * length; FLOPs counted as the cost model counts them (forward
 * 2·b·H·S²·Dh, backward 2.5 times that: ir_op_attn.c).
 *
 *   hopper (h200, h100_sxm) cudnn, and cuda-basp ("any"): measured on one H200 (cuDNN 9.19, CUDA 13.0),
 *     bench/gpu_attention_bench.c, H = 32/8 at Dh 64 and 16/8 at Dh 128,
 *     batch 1: bench/results/gpu/summary.txt (e.g. cuDNN Dh 128 S 16K:
 *     629.6 TFLOP/s forward, 570.9 backward; basp's kernels 60.9 and 6.5).
 *   h100_sxm takes the H200's rows (same sm_90 tensor cores and clocks;
 *     attention at these lengths is bound by the tensor cores, not by HBM).
 *     Estimate.
 *   ampere (a100_*) cudnn: FlashAttention-2 (T. Dao, arXiv:2307.08691, 2023) reaches
 *     50-73% of the A100's 312 TFLOP/s forward and up to 225 TFLOP/s (72%)
 *     forward+backward at head dim 128, less at 64; cuDNN's fused attention
 *     is of that class.  The rows below take the low end at 4K and the
 *     high end at 16K, backward 0.85 of forward (the H200's ratio).
 *     Derived from a published figure, not measured here.
 *   cuda-basp on the A100: the H200's fractions (basp's kernels use the
 *     tensor cores through mma.sync, which both generations run).  Estimate.
 * Ring blocks run cuDNN on sub-blocks of half the rank's slice (the
 * zig-zag order's runs: runtime/cuda/rt_ring_split.c), so cudnn-ring takes
 * the cudnn rows at half the length the cost model passes.  Packed
 * documents run cuDNN on batches of documents zero-padded to a power of
 * two (rt_doc_split.c): cudnn-docs takes the cudnn rows at the row's
 * length times LAYOUT_DOCS_PADDING (layout.h), and the backward also divides by
 * DOCS_RECOMPUTE (it recomputes the forward: 1/2.5 of its FLOPs at about
 * 0.85 of the backward's time per FLOP).  Ring blocks over packed
 * documents keep basp's kernels: the cuda-basp rows.  Estimates: neither
 * split has been timed on a GPU yet (scripts/gpu-check's kernels part
 * times the ring's sub-blocks). */
#define DOCS_RECOMPUTE 1.35
typedef struct attn_rate {
    const char *gpu; /* "hopper" (h200, h100_sxm), "ampere" (a100_*), "any" */
    cm_attn_impl impl;
    int head_dim;
    int64_t seq;
    double fwd, bwd;
} attn_rate;

/* clang-format off */
static const attn_rate attn_rates[] = {
    {"hopper", CM_ATTN_CUDNN,      64,  4096, 0.354, 0.312},
    {"hopper", CM_ATTN_CUDNN,      64,  8192, 0.434, 0.400},
    {"hopper", CM_ATTN_CUDNN,      64, 16384, 0.474, 0.445},
    {"hopper", CM_ATTN_CUDNN,     128,  4096, 0.429, 0.377},
    {"hopper", CM_ATTN_CUDNN,     128,  8192, 0.568, 0.491},
    {"hopper", CM_ATTN_CUDNN,     128, 16384, 0.637, 0.577},
    {"ampere", CM_ATTN_CUDNN,      64,  4096, 0.45,  0.38},
    {"ampere", CM_ATTN_CUDNN,      64, 16384, 0.60,  0.51},
    {"ampere", CM_ATTN_CUDNN,     128,  4096, 0.50,  0.43},
    {"ampere", CM_ATTN_CUDNN,     128, 16384, 0.73,  0.62},
    {"any",    CM_ATTN_CUDA_BASP,  64,  4096, 0.045, 0.0069},
    {"any",    CM_ATTN_CUDA_BASP,  64,  8192, 0.051, 0.0081},
    {"any",    CM_ATTN_CUDA_BASP,  64, 16384, 0.054, 0.0091},
    {"any",    CM_ATTN_CUDA_BASP, 128,  4096, 0.046, 0.0058},
    {"any",    CM_ATTN_CUDA_BASP, 128,  8192, 0.055, 0.0064},
    {"any",    CM_ATTN_CUDA_BASP, 128, 16384, 0.062, 0.0066},
};
/* clang-format on */

/* The generation of a GPU preset, NULL for the others. */
static const char *gpu_class(const char *device) {
    if (!strcmp(device, "h200") || !strcmp(device, "h100_sxm")) return "hopper";
    if (!strncmp(device, "a100_", 5)) return "ampere";
    return NULL;
}

static bool rate_row(const attn_rate *r, const char *gpu, cm_attn_impl impl, int head_dim) {
    return (!strcmp(r->gpu, gpu) || !strcmp(r->gpu, "any")) && r->impl == impl && r->head_dim == head_dim;
}

/* Past the longest row: causal attention's work grows as S^2 while what
 * a kernel spends per row (the diagonal tiles it half wastes, each row's
 * softmax set-up and epilogue) grows as S, so its rate approaches a limit
 * as a - c/S.  That law, fitted to the 4K and 16K rows, predicts the 8K
 * rows within 0-4% (cuDNN on the H200, both head dims, forward and
 * backward; PyTorch's SDPA on the same GPU within 7%), where staying at
 * the 16K rate would ignore a rise measured at every doubling.  Fitted to
 * the two longest rows (lo2 < lo), used only when the rate still rises
 * there.  An extrapolation: no attention past 16K has been timed. */
static double rate_past(const attn_rate *lo2, const attn_rate *lo, bool bwd, double seq) {
    double r2 = bwd ? lo2->bwd : lo2->fwd, r = bwd ? lo->bwd : lo->fwd;
    double c = (r - r2) / (1.0 / (double)lo2->seq - 1.0 / (double)lo->seq);
    return c > 0 ? r + c * (1.0 / (double)lo->seq - 1.0 / seq) : r;
}

/* The rate of the rows of (device, impl, head_dim) at seq: linear in
 * log2(seq) between the nearest rows; below the shortest, its rate; past
 * the longest, rate_past; -1 when there is none. */
static double rate_at(const char *gpu, cm_attn_impl impl, bool bwd, int head_dim, double seq) {
    const attn_rate *lo = NULL, *hi = NULL, *lo2 = NULL;
    for (size_t i = 0; i < sizeof attn_rates / sizeof attn_rates[0]; i++) {
        const attn_rate *r = &attn_rates[i];
        if (!rate_row(r, gpu, impl, head_dim)) continue;
        if (r->seq <= seq && (!lo || r->seq > lo->seq)) lo = r;
        if (r->seq >= seq && (!hi || r->seq < hi->seq)) hi = r;
    }
    if (!lo && !hi) return -1;
    if (lo && !hi) /* past the longest row: the next longest, for the law */
        for (size_t i = 0; i < sizeof attn_rates / sizeof attn_rates[0]; i++) {
            const attn_rate *r = &attn_rates[i];
            if (rate_row(r, gpu, impl, head_dim) && r->seq < lo->seq && (!lo2 || r->seq > lo2->seq)) lo2 = r;
        }
    if (lo && !hi && lo2 && seq > (double)lo->seq) return rate_past(lo2, lo, bwd, seq);
    if (!lo || !hi || lo == hi) return bwd ? (lo ? lo : hi)->bwd : (lo ? lo : hi)->fwd;
    double w = (log2(seq) - log2((double)lo->seq)) / (log2((double)hi->seq) - log2((double)lo->seq));
    return (1 - w) * (bwd ? lo->bwd : lo->fwd) + w * (bwd ? hi->bwd : hi->fwd);
}

double layout_attention_fraction(const char *device, cm_attn_impl impl, bool bwd, int64_t head_dim, int64_t seq) {
    const char *gpu = device ? gpu_class(device) : NULL;
    if (!gpu || head_dim <= 0 || seq <= 0) return 0;
    if (impl == CM_ATTN_CUDNN_RING) { /* cuDNN on the sub-blocks: half the slice */
        impl = CM_ATTN_CUDNN;
        seq = seq / 2 > 0 ? seq / 2 : 1;
    }
    if (impl == CM_ATTN_CUDNN_DOCS) { /* padded batches; the backward recomputes the forward */
        double f = layout_attention_fraction(device, CM_ATTN_CUDNN, bwd, head_dim, seq);
        return bwd ? f * LAYOUT_DOCS_PADDING / DOCS_RECOMPUTE : f * LAYOUT_DOCS_PADDING;
    }
    /* the measured head dims, 64 and 128, bracket the ones people train */
    double f64 = rate_at(gpu, impl, bwd, 64, (double)seq), f128 = rate_at(gpu, impl, bwd, 128, (double)seq);
    if (f64 < 0 || f128 < 0) return 0;
    double w = ((double)head_dim - 64) / 64;
    w = w < 0 ? 0 : w > 1 ? 1 : w;
    return (1 - w) * f64 + w * f128;
}
