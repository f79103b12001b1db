/* check.h — check macros for the single-file unit tests (test_passes.c,
 * test_cost.c): a failed check prints file:line and the expression, and the
 * test's main returns non-zero when `failures` is non-zero. */
#ifndef BASP_TEST_CHECK_H
#define BASP_TEST_CHECK_H

#include <math.h>
#include <stdio.h>

static int failures;

#define CHECK(cond)                                                                                                    \
    do {                                                                                                               \
        if (!(cond)) {                                                                                                 \
            fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);                                   \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

/* |a - b| <= 1e-9 * (|b| + floor) */
#define CHECK_NEAR_FLOOR(a, b, floor)                                                                                  \
    do {                                                                                                               \
        double a_ = (a), b_ = (b);                                                                                     \
        if (fabs(a_ - b_) > 1e-9 * (fabs(b_) + (floor))) {                                                             \
            fprintf(stderr, "%s:%d: %s = %.17g, expected %.17g\n", __FILE__, __LINE__, #a, a_, b_);                    \
            failures++;                                                                                                \
        }                                                                                                              \
    } while (0)

#endif
