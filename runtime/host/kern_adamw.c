/* kern_adamw.c — AdamW step and the sum of squares for the gradient norm.
 * Semantics: rt_host.h. */
#include "rt_host.h"

#include <math.h>

/* One clone per ISA, chosen when the program loads (GCC target_clones):
 * the loop vectorises to the CPU's widest vectors (CMake compiles this file
 * with -O3 -fno-math-errno: sqrtf of v >= 0 never sets errno).  Every clone
 * does the same IEEE operations in the same order per element (no FMA
 * contraction under -std=c17), so the results are the same bits on every
 * CPU. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define ADAMW_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define ADAMW_CLONES
#endif

ADAMW_CLONES
void kern_adamw(float *p, float *m, float *v, const float *g, int64_t n, double lr, double beta1, double beta2,
                double eps, double wd, int64_t t, double gscale) {
    /* Scalars in double (beta2^t for t in the thousands needs it), the
     * per-element arithmetic in float so the loop vectorises. */
    double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
    float decay = (float)(1.0 - lr * wd);
    float b1 = (float)beta1, b2 = (float)beta2, c1 = (float)(1.0 - beta1), c2 = (float)(1.0 - beta2);
    float step = (float)(lr / bc1), rbc2 = (float)(1.0 / sqrt(bc2)), e = (float)eps, gs = (float)gscale;
    for (int64_t i = 0; i < n; i++) {
        float gi = g[i] * gs;
        float mi = b1 * m[i] + c1 * gi;
        float vi = b2 * v[i] + c2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        /* sqrt(v / bc2) = sqrt(v) / sqrt(bc2) */
        p[i] = p[i] * decay - step * mi / (sqrtf(vi) * rbc2 + e);
    }
}

double kern_sumsq(const float *x, int64_t n) {
    /* Four double partial sums: exact enough for millions of elements and
     * independent chains the compiler can pipeline. */
    double s0 = 0.0, s1 = 0.0, s2 = 0.0, s3 = 0.0;
    int64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        s0 += (double)x[i] * x[i];
        s1 += (double)x[i + 1] * x[i + 1];
        s2 += (double)x[i + 2] * x[i + 2];
        s3 += (double)x[i + 3] * x[i + 3];
    }
    for (; i < n; i++) s0 += (double)x[i] * x[i];
    return (s0 + s1) + (s2 + s3);
}
