/* gpu_attention_bench.c — TFLOP/s of the CUDA attention kernels
 * (runtime/cuda/kcu_attention*.cu), causal, forward and backward, head dim
 * 64 and 128, sequence 4K-16K, one sequence of 32 (Dh 64) or 16 (Dh 128)
 * query heads over 8 kv heads.  The forward is timed twice, side by side:
 * the tensor-core kernel (what training uses at these head dims) and the
 * scalar one, with their ratio.  With cuDNN (BASP_HAVE_CUDNN) its fused
 * flash attention (runtime/cuda/rt_attn_cudnn.c: the graphs the runtime
 * uses under BASP_ATTENTION=auto/cudnn) is timed beside them, forward and
 * backward, with the ratio cuDNN time / basp time (below 1: cuDNN faster);
 * its plans are built before timing.
 *
 * Then the kernels of the two long-context modes (runtime/cuda/kcu_ring.cu):
 * one ring step's block (a ring of two: the local half of the sequence's
 * queries against the other half's keys, all visible, fp32 running
 * results; FLOPs 4 * H * (S/2)^2 * Dh), on basp's block kernel and, with
 * cuDNN, as the runtime runs it there (rt_ring_split.c: one full cuDNN
 * sub-block and the merge, or the statistics' window, the sub-block's
 * backward and the three accumulations), with the ratio to basp's time;
 * and packed documents (the whole sequence in documents of 1024 tokens, or
 * S/4 below 4096, causal within each; FLOPs the causal half of each
 * document's 4 * H * l^2 * Dh), forward and backward (2.5 times the
 * forward's FLOPs, the recomputed row statistics not counted); with cuDNN
 * also the documents as the runtime runs them there (rt_doc_split.c: one
 * batch of S/len documents, already in place here, so without the gathers
 * and scatters, and the backward without the forward the runtime
 * recomputes before it).
 *
 * Last, the Ulysses exchange's packing of q and k for 8 peers (bench_pack):
 * RoPE apart (kcu_rope, then kcu_a2a_pack per chunk) against RoPE fused in
 * (kcu_a2a_pack_rope, pass fuse-rope), at sequences from 4 * --min-seq to
 * 4 * --max-seq, in
 * GB/s of the bytes each must move and against --bw.
 *
 *   gpu_attention_bench [--peak TFLOPS] [--bw GB/s] [--reps N] [--min-seq S] [--max-seq S]
 *
 * FLOPs counted as the causal half of the dense ones: forward 2 matmuls,
 * 4 * b * H * S^2 * Dh / 2; backward 2.5 times that (5 matmuls; the
 * recomputed statistics pass is not counted, as is usual).  Median of
 * --reps timed runs after one warm-up, timed with CUDA events.  --peak is
 * the bf16 dense peak used for the percentage (default 989, H100/H200 SXM);
 * --bw the memory bandwidth (default 3350, H100 SXM; 4800 on an H200).
 * Exits 77 when no GPU is visible. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcu.h"
#include "../host/rt_host.h" /* kern_rope_table: via runtime/cuda on the include path */
#ifdef BASP_HAVE_CUDNN
#include "rt_attn_cudnn.h"
#endif

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* Random bf16 in [-1, 1) on the device (a fixed host pattern). */
static kcu_bf16 *dev_random(int64_t n) {
    kcu_bf16 *h = malloc((size_t)n * 2), *d;
    uint64_t s = 0x9e3779b97f4a7c15ULL;
    for (int64_t i = 0; i < n; i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        h[i] = kcu_host_to_bf16((float)((double)(s >> 11) * 0x1.0p-53 * 2.0 - 1.0));
    }
    KCU_CHECK_EXIT(cudaMalloc((void **)&d, (size_t)n * 2));
    KCU_CHECK_EXIT(cudaMemcpy(d, h, (size_t)n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

typedef struct bench_buf {
    kcu_bf16 *q, *k, *v, *o, *dout, *dq, *dk, *dv;
    float *ws;
    /* ring blocks and documents: fp32 running output, statistics, row dots
     * and gradient accumulators; positions and document ids */
    float *o32, *lse, *D, *dq32, *dk32, *dv32;
    int64_t *pos;
    int32_t *doc;
#ifdef BASP_HAVE_CUDNN
    cuda_cudnn *dnn;      /* NULL: no cuDNN timings */
    cuda_cudnn_shape dsh; /* the shape DNN_FWD / DNN_BWD run */
    float *stats;         /* [b,H,S] fp32 */
    void *dnn_ws;
#endif
} bench_buf;

enum { FWD_TC, FWD_SCALAR, BWD, DNN_FWD, DNN_BWD, DNN_RING_FWD, DNN_RING_BWD, RING_FWD, RING_BWD, DOC_FWD, DOC_BWD };

static void launch(bench_buf *B, int what, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
#ifdef BASP_HAVE_CUDNN
    const cuda_cudnn_shape *sh = &B->dsh;
    int r = 0;
    if (what == DNN_FWD) r = cuda_cudnn_fwd(B->dnn, sh, B->o, B->stats, B->q, B->k, B->v, B->dnn_ws);
    if (what == DNN_BWD)
        r = cuda_cudnn_bwd(B->dnn, sh, B->dq, B->dk, B->dv, B->dout, B->q, B->k, B->v, B->o, B->stats, B->dnn_ws);
    int64_t h = S / 2; /* the ring block's query and key rows */
    /* the ring block as the runtime runs it with cuDNN (rt_ring_split.c):
     * one full sub-block of h rows, then the merge (forward) or the
     * statistics' window and the three accumulations (backward) */
    cuda_cudnn_shape rs = {1, h, H, Hkv, Dh, S, 1};
    const kcu_bf16 *rk = B->k + h * Hkv * Dh, *rv = B->v + h * Hkv * Dh;
    if (what == DNN_RING_FWD && (r = cuda_cudnn_fwd(B->dnn, &rs, B->o, B->stats, B->q, rk, rv, B->dnn_ws)) == 0)
        KCU_CHECK_EXIT(kcu_ring_merge(B->o32, B->lse, B->o, B->stats, 1, h, 0, h, H, Dh, 0));
    if (what == DNN_RING_BWD) {
        KCU_CHECK_EXIT(kcu_ring_lse_rows(B->stats, B->lse, 1, h, 0, h, H, 0));
        r = cuda_cudnn_bwd(B->dnn, &rs, B->dq, B->dk, B->dv, B->dout, B->q, rk, rv, B->o, B->stats, B->dnn_ws);
        KCU_CHECK_EXIT(kcu_ring_acc_rows(B->dq32, B->dq, 1, h, 0, h, H * Dh, 0));
        KCU_CHECK_EXIT(kcu_ring_acc_rows(B->dk32, B->dk, 1, h, 0, h, Hkv * Dh, 0));
        KCU_CHECK_EXIT(kcu_ring_acc_rows(B->dv32, B->dv, 1, h, 0, h, Hkv * Dh, 0));
    }
    if (r != 0) {
        fprintf(stderr, "cuDNN attention failed: %s\n", cuda_cudnn_error(B->dnn));
        exit(1);
    }
    if (what >= DNN_FWD && what <= DNN_RING_BWD) return;
#else
    int64_t h = S / 2; /* the ring block's query and key rows */
#endif
    if (what == RING_FWD)
        KCU_CHECK_EXIT(kcu_ring_block_fwd(B->o32, B->lse, B->q, B->k + h * Hkv * Dh, B->v + h * Hkv * Dh, 1, h, h, H,
                                          Hkv, Dh, NULL, NULL, 0));
    else if (what == RING_BWD)
        KCU_CHECK_EXIT(kcu_ring_block_bwd(B->dq32, B->dk32, B->dv32, B->dout, B->q, B->k + h * Hkv * Dh,
                                          B->v + h * Hkv * Dh, B->lse, B->D, 1, h, h, H, Hkv, Dh, NULL, NULL, 0));
    else if (what == DOC_FWD)
        KCU_CHECK_EXIT(kcu_ring_block_fwd_doc(B->o32, B->lse, B->q, B->k, B->v, 1, S, S, H, Hkv, Dh, B->pos, B->pos,
                                              B->doc, B->doc, 0));
    else if (what == DOC_BWD)
        KCU_CHECK_EXIT(kcu_ring_block_bwd_doc(B->dq32, B->dk32, B->dv32, B->dout, B->q, B->k, B->v, B->lse, B->D, 1, S,
                                              S, H, Hkv, Dh, B->pos, B->pos, B->doc, B->doc, 0));
    else if (what == BWD)
        KCU_CHECK_EXIT(
            kcu_attention_bwd(B->dq, B->dk, B->dv, B->dout, B->q, B->k, B->v, B->o, 1, S, H, Hkv, Dh, B->ws, 0));
    else
        KCU_CHECK_EXIT(kcu_attention_fwd_impl(what == FWD_TC ? KCU_ATTN_TC : KCU_ATTN_SCALAR, B->o, B->q, B->k, B->v, 1,
                                              S, H, Hkv, Dh, 0));
}

/* Median milliseconds of run(arg) over reps, after one warm-up, timed
 * with CUDA events on the default stream. */
static float median_ms(void (*run)(const void *), const void *arg, int reps) {
    cudaEvent_t a, b;
    KCU_CHECK_EXIT(cudaEventCreate(&a));
    KCU_CHECK_EXIT(cudaEventCreate(&b));
    float *ms = malloc(sizeof(float) * (size_t)(reps + 1));
    for (int r = -1; r < reps; r++) {
        KCU_CHECK_EXIT(cudaEventRecord(a, 0));
        run(arg);
        KCU_CHECK_EXIT(cudaEventRecord(b, 0));
        KCU_CHECK_EXIT(cudaEventSynchronize(b));
        if (r >= 0) KCU_CHECK_EXIT(cudaEventElapsedTime(&ms[r], a, b));
    }
    qsort(ms, (size_t)reps, sizeof *ms, cmp_f);
    float med = ms[reps / 2];
    free(ms);
    KCU_CHECK_EXIT(cudaEventDestroy(a));
    KCU_CHECK_EXIT(cudaEventDestroy(b));
    return med;
}

/* One kernel (the enum above) at one shape, for median_ms. */
typedef struct launch_arg {
    bench_buf *B;
    int what;
    int64_t S, H, Hkv, Dh;
} launch_arg;

static void launch_one(const void *p) {
    const launch_arg *l = p;
    launch(l->B, l->what, l->S, l->H, l->Hkv, l->Dh);
}

/* Median milliseconds of one kernel (the enum above). */
static float time_ms(bench_buf *B, int what, int64_t S, int64_t H, int64_t Hkv, int64_t Dh, int reps) {
    launch_arg l = {B, what, S, H, Hkv, Dh};
    return median_ms(launch_one, &l, reps);
}

#ifdef BASP_HAVE_CUDNN
/* cuDNN's forward and backward (what: DNN_FWD or DNN_RING_FWD, the
 * backward after it) at shape sh beside the basp kernels' f and g ms; fl:
 * the forward's FLOPs.  The ring block (rt_ring_split.c) is one full
 * sub-block with its merge, or its statistics' window, backward and
 * accumulations. */
static void bench_dnn(bench_buf *B, const cuda_cudnn_shape *sh, int what, const char *label, int64_t S, int reps,
                      double peak, double fl, float f, float g) {
    if (!B->dnn) return;
    if (cuda_cudnn_prepare(B->dnn, sh) != 0) {
        printf("  cuDNN%s: not supported at this shape: %s\n", label, cuda_cudnn_error(B->dnn));
        return;
    }
    B->dsh = *sh;
    KCU_CHECK_EXIT(cudaMalloc((void **)&B->stats, (size_t)(sh->H * S) * 4));
    KCU_CHECK_EXIT(cudaMalloc(&B->dnn_ws, cuda_cudnn_ws_bytes(B->dnn, sh) + 1));
    float cf = time_ms(B, what, S, sh->H, sh->Hkv, sh->Dh, reps);
    float cb = time_ms(B, what + 1, S, sh->H, sh->Hkv, sh->Dh, reps);
    double tf = fl / (cf * 1e-3) / 1e12, tb = 2.5 * fl / (cb * 1e-3) / 1e12;
    printf("  cuDNN%-22s fwd %8.2f ms %7.1f TFLOP/s (%4.1f%%, %.2fx the basp time)  bwd %8.2f ms %7.1f TFLOP/s "
           "(%4.1f%%, %.2fx)\n",
           label, cf, tf, 100 * tf / peak, cf / f, cb, tb, 100 * tb / peak, cb / g);
    fflush(stdout);
    cudaFree(B->stats), cudaFree(B->dnn_ws);
}
#endif

/* The running results a ring or document forward updates: o 0 and lse 0,
 * as if after an earlier block (cudaMemset cannot write the -inf of a
 * fresh start); the kernels' time does not depend on the values, and the
 * repeated calls only keep merging finite results. */
static void ring_reset(bench_buf *B, int64_t S, int64_t H, int64_t Dh) {
    KCU_CHECK_EXIT(cudaMemset(B->o32, 0, (size_t)(S * H * Dh) * 4));
    KCU_CHECK_EXIT(cudaMemset(B->lse, 0, (size_t)(S * H) * 4));
}

/* The ring block's and the documents' kernels at one shape. */
static void bench_ring_docs(bench_buf *B, int64_t S, int64_t H, int64_t Hkv, int64_t Dh, int reps, double peak) {
    int64_t nq = S * H * Dh, nk = S * Hkv * Dh, len = S >= 4096 ? 1024 : S / 4;
    KCU_CHECK_EXIT(cudaMalloc((void **)&B->o32, (size_t)nq * 4));
    KCU_CHECK_EXIT(cudaMalloc((void **)&B->lse, (size_t)(S * H) * 4));
    KCU_CHECK_EXIT(cudaMalloc((void **)&B->D, (size_t)(S * H) * 4));
    KCU_CHECK_EXIT(cudaMalloc((void **)&B->dq32, (size_t)nq * 4));
    KCU_CHECK_EXIT(cudaMalloc((void **)&B->dk32, (size_t)nk * 4));
    KCU_CHECK_EXIT(cudaMalloc((void **)&B->dv32, (size_t)nk * 4));
    KCU_CHECK_EXIT(cudaMalloc((void **)&B->pos, (size_t)S * 8));
    KCU_CHECK_EXIT(cudaMalloc((void **)&B->doc, (size_t)S * 4));
    int64_t *pos = malloc((size_t)S * 8);
    int32_t *doc = malloc((size_t)S * 4);
    for (int64_t i = 0; i < S; i++) pos[i] = i, doc[i] = (int32_t)(i / len);
    KCU_CHECK_EXIT(cudaMemcpy(B->pos, pos, (size_t)S * 8, cudaMemcpyHostToDevice));
    KCU_CHECK_EXIT(cudaMemcpy(B->doc, doc, (size_t)S * 4, cudaMemcpyHostToDevice));
    free(pos), free(doc);
    KCU_CHECK_EXIT(cudaMemset(B->dq32, 0, (size_t)nq * 4));
    KCU_CHECK_EXIT(cudaMemset(B->dk32, 0, (size_t)nk * 4));
    KCU_CHECK_EXIT(cudaMemset(B->dv32, 0, (size_t)nk * 4));
    KCU_CHECK_EXIT(kcu_ring_rowdot(B->D, B->dout, B->q, 1, S, H, Dh, 0)); /* any finite row dots */
    int64_t h = S / 2;
    double flr = 4.0 * (double)H * (double)h * (double)h * (double)Dh;
    double fld = 4.0 * (double)H * (double)(S / len) * (double)len * (double)len * (double)Dh / 2.0;
    ring_reset(B, S, H, Dh);
    float rf = time_ms(B, RING_FWD, S, H, Hkv, Dh, reps), rb = time_ms(B, RING_BWD, S, H, Hkv, Dh, reps);
    ring_reset(B, S, H, Dh);
    float df = time_ms(B, DOC_FWD, S, H, Hkv, Dh, reps), db = time_ms(B, DOC_BWD, S, H, Hkv, Dh, reps);
#ifdef BASP_HAVE_CUDNN
    ring_reset(B, S, H, Dh);
#endif
    double trf = flr / (rf * 1e-3) / 1e12, trb = 2.5 * flr / (rb * 1e-3) / 1e12;
    double tdf = fld / (df * 1e-3) / 1e12, tdb = 2.5 * fld / (db * 1e-3) / 1e12;
    printf("ring block Dh=%-3lld Sq=Sk=%-6lld H=%lld/%lld  fwd %8.2f ms %7.1f TFLOP/s (%4.1f%%)  bwd %8.2f ms %7.1f "
           "TFLOP/s (%4.1f%%)\n",
           (long long)Dh, (long long)h, (long long)H, (long long)Hkv, rf, trf, 100 * trf / peak, rb, trb,
           100 * trb / peak);
#ifdef BASP_HAVE_CUDNN
    cuda_cudnn_shape rs = {1, h, H, Hkv, Dh, S, 1};
    bench_dnn(B, &rs, DNN_RING_FWD, " ring block, merged", S, reps, peak, flr, rf, rb);
#endif
    printf("documents Dh=%-3lld S=%-6lld doc=%-5lld H=%lld/%lld  fwd %8.2f ms %7.1f TFLOP/s (%4.1f%%)  bwd %8.2f ms "
           "%7.1f TFLOP/s (%4.1f%%)\n",
           (long long)Dh, (long long)S, (long long)len, (long long)H, (long long)Hkv, df, tdf, 100 * tdf / peak, db,
           tdb, 100 * tdb / peak);
#ifdef BASP_HAVE_CUDNN
    /* rt_doc_split.c's batch of S/len documents of len rows: here already
     * in place, so its gathers and scatters are left out, and its backward
     * (which the runtime runs after a recomputed forward) alone */
    cuda_cudnn_shape ds = {S / len, len, H, Hkv, Dh, 0, 0};
    bench_dnn(B, &ds, DNN_FWD, " documents, batched", S, reps, peak, fld, df, db);
#endif
    fflush(stdout);
    cudaFree(B->o32), cudaFree(B->lse), cudaFree(B->D), cudaFree(B->dq32), cudaFree(B->dk32), cudaFree(B->dv32);
    cudaFree(B->pos), cudaFree(B->doc);
}

/* ---- the Ulysses exchange's packing, RoPE apart and fused in ----------------------
 * One rank's forward packing of q and k for K peers at sequence S: x [1, S/K,
 * H, Dh] sent as K chunks of H/K heads (the seq -> heads exchange).  Apart:
 * kcu_rope into a rotated copy, then kcu_a2a_pack of each chunk (the
 * runtime's rt_rope then rt_all_to_all); fused: kcu_a2a_pack_rope of each
 * chunk (rt_all_to_all_rope).  Bytes moved: apart, q and k read and written
 * twice; fused, once (the table is L2-resident).  GB/s are those bytes over
 * the time, against --bw (device memory bandwidth, GB/s). */
typedef struct pack_buf {
    kcu_bf16 *x[2], *r[2], *send;
    float *cs, *sn;
    int64_t *pos;
    int64_t s, H[2], Dh, K;
} pack_buf;

static void pack_launch(const pack_buf *P, bool fused) {
    for (int t = 0; t < 2; t++) {
        int64_t H = P->H[t], hk = H / P->K;
        if (!fused) KCU_CHECK_EXIT(kcu_rope(P->r[t], P->x[t], P->cs, P->sn, 1, P->s, H, P->Dh, 1.0f, 0));
        for (int64_t q = 0; q < P->K; q++) {
            kcu_a2a g = {1, 1, P->Dh, P->s, H, 0, hk, P->s, hk, q * hk, 1, 0, 0};
            kcu_bf16 *dst = P->send + (t ? P->s * P->H[0] * P->Dh : 0) + q * P->s * hk * P->Dh;
            if (fused)
                KCU_CHECK_EXIT(kcu_a2a_pack_rope(dst, P->x[t], &g, P->cs, P->sn, P->s, P->pos, P->s, 1.0f, 0));
            else
                KCU_CHECK_EXIT(kcu_a2a_pack(dst, P->r[t], &g, 2, 0));
        }
    }
}

static void pack_apart(const void *P) { pack_launch(P, false); }
static void pack_fused(const void *P) { pack_launch(P, true); }

static void bench_pack(int64_t S, int64_t H, int64_t Hkv, int64_t Dh, int64_t K, int reps, double bw) {
    pack_buf P = {.s = S / K, .H = {H, Hkv}, .Dh = Dh, .K = K};
    if (P.s < 1 || H % K || Hkv % K) return;
    int64_t n = P.s * (H + Hkv) * Dh, half = Dh / 2;
    for (int t = 0; t < 2; t++) {
        P.x[t] = dev_random(P.s * P.H[t] * Dh);
        KCU_CHECK_EXIT(cudaMalloc((void **)&P.r[t], (size_t)(P.s * P.H[t] * Dh) * 2));
    }
    KCU_CHECK_EXIT(cudaMalloc((void **)&P.send, (size_t)n * 2));
    float *tab = malloc(sizeof(float) * (size_t)(2 * P.s * half));
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)P.s);
    kern_rope_table(tab, tab + P.s * half, P.s, Dh, 0, 10000.0, NULL);
    for (int64_t i = 0; i < P.s; i++) pos[i] = i;
    KCU_CHECK_EXIT(cudaMalloc((void **)&P.cs, sizeof(float) * (size_t)(2 * P.s * half)));
    KCU_CHECK_EXIT(cudaMemcpy(P.cs, tab, sizeof(float) * (size_t)(2 * P.s * half), cudaMemcpyHostToDevice));
    P.sn = P.cs + P.s * half;
    KCU_CHECK_EXIT(cudaMalloc((void **)&P.pos, sizeof(int64_t) * (size_t)P.s));
    KCU_CHECK_EXIT(cudaMemcpy(P.pos, pos, sizeof(int64_t) * (size_t)P.s, cudaMemcpyHostToDevice));
    free(tab), free(pos);
    float apart = median_ms(pack_apart, &P, reps), fused = median_ms(pack_fused, &P, reps);
    double once = 2.0 * 2.0 * (double)n; /* bytes: read and write q and k once, bf16 */
    printf("exchange packing Dh=%-3lld S=%-6lld K=%lld H=%lld/%lld (%lld tokens per rank)  rope+pack %7.3f ms %6.0f "
           "GB/s (%4.1f%% of %.0f)  fused %7.3f ms %6.0f GB/s (%4.1f%%)  %.2fx\n",
           (long long)Dh, (long long)S, (long long)K, (long long)H, (long long)Hkv, (long long)P.s, apart,
           2 * once / (apart * 1e-3) / 1e9, 100 * 2 * once / (apart * 1e-3) / 1e9 / bw, bw, fused,
           once / (fused * 1e-3) / 1e9, 100 * once / (fused * 1e-3) / 1e9 / bw, apart / fused);
    fflush(stdout);
    for (int t = 0; t < 2; t++) cudaFree(P.x[t]), cudaFree(P.r[t]);
    cudaFree(P.send), cudaFree(P.cs), cudaFree(P.pos);
}

static void bench_one(bench_buf *dnn, int64_t S, int64_t H, int64_t Hkv, int64_t Dh, int reps, double peak) {
    bench_buf B = *dnn;
    int64_t nq = S * H * Dh, nk = S * Hkv * Dh;
    B.q = dev_random(nq), B.k = dev_random(nk), B.v = dev_random(nk), B.dout = dev_random(nq);
    KCU_CHECK_EXIT(cudaMalloc((void **)&B.o, (size_t)nq * 2));
    KCU_CHECK_EXIT(cudaMalloc((void **)&B.dq, (size_t)nq * 2));
    KCU_CHECK_EXIT(cudaMalloc((void **)&B.dk, (size_t)nk * 2));
    KCU_CHECK_EXIT(cudaMalloc((void **)&B.dv, (size_t)nk * 2));
    KCU_CHECK_EXIT(cudaMalloc((void **)&B.ws, (size_t)kcu_attention_bwd_ws(1, S, H) * 4));
    double fl = 4.0 * (double)H * (double)S * (double)S * (double)Dh / 2.0;
    float f = time_ms(&B, FWD_TC, S, H, Hkv, Dh, reps), fs = time_ms(&B, FWD_SCALAR, S, H, Hkv, Dh, reps);
    float g = time_ms(&B, BWD, S, H, Hkv, Dh, reps);
    double tf = fl / (f * 1e-3) / 1e12, ts = fl / (fs * 1e-3) / 1e12, tb = 2.5 * fl / (g * 1e-3) / 1e12;
    printf("attention Dh=%-3lld S=%-6lld H=%lld/%lld  fwd %8.2f ms %7.1f TFLOP/s (%4.1f%% of %.0f; scalar %.1f, "
           "%.1fx)  bwd %8.2f ms %7.1f TFLOP/s (%4.1f%%)\n",
           (long long)Dh, (long long)S, (long long)H, (long long)Hkv, f, tf, 100 * tf / peak, peak, ts, fs / f, g, tb,
           100 * tb / peak);
    fflush(stdout);
#ifdef BASP_HAVE_CUDNN
    cuda_cudnn_shape sh = {1, S, H, Hkv, Dh, 0, 0};
    bench_dnn(&B, &sh, DNN_FWD, "", S, reps, peak, fl, f, g);
#endif
    bench_ring_docs(&B, S, H, Hkv, Dh, reps, peak);
    cudaFree(B.q), cudaFree(B.k), cudaFree(B.v), cudaFree(B.o), cudaFree(B.dout), cudaFree(B.dq), cudaFree(B.dk);
    cudaFree(B.dv), cudaFree(B.ws);
}

int main(int argc, char **argv) {
    double peak = 989.0, bw = 3350.0;
    int reps = 5;
    int64_t min_seq = 4096, max_seq = 16384;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--peak"))
            peak = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--bw"))
            bw = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--max-seq"))
            max_seq = atoll(argv[i + 1]);
        else if (!strcmp(argv[i], "--min-seq"))
            min_seq = atoll(argv[i + 1]);
    }
    if (reps < 1) reps = 1;
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("no CUDA device visible: attention benchmark skipped\n");
        return 77;
    }
    bench_buf dnn = {0};
#ifdef BASP_HAVE_CUDNN
    char why[512];
    dnn.dnn = cuda_cudnn_create(0, why, sizeof why);
    if (!dnn.dnn) printf("cuDNN attention not timed: %s\n", why);
#endif
    if (min_seq < 64) min_seq = 64;
    for (int64_t S = min_seq; S <= max_seq; S *= 2) {
        bench_one(&dnn, S, 32, 8, 64, reps, peak);
        bench_one(&dnn, S, 16, 8, 128, reps, peak);
    }
    /* Llama-3.2-1B's and Llama-3.1-8B's q and k over 8 ranks */
    for (int64_t S = 4 * min_seq; S <= 4 * max_seq; S *= 4) {
        bench_pack(S, 32, 8, 64, 8, reps, bw);
        bench_pack(S, 32, 8, 128, 8, reps, bw);
    }
#ifdef BASP_HAVE_CUDNN
    cuda_cudnn_destroy(dnn.dnn);
#endif
    return 0;
}
