/* rt_opt.c — the CPU backend's part of the optimizer step (core's
 * rt_adamw and rt_grad_norm, core/rt_optim.c, do the rest): each
 * gradient's sum of squares and the per-tensor AdamW update, both with the
 * host kernels on the arena's fp32 buffers. */
#include <stdlib.h>
#include <string.h>

#include "../host/rt_host.h"
#include "rt_cpu.h"

void rt_backend_grad_sumsq(rt_ctx *rt, double *sumsq) {
    for (int i = 0; i < rt->p->nopt; i++) {
        int g = rt->p->opt[i].grad;
        sumsq[i] = kern_sumsq(rt->buf[g], rt->p->values[g].local_elems);
    }
}

/* The gradient entries matching this rank's parameter shard: the grad
 * buffer itself when both are laid out alike, else (ZeRO-1: param sharded,
 * grad whole) the N-d slice at the shard's global offset. */
static const float *cpu_grad_for_shard(rt_ctx *rt, int param, int grad) {
    const rt_value_desc *pd = &rt->p->values[param], *gd = &rt->p->values[grad];
    if (rt_grad_like_param(rt, param, grad)) return rt->buf[grad];
    int64_t pl[RT_MAX_RANK], gl[RT_MAX_RANK], poff[RT_MAX_RANK], soff[RT_MAX_RANK], zero[RT_MAX_RANK] = {0};
    int nd = rt_local_dims(rt, param, pl);
    rt_local_dims(rt, grad, gl);
    rt_global_offset(rt->p, param, rt->rank, poff);
    for (int i = 0; i < nd; i++) soff[i] = gd->shard[i] < 0 ? poff[i] : 0;
    float *tmp = cpu_scratch(rt, 0, (size_t)pd->local_elems * 4);
    rt_copy_box(tmp, pl, zero, rt->buf[grad], gl, soff, pl, nd);
    return tmp;
}

void rt_backend_adamw(rt_ctx *rt, int i, int param, int grad, double wd) {
    const rt_value_desc *pd = &rt->p->values[param];
    const float *g = cpu_grad_for_shard(rt, param, grad);
    kern_adamw(rt->buf[param], rt->opt_m[i], rt->opt_v[i], g, pd->local_elems, rt->lr, rt->opt.optim.beta1,
               rt->opt.optim.beta2, rt->opt.optim.eps, wd, rt->step + 1, rt->clip_scale);
}
