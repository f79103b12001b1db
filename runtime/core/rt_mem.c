/* rt_mem.c — the compiler's memory plan at run time, shared by both
 * backends: which buffers are live (rt_f32, rt_i32, rt_free), a check that
 * a buffer coming back to life overlaps no live one, and the arena's
 * measured high-water mark.
 *
 * The plan (rt_program.mem_*, values[v].offset) lets buffers that are never
 * live at the same time share bytes.  Generated code frees every buffer
 * right after its last reader (rt_free); the next op that names it (through
 * rt_f32/rt_i32, which every kernel, collective and the optimizer go
 * through) makes it live again.  At that moment no live buffer may hold any
 * of its bytes: if one does, the program and its plan disagree, and the run
 * stops naming both values instead of computing with clobbered data.
 *
 * Values in host memory (offload, rt_value_desc.on_host) have offsets in
 * the host arena: they are checked against each other only, and have a
 * high-water mark of their own (host_hw).
 *
 * The high-water mark is the highest arena byte that a live buffer, the
 * optimizer state or a collective's staging request actually reached; it is
 * what --metrics reports as mem_peak_bytes, beside the process's peak
 * resident set (rss_peak_bytes). */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "rt_backend.h"
#include "rt_core.h"

void rt_mem_init(rt_ctx *rt, const size_t *off, const size_t *bytes) {
    const rt_program *p = rt->p;
    size_t n = (size_t)p->nvalues + 1;
    rt->slot_off = RT_MALLOC(sizeof(size_t) * n);
    rt->slot_bytes = RT_MALLOC(sizeof(size_t) * n);
    rt->live = RT_MALLOC(sizeof(bool) * n);
    rt->live_pos = RT_MALLOC(sizeof(int) * n);
    rt->live_list = RT_MALLOC(sizeof(int) * n);
    memcpy(rt->slot_off, off, sizeof(size_t) * (size_t)p->nvalues);
    memcpy(rt->slot_bytes, bytes, sizeof(size_t) * (size_t)p->nvalues);
    rt->planned = p->mem_arena_bytes > 0;
    rt->mem_hw = rt->host_hw = 0;
    rt->nlive = 0;
    for (int v = 0; v < p->nvalues; v++) rt->live[v] = false, rt->live_pos[v] = -1;
    /* Parameters and inputs live the whole run (initialisation, --init-from
     * and --resume write them before the first step); op results become
     * live in the step that defines them. */
    for (int v = 0; v < p->nvalues; v++)
        if (p->values[v].kind != RT_ACT) rt_mem_touch(rt, v);
}

void rt_mem_fini(rt_ctx *rt) {
    free(rt->slot_off), free(rt->slot_bytes), free(rt->live), free(rt->live_pos), free(rt->live_list);
    rt->slot_off = rt->slot_bytes = NULL;
    rt->live = NULL;
    rt->live_pos = rt->live_list = NULL;
}

void rt_mem_reach(rt_ctx *rt, size_t end) {
    if (end > rt->mem_hw) rt->mem_hw = end;
}

void rt_mem_reach_host(rt_ctx *rt, size_t end) {
    if (end > rt->host_hw) rt->host_hw = end;
}

/* Host buffers (on_host) have offsets in the host arena: they meet only
 * each other. */
static bool rt_on_host(const rt_ctx *rt, int v) { return rt->p->values[v].on_host != 0; }

static void rt_mem_check_overlap(rt_ctx *rt, int v) {
    size_t a = rt->slot_off[v], b = a + rt->slot_bytes[v];
    for (int i = 0; i < rt->nlive; i++) {
        int u = rt->live_list[i];
        if (rt_on_host(rt, u) != rt_on_host(rt, v)) continue;
        size_t c = rt->slot_off[u], d = c + rt->slot_bytes[u];
        if (c < b && a < d)
            rt_die(__FILE__, __LINE__,
                   "memory plan violated at step %lld: %s [%zu, +%zu) is used while %s [%zu, +%zu), which shares "
                   "its bytes, is still live; the program and its memory plan disagree (rebuild it with baspc)",
                   (long long)rt->step + 1, rt->p->values[v].name, a, rt->slot_bytes[v], rt->p->values[u].name, c,
                   rt->slot_bytes[u]);
    }
}

void rt_mem_touch(rt_ctx *rt, int v) {
    RT_CHECK(v >= 0 && v < rt->p->nvalues, "value index %d out of range", v);
    if (rt->live[v]) return;
    if (rt->planned) rt_mem_check_overlap(rt, v);
    rt->live[v] = true;
    rt->live_pos[v] = rt->nlive;
    rt->live_list[rt->nlive++] = v;
    if (rt_on_host(rt, v)) {
        rt_mem_reach_host(rt, rt->slot_off[v] + rt->slot_bytes[v]);
        return;
    }
    rt->live_bytes += rt->slot_bytes[v];
    rt_mem_reach(rt, rt->slot_off[v] + rt->slot_bytes[v]);
}

void rt_mem_release(rt_ctx *rt, int v) {
    RT_CHECK(v >= 0 && v < rt->p->nvalues, "value index %d out of range", v);
    if (!rt->live[v]) return;
    int i = rt->live_pos[v], last = rt->live_list[--rt->nlive];
    rt->live_list[i] = last;
    rt->live_pos[last] = i;
    rt->live_pos[v] = -1;
    rt->live[v] = false;
    if (!rt_on_host(rt, v)) rt->live_bytes -= rt->slot_bytes[v];
}

/* ---- the buffers generated code names (basp_rt.h) ------------------------------
 * Checked here, then the backend's: it makes the value live and hands out
 * its pointer (host memory on the CPU, device memory on CUDA), or fences
 * a dead value's bytes. */
float *rt_f32(rt_ctx *rt, int value) {
    RT_CHECK(value >= 0 && value < rt->p->nvalues, "value index %d out of range", value);
    RT_CHECK(rt->p->values[value].dtype == RT_F32, "value %s is not f32", rt->p->values[value].name);
    return rt_backend_buffer(rt, value);
}

int32_t *rt_i32(rt_ctx *rt, int value) {
    RT_CHECK(value >= 0 && value < rt->p->nvalues, "value index %d out of range", value);
    RT_CHECK(rt->p->values[value].dtype == RT_I32, "value %s is not i32", rt->p->values[value].name);
    return rt_backend_buffer(rt, value);
}

/* The value is dead: its bytes may hold a later value (once the backend's
 * streams are done with them). */
void rt_free(rt_ctx *rt, int value) {
    RT_CHECK(value >= 0 && value < rt->p->nvalues, "value index %d out of range", value);
    if (!rt->live[value]) return;
    rt_backend_free(rt, value);
    rt_mem_release(rt, value);
}

/* A step starts with the parameters and inputs live; every op result of the
 * previous step (the loss and gradients were read after it) is dead. */
void rt_mem_begin_step(rt_ctx *rt) {
    for (int v = 0; v < rt->p->nvalues; v++)
        if (rt->p->values[v].kind == RT_ACT) rt_mem_release(rt, v);
}

size_t rt_rss_peak_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (size_t)ru.ru_maxrss * 1024; /* Linux: KiB */
}
