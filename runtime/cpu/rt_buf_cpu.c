/* rt_buf_cpu.c — the CPU backend's buffers: one host arena (parameters,
 * gradients, optimizer state, inputs and activations, carved from a size
 * table built from the value descriptors), host access to it (memcpy), the
 * collectives' scratch, and the backend hooks of rt_internal.h. */
#include <stdlib.h>
#include <string.h>

#include "rt_internal.h"

enum { RT_ALIGN = 64 };

static size_t rt_align_up(size_t n) { return (n + RT_ALIGN - 1) / RT_ALIGN * RT_ALIGN; }

/* OpenBLAS's own threads would oversubscribe the cores that the other ranks
 * of this machine use: one thread per rank unless the user says otherwise. */
void openblas_set_num_threads(int num_threads);

void rt_backend_preinit(void) {
    if (!getenv("OPENBLAS_NUM_THREADS") && !getenv("OMP_NUM_THREADS")) openblas_set_num_threads(1);
}

void rt_backend_init(rt_ctx *rt) { (void)rt; }

void rt_backend_fini(rt_ctx *rt) {
    free(rt->arena);
    free(rt->buf);
    free(rt->live);
    free(rt->opt_m);
    free(rt->opt_v);
    free(rt->scratch[0]);
    free(rt->scratch[1]);
}

/* The size table first, then one aligned allocation: the offsets are known
 * before anything is placed, so the arena's size is printed exactly. */
void rt_arena_build(rt_ctx *rt) {
    const rt_program *p = rt->p;
    size_t *off = RT_MALLOC(sizeof(size_t) * (size_t)(p->nvalues + 2 * p->nopt + 1));
    size_t total = 0;
    memset(rt->cat_bytes, 0, sizeof rt->cat_bytes);
    for (int v = 0; v < p->nvalues; v++) {
        const rt_value_desc *d = &p->values[v];
        RT_CHECK(d->local_elems >= 1, "value %s has %lld local elements", d->name, (long long)d->local_elems);
        size_t n = rt_align_up((size_t)d->local_elems * 4);
        off[v] = total;
        total += n;
        rt->cat_bytes[rt_value_cat(d)] += n;
    }
    for (int i = 0; i < p->nopt; i++) {
        const rt_value_desc *d = &p->values[p->opt[i].param];
        size_t n = rt_align_up((size_t)d->local_elems * 4);
        off[p->nvalues + 2 * i] = total;
        off[p->nvalues + 2 * i + 1] = total + n;
        total += 2 * n;
        rt->cat_bytes[RT_MEM_OPT] += 2 * n;
    }
    rt->arena_bytes = total;
    rt->arena = aligned_alloc(RT_ALIGN, total ? total : RT_ALIGN);
    RT_CHECK(rt->arena, "cannot allocate the arena: %.1f MiB", (double)total / (1 << 20));
    memset(rt->arena, 0, total);
    rt->buf = RT_MALLOC(sizeof(void *) * (size_t)(p->nvalues + 1));
    rt->live = RT_MALLOC(sizeof(bool) * (size_t)(p->nvalues + 1));
    for (int v = 0; v < p->nvalues; v++) {
        rt->buf[v] = rt->arena + off[v];
        rt->live[v] = true;
    }
    rt->opt_m = RT_MALLOC(sizeof(float *) * (size_t)(p->nopt + 1));
    rt->opt_v = RT_MALLOC(sizeof(float *) * (size_t)(p->nopt + 1));
    for (int i = 0; i < p->nopt; i++) {
        rt->opt_m[i] = (float *)(rt->arena + off[p->nvalues + 2 * i]);
        rt->opt_v[i] = (float *)(rt->arena + off[p->nvalues + 2 * i + 1]);
    }
    rt->live_bytes = total;
    free(off);
}

/* ---- buffers --------------------------------------------------------------- */
float *rt_f32(rt_ctx *rt, int value) {
    RT_CHECK(value >= 0 && value < rt->p->nvalues, "value index %d out of range", value);
    RT_CHECK(rt->p->values[value].dtype == RT_F32, "value %s is not f32", rt->p->values[value].name);
    return rt->buf[value];
}

int32_t *rt_i32(rt_ctx *rt, int value) {
    RT_CHECK(value >= 0 && value < rt->p->nvalues, "value index %d out of range", value);
    RT_CHECK(rt->p->values[value].dtype == RT_I32, "value %s is not i32", rt->p->values[value].name);
    return rt->buf[value];
}

/* ---- host access (CPU: the buffers are host memory) ---------------------------- */
void rt_host_read(rt_ctx *rt, int v, void *dst) {
    memcpy(dst, rt->buf[v], (size_t)rt->p->values[v].local_elems * 4);
}

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

/* Bookkeeping only: every value keeps its own slot, so a freed value's bytes
 * are counted as released but never reused (the end-of-run report says how
 * much the schedule frees, i.e. what slot reuse could save). */
void rt_free(rt_ctx *rt, int value) {
    RT_CHECK(value >= 0 && value < rt->p->nvalues, "value index %d out of range", value);
    if (!rt->live[value]) return;
    rt->live[value] = false;
    rt->live_bytes -= rt_align_up((size_t)rt->p->values[value].local_elems * 4);
}

void *rt_scratch(rt_ctx *rt, int which, size_t bytes) {
    if (bytes > rt->scratch_bytes[which]) {
        free(rt->scratch[which]);
        rt->scratch[which] = RT_MALLOC(bytes);
        rt->scratch_bytes[which] = bytes;
    }
    return rt->scratch[which];
}
