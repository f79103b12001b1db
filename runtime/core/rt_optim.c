/* rt_optim.c — the optimizer step, the same on every backend: AdamW with
 * global-norm gradient clipping over sharded and replicated gradients
 * (ZeRO stages 0-3; the rules are runtime/README.md's Optimizer section).
 * Here: the argument checks, the global norm once per step, the clip
 * factor, the weight decay, skipping a non-finite step and counting the
 * call.  The backend does the device work (rt_backend.h): each gradient's
 * sum of squares and the per-tensor update. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_backend.h"
#include "rt_core.h"

void rt_opt_begin_step(rt_ctx *rt) { rt->norm_done = false; }

/* The global gradient norm from every opt pair's local sum of squares
 * (collective: a replicated gradient counts once, a sharded one its local
 * squares divided by its replication, summed over the world). */
static double rt_grad_norm_combine(rt_ctx *rt, const double *sumsq) {
    double repl = 0.0, shard = 0.0;
    for (int i = 0; i < rt->p->nopt; i++) {
        int64_t r = rt_replication(rt, rt->p->opt[i].grad);
        if (r == rt->world)
            repl += sumsq[i];
        else
            shard += sumsq[i] / (double)r;
    }
    double total = shard;
    if (rt->world > 1) RT_MPI(MPI_Allreduce(&shard, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return sqrt(total + repl);
}

/* The clipping factor for the step's global norm (1 when grad_clip is 0). */
static double rt_clip_scale(const rt_ctx *rt, double norm) {
    double c = rt->opt.optim.grad_clip;
    return c > 0 && norm > c ? c / (norm + 1e-6) : 1.0;
}

void rt_grad_norm_set(rt_ctx *rt, const double *sumsq) {
    rt->grad_norm = rt_grad_norm_combine(rt, sumsq);
    rt->clip_scale = rt_clip_scale(rt, rt->grad_norm);
    rt->norm_done = true;
}

double rt_grad_norm(rt_ctx *rt) {
    double *s = RT_MALLOC(sizeof(double) * (size_t)(rt->p->nopt + 1));
    rt_backend_grad_sumsq(rt, s);
    rt_grad_norm_set(rt, s);
    free(s);
    return rt->grad_norm;
}

static bool rt_is_bias(const char *name) {
    size_t n = strlen(name);
    return n > 3 && (!strcmp(name + n - 3, ".bq") || !strcmp(name + n - 3, ".bk") || !strcmp(name + n - 3, ".bv"));
}

/* The weight decay of a parameter: opt.optim.weight_decay on matrices (rank >= 2) but not on
 * norm weights (rank 1) or the q/k/v biases (l<i>.bq/bk/bv, [heads, Dh]
 * though they are vectors), as common practice and Hugging Face's
 * recipes exempt biases and norms. */
static double rt_weight_decay(const rt_ctx *rt, const rt_value_desc *d) {
    return d->rank >= 2 && !rt_is_bias(d->name) ? rt->opt.optim.weight_decay : 0.0;
}

bool rt_grad_like_param(rt_ctx *rt, int param, int grad) {
    const rt_value_desc *pd = &rt->p->values[param], *gd = &rt->p->values[grad];
    RT_CHECK(pd->rank == gd->rank, "adamw %s: grad %s has rank %d, param %d", pd->name, gd->name, gd->rank, pd->rank);
    bool same = true;
    for (int i = 0; i < pd->rank; i++) {
        RT_CHECK(pd->dims[i] == gd->dims[i], "adamw %s: grad %s dim %d is %lld, param %lld", pd->name, gd->name, i,
                 (long long)gd->dims[i], (long long)pd->dims[i]);
        RT_CHECK(gd->shard[i] < 0 || gd->shard[i] == pd->shard[i],
                 "adamw %s: grad %s is sharded where the param is not (dim %d)", pd->name, gd->name, i);
        if (gd->shard[i] != pd->shard[i]) same = false;
    }
    return same;
}

void rt_adamw(rt_ctx *rt, int param, int grad) {
    double t0 = rt_now();
    RT_CHECK(param >= 0 && param < rt->p->nvalues && grad >= 0 && grad < rt->p->nvalues,
             "adamw: value index out of range (%d, %d)", param, grad);
    if (!rt->norm_done) rt_grad_norm(rt);
    /* The norm is global, so every rank skips alike and the loop stops the
     * run cleanly, naming the step, instead of training on NaN. */
    if (!isfinite(rt->grad_norm)) return;
    int i = rt_opt_index(rt, param, grad);
    double wd = rt_weight_decay(rt, &rt->p->values[param]);
    rt_backend_adamw(rt, i, param, grad, wd);
    rt_kern_count(rt, CM_K_ADAMW, t0);
}
