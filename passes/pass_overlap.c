/* pass_overlap.c — hide ZeRO's collectives under compute (config
 * `overlap`, spec `train { overlap on }`).
 *
 * ZeRO places each all_gather of a weight right before the weight's first
 * use and each gradient reduction right after the op completing the
 * gradient, and the step waits for every byte of both.  This pass turns
 * them into started collectives (`async = 1`) with a `wait` on the result:
 *
 *   weight gathers: the start moves up, the wait takes the gather's place
 *     %l1.wq.full = all_gather %l1.wq {…, async = 1}   <- moved up
 *     … layer 0's compute …
 *     wait %l1.wq.full                                 <- where it was
 *     %l1.q = linear %l1.h, %l1.wq.full
 *   gradient reductions: the start stays, the wait moves down
 *     %d.l1.wq.shard = reduce_scatter %d.l1.wq {…, async = 1}
 *     … the backward of layer 0 …
 *     wait %d.l1.wq.shard                              <- moved down
 *
 * How far: until the compute between start and wait, in the cost model's
 * times, covers the collective's own transfer time, and no further, because
 * the buffers involved stay live from start to wait: a gather's copy from
 * its earlier start, a reduction's whole gradient until the later wait.
 * The walk also stops at:
 *   - an op of another phase: codegen runs phases apart (the validation
 *     forward is the fwd ops alone; with gradient accumulation the apply
 *     phase is its own function), so a collective is waited where it starts;
 *   - for a gather, the previous moved gather's start (starts keep their
 *     order, so the gathers queue on the communication stream as they would
 *     have run); for a reduction, the first reader of its result;
 *   - a blocking collective that also sends across nodes (Ulysses'
 *     all-to-alls spanning nodes): running under it would share the
 *     inter-node link and delay it, and the step waits for it;
 *   - the memory left under the device limit (config device_mem, the mesh
 *     `memory`): the bytes kept live longer never exceed device_mem minus
 *     the step's planned peak at any op; with no room at all nothing
 *     changes, with a remark.
 * Only collectives that work in their operands' own buffers move (every dim
 * before the gathered or scattered one has one entry; both runtimes' start
 * forms); small reductions are not bucketed together.  A gather of a
 * parameter shard fetched from host memory right before it (offload all:
 * `%w.dev = fetch %w`) moves with that fetch, which goes right before the
 * start.
 *
 * Results: the same collectives on the same bytes, and the CPU runtime sums
 * a reduction started or not with the same algorithm, so the step computes
 * bit for bit what the blocking schedule computes.  The memory plan keeps a
 * collective's operands and results live from the start to the wait
 * (ir_mem_live).  Run after zero and recompute (it reads their collectives)
 * and before memplan. */
#include "pass_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct ovctx {
    ir_module *m;
    double *sec;     /* per op: the cost model's seconds (comm or compute) */
    double *comp;    /* per op: its seconds when it computes, else 0 */
    bool *across;    /* per op: a collective sending across nodes */
    bool *exchange;  /* per op: a sequence-parallel all-to-all (never moved) */
    double *extra;   /* per op: bytes kept live across it by this pass */
    double headroom; /* bytes under device_mem; INFINITY when unknown */
    int gathers, gathers_moved, reductions, reductions_moved, kept_mem;
    double gathered_bytes, max_extra;
    pass_edits edits; /* starts and waits inserted, at indices of the unchanged schedule */
} ovctx;

static bool in_opt(const ir_op *op) { return strcmp(ir_op_phase(op), "opt") == 0; }
static bool same_phase(const ir_op *a, const ir_op *b) { return strcmp(ir_op_phase(a), ir_op_phase(b)) == 0; }

/* The collective works in its operands' own buffers: every dim before the
 * gathered / scattered one has one entry on the sharded side. */
static bool in_place(const ir_module *m, int v, int d) {
    const ir_type *t = &m->values[v].type;
    if (d < 0 || d >= t->rank) return false;
    for (int i = 0; i < d; i++)
        if (ir_type_max_local_dim(m, t, i) != 1) return false;
    return true;
}

/* The op right before the gather at u when it fetches the gather's shard
 * of a parameter from host memory (offloaded parameters: pass offload puts
 * `%w.dev = fetch %w` there), else -1.  The two move together. */
static int fetched_shard(const ir_module *m, int u) {
    const ir_op *g = &m->ops[u], *f = u > 0 ? &m->ops[u - 1] : NULL;
    if (!f || f->code != IR_FETCH || f->nout != 1 || f->nin != 1 || f->out[0] != g->in[0]) return -1;
    return m->values[f->in[0]].kind == IR_V_PARAM ? u - 1 : -1;
}

/* A gather this pass may start early: of a parameter (or its shard fetched
 * right before it from host memory), landing in place.  pass_overlap_sp.c
 * times its segments without these. */
bool pass_overlap_movable_gather(const ir_module *m, int i, int *fetch) {
    const ir_op *op = &m->ops[i];
    int f = -1;
    if (fetch) *fetch = -1;
    if (op->code != IR_ALL_GATHER || ir_op_async(op) || op->nin != 1 || op->nout != 1 || in_opt(op)) return false;
    int w = op->in[0];
    bool param = m->values[w].kind == IR_V_PARAM || (f = fetched_shard(m, i)) >= 0;
    if (!param || !in_place(m, w, (int)ir_attr_int(op, "dim", -1))) return false;
    if (fetch) *fetch = f;
    return true;
}

/* A reduction this pass may wait for late: a reduce-scatter in place or an
 * all-reduce, outside the apply phase (where nothing computes).  The
 * loss's all-reduce is no gradient reduction: the validation program runs
 * it as well (ir_forward_program), without the backward that would hold
 * its wait, so it completes where it is. */
static bool movable_reduction(const ir_module *m, const ir_op *op) {
    if (ir_op_async(op) || op->nin != 1 || op->nout != 1 || in_opt(op)) return false;
    if (ir_is_partial_loss(m, op->in[0])) return false;
    if (op->code == IR_ALL_REDUCE) return true;
    return op->code == IR_REDUCE_SCATTER && in_place(m, op->out[0], (int)ir_attr_int(op, "dim", -1));
}

/* Bytes of a value on one rank (f32 in both runtimes' buffers). */
static double value_bytes(const ir_module *m, int v) {
    return 4.0 * (double)ir_type_local_elems(m, &m->values[v].type);
}

static void add_extra(ovctx *o, int from, int to, double b) {
    for (int i = from; i < to; i++) {
        o->extra[i] += b;
        if (o->extra[i] > o->max_extra) o->max_extra = o->extra[i];
    }
}

/* An all-to-all at i that the collective at c would contend with: both
 * send across nodes, so running c over i shares the inter-node link and
 * delays the exchange, which the step waits for (measured on the emulated
 * cluster: ZeRO-3 gathers started before Ulysses' cross-node all-to-alls
 * made those up to twice as slow).  The walk does not pass such an op.
 * (ZeRO's own collectives queue one after another on the communication
 * stream instead.) */
static bool contends(const ovctx *o, int i, int c) { return o->exchange[i] && o->across[i] && o->across[c]; }

/* Where the gather at u starts: the gap before op s (s <= u); *hidden:
 * the compute seconds between. */
static int choose_start(ovctx *o, int u, int floor_gap, double *hidden) {
    const ir_module *m = o->m;
    double need = o->sec[u], covered = 0, bytes = value_bytes(m, m->ops[u].out[0]);
    double worst = 0; /* the most extra bytes over [s, u) so far */
    int s = u;
    while (s > floor_gap && covered < need) {
        const ir_op *prev = &m->ops[s - 1];
        if (!same_phase(prev, &m->ops[u]) || contends(o, s - 1, u)) break;
        double w = o->extra[s - 1] > worst ? o->extra[s - 1] : worst;
        if (w + bytes > o->headroom) {
            o->kept_mem += s == u;
            break;
        }
        worst = w;
        s--;
        covered += o->comp[s];
    }
    *hidden = covered;
    return s;
}

/* Where the reduction at p is waited: the gap before op w (p < w <= its
 * result's first reader), or p + 1 when no compute lies between.  Its
 * operand stays live to the wait: extra bytes over (p, w) unless something
 * after p reads it anyway. */
static int choose_wait(ovctx *o, int p) {
    const ir_module *m = o->m;
    const ir_op *op = &m->ops[p];
    int first = pu_first_use(m, op->out[0], p + 1);
    int end = first < 0 ? m->nops : first;
    double need = o->sec[p], covered = 0;
    double bytes = pu_first_use(m, op->in[0], p + 1) < 0 ? value_bytes(m, op->in[0]) : 0;
    int w = p + 1;
    while (w < end && covered < need && same_phase(&m->ops[w], op) && !contends(o, w, p)) {
        if (o->extra[w] + bytes > o->headroom) {
            o->kept_mem += w == p + 1;
            break;
        }
        covered += o->comp[w];
        w++;
    }
    if (covered <= 0) return p + 1; /* only bookkeeping (frees) to pass: nothing to hide it under */
    add_extra(o, p + 1, w, bytes);
    return w;
}

/* async before the layer and phase, which print last. */
static void mark_started(ir_op *op, const ir_op *tag_like) {
    ir_attr_remove(op, "layer");
    ir_attr_remove(op, "phase");
    ir_attr_set_int(op, "async", 1);
    pu_tag_like(op, tag_like);
}

static ir_op wait_for(int v, const ir_op *tag_like) {
    ir_op wait = ir_op_make(IR_WAIT);
    ir_op_add_input(&wait, v);
    pu_tag_like(&wait, tag_like);
    return wait;
}

static void move_gathers(ovctx *o) {
    ir_module *m = o->m;
    int floor_gap = 0;
    for (int u = 0; u < m->nops; u++) {
        int f;
        if (!pass_overlap_movable_gather(m, u, &f)) continue;
        o->gathers++;
        double hidden;
        int s = choose_start(o, u, floor_gap, &hidden);
        floor_gap = s;
        if (hidden <= 0) continue; /* nothing to hide it under */
        /* A shard fetched from host memory moves with its gather, right
         * before the start; its copy is live from there to the gather. */
        double b = value_bytes(m, m->ops[u].out[0]) + (f >= 0 ? value_bytes(m, m->ops[u].in[0]) : 0);
        add_extra(o, s, u, b);
        if (f >= 0) {
            ir_op fetch = m->ops[f];
            pu_tag_like(&fetch, &m->ops[s]);
            pass_insert_before(&o->edits, s, &fetch);
            pass_edits_remove(&o->edits, f);
        }
        /* The layer of where it now runs, so that the schedule's sections
         * stay contiguous (the phase is the same). */
        ir_op start = m->ops[u];
        mark_started(&start, &m->ops[s]);
        pass_insert_before(&o->edits, s, &start);
        m->ops[u] = wait_for(m->ops[u].out[0], &m->ops[u]); /* the gather's place: its first reader follows */
        o->gathers_moved++;
        o->gathered_bytes += b;
    }
}

static void delay_reductions(ovctx *o) {
    ir_module *m = o->m;
    for (int p = 0; p < m->nops; p++) {
        if (!movable_reduction(m, &m->ops[p])) continue;
        o->reductions++;
        int w = choose_wait(o, p);
        if (w == p + 1) continue; /* nothing to hide it under */
        ir_op orig = m->ops[p];
        ir_op wait = wait_for(orig.out[0], &orig);
        pass_insert_before(&o->edits, w, &wait);
        mark_started(&m->ops[p], &orig);
        o->reductions_moved++;
    }
}

/* The device memory left under device_mem by the planned step (INFINITY
 * when the limit is unknown). */
static double mem_headroom(const ir_module *m, const pass_options *say) {
    const char *c = ir_config_get(m, "device_mem");
    double cap = c ? strtod(c, NULL) : 0;
    if (!(cap > 0)) return INFINITY;
    pass_mem_report r;
    if (!pass_memory_report(m, &r)) return 0;
    double left = cap - (double)r.peak_bytes;
    if (left <= 0 && say)
        pu_remark(say,
                  "overlap: the step's planned peak (%.1f MiB) leaves nothing under the device's %.1f MiB: "
                  "its collectives stay blocking",
                  (double)r.peak_bytes / 1048576.0, cap / 1048576.0);
    return left > 0 ? left : 0;
}

/* The exchanges first (pass_overlap_sp.c): they reorder compute, which the
 * walks below then read.  Kept only when the step still fits. */
static int split_exchanges(ir_module *m, const pass_cost_params *cp, const pass_options *opt, pass_ovsp_stats *st,
                           double *headroom) {
    ir_module *keep = isfinite(*headroom) ? ir_module_clone(m) : NULL;
    double unsplit = *headroom;
    int n = pass_overlap_exchanges(m, cp, st);
    if (keep && n > 0) {
        *headroom = mem_headroom(m, NULL);
        if (*headroom <= 0) { /* back to the unsplit step, and its headroom */
            ir_module t = *m;
            *m = *keep;
            *keep = t;
            *headroom = unsplit;
            pu_remark(opt,
                      "overlap: splitting %d sequence-parallel exchange(s) would pass the device memory: kept "
                      "whole",
                      n);
            n = st->hoisted = 0;
        }
    }
    if (keep) ir_module_free(keep);
    return n;
}

bool pass_overlap(ir_module *m, const pass_options *opt) {
    if (ir_config_int(m, "overlap", 0) != 1) return true;
    if (pu_count_ops(m, IR_WAIT) > 0) {
        pu_remark(opt, "overlap: the step already has started collectives; left as it is");
        return true;
    }
    double headroom = mem_headroom(m, opt);
    if (headroom <= 0) return true; /* said by mem_headroom: no room, nothing changes */
    pass_cost_params cp = pass_cost_default_params(m);
    double before = pass_cost_estimate_time(m, &cp).step_s;
    pass_ovsp_stats xs;
    int split = split_exchanges(m, &cp, opt, &xs, &headroom);
    ovctx o = {.m = m,
               .headroom = headroom,
               .sec = sup_xcalloc((size_t)m->nops + 1, sizeof(double)),
               .comp = sup_xcalloc((size_t)m->nops + 1, sizeof(double)),
               .across = sup_xcalloc((size_t)m->nops + 1, sizeof(bool)),
               .exchange = sup_xcalloc((size_t)m->nops + 1, sizeof(bool)),
               .extra = sup_xcalloc((size_t)m->nops + 1, sizeof(double))};
    for (int i = 0; i < m->nops; i++) {
        pass_op_cost c = pass_op_cost_of(m, &m->ops[i], &cp);
        o.sec[i] = c.seconds;
        o.comp[i] = c.comm ? 0 : c.seconds;
        o.across[i] = c.comm && pass_op_traffic(m, &m->ops[i]).inter_bytes > 0;
        o.exchange[i] = ir_op_desc_of(m->ops[i].code)->comm == IR_COMM_ALL_TO_ALL;
    }
    /* Both on the unchanged schedule's indices: a moved gather leaves a
     * wait at its index, and both halves insert through the same edits. */
    move_gathers(&o);
    delay_reductions(&o);
    pass_edits_apply(m, &o.edits);
    double after = pass_cost_estimate_time(m, &cp).step_s;
    if (xs.candidates > 0)
        pu_remark(opt,
                  "overlap: %d of %d sequence-parallel exchange(s) split, part started around compute that "
                  "does not need it (%d before, %d after the exchange)%s",
                  split, xs.candidates, xs.hoisted, split - xs.hoisted,
                  xs.link_kept ? "; those across nodes kept whole: ZeRO's collectives share "
                                 "that link"
                               : "");
    if (o.gathers + o.reductions == 0 && xs.candidates == 0)
        pu_remark(opt, "overlap: no exchanges, weight gathers or gradient reductions to overlap");
    else if (o.gathers + o.reductions > 0)
        pu_remark(opt,
                  "overlap: %d of %d weight gather(s) started early (%.2f MiB), %d of %d gradient "
                  "reduction(s) waited late; at most %.2f MiB kept live for it%s; predicted step %.3f ms -> "
                  "%.3f ms",
                  o.gathers_moved, o.gathers, o.gathered_bytes / 1048576.0, o.reductions_moved, o.reductions,
                  o.max_extra / 1048576.0, o.kept_mem ? ", some kept blocking by the device memory left" : "",
                  before * 1e3, after * 1e3);
    free(o.sec);
    free(o.comp);
    free(o.across);
    free(o.exchange);
    free(o.extra);
    return true;
}
