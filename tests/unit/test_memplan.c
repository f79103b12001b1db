/* test_memplan.c — the memory plan (ir/ir_memplan.c) against the
 * definition of its placement, computed the direct way: buffers in the
 * plan's order (whole-step ones first, then by size, largest first), each
 * at the smallest gap between the placed buffers whose lifetimes meet its
 * own, else on top of them, found by collecting and sorting those buffers.
 * The plan indexes the placed buffers by lifetime instead (linear in the
 * layers, where this is quadratic); every offset, the regions' offsets and
 * the arena must be the same, on example specs lowered through the default
 * pipeline (recompute none, selective and full; ZeRO 1 and 3; cpu and cuda
 * targets; one and two sequences per group). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/basp_context.h"
#include "driver/driver.h"
#include "passes/passes.h"

#include "check.h"

#ifndef BASP_EXAMPLES
#define BASP_EXAMPLES "examples"
#endif

typedef struct ref_item {
    int v; /* value, -1 optimizer state, -2 staging */
    int64_t bytes, off;
    int start, end;
} ref_item;

static int ref_order(const void *a, const void *b) {
    const ref_item *x = a, *y = b;
    bool px = x->start < 0, py = y->start < 0;
    if (px != py) return px ? -1 : 1;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->v < y->v ? -1 : x->v > y->v;
}

static int ref_by_off(const void *a, const void *b) {
    const int64_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Item k against items[0..k): spans[] is scratch of 2 * k int64s. */
static void ref_place(ref_item *items, int k, int64_t *spans) {
    ref_item *it = &items[k];
    int ns = 0;
    for (int j = 0; j < k; j++)
        if (items[j].start <= it->end && it->start <= items[j].end && items[j].bytes > 0) {
            spans[2 * ns] = items[j].off;
            spans[2 * ns + 1] = items[j].off + items[j].bytes;
            ns++;
        }
    qsort(spans, (size_t)ns, 2 * sizeof *spans, ref_by_off);
    int64_t best = -1, best_gap = INT64_MAX, at = 0;
    for (int j = 0; j < ns; j++) {
        if (spans[2 * j] > at && spans[2 * j] - at >= it->bytes && spans[2 * j] - at < best_gap)
            best = at, best_gap = spans[2 * j] - at;
        if (spans[2 * j + 1] > at) at = spans[2 * j + 1];
    }
    it->off = best >= 0 ? best : at;
}

/* Re-places m's buffers the direct way and compares with m's plan. */
static void check_plan(const ir_module *m, const char *what) {
    ir_mem_target t;
    CHECK(ir_mem_target_of(m, &t) && ir_mem_planned(m));
    int *start = malloc(sizeof(int) * (size_t)(m->nvalues + 1)), *end = malloc(sizeof(int) * (size_t)(m->nvalues + 1));
    ir_mem_live(m, start, end);
    ref_item *items = malloc(sizeof *items * (size_t)(m->nvalues + 2));
    int n = 0;
    for (int v = 0; v < m->nvalues; v++)
        if (start[v] != -2) items[n++] = (ref_item){v, ir_mem_value_bytes(m, v, t), 0, start[v], end[v]};
    int64_t comm[2];
    ir_mem_comm_bytes(m, t, comm);
    items[n++] = (ref_item){-1, ir_mem_opt_bytes(m, t), 0, -1, m->nops};
    items[n++] = (ref_item){-2, comm[0] + comm[1], 0, -1, m->nops};
    qsort(items, (size_t)n, sizeof *items, ref_order);
    int64_t *spans = malloc(sizeof *spans * 2 * (size_t)(n + 1)), peak = 0;
    int wrong = 0;
    for (int k = 0; k < n; k++) {
        ref_place(items, k, spans);
        peak = items[k].off + items[k].bytes > peak ? items[k].off + items[k].bytes : peak;
        int64_t got = items[k].v >= 0    ? m->values[items[k].v].mem_off
                      : items[k].v == -1 ? ir_config_int(m, "mem.opt_offset", -1)
                                         : ir_config_int(m, "mem.comm_offset", -1);
        if (got != items[k].off && wrong++ < 3)
            fprintf(stderr, "%s: %s at %lld, the direct placement gives %lld\n", what,
                    items[k].v >= 0 ? m->values[items[k].v].name : "a region", (long long)got, (long long)items[k].off);
    }
    CHECK(wrong == 0);
    CHECK(ir_config_int(m, "mem.peak", -1) == peak);
    free(spans);
    free(items);
    free(start);
    free(end);
}

static int checked;

static void check_spec(const char *file, const char *const *sets, int nsets, bool cuda) {
    char path[512], what[512];
    snprintf(path, sizeof path, "%s/%s", BASP_EXAMPLES, file);
    int len = snprintf(what, sizeof what, "%s%s", file, cuda ? " (cuda)" : "");
    for (int i = 0; i < nsets; i++) len += snprintf(what + len, sizeof what - (size_t)len, " %s", sets[i]);
    fe_spec *s = fe_parse_file(path);
    CHECK(s != NULL);
    if (!s) return;
    /* the overrides as the user gives them, then the build the compiler makes */
    bool set_ok = true;
    for (int i = 0; i < nsets && s && set_ok; i++) set_ok = fe_override(s, sets[i]);
    CHECK(set_ok);
    ir_module *m = set_ok && fe_check(s) ? drv_build(s, NULL, cuda) : NULL;
    CHECK(m != NULL);
    if (m) check_plan(m, what), checked++;
    ir_module_free(m);
    fe_spec_free(s);
}

int main(void) {
    basp_ctx(); /* the registries the frontend and the pipeline read, filled as the library starts */
    sup_diag_saved saved = sup_diag_silence();
    static const char *const modes[] = {"train.recompute=none", "train.recompute=selective", "train.recompute=full"};
    for (int k = 0; k < 3; k++) {
        const char *tiny[] = {modes[k], "model.layers=6"};
        check_spec("tiny_llama.basp", tiny, 2, false);
        check_spec("tiny_llama.basp", tiny, 2, true);
        check_spec("tiny_zero3_b4.basp", tiny, 2, false);
        check_spec("tiny_gqa_8.basp", tiny, 2, true);
        /* Many buffers and long-lived gradient sums (ZeRO 1), one sequence
         * per group and two. */
        const char *deep[] = {modes[k], "model.layers=12", "train.micro_batch=1"};
        check_spec("llama3_2_1b.basp", deep, 3, true);
        check_spec("llama3_2_1b.basp", deep, 2, true);
    }
    const char *z3[] = {"train.recompute=full", "train.zero=3", "model.layers=8"};
    check_spec("llama3_1_8b.basp", z3, 3, true);
    check_spec("qwen2_5_3b.basp", z3 + 1, 2, false);
    sup_diag_restore(saved);
    printf("%d plan(s) compared\n", checked);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    return failures != 0;
}
