/* lmhead_bench.c — the LM head + cross-entropy kernels (kern_lmhead.c)
 * against single-thread sgemm, one thread, with the previous
 * implementation (whole-vocabulary row chunks, scalar expf) beside them.
 *
 *   bench_lmhead [--repeats R] [NxVxD ...]
 *
 * Default shapes: 2048x32000x512 2048x32000x2048 1024x128256x2048
 * 4096x128256x512.  Each repeat times, back to back, the previous forward,
 * the current forward, the previous backward, the current backward and the
 * three GEMMs of the model (logits = x w^T, dx = dl w, dw = dl^T x) as
 * plain sgemm; the table holds medians over the repeats (default 5, after a
 * warm-up).  The sgemm reference runs on at most 32000 vocabulary rows (the
 * rate of these GEMM shapes does not change past that; it keeps the
 * [N, V] operand in memory at V = 128256).
 *
 * FLOPs: both implementations do the GEMMs' 2 N V D forward and 6 N V D
 * backward (the logits again, dx, dw), so GFLOP/s are those counts over the
 * measured time, and the fraction that rate over the sgemm rate;
 * exponentials are not counted.
 *
 * The row "fused" times the op a training step runs (the fuse-loss pass):
 * kern_lm_head_loss_grad, loss, dx and dw in one pass that forms the logits
 * once, against the current forward + backward pair of the same repeat.
 * Both are credited with 6 N V D, the step's minimum GEMM work, so its
 * fraction is of the rate at which sgemm alone would do that work. */
#include "rt_host.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_time.h"

/* ---- the previous implementation, the baseline ------------------------------------------ */

static int64_t baseline_chunk_rows(int64_t V) {
    int64_t c = (int64_t)(4 << 20) / (V > 0 ? V : 1);
    if (c > 64) c = 64;
    return c < 1 ? 1 : c;
}

static float *baseline_buf(int64_t nfloats) {
    static float *buf;
    static int64_t cap;
    if (nfloats > cap) {
        free(buf);
        buf = malloc((size_t)nfloats * sizeof(float));
        if (!buf) abort();
        cap = nfloats;
    }
    return buf;
}

static void baseline_chunk_logits(float *lg, const float *x, const float *w, int64_t n0, int64_t c, int64_t V,
                                  int64_t D) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c, (int)V, (int)D, 1.0f, x + n0 * D, (int)D, w, (int)D,
                0.0f, lg, (int)V);
}

static double baseline_row_logsumexp(const float *row, int64_t V) {
    float mx = row[0];
    for (int64_t j = 1; j < V; j++) mx = row[j] > mx ? row[j] : mx;
    double sum = 0.0;
    for (int64_t j = 0; j < V; j++) sum += (double)expf(row[j] - mx);
    return (double)mx + log(sum);
}

static void baseline_lm_head_loss_fwd(float *loss, const float *x, const float *w, const int32_t *tgt, int64_t N,
                                      int64_t V, int64_t D) {
    int64_t C = baseline_chunk_rows(V);
    float *lg = baseline_buf(C * V);
    double total = 0.0;
    for (int64_t n0 = 0; n0 < N; n0 += C) {
        int64_t c = N - n0 < C ? N - n0 : C;
        baseline_chunk_logits(lg, x, w, n0, c, V, D);
        for (int64_t r = 0; r < c; r++) {
            int t = tgt[n0 + r];
            if (t < 0) continue;
            const float *row = lg + r * V;
            total += baseline_row_logsumexp(row, V) - (double)row[t];
        }
    }
    loss[0] = (float)total;
}

static void baseline_row_dlogits(float *row, int64_t V, int t, double scale) {
    if (t < 0) {
        memset(row, 0, (size_t)V * sizeof(float));
        return;
    }
    float mx = row[0];
    for (int64_t j = 1; j < V; j++) mx = row[j] > mx ? row[j] : mx;
    double sum = 0.0;
    for (int64_t j = 0; j < V; j++) {
        row[j] = expf(row[j] - mx);
        sum += row[j];
    }
    float f = (float)(scale / sum);
    for (int64_t j = 0; j < V; j++) row[j] *= f;
    row[t] -= (float)scale;
}

static void baseline_lm_head_loss_bwd(float *dx, float *dw, const float *x, const float *w, const int32_t *tgt,
                                      int64_t N, int64_t V, int64_t D, double scale) {
    memset(dw, 0, (size_t)(V * D) * sizeof(float));
    int64_t C = baseline_chunk_rows(V);
    float *lg = baseline_buf(C * V);
    for (int64_t n0 = 0; n0 < N; n0 += C) {
        int64_t c = N - n0 < C ? N - n0 : C;
        baseline_chunk_logits(lg, x, w, n0, c, V, D);
        for (int64_t r = 0; r < c; r++) baseline_row_dlogits(lg + r * V, V, tgt[n0 + r], scale);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)c, (int)D, (int)V, 1.0f, lg, (int)V, w, (int)D,
                    0.0f, dx + n0 * D, (int)D);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)V, (int)D, (int)c, 1.0f, lg, (int)V, x + n0 * D,
                    (int)D, 1.0f, dw, (int)D);
    }
}

/* ---- timing --------------------------------------------------------------------------------------- */

static float *alloc_f(int64_t n) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    if (!p) {
        fprintf(stderr, "bench_lmhead: out of memory\n");
        exit(1);
    }
    return p;
}

static unsigned rng = 12345u;
static float *frand(int64_t n, float amp) {
    float *p = alloc_f(n);
    for (int64_t i = 0; i < n; i++) {
        rng = rng * 1664525u + 1013904223u;
        p[i] = amp * ((float)(rng >> 8) / 8388608.0f - 1.0f);
    }
    return p;
}

enum { T_OLD_F, T_NEW_F, T_OLD_B, T_NEW_B, T_GEMM, T_FUSED, T_N };

static void bench_shape(int64_t N, int64_t V, int64_t D, int repeats) {
    int64_t Vr = V < 32000 ? V : 32000; /* the sgemm reference's vocabulary rows */
    float *x = frand(N * D, 1.0f), *w = frand(V * D, 0.05f), *dx = alloc_f(N * D), *dw = alloc_f(V * D);
    float *c = frand(N * Vr, 1e-4f), *gx = alloc_f(N * D), *gw = alloc_f(Vr * D);
    int32_t *tgt = malloc((size_t)N * sizeof(int32_t));
    for (int64_t n = 0; n < N; n++) {
        rng = rng * 1664525u + 1013904223u;
        tgt[n] = n % 16 == 5 ? -1 : (int32_t)((rng >> 8) % (unsigned)V);
    }
    double scale = 1.0 / (double)N, *t[T_N];
    for (int k = 0; k < T_N; k++) t[k] = malloc((size_t)repeats * sizeof(double));
    float lo = 0, ln = 0, lf = 0;
    for (int r = -1; r < repeats; r++) { /* r = -1: warm-up */
        double t0 = bench_now();
        baseline_lm_head_loss_fwd(&lo, x, w, tgt, N, V, D);
        double t1 = bench_now();
        kern_lm_head_loss_fwd(&ln, x, w, tgt, N, V, D);
        double t2 = bench_now();
        baseline_lm_head_loss_bwd(dx, dw, x, w, tgt, N, V, D, scale);
        double t3 = bench_now();
        kern_lm_head_loss_bwd(dx, dw, x, w, tgt, N, V, D, scale);
        double t4 = bench_now();
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, (int)Vr, (int)D, 1.0f, x, (int)D, w, (int)D, 0.0f,
                    c, (int)Vr);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, (int)D, (int)Vr, 1.0f, c, (int)Vr, w, (int)D,
                    0.0f, gx, (int)D);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)Vr, (int)D, (int)N, 1.0f, c, (int)Vr, x, (int)D, 0.0f,
                    gw, (int)D);
        double t5 = bench_now();
        kern_lm_head_loss_grad(&lf, dx, dw, x, w, tgt, N, V, D, scale);
        double t6 = bench_now();
        if (r < 0) continue;
        t[T_FUSED][r] = t6 - t5;
        t[T_OLD_F][r] = t1 - t0, t[T_NEW_F][r] = t2 - t1, t[T_OLD_B][r] = t3 - t2, t[T_NEW_B][r] = t4 - t3;
        t[T_GEMM][r] = (t5 - t4) * (double)V / (double)Vr; /* scaled to the whole vocabulary */
    }
    double nvd = (double)N * (double)V * (double)D * 1e-9, m[T_N];
    for (int k = 0; k < T_N; k++) m[k] = bench_median(t[k], repeats);
    double sg = 6 * nvd / m[T_GEMM]; /* sgemm GFLOP/s */
    double of = m[T_OLD_F], nf = m[T_NEW_F], ob = m[T_OLD_B], nb = m[T_NEW_B];
    const char *pass[3] = {"fwd", "bwd", "fwd+bwd"};
    double fl[3] = {2 * nvd, 6 * nvd, 8 * nvd}, to[3] = {of, ob, of + ob}, tn[3] = {nf, nb, nf + nb};
    for (int k = 0; k < 3; k++) {
        char shape[64] = "", rate[16] = "";
        if (k == 0) {
            snprintf(shape, sizeof shape, "%lldx%lldx%lld", (long long)N, (long long)V, (long long)D);
            snprintf(rate, sizeof rate, "%.1f", sg);
        }
        printf("| %s | %s | %s | %.1f (%.2f) | %.1f (%.2f) | %.2f |\n", shape, rate, pass[k], fl[k] / to[k],
               fl[k] / to[k] / sg, fl[k] / tn[k], fl[k] / tn[k] / sg, to[k] / tn[k]);
    }
    double pair = nf + nb, fused = m[T_FUSED];
    printf("| | | fused (6 N V D) | pair %.1f (%.2f) | fused %.1f (%.2f) | %.2f |\n", 6 * nvd / pair,
           6 * nvd / pair / sg, 6 * nvd / fused, 6 * nvd / fused / sg, pair / fused);
    printf("| | | loss | %.7g | %.7g | rel. diff %.1e; fused %.7g |\n", lo, ln, fabs(lo - ln) / fabs(lo), lf);
    fflush(stdout);
    for (int k = 0; k < T_N; k++) free(t[k]);
    free(x), free(w), free(dx), free(dw), free(c), free(gx), free(gw), free(tgt);
}

extern void openblas_set_num_threads(int) __attribute__((weak));
extern char *openblas_get_corename(void) __attribute__((weak));
extern char *openblas_get_config(void) __attribute__((weak));

int main(int argc, char **argv) {
    if (openblas_set_num_threads) openblas_set_num_threads(1);
    int repeats = 5, first = 1;
    if (argc > 2 && strcmp(argv[1], "--repeats") == 0) repeats = atoi(argv[2]), first = 3;
    if (repeats < 1) {
        fprintf(stderr, "usage: bench_lmhead [--repeats R] [NxVxD ...]\n");
        return 2;
    }
    const char *defaults[] = {"2048x32000x512", "2048x32000x2048", "1024x128256x2048", "4096x128256x512"};
    int nshapes = argc > first ? argc - first : 4;
    printf("BLAS: %s (core %s), one thread; SIMD width %d floats; block %d rows x %d columns; %d repeats\n\n",
           openblas_get_config ? openblas_get_config() : "not OpenBLAS",
           openblas_get_corename ? openblas_get_corename() : "?", kern_attn_simd_width(), CM_LM_HEAD_ROWS,
           CM_LM_HEAD_COLS, repeats);
    printf("GFLOP/s (fraction of the sgemm rate); speed-up = previous time / current time (fused: the current "
           "pair's time / the fused time)\n\n");
    printf("| N x V x D | sgemm | pass | previous | current | speed-up |\n");
    printf("|---|---|---|---|---|---|\n");
    for (int i = 0; i < nshapes; i++) {
        const char *s = argc > first ? argv[first + i] : defaults[i];
        long long N, V, D;
        if (sscanf(s, "%lldx%lldx%lld", &N, &V, &D) != 3 || N < 1 || V < 1 || D < 1 || N > INT_MAX || V > INT_MAX) {
            fprintf(stderr, "bench_lmhead: bad shape '%s' (want NxVxD)\n", s);
            return 2;
        }
        bench_shape(N, V, D, repeats);
    }
    return 0;
}
