/* rt_buf_cpu.c — the CPU backend's buffers: one arena (parameters,
 * gradients, optimizer state, inputs and activations, carved from a size
 * table built from the value descriptors), a second one for the values the
 * program offloads (the plan's host memory: real copies, so that offload
 * is tested and accounted for like on a GPU), host access to them
 * (memcpy), the collectives' scratch, and the backend's state and hooks
 * (core/rt_backend.h). */
#include <stdlib.h>
#include <string.h>

#include "../host/rt_host.h"
#include "rt_cpu.h"

enum { CPU_ALIGN = 64 };

static size_t cpu_align_up(size_t n) { return (n + CPU_ALIGN - 1) / CPU_ALIGN * CPU_ALIGN; }

/* The BLAS's own threads would oversubscribe the cores that the other ranks
 * of this machine use: one thread per rank unless the user says otherwise.
 * Weak: the build links OpenBLAS or BLIS (CMake BASP_BLAS). */
extern void openblas_set_num_threads(int num_threads) __attribute__((weak));
extern void bli_thread_set_num_threads(long n) __attribute__((weak));

void rt_backend_preinit(void) {
    if (openblas_set_num_threads && !getenv("OPENBLAS_NUM_THREADS") && !getenv("OMP_NUM_THREADS"))
        openblas_set_num_threads(1);
    if (bli_thread_set_num_threads && !getenv("BLIS_NUM_THREADS") && !getenv("OMP_NUM_THREADS"))
        bli_thread_set_num_threads(1);
}

void rt_backend_init(rt_ctx *rt) {
    rt_cpu_state *cs = RT_MALLOC(sizeof *cs);
    memset(cs, 0, sizeof *cs);
    rt->be = cs;
    if (rt->p->started) cpu_async_init(rt);
    /* For measuring what keeping the statistics saves (bench/). */
    const char *e = getenv("BASP_ATTN_LSE");
    cs->lse_off = e && strcmp(e, "0") == 0;
}

/* The CPU backend communicates over core's MPI communicators (rt_dyn.c). */
void rt_backend_dyn_groups(rt_ctx *rt, const layout_dyn_group *gs, int ng) { (void)rt, (void)gs, (void)ng; }

void rt_backend_dyn_bind(rt_ctx *rt, int g, int first) { (void)rt, (void)g, (void)first; }

void rt_backend_fini(rt_ctx *rt) {
    rt_cpu_state *cs = cpu_state(rt);
    cpu_lse_fini(rt);
    free(rt->arena);
    free(rt->host_arena);
    free(rt->buf);
    rt_mem_fini(rt);
    free(rt->opt_m);
    free(rt->opt_v);
    if (!rt->planned) free(cs->scratch[0]), free(cs->scratch[1]);
    free(cs->sends);
    cpu_async_shutdown(rt);
    free(cs->async);
    free(cs);
    rt->be = NULL;
}

/* Without a plan (hand-built tables): every value, then every tensor of
 * optimizer state, in its own slot; the values in host memory in slots of
 * the host arena (*host its size). */
static size_t cpu_layout_slots(const rt_program *p, size_t *off, size_t *opt_off, size_t *host) {
    size_t total = 0;
    *host = 0;
    for (int v = 0; v < p->nvalues; v++) {
        size_t *top = p->values[v].on_host ? host : &total;
        off[v] = *top;
        *top += cpu_align_up((size_t)p->values[v].local_elems * 4);
    }
    size_t *otop = p->opt_on_host ? host : &total;
    for (int i = 0; i < p->nopt; i++) {
        opt_off[i] = *otop;
        *otop += 2 * cpu_align_up((size_t)p->values[p->opt[i].param].local_elems * 4);
    }
    return total;
}

/* With the compiler's plan: the values at their offsets, AdamW's m and v per
 * pair one after the other from mem_opt_offset, the staging areas at
 * mem_comm_offset.  A slot that does not fit the arena means the program
 * was planned for other buffer sizes (the CUDA target's bf16). */
static size_t cpu_layout_plan(rt_ctx *rt, size_t *off, size_t *opt_off) {
    const rt_program *p = rt->p;
    size_t total = (size_t)p->mem_arena_bytes, o = (size_t)p->mem_opt_offset;
    for (int v = 0; v < p->nvalues; v++) {
        size_t n = cpu_align_up((size_t)p->values[v].local_elems * 4);
        size_t space = p->values[v].on_host ? (size_t)p->mem_host_bytes : total;
        off[v] = (size_t)p->values[v].offset;
        RT_CHECK(p->values[v].offset >= 0 && off[v] % CPU_ALIGN == 0 && off[v] <= space && n <= space - off[v],
                 "the memory plan puts %s (%zu bytes) at offset %lld of a %zu-byte %sarena: this program was not "
                 "planned for the CPU backend (build it with baspc --target=cpu)",
                 p->values[v].name, n, (long long)p->values[v].offset, space, p->values[v].on_host ? "host " : "");
    }
    for (int i = 0; i < p->nopt; i++) {
        opt_off[i] = o;
        o += 2 * cpu_align_up((size_t)p->values[p->opt[i].param].local_elems * 4);
    }
    size_t comm = (size_t)p->mem_comm_offset, cb = (size_t)p->mem_comm_bytes[0] + (size_t)p->mem_comm_bytes[1];
    RT_CHECK(o <= (p->opt_on_host ? (size_t)p->mem_host_bytes : total) && comm <= total && cb <= total - comm,
             "the memory plan's optimizer state or staging areas do not fit its %zu-byte arena", total);
    rt_cpu_state *cs = cpu_state(rt);
    cs->scratch[0] = rt->arena + comm;
    cs->scratch[1] = rt->arena + comm + (size_t)p->mem_comm_bytes[0];
    cs->scratch_bytes[0] = (size_t)p->mem_comm_bytes[0];
    cs->scratch_bytes[1] = (size_t)p->mem_comm_bytes[1];
    return total;
}

static void cpu_count_cats(rt_ctx *rt) {
    const rt_program *p = rt->p;
    memset(rt->cat_bytes, 0, sizeof rt->cat_bytes);
    for (int v = 0; v < p->nvalues; v++)
        if (!p->values[v].on_host)
            rt->cat_bytes[rt_value_cat(&p->values[v])] += cpu_align_up((size_t)p->values[v].local_elems * 4);
    for (int i = 0; i < p->nopt && !p->opt_on_host; i++)
        rt->cat_bytes[RT_MEM_OPT] += 2 * cpu_align_up((size_t)p->values[p->opt[i].param].local_elems * 4);
}

/* The layout first (the plan's, or one slot per value), then one aligned
 * allocation of exactly its size. */
void rt_arena_build(rt_ctx *rt) {
    const rt_program *p = rt->p;
    size_t *off = RT_MALLOC(sizeof(size_t) * (size_t)(p->nvalues + 1));
    size_t *bytes = RT_MALLOC(sizeof(size_t) * (size_t)(p->nvalues + 1));
    size_t *opt_off = RT_MALLOC(sizeof(size_t) * (size_t)(p->nopt + 1));
    for (int v = 0; v < p->nvalues; v++) {
        const rt_value_desc *d = &p->values[v];
        RT_CHECK(d->local_elems >= 1, "value %s has %lld local elements", d->name, (long long)d->local_elems);
        bytes[v] = cpu_align_up((size_t)d->local_elems * 4);
    }
    bool planned = p->mem_arena_bytes > 0;
    size_t host = (size_t)p->mem_host_bytes;
    size_t total = planned ? (size_t)p->mem_arena_bytes : cpu_layout_slots(p, off, opt_off, &host);
    rt->arena = aligned_alloc(CPU_ALIGN, cpu_align_up(total ? total : 1));
    RT_CHECK(rt->arena, "cannot allocate the arena: %.1f MiB", (double)total / (1 << 20));
    rt->host_arena = host ? aligned_alloc(CPU_ALIGN, cpu_align_up(host)) : NULL;
    RT_CHECK(!host || rt->host_arena, "cannot allocate the host arena: %.1f MiB", (double)host / (1 << 20));
    if (planned) cpu_layout_plan(rt, off, opt_off);
    memset(rt->arena, 0, total);
    if (host) memset(rt->host_arena, 0, host);
    rt->arena_bytes = total;
    rt->host_bytes = host;
    cpu_count_cats(rt);
    rt->buf = RT_MALLOC(sizeof(void *) * (size_t)(p->nvalues + 1));
    for (int v = 0; v < p->nvalues; v++) rt->buf[v] = (p->values[v].on_host ? rt->host_arena : rt->arena) + off[v];
    rt->opt_m = RT_MALLOC(sizeof(float *) * (size_t)(p->nopt + 1));
    rt->opt_v = RT_MALLOC(sizeof(float *) * (size_t)(p->nopt + 1));
    size_t opt_end = 0;
    char *opt_base = p->opt_on_host ? rt->host_arena : rt->arena;
    for (int i = 0; i < p->nopt; i++) {
        size_t n = cpu_align_up((size_t)p->values[p->opt[i].param].local_elems * 4);
        rt->opt_m[i] = (float *)(opt_base + opt_off[i]);
        rt->opt_v[i] = (float *)(opt_base + opt_off[i] + n);
        opt_end = opt_off[i] + 2 * n;
    }
    rt->live_bytes = 0;
    rt_mem_init(rt, off, bytes);
    if (p->opt_on_host)
        rt_mem_reach_host(rt, opt_end);
    else
        rt_mem_reach(rt, opt_end);
    free(off);
    free(bytes);
    free(opt_off);
}

/* ---- buffers (rt_f32, rt_i32, rt_free: core/rt_mem.c) -------------------------- */
void *rt_backend_buffer(rt_ctx *rt, int v) {
    rt_mem_touch(rt, v);
    return rt->buf[v];
}

/* Host memory: nothing can still be reading a dead value's bytes. */
void rt_backend_free(rt_ctx *rt, int v) { (void)rt, (void)v; }

/* ---- host access (CPU: the buffers are host memory) ---------------------------- */
void rt_host_read(rt_ctx *rt, int v, void *dst) { memcpy(dst, rt->buf[v], (size_t)rt->p->values[v].local_elems * 4); }

void rt_host_write(rt_ctx *rt, int v, const void *src) {
    memcpy(rt->buf[v], src, (size_t)rt->p->values[v].local_elems * 4);
}

void rt_host_read_opt(rt_ctx *rt, int pair, float *m, float *v) {
    size_t n = (size_t)rt->p->values[rt->p->opt[pair].param].local_elems * 4;
    memcpy(m, rt->opt_m[pair], n);
    memcpy(v, rt->opt_v[pair], n);
}

void rt_host_write_opt(rt_ctx *rt, int pair, const float *m, const float *v) {
    size_t n = (size_t)rt->p->values[rt->p->opt[pair].param].local_elems * 4;
    memcpy(rt->opt_m[pair], m, n);
    memcpy(rt->opt_v[pair], v, n);
}

/* ---- offload: copies between the two arenas -----------------------------------
 * In line, on the calling thread: a second thread copying while the kernels
 * run would take a core from them.  Counted as collectives of kinds
 * offload and fetch (--profile, the time-by-kind table, --trace-run). */
static bool cpu_same_elems(const rt_value_desc *a, const rt_value_desc *b) { return a->dtype == b->dtype; }

static void cpu_copy_space(rt_ctx *rt, int src, int dst, bool to_host) {
    const rt_value_desc *s = rt_check_copy(rt, src, dst, to_host, cpu_same_elems);
    rt_mem_touch(rt, src);
    rt_mem_touch(rt, dst);
    double t0 = rt_now();
    memcpy(rt->buf[dst], rt->buf[src], (size_t)s->local_elems * 4);
    cpu_lse_moved(rt, rt->buf[src], rt->buf[dst]); /* an attention output's statistics follow it */
    rt_coll_count(rt, to_host ? RT_C_OFFLOAD : RT_C_FETCH, s->local_elems * 4, rt_now() - t0);
}

void rt_offload(rt_ctx *rt, int src, int dst) { cpu_copy_space(rt, src, dst, true); }

void rt_fetch(rt_ctx *rt, int src, int dst) { cpu_copy_space(rt, src, dst, false); }

cm_attn_impl rt_backend_attention_impl(rt_ctx *rt, bool ring) {
    return cm_attention_impl(false, ring, rt->docs != NULL, false);
}

const char *rt_backend_timing_note(const rt_ctx *rt) {
    (void)rt;
    return NULL; /* the kernels run on the calling thread: their wall time is theirs */
}

size_t rt_backend_workspace_bytes(const rt_ctx *rt) { return (size_t)kern_scratch_bytes() + cpu_state(rt)->lse_bytes; }

/* The collectives' staging: with a plan, the two areas it reserved in the
 * arena (a request beyond them is a disagreement between the compiler's
 * model of the collectives, ir/ir_mem.c, and this file's, and stops the
 * run); without one, grow-only heap buffers. */
void *cpu_scratch(rt_ctx *rt, int which, size_t bytes) {
    rt_cpu_state *cs = cpu_state(rt);
    RT_CHECK(!cs->scratch_held, "a collective needs the staging areas while a started all_to_all still holds them "
                                "(the program must wait for it first)");
    if (rt->planned) {
        RT_CHECK(bytes <= cs->scratch_bytes[which],
                 "a collective needs %zu bytes of staging area %d, the memory plan reserved %zu", bytes, which,
                 cs->scratch_bytes[which]);
        size_t base = (size_t)rt->p->mem_comm_offset + (which ? (size_t)rt->p->mem_comm_bytes[0] : 0);
        rt_mem_reach(rt, base + bytes);
        return cs->scratch[which];
    }
    if (bytes > cs->scratch_bytes[which]) {
        free(cs->scratch[which]);
        cs->scratch[which] = RT_MALLOC(bytes);
        cs->scratch_bytes[which] = bytes;
    }
    return cs->scratch[which];
}
