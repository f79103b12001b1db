/* pass_overlap_sp.c — pass_overlap's share for the sequence-parallel
 * exchanges: a fused all_to_all of several tensors (Ulysses' q, k and v;
 * their gradients in the backward) is split so that part of it moves while
 * the step computes what does not need that part.
 *
 *   forward, "hoist": the started part leaves as soon as its operands exist
 *     %l0.k = linear …;  %l0.v = linear …;  %l0.kr = rope %l0.k
 *     %l0.kr.heads, %l0.v.heads = all_to_all %l0.kr, %l0.v {…, async = 1}
 *     %l0.q = linear …;  %l0.qr = rope %l0.q        <- hides the k/v exchange
 *     wait %l0.kr.heads, %l0.v.heads
 *     %l0.qr.heads = all_to_all %l0.qr {…}
 *   backward, "sink": the blocking part first, then the started part, then
 *     what needs only the blocking part (and its ancestors), then the wait:
 *     %d.l0.qr = all_to_all %d.l0.qr.heads {…}
 *     %d.l0.kr, %d.l0.v = all_to_all %d.l0.kr.heads, %d.l0.v.heads {…, async = 1}
 *     %d.l0.q = rope_bwd …;  … = linear_bwd %d.l0.q, …   <- hides it
 *     wait %d.l0.kr, %d.l0.v
 *     … the rest of the layer's backward, in its order
 *
 * Which part blocks and which way is the cost model's choice: for every
 * pair left blocking and both ways, the segment (the ops of the exchange's
 * layer and phase between it and the next exchange, ring step or layer
 * boundary) is timed on two streams, compute and communication, as
 * pass_streams does; the best saving wins, and none when splitting (one
 * more collective, one more latency) does not pay.  The blocking part comes
 * after the wait in a hoist and before the start in a sink, because a
 * started exchange holds the CPU runtime's staging areas until its wait
 * (the verifier's rule); a segment with another staged collective inside
 * the window is left alone.
 *
 * An exchange that sends across nodes is kept whole when ZeRO's
 * collectives cross nodes too: the inter-node link then carries the
 * gathers this pass starts early, and a started exchange only queues with
 * them.  Measured on the emulated 2 x 1 cluster (200 Mb/s, Ulysses over
 * the two nodes, ZeRO 3): split exchanges were exposed 20-25% less, but the
 * gathers' waits grew by as much or more (1.7-3.6x) and the step did not
 * get faster (0.94-1.00x); the two-stream model, one queue per rank, does
 * not see that the gathers in flight already fill the link.
 *
 * Only the order of ops changes, never what one computes: an op reads the
 * same operands either way, and a gradient's sum is an explicit add whose
 * operand order is unchanged, so results stay bit for bit. */
#include "pass_util.h"

#include <stdlib.h>
#include <string.h>

/* The ops a segment rewrite emits, in their new order: an index into the
 * module's ops, or one of the three new ops. */
enum { SP_BLOCK = -1, SP_START = -2, SP_WAIT = -3 };

typedef struct spplan {
    int x;        /* the exchange */
    int lo, hi;   /* the ops [lo, hi) the rewrite reorders (x inside) */
    bool sink;    /* false: hoist */
    int blocking; /* the pair left blocking */
    double gain;  /* predicted seconds saved */
    int *order;   /* hi - lo + 3 entries */
    int n;
} spplan;

/* A boundary for segments: an exchange, a ring's step or a point-to-point
 * transfer (everything but kernels and ZeRO's ring collectives). */
static bool barrier_op(const ir_op *op) {
    int c = ir_op_desc_of(op->code)->comm;
    return c != IR_COMM_NONE && c != IR_COMM_RING;
}

static bool same_section(const ir_op *a, const ir_op *b) {
    return ir_op_layer(a) == ir_op_layer(b) && strcmp(ir_op_phase(a), ir_op_phase(b)) == 0;
}

/* Compute (not a collective, nor bookkeeping: free, wait). */
static bool kernel(const ir_op *op) {
    const ir_op_desc *d = ir_op_desc_of(op->code);
    return d->comm == IR_COMM_NONE && d->kind != IR_K_MEM;
}

/* The exchange x with only pair b (blocking), or with every pair but b
 * (started); the pairs it rotates (fuse-rope's masks) renumbered. */
static ir_op part_of(const ir_op *x, int b, bool started) {
    ir_op p = *x;
    int64_t rope = ir_attr_int(x, "rope", 0), rope_bwd = ir_attr_int(x, "rope_bwd", 0), pr = 0, pb = 0;
    p.nin = p.nout = 0;
    for (int k = 0; k < x->nin; k++)
        if ((k == b) != started) {
            pr |= (rope >> k & 1) << p.nin;
            pb |= (rope_bwd >> k & 1) << p.nin;
            p.in[p.nin++] = x->in[k];
            p.out[p.nout++] = x->out[k];
        }
    const ir_attr *theta = ir_attr_get(x, "theta");
    bool rotates = rope || rope_bwd;
    if (rotates) { /* the part's own pairs, before async, layer and phase */
        ir_attr_remove(&p, "rope"), ir_attr_remove(&p, "rope_bwd"), ir_attr_remove(&p, "theta");
        ir_attr_remove(&p, "layer"), ir_attr_remove(&p, "phase");
        if (pr) ir_attr_set_int(&p, "rope", pr);
        if (pb) ir_attr_set_int(&p, "rope_bwd", pb);
        if ((pr || pb) && theta) p.attrs[p.nattrs++] = *theta;
    }
    if (started) {
        ir_attr_remove(&p, "layer");
        ir_attr_remove(&p, "phase");
        ir_attr_set_int(&p, "async", 1);
    }
    if (started || rotates) pu_tag_like(&p, x);
    return p;
}

typedef struct spctx {
    ir_module *m;
    const pass_cost_params *cp;
    double *sec; /* per op: the cost model's seconds */
    bool *comm;  /* per op: a collective */
    int *def;    /* per value: the defining op, -1 for none */
    char *mark;  /* per op, scratch: in the dependent / ancestor set */
} spctx;

/* Marks v on every op in [lo, hi) that op i reads from, transitively. */
static void mark_ancestors(spctx *c, int lo, int hi, int i, char v) {
    const ir_op *op = &c->m->ops[i];
    for (int k = 0; k < op->nin; k++) {
        int d = c->def[op->in[k]];
        if (d >= lo && d < hi && c->mark[d] != v) {
            c->mark[d] = v;
            mark_ancestors(c, lo, hi, d, v);
        }
    }
}

/* The two-stream time of an order (pass_streams' rules): compute waits
 * for a blocking collective; a started one runs on the communication
 * stream and the wait joins it. */
static double order_time(const spctx *c, const spplan *p, double t_block, double t_start) {
    double comp = 0, comm = 0, ready = 0;
    for (int j = 0; j < p->n; j++) {
        int o = p->order[j];
        if (o == SP_WAIT) {
            comp = ready > comp ? ready : comp;
            continue;
        }
        double s = o == SP_BLOCK ? t_block : o == SP_START ? t_start : c->sec[o];
        bool cm = o < 0 || c->comm[o];
        if (!cm) {
            comp += s;
            continue;
        }
        double t0 = comp > comm ? comp : comm;
        comm = t0 + s;
        if (o == SP_START)
            ready = comm;
        else
            comp = comm;
    }
    return comp;
}

/* Builds the order of one candidate; false when it cannot be had (nothing
 * to hide under, or a staged collective inside the window). */
static bool build_order(spctx *c, spplan *p) {
    ir_module *m = c->m;
    const ir_op *x = &m->ops[p->x];
    int lo = p->lo, hi = p->hi, n = 0, hidden = 0;
    memset(c->mark + lo, 0, (size_t)(hi - lo));
    if (!p->sink) {
        /* the started pairs' operands and their ancestors first */
        for (int k = 0; k < x->nin; k++) {
            int d = c->def[x->in[k]];
            if (k != p->blocking && d >= lo && d < p->x && !c->mark[d]) {
                c->mark[d] = 1;
                mark_ancestors(c, lo, p->x, d, 1);
            }
        }
        for (int i = lo; i < p->x; i++)
            if (c->mark[i]) p->order[n++] = i;
        p->order[n++] = SP_START;
        for (int i = lo; i < p->x; i++)
            if (!c->mark[i]) {
                if (ir_op_stages(m, &m->ops[i])) return false;
                hidden += kernel(&m->ops[i]);
                p->order[n++] = i;
            }
        p->order[n++] = SP_WAIT;
        p->order[n++] = SP_BLOCK;
    } else {
        /* mark 1: reads a started result, directly or through another op
         * of the segment; 2: a kernel that does not, and its ancestors
         * (never dependent ones, or it would be one): before the wait */
        for (int i = p->x + 1; i < hi; i++) {
            const ir_op *op = &m->ops[i];
            for (int k = 0; k < op->nin; k++) {
                int d = c->def[op->in[k]];
                bool started = d == p->x && op->in[k] != x->out[p->blocking];
                if (started || (d > p->x && d < hi && c->mark[d] == 1)) c->mark[i] = 1;
            }
        }
        for (int i = p->x + 1; i < hi; i++) {
            const ir_op *op = &m->ops[i];
            if (c->mark[i] || !kernel(op)) continue;
            c->mark[i] = 2;
            hidden++;
            mark_ancestors(c, p->x + 1, i, i, 2);
        }
        p->order[n++] = SP_BLOCK;
        p->order[n++] = SP_START;
        for (int i = p->x + 1; i < hi; i++)
            if (c->mark[i] == 2) {
                if (ir_op_stages(m, &m->ops[i])) return false;
                p->order[n++] = i;
            }
        p->order[n++] = SP_WAIT;
        for (int i = p->x + 1; i < hi; i++)
            if (c->mark[i] != 2) p->order[n++] = i;
    }
    p->n = n;
    return hidden > 0;
}

/* The segment a rewrite of exchange x may reorder: before it for a hoist
 * ([lo, x+1)), after it for a sink ([x, hi)), within its layer and phase
 * and up to the nearest boundary; `floor`: the end of the previous
 * rewrite's segment. */
static void segment(const ir_module *m, int x, int floor, bool sink, int *lo, int *hi) {
    const ir_op *xo = &m->ops[x];
    int a = x, b = x + 1;
    if (!sink)
        while (a > floor && same_section(&m->ops[a - 1], xo) && !barrier_op(&m->ops[a - 1])) a--;
    else
        while (b < m->nops && same_section(&m->ops[b], xo) && !barrier_op(&m->ops[b])) b++;
    *lo = a, *hi = b;
}

/* The best rewrite of exchange x (gain 0: none pays). */
static spplan best_plan(spctx *c, int x, int floor) {
    ir_module *m = c->m;
    const ir_op *xo = &m->ops[x];
    spplan best = {.x = x, .gain = 0};
    for (int sink = 0; sink < 2; sink++) {
        spplan p = {.x = x, .sink = sink};
        segment(m, x, floor, sink, &p.lo, &p.hi);
        p.order = sup_xmalloc(sizeof(int) * (size_t)(p.hi - p.lo + 3));
        double before = 0;
        for (int i = p.lo; i < p.hi; i++) before += c->sec[i];
        for (int b = 0; b < xo->nin; b++) {
            p.blocking = b;
            if (!build_order(c, &p)) continue;
            ir_op blk = part_of(xo, b, false), st = part_of(xo, b, true);
            double tb = pass_op_cost_of(m, &blk, c->cp).seconds, ts = pass_op_cost_of(m, &st, c->cp).seconds;
            p.gain = before - order_time(c, &p, tb, ts);
            if (p.gain > best.gain * (1 + 1e-9) + 1e-9) {
                free(best.order);
                best = p;
                best.order = sup_xmalloc(sizeof(int) * (size_t)(p.hi - p.lo + 3));
                memcpy(best.order, p.order, sizeof(int) * (size_t)p.n);
            }
        }
        free(p.order);
    }
    return best;
}

/* Applies the plans (in schedule order, segments disjoint) in one pass. */
static void apply_plans(ir_module *m, const spplan *pl, int np) {
    ir_op *ops = sup_xmalloc(sizeof(ir_op) * (size_t)(m->nops + 2 * np));
    int n = 0, i = 0;
    for (int k = 0; k < np; k++) {
        const spplan *p = &pl[k];
        const ir_op *x = &m->ops[p->x];
        while (i < p->lo) ops[n++] = m->ops[i++];
        ir_op start = part_of(x, p->blocking, true), wait = ir_op_make(IR_WAIT);
        for (int j = 0; j < start.nout; j++) ir_op_add_input(&wait, start.out[j]);
        pu_tag_like(&wait, x);
        for (int j = 0; j < p->n; j++) {
            int o = p->order[j];
            ops[n++] = o == SP_BLOCK   ? part_of(x, p->blocking, false)
                       : o == SP_START ? start
                       : o == SP_WAIT  ? wait
                                       : m->ops[o];
        }
        i = p->hi;
    }
    while (i < m->nops) ops[n++] = m->ops[i++];
    free(m->ops);
    m->ops = ops;
    m->nops = m->capops = n;
    ir_renumber(m);
}

int pass_overlap_exchanges(ir_module *m, const pass_cost_params *cp, pass_ovsp_stats *st) {
    spctx c = {.m = m,
               .cp = cp,
               .sec = sup_xcalloc((size_t)m->nops + 1, sizeof(double)),
               .comm = sup_xcalloc((size_t)m->nops + 1, sizeof(bool)),
               .def = sup_xmalloc(sizeof(int) * ((size_t)m->nvalues + 1)),
               .mark = sup_xcalloc((size_t)m->nops + 1, 1)};
    for (int v = 0; v < m->nvalues; v++) c.def[v] = -1;
    bool zero_across = false; /* ZeRO's collectives (ring class) send across nodes */
    for (int i = 0; i < m->nops; i++) {
        pass_op_cost oc = pass_op_cost_of(m, &m->ops[i], cp);
        c.sec[i] = oc.seconds;
        c.comm[i] = oc.comm;
        /* A gather that the gathers' walk (pass_overlap.c, after this) will
         * start early runs off the critical path: the segments are timed
         * without it (timed in place, it would queue behind the started
         * exchange and hide nothing).  The walk's own predicate, so the
         * two cannot disagree about which gathers move; a shard fetched
         * for the gather moves with it. */
        int f;
        if (pass_overlap_movable_gather(m, i, &f)) {
            c.sec[i] = 0, c.comm[i] = false;
            if (f >= 0) c.sec[f] = 0, c.comm[f] = false;
        }
        zero_across |= ir_op_desc_of(m->ops[i].code)->comm == IR_COMM_RING && oc.comm &&
                       pass_op_traffic(m, &m->ops[i]).inter_bytes > 0;
        for (int k = 0; k < m->ops[i].nout; k++) c.def[m->ops[i].out[k]] = i;
    }
    spplan *pl = sup_xmalloc(sizeof(spplan) * ((size_t)m->nops + 1));
    int np = 0, floor = 0;
    *st = (pass_ovsp_stats){0};
    for (int x = 0; x < m->nops; x++) {
        const ir_op *op = &m->ops[x];
        if (ir_op_desc_of(op->code)->comm != IR_COMM_ALL_TO_ALL || op->nin < 2 || ir_op_async(op) ||
            strcmp(ir_op_phase(op), "opt") == 0)
            continue;
        st->candidates++;
        if (zero_across && pass_op_traffic(m, op).inter_bytes > 0) {
            st->link_kept++; /* the link is ZeRO's already (above) */
            continue;
        }
        spplan p = best_plan(&c, x, floor);
        if (p.gain <= 0) {
            free(p.order);
            continue;
        }
        st->hoisted += !p.sink;
        pl[np++] = p;
        floor = p.hi;
        x = p.hi - 1;
    }
    if (np > 0) apply_plans(m, pl, np);
    for (int k = 0; k < np; k++) free(pl[k].order);
    free(pl);
    free(c.sec);
    free(c.comm);
    free(c.def);
    free(c.mark);
    return np;
}
