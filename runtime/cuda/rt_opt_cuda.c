/* rt_opt_cuda.c — AdamW with global-norm clipping on the device: bf16
 * gradients, fp32 master weights and moments (the rules are rt_opt.c's and
 * runtime/README.md's Optimizer section); with the optimizer offloaded
 * (rt_program.opt_on_host) the same update on the host, ZeRO-Offload's
 * way: the bf16 gradient comes down, the CPU's AdamW kernel updates the
 * fp32 master and moments in the pinned host arena, and the bf16 weight
 * goes back up. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "rt_cuda.h"

void rt_opt_begin_step(rt_ctx *rt) { rt->norm_done = false; }

/* Every gradient's sum of squares on the device (double), one copy back,
 * then the CPU's rule: replicated gradients count once, sharded ones are
 * summed over the world, divided by their replication. */
double rt_grad_norm(rt_ctx *rt) {
    rt_cuda *cu = rt_cu(rt);
    int nopt = rt->p->nopt;
    rt_cu_wait_comm(rt); /* the gradients may come from reduce_scatter / all_reduce */
    CU_CHECK(cudaMemsetAsync(cu->d_norm, 0, sizeof(double) * (size_t)(nopt + 1), cu->cs));
    for (int i = 0; i < nopt; i++) {
        int g = rt->p->opt[i].grad;
        if (!rt->p->values[g].on_host)
            CU_CHECK(kcu_sumsq(rt_cu_use(rt, g), rt->p->values[g].local_elems, cu->d_norm + i, cu->cs));
    }
    double *s = RT_MALLOC(sizeof(double) * (size_t)(nopt + 1));
    CU_CHECK(cudaMemcpyAsync(s, cu->d_norm, sizeof(double) * (size_t)(nopt + 1), cudaMemcpyDeviceToHost, cu->cs));
    CU_CHECK(cudaStreamSynchronize(cu->cs)); /* the gradients' copies to the host have landed too */
    /* Gradients the optimizer's offload moved to the host: summed there. */
    for (int i = 0; i < nopt; i++) {
        int g = rt->p->opt[i].grad;
        if (!rt->p->values[g].on_host) continue;
        const kcu_bf16 *h = rt_cu_use(rt, g);
        double acc = 0;
        for (int64_t k = 0; k < rt->p->values[g].local_elems; k++) {
            double x = kcu_host_from_bf16(h[k]);
            acc += x * x;
        }
        s[i] = acc;
    }
    double norm = rt_grad_norm_combine(rt, s);
    free(s);
    return norm;
}

/* The gradient entries matching this rank's parameter shard: the grad
 * buffer itself when both are laid out alike, else (ZeRO-1: param sharded,
 * grad whole) the N-d slice at the shard's global offset, copied on the
 * device. */
static const kcu_bf16 *rt_cu_grad_for_shard(rt_ctx *rt, int param, int grad) {
    const rt_value_desc *pd = &rt->p->values[param], *gd = &rt->p->values[grad];
    const kcu_bf16 *g = rt_cu_use(rt, grad);
    if (rt_grad_like_param(rt, param, grad)) return g;
    RT_CHECK(!gd->on_host, "adamw(%s, %s): a gradient in host memory must be laid out like its parameter (the "
             "offload pass keeps ZeRO-1's whole gradients on the device)", pd->name, gd->name);
    kcu_box bx = {.nd = pd->rank};
    int64_t poff[RT_MAX_RANK];
    rt_local_dims(rt, param, bx.box);
    rt_local_dims(rt, grad, bx.sdims);
    rt_local_dims(rt, param, bx.ddims);
    rt_global_offset(rt->p, param, rt->rank, poff);
    for (int i = 0; i < pd->rank; i++) bx.soff[i] = gd->shard[i] < 0 ? poff[i] : 0, bx.doff[i] = 0;
    kcu_bf16 *tmp = rt_cu_ws(rt, RT_WS_SLICE, (size_t)pd->local_elems * sizeof(kcu_bf16));
    CU_CHECK(kcu_copy_box(tmp, g, &bx, 2, rt_cu(rt)->cs));
    return tmp;
}

/* One thread's share of the host update: AdamW on [a, b), then (phase 2,
 * after every thread's update, since the bf16 weight overwrites the fp32
 * gradient's bytes) the weight narrowed to bf16 in place. */
typedef struct rt_cu_host_job {
    rt_ctx *rt;
    int i, phase;
    size_t a, b;
    double wd;
} rt_cu_host_job;

static void *rt_cu_host_run(void *arg) {
    const rt_cu_host_job *j = arg;
    rt_ctx *rt = j->rt;
    rt_cuda *cu = rt_cu(rt);
    float *master = cu->master[j->i] + j->a, *f = (float *)(void *)cu->host_stage + j->a;
    if (j->phase == 1) {
        kern_adamw(master, rt->opt_m[j->i] + j->a, rt->opt_v[j->i] + j->a, f, (int64_t)(j->b - j->a), rt->lr,
                   rt->opt.optim.beta1, rt->opt.optim.beta2, rt->opt.optim.eps, j->wd, rt->step + 1, rt->clip_scale);
    } else {
        kcu_bf16 *h = (kcu_bf16 *)(void *)cu->host_stage + j->a;
        for (size_t k = 0; k < j->b - j->a; k++) h[k] = kcu_host_to_bf16(master[k]);
    }
    return NULL;
}

/* Runs a phase of the host update over n elements on rt->host_threads
 * threads (large parameters only; elementwise, so any split gives the
 * same bits). */
static void rt_cu_host_phase(rt_ctx *rt, int i, int phase, size_t n, double wd) {
    int nt = n < ((size_t)1 << 16) ? 1 : rt->host_threads;
    if (nt < 1) nt = 1;
    if (nt > RT_MAX_HOST_THREADS) nt = RT_MAX_HOST_THREADS;
    rt_cu_host_job jobs[RT_MAX_HOST_THREADS];
    pthread_t tid[RT_MAX_HOST_THREADS];
    for (int t = 0; t < nt; t++)
        jobs[t] = (rt_cu_host_job){rt, i, phase, n * (size_t)t / (size_t)nt, n * (size_t)(t + 1) / (size_t)nt, wd};
    for (int t = 1; t < nt; t++)
        RT_CHECK(pthread_create(&tid[t], NULL, rt_cu_host_run, &jobs[t]) == 0, "cannot start a thread");
    rt_cu_host_run(&jobs[0]);
    for (int t = 1; t < nt; t++) pthread_join(tid[t], NULL);
}

/* The host update of pair i through the staging area: the gradient (bf16,
 * on the device, or already in host memory when the pass offloaded it)
 * lands at its start and is widened to fp32 in place from the end (float k
 * covers bf16 entries 2k and 2k+1, both read by then); after the update
 * the weight is narrowed to bf16 there and copied up.  Synchronous: the
 * next pair reuses the area.  The update and the narrowing of a large
 * parameter run on rt->host_threads threads (BASP_HOST_THREADS). */
static void rt_cu_adamw_host(rt_ctx *rt, int i, int param, const kcu_bf16 *g, bool on_host, double wd) {
    rt_cuda *cu = rt_cu(rt);
    size_t n = (size_t)rt->p->values[param].local_elems;
    float *f = (float *)(void *)cu->host_stage;
    kcu_bf16 *h = (kcu_bf16 *)(void *)cu->host_stage;
    rt_mem_reach_host(rt, cu->host_stage_off + (n * 4 + 255) / 256 * 256); /* the plan's aligned area */
    CU_CHECK(cudaMemcpyAsync(h, g, n * sizeof *h, on_host ? cudaMemcpyHostToHost : cudaMemcpyDeviceToHost, cu->cs));
    CU_CHECK(cudaStreamSynchronize(cu->cs));
    for (size_t k = n; k-- > 0;) f[k] = kcu_host_from_bf16(h[k]); /* in place: one thread */
    rt_cu_host_phase(rt, i, 1, n, wd);
    rt_cu_host_phase(rt, i, 2, n, wd);
    CU_CHECK(cudaMemcpyAsync(rt_cu_use(rt, param), h, n * sizeof *h, cudaMemcpyHostToDevice, cu->cs));
    CU_CHECK(cudaStreamSynchronize(cu->cs));
}

void rt_adamw(rt_ctx *rt, int param, int grad) {
    double t0 = rt_now();
    rt_cuda *cu = rt_cu(rt);
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
    const kcu_bf16 *g = rt_cu_grad_for_shard(rt, param, grad);
    double wd = rt_weight_decay(rt, pd);
    if (rt->p->opt_on_host) {
        rt_cu_adamw_host(rt, i, param, g, rt->p->values[grad].on_host != 0, wd);
        rt_kern_count(rt, RT_K_ADAMW, t0);
        return;
    }
    CU_CHECK(kcu_adamw(rt_cu_use(rt, param), cu->master[i], rt->opt_m[i], rt->opt_v[i], g, pd->local_elems, rt->lr,
                       rt->opt.optim.beta1, rt->opt.optim.beta2, rt->opt.optim.eps, wd, rt->step + 1, rt->clip_scale, cu->cs));
    if (cu->sync_timing) CU_CHECK(cudaStreamSynchronize(cu->cs));
    rt_kern_count(rt, RT_K_ADAMW, t0);
}
