/* rt_opt_cuda.c — the CUDA backend's part of the optimizer step (core's
 * rt_adamw and rt_grad_norm, core/rt_optim.c, do the rest: the rules are
 * runtime/README.md's Optimizer section): each gradient's sum of squares
 * and AdamW on the device, bf16 gradients, fp32 master weights and
 * moments; with the optimizer offloaded
 * (rt_program.opt_on_host) the same update on the host, ZeRO-Offload's
 * way: the bf16 gradient comes down, the CPU's AdamW kernel updates the
 * fp32 master and moments in the pinned host arena, and the bf16 weight
 * goes back up (or stays on the host, beside them, when the parameters are
 * offloaded too). */
#include <stdlib.h>
#include <string.h>

#include "rt_cuda.h"

/* ---- host work on rt->host_threads threads (rt_parallel_for) -----------------------
 * At least CUDA_HOST_MIN elements per thread: starting one costs some
 * 10 us, the work of ~10^4 elements. */
enum { CUDA_HOST_MIN = 1 << 14 };

/* A host gradient's sum of squares in double: one partial per fixed chunk,
 * added in chunk order, so the sum does not depend on the thread count. */
enum { CUDA_SUMSQ_CHUNK = 1 << 18 };

typedef struct {
    const kcu_bf16 *h;
    int64_t n;
    double *part;
} cuda_sumsq_job;

static void cuda_sumsq_run(void *arg, int64_t c0, int64_t c1) {
    const cuda_sumsq_job *j = arg;
    for (int64_t c = c0; c < c1; c++) {
        int64_t a = c * CUDA_SUMSQ_CHUNK, b = a + CUDA_SUMSQ_CHUNK < j->n ? a + CUDA_SUMSQ_CHUNK : j->n;
        double acc = 0;
        for (int64_t k = a; k < b; k++) {
            double x = kcu_host_from_bf16(j->h[k]);
            acc += x * x;
        }
        j->part[c] = acc;
    }
}

double cuda_host_sumsq(const rt_ctx *rt, const kcu_bf16 *h, int64_t n) {
    int64_t nc = (n + CUDA_SUMSQ_CHUNK - 1) / CUDA_SUMSQ_CHUNK;
    cuda_sumsq_job j = {h, n, RT_MALLOC(sizeof(double) * (size_t)(nc + 1))};
    rt_parallel_for(rt, nc, 1, cuda_sumsq_run, &j);
    double acc = 0;
    for (int64_t c = 0; c < nc; c++) acc += j.part[c];
    free(j.part);
    return acc;
}

/* Every gradient's sum of squares on the device (double), one copy back
 * (to pinned memory, which a CUDA graph's copy may write); core combines
 * them into the global norm.  A graph being captured is cut here
 * (rt_graph_cuda.c): the norm is the one host decision inside a step. */
void rt_backend_grad_sumsq(rt_ctx *rt, double *s) {
    rt_cuda_state *cu = cuda_state(rt);
    int nopt = rt->p->nopt;
    size_t bytes = sizeof(double) * (size_t)(nopt + 1);
    cuda_wait_comm(rt); /* the gradients may come from reduce_scatter / all_reduce, or be on their way to the host */
    CU_CHECK(cudaMemsetAsync(cu->d_norm, 0, bytes, cu->cs));
    for (int i = 0; i < nopt; i++) {
        int g = rt->p->opt[i].grad;
        if (!rt->p->values[g].on_host)
            CU_CHECK(kcu_sumsq(cuda_use(rt, g), rt->p->values[g].local_elems, cu->d_norm + i, cu->cs));
    }
    CU_CHECK(cudaMemcpyAsync(cu->h_norm, cu->d_norm, bytes, cudaMemcpyDeviceToHost, cu->cs));
    if (cuda_graph_capturing(rt))
        cuda_graph_cut(rt);
    else
        CU_CHECK(cudaStreamSynchronize(cu->cs)); /* the gradients' copies to the host have landed too */
    memcpy(s, cu->h_norm, bytes);
    cu->step_stale = true;
    /* Gradients the optimizer's offload moved to the host: summed there. */
    for (int i = 0; i < nopt; i++) {
        int g = rt->p->opt[i].grad;
        if (rt->p->values[g].on_host) s[i] = cuda_host_sumsq(rt, cuda_use(rt, g), rt->p->values[g].local_elems);
    }
}

/* The gradient entries matching this rank's parameter shard: the grad
 * buffer itself when both are laid out alike, else (ZeRO-1: param sharded,
 * grad whole) the N-d slice at the shard's global offset, copied on the
 * device. */
static const kcu_bf16 *cuda_grad_for_shard(rt_ctx *rt, int param, int grad) {
    const rt_value_desc *pd = &rt->p->values[param], *gd = &rt->p->values[grad];
    const kcu_bf16 *g = cuda_use(rt, grad);
    if (rt_grad_like_param(rt, param, grad)) return g;
    RT_CHECK(!gd->on_host,
             "adamw(%s, %s): a gradient in host memory must be laid out like its parameter (the "
             "offload pass keeps ZeRO-1's whole gradients on the device)",
             pd->name, gd->name);
    kcu_box bx = {.nd = pd->rank};
    int64_t poff[RT_MAX_RANK];
    rt_local_dims(rt, param, bx.box);
    rt_local_dims(rt, grad, bx.sdims);
    rt_local_dims(rt, param, bx.ddims);
    rt_global_offset(rt->p, param, rt->rank, poff);
    for (int i = 0; i < pd->rank; i++) bx.soff[i] = gd->shard[i] < 0 ? poff[i] : 0, bx.doff[i] = 0;
    kcu_bf16 *tmp = cuda_ws(rt, CM_WS_CUDA_SLICE, (size_t)pd->local_elems * sizeof(kcu_bf16));
    CU_CHECK(kcu_copy_box(tmp, g, &bx, 2, cuda_state(rt)->cs));
    return tmp;
}

/* n bf16 values widened to fp32: from a separate buffer in any order; in
 * place (buf's first 2n bytes) as cuda_host_widen says.  Float k takes
 * bytes [4k, 4k + 4), where bf16 entries 2k and 2k + 1 were.  With [0, hi)
 * left, the upper part [ceil(hi/2), hi) reads bytes below 2 hi and writes
 * at or above them, past every entry still unread: it runs in parallel;
 * then the next part, until a small rest runs from the end on one thread
 * (each float written after both of its entries were read). */
typedef struct {
    float *f;
    const kcu_bf16 *h;
} cuda_widen_job;

static void cuda_widen_run(void *arg, int64_t a, int64_t b) {
    const cuda_widen_job *j = arg;
    for (int64_t k = b; k-- > a;) j->f[k] = kcu_host_from_bf16(j->h[k]);
}

void cuda_host_widen(const rt_ctx *rt, void *buf, int64_t n) {
    float *f = buf;
    const kcu_bf16 *h = buf;
    int64_t hi = n;
    for (; hi >= 2 * CUDA_HOST_MIN; hi = (hi + 1) / 2) {
        int64_t lo = (hi + 1) / 2;
        cuda_widen_job j = {f + lo, h + lo};
        rt_parallel_for(rt, hi - lo, CUDA_HOST_MIN, cuda_widen_run, &j);
    }
    cuda_widen_job j = {f, h};
    cuda_widen_run(&j, 0, hi);
}

/* AdamW on pair i's fp32 master and moments with the fp32 gradient in the
 * staging area, then the weight narrowed to bf16 there (phase 2, after
 * every thread's update: the bf16 weight overwrites the gradient's bytes).
 * Elementwise, so any split over threads gives the same bits. */
typedef struct {
    rt_ctx *rt;
    int i, phase;
    double wd;
} cuda_update_job;

static void cuda_update_run(void *arg, int64_t a, int64_t b) {
    const cuda_update_job *j = arg;
    rt_ctx *rt = j->rt;
    rt_cuda_state *cu = cuda_state(rt);
    float *master = cu->master[j->i];
    if (j->phase == 1) {
        kern_adamw(master + a, rt->opt_m[j->i] + a, rt->opt_v[j->i] + a, (float *)(void *)cu->host_stage + a, b - a,
                   rt->lr, rt->opt.optim.beta1, rt->opt.optim.beta2, rt->opt.optim.eps, j->wd, rt->step + 1,
                   rt->clip_scale);
    } else {
        kcu_bf16 *h = (kcu_bf16 *)(void *)cu->host_stage;
        for (int64_t k = a; k < b; k++) h[k] = kcu_host_to_bf16(master[k]);
    }
}

/* The host update of pair i through the staging area (its fp32 gradient,
 * then its bf16 weight): a gradient the pass offloaded is widened there
 * straight from its host buffer; one on the device comes down into the
 * area first and is widened in place.  Then AdamW and the narrowing, and
 * the weight goes up.  Synchronous: the next pair reuses the area. */
static void cuda_adamw_host(rt_ctx *rt, int i, int param, const kcu_bf16 *g, bool on_host, double wd) {
    rt_cuda_state *cu = cuda_state(rt);
    int64_t n = rt->p->values[param].local_elems;
    kcu_bf16 *h = (kcu_bf16 *)(void *)cu->host_stage;
    rt_mem_reach_host(rt, cu->host_stage_off + ((size_t)n * 4 + 255) / 256 * 256); /* the plan's aligned area */
    if (on_host) {
        CU_CHECK(cudaStreamSynchronize(cu->cs)); /* its offload copy has landed */
        cuda_widen_job w = {(float *)(void *)cu->host_stage, g};
        rt_parallel_for(rt, n, CUDA_HOST_MIN, cuda_widen_run, &w);
    } else {
        CU_CHECK(cudaMemcpyAsync(h, g, (size_t)n * sizeof *h, cudaMemcpyDeviceToHost, cu->cs));
        CU_CHECK(cudaStreamSynchronize(cu->cs));
        cuda_host_widen(rt, cu->host_stage, n);
    }
    cuda_update_job u = {rt, i, 1, wd};
    rt_parallel_for(rt, n, CUDA_HOST_MIN, cuda_update_run, &u);
    u.phase = 2;
    rt_parallel_for(rt, n, CUDA_HOST_MIN, cuda_update_run, &u);
    /* Offloaded parameters (offload.params) live in the host arena too. */
    enum cudaMemcpyKind up = rt->p->values[param].on_host ? cudaMemcpyHostToHost : cudaMemcpyHostToDevice;
    CU_CHECK(cudaMemcpyAsync(cuda_use(rt, param), h, (size_t)n * sizeof *h, up, cu->cs));
    CU_CHECK(cudaStreamSynchronize(cu->cs));
}

void cuda_opt_fill(rt_ctx *rt) {
    const rt_optim_desc *o = &rt->opt.optim;
    *cuda_state(rt)->h_step =
        kcu_adamw_scalars(rt->lr, o->beta1, o->beta2, o->weight_decay, rt->step + 1, rt->clip_scale);
}

/* Pair i's update: on the host with the optimizer offloaded, else on the
 * device (waited for under --profile, so that its time is its own).  The
 * step's first update on the device uploads the step's scalars: the host
 * writes them to pinned memory only after the norm's synchronisation, when
 * the last step's copy of them has run. */
void rt_backend_adamw(rt_ctx *rt, int i, int param, int grad, double wd) {
    rt_cuda_state *cu = cuda_state(rt);
    const rt_value_desc *pd = &rt->p->values[param];
    cuda_graph_resume(rt);
    const kcu_bf16 *g = cuda_grad_for_shard(rt, param, grad);
    if (rt->p->opt_on_host) {
        cuda_adamw_host(rt, i, param, g, rt->p->values[grad].on_host != 0, wd);
        return;
    }
    if (cu->step_stale) {
        cuda_opt_fill(rt);
        CU_CHECK(cudaMemcpyAsync(cu->d_step, cu->h_step, sizeof *cu->h_step, cudaMemcpyHostToDevice, cu->cs));
        cu->step_stale = false;
    }
    CU_CHECK(kcu_adamw(cuda_use(rt, param), cu->master[i], rt->opt_m[i], rt->opt_v[i], g, pd->local_elems,
                       rt->opt.optim.beta1, rt->opt.optim.beta2, rt->opt.optim.eps, cu->d_step, wd != 0.0, cu->cs));
    if (cu->sync_timing) CU_CHECK(cudaStreamSynchronize(cu->cs));
}
