/* test_ring_split_emu.c — ring attention's blocks as sub-blocks
 * (runtime/cuda/rt_ring_split.c) on 2 ranks under cuemu, against the
 * basp block kernels.  On a GPU the sub-blocks are cuDNN's fused graphs;
 * cuemu has no cuDNN, so this test gives the split an attention of its
 * own made of basp's kernels (cuemu_sub_ops.c: the windows packed, a block
 * kernel from an empty state, its output rounded to bf16 and its lse laid
 * out as cuDNN's statistics).  What it checks is everything around the
 * sub-blocks: the runs found in the sequence order, the full / causal /
 * skipped classification, the windows (ld), the merges of the forward's
 * running state, the backward's statistics windows and accumulations, and
 * the one-time check with its fallback.  cuDNN's graphs themselves are
 * checked on the host by cudnn.ops and on a GPU by gpu.kernels.
 *
 * A hand-built program holds q [2,256,4,32], k, v [2,256,2,32] (GQA 2:1)
 * sequence-sharded over the 2 ranks of one ring: 128 rows each, the
 * zig-zag order's two runs of 64 (or, with `natural`, one run of 128).
 * Each mode runs ring_attention and its backward twice with the basp
 * kernels, then twice through the split (the first forward and backward
 * with the one-time check: BASP_ATTENTION=auto's behaviour), and compares:
 *   zigzag, natural: o, dq, dk, dv within 1e-2 of max |basp| and lse within
 *     1e-3 absolute (each sub-block's output is rounded to bf16 once before
 *     the fp32 sums: 2^-9 relative; measured 2e-3 to 5e-3, and 1e-6);
 *   planted: the split's attention swaps full and causal
 *     (cuemu_sub_ops_flipped): the check must refuse the shape and put the
 *     basp kernels' results in place, so everything equals the basp run bit
 *     for bit;
 *   planted_nocheck: the same bug with the check off must differ by more
 *     than the tolerances (the comparison can fail). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu_test.h"

enum { B = 2, S = 256, H = 4, HKV = 2, DH = 32, SL = S / 2 };
enum { W = 0 };

/* per run r (0: basp, 1: split): O, L (lse), DQ, DK, DV */
enum { TOK = EMU_TOK, TGT = EMU_TGT, LOSS = EMU_LOSS, Q, K, V, DO, O0, L0, DQ0, DK0, DV0, O1, L1, DQ1, DK1, DV1, NV };
static rt_value_desc vals[NV];
static int failures;

static void def(int v, const char *name, rt_value_kind kind, rt_dtype dt, int rank, const int64_t *dims, int sdim) {
    emu_def(vals, v, name, kind, dt, rank, dims, sdim);
}

static rt_program prog;

static void define_values(void) {
    const int64_t q[4] = {B, S, H, DH}, kv[4] = {B, S, HKV, DH}, rows[3] = {B, S, H};
    static const char *names[NV] = {
        [Q] = "q",          [K] = "k",          [V] = "v",          [DO] = "do",       [O0] = "o_basp",
        [L0] = "lse_basp",  [DQ0] = "dq_basp",  [DK0] = "dk_basp",  [DV0] = "dv_basp", [O1] = "o_split",
        [L1] = "lse_split", [DQ1] = "dq_split", [DK1] = "dk_split", [DV1] = "dv_split"};
    for (int v = Q; v < NV; v++) {
        bool isq = v == Q || v == DO || v == O0 || v == O1 || v == DQ0 || v == DQ1;
        if (v == L0 || v == L1) {
            def(v, names[v], RT_ACT, RT_F32, 3, rows, 1);
            vals[v].keep_f32 = 1;
        } else {
            def(v, names[v], RT_ACT, RT_F32, 4, isq ? q : kv, 1);
        }
    }
}

static void fill(rt_ctx *rt, int v, double scale) {
    int64_t n = vals[v].local_elems;
    float *h = malloc(sizeof(float) * (size_t)n);
    uint64_t x = 0x9e3779b97f4a7c15ULL * (uint64_t)(v + 1) + (uint64_t)rt->rank;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        h[i] = (float)(scale * ((double)(x >> 11) * 0x1.0p-52 - 1.0));
    }
    rt_host_write(rt, v, h);
    free(h);
}

/* ---- the runs and the comparison ------------------------------------------------------------ */
/* Forward and backward into run r's values. */
static void ring(rt_ctx *rt, int r) {
    int o = r ? O1 : O0, l = r ? L1 : L0, dq = r ? DQ1 : DQ0, dk = r ? DK1 : DK0, dv = r ? DV1 : DV0;
    rt_ring_attention(rt, W, rt_f32(rt, o), rt_f32(rt, l), rt_f32(rt, Q), rt_f32(rt, K), rt_f32(rt, V), 0, B, SL, H,
                      HKV, DH);
    rt_ring_attention_bwd(rt, W, rt_f32(rt, dq), rt_f32(rt, dk), rt_f32(rt, dv), rt_f32(rt, DO), rt_f32(rt, Q),
                          rt_f32(rt, K), rt_f32(rt, V), rt_f32(rt, o), rt_f32(rt, l), 0, B, SL, H, HKV, DH);
    CU_CHECK(cudaDeviceSynchronize());
}

/* max |a - b| (relative to max |b| when rel), NaN counting as infinite. */
static double diff(rt_ctx *rt, int a, int b, bool rel) {
    int64_t n = vals[a].local_elems;
    float *x = malloc(sizeof(float) * (size_t)n), *y = malloc(sizeof(float) * (size_t)n);
    rt_host_read(rt, a, x);
    rt_host_read(rt, b, y);
    double e = 0, mx = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double d = fabs((double)x[i] - y[i]);
        if (!(d <= e)) e = d;
        if (fabs(y[i]) > mx) mx = fabs(y[i]);
    }
    free(x), free(y);
    return rel ? e / mx : e;
}

/* Every pair within tolerance (want_close), or at least one beyond it. */
static void compare(rt_ctx *rt, const char *when, bool want_close, bool exact) {
    static const char *what[5] = {"o", "lse", "dq", "dk", "dv"};
    int split[5] = {O1, L1, DQ1, DK1, DV1}, basp[5] = {O0, L0, DQ0, DK0, DV0};
    bool beyond = false;
    for (int i = 0; i < 5; i++) {
        double e = diff(rt, split[i], basp[i], i != 1), tol = exact ? 0 : i == 1 ? 1e-3 : 1e-2;
        bool over = !(e <= tol);
        beyond = beyond || over;
        if (rt->rank == 0 || over)
            printf("rank %d %s: %s %.3g%s%s (%s %.0e)\n", rt->rank, when, what[i], e, i == 1 ? " absolute" : " of max",
                   over ? " OVER" : "", exact ? "exact:" : "tolerance", tol);
        if (over && want_close) failures++;
    }
    if (!want_close && !beyond) {
        failures++;
        fprintf(stderr, "rank %d: FAILED: %s: the planted bug went unnoticed\n", rt->rank, when);
    }
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    const char *mode = argc > 1 ? argv[1] : "zigzag";
    prog = emu_program("test_ring_split", "tests/gpu/emu/test_ring_split_emu.c", vals, NV, B, S,
                       strcmp(mode, "natural") ? 2 : 0);
    bool planted = !strncmp(mode, "planted", 7);
    bool check = strcmp(mode, "planted_nocheck") != 0;
    define_values();
    rt_options o = {.steps = 1, .seed = 7, .lr = 1e-3, .log_every = 1, .optim = rt_optim_defaults};
    rt_ctx *rt = rt_ctx_create(&prog, &o);
    fill(rt, Q, 2.0), fill(rt, K, 2.0), fill(rt, V, 1.0), fill(rt, DO, 1.0);
    rt_cuda_state *cu = cuda_state(rt);
    /* BASP_ATTENTION=auto checks once per shape; own never checks */
    cu->attn_mode = check ? CUDA_ATTN_AUTO : CUDA_ATTN_OWN;
    ring(rt, 0);
    cu->sub_ops = planted ? &cuemu_sub_ops_flipped : &cuemu_sub_ops;
    for (int pass = 0; pass < 2; pass++) {
        ring(rt, 1);
        char when[64];
        snprintf(when, sizeof when, "%s, %s op", mode, pass ? "second" : "first (checked)");
        compare(rt, when, !planted || check, planted && check);
    }
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rt->rank == 0) printf("test_ring_split_emu %s: %s (%d failure(s))\n", mode, total ? "FAILED" : "ok", total);
    cu->sub_ops = NULL;
    rt_ctx_destroy(rt);
    MPI_Finalize();
    return total ? 1 : 0;
}
