/* gpu_test_util.c — the GPU kernel test's shared helpers (gpu_test.h). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"

int gt_failures;

static uint64_t rng = 88172645463325252ULL;
float gt_frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

/* n random values of scale s, rounded to bf16 so both sides see them. */
float *gt_rnd(int64_t n, float s) {
    float *x = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = kcu_host_from_bf16(kcu_host_to_bf16(s * gt_frand()));
    return x;
}

kcu_bf16 *gt_up(const float *x, int64_t n) {
    kcu_bf16 *h = malloc((size_t)(n ? n : 1) * 2), *d;
    for (int64_t i = 0; i < n; i++) h[i] = kcu_host_to_bf16(x[i]);
    KCU_CHECK_EXIT(cudaMalloc((void **)&d, (size_t)(n ? n : 1) * 2));
    KCU_CHECK_EXIT(cudaMemcpy(d, h, (size_t)n * 2, cudaMemcpyHostToDevice));
    free(h);
    return d;
}

kcu_bf16 *gt_dzeros(int64_t n) {
    kcu_bf16 *d;
    KCU_CHECK_EXIT(cudaMalloc((void **)&d, (size_t)(n ? n : 1) * 2));
    KCU_CHECK_EXIT(cudaMemset(d, 0, (size_t)(n ? n : 1) * 2));
    return d;
}

void *gt_dalloc(size_t bytes) {
    void *d;
    KCU_CHECK_EXIT(cudaMalloc(&d, bytes ? bytes : 1));
    KCU_CHECK_EXIT(cudaMemset(d, 0, bytes ? bytes : 1));
    return d;
}

float *gt_down(const kcu_bf16 *d, int64_t n) {
    kcu_bf16 *h = malloc((size_t)(n ? n : 1) * 2);
    float *x = malloc((size_t)(n ? n : 1) * sizeof(float));
    KCU_CHECK_EXIT(cudaDeviceSynchronize());
    KCU_CHECK_EXIT(cudaMemcpy(h, d, (size_t)n * 2, cudaMemcpyDeviceToHost));
    for (int64_t i = 0; i < n; i++) x[i] = kcu_host_from_bf16(h[i]);
    free(h);
    return x;
}

void gt_check(const char *name, const float *got, const float *ref, int64_t n, double tol) {
    double err = 0, mx = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - ref[i]);
        if (!(e <= err)) err = e; /* NaN counts */
        if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
    }
    bool ok = err <= tol * mx;
    printf("%-28s max err %.3e of max %.3e (%.2e, tol %.0e)  %s\n", name, err, mx, err / mx, tol, ok ? "ok" : "FAIL");
    gt_failures += !ok;
}

void gt_check_gpu(const char *name, const kcu_bf16 *d, const float *ref, int64_t n, double tol) {
    float *g = gt_down(d, n);
    gt_check(name, g, ref, n, tol);
    free(g);
}

/* Two device tensors equal bit for bit. */
void gt_check_same(const char *name, const kcu_bf16 *a, const kcu_bf16 *b, int64_t n) {
    float *x = gt_down(a, n), *y = gt_down(b, n);
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) bad += memcmp(&x[i], &y[i], sizeof(float)) != 0;
    printf("%-28s %lld of %lld differ  %s\n", name, (long long)bad, (long long)n, bad ? "FAIL" : "ok");
    gt_failures += bad != 0;
    free(x), free(y);
}
