/* rt_buf_cuda.c — the CUDA backend's device, streams and communicators, its
 * arena and host access to it.
 *
 * Device memory: one cudaMalloc'ed arena carved from the same size table as
 * the CPU's, with device element sizes (bf16 floating tensors, fp32 scalars,
 * int32 integers) plus, per optimizer pair, the fp32 master weights and the
 * two fp32 AdamW moments.  Workspaces (collective buffers, fp32 gradient
 * sums, logits chunks) are separate grow-only allocations that reach their
 * size during the first step.
 *
 * NCCL is bootstrapped over MPI: rank 0 creates the unique id, MPI_Bcast
 * sends it, ncclCommInitRank builds the world communicator, and each group
 * gets one communicator per set with ncclCommSplit (color = set, key =
 * position), matching the MPI communicators of rt_main.c. */
#include <stdlib.h>
#include <string.h>

#include "rt_cuda.h"

enum { RT_CU_ALIGN = 256 };

static size_t rt_cu_align(size_t n) { return (n + RT_CU_ALIGN - 1) / RT_CU_ALIGN * RT_CU_ALIGN; }

int rt_cu_esize(const rt_value_desc *d) {
    if (d->dtype == RT_I32) return 4;
    return d->rank == 0 ? 4 : 2;
}

void rt_backend_preinit(void) {}

/* One device per rank on a node: the local rank (MPI_COMM_TYPE_SHARED)
 * picks it, modulo the devices visible. */
static void rt_cu_pick_device(rt_ctx *rt, rt_cuda *cu) {
    MPI_Comm local;
    RT_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rt->rank, MPI_INFO_NULL, &local));
    RT_MPI(MPI_Comm_rank(local, &cu->local_rank));
    RT_MPI(MPI_Comm_free(&local));
    cudaError_t e = cudaGetDeviceCount(&cu->ndevices);
    RT_CHECK(e == cudaSuccess && cu->ndevices > 0,
             "no CUDA device is visible (%s); this program was built for the CUDA backend (baspc --target=cuda)",
             e == cudaSuccess ? "0 devices" : cudaGetErrorString(e));
    cu->device = cu->local_rank % cu->ndevices;
    CU_CHECK(cudaSetDevice(cu->device));
}

static void rt_cu_init_nccl(rt_ctx *rt, rt_cuda *cu) {
    ncclUniqueId id;
    if (rt->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    RT_MPI(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    NCCL_CHECK(ncclCommInitRank(&cu->world, rt->world, id, rt->rank));
    cu->comm = RT_MALLOC(sizeof(ncclComm_t) * (size_t)rt->p->ngroups);
    for (int g = 0; g < rt->p->ngroups; g++) /* collective over the world, same order everywhere */
        NCCL_CHECK(ncclCommSplit(cu->world, rt->gset[g], rt->gpos[g], &cu->comm[g], NULL));
}

void rt_backend_init(rt_ctx *rt) {
    /* NCCL collectives are asynchronous on the comm stream: an MPI barrier
     * before them would not measure a device-side wait. */
    if (rt->opt.split_wait) {
        if (rt->rank == 0) fprintf(stderr, "warning: --split-wait is not supported by the CUDA backend; ignored\n");
        rt->opt.split_wait = false;
    }
    rt_cuda *cu = RT_MALLOC(sizeof *cu);
    memset(cu, 0, sizeof *cu);
    rt->dev = cu;
    rt_cu_pick_device(rt, cu);
    CU_CHECK(cudaStreamCreateWithFlags(&cu->cs, cudaStreamNonBlocking));
    CU_CHECK(cudaStreamCreateWithFlags(&cu->ms, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&cu->blas));
    CUBLAS_CHECK(cublasSetStream(cu->blas, cu->cs));
    CU_CHECK(cudaEventCreateWithFlags(&cu->issued, cudaEventDisableTiming));
    CU_CHECK(cudaEventCreateWithFlags(&cu->comm_done, cudaEventDisableTiming));
    rt_cu_init_nccl(rt, cu);
    int nv = rt->p->nvalues;
    cu->ready = RT_MALLOC(sizeof(cudaEvent_t) * (size_t)(nv + 1));
    cu->pending = RT_MALLOC(sizeof(bool) * (size_t)(nv + 1));
    for (int v = 0; v < nv; v++) {
        CU_CHECK(cudaEventCreateWithFlags(&cu->ready[v], cudaEventDisableTiming));
        cu->pending[v] = false;
    }
    CU_CHECK(cudaMalloc((void **)&cu->d_err, sizeof(int)));
    CU_CHECK(cudaMemset(cu->d_err, 0, sizeof(int)));
    CU_CHECK(cudaMalloc((void **)&cu->d_norm, sizeof(double) * (size_t)(rt->p->nopt + 1)));
    /* Per-op times need the device to finish each op; only --profile pays. */
    cu->sync_timing = rt->opt.profile != NULL;
}

void rt_backend_fini(rt_ctx *rt) {
    rt_cuda *cu = rt_cu(rt);
    if (!cu) return;
    CU_CHECK(cudaDeviceSynchronize());
    for (int g = 0; g < rt->p->ngroups; g++) NCCL_CHECK(ncclCommDestroy(cu->comm[g]));
    NCCL_CHECK(ncclCommDestroy(cu->world));
    for (int v = 0; v < rt->p->nvalues; v++) CU_CHECK(cudaEventDestroy(cu->ready[v]));
    for (int i = 0; i < cu->cap_timers; i++) {
        CU_CHECK(cudaEventDestroy(cu->timers[i].start));
        CU_CHECK(cudaEventDestroy(cu->timers[i].stop));
    }
    for (int i = 0; i < RT_WS_N; i++) CU_CHECK(cudaFree(cu->ws[i]));
    CU_CHECK(cudaFree(cu->d_err));
    CU_CHECK(cudaFree(cu->d_norm));
    CU_CHECK(cudaFree(rt->arena));
    CU_CHECK(cudaEventDestroy(cu->issued));
    CU_CHECK(cudaEventDestroy(cu->comm_done));
    CUBLAS_CHECK(cublasDestroy(cu->blas));
    CU_CHECK(cudaStreamDestroy(cu->cs));
    CU_CHECK(cudaStreamDestroy(cu->ms));
    free(cu->comm), free(cu->ready), free(cu->pending), free(cu->master), free(cu->opt_of), free(cu->slot_bytes);
    free(cu->timers), free(cu->send_val), free(cu->send_g), free(cu->send_peer);
    free(cu);
    rt->dev = NULL;
    free(rt->buf), free(rt->live), free(rt->opt_m), free(rt->opt_v);
    free(rt->scratch[0]), free(rt->scratch[1]);
}

/* Offsets of every value slot, then master, m, v per optimizer pair. */
static size_t rt_cu_plan(rt_ctx *rt, size_t *off) {
    const rt_program *p = rt->p;
    rt_cuda *cu = rt_cu(rt);
    size_t total = 0;
    memset(rt->cat_bytes, 0, sizeof rt->cat_bytes);
    for (int v = 0; v < p->nvalues; v++) {
        const rt_value_desc *d = &p->values[v];
        RT_CHECK(d->local_elems >= 1, "value %s has %lld local elements", d->name, (long long)d->local_elems);
        cu->slot_bytes[v] = rt_cu_align((size_t)d->local_elems * (size_t)rt_cu_esize(d));
        off[v] = total;
        total += cu->slot_bytes[v];
        rt->cat_bytes[rt_value_cat(d)] += cu->slot_bytes[v];
    }
    for (int i = 0; i < p->nopt; i++) {
        size_t n = rt_cu_align((size_t)p->values[p->opt[i].param].local_elems * 4);
        for (int k = 0; k < 3; k++) off[p->nvalues + 3 * i + k] = total + (size_t)k * n;
        total += 3 * n;
        rt->cat_bytes[RT_MEM_OPT] += 3 * n;
    }
    return total;
}

void rt_arena_build(rt_ctx *rt) {
    const rt_program *p = rt->p;
    rt_cuda *cu = rt_cu(rt);
    size_t *off = RT_MALLOC(sizeof(size_t) * (size_t)(p->nvalues + 3 * p->nopt + 1));
    cu->slot_bytes = RT_MALLOC(sizeof(size_t) * (size_t)(p->nvalues + 1));
    size_t total = rt_cu_plan(rt, off);
    rt->arena_bytes = total;
    cudaError_t e = cudaMalloc((void **)&rt->arena, total ? total : RT_CU_ALIGN);
    RT_CHECK(e == cudaSuccess, "cannot allocate the device arena: %.1f MiB on device %d: %s",
             (double)total / (1 << 20), cu->device, cudaGetErrorString(e));
    CU_CHECK(cudaMemset(rt->arena, 0, total));
    /* cudaMemset runs on the legacy stream, which the non-blocking compute
     * and communication streams do not wait for. */
    CU_CHECK(cudaDeviceSynchronize());
    rt->buf = RT_MALLOC(sizeof(void *) * (size_t)(p->nvalues + 1));
    rt->live = RT_MALLOC(sizeof(bool) * (size_t)(p->nvalues + 1));
    cu->opt_of = RT_MALLOC(sizeof(int) * (size_t)(p->nvalues + 1));
    for (int v = 0; v < p->nvalues; v++) {
        rt->buf[v] = rt->arena + off[v];
        rt->live[v] = true;
        cu->opt_of[v] = -1;
    }
    rt->opt_m = RT_MALLOC(sizeof(float *) * (size_t)(p->nopt + 1));
    rt->opt_v = RT_MALLOC(sizeof(float *) * (size_t)(p->nopt + 1));
    cu->master = RT_MALLOC(sizeof(float *) * (size_t)(p->nopt + 1));
    for (int i = 0; i < p->nopt; i++) {
        cu->master[i] = (float *)(void *)(rt->arena + off[p->nvalues + 3 * i]);
        rt->opt_m[i] = (float *)(void *)(rt->arena + off[p->nvalues + 3 * i + 1]);
        rt->opt_v[i] = (float *)(void *)(rt->arena + off[p->nvalues + 3 * i + 2]);
        cu->opt_of[p->opt[i].param] = i;
    }
    rt->live_bytes = total;
    free(off);
}

void *rt_cu_ws(rt_ctx *rt, rt_cu_ws_slot slot, size_t bytes) {
    rt_cuda *cu = rt_cu(rt);
    if (bytes > cu->ws_bytes[slot]) {
        /* No kernel or collective on either stream may still use the old one. */
        CU_CHECK(cudaDeviceSynchronize());
        CU_CHECK(cudaFree(cu->ws[slot]));
        cudaError_t e = cudaMalloc(&cu->ws[slot], bytes);
        RT_CHECK(e == cudaSuccess, "cannot allocate a %.1f MiB device workspace: %s", (double)bytes / (1 << 20),
                 cudaGetErrorString(e));
        cu->ws_bytes[slot] = bytes;
    }
    return cu->ws[slot];
}

/* Host scratch (no CUDA file uses it; kept for host-core code). */
void *rt_scratch(rt_ctx *rt, int which, size_t bytes) {
    if (bytes > rt->scratch_bytes[which]) {
        free(rt->scratch[which]);
        rt->scratch[which] = RT_MALLOC(bytes);
        rt->scratch_bytes[which] = bytes;
    }
    return rt->scratch[which];
}

/* ---- buffers: opaque device pointers ---------------------------------------------- */
void rt_cu_wait_comm(rt_ctx *rt) {
    rt_cuda *cu = rt_cu(rt);
    CU_CHECK(cudaEventRecord(cu->comm_done, cu->ms));
    CU_CHECK(cudaStreamWaitEvent(cu->cs, cu->comm_done, 0));
}

void *rt_cu_use(rt_ctx *rt, int v) {
    rt_cuda *cu = rt_cu(rt);
    if (cu->pending[v]) {
        CU_CHECK(cudaStreamWaitEvent(cu->cs, cu->ready[v], 0));
        cu->pending[v] = false;
    }
    return rt->buf[v];
}

/* The generated program only passes these pointers on to rt_ calls; they
 * point to device memory holding bf16 (or int32) elements. */
float *rt_f32(rt_ctx *rt, int value) {
    RT_CHECK(value >= 0 && value < rt->p->nvalues, "value index %d out of range", value);
    RT_CHECK(rt->p->values[value].dtype == RT_F32, "value %s is not f32", rt->p->values[value].name);
    return rt_cu_use(rt, value);
}

int32_t *rt_i32(rt_ctx *rt, int value) {
    RT_CHECK(value >= 0 && value < rt->p->nvalues, "value index %d out of range", value);
    RT_CHECK(rt->p->values[value].dtype == RT_I32, "value %s is not i32", rt->p->values[value].name);
    return rt_cu_use(rt, value);
}

void rt_free(rt_ctx *rt, int value) {
    RT_CHECK(value >= 0 && value < rt->p->nvalues, "value index %d out of range", value);
    if (!rt->live[value]) return;
    rt->live[value] = false;
    rt->live_bytes -= rt_cu(rt)->slot_bytes[value];
}

/* ---- host access: synchronous, fp32 <-> bf16 on the host ----------------------------
 * The copies go through the compute stream and wait for it: a plain
 * cudaMemcpy from pageable memory runs on the legacy stream and may return
 * before its DMA lands, and the non-blocking streams do not wait for the
 * legacy one, so the next kernel could read the old contents. */
static void rt_cu_copy(rt_ctx *rt, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    rt_cuda *cu = rt_cu(rt);
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, cu->cs));
    CU_CHECK(cudaStreamSynchronize(cu->cs));
}

void rt_host_read(rt_ctx *rt, int v, void *dst) {
    rt_cuda *cu = rt_cu(rt);
    const rt_value_desc *d = &rt->p->values[v];
    size_t n = (size_t)d->local_elems;
    CU_CHECK(cudaDeviceSynchronize());
    if (cu->opt_of[v] >= 0) { /* a trained parameter: its fp32 master */
        rt_cu_copy(rt, dst, cu->master[cu->opt_of[v]], n * 4, cudaMemcpyDeviceToHost);
    } else if (rt_cu_esize(d) == 4) {
        rt_cu_copy(rt, dst, rt->buf[v], n * 4, cudaMemcpyDeviceToHost);
    } else {
        kcu_bf16 *tmp = RT_MALLOC(n * 2);
        rt_cu_copy(rt, tmp, rt->buf[v], n * 2, cudaMemcpyDeviceToHost);
        float *f = dst;
        for (size_t i = 0; i < n; i++) f[i] = kcu_host_from_bf16(tmp[i]);
        free(tmp);
    }
}

void rt_host_write(rt_ctx *rt, int v, const void *src) {
    rt_cuda *cu = rt_cu(rt);
    const rt_value_desc *d = &rt->p->values[v];
    size_t n = (size_t)d->local_elems;
    CU_CHECK(cudaDeviceSynchronize());
    if (cu->opt_of[v] >= 0) rt_cu_copy(rt, cu->master[cu->opt_of[v]], src, n * 4, cudaMemcpyHostToDevice);
    if (rt_cu_esize(d) == 4) {
        rt_cu_copy(rt, rt->buf[v], src, n * 4, cudaMemcpyHostToDevice);
        return;
    }
    kcu_bf16 *tmp = RT_MALLOC(n * 2);
    const float *f = src;
    for (size_t i = 0; i < n; i++) tmp[i] = kcu_host_to_bf16(f[i]);
    rt_cu_copy(rt, rt->buf[v], tmp, n * 2, cudaMemcpyHostToDevice);
    free(tmp);
}

void rt_host_read_opt(rt_ctx *rt, int pair, float *m, float *v) {
    size_t n = (size_t)rt->p->values[rt->p->opt[pair].param].local_elems * 4;
    CU_CHECK(cudaDeviceSynchronize());
    rt_cu_copy(rt, m, rt->opt_m[pair], n, cudaMemcpyDeviceToHost);
    rt_cu_copy(rt, v, rt->opt_v[pair], n, cudaMemcpyDeviceToHost);
}

void rt_host_write_opt(rt_ctx *rt, int pair, const float *m, const float *v) {
    size_t n = (size_t)rt->p->values[rt->p->opt[pair].param].local_elems * 4;
    CU_CHECK(cudaDeviceSynchronize());
    rt_cu_copy(rt, rt->opt_m[pair], m, n, cudaMemcpyHostToDevice);
    rt_cu_copy(rt, rt->opt_v[pair], v, n, cudaMemcpyHostToDevice);
}
