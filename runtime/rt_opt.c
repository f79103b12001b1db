/* rt_opt.c — AdamW with global-norm gradient clipping over sharded and
 * replicated gradients (ZeRO stages 0-3). */
#include <math.h>
#include <string.h>

#include "kernels.h"
#include "rt_internal.h"

static const double RT_BETA1 = 0.9, RT_BETA2 = 0.95, RT_EPS = 1e-8, RT_WD = 0.1, RT_MAX_NORM = 1.0;

void rt_opt_begin_step(rt_ctx *rt) { rt->norm_done = false; }

/* A replicated gradient is identical on every rank and counted once; a
 * sharded one contributes its local squares, divided by its replication
 * when a shard is held by several ranks, summed over the world. */
double rt_grad_norm(rt_ctx *rt) {
    double repl = 0.0, shard = 0.0;
    for (int i = 0; i < rt->p->nopt; i++) {
        int g = rt->p->opt[i].grad;
        const rt_value_desc *d = &rt->p->values[g];
        double s = kern_sumsq(rt->buf[g], d->local_elems);
        int64_t r = rt_replication(rt, g);
        if (r == rt->world) repl += s;
        else shard += s / (double)r;
    }
    double total = shard;
    if (rt->world > 1) RT_MPI(MPI_Allreduce(&shard, &total, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
    return sqrt(total + repl);
}

/* The gradient entries matching this rank's parameter shard: the grad
 * buffer itself when both are laid out alike, else (ZeRO-1: param sharded,
 * grad whole) the N-d slice at the shard's global offset. */
static const float *rt_grad_for_shard(rt_ctx *rt, int param, int grad) {
    const rt_value_desc *pd = &rt->p->values[param], *gd = &rt->p->values[grad];
    RT_CHECK(pd->rank == gd->rank, "adamw %s: grad %s has rank %d, param %d", pd->name, gd->name, gd->rank,
             pd->rank);
    bool same = true;
    for (int i = 0; i < pd->rank; i++) {
        RT_CHECK(pd->dims[i] == gd->dims[i], "adamw %s: grad %s dim %d is %lld, param %lld", pd->name, gd->name, i,
                 (long long)gd->dims[i], (long long)pd->dims[i]);
        RT_CHECK(gd->shard[i] < 0 || gd->shard[i] == pd->shard[i],
                 "adamw %s: grad %s is sharded where the param is not (dim %d)", pd->name, gd->name, i);
        if (gd->shard[i] != pd->shard[i]) same = false;
    }
    if (same) return rt->buf[grad];
    int64_t pl[RT_MAX_RANK], gl[RT_MAX_RANK], poff[RT_MAX_RANK], soff[RT_MAX_RANK], zero[RT_MAX_RANK] = {0};
    int nd = rt_local_dims(rt, param, pl);
    rt_local_dims(rt, grad, gl);
    rt_global_offset(rt->p, param, rt->rank, poff);
    for (int i = 0; i < nd; i++) soff[i] = gd->shard[i] < 0 ? poff[i] : 0;
    float *tmp = rt_scratch(rt, 0, (size_t)pd->local_elems * 4);
    rt_copy_box(tmp, pl, zero, rt->buf[grad], gl, soff, pl, nd);
    return tmp;
}

void rt_adamw(rt_ctx *rt, int param, int grad) {
    double t0 = rt_now();
    RT_CHECK(param >= 0 && param < rt->p->nvalues && grad >= 0 && grad < rt->p->nvalues,
             "adamw: value index out of range (%d, %d)", param, grad);
    if (!rt->norm_done) {
        rt->grad_norm = rt_grad_norm(rt);
        rt->clip_scale = rt->grad_norm > RT_MAX_NORM ? RT_MAX_NORM / (rt->grad_norm + 1e-6) : 1.0;
        rt->norm_done = true;
    }
    /* The norm is global, so every rank skips alike and the loop stops the
     * run cleanly, naming the step, instead of training on NaN. */
    if (!isfinite(rt->grad_norm)) return;
    int i = rt_opt_index(rt, param, grad);
    const rt_value_desc *pd = &rt->p->values[param];
    const float *g = rt_grad_for_shard(rt, param, grad);
    double wd = pd->rank >= 2 ? RT_WD : 0.0;
    kern_adamw(rt->buf[param], rt->opt_m[i], rt->opt_v[i], g, pd->local_elems, rt->lr, RT_BETA1, RT_BETA2, RT_EPS,
               wd, rt->step + 1, rt->clip_scale);
    rt->total.kern_calls[RT_K_ADAMW]++;
    rt->total.kern_sec[RT_K_ADAMW] += rt_now() - t0;
}
