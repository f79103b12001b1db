/* ir_memplan.c — placing every buffer of a step in one arena: the
 * algorithm behind pass memplan (passes/pass_memplan.c), kept in ir/ so that
 * codegen can plan a module for its own target without the pass pipeline.
 *
 * Live ranges, buffer sizes and the whole-step regions come from ir_mem.c
 * (the verifier checks the result with the same definitions).  Placement is
 * greedy by size, the offline interval-packing heuristic of inference and
 * training compilers: whole-step buffers first (they sit at the bottom and
 * never move), then the others from the largest down, each at the
 * best-fitting gap — the smallest hole between the buffers already placed
 * whose lifetimes meet its own — or on top of them when no hole is large
 * enough.  Placing large buffers first keeps small ones from fragmenting the
 * space large ones need; best fit keeps large holes for large buffers.  The
 * lower bound is the largest sum of bytes live at one op; the plan reports
 * both, and on the steps lower produces they are equal or within a few
 * percent. */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

typedef struct mp_item {
    int v;          /* value index, -1 optimizer state, -2 collective staging */
    int64_t bytes, off;
    int start, end; /* live over ops [start, end] */
} mp_item;

static int mp_order(const void *a, const void *b)
{
    const mp_item *x = a, *y = b;
    bool px = x->start < 0, py = y->start < 0;
    if (px != py)
        return px ? -1 : 1;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    if (x->start != y->start)
        return x->start < y->start ? -1 : 1;
    return x->v < y->v ? -1 : x->v > y->v;
}

typedef struct mp_span {
    int64_t off, end;
} mp_span;

static int mp_span_cmp(const void *a, const void *b)
{
    const mp_span *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* Places items[k] against items[0..k) (already placed): the smallest gap
 * between the placed buffers whose lifetimes meet its own, else the top. */
static void mp_place(mp_item *items, int k, mp_span *spans)
{
    mp_item *it = &items[k];
    int ns = 0;
    for (int j = 0; j < k; j++)
        if (items[j].start <= it->end && it->start <= items[j].end && items[j].bytes > 0)
            spans[ns++] = (mp_span){items[j].off, items[j].off + items[j].bytes};
    qsort(spans, (size_t)ns, sizeof *spans, mp_span_cmp);
    int64_t best = -1, best_gap = INT64_MAX, at = 0;
    for (int j = 0; j < ns; j++) {
        if (spans[j].off > at) {
            int64_t gap = spans[j].off - at;
            if (gap >= it->bytes && gap < best_gap)
                best = at, best_gap = gap;
        }
        if (spans[j].end > at)
            at = spans[j].end;
    }
    it->off = best >= 0 ? best : at;
}

/* Live bytes per category at each op; returns the op with the largest sum
 * (-1: before the first op, when there are none). */
static int mp_peak_op(const ir_module *m, const mp_item *items, int n, int64_t *best_sum)
{
    int best = -1;
    *best_sum = -1;
    int64_t *delta = sup_xcalloc((size_t)m->nops + 3, sizeof *delta);
    for (int i = 0; i < n; i++) { /* ranges over ops -1..nops, shifted by one */
        delta[items[i].start + 1] += items[i].bytes;
        delta[items[i].end + 2] -= items[i].bytes;
    }
    int64_t live = 0;
    for (int i = -1; i <= m->nops; i++) {
        live += delta[i + 1];
        if (i >= 0 && i < m->nops && live > *best_sum)
            *best_sum = live, best = i;
    }
    if (best < 0)
        *best_sum = live;
    free(delta);
    return best;
}

static bool mp_fail_overflow(const char *what)
{
    sup_error(sup_noloc(), "memory plan: the size of %s overflows 64 bits; the module cannot be planned", what);
    return false;
}

bool ir_mem_plan(ir_module *m, ir_mem_target t, ir_mem_stats *st)
{
    int *start = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
    int *end = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
    ir_mem_live(m, start, end);
    mp_item *items = sup_xmalloc(sizeof *items * (size_t)(m->nvalues + 2));
    int n = 0;
    int64_t comm[2], naive = 0;
    ir_mem_comm_bytes(m, t, comm);
    int64_t opt_bytes = ir_mem_opt_bytes(m, t);
    bool ok = true;
    if (opt_bytes < 0 || comm[0] < 0 || comm[1] < 0 || comm[0] > INT64_MAX - comm[1])
        ok = mp_fail_overflow(opt_bytes < 0 ? "the optimizer state" : "a collective's staging area");
    for (int v = 0; ok && v < m->nvalues; v++) {
        m->values[v].mem_off = -1;
        if (start[v] == -2)
            continue;
        int64_t b = ir_mem_value_bytes(m, v, t);
        if (b < 0) {
            char what[IR_NAME_MAX + 8];
            snprintf(what, sizeof what, "%%%s", m->values[v].name);
            ok = mp_fail_overflow(what);
        }
        items[n++] = (mp_item){v, b, 0, start[v], end[v]};
    }
    if (ok) {
        items[n++] = (mp_item){-1, opt_bytes, 0, -1, m->nops};
        items[n++] = (mp_item){-2, comm[0] + comm[1], 0, -1, m->nops};
    }
    int64_t peak = 0;
    if (ok) {
        qsort(items, (size_t)n, sizeof *items, mp_order);
        mp_span *spans = sup_xmalloc(sizeof *spans * (size_t)(n + 1));
        for (int k = 0; k < n && ok; k++) {
            mp_place(items, k, spans);
            if (items[k].off > INT64_MAX - items[k].bytes || naive > INT64_MAX - items[k].bytes)
                ok = mp_fail_overflow("the arena");
            else if (items[k].off + items[k].bytes > peak)
                peak = items[k].off + items[k].bytes;
            naive += items[k].bytes;
        }
        free(spans);
    }
    if (ok) {
        int64_t opt_off = 0, comm_off = 0, live_max;
        for (int k = 0; k < n; k++) {
            if (items[k].v >= 0)
                m->values[items[k].v].mem_off = items[k].off;
            else if (items[k].v == -1)
                opt_off = items[k].off;
            else
                comm_off = items[k].off;
        }
        int pop = mp_peak_op(m, items, n, &live_max);
        ir_config_set(m, "mem.target", t.cuda ? "cuda" : "cpu");
        ir_config_set_int(m, "mem.peak", peak);
        ir_config_set_int(m, "mem.peak_op", pop);
        ir_config_set_int(m, "mem.opt_offset", opt_off);
        ir_config_set_int(m, "mem.opt_bytes", opt_bytes);
        ir_config_set_int(m, "mem.comm_offset", comm_off);
        ir_config_set_int(m, "mem.comm_bytes0", comm[0]);
        ir_config_set_int(m, "mem.comm_bytes1", comm[1]);
        if (st)
            *st = (ir_mem_stats){peak, live_max, pop, naive};
    }
    free(items);
    free(start);
    free(end);
    return ok;
}
