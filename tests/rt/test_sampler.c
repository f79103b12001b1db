/* test_sampler.c — --sampler epoch (rt_epoch_window, runtime/data/rt_data.c):
 * for window counts from 1 to 70001, each of three epochs visits every
 * window exactly once; consecutive epochs and other seeds give other
 * orders; the order is a pure function of (seed, sequence number), so a
 * resume needs nothing but the step.  No MPI is started. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../unit/check.h"
#include "data/rt_data.h"

static void one(int64_t n, uint64_t seed) {
    unsigned char *seen = calloc((size_t)n, 1);
    int64_t *first = malloc(sizeof *first * (size_t)n);
    int64_t same_as_epoch0 = 0, identity = 0;
    for (int64_t e = 0; e < 3; e++) {
        memset(seen, 0, (size_t)n);
        for (int64_t k = 0; k < n; k++) {
            int64_t w = rt_epoch_window(seed, e * n + k, n);
            CHECK(w >= 0 && w < n);
            if (w < 0 || w >= n) break;
            CHECK(!seen[w]); /* at most once, so n draws are every window once */
            seen[w] = 1;
            if (e == 0)
                first[k] = w, identity += w == k;
            else
                same_as_epoch0 += w == first[k];
            CHECK(rt_epoch_window(seed, e * n + k, n) == w); /* pure */
        }
    }
    if (n >= 64) { /* shuffled: few fixed points, and epochs differ */
        CHECK(identity < n / 8);
        CHECK(same_as_epoch0 < n / 4);
        int64_t other_seed = 0;
        for (int64_t k = 0; k < n; k++) other_seed += rt_epoch_window(seed + 1, k, n) == first[k];
        CHECK(other_seed < n / 8);
    }
    free(seen);
    free(first);
}

int main(void) {
    const int64_t ns[] = {1, 2, 3, 4, 5, 7, 8, 63, 64, 65, 100, 999, 1024, 4097, 70001};
    for (size_t i = 0; i < sizeof ns / sizeof *ns; i++)
        for (uint64_t seed = 0; seed < 3; seed++) one(ns[i], seed * 1234567);
    if (failures)
        fprintf(stderr, "test_sampler: %d check(s) failed\n", failures);
    else
        printf("test_sampler: every window exactly once per epoch for %zu window counts x 3 seeds x 3 epochs\n",
               sizeof ns / sizeof *ns);
    return failures != 0;
}
