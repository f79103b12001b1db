/* test_a2a_rope_emu.c — the CUDA backend's all_to_all with RoPE fused in
 * (rt_all_to_all_rope, rt_comm_cuda.c) on 2 ranks under cuemu, against
 * rt_rope then rt_all_to_all (rt_all_to_all then rt_rope_bwd), which must
 * agree bit for bit, through the runtime's own table, positions and
 * exchange geometry.  A hand-built program holds Llama-like attention
 * values, b 2, seq_len 8, Dh 16, sharded over the 2 ranks:
 *
 *   forward, seq -> heads (split 2, concat 1), one fused exchange of three
 *   pairs: q [2,8,4,16] and k [2,8,1,16] rotated (k fans out to 2 virtual
 *   heads), v [2,8,1,16] not (rope = 0b011);
 *   backward, heads -> seq (split 1, concat 2): dq rotated back in the
 *   unpack, dk summed over its 2 virtual heads (fanin) and rotated back in
 *   place afterwards (rope_bwd = 0b11).
 *
 * With the argument `ring` the sequence is in the ring's zig-zag order
 * (seq_ring 2), so the positions come from the position table. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "emu_test.h"

enum { B = 2, S = 8, H = 4, HKV = 1, DH = 16 };
enum { W = 0 };

/* Q, K, V seq-sharded inputs; QR, KR their rotations (reference); *H the
 * head-sharded results (1: fused, 2: reference); DQ, DK the backward's
 * seq-sharded results (1: fused, 2: reference; P: before rope_bwd). */
enum {
    TOK = EMU_TOK,
    TGT = EMU_TGT,
    LOSS = EMU_LOSS,
    Q,
    K,
    V,
    QR,
    KR,
    QH1,
    KH1,
    VH1,
    QH2,
    KH2,
    VH2,
    DQ1,
    DK1,
    DQP,
    DKP,
    DQ2,
    DK2,
    NV
};
static rt_value_desc vals[NV];
static int failures;

static void def(int v, const char *name, rt_value_kind kind, rt_dtype dt, int rank, const int64_t *dims, int sdim) {
    emu_def(vals, v, name, kind, dt, rank, dims, sdim);
}

static rt_program prog;

static void define_values(void) {
    const int64_t q[4] = {B, S, H, DH}, k[4] = {B, S, HKV, DH}, kv2[4] = {B, S, 2 * HKV, DH};
    static const char *names[NV] = {
        [Q] = "q",     [K] = "k",     [V] = "v",     [QR] = "qr",   [KR] = "kr",   [QH1] = "qh1",
        [KH1] = "kh1", [VH1] = "vh1", [QH2] = "qh2", [KH2] = "kh2", [VH2] = "vh2", [DQ1] = "dq1",
        [DK1] = "dk1", [DQP] = "dqp", [DKP] = "dkp", [DQ2] = "dq2", [DK2] = "dk2"};
    for (int v = Q; v < NV; v++) {
        bool heads = v >= QH1 && v <= VH2,
             isq = v == Q || v == QR || v == QH1 || v == QH2 || v == DQ1 || v == DQP || v == DQ2;
        const int64_t *dims = isq ? q : heads ? kv2 : k; /* k, v fan out to 2 virtual heads */
        def(v, names[v], RT_ACT, RT_F32, 4, dims, heads ? 2 : 1);
    }
}

static void fill(rt_ctx *rt, int v) {
    int64_t n = vals[v].local_elems;
    float *h = malloc(sizeof(float) * (size_t)n);
    uint64_t x = 0x9e3779b97f4a7c15ULL * (uint64_t)(v + 1) + (uint64_t)rt->rank;
    for (int64_t i = 0; i < n; i++) {
        x ^= x << 13, x ^= x >> 7, x ^= x << 17;
        h[i] = (float)((double)(x >> 11) * 0x1.0p-52 - 1.0);
    }
    rt_host_write(rt, v, h);
    free(h);
}

static void expect_same(rt_ctx *rt, int got, int want) {
    int64_t n = vals[got].local_elems, bad = 0;
    float *a = malloc(sizeof(float) * (size_t)n), *b = malloc(sizeof(float) * (size_t)n);
    rt_host_read(rt, got, a);
    rt_host_read(rt, want, b);
    for (int64_t i = 0; i < n; i++) bad += memcmp(&a[i], &b[i], sizeof(float)) != 0 || isnan(a[i]);
    if (bad) {
        failures++;
        fprintf(stderr, "rank %d: FAILED: %s differs from %s in %lld of %lld elements\n", rt->rank, vals[got].name,
                vals[want].name, (long long)bad, (long long)n);
    }
    free(a), free(b);
}

/* Each half ends with the device synchronised: cuemu's streams run lazily,
 * so a fused exchange's kernels on the communication stream run there,
 * after rt_rope / rt_rope_bwd have put the table of their own key (pos0,
 * s) in place of the fused exchange's (0, seq_len) on the compute stream,
 * unless the compute stream waited for the exchange's reads first
 * (cuda_ws_write_cs).  Without that wait the results differ. */
static void run(rt_ctx *rt) {
    int64_t s = S / 2, pos0 = rt->rank * s;
    double theta = 10000.0;
    for (int v = Q; v <= V; v++) fill(rt, v);
    /* forward: fused, then rope and the plain exchange */
    int fin[3] = {Q, K, V}, fout1[3] = {QH1, KH1, VH1};
    rt_all_to_all_rope(rt, W, 2, 1, 2, 1, 3, fin, fout1, 0x3, 0, 0, pos0, theta);
    rt_rope(rt, rt_f32(rt, QR), rt_f32(rt, Q), 0, B, s, H, DH, pos0, theta);
    rt_rope(rt, rt_f32(rt, KR), rt_f32(rt, K), 0, B, s, HKV, DH, pos0, theta);
    int rin[3] = {QR, KR, V}, fout2[3] = {QH2, KH2, VH2};
    rt_all_to_all(rt, W, 2, 1, 2, 1, 3, rin, fout2);
    rt_comm_finish_step(rt);
    expect_same(rt, QH1, QH2);
    expect_same(rt, KH1, KH2);
    expect_same(rt, VH1, VH2);
    /* backward: the head-sharded results go back, dk summed over its virtual heads */
    int bin[2] = {QH1, KH1}, bout1[2] = {DQ1, DK1}, bout2[2] = {DQP, DKP};
    rt_all_to_all_rope_start(rt, W, 1, 2, 1, 2, 2, bin, bout1, 0, 0x3, 0, pos0, theta);
    rt_all_to_all(rt, W, 1, 2, 1, 2, 2, bin, bout2);
    rt_rope_bwd(rt, rt_f32(rt, DQ2), rt_f32(rt, DQP), 0, B, s, H, DH, pos0, theta);
    rt_rope_bwd(rt, rt_f32(rt, DK2), rt_f32(rt, DKP), 0, B, s, HKV, DH, pos0, theta);
    rt_wait(rt, 2, bout1);
    rt_comm_finish_step(rt);
    expect_same(rt, DQ1, DQ2);
    expect_same(rt, DK1, DK2);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    prog = emu_program("test_a2a_rope", "tests/gpu/emu/test_a2a_rope_emu.c", vals, NV, B, S,
                       argc > 1 && strcmp(argv[1], "ring") == 0 ? 2 : 0);
    define_values();
    rt_options o = {.steps = 1, .seed = 7, .lr = 1e-3, .log_every = 1, .optim = rt_optim_defaults};
    rt_ctx *rt = rt_ctx_create(&prog, &o);
    run(rt);
    int total = 0;
    MPI_Allreduce(&failures, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (rank == 0)
        printf("test_a2a_rope_emu%s: %s (%d failure(s))\n", prog.seq_ring ? " (ring)" : "", total ? "FAILED" : "ok",
               total);
    rt_ctx_destroy(rt);
    MPI_Finalize();
    return total ? 1 : 0;
}
