/* ktest.h — what the kernel tests share: a seeded random stream and the
 * buffers and comparisons built on it.  Each test file defines KTEST_SEED
 * (its own stream) before including this header once. */
#ifndef BASP_KTEST_H
#define BASP_KTEST_H

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#ifndef KTEST_SEED
#define KTEST_SEED 0x9E3779B97F4A7C15ull
#endif

static uint64_t g_rng = KTEST_SEED;

/* splitmix64 -> [0, 1) */
static inline double urand(void) {
    uint64_t z = (g_rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return (double)((z ^ (z >> 31)) >> 11) / 9007199254740992.0;
}

/* n floats uniform in [lo, hi) (malloc'd; at least one). */
static inline float *frand(int64_t n, double lo, double hi) {
    float *p = malloc((size_t)(n > 0 ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) p[i] = (float)(lo + (hi - lo) * urand());
    return p;
}

static inline float *fzero(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

/* Max |a - b| over n entries; NaN counts as infinitely wrong. */
static inline double max_abs_diff(const float *a, const float *b, int64_t n) {
    double m = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= m)) m = isnan(e) ? INFINITY : e;
    }
    return m;
}

#endif
