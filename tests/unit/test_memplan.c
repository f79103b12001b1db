/* test_memplan.c — the memory plan (ir/ir_memplan.c) against the
 * definition of its placement, computed the direct way: buffers in the
 * plan's order (whole-step ones first, then by size, largest first), each
 * at the smallest gap between the placed buffers whose lifetimes meet its
 * own, else on top of them, found by collecting and sorting those buffers.
 * The plan indexes the placed buffers by lifetime instead (linear in the
 * layers, where this is quadratic); every offset, the regions' offsets and
 * the arena must be the same, on example specs lowered through the default
 * pipeline (recompute none, selective and full; ZeRO 1 and 3; cpu and cuda
 * targets; one and two sequences per group).
 *
 * Also: the plan's check (ir_mem_boxes_disjoint) against the pairwise
 * definition on random boxes; the cache of recent plans: a module
 * changed in any way the plan depends on gets the plan made afresh, not
 * the cached one; and the CUDA workspaces' shared region
 * (ir/ir_mem_work.c) against its rule, with each slot's uses found the
 * direct way: two slots whose bytes meet are never in use at one op. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/basp_context.h"
#include "ir/ir_internal.h"
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

/* ---- the CUDA workspaces' shared region ------------------------------------ */
/* Whether slot k is in use at op j, by the rule of ir/ir_mem_work.c: op i
 * asks for it and j is i, or op i is a collective and j lies from it up to,
 * not including, the first later op that waits (a kernel, an optimizer
 * update or a wait) for one of its results or of a later collective's,
 * found by scanning forward. */
static bool work_in_use(const ir_module *m, int k, int j) {
    for (int i = 0; i <= j; i++) {
        const ir_op_desc *d = ir_op_desc_of(m->ops[i].code);
        int64_t req[IR_MEM_WORK_MAX] = {0};
        if (!d->ws_cuda) continue;
        d->ws_cuda(m, &m->ops[i], req);
        if (req[k] <= 0) continue;
        if (i == j) return true;
        if (d->kind != IR_K_COLL) continue;
        int waited = m->nops; /* the first waiting op */
        for (int r = i + 1; r < m->nops && waited == m->nops; r++) {
            const ir_op *op = &m->ops[r];
            ir_op_kind kind = ir_op_desc_of(op->code)->kind;
            if (kind != IR_K_COMPUTE && kind != IR_K_OPT && op->code != IR_WAIT) continue;
            for (int a = 0; a < op->nin; a++) {
                int def = op->in[a] >= 0 ? m->values[op->in[a]].def : -1;
                if (def >= i && ir_op_desc_of(m->ops[def].code)->kind == IR_K_COLL) waited = r;
            }
        }
        if (j < waited) return true;
    }
    return false;
}

static int work_checked, work_shared;

static void check_work(const ir_module *m, const char *what) {
    ir_mem_work_slot slot[IR_MEM_WORK_MAX];
    int n = ir_mem_work_slots(m, ir_mem_target_named(true), slot);
    int64_t region = ir_mem_work_region(slot, n), sum = 0, end = 0;
    int bad = 0;
    for (int k = 0; k < n; k++) {
        bool own = k >= CM_WS_CUDA_NSLOTS || k == CM_WS_CUDA_ROPE || k == CM_WS_CUDA_POS || k == CM_WS_CUDA_LSE ||
                   k == CM_WS_CUDA_SLICE || k == CM_WS_CUDA_RING || slot[k].bytes <= 0;
        if (own != (slot[k].off < 0))
            bad++, fprintf(stderr, "%s: slot %s placed %lld\n", what, slot[k].name, (long long)slot[k].off);
        if (slot[k].off < 0) continue;
        sum += slot[k].bytes;
        if (slot[k].off % 256) bad++;
        if (slot[k].off + slot[k].bytes > end) end = slot[k].off + slot[k].bytes;
    }
    for (int a = 0; a < n; a++)
        for (int b = a + 1; b < n; b++) {
            if (slot[a].off < 0 || slot[b].off < 0 || slot[a].off >= slot[b].off + slot[b].bytes ||
                slot[b].off >= slot[a].off + slot[a].bytes)
                continue;
            work_shared++;
            for (int j = 0; j < m->nops; j++)
                if (work_in_use(m, a, j) && work_in_use(m, b, j)) {
                    fprintf(stderr, "%s: slots %s and %s share bytes and are both in use at op %d\n", what,
                            slot[a].name, slot[b].name, j);
                    bad++;
                    break;
                }
        }
    CHECK(bad == 0 && region == end && region <= sum);
    int64_t own_bytes = 0;
    for (int k = 0; k < n; k++) own_bytes += slot[k].off < 0 ? slot[k].bytes : 0;
    CHECK(ir_mem_work_bytes(m, ir_mem_target_named(true)) == region + own_bytes);
    work_checked++;
}

static void check_work_spec(const char *file, const char *const *sets, int nsets) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", BASP_EXAMPLES, file);
    fe_spec *s = fe_parse_file(path);
    bool ok = s != NULL;
    for (int i = 0; i < nsets && ok; i++) ok = fe_override(s, sets[i]);
    ir_module *m = ok && fe_check(s) ? drv_build(s, NULL, true) : NULL;
    CHECK(m != NULL);
    if (m) check_work(m, file);
    ir_module_free(m);
    fe_spec_free(s);
}

/* A kernel that asks for the fp32 sums' slot while an exchange is in
 * flight: tiny_llama's step with its first add_rmsnorm_bwd moved right
 * after the first all_to_all, before anything waits for the exchange.  The
 * exchange's staging and F32 must not share bytes (in the steps as
 * lowered every collective is waited for before the next op that uses
 * another slot, so only a step like this one tells the rule's window from
 * the collective's own op). */
static void check_work_window(void) {
    fe_spec *s = fe_parse_file(BASP_EXAMPLES "/tiny_llama.basp");
    ir_module *m = s && fe_check(s) ? drv_build(s, NULL, true) : NULL;
    CHECK(m != NULL);
    if (!m) return;
    int a = -1, f = -1;
    for (int i = 0; i < m->nops && (a < 0 || f < 0); i++) {
        if (a < 0 && m->ops[i].code == IR_ALL_TO_ALL) a = i;
        if (a >= 0 && i > a + 1 && m->ops[i].code == IR_ADD_RMSNORM_BWD) f = i;
    }
    CHECK(a >= 0 && f > a + 1);
    if (a >= 0 && f > a + 1) {
        ir_op moved = m->ops[f];
        memmove(&m->ops[a + 2], &m->ops[a + 1], sizeof(ir_op) * (size_t)(f - a - 1));
        m->ops[a + 1] = moved;
        ir_renumber(m);
        check_work(m, "tiny_llama.basp, a norm's backward inside an exchange");
        ir_mem_work_slot slot[IR_MEM_WORK_MAX];
        ir_mem_work_slots(m, ir_mem_target_named(true), slot);
        const ir_mem_work_slot *f32 = &slot[CM_WS_CUDA_F32];
        for (int k = CM_WS_CUDA_SEND; k <= CM_WS_CUDA_RECV; k++)
            CHECK(f32->off >= 0 && slot[k].off >= 0 &&
                  (slot[k].off >= f32->off + f32->bytes || f32->off >= slot[k].off + slot[k].bytes));
    }
    ir_module_free(m);
    fe_spec_free(s);
}

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

/* ---- the check of a plan ---------------------------------------------------- */
static uint64_t rng = 88172645463325252ull;
static int64_t rnd(int64_t n) { /* xorshift64 */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (int64_t)(rng % (uint64_t)n);
}

static bool pairwise_disjoint(const ir_mem_box *b, int n) {
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            if (b[i].start <= b[j].end && b[j].start <= b[i].end && b[i].off < b[j].off + b[j].bytes &&
                b[j].off < b[i].off + b[i].bytes)
                return false;
    return true;
}

/* Small ranges of offsets and ops, so that touching, nested and equal boxes
 * are common; half the sets are built disjoint (each box moved above the
 * live ones it meets) so that both answers are tested. */
static void check_boxes(void) {
    int agree = 0, clashing = 0;
    for (int trial = 0; trial < 4000; trial++) {
        int n = 1 + (int)rnd(40), nops = 1 + (int)rnd(30);
        ir_mem_box b[40];
        for (int i = 0; i < n; i++) {
            int s = (int)rnd(nops + 2) - 1, e = s + (int)rnd(nops + 1 - s);
            b[i] = (ir_mem_box){rnd(64), 1 + rnd(16), s, e};
            if (trial % 2)
                for (int j = 0; j < i; j++)
                    if (!pairwise_disjoint((ir_mem_box[]){b[j], b[i]}, 2)) b[i].off = b[j].off + b[j].bytes, j = -1;
        }
        bool want = pairwise_disjoint(b, n), got = ir_mem_boxes_disjoint(nops, b, n);
        if (got != want && agree >= 0) {
            fprintf(stderr, "boxes, trial %d (%d boxes): the sweep says %s, the pairs %s\n", trial, n,
                    got ? "disjoint" : "a clash", want ? "disjoint" : "a clash");
            agree = -1;
        }
        agree += agree >= 0;
        clashing += !want;
    }
    CHECK(agree == 4000);
    CHECK(clashing > 1000 && clashing < 3000); /* both answers, often */
}

/* ---- the cache of recent plans ---------------------------------------------- */
/* m's plan for t, asked right after m0's for the cpu target, equals the
 * plan made afresh. */
static void check_replanned(const ir_module *m0, ir_module *m, ir_mem_target t, const char *what) {
    ir_module *p0 = ir_module_clone(m0);
    ir_mem_stats s0, s1, s2;
    CHECK(ir_mem_plan(p0, ir_mem_target_named(false), &s0)); /* m0's plan, now in the cache */
    ir_module *fresh = ir_module_clone(m);
    CHECK(ir_mem_plan(m, t, &s1));
    ir_mem_plan_forget();
    CHECK(ir_mem_plan(fresh, t, &s2));
    int wrong = 0;
    for (int v = 0; v < m->nvalues; v++) wrong += m->values[v].mem_off != fresh->values[v].mem_off;
    if (wrong || s1.arena != s2.arena || s1.peak_op != s2.peak_op)
        fprintf(stderr, "plan cache, %s: %d offset(s) differ, arena %lld against %lld afresh\n", what, wrong,
                (long long)s1.arena, (long long)s2.arena);
    CHECK(wrong == 0 && s1.arena == s2.arena && s1.peak_op == s2.peak_op && s1.host_arena == s2.host_arena);
    /* and the change mattered: the same plan as m0's would not tell */
    int differ = 0;
    for (int v = 0; v < m->nvalues && v < p0->nvalues; v++) differ += m->values[v].mem_off != p0->values[v].mem_off;
    CHECK(differ > 0 || s0.arena != s1.arena || m->nvalues != p0->nvalues || s0.host_arena != s1.host_arena);
    ir_module_free(fresh);
    ir_module_free(p0);
}

static void check_cache(void) {
    fe_spec *s = fe_parse_file(BASP_EXAMPLES "/tiny_llama.basp");
    CHECK(s && fe_override(s, "model.layers=3") && fe_check(s));
    ir_module *m0 = s ? drv_build(s, NULL, false) : NULL;
    CHECK(m0 != NULL);
    if (!m0) return;
    ir_config_set(m0, "offload", "none"); /* the default, said: below only its value changes */
    ir_mem_target cpu = ir_mem_target_named(false), cuda = ir_mem_target_named(true);
    /* the same module: the cached plan, the same offsets */
    ir_module *m = ir_module_clone(m0);
    ir_mem_stats a, b;
    CHECK(ir_mem_plan(m, cpu, &a) && ir_mem_plan(m, cpu, &b) && a.arena == b.arena);
    ir_module_free(m);
    /* a larger activation (a value's type) */
    m = ir_module_clone(m0);
    int big = -1;
    for (int v = 0; v < m->nvalues; v++)
        if (m->values[v].kind == IR_V_RESULT && m->values[v].type.rank >= 2 &&
            (big < 0 || ir_mem_value_bytes(m, v, cpu) > ir_mem_value_bytes(m, big, cpu)))
            big = v;
    CHECK(big >= 0);
    if (big >= 0) m->values[big].type.dims[0] *= 3;
    check_replanned(m0, m, cpu, "a value's dims");
    ir_module_free(m);
    /* the target */
    m = ir_module_clone(m0);
    check_replanned(m0, m, cuda, "the cuda target");
    ir_module_free(m);
    /* an op's operand: a late op reads an early activation instead of a
     * late one of the same type, so the early one, dead before the middle
     * of the step until then, lives to the end */
    m = ir_module_clone(m0);
    int moved = 0, *last = calloc((size_t)m->nvalues, sizeof *last);
    for (int i = 0; i < m->nops; i++)
        for (int k = 0; k < m->ops[i].nin; k++) last[m->ops[i].in[k]] = i;
    for (int i = m->nops - 1; i >= 0 && !moved; i--)
        for (int k = 0; k < m->ops[i].nin && !moved; k++) {
            int w = m->ops[i].in[k];
            if (m->values[w].kind != IR_V_RESULT || m->values[w].def < m->nops / 2) continue;
            for (int v = 0; v < m->nvalues && !moved; v++)
                if (m->values[v].kind == IR_V_RESULT && m->values[v].def >= 0 && m->values[v].def < m->nops / 8 &&
                    last[v] < m->nops / 2 && !memcmp(&m->values[v].type, &m->values[w].type, sizeof m->values[w].type))
                    m->ops[i].in[k] = v, moved = 1;
        }
    free(last);
    CHECK(moved);
    check_replanned(m0, m, cpu, "an op's operand");
    ir_module_free(m);
    /* the config the plan reads: offload of the optimizer state */
    m = ir_module_clone(m0);
    ir_config_set(m, "offload", "optimizer");
    check_replanned(m0, m, cpu, "config offload");
    ir_module_free(m);
    ir_module_free(m0);
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
    /* The shared workspace region: ZeRO-3 gathers started early (their
     * staging in use until the weight's reader), head-chunked exchanges
     * overlapping the next chunk's attention, ring and hybrid layouts, the
     * tiled MLP and the LM head's slots. */
    const char *w1[] = {"train.zero=3", "train.overlap=on", "layout.batch_aware=off"};
    const char *w2[] = {"model.heads=8",          "model.kv_heads=4", "model.head_dim=8",    "train.attention_chunks=2",
                        "layout.batch_aware=off", "train.zero=3",     "train.recompute=full"};
    const char *w3[] = {"layout.sequence=hybrid", "layout.ring_degree=2", "layout.batch_aware=off"};
    const char *w4[] = {"train.mlp_chunk=32", "train.zero=1", "train.overlap=on"};
    const char *w5[] = {"layout.sequence=ring", "layout.batch_aware=off", "train.zero=2"};
    check_work_spec("tiny_llama.basp", w1, 3);
    check_work_spec("tiny_llama.basp", w2, 7);
    check_work_spec("tiny_gqa_8.basp", w3, 3);
    check_work_spec("tiny_llama.basp", w4, 3);
    check_work_spec("tiny_llama.basp", w5, 3);
    check_work_window();
    CHECK(work_checked == 6 && work_shared > 0); /* some slots do share */
    check_boxes();
    check_cache();
    sup_diag_restore(saved);
    printf("%d plan(s) compared; %d workspace region(s) checked (%d pair(s) of slots sharing bytes); the check of a "
           "plan and the cache of plans tested\n",
           checked, work_checked, work_shared);
    if (failures) fprintf(stderr, "%d check(s) failed\n", failures);
    return failures != 0;
}
