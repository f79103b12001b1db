/* rt_sched.c — AdamW's settings and the learning-rate schedule: a pure
 * function of the step, so that every rank, every layout and a resumed run
 * compute the same learning rate at the same step (no state to save).
 *
 * With base rate L, floor m = min_lr, W warmup steps and T steps in all, the
 * rate of 0-based step t (the t+1-th optimizer update) is
 *   warmup (t < W):   L * t / W                    (every schedule; 0 at t = 0)
 *   constant:         L
 *   linear:           m + (L - m) * (T - t) / (T - W)
 *   cosine:           m + (L - m) * (1 + cos(pi * (t - W) / (T - W))) / 2
 *   wsd:              L while t < T - D, then m + (L - m) * (T - t) / D,
 *                     D = round(wsd_decay * (T - W)) decay steps (at least 1)
 * which are, with m = 0, Hugging Face transformers'
 * get_constant_schedule_with_warmup, get_linear_schedule_with_warmup,
 * get_cosine_schedule_with_warmup (get_cosine_with_min_lr_schedule_with_warmup
 * with min_lr = m) and get_wsd_schedule(decay_type="linear"), each as a
 * LambdaLR stepped once per optimizer update. */
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "rt_core.h"

const rt_optim_desc rt_optim_defaults = {
    .schedule = RT_SCHED_CONSTANT,
    .min_lr = 0,
    .warmup = 0,
    .wsd_decay = 0.2,
    .weight_decay = 0.1,
    .beta1 = 0.9,
    .beta2 = 0.95,
    .eps = 1e-8,
    .grad_clip = 1.0,
};

const rt_optim_field rt_optim_fields[RT_NOPTIM_FIELDS] = {
    {"warmup", offsetof(rt_optim_desc, warmup), true},
    {"min_lr", offsetof(rt_optim_desc, min_lr), false},
    {"wsd_decay", offsetof(rt_optim_desc, wsd_decay), false},
    {"weight_decay", offsetof(rt_optim_desc, weight_decay), false},
    {"beta1", offsetof(rt_optim_desc, beta1), false},
    {"beta2", offsetof(rt_optim_desc, beta2), false},
    {"eps", offsetof(rt_optim_desc, eps), false},
    {"grad_clip", offsetof(rt_optim_desc, grad_clip), false},
};

double rt_optim_get(const rt_optim_desc *o, const rt_optim_field *f) {
    const char *p = (const char *)o + f->off;
    return f->is_int ? (double)*(const int64_t *)p : *(const double *)p;
}

static const char *const rt_sched_names[] = {"constant", "cosine", "linear", "wsd"};

const char *rt_schedule_name(rt_schedule_kind k) {
    return k >= RT_SCHED_CONSTANT && k <= RT_SCHED_WSD ? rt_sched_names[k] : "?";
}

bool rt_schedule_parse(const char *s, rt_schedule_kind *out) {
    for (int k = RT_SCHED_CONSTANT; k <= RT_SCHED_WSD; k++)
        if (!strcmp(s, rt_sched_names[k])) {
            *out = (rt_schedule_kind)k;
            return true;
        }
    return false;
}

int64_t rt_wsd_decay_steps(const rt_optim_desc *o, int64_t total) {
    int64_t span = total - o->warmup;
    int64_t d = (int64_t)llround(o->wsd_decay * (double)span);
    return d < 1 ? 1 : d > span ? span : d;
}

double rt_lr_at(const rt_optim_desc *o, double lr, int64_t t, int64_t total) {
    int64_t W = o->warmup, T = total;
    if (t < W) return lr * (double)t / (double)W;
    double m = o->min_lr, span = (double)(T - W > 1 ? T - W : 1);
    switch (o->schedule) {
    case RT_SCHED_CONSTANT: return lr;
    case RT_SCHED_LINEAR: return m + (lr - m) * fmax(0.0, (double)(T - t) / span);
    case RT_SCHED_COSINE: {
        double progress = fmin(1.0, (double)(t - W) / span);
        return m + (lr - m) * 0.5 * (1.0 + cos(3.14159265358979323846 * progress));
    }
    case RT_SCHED_WSD: {
        int64_t D = rt_wsd_decay_steps(o, T);
        if (t < T - D) return lr;
        return m + (lr - m) * fmax(0.0, (double)(T - t) / (double)D);
    }
    }
    return lr;
}

const char *rt_optim_check(const rt_optim_desc *o, double lr, int64_t steps, char *err, size_t errlen) {
    const char *bad = NULL;
    char why[160] = "";
    if (!(isfinite(lr) && lr >= 0))
        bad = "lr", snprintf(why, sizeof why, "%g: must be a finite number >= 0", lr);
    else if (!(isfinite(o->min_lr) && o->min_lr >= 0 && o->min_lr <= lr))
        bad = "min_lr", snprintf(why, sizeof why, "%g: must lie in [0, lr = %g]", o->min_lr, lr);
    else if (o->warmup < 0)
        bad = "warmup", snprintf(why, sizeof why, "%lld: must be >= 0", (long long)o->warmup);
    else if (o->warmup > steps && steps > 0)
        bad = "warmup", snprintf(why, sizeof why, "%lld steps is longer than the run (%lld steps)",
                                 (long long)o->warmup, (long long)steps);
    else if (!(o->wsd_decay > 0 && o->wsd_decay <= 1))
        bad = "wsd_decay", snprintf(why, sizeof why,
                                    "%g: the decaying fraction of the post-warmup steps must lie "
                                    "in (0, 1]",
                                    o->wsd_decay);
    else if (!(isfinite(o->weight_decay) && o->weight_decay >= 0))
        bad = "weight_decay", snprintf(why, sizeof why, "%g: must be >= 0", o->weight_decay);
    else if (!(o->beta1 >= 0 && o->beta1 < 1))
        bad = "beta1", snprintf(why, sizeof why, "%g: must lie in [0, 1)", o->beta1);
    else if (!(o->beta2 >= 0 && o->beta2 < 1))
        bad = "beta2", snprintf(why, sizeof why, "%g: must lie in [0, 1)", o->beta2);
    else if (!(isfinite(o->eps) && o->eps > 0))
        bad = "eps", snprintf(why, sizeof why, "%g: must be > 0", o->eps);
    else if (!(isfinite(o->grad_clip) && o->grad_clip >= 0))
        bad = "grad_clip", snprintf(why, sizeof why, "%g: must be >= 0 (0 = no clipping)", o->grad_clip);
    if (bad) snprintf(err, errlen, "%s", why);
    return bad;
}
