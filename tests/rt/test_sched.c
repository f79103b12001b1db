/* test_sched.c — the learning-rate schedules against their closed forms
 * (runtime/core/rt_sched.c): hand-computed values at step 0, inside and at the
 * end of the warmup, in the decay and at the last step, then every step of
 * a run against the formula written out independently here; and the range
 * checks of AdamW's settings.  Pure functions: no MPI is started. */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "../unit/check.h"
#include "core/rt_core.h"

static double lr_of(rt_schedule_kind k, int64_t warmup, double min_lr, double wsd, int64_t t, int64_t T) {
    rt_optim_desc o = rt_optim_defaults;
    o.schedule = k, o.warmup = warmup, o.min_lr = min_lr, o.wsd_decay = wsd;
    return rt_lr_at(&o, 1.0, t, T);
}

/* Values worked out by hand: lr 1, T = 100 steps, W = 10, min_lr 0.1. */
static void hand_values(void) {
    for (int k = RT_SCHED_CONSTANT; k <= RT_SCHED_WSD; k++) {
        CHECK_NEAR_FLOOR(lr_of(k, 10, 0.1, 0.2, 0, 100), 0.0, 1e-12); /* step 0 of a warmup: 0 */
        CHECK_NEAR_FLOOR(lr_of(k, 10, 0.1, 0.2, 5, 100), 0.5, 0);     /* half way */
        CHECK_NEAR_FLOOR(lr_of(k, 10, 0.1, 0.2, 10, 100), 1.0, 0);    /* the end of the warmup: the peak */
    }
    CHECK_NEAR_FLOOR(lr_of(RT_SCHED_CONSTANT, 10, 0.1, 0.2, 99, 100), 1.0, 0);
    CHECK_NEAR_FLOOR(lr_of(RT_SCHED_CONSTANT, 0, 0, 0.2, 0, 100), 1.0, 0); /* no warmup: the peak at once */
    /* cosine: progress (t - 10) / 90; t = 55 is half way: 0.1 + 0.9 * 0.5 */
    CHECK_NEAR_FLOOR(lr_of(RT_SCHED_COSINE, 10, 0.1, 0.2, 55, 100), 0.55, 0);
    CHECK_NEAR_FLOOR(lr_of(RT_SCHED_COSINE, 10, 0.1, 0.2, 99, 100),
                     0.1 + 0.9 * 0.5 * (1 + cos(3.14159265358979323846 * 89.0 / 90.0)), 0);
    CHECK_NEAR_FLOOR(lr_of(RT_SCHED_COSINE, 10, 0.0, 0.2, 100, 100), 0.0, 1e-12); /* past the end: min_lr */
    /* linear: 0.1 + 0.9 * (100 - t) / 90 */
    CHECK_NEAR_FLOOR(lr_of(RT_SCHED_LINEAR, 10, 0.1, 0.2, 55, 100), 0.55, 0);
    CHECK_NEAR_FLOOR(lr_of(RT_SCHED_LINEAR, 10, 0.1, 0.2, 99, 100), 0.11, 0);
    /* wsd: 0.2 of the 90 post-warmup steps = 18 decay steps, t = 82 .. 99 */
    CHECK(rt_wsd_decay_steps(&(rt_optim_desc){.warmup = 10, .wsd_decay = 0.2}, 100) == 18);
    CHECK_NEAR_FLOOR(lr_of(RT_SCHED_WSD, 10, 0.1, 0.2, 81, 100), 1.0, 0); /* the last stable step */
    CHECK_NEAR_FLOOR(lr_of(RT_SCHED_WSD, 10, 0.1, 0.2, 82, 100), 1.0, 0); /* (100 - 82) / 18 = 1 */
    CHECK_NEAR_FLOOR(lr_of(RT_SCHED_WSD, 10, 0.1, 0.2, 91, 100), 0.1 + 0.9 * 0.5, 0);
    CHECK_NEAR_FLOOR(lr_of(RT_SCHED_WSD, 10, 0.1, 0.2, 99, 100), 0.1 + 0.9 / 18, 0);
    /* A one-step warmup and a one-step run. */
    CHECK_NEAR_FLOOR(lr_of(RT_SCHED_COSINE, 1, 0, 0.2, 0, 5), 0.0, 1e-12);
    CHECK_NEAR_FLOOR(lr_of(RT_SCHED_COSINE, 1, 0, 0.2, 1, 5), 1.0, 0);
    CHECK_NEAR_FLOOR(lr_of(RT_SCHED_LINEAR, 0, 0, 0.2, 0, 1), 1.0, 0);
}

/* Every step of several runs against the formulas, written here again from
 * the definitions (transformers' LambdaLR multipliers scaled to [min, 1]). */
static void every_step(void) {
    const double PI = 3.14159265358979323846;
    const int64_t Ts[] = {1, 2, 7, 100, 1000};
    for (size_t ti = 0; ti < sizeof Ts / sizeof *Ts; ti++) {
        int64_t T = Ts[ti];
        for (int64_t W = 0; W <= T; W += T / 3 + 1) {
            double m = 0.05;
            for (int64_t t = 0; t < T; t++) {
                double warm = W > 0 && t < W ? (double)t / (double)W : -1;
                double span = (double)(T - W > 1 ? T - W : 1);
                double lin = m + (1 - m) * (double)(T - t) / span;
                double cosv = m + (1 - m) * 0.5 * (1 + cos(PI * (double)(t - W) / span));
                int64_t D = (int64_t)llround(0.25 * (double)(T - W));
                if (D < 1) D = 1;
                if (D > T - W) D = T - W;
                double wsd = t < T - D ? 1.0 : m + (1 - m) * (double)(T - t) / (double)D;
                CHECK_NEAR_FLOOR(lr_of(RT_SCHED_CONSTANT, W, m, 0.25, t, T), warm >= 0 ? warm : 1.0, 1e-12);
                CHECK_NEAR_FLOOR(lr_of(RT_SCHED_LINEAR, W, m, 0.25, t, T), warm >= 0 ? warm : lin, 1e-12);
                CHECK_NEAR_FLOOR(lr_of(RT_SCHED_COSINE, W, m, 0.25, t, T), warm >= 0 ? warm : cosv, 1e-12);
                CHECK_NEAR_FLOOR(lr_of(RT_SCHED_WSD, W, m, 0.25, t, T), warm >= 0 ? warm : wsd, 1e-12);
            }
        }
    }
}

static void checks(void) {
    char err[200];
    rt_optim_desc o = rt_optim_defaults;
    CHECK(rt_optim_check(&o, 1e-3, 100, err, sizeof err) == NULL);
    o.min_lr = 2e-3;
    const char *k = rt_optim_check(&o, 1e-3, 100, err, sizeof err);
    CHECK(k && !strcmp(k, "min_lr") && strstr(err, "[0, lr = 0.001]"));
    o = rt_optim_defaults, o.warmup = 101;
    k = rt_optim_check(&o, 1e-3, 100, err, sizeof err);
    CHECK(k && !strcmp(k, "warmup") && strstr(err, "longer than the run (100 steps)"));
    CHECK(rt_optim_check(&o, 1e-3, 0, err, sizeof err) == NULL); /* --steps 0 trains nothing */
    o = rt_optim_defaults, o.beta2 = 1.0;
    k = rt_optim_check(&o, 1e-3, 100, err, sizeof err);
    CHECK(k && !strcmp(k, "beta2"));
    o = rt_optim_defaults, o.eps = 0;
    k = rt_optim_check(&o, 1e-3, 100, err, sizeof err);
    CHECK(k && !strcmp(k, "eps"));
    o = rt_optim_defaults, o.wsd_decay = 0;
    k = rt_optim_check(&o, 1e-3, 100, err, sizeof err);
    CHECK(k && !strcmp(k, "wsd_decay"));
    o = rt_optim_defaults, o.grad_clip = 0; /* off */
    CHECK(rt_optim_check(&o, 1e-3, 100, err, sizeof err) == NULL);
    rt_schedule_kind s;
    CHECK(rt_schedule_parse("wsd", &s) && s == RT_SCHED_WSD && !strcmp(rt_schedule_name(s), "wsd"));
    CHECK(!rt_schedule_parse("cosinus", &s));
}

int main(void) {
    hand_values();
    every_step();
    checks();
    if (failures)
        fprintf(stderr, "test_sched: %d check(s) failed\n", failures);
    else
        printf("test_sched: all checks passed\n");
    return failures != 0;
}
