/* norm_bench.c — the residual add and RMSNorm kernels (kern_basic.c), as a
 * training step runs them, against the machine's memory bandwidth, one
 * thread.
 *
 *   bench_norm [--repeats R] [NxD ...]
 *
 * Default shapes (tokens x hidden): 2048x512 (bench/real_shapes at S 2048),
 * 1024x2048 (Llama-3.2-1B's hidden, S 1K), 4096x4096 (Llama-3.1-8B's).
 * Each repeat times, back to back:
 *   unfused fwd   kern_add, then kern_rmsnorm_fwd (the two ops of a layer)
 *   fused fwd     kern_add_rmsnorm_fwd (pass fuse-elem's add_rmsnorm)
 *   unfused bwd   kern_rmsnorm_bwd, then kern_add
 *   fused bwd     kern_add_rmsnorm_bwd
 *   previous      the forward and backward with the rows summed in one
 *                 serial double chain (the kernels before the lanes below)
 *   copy          memcpy of the same bytes the fused forward moves: the
 *                 machine's limit for a pass that streams them once
 * and the table holds medians over the repeats (default 7, after a
 * warm-up).  GB/s are the bytes each variant must move (every operand read
 * once, every result written once: fwd unfused 5·N·D floats, fused 4; bwd
 * unfused 6, fused 5), over its time; "of copy" is that rate over memcpy's. */
#include "rt_host.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_time.h"

/* ---- the previous kernels: one serial double sum per row ----------------------------- */

static double prev_rms_inv(const float *x, int64_t D, double eps) {
    double ss = 0.0;
    for (int64_t d = 0; d < D; d++) ss += (double)x[d] * x[d];
    return 1.0 / sqrt(ss / (double)D + eps);
}

static void prev_fwd(float *y, const float *x, const float *w, int64_t N, int64_t D, double eps) {
    for (int64_t n = 0; n < N; n++) {
        float r = (float)prev_rms_inv(x + n * D, D, eps);
        for (int64_t d = 0; d < D; d++) y[n * D + d] = x[n * D + d] * r * w[d];
    }
}

static void prev_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t N, int64_t D,
                     double eps, double *acc) {
    memset(acc, 0, (size_t)D * sizeof *acc);
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * D, *gr = dy + n * D;
        double r = prev_rms_inv(xr, D, eps), dot = 0.0;
        for (int64_t d = 0; d < D; d++) dot += (double)gr[d] * w[d] * xr[d];
        float a = (float)r, c = (float)(dot * r * r * r / (double)D);
        for (int64_t d = 0; d < D; d++) {
            dx[n * D + d] = a * w[d] * gr[d] - c * xr[d];
            acc[d] += (double)gr[d] * xr[d] * r;
        }
    }
    for (int64_t d = 0; d < D; d++) dw[d] = (float)acc[d];
}

/* ---- the run --------------------------------------------------------------------------- */

static float *rnd(int64_t n, unsigned *seed) {
    float *x = malloc((size_t)n * sizeof(float));
    if (!x) abort();
    for (int64_t i = 0; i < n; i++) x[i] = (float)rand_r(seed) / (float)RAND_MAX * 2.0f - 1.0f;
    return x;
}

enum { V_UF, V_FF, V_UB, V_FB, V_PF, V_PB, V_COPY, NV };
static const char *const names[NV] = {"unfused fwd",  "fused fwd",    "unfused bwd", "fused bwd",
                                      "previous fwd", "previous bwd", "copy"};
/* floats moved per token row of D, each variant */
static const int moved[NV] = {5, 4, 6, 5, 5, 6, 4};

static void run_shape(int64_t N, int64_t D, int repeats) {
    unsigned seed = 7;
    int64_t n = N * D;
    float *a = rnd(n, &seed), *b = rnd(n, &seed), *w = rnd(D, &seed), *dy = rnd(n, &seed), *dr = rnd(n, &seed);
    float *s = rnd(n, &seed), *y = rnd(n, &seed), *t = rnd(n, &seed), *dw = rnd(D, &seed);
    float *src = rnd(2 * n, &seed), *dst = rnd(2 * n, &seed);
    double *acc = malloc((size_t)D * sizeof *acc), *sec[NV];
    for (int v = 0; v < NV; v++) sec[v] = malloc((size_t)repeats * sizeof(double));
    for (int r = -1; r < repeats; r++) { /* r = -1: the warm-up */
        double t0[NV + 1];
        t0[V_UF] = bench_now();
        kern_add(s, a, b, n);
        kern_rmsnorm_fwd(y, s, w, N, D, 1e-5);
        t0[V_FF] = bench_now();
        kern_add_rmsnorm_fwd(s, y, a, b, w, N, D, 1e-5);
        t0[V_UB] = bench_now();
        kern_rmsnorm_bwd(t, dw, dy, s, w, N, D, 1e-5);
        kern_add(t, dr, t, n);
        t0[V_FB] = bench_now();
        kern_add_rmsnorm_bwd(t, dw, dy, s, w, dr, N, D, 1e-5);
        t0[V_PF] = bench_now();
        kern_add(s, a, b, n);
        prev_fwd(y, s, w, N, D, 1e-5);
        t0[V_PB] = bench_now();
        prev_bwd(t, dw, dy, s, w, N, D, 1e-5, acc);
        kern_add(t, dr, t, n);
        t0[V_COPY] = bench_now();
        memcpy(dst, src, (size_t)(2 * n) * sizeof(float)); /* 2n read + 2n written = the fused fwd's 4n */
        t0[NV] = bench_now();
        if (r >= 0)
            for (int v = 0; v < NV; v++) sec[v][r] = t0[v + 1] - t0[v];
    }
    double med[NV];
    for (int v = 0; v < NV; v++) med[v] = bench_median(sec[v], repeats);
    double copy_gbs = (double)moved[V_COPY] * 4.0 * (double)n / med[V_COPY] / 1e9;
    for (int v = 0; v < NV; v++) {
        double gbs = (double)moved[v] * 4.0 * (double)n / med[v] / 1e9;
        printf("| %lldx%lld | %s | %.3f | %.1f | %.2f |\n", (long long)N, (long long)D, names[v], 1e3 * med[v], gbs,
               gbs / copy_gbs);
    }
    printf("| %lldx%lld | fused / unfused | fwd %.2fx, bwd %.2fx, both %.2fx | | |\n", (long long)N, (long long)D,
           med[V_UF] / med[V_FF], med[V_UB] / med[V_FB], (med[V_UF] + med[V_UB]) / (med[V_FF] + med[V_FB]));
    printf("| %lldx%lld | fused / previous unfused | both %.2fx | | |\n", (long long)N, (long long)D,
           (med[V_PF] + med[V_PB]) / (med[V_FF] + med[V_FB]));
    free(a), free(b), free(w), free(dy), free(dr), free(s), free(y), free(t), free(dw), free(src), free(dst), free(acc);
    for (int v = 0; v < NV; v++) free(sec[v]);
}

int main(int argc, char **argv) {
    int repeats = 7, nshapes = 0;
    int64_t shapes[16][2];
    for (int i = 1; i < argc; i++) {
        long long N, D;
        if (!strcmp(argv[i], "--repeats") && i + 1 < argc) {
            repeats = atoi(argv[++i]);
            if (repeats < 1 || repeats > 1000) {
                fprintf(stderr, "bench_norm: --repeats takes 1..1000, not '%s'\n", argv[i]);
                return 2;
            }
        } else if (sscanf(argv[i], "%lldx%lld", &N, &D) == 2 && N > 0 && D > 0 && N * D <= (1LL << 28) &&
                   nshapes < 16) {
            shapes[nshapes][0] = N, shapes[nshapes][1] = D, nshapes++;
        } else {
            fprintf(stderr, "usage: bench_norm [--repeats R] [NxD ...] (N, D > 0, N*D <= 2^28, at most 16 shapes)\n");
            return 2;
        }
    }
    if (!nshapes) {
        static const int64_t def[3][2] = {{2048, 512}, {1024, 2048}, {4096, 4096}};
        memcpy(shapes, def, sizeof def);
        nshapes = 3;
    }
    printf("| tokens x hidden | kernels | ms (median of %d) | GB/s | of copy |\n|---|---|---:|---:|---:|\n", repeats);
    for (int i = 0; i < nshapes; i++) run_shape(shapes[i][0], shapes[i][1], repeats);
    return 0;
}
