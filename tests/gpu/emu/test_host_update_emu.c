/* test_host_update_emu.c — the CUDA backend's host-update helpers
 * (runtime/cuda/rt_opt_cuda.c) on 1, 3 and 8 threads:
 *
 *   cuda_host_widen: bf16 values widened to fp32 in place, in parallel
 *     halves from the top, must equal each value widened on its own, for
 *     sizes around the halving and threading thresholds, odd ones too (a
 *     phase whose writes reach an unread entry, or an entry left out,
 *     changes some value);
 *   cuda_host_sumsq: a host gradient's sum of squares must be the same
 *     bits on any thread count, and equal a plain double sum to 1e-12
 *     relative (only the order of the additions differs).
 *
 * Built against the emulated backend; needs no GPU and no MPI launcher. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_cuda.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;

static uint16_t rand_bf16(void) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    /* a finite bf16: sign, exponent 100..154 (about 2^-27 .. 2^27), mantissa */
    uint16_t sign = (uint16_t)(rng >> 63) << 15, exp = (uint16_t)(100 + (rng >> 20) % 55), man = (uint16_t)(rng & 0x7f);
    return (uint16_t)(sign | exp << 7 | man);
}

int main(void) {
    static const int64_t sizes[] = {0, 1, 2, 3, 1000, 32767, 32768, 32769, 65535, 65536, 100003, 262147, 1 << 20};
    static const int threads[] = {1, 3, 8};
    rt_ctx rt;
    memset(&rt, 0, sizeof rt);
    int fails = 0;
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int64_t n = sizes[s];
        kcu_bf16 *src = malloc(sizeof *src * (size_t)(n + 1));
        float *want = malloc(sizeof *want * (size_t)(n + 1)), *buf = malloc(sizeof *buf * (size_t)(n + 1));
        double plain = 0, first = 0;
        for (int64_t k = 0; k < n; k++) {
            uint16_t b = rand_bf16();
            memcpy(&src[k], &b, sizeof b);
            want[k] = kcu_host_from_bf16(src[k]);
            plain += (double)want[k] * want[k];
        }
        for (size_t t = 0; t < sizeof threads / sizeof *threads; t++) {
            rt.host_threads = threads[t];
            memset(buf, 0xff, sizeof *buf * (size_t)(n + 1));
            memcpy(buf, src, sizeof *src * (size_t)n);
            cuda_host_widen(&rt, buf, n);
            int64_t bad = -1;
            for (int64_t k = 0; k < n && bad < 0; k++)
                if (memcmp(&buf[k], &want[k], sizeof *buf) != 0) bad = k;
            if (bad >= 0) {
                printf("FAIL widen n=%lld threads=%d: value %lld is %g, want %g\n", (long long)n, threads[t],
                       (long long)bad, buf[bad], want[bad]);
                fails++;
            }
            double got = cuda_host_sumsq(&rt, src, n);
            if (t == 0) first = got;
            if (memcmp(&got, &first, sizeof got) != 0 || fabs(got - plain) > 1e-12 * plain) {
                printf("FAIL sumsq n=%lld threads=%d: %.17g, %.17g on 1 thread, plain sum %.17g\n", (long long)n,
                       threads[t], got, first, plain);
                fails++;
            }
        }
        free(src), free(want), free(buf);
    }
    printf("%s: host widen and sum of squares, %zu sizes on 1, 3 and 8 threads\n", fails ? "FAILED" : "ok",
           sizeof sizes / sizeof *sizes);
    return fails != 0;
}
