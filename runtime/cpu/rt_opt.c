/* rt_opt.c — AdamW with global-norm gradient clipping over sharded and
 * replicated gradients (ZeRO stages 0-3). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "rt_internal.h"

void rt_opt_begin_step(rt_ctx *rt) { rt->norm_done = false; }

/* Every gradient's local sum of squares, combined by
 * rt_grad_norm_combine (replicated gradients count once, sharded ones are
 * summed over the world). */
double rt_grad_norm(rt_ctx *rt) {
    double *s = RT_MALLOC(sizeof(double) * (size_t)(rt->p->nopt + 1));
    for (int i = 0; i < rt->p->nopt; i++) {
        int g = rt->p->opt[i].grad;
        s[i] = kern_sumsq(rt->buf[g], rt->p->values[g].local_elems);
    }
    double norm = rt_grad_norm_combine(rt, s);
    free(s);
    return norm;
}

/* The gradient entries matching this rank's parameter shard: the grad
 * buffer itself when both are laid out alike, else (ZeRO-1: param sharded,
 * grad whole) the N-d slice at the shard's global offset. */
static const float *rt_grad_for_shard(rt_ctx *rt, int param, int grad) {
    const rt_value_desc *pd = &rt->p->values[param], *gd = &rt->p->values[grad];
    if (rt_grad_like_param(rt, param, grad)) return rt->buf[grad];
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
        rt->clip_scale = rt_clip_scale(rt, rt->grad_norm);
        rt->norm_done = true;
    }
    /* The norm is global, so every rank skips alike and the loop stops the
     * run cleanly, naming the step, instead of training on NaN. */
    if (!isfinite(rt->grad_norm)) return;
    int i = rt_opt_index(rt, param, grad);
    const rt_value_desc *pd = &rt->p->values[param];
    const float *g = rt_grad_for_shard(rt, param, grad);
    double wd = rt_weight_decay(rt, pd);
    kern_adamw(rt->buf[param], rt->opt_m[i], rt->opt_v[i], g, pd->local_elems, rt->lr, rt->opt.optim.beta1, rt->opt.optim.beta2, rt->opt.optim.eps,
               wd, rt->step + 1, rt->clip_scale);
    rt_kern_count(rt, CM_K_ADAMW, t0);
}
