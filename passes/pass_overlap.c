/* pass_overlap.c — hide the weight gathers under compute (config `overlap`,
 * spec `train { overlap on }`).
 *
 * ZeRO places each all_gather of a weight right before the weight's first
 * use, so the step waits for every byte of it.  This pass starts such a
 * gather earlier, as a started collective (`async = 1`), and leaves a
 * `wait` on its result where the gather was:
 *
 *   %l1.wq.full = all_gather %l1.wq {…, async = 1}   <- moved up
 *   … layer 0's compute …
 *   wait %l1.wq.full                                 <- where it was
 *   %l1.q = linear %l1.h, %l1.wq.full
 *
 * How far up: far enough that the compute between start and wait, in the
 * cost model's times, covers the gather's own transfer time, and no
 * further, because the gathered copy is live (and holds memory) from its
 * start.  The walk back also stops at:
 *   - the previous moved gather's start: starts keep their order, so the
 *     gathers queue on the communication stream as they would have run;
 *   - an op of another phase: codegen runs phases apart (the validation
 *     forward is the fwd ops alone; with gradient accumulation the apply
 *     phase is its own function), so a gather is waited where it starts;
 *   - the memory left under the device limit (config device_mem, the mesh
 *     `memory`): the bytes of gathered copies started early and not yet
 *     reached never exceed device_mem minus the step's planned peak; with
 *     no room at all the gathers stay blocking, with a remark.
 * Only gathers of parameters whose blocks land in place (every dim before
 * the gathered one has one entry; the CPU runtime's start form) move.
 *
 * Results: the same collectives on the same bytes, so the step computes
 * bit for bit what the blocking schedule computes.  The memory plan keeps
 * the operand and the result live from the start to the wait (ir_mem_live).
 * Run after zero and recompute (it reads their gathers) and before memplan. */
#include "pass_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct ovctx {
    ir_module *m;
    double *sec;       /* per op: the cost model's seconds (comm or compute) */
    double *extra;     /* per op: bytes of early-started copies live across it */
    double headroom;   /* bytes under device_mem; INFINITY when unknown */
    int moved, kept_mem, candidates;
    double moved_bytes, max_inflight;
} ovctx;

static bool in_opt(const ir_op *op) { return strcmp(ir_op_phase(op), "opt") == 0; }

/* A gather this pass may start early: of a parameter, landing in place. */
static bool movable(const ir_module *m, const ir_op *op)
{
    if (op->code != IR_ALL_GATHER || ir_op_async(op) || op->nin != 1 || op->nout != 1 || in_opt(op))
        return false;
    const ir_value *w = &m->values[op->in[0]];
    int d = (int)ir_attr_int(op, "dim", -1);
    if (w->kind != IR_V_PARAM || d < 0 || d >= w->type.rank)
        return false;
    for (int i = 0; i < d; i++)
        if (ir_type_max_local_dim(m, &w->type, i) != 1)
            return false;
    return true;
}

/* Bytes of the gathered copy on one rank (f32 in both runtimes' buffers). */
static double copy_bytes(const ir_module *m, int v) { return 4.0 * (double)ir_type_local_elems(m, &m->values[v].type); }

/* Where the gather at u starts: the gap before op s (s <= u). */
static int choose_start(ovctx *o, int u, int floor_gap)
{
    const ir_module *m = o->m;
    double need = o->sec[u], covered = 0, bytes = copy_bytes(m, m->ops[u].out[0]);
    double worst = 0; /* the most extra bytes over [s, u) so far */
    int s = u;
    while (s > floor_gap && covered < need) {
        const ir_op *prev = &m->ops[s - 1];
        if (strcmp(ir_op_phase(prev), ir_op_phase(&m->ops[u])) != 0)
            break;
        double w = o->extra[s - 1] > worst ? o->extra[s - 1] : worst;
        if (w + bytes > o->headroom) {
            o->kept_mem += s == u;
            break;
        }
        worst = w;
        s--;
        if (ir_op_desc_of(prev->code)->comm == IR_COMM_NONE)
            covered += o->sec[s];
    }
    return s;
}

/* The device memory left under device_mem by the planned step (INFINITY
 * when the limit is unknown). */
static double mem_headroom(const ir_module *m, const pass_options *opt)
{
    const char *c = ir_config_get(m, "device_mem");
    double cap = c ? strtod(c, NULL) : 0;
    if (!(cap > 0))
        return INFINITY;
    pass_mem_report r;
    if (!pass_memory_report(m, &r))
        return 0;
    double left = cap - (double)r.peak_bytes;
    if (left <= 0)
        pu_remark(opt, "overlap: the step's planned peak (%.1f MiB) leaves nothing under the device's %.1f MiB: "
                  "the weight gathers stay blocking", (double)r.peak_bytes / 1048576.0, cap / 1048576.0);
    return left > 0 ? left : 0;
}

bool pass_overlap(ir_module *m, const pass_options *opt)
{
    if (ir_config_int(m, "overlap", 0) != 1)
        return true;
    if (pu_count_ops(m, IR_WAIT) > 0) {
        pu_remark(opt, "overlap: the step already has started collectives; left as it is");
        return true;
    }
    pass_cost_params cp = pass_cost_default_params(m);
    double before = pass_cost_estimate_time(m, &cp).step_s;
    ovctx o = {.m = m, .sec = sup_xcalloc((size_t)m->nops + 1, sizeof(double)),
               .extra = sup_xcalloc((size_t)m->nops + 1, sizeof(double))};
    for (int i = 0; i < m->nops; i++)
        o.sec[i] = pass_op_cost_of(m, &m->ops[i], &cp).seconds;
    o.headroom = mem_headroom(m, opt);
    if (o.headroom <= 0) {
        free(o.sec);
        free(o.extra);
        return true; /* said by mem_headroom: no room, nothing changes */
    }
    pass_edits edits = {0};
    int floor_gap = 0;
    for (int u = 0; u < m->nops; u++) {
        if (!movable(m, &m->ops[u]))
            continue;
        o.candidates++;
        int s = choose_start(&o, u, floor_gap);
        floor_gap = s;
        if (s == u)
            continue; /* nothing to hide it under */
        double b = copy_bytes(m, m->ops[u].out[0]);
        for (int i = s; i < u; i++) {
            o.extra[i] += b;
            if (o.extra[i] > o.max_inflight)
                o.max_inflight = o.extra[i];
        }
        /* async before the layer and phase, which print last; the layer of
         * where it now runs, so that the schedule's sections stay
         * contiguous (the phase is the same). */
        ir_op start = m->ops[u];
        ir_attr_remove(&start, "layer");
        ir_attr_remove(&start, "phase");
        ir_attr_set_int(&start, "async", 1);
        pu_tag_like(&start, &m->ops[s]);
        pass_insert_before(&edits, s, &start);
        ir_op wait = ir_op_make(IR_WAIT);
        ir_op_add_input(&wait, m->ops[u].out[0]);
        pu_tag_like(&wait, &m->ops[u]);
        m->ops[u] = wait; /* the gather's place: its first reader follows */
        o.moved++;
        o.moved_bytes += b;
    }
    pass_edits_apply(m, &edits);
    double after = pass_cost_estimate_time(m, &cp).step_s;
    if (o.candidates == 0)
        pu_remark(opt, "overlap: no weight gathers to start early (ZeRO gathers none)");
    else
        pu_remark(opt, "overlap: %d of %d weight gather(s) started early (%.2f MiB, at most %.2f MiB of gathered "
                  "copies in flight)%s; predicted step %.3f ms -> %.3f ms", o.moved, o.candidates,
                  o.moved_bytes / 1048576.0, o.max_inflight / 1048576.0,
                  o.kept_mem ? ", some kept blocking by the device memory left" : "", before * 1e3, after * 1e3);
    free(o.sec);
    free(o.extra);
    return true;
}
