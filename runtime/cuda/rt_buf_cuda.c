/* rt_buf_cuda.c — the CUDA backend's device, streams and communicators, its
 * arena and host access to it.
 *
 * Device memory: one cudaMalloc'ed arena.  With the compiler's memory plan
 * (baspc --target=cuda: rt_program.mem_arena_bytes > 0) it is exactly the
 * plan's size, every value at values[v].offset and, per optimizer pair, the
 * fp32 master weights and the two fp32 AdamW moments from mem_opt_offset;
 * buffers never live at the same time share bytes.  Without a plan (hand-
 * built tables) every value, then master, m and v per pair, get their own
 * slot.  Device element sizes: bf16 floating tensors, fp32 scalars, int32
 * integers, 256-byte aligned.  Workspaces (collective buffers, fp32
 * gradient sums, logits chunks) are separate grow-only allocations that
 * reach their size during the first step; the plan gives the CUDA target
 * no staging areas.
 *
 * Host memory (offload): the values the program offloads (on_host) live in
 * a pinned (page-locked) host arena of rt_program.mem_host_bytes, at their
 * offsets there; rt_offload and rt_fetch (rt_comm_cuda.c) copy over the
 * host link on the communication stream, as collectives: ordered after the
 * kernels that write the device side and before the first one that reads a
 * fetched copy, with the reuse fences below, which treat the host arena as
 * a space of its own.
 *
 * NCCL is bootstrapped over MPI: rank 0 creates the unique id, MPI_Bcast
 * sends it, ncclCommInitRank builds the world communicator, and each group
 * gets one communicator per set with ncclCommSplit (color = set, key =
 * position), matching the MPI communicators of rt_main.c; a dynamic
 * variant's block groups get theirs per placement (rt_comm_cuda.c). */
#include <stdlib.h>
#include <math.h>
#include <string.h>

#include "rt_cuda.h"

enum { CUDA_ALIGN = 256 };

size_t cuda_align(size_t n) { return (n + CUDA_ALIGN - 1) / CUDA_ALIGN * CUDA_ALIGN; }

void *cuda_try_malloc(size_t bytes) {
    void *p = NULL;
    if (cudaMalloc(&p, bytes > 0 ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError(); /* not sticky: the next CUDA call must not fail on it */
        return NULL;
    }
    return p;
}

bool cuda_close_bf16(rt_ctx *rt, const kcu_bf16 *a, const kcu_bf16 *ref, int64_t n, double *rel) {
    kcu_bf16 *h = RT_MALLOC(sizeof(kcu_bf16) * 2 * (size_t)n);
    CU_CHECK(cudaStreamSynchronize(cuda_state(rt)->cs));
    CU_CHECK(cudaMemcpy(h, a, sizeof(kcu_bf16) * (size_t)n, cudaMemcpyDeviceToHost));
    CU_CHECK(cudaMemcpy(h + n, ref, sizeof(kcu_bf16) * (size_t)n, cudaMemcpyDeviceToHost));
    double err = 0, mx = 1e-30;
    bool finite = true;
    for (int64_t i = 0; i < n; i++) {
        double x = kcu_host_from_bf16(h[i]), y = kcu_host_from_bf16(h[n + i]), e = fabs(x - y);
        finite = finite && isfinite(x) && isfinite(y);
        if (!(e <= err)) err = e;
        if (fabs(y) > mx) mx = fabs(y);
    }
    free(h);
    *rel = err / mx;
    return finite && err <= 5e-2 * mx;
}

int cuda_esize(const rt_value_desc *d) {
    if (d->dtype == RT_I32 || d->keep_f32) return 4;
    return d->rank == 0 ? 4 : 2;
}

void rt_backend_preinit(void) {}

/* One device per rank on a node: the local rank (MPI_COMM_TYPE_SHARED)
 * picks it, modulo the devices visible. */
static void cuda_pick_device(rt_ctx *rt, rt_cuda_state *cu) {
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

static void cuda_init_nccl(rt_ctx *rt, rt_cuda_state *cu) {
    ncclUniqueId id;
    if (rt->rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
    RT_MPI(MPI_Bcast(&id, (int)sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD));
    NCCL_CHECK(ncclCommInitRank(&cu->world, rt->world, id, rt->rank));
    cu->comm = RT_MALLOC(sizeof(ncclComm_t) * (size_t)rt->p->ngroups);
    for (int g = 0; g < rt->p->ngroups; g++) { /* collective over the world, same order everywhere */
        cu->comm[g] = NULL;                    /* a block group's: bound per micro-step (rt_comm_cuda.c) */
        if (rt->p->groups[g].block == 0)
            NCCL_CHECK(ncclCommSplit(cu->world, rt->gset[g], rt->gpos[g], &cu->comm[g], NULL));
    }
}

/* The slots the program places in one region (ir/ir_mem_work.c): one
 * allocation, each slot at its offset and of its planned size. */
static void cuda_ws_region(rt_ctx *rt, rt_cuda_state *cu) {
    const rt_program *p = rt->p;
    if (p->ws_region_bytes <= 0) return;
    RT_CHECK(p->ws_nslots == CM_WS_CUDA_NSLOTS && p->ws_slot_off && p->ws_slot_bytes,
             "the program's device workspace table has %d slots where this runtime has %d: rebuild the "
             "program with the baspc of this runtime",
             p->ws_nslots, (int)CM_WS_CUDA_NSLOTS);
    cudaError_t e = cudaMalloc((void **)&cu->ws_region, (size_t)p->ws_region_bytes);
    RT_CHECK(e == cudaSuccess, "cannot allocate the %.1f MiB device workspace region: %s",
             (double)p->ws_region_bytes / (1 << 20), cudaGetErrorString(e));
    for (int k = 0; k < CM_WS_CUDA_NSLOTS; k++) {
        int64_t off = p->ws_slot_off[k], n = p->ws_slot_bytes[k];
        if (off < 0) continue;
        RT_CHECK(n >= 0 && off <= p->ws_region_bytes - n,
                 "device workspace %s: [%lld, +%lld) outside the %lld-byte region", cm_ws_cuda_names[k], (long long)off,
                 (long long)n, (long long)p->ws_region_bytes);
        cu->ws[k] = cu->ws_region + off;
        cu->ws_bytes[k] = (size_t)n;
        cu->ws_in_region[k] = true;
    }
}

void rt_backend_init(rt_ctx *rt) {
    /* NCCL collectives are asynchronous on the comm stream: an MPI barrier
     * before them would not measure a device-side wait. */
    if (rt->opt.split_wait) {
        if (rt->rank == 0) fprintf(stderr, "warning: --split-wait is not supported by the CUDA backend; ignored\n");
        rt->opt.split_wait = false;
    }
    rt_cuda_state *cu = RT_MALLOC(sizeof *cu);
    memset(cu, 0, sizeof *cu);
    rt->be = cu;
    /* Started collectives need no progress of their own: every collective of
     * this backend runs on the communication stream (rt_comm_cuda.c). */
    if (rt->p->started) snprintf(rt->progress_note, sizeof rt->progress_note, "they run on the communication stream");
    cuda_pick_device(rt, cu);
    cuda_ws_region(rt, cu);
    CU_CHECK(cudaStreamCreateWithFlags(&cu->cs, cudaStreamNonBlocking));
    CU_CHECK(cudaStreamCreateWithFlags(&cu->ms, cudaStreamNonBlocking));
    CUBLAS_CHECK(cublasCreate(&cu->blas));
    CUBLAS_CHECK(cublasSetStream(cu->blas, cu->cs));
    CU_CHECK(cudaEventCreateWithFlags(&cu->issued, cudaEventDisableTiming));
    CU_CHECK(cudaEventCreateWithFlags(&cu->comm_done, cudaEventDisableTiming));
    cuda_init_nccl(rt, cu);
    int nv = rt->p->nvalues;
    cu->ready = RT_MALLOC(sizeof(cudaEvent_t) * (size_t)(nv + 1));
    cu->pending = RT_MALLOC(sizeof(bool) * (size_t)(nv + 1));
    cu->life = RT_MALLOC(sizeof(cuda_life) * (size_t)(nv + 1));
    memset(cu->life, 0, sizeof(cuda_life) * (size_t)(nv + 1));
    for (int v = 0; v < nv; v++) {
        CU_CHECK(cudaEventCreateWithFlags(&cu->ready[v], cudaEventDisableTiming));
        cu->pending[v] = false;
    }
    CU_CHECK(cudaMalloc((void **)&cu->d_err, sizeof(int)));
    CU_CHECK(cudaMemset(cu->d_err, 0, sizeof(int)));
    CU_CHECK(cudaMalloc((void **)&cu->d_norm, sizeof(double) * (size_t)(rt->p->nopt + 1)));
    CU_CHECK(cudaHostAlloc((void **)&cu->h_norm, sizeof(double) * (size_t)(rt->p->nopt + 1), cudaHostAllocDefault));
    CU_CHECK(cudaHostAlloc((void **)&cu->h_step, sizeof *cu->h_step, cudaHostAllocDefault));
    CU_CHECK(cudaMalloc((void **)&cu->d_step, sizeof *cu->d_step));
    /* Per-op times need the device to finish each op; only --profile and --trace-run pay. */
    cu->sync_timing = rt->opt.profile != NULL || rt->opt.trace_run != NULL;
}

void rt_backend_fini(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    if (!cu) return;
    CU_CHECK(cudaDeviceSynchronize());
    cuda_graph_fini(rt); /* before the communicators and cuDNN handle its graphs' nodes use */
    /* For the tests (train_vs_cpu.py --min-reuse-waits): how often buffer
     * reuse made one stream wait for the other. */
    if (getenv("BASP_CU_REUSE_STATS"))
        fprintf(stderr, "cuda reuse: rank %d: %s, %lld compute-stream waits, %lld communication-stream waits\n",
                rt->rank, rt->planned ? "memory plan" : "one slot per value", (long long)cu->reuse_waits[0],
                (long long)cu->reuse_waits[1]);
    for (int g = 0; g < rt->p->ngroups; g++)
        if (rt->p->groups[g].block == 0) NCCL_CHECK(ncclCommDestroy(cu->comm[g]));
    cuda_dyn_fini(rt);
    NCCL_CHECK(ncclCommDestroy(cu->world));
    for (int v = 0; v < rt->p->nvalues; v++) CU_CHECK(cudaEventDestroy(cu->ready[v]));
    for (int i = 0; i < cu->cap_timers; i++) {
        CU_CHECK(cudaEventDestroy(cu->timers[i].start));
        CU_CHECK(cudaEventDestroy(cu->timers[i].stop));
    }
#ifdef BASP_HAVE_CUDNN
    cuda_dnn_fini(rt); /* before the compute stream its handle uses goes */
#endif
    cuda_ring_split_fini(rt);
    cuda_doc_split_fini(rt);
    for (int i = 0; i < CM_WS_CUDA_NSLOTS; i++)
        if (!cu->ws_in_region[i]) CU_CHECK(cudaFree(cu->ws[i]));
    CU_CHECK(cudaFree(cu->ws_region));
    for (int i = 0; i < cu->cap_sends; i++) CU_CHECK(cudaFree(cu->stage[i]));
    CU_CHECK(cudaFree(cu->d_err));
    CU_CHECK(cudaFree(cu->d_norm));
    CU_CHECK(cudaFreeHost(cu->h_norm));
    CU_CHECK(cudaFreeHost(cu->h_step));
    CU_CHECK(cudaFree(cu->d_step));
    CU_CHECK(cudaFree(rt->arena));
    if (rt->host_arena) CU_CHECK(cudaFreeHost(rt->host_arena));
    CU_CHECK(cudaEventDestroy(cu->issued));
    CU_CHECK(cudaEventDestroy(cu->comm_done));
    for (int i = 0; i < 2; i++)
        if (cu->ring_ev[i]) CU_CHECK(cudaEventDestroy(cu->ring_ev[i]));
    for (int i = 0; i < CM_WS_CUDA_NSLOTS; i++)
        if (cu->ws_ms_ev[i]) CU_CHECK(cudaEventDestroy(cu->ws_ms_ev[i]));
    CUBLAS_CHECK(cublasDestroy(cu->blas));
    CU_CHECK(cudaStreamDestroy(cu->cs));
    CU_CHECK(cudaStreamDestroy(cu->ms));
    free(cu->comm), free(cu->ready), free(cu->pending), free(cu->master), free(cu->opt_of), free(cu->slot_bytes);
    free(cu->timers), free(cu->send_val), free(cu->send_g), free(cu->send_peer);
    free(cu->send_ptr), free(cu->stage), free(cu->stage_bytes);
    free(cu->life), free(cu->over_at), free(cu->over);
    free(cu);
    rt->be = NULL;
    free(rt->buf), free(rt->opt_m), free(rt->opt_v);
    rt_mem_fini(rt);
}

/* Bytes of value v's slot and of one fp32 tensor of pair i's state. */
static size_t cuda_slot(const rt_value_desc *d) { return cuda_align((size_t)d->local_elems * (size_t)cuda_esize(d)); }
static size_t cuda_state_bytes(const rt_program *p, int i) {
    return cuda_align((size_t)p->values[p->opt[i].param].local_elems * 4);
}

/* Without a plan: every value, then master, m, v per optimizer pair, each
 * in its own slot; the values in host memory in slots of the host arena
 * (*host its size). */
static size_t cuda_layout_slots(const rt_program *p, const size_t *bytes, size_t *off, size_t *opt_off, size_t *host) {
    size_t total = 0;
    *host = 0;
    for (int v = 0; v < p->nvalues; v++) {
        size_t *top = p->values[v].on_host ? host : &total;
        off[v] = *top, *top += bytes[v];
    }
    size_t *otop = p->opt_on_host ? host : &total, most = 0;
    for (int i = 0; i < p->nopt; i++) {
        opt_off[i] = *otop, *otop += 3 * cuda_state_bytes(p, i);
        most = cuda_state_bytes(p, i) > most ? cuda_state_bytes(p, i) : most;
    }
    if (p->opt_on_host) *host += most; /* the host update's staging, last (rt_opt_cuda.c) */
    return total;
}

/* With the compiler's plan: the values at their offsets, master, m, v per
 * pair one after the other from mem_opt_offset.  A program planned for the
 * CPU (4-byte elements, 64-byte alignment, m and v only, staging areas)
 * does not fit these sizes: a slot off the alignment or past the arena, an
 * optimizer region sharing bytes with a value, or staging areas, stop the
 * run here; slots that overlap only while both are live are caught by
 * rt_mem_touch. */
static size_t cuda_layout_plan(const rt_program *p, const size_t *bytes, size_t *off, size_t *opt_off) {
    size_t total = (size_t)p->mem_arena_bytes, o = (size_t)p->mem_opt_offset, o0 = o;
    size_t ospace = p->opt_on_host ? (size_t)p->mem_host_bytes : total;
    const char *why = "this program was not planned for the CUDA backend (build it with baspc --target=cuda)";
    for (int v = 0; v < p->nvalues; v++) {
        size_t space = p->values[v].on_host ? (size_t)p->mem_host_bytes : total;
        off[v] = (size_t)p->values[v].offset;
        RT_CHECK(p->values[v].offset >= 0 && off[v] % CUDA_ALIGN == 0 && off[v] <= space && bytes[v] <= space - off[v],
                 "the memory plan puts %s (%zu bytes) at offset %lld of a %zu-byte %s arena: %s", p->values[v].name,
                 bytes[v], (long long)p->values[v].offset, space, p->values[v].on_host ? "host" : "device", why);
    }
    RT_CHECK(p->mem_opt_offset >= 0 && o % CUDA_ALIGN == 0 && o <= ospace,
             "the memory plan's optimizer state starts at offset %lld of a %zu-byte arena: %s",
             (long long)p->mem_opt_offset, ospace, why);
    for (int i = 0; i < p->nopt; i++) {
        size_t n = 3 * cuda_state_bytes(p, i);
        RT_CHECK(n <= ospace - o,
                 "the memory plan's optimizer state (fp32 master, m, v per pair) does not fit its "
                 "%zu-byte arena: %s",
                 ospace, why);
        opt_off[i] = o, o += n;
    }
    if (p->opt_on_host)
        RT_CHECK(p->mem_host_stage_offset >= 0 && p->mem_host_stage_bytes >= 0 &&
                     (size_t)p->mem_host_stage_offset + (size_t)p->mem_host_stage_bytes <= ospace,
                 "the memory plan's host staging area does not fit its %zu-byte host arena: %s", ospace, why);
    for (int v = 0; v < p->nvalues; v++)
        RT_CHECK(p->values[v].on_host != p->opt_on_host || off[v] >= o || off[v] + bytes[v] <= o0,
                 "the memory plan puts %s [%zu, +%zu) inside the optimizer state [%zu, %zu): %s", p->values[v].name,
                 off[v], bytes[v], o0, o, why);
    RT_CHECK(p->mem_comm_bytes[0] == 0 && p->mem_comm_bytes[1] == 0,
             "the memory plan reserves %lld + %lld bytes of staging areas, which the CUDA backend does not use: %s",
             (long long)p->mem_comm_bytes[0], (long long)p->mem_comm_bytes[1], why);
    return total;
}

/* The values whose slots share a byte with each value's (itself included),
 * for the reuse fences below: sorted by offset, each slot meets the ones
 * that start before it ends.  Without a plan no two slots meet, and a value
 * comes back to life only in a later step, after the device synchronised. */
typedef struct cuda_span {
    size_t off, end;
    int v;
} cuda_span;

static int cuda_span_cmp(const void *a, const void *b) {
    const cuda_span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : x->v - y->v;
}

static void cuda_overlaps(rt_ctx *rt, const size_t *off, const size_t *bytes) {
    rt_cuda_state *cu = cuda_state(rt);
    int nv = rt->p->nvalues;
    cu->over_at = RT_MALLOC(sizeof(int) * (size_t)(nv + 1));
    memset(cu->over_at, 0, sizeof(int) * (size_t)(nv + 1));
    cu->over = NULL;
    if (!rt->planned) return;
    cuda_span *sp = RT_MALLOC(sizeof *sp * (size_t)(nv + 1));
    /* Host slots meet only host slots: their offsets are moved far above
     * every device byte. */
    const size_t host_base = (size_t)1 << 62;
    for (int v = 0; v < nv; v++) {
        size_t base = rt->p->values[v].on_host ? host_base : 0;
        sp[v] = (cuda_span){base + off[v], base + off[v] + bytes[v], v};
    }
    qsort(sp, (size_t)nv, sizeof *sp, cuda_span_cmp);
    int *cnt = RT_MALLOC(sizeof(int) * (size_t)(nv + 1)), *at = RT_MALLOC(sizeof(int) * (size_t)(nv + 1));
    for (int pass = 0; pass < 2; pass++) {
        for (int v = 0; v < nv; v++) cnt[v] = 0;
        for (int a = 0; a < nv; a++)
            for (int b = a; b < nv && sp[b].off < sp[a].end; b++) {
                int x = sp[a].v, y = sp[b].v;
                if (pass) cu->over[at[x] + cnt[x]] = y;
                cnt[x]++;
                if (x == y) continue;
                if (pass) cu->over[at[y] + cnt[y]] = x;
                cnt[y]++;
            }
        if (pass) break;
        size_t n = 0;
        for (int v = 0; v < nv; v++) {
            RT_CHECK(n + (size_t)cnt[v] < (size_t)1 << 31, "too many overlapping buffers in the memory plan");
            at[v] = (int)n, n += (size_t)cnt[v];
        }
        for (int v = 0; v < nv; v++) cu->over_at[v] = at[v];
        cu->over_at[nv] = (int)n;
        cu->over = RT_MALLOC(sizeof(int) * (n + 1));
    }
    free(cnt), free(at), free(sp);
}

/* The layout first (the plan's, or one slot per value), then one device
 * allocation of exactly its size. */
void rt_arena_build(rt_ctx *rt) {
    const rt_program *p = rt->p;
    rt_cuda_state *cu = cuda_state(rt);
    size_t *off = RT_MALLOC(sizeof(size_t) * (size_t)(p->nvalues + 1));
    size_t *opt_off = RT_MALLOC(sizeof(size_t) * (size_t)(p->nopt + 1));
    cu->slot_bytes = RT_MALLOC(sizeof(size_t) * (size_t)(p->nvalues + 1));
    memset(rt->cat_bytes, 0, sizeof rt->cat_bytes);
    for (int v = 0; v < p->nvalues; v++) {
        const rt_value_desc *d = &p->values[v];
        RT_CHECK(d->local_elems >= 1, "value %s has %lld local elements", d->name, (long long)d->local_elems);
        cu->slot_bytes[v] = cuda_slot(d);
        if (!d->on_host) rt->cat_bytes[rt_value_cat(d)] += cu->slot_bytes[v];
    }
    /* The report's categories count one slot per buffer: with a plan, what
     * the plan saved against that. */
    for (int i = 0; i < p->nopt && !p->opt_on_host; i++) rt->cat_bytes[RT_MEM_OPT] += 3 * cuda_state_bytes(p, i);
    bool planned = p->mem_arena_bytes > 0;
    size_t host = (size_t)p->mem_host_bytes;
    size_t total = planned ? cuda_layout_plan(p, cu->slot_bytes, off, opt_off)
                           : cuda_layout_slots(p, cu->slot_bytes, off, opt_off, &host);
    rt->arena_bytes = total;
    rt->host_bytes = host;
    if (host) {
        cudaError_t he = cudaHostAlloc((void **)&rt->host_arena, host, cudaHostAllocDefault);
        RT_CHECK(he == cudaSuccess, "cannot allocate the pinned host arena for offloaded values: %.1f MiB: %s",
                 (double)host / (1 << 20), cudaGetErrorString(he));
        memset(rt->host_arena, 0, host);
    }
    cudaError_t e = cudaMalloc((void **)&rt->arena, total ? total : CUDA_ALIGN);
    RT_CHECK(e == cudaSuccess, "cannot allocate the device arena: %.1f MiB on device %d: %s", (double)total / (1 << 20),
             cu->device, cudaGetErrorString(e));
    CU_CHECK(cudaMemset(rt->arena, 0, total));
    /* cudaMemset runs on the legacy stream, which the non-blocking compute
     * and communication streams do not wait for. */
    CU_CHECK(cudaDeviceSynchronize());
    rt->buf = RT_MALLOC(sizeof(void *) * (size_t)(p->nvalues + 1));
    cu->opt_of = RT_MALLOC(sizeof(int) * (size_t)(p->nvalues + 1));
    for (int v = 0; v < p->nvalues; v++) {
        rt->buf[v] = (p->values[v].on_host ? rt->host_arena : rt->arena) + off[v];
        cu->opt_of[v] = -1;
    }
    rt->opt_m = RT_MALLOC(sizeof(float *) * (size_t)(p->nopt + 1));
    rt->opt_v = RT_MALLOC(sizeof(float *) * (size_t)(p->nopt + 1));
    cu->master = RT_MALLOC(sizeof(float *) * (size_t)(p->nopt + 1));
    size_t opt_end = 0;
    char *opt_base = p->opt_on_host ? rt->host_arena : rt->arena;
    for (int i = 0; i < p->nopt; i++) {
        size_t n = cuda_state_bytes(p, i);
        cu->master[i] = (float *)(void *)(opt_base + opt_off[i]);
        rt->opt_m[i] = (float *)(void *)(opt_base + opt_off[i] + n);
        rt->opt_v[i] = (float *)(void *)(opt_base + opt_off[i] + 2 * n);
        cu->opt_of[p->opt[i].param] = i;
        opt_end = opt_off[i] + 3 * n;
    }
    /* The host update's staging: the plan's area, or after the state. */
    cu->host_stage_off = planned ? (size_t)p->mem_host_stage_offset : opt_end;
    cu->host_stage = p->opt_on_host ? rt->host_arena + cu->host_stage_off : NULL;
    rt->live_bytes = 0;
    rt_mem_init(rt, off, cu->slot_bytes); /* rt->planned: the plan's offsets are used */
    if (p->opt_on_host) {
        rt_mem_reach_host(rt, opt_end);
        /* The staging area is reached by the first host update (rt_opt_cuda.c). */
    } else {
        rt_mem_reach(rt, opt_end);
    }
    cuda_overlaps(rt, off, cu->slot_bytes);
    free(off);
    free(opt_off);
}

const char *rt_backend_timing_note(const rt_ctx *rt) {
    const rt_cuda_state *cu = rt->be;
    return cu && !cu->sync_timing ? "the host's time in each kind's calls: kernels run asynchronously, so a "
                                    "kind's device time lands on whichever call waits next; --profile FILE "
                                    "times each kind on the device"
                                  : NULL;
}

size_t rt_backend_workspace_bytes(const rt_ctx *rt) {
    const rt_cuda_state *cu = rt->be;
    size_t n = 0;
    n += (size_t)(cu->ws_region ? rt->p->ws_region_bytes : 0);
    for (int i = 0; i < CM_WS_CUDA_NSLOTS; i++)
        if (!cu->ws_in_region[i]) n += cu->ws_bytes[i];
    for (int i = 0; i < cu->cap_sends; i++) n += cu->stage_bytes[i];
#ifdef BASP_HAVE_CUDNN
    n += cuda_dnn_bytes(rt); /* the attention forwards' softmax statistics */
#endif
    return n;
}

void *cuda_ws(rt_ctx *rt, cm_ws_cuda_slot slot, size_t bytes) {
    rt_cuda_state *cu = cuda_state(rt);
    if (bytes > cu->ws_bytes[slot]) {
        char what[96];
        snprintf(what, sizeof what, "the size of device workspace %s", cm_ws_cuda_names[slot]);
        cuda_graph_invalidate(rt, what);
        /* No kernel or collective on either stream may still use the old one. */
        CU_CHECK(cudaDeviceSynchronize());
        if (cu->ws_in_region[slot]) { /* the plan's size was short: never overlap another slot */
            fprintf(stderr,
                    "rank %d: warning: device workspace %s: a kernel asks %.1f MiB where the memory plan gave it "
                    "%.1f MiB; it gets an allocation of its own, outside the planned peak\n",
                    rt->rank, cm_ws_cuda_names[slot], (double)bytes / (1 << 20),
                    (double)cu->ws_bytes[slot] / (1 << 20));
            cu->ws_in_region[slot] = false;
            cu->ws[slot] = NULL;
        }
        CU_CHECK(cudaFree(cu->ws[slot]));
        cudaError_t e = cudaMalloc(&cu->ws[slot], bytes);
        RT_CHECK(e == cudaSuccess, "cannot allocate a %.1f MiB device workspace: %s", (double)bytes / (1 << 20),
                 cudaGetErrorString(e));
        cu->ws_bytes[slot] = bytes;
    }
    return cu->ws[slot];
}

void *cuda_upload(rt_ctx *rt, cm_ws_cuda_slot slot, const void *host, size_t bytes) {
    void *dev = cuda_ws(rt, slot, bytes > 0 ? bytes : 1);
    cuda_ws_write_cs(rt, slot);
    if (bytes > 0) CU_CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, cuda_state(rt)->cs));
    return dev;
}

void cuda_ws_read_ms(rt_ctx *rt, cm_ws_cuda_slot slot) {
    rt_cuda_state *cu = cuda_state(rt);
    if (!cu->ws_ms_ev[slot]) CU_CHECK(cudaEventCreateWithFlags(&cu->ws_ms_ev[slot], cudaEventDisableTiming));
    CU_CHECK(cudaEventRecord(cu->ws_ms_ev[slot], cu->ms));
    cu->ws_ms_read[slot] = true;
}

/* Once cs has waited, everything it runs later follows the read too. */
void cuda_ws_write_cs(rt_ctx *rt, cm_ws_cuda_slot slot) {
    rt_cuda_state *cu = cuda_state(rt);
    if (!cu->ws_ms_read[slot]) return;
    CU_CHECK(cudaStreamWaitEvent(cu->cs, cu->ws_ms_ev[slot], 0));
    cu->ws_ms_read[slot] = false;
}

/* ---- buffers: opaque device pointers ----------------------------------------------
 *
 * Buffer reuse across the two streams.  Under the memory plan a value's
 * bytes may hold a later value once the value is freed (generated code
 * calls rt_free right after its last reader).  On one stream that is
 * safe: its work runs in order.  Across streams it is not: a value last
 * read by a collective on the communication stream `ms` (an all_to_all's
 * input) may still be in flight when a kernel on the compute stream `cs`
 * writes the next value placed on its bytes, and the other way round.  The
 * rule: before a stream first touches a value in its life, it must follow
 * every access the *other* stream made to any dead value whose slot shares
 * a byte with it.
 *
 * Bookkeeping, per value (cuda_life): `acc`, the streams that touched it
 * in this life (cuda_use: cs; cuda_coll_use: ms); ready[v], recorded on
 * ms after every collective that reads or writes it (cuda_coll_done), so
 * it marks the end of its last ms access.  rt_free turns `acc` into
 * `dirty` and notes the two fence counters.  When a value is first touched
 * on a stream in its life (cuda_scan), the stream looks at the values that
 * overlap it (over[], precomputed from the static plan, itself included):
 *   - cs, for each one dirty on ms: waits for its ready event -- only for
 *     the latest recorded of them, since ms runs in order -- unless cs has
 *     waited for all of ms since it was freed (cuda_wait_comm, counted in
 *     ms_fences);
 *   - ms, for each one dirty on cs: follows everything issued on cs so far
 *     (one event) unless it already did since the value was freed
 *     (cuda_follow_cs, counted in cs_fences).  Every collective starts by
 *     following cs, so in today's code this never costs a wait; the check
 *     keeps reuse safe if collectives one day wait only for their inputs.
 * A cleared flag stays cleared for every later value on those bytes: the
 * stream has passed that point for good.  A deferred send (rt_comm_cuda.c)
 * goes to NCCL only at the next receive or the end of the step, after its
 * value may have been freed; rt_free first copies such a value on ms
 * (cuda_stage_sends) so that the copy is its last ms access.  The step
 * ends with a device synchronisation, which satisfies every fence
 * (cuda_synced).  Cost: host bookkeeping over the overlap lists and at
 * most one event wait per value and stream; no device synchronisation. */
void cuda_follow_cs(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    CU_CHECK(cudaEventRecord(cu->issued, cu->cs));
    CU_CHECK(cudaStreamWaitEvent(cu->ms, cu->issued, 0));
    cu->cs_fences++;
}

void cuda_wait_comm(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    CU_CHECK(cudaEventRecord(cu->comm_done, cu->ms));
    CU_CHECK(cudaStreamWaitEvent(cu->cs, cu->comm_done, 0));
    cu->ms_fences++;
}

void cuda_coll_done(rt_ctx *rt, int v, bool output) {
    rt_cuda_state *cu = cuda_state(rt);
    CU_CHECK(cudaEventRecord(cu->ready[v], cu->ms));
    cu->life[v].ready_seq = ++cu->ms_recs;
    if (output) cu->pending[v] = true;
}

void cuda_synced(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    memset(cu->ws_ms_read, 0, sizeof cu->ws_ms_read);
    for (int v = 0; v < rt->p->nvalues; v++) {
        cu->pending[v] = false;
        cu->life[v].acc = cu->life[v].dirty = 0;
    }
}

/* Stream s (CUDA_CS or CUDA_MS) touches v for the first time in its life. */
static void cuda_scan(rt_ctx *rt, int v, int s) {
    rt_cuda_state *cu = cuda_state(rt);
    cuda_life *L = &cu->life[v];
    if (L->scanned & s) return;
    L->scanned |= (uint8_t)s;
    int other = s == CUDA_CS ? CUDA_MS : CUDA_CS, wait = -1;
    for (int k = cu->over_at[v]; k < cu->over_at[v + 1]; k++) {
        cuda_life *W = &cu->life[cu->over[k]];
        if (!(W->dirty & other)) continue;
        W->dirty &= (uint8_t)~other;
        if (s == CUDA_CS ? W->mark_ms < cu->ms_fences : W->mark_cs < cu->cs_fences) continue;
        if (wait < 0 || W->ready_seq > cu->life[wait].ready_seq) wait = cu->over[k];
    }
    if (wait < 0) return;
    if (s == CUDA_CS)
        CU_CHECK(cudaStreamWaitEvent(cu->cs, cu->ready[wait], 0));
    else
        cuda_follow_cs(rt);
    cu->reuse_waits[s == CUDA_CS ? 0 : 1]++;
}

/* Value v is touched on stream s: live from now on (checking the plan),
 * fenced against the earlier users of its bytes. */
static void cuda_touch(rt_ctx *rt, int v, int s) {
    rt_cuda_state *cu = cuda_state(rt);
    RT_CHECK(v >= 0 && v < rt->p->nvalues, "value index %d out of range", v);
    if (!rt->live[v]) cu->life[v].acc = cu->life[v].scanned = 0;
    rt_mem_touch(rt, v);
    cuda_scan(rt, v, s);
    cu->life[v].acc |= (uint8_t)s;
}

void *cuda_use(rt_ctx *rt, int v) {
    rt_cuda_state *cu = cuda_state(rt);
    cuda_touch(rt, v, CUDA_CS);
    if (cu->pending[v]) {
        CU_CHECK(cudaStreamWaitEvent(cu->cs, cu->ready[v], 0));
        cu->pending[v] = false;
        cu->life[v].acc &= (uint8_t)~CUDA_MS; /* cs now follows every ms access of v so far */
    }
    return rt->buf[v];
}

void *cuda_coll_use(rt_ctx *rt, int v) {
    cuda_touch(rt, v, CUDA_MS);
    return rt->buf[v];
}

/* rt_f32/rt_i32 (core/rt_mem.c): the generated program only passes these
 * pointers on to rt_ calls; they point to device memory holding bf16 (or
 * int32) elements. */
void *rt_backend_buffer(rt_ctx *rt, int v) { return cuda_use(rt, v); }

/* rt_free (core/rt_mem.c), for a live value: its bytes may hold a later
 * value once the streams that touched it are done (the fences above). */
void rt_backend_free(rt_ctx *rt, int v) {
    rt_cuda_state *cu = cuda_state(rt);
    cuda_life *L = &cu->life[v];
    if (L->nsend && rt->planned) cuda_stage_sends(rt, v);
    if (L->acc & CUDA_CS) L->mark_cs = cu->cs_fences;
    if (L->acc & CUDA_MS) L->mark_ms = cu->ms_fences;
    L->dirty |= L->acc;
    L->acc = 0;
}

/* ---- host access: synchronous, fp32 <-> bf16 on the host ----------------------------
 * The copies go through the compute stream and wait for it: a plain
 * cudaMemcpy from pageable memory runs on the legacy stream and may return
 * before its DMA lands, and the non-blocking streams do not wait for the
 * legacy one, so the next kernel could read the old contents. */
static void cuda_copy(rt_ctx *rt, void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    rt_cuda_state *cu = cuda_state(rt);
    CU_CHECK(cudaMemcpyAsync(dst, src, bytes, kind, cu->cs));
    CU_CHECK(cudaStreamSynchronize(cu->cs));
}

/* The direction of a copy to or from the optimizer state: host to host
 * when it is offloaded (pinned host arena). */
static enum cudaMemcpyKind cuda_opt_kind(const rt_ctx *rt, bool to_host) {
    if (rt->p->opt_on_host) return cudaMemcpyHostToHost;
    return to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
}

/* The same for value v's buffer: host to host for an offloaded value (a
 * gradient the host update reads, --save-grads and the non-finite guard). */
static enum cudaMemcpyKind cuda_val_kind(const rt_ctx *rt, int v, bool to_host) {
    if (rt->p->values[v].on_host) return cudaMemcpyHostToHost;
    return to_host ? cudaMemcpyDeviceToHost : cudaMemcpyHostToDevice;
}

void rt_host_read(rt_ctx *rt, int v, void *dst) {
    rt_cuda_state *cu = cuda_state(rt);
    const rt_value_desc *d = &rt->p->values[v];
    size_t n = (size_t)d->local_elems;
    CU_CHECK(cudaDeviceSynchronize());
    if (cu->opt_of[v] >= 0) { /* a trained parameter: its fp32 master */
        cuda_copy(rt, dst, cu->master[cu->opt_of[v]], n * 4, cuda_opt_kind(rt, true));
    } else if (cuda_esize(d) == 4) {
        cuda_copy(rt, dst, rt->buf[v], n * 4, cuda_val_kind(rt, v, true));
    } else {
        kcu_bf16 *tmp = RT_MALLOC(n * 2);
        cuda_copy(rt, tmp, rt->buf[v], n * 2, cuda_val_kind(rt, v, true));
        float *f = dst;
        for (size_t i = 0; i < n; i++) f[i] = kcu_host_from_bf16(tmp[i]);
        free(tmp);
    }
}

void rt_host_write(rt_ctx *rt, int v, const void *src) {
    rt_cuda_state *cu = cuda_state(rt);
    const rt_value_desc *d = &rt->p->values[v];
    size_t n = (size_t)d->local_elems;
    CU_CHECK(cudaDeviceSynchronize());
    if (cu->opt_of[v] >= 0) cuda_copy(rt, cu->master[cu->opt_of[v]], src, n * 4, cuda_opt_kind(rt, false));
    if (cuda_esize(d) == 4) {
        cuda_copy(rt, rt->buf[v], src, n * 4, cuda_val_kind(rt, v, false));
        return;
    }
    kcu_bf16 *tmp = RT_MALLOC(n * 2);
    const float *f = src;
    for (size_t i = 0; i < n; i++) tmp[i] = kcu_host_to_bf16(f[i]);
    cuda_copy(rt, rt->buf[v], tmp, n * 2, cuda_val_kind(rt, v, false));
    free(tmp);
}

void rt_host_read_opt(rt_ctx *rt, int pair, float *m, float *v) {
    size_t n = (size_t)rt->p->values[rt->p->opt[pair].param].local_elems * 4;
    CU_CHECK(cudaDeviceSynchronize());
    cuda_copy(rt, m, rt->opt_m[pair], n, cuda_opt_kind(rt, true));
    cuda_copy(rt, v, rt->opt_v[pair], n, cuda_opt_kind(rt, true));
}

void rt_host_write_opt(rt_ctx *rt, int pair, const float *m, const float *v) {
    size_t n = (size_t)rt->p->values[rt->p->opt[pair].param].local_elems * 4;
    CU_CHECK(cudaDeviceSynchronize());
    cuda_copy(rt, rt->opt_m[pair], m, n, cuda_opt_kind(rt, false));
    cuda_copy(rt, rt->opt_v[pair], v, n, cuda_opt_kind(rt, false));
}
