/* attention_bench.c — attention kernel throughput relative to sgemm.
 *
 * One run measures, on one thread and side by side (so the machine's load
 * affects every figure alike):
 *   - cblas_sgemm at 1024^3 and at the shape of one attention block GEMM;
 *   - the forward, and forward + backward as training runs them (the
 *     forward keeps each row's logsumexp, the backward reads it:
 *     kern_attention_fwd_lse, kern_attention_bwd_lse);
 *   - forward + backward recomputing the logsumexp (kern_attention_fwd +
 *     kern_attention_bwd, what BASP_ATTN_LSE=0 runs);
 *   - where the fused kernels run (kern_attention_impl_name), the
 *     forward and forward + backward of the blocked BLAS ones too
 *     (kern_attention_set_impl), and fused / blocked per repeat;
 * and prints GFLOP/s and the ratios attention/sgemm.  Each figure is the
 * median of REPEATS timed runs after a warm-up run; the ratios are medians of
 * per-repeat ratios (sgemm and attention timed back to back).
 *
 * FLOP counts (the usual flash-attention convention, causal):
 *   forward   = 4 * b * H * S^2 * Dh / 2      (Q K^T and P V, half the pairs)
 *   backward  = 2.5 * forward                 (dV, dP, dQ, dK GEMMs + Q K^T)
 *   fwd + bwd = 3.5 * forward
 * Exponentials, masking and the backward's logsumexp recomputation are not
 * counted: they are overhead the ratio is meant to expose.
 *
 * Usage: bench_attention [--dh D] [S ...]   (default S = 1024 2048; b=1 H=4 Hkv=2 Dh=64)
 * (bench/attention_torch.py runs it beside PyTorch's SDPA.) */
#include "rt_host.h"

#include <cblas.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_time.h"

enum { REPEATS = 7 };

/* Median seconds of one call of fn(ctx) over REPEATS timed runs (after one
 * warm-up), each timing `inner` back-to-back calls. */
typedef void (*bench_fn)(void *ctx);
static double median_time(bench_fn fn, void *ctx, int inner) {
    double t[REPEATS];
    fn(ctx);
    for (int r = 0; r < REPEATS; r++) {
        double t0 = bench_now();
        for (int i = 0; i < inner; i++) fn(ctx);
        t[r] = (bench_now() - t0) / inner;
    }
    qsort(t, REPEATS, sizeof t[0], bench_cmp_double);
    return t[REPEATS / 2];
}

static float *frand(int64_t n) {
    float *p = malloc((size_t)n * sizeof(float));
    if (!p) abort();
    uint32_t s = 12345u;
    for (int64_t i = 0; i < n; i++) {
        s = s * 1664525u + 1013904223u;
        p[i] = (float)(s >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

/* ---- sgemm ---------------------------------------------------------------- */

typedef struct gemm_ctx {
    int M, N, K, transb;
    float *a, *b, *c;
} gemm_ctx;
static void run_gemm(void *p) {
    gemm_ctx *g = p;
    cblas_sgemm(CblasRowMajor, CblasNoTrans, g->transb ? CblasTrans : CblasNoTrans, g->M, g->N, g->K, 1.0f, g->a, g->K,
                g->b, g->transb ? g->K : g->N, 0.0f, g->c, g->N);
}
static double gemm_gflops(int M, int N, int K, int transb, int inner) {
    gemm_ctx g = {M, N, K, transb, frand((int64_t)M * K), frand((int64_t)K * N), frand((int64_t)M * N)};
    double t = median_time(run_gemm, &g, inner);
    free(g.a), free(g.b), free(g.c);
    return 2.0 * M * N * K / t * 1e-9;
}

/* ---- attention -------------------------------------------------------------- */

typedef struct att_ctx {
    int64_t b, S, H, Hkv, Dh;
    float *q, *k, *v, *o, *dout, *dq, *dk, *dv, *lse;
} att_ctx;
static void run_fwd(void *p) {
    att_ctx *a = p;
    kern_attention_fwd_lse(a->o, a->lse, a->q, a->k, a->v, a->b, a->S, a->H, a->Hkv, a->Dh);
}
static void run_fwd_bwd(void *p) {
    att_ctx *a = p;
    kern_attention_fwd_lse(a->o, a->lse, a->q, a->k, a->v, a->b, a->S, a->H, a->Hkv, a->Dh);
    kern_attention_bwd_lse(a->dq, a->dk, a->dv, a->dout, a->q, a->k, a->v, a->o, a->lse, a->b, a->S, a->H, a->Hkv,
                           a->Dh);
}
static void run_fwd_bwd_recompute(void *p) {
    att_ctx *a = p;
    kern_attention_fwd(a->o, a->q, a->k, a->v, a->b, a->S, a->H, a->Hkv, a->Dh);
    kern_attention_bwd(a->dq, a->dk, a->dv, a->dout, a->q, a->k, a->v, a->o, a->b, a->S, a->H, a->Hkv, a->Dh);
}

static double time_once(bench_fn fn, void *ctx) {
    double t0 = bench_now();
    fn(ctx);
    return bench_now() - t0;
}

/* Each repeat times sgemm 1024^3, the forward and forward + backward back to
 * back, and the ratios are taken within the repeat before the median: load
 * from other processes drifts over seconds, and this cancels most of it. */
static void bench_attention(int64_t S, int64_t Dh) {
    att_ctx a = {1, S, 4, 2, Dh, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
    int64_t nq = a.b * S * a.H * a.Dh, nk = a.b * S * a.Hkv * a.Dh;
    a.q = frand(nq), a.k = frand(nk), a.v = frand(nk), a.o = frand(nq), a.dout = frand(nq);
    a.dq = frand(nq), a.dk = frand(nk), a.dv = frand(nk), a.lse = frand(a.b * a.H * S);
    gemm_ctx g = {1024, 1024, 1024, 0, frand(1 << 20), frand(1 << 20), frand(1 << 20)};
    double fwd_flops = 4.0 * (double)(a.b * a.H * a.Dh) * (double)S * (double)S / 2.0,
           gemm_flops = 2.0 * 1024 * 1024 * 1024;
    double gs[REPEATS], gf[REPEATS], gfb[REPEATS], gfr[REPEATS], rf[REPEATS], rfb[REPEATS], rfr[REPEATS];
    double bf[REPEATS], bfb[REPEATS], xf[REPEATS], xfb[REPEATS]; /* the blocked BLAS path, and impl / it */
    const char *impl = kern_attention_impl_name(Dh);
    bool fused = kern_attention_fused(Dh) != NULL;
    run_fwd_bwd(&a), run_gemm(&g); /* warm-up */
    for (int r = 0; r < REPEATS; r++) {
        gs[r] = gemm_flops / time_once(run_gemm, &g) * 1e-9;
        gf[r] = fwd_flops / time_once(run_fwd, &a) * 1e-9;
        gfb[r] = 3.5 * fwd_flops / time_once(run_fwd_bwd, &a) * 1e-9;
        gfr[r] = 3.5 * fwd_flops / time_once(run_fwd_bwd_recompute, &a) * 1e-9;
        rf[r] = gf[r] / gs[r], rfb[r] = gfb[r] / gs[r], rfr[r] = gfb[r] / gfr[r];
        if (!fused) continue;
        kern_attn_impl was = kern_attention_set_impl(KERN_ATTN_BLAS);
        bf[r] = fwd_flops / time_once(run_fwd, &a) * 1e-9;
        bfb[r] = 3.5 * fwd_flops / time_once(run_fwd_bwd, &a) * 1e-9;
        kern_attention_set_impl(was);
        xf[r] = gf[r] / bf[r], xfb[r] = gfb[r] / bfb[r];
    }
    printf("attention S=%-5lld b=%lld H=%lld Hkv=%lld Dh=%lld: sgemm %5.1f | fwd %5.1f | fwd+bwd %5.1f GFLOP/s (%s)\n",
           (long long)S, (long long)a.b, (long long)a.H, (long long)a.Hkv, (long long)a.Dh, bench_median(gs, REPEATS),
           bench_median(gf, REPEATS), bench_median(gfb, REPEATS), impl);
    printf("  ratio to sgemm 1024^3:  fwd %.2f (goal >= 0.75)   fwd+bwd %.2f (goal >= 0.60)\n",
           bench_median(rf, REPEATS), bench_median(rfb, REPEATS));
    printf("  fwd+bwd recomputing the logsumexp %5.1f GFLOP/s: keeping it is %.2fx as fast\n",
           bench_median(gfr, REPEATS), bench_median(rfr, REPEATS));
    if (fused)
        printf("  blas-blocked in the same repeats: fwd %5.1f | fwd+bwd %5.1f GFLOP/s; fused / blas-blocked: fwd "
               "%.2fx  fwd+bwd %.2fx\n",
               bench_median(bf, REPEATS), bench_median(bfb, REPEATS), bench_median(xf, REPEATS),
               bench_median(xfb, REPEATS));
    free(a.q), free(a.k), free(a.v), free(a.o), free(a.dout), free(a.dq), free(a.dk), free(a.dv), free(a.lse);
    free(g.a), free(g.b), free(g.c);
}

int main(int argc, char **argv) {
    openblas_set_num_threads(1); /* the environment variable is read at load time; this is authoritative */
    int64_t Dh = 64;
    int first = 1;
    if (argc > 2 && strcmp(argv[1], "--dh") == 0) {
        Dh = atoll(argv[2]);
        first = 3;
        if (Dh <= 0 || Dh > 1024) {
            fprintf(stderr, "bench_attention: --dh %s: a head dim in 1..1024\n", argv[2]);
            return 2;
        }
    }
    const char *simd = getenv("BASP_SIMD");
    printf("OpenBLAS %s (core %s), 1 thread, BASP_SIMD=%s, median of %d\n", openblas_get_config(),
           openblas_get_corename(), simd ? simd : "(widest)", REPEATS);
    printf("sgemm 1024x1024x1024        %6.1f GFLOP/s\n", gemm_gflops(1024, 1024, 1024, 0, 1));
    /* the forward's Q K^T block: [64 x 64] x [128 x 64]^T */
    printf("sgemm 64x128x64 (Q K^T blk) %6.1f GFLOP/s\n", gemm_gflops(64, 128, 64, 1, 2000));
    if (argc > first)
        for (int i = first; i < argc; i++) {
            int64_t S = atoll(argv[i]);
            if (S <= 0) {
                fprintf(stderr, "bench_attention: %s: not a sequence length\n", argv[i]);
                return 2;
            }
            bench_attention(S, Dh);
        }
    else {
        bench_attention(1024, Dh);
        bench_attention(2048, Dh);
    }
    return 0;
}
