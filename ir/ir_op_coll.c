/* ir_op_coll.c — the collectives over a group (attr group = @G: all_to_all,
 * all_gather, reduce_scatter, all_reduce) and point-to-point send and recv.
 * Their layout rules: the input and output layouts of a collective differ
 * exactly as the collective says (rule 5 of ir/README.md). */
#include "ir_op.h"

#include <inttypes.h>

/* ---- verify (ir/README.md rule 5) -------------------------------------------- */

/* An integer attr in [0, rank); -1 (reported) when missing or out of range. */
static int dim_attr(ir_vctx *c, const ir_op *op, const char *key, int rank) {
    const ir_attr *a = ir_attr_get(op, key);
    if (!a || a->kind != IR_A_INT) {
        ir_verr(c, sup_noloc(), "needs an integer '%s' attribute", key);
        return -1;
    }
    if (a->i < 0 || a->i >= rank) {
        ir_verr(c, sup_noloc(), "%s = %lld is outside the dims 0..%d of its operand", key, (long long)a->i, rank - 1);
        return -1;
    }
    return (int)a->i;
}

/* fanout / fanin: integer >= 1, default 1. */
static int64_t factor_attr(ir_vctx *c, const ir_op *op, const char *key) {
    const ir_attr *a = ir_attr_get(op, key);
    if (!a) return 1;
    if (a->kind != IR_A_INT || a->i < 1) {
        ir_verr(c, sup_noloc(), "'%s' must be an integer of at least 1", key);
        return 1;
    }
    return a->i;
}

/* Same dtype and rank; false (reported) otherwise. */
static bool same_kind(ir_vctx *c, const ir_value *x, const ir_value *y) {
    if (x->type.dtype == y->type.dtype && x->type.rank == y->type.rank) return true;
    char dx[96], dy[96], tx[IR_TYPE_STR_MAX], ty[IR_TYPE_STR_MAX];
    ir_verr(c, sup_noloc(), "%s (%s) and %s (%s) must have the same element type and rank",
            ir_vdesc(c, x, dx, sizeof dx), ir_vtstr(c, x, tx), ir_vdesc(c, y, dy, sizeof dy), ir_vtstr(c, y, ty));
    return false;
}

/* Dims other than `a` and `b` are equal in size and layout. */
static void same_other_dims(ir_vctx *c, const ir_value *x, const ir_value *y, int a, int b) {
    char what[160], d[96];
    for (int i = 0; i < x->type.rank; i++) {
        if (i == a || i == b) continue;
        if (y->type.dims[i] != x->type.dims[i]) { /* described only for the report */
            snprintf(what, sizeof what, "%s dim %d", ir_vdesc(c, x, d, sizeof d), i);
            ir_vwant_dim(c, y, i, x->type.dims[i], what);
        }
        ir_vwant_shard(c, y, i, x->type.shard[i], " (a collective changes only the dims it names)");
        if (x->type.unit[i] != y->type.unit[i])
            ir_verr(c, sup_noloc(),
                    "%s has split unit %lld, but %%%s dim %d has %lld (a collective changes only the "
                    "dims it names)",
                    what, (long long)x->type.unit[i], y->name, i, (long long)y->type.unit[i]);
    }
}

/* big.dims[d] is small.dims[d] or F times it. */
static void want_ratio(ir_vctx *c, const ir_value *small, const ir_value *big, int d, int64_t f, const char *attr) {
    int64_t s = small->type.dims[d], b = big->type.dims[d];
    if (b == s || (f > 1 && b == f * s)) return;
    char ds[96], db[96];
    if (f > 1)
        ir_verr(c, sup_noloc(), "%s dim %d has size %lld, but must equal %s dim %d (%lld) or %s = %lld times it (%lld)",
                ir_vdesc(c, big, db, sizeof db), d, (long long)b, ir_vdesc(c, small, ds, sizeof ds), d, (long long)s,
                attr, (long long)f, (long long)(f * s));
    else
        ir_verr(c, sup_noloc(), "%s dim %d has size %lld, but must equal %s dim %d (%lld)",
                ir_vdesc(c, big, db, sizeof db), d, (long long)b, ir_vdesc(c, small, ds, sizeof ds), d, (long long)s);
}

/* The shard of dim d on the gathered side is `from` and on the scattered
 * side `to`: `to` = `from` x g (from = -1: to = g).  For the concat dim from
 * is x's group and to y's; for the split dim, y's and x's (ir/README.md,
 * nested all_to_all). */
static void want_nested(ir_vctx *c, const ir_value *coarse, const ir_value *fine, int d, int g, bool concat) {
    int outer = coarse->type.shard[d], whole = fine->type.shard[d];
    if (whole == g && outer == -1) return;
    if (whole >= 0 && outer >= 0 && ir_group_nested(c->m, whole, outer, g)) return;
    const ir_value *x = concat ? fine : coarse, *y = concat ? coarse : fine;
    char dx[96], dy[96], sx[80], sy[80];
    const char *gn = ir_vgname(c, g);
    ir_verr(c, sup_noloc(),
            "%s dim %d: %s is %s and %s is %s, but an all_to_all over @%s takes it from %s to %s "
            "(or, nested, from %s to %s with G x @%s a product group, ir_group_nested)",
            concat ? "concat" : "split", d, ir_vdesc(c, x, dx, sizeof dx),
            ir_vshard_str(c, x->type.shard[d], sx, sizeof sx), ir_vdesc(c, y, dy, sizeof dy),
            ir_vshard_str(c, y->type.shard[d], sy, sizeof sy), gn, concat ? "sharded by it" : "whole",
            concat ? "whole" : "sharded by it", concat ? "G x it" : "G", concat ? "G" : "G x it", gn);
}

/* RoPE done by the exchange (pass fuse-rope): bit k of attr rope rotates
 * pair k's operand as it is packed, bit k of rope_bwd rotates its result
 * back as it is unpacked.  The rotated side is [b,s,H,Dh], Dh even and
 * whole, exchanged seq -> heads (split 2, concat 1) or back (split 1,
 * concat 2), and every rotated side of one exchange has one b and s, as
 * the runtime takes one slice's positions for them all. */
static void check_rope(ir_vctx *c, const ir_op *op, int split, int concat) {
    int64_t fwd = ir_attr_int(op, "rope", 0), bwd = ir_attr_int(op, "rope_bwd", 0), all = (1 << op->nin) - 1;
    if (!fwd && !bwd) return;
    if (fwd < 0 || bwd < 0 || (fwd & ~all) || (bwd & ~all) || (fwd && bwd)) {
        ir_verr(c, sup_noloc(),
                "rope = %" PRId64 ", rope_bwd = %" PRId64 ": each is a mask of this exchange's %d pair(s) "
                "(bit k: pair k), and one exchange rotates one way",
                fwd, bwd, op->nin);
        return;
    }
    if (fwd ? split != 2 || concat != 1 : split != 1 || concat != 2) {
        ir_verr(c, sup_noloc(), "%s rotates [b,s,H,Dh] values exchanged %s, not split %d, concat %d",
                fwd ? "rope" : "rope_bwd",
                fwd ? "seq -> heads (split 2, concat 1)" : "heads -> seq (split 1, concat 2)", split, concat);
        return;
    }
    const ir_value *first = NULL;
    for (int k = 0; k < op->nin; k++) {
        if (!((fwd | bwd) >> k & 1)) continue;
        const ir_value *v = ir_vv(c, fwd ? op->in[k] : op->out[k]);
        if (v->type.rank != 4 || v->type.dims[3] % 2 || v->type.shard[3] >= 0)
            ir_verr(c, sup_noloc(), "%%%s is rotated by the exchange, so it must be [b,s,H,Dh] with Dh even and whole",
                    v->name);
        else if (first && (v->type.dims[0] != first->type.dims[0] || v->type.dims[1] != first->type.dims[1] ||
                           v->type.shard[0] != first->type.shard[0] || v->type.shard[1] != first->type.shard[1]))
            ir_verr(c, sup_noloc(),
                    "%%%s and %%%s are rotated by one exchange, so they need one batch and sequence "
                    "layout",
                    first->name, v->name);
        first = first ? first : v;
    }
}

/* all_to_all x_i -> y_i over g: concat dim goes from sharded by g to whole,
 * split dim from whole to sharded by g; or, nested, from G x g to G and from
 * G to G x g. */
static void check_all_to_all(ir_vctx *c, const ir_op *op, int g) {
    if (op->nin != op->nout) {
        ir_verr(c, sup_noloc(), "has %d inputs but %d results (one result per input)", op->nin, op->nout);
        return;
    }
    int rank = ir_vv(c, op->in[0])->type.rank;
    int split = dim_attr(c, op, "split", rank), concat = dim_attr(c, op, "concat", rank);
    int64_t fanout = factor_attr(c, op, "fanout"), fanin = factor_attr(c, op, "fanin");
    if (fanout > 1 && fanin > 1) ir_verr(c, sup_noloc(), "fanout and fanin cannot both be greater than 1");
    if (split >= 0 && split == concat) ir_verr(c, sup_noloc(), "split and concat are the same dim (%d)", split);
    if (split < 0 || concat < 0 || split == concat || g < 0) return;
    check_rope(c, op, split, concat);
    for (int i = 0; i < op->nin; i++) {
        const ir_value *x = ir_vv(c, op->in[i]), *y = ir_vv(c, op->out[i]);
        if (!same_kind(c, x, y)) continue;
        if (x->type.rank != rank) {
            ir_verr(c, sup_noloc(),
                    "input %%%s has rank %d, but split and concat were checked against rank %d "
                    "(all operands of one all_to_all have the same rank)",
                    x->name, x->type.rank, rank);
            continue;
        }
        want_nested(c, y, x, concat, g, true);
        if ((y->type.unit[split] != 0 && fanout > 1) || (x->type.unit[concat] != 0 && fanin > 1))
            ir_verr(c, sup_noloc(), "pair %%%s -> %%%s: an uneven split cannot be combined with fanout/fanin", x->name,
                    y->name);
        bool nested = x->type.shard[split] >= 0 || y->type.shard[concat] >= 0;
        if (nested && (y->type.unit[split] != 0 || x->type.unit[concat] != 0))
            ir_verr(c, sup_noloc(), "pair %%%s -> %%%s: a nested all_to_all splits evenly (no uneven units)", x->name,
                    y->name);
        want_nested(c, x, y, split, g, false);
        want_ratio(c, x, y, split, fanout, "fanout");
        want_ratio(c, y, x, concat, fanin, "fanin");
        same_other_dims(c, x, y, split, concat);
    }
}

/* all_gather (whole_after) / reduce_scatter (!whole_after) on dim d. */
static void check_gather_scatter(ir_vctx *c, const ir_op *op, int g, bool gather) {
    const ir_value *x = ir_vv(c, op->in[0]), *y = ir_vv(c, op->out[0]);
    int d = dim_attr(c, op, "dim", x->type.rank);
    if (!same_kind(c, x, y) || d < 0 || g < 0) return;
    const char *name = gather ? "all_gather" : "reduce_scatter";
    char why[80];
    snprintf(why, sizeof why, " (the dim the %s works on)", name);
    /* nested: the sharded side by W = O x g, the other by O (ir/README.md) */
    const ir_value *part = gather ? x : y, *more = gather ? y : x;
    int W = part->type.shard[d], O = more->type.shard[d];
    bool both = O >= 0 && W >= 0 && O < c->m->ngroups && W < c->m->ngroups && W != g;
    if (both && !ir_group_nested(c->m, W, O, g)) {
        const ir_group *G = c->m->groups;
        ir_verr(c, sup_noloc(),
                "dim %d: %s %%%s is sharded by @%s and %s %%%s by @%s: a nested %s over @%s needs "
                "@%s = @%s x @%s (each set of @%s, in order, runs of @%s's sets)",
                d, gather ? "input" : "result", part->name, G[W].name, gather ? "result" : "input", more->name,
                G[O].name, name, G[g].name, G[W].name, G[O].name, G[g].name, G[W].name, G[g].name);
    } else if (!both) {
        ir_vwant_shard(c, x, d, gather ? g : -1, why);
        ir_vwant_shard(c, y, d, gather ? -1 : g, why);
    }
    if (y->type.dims[d] != x->type.dims[d]) { /* described only for the report */
        char what[160], ds[96];
        snprintf(what, sizeof what, "%s dim %d", ir_vdesc(c, x, ds, sizeof ds), d);
        ir_vwant_dim(c, y, d, x->type.dims[d], what);
    }
    same_other_dims(c, x, y, d, d);
}

/* The group attr's index, -1 when it names no group (reported with the
 * attributes). */
static int coll_group(ir_vctx *c, const ir_op *op) {
    int g = ir_op_group(op);
    return g >= c->m->ngroups ? -1 : g;
}

static void verify_all_to_all(ir_vctx *c, const ir_op *op) { check_all_to_all(c, op, coll_group(c, op)); }
static void verify_all_gather(ir_vctx *c, const ir_op *op) { check_gather_scatter(c, op, coll_group(c, op), true); }
static void verify_reduce_scatter(ir_vctx *c, const ir_op *op) {
    check_gather_scatter(c, op, coll_group(c, op), false);
}
static void verify_all_reduce(ir_vctx *c, const ir_op *op) {
    ir_vsame_type(c, ir_vv(c, op->in[0]), ir_vv(c, op->out[0]));
}

/* ---- staging and kernel workspace (ir_mem.c) --------------------------------------- */

/* Product of the local dims of v before dim d (the runtime's "outer" count:
 * a gather or scatter along an inner dim needs a staging copy). */
static int64_t outer_elems(const ir_module *m, int v, int d) {
    int64_t o = 1;
    for (int i = 0; i < d && i < m->values[v].type.rank; i++) o *= ir_type_max_local_dim(m, &m->values[v].type, i);
    return o;
}

/* How many times pair k's operand is sent (fanout) or its result received
 * (fanin): the ratio of its split (concat) dim's sizes, as the runtime
 * reads it (rt_a2a_plan): a pair that does not grow, q beside the fanned-
 * out k and v, is sent once. */
static int64_t pair_fan(const ir_module *m, const ir_op *op, int k, bool send) {
    int d = (int)ir_attr_int(op, send ? "split" : "concat", -1);
    const ir_type *x = &m->values[op->in[k]].type, *y = &m->values[op->out[k]].type;
    if (ir_attr_int(op, send ? "fanout" : "fanin", 1) <= 1 || d < 0 || d >= x->rank || d >= y->rank) return 1;
    int64_t a = send ? y->dims[d] : x->dims[d], b = send ? x->dims[d] : y->dims[d];
    return b > 0 && a > b ? a / b : 1;
}

/* runtime/cpu/rt_comm.c packs all the pairs' inputs (each x its fanout) to
 * send and receives all outputs (each x its fanin). */
static void staging_all_to_all(const ir_module *m, const ir_op *op, int64_t e[2]) {
    for (int k = 0; k < op->nin && k < op->nout; k++) {
        e[0] += ir_op_local_elems(m, op->in[k]) * pair_fan(m, op, k, true);
        e[1] += ir_op_local_elems(m, op->out[k]) * pair_fan(m, op, k, false);
    }
}

/* A gather along an inner dim stages the gathered side. */
static void staging_all_gather(const ir_module *m, const ir_op *op, int64_t e[2]) {
    if (op->nin == 1 && op->nout == 1 && outer_elems(m, op->in[0], (int)ir_attr_int(op, "dim", 0)) > 1)
        e[0] = ir_op_local_elems(m, op->out[0]);
}

/* A scatter along an inner dim stages the whole side. */
static void staging_reduce_scatter(const ir_module *m, const ir_op *op, int64_t e[2]) {
    if (op->nin == 1 && op->nout == 1 && outer_elems(m, op->out[0], (int)ir_attr_int(op, "dim", 0)) > 1)
        e[0] = ir_op_local_elems(m, op->in[0]);
}

/* CUDA: the same staging in bf16, in device workspaces of its own. */
/* The first value an exchange rotates (attr rope or rope_bwd), or NULL. */
static const ir_value *rotated(const ir_module *m, const ir_op *op) {
    int64_t fwd = ir_attr_int(op, "rope", 0), bwd = ir_attr_int(op, "rope_bwd", 0);
    for (int k = 0; k < op->nin && k < op->nout; k++)
        if ((fwd | bwd) >> k & 1) return &m->values[fwd ? op->in[k] : op->out[k]];
    return NULL;
}

static void ws_cuda_all_to_all(const ir_module *m, const ir_op *op, int64_t *w) {
    int64_t e[2] = {0, 0};
    staging_all_to_all(m, op, e);
    ir_ws_raise(&w[CM_WS_CUDA_SEND], 2 * e[0]);
    ir_ws_raise(&w[CM_WS_CUDA_RECV], 2 * e[1]);
    /* Rotating while it packs, the exchange takes RoPE's table of every
     * position 0 .. seq_len-1 and the positions: with packed documents the
     * slice's (b x s, uploaded), else the cached sequence order (seq_len),
     * besides what the rope kernel it runs after a summed unpack takes. */
    const ir_value *v = rotated(m, op);
    if (!v || v->type.rank != 4) return;
    ir_ws_cuda_rope_of(m, op, v, w);
    int64_t S = ir_op_config_int(m, op, "seq_len", 0);
    ir_ws_raise(&w[CM_WS_CUDA_ROPE], 4 * S * v->type.dims[3] + 1);
    if (ir_config_int(m, "documents", 0) != 0)
        ir_ws_raise(&w[CM_WS_CUDA_DOC],
                    8 * ir_type_max_local_dim(m, &v->type, 0) * ir_type_max_local_dim(m, &v->type, 1));
    else
        ir_ws_raise(&w[CM_WS_CUDA_POS], 8 * S);
}

/* The CPU exchange rotates with the rope kernels' own cached table. */
static void ws_cpu_all_to_all(const ir_module *m, const ir_op *op, int64_t *w) {
    const ir_value *v = rotated(m, op);
    if (v) ir_ws_cpu_rope_of(m, op, v, w);
}

static void ws_cuda_all_gather(const ir_module *m, const ir_op *op, int64_t *w) {
    int64_t e[2] = {0, 0};
    staging_all_gather(m, op, e);
    ir_ws_raise(&w[CM_WS_CUDA_COMM], 2 * e[0]);
}

static void ws_cuda_reduce_scatter(const ir_module *m, const ir_op *op, int64_t *w) {
    int64_t e[2] = {0, 0};
    staging_reduce_scatter(m, op, e);
    ir_ws_raise(&w[CM_WS_CUDA_COMM], 2 * e[0]);
}

/* ---- runtime call (codegen) ------------------------------------------------------- */

/* The group attr as a G_ constant; false (reported) when absent. */
static bool emit_group_arg(ir_emit *e) {
    int g = ir_op_group(e->op);
    if (g < 0 || g >= e->m->ngroups) {
        ir_emit_fail(e, "no 'group = @G' attribute naming the process group");
        return false;
    }
    e->group(e, g);
    return true;
}

static bool int_attr(ir_emit *e, const char *key, int64_t *v) {
    const ir_attr *a = ir_attr_get(e->op, key);
    if (a && a->kind == IR_A_INT) {
        *v = a->i;
        return true;
    }
    ir_emit_fail(e, "needs an integer '%s' attribute", key);
    return false;
}

/* An exchange that rotates (fuse-rope) calls rt_all_to_all_rope(_start)
 * with the pairs it rotates and the rotated slice's row0, pos0 and theta,
 * as rt_rope would get them (emit_rope). */
static void emit_all_to_all(ir_emit *e) {
    int64_t split, concat, rope = ir_attr_int(e->op, "rope", 0), rope_bwd = ir_attr_int(e->op, "rope_bwd", 0);
    const ir_value *v = rotated(e->m, e->op);
    if (v)
        e->call(e, ir_op_async(e->op) ? "rt_all_to_all_rope_start" : "rt_all_to_all_rope");
    else
        ir_emit_call(e);
    if (!emit_group_arg(e) || !int_attr(e, "split", &split) || !int_attr(e, "concat", &concat)) return;
    ir_emit_int(e, split);
    ir_emit_int(e, concat);
    ir_emit_int(e, ir_attr_int(e->op, "fanout", 1));
    ir_emit_int(e, ir_attr_int(e->op, "fanin", 1));
    ir_emit_int(e, e->op->nin);
    e->values(e, e->op->in, e->op->nin);
    e->values(e, e->op->out, e->op->nout);
    if (v) {
        ir_emit_int(e, rope);
        ir_emit_int(e, rope_bwd);
        ir_emit_row0(e, v);
        if (v->type.shard[1] >= 0)
            e->group_pos(e, v->type.shard[1], ir_type_max_local_dim(e->m, &v->type, 1));
        else
            ir_emit_int(e, 0);
        ir_emit_dbl(e, ir_emit_attr_or_config(e, "theta", "rope_theta"));
    }
    ir_emit_end(e);
}

/* all_gather / reduce_scatter (has_dim: attr dim), all_reduce. */
static void emit_collective(ir_emit *e, bool has_dim) {
    ir_emit_call(e);
    if (!emit_group_arg(e)) return;
    int64_t dim;
    if (has_dim) {
        if (!int_attr(e, "dim", &dim)) return;
        /* A started gather or reduce-scatter works in its operands' own
         * buffers (no staging copy outlives the call): the blocks of the
         * sharded side must need no interleaving. */
        int sharded = e->op->code == IR_ALL_GATHER ? e->op->in[0] : e->op->out[0];
        if (ir_op_async(e->op) && outer_elems(e->m, sharded, (int)dim) > 1) {
            ir_emit_fail(e, "a started all_gather or reduce_scatter (async = 1) must work on a dim with only "
                            "single entries before it (here a staging copy would be needed until the wait)");
            return;
        }
        ir_emit_int(e, dim);
    }
    ir_emit_val(e, ir_emit_in(e, 0));
    ir_emit_val(e, ir_emit_out(e, 0));
    ir_emit_end(e);
}

static void emit_gather_scatter(ir_emit *e) { emit_collective(e, true); }
static void emit_all_reduce(ir_emit *e) { emit_collective(e, false); }

static void emit_p2p(ir_emit *e, bool send) {
    int64_t peer;
    ir_emit_call(e);
    if (!emit_group_arg(e) || !int_attr(e, "peer", &peer)) return;
    ir_emit_int(e, peer);
    ir_emit_val(e, send ? ir_emit_in(e, 0) : ir_emit_out(e, 0));
    ir_emit_end(e);
}

static void emit_send(ir_emit *e) { emit_p2p(e, true); }
static void emit_recv(ir_emit *e) { emit_p2p(e, false); }

/* ---- descriptors ---------------------------------------------------------------- */

/* all_to_all: n inputs -> n outputs (fused exchange, e.g. q,k,v in one call).
 * attrs split=d (dim that becomes sharded), concat=d (dim that becomes whole),
 * fanout=F (default 1; >1: the split dim of size n is received as n*F
 * virtual heads, each real KV head sent once to each of the F ranks that
 * share it), fanin=F (reverse of fanout: the F partial gradients summed). */
const ir_op_desc ir_op_all_to_all = {
    .name = "all_to_all",
    .kind = IR_K_COLL,
    .min_in = 1,
    .max_in = 4,
    .min_out = 1,
    .max_out = 4,
    .verify = verify_all_to_all,
    .keeps_weight = true,
    .staging = staging_all_to_all,
    .ws_cpu = ws_cpu_all_to_all,
    .ws_cuda = ws_cuda_all_to_all,
    .comm = IR_COMM_ALL_TO_ALL,
    .rt_fn = "rt_all_to_all",
    .rt_start_fn = "rt_all_to_all_start",
    .emit = emit_all_to_all,
};

/* attr dim=d: the dim gathered */
/* Bytes one rank sends in a ring collective over P ranks. */
static double sent_all_gather(double in, int P) { return in * (P - 1); }           /* its piece, P-1 hops */
static double sent_reduce_scatter(double in, int P) { return in * (P - 1) / P; }   /* a 1/P chunk per hop */
static double sent_all_reduce(double in, int P) { return 2.0 * (P - 1) / P * in; } /* reduce-scatter + gather */

const ir_op_desc ir_op_all_gather = {
    .name = "all_gather",
    .kind = IR_K_COLL,
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_all_gather,
    .keeps_weight = true,
    .staging = staging_all_gather,
    .ws_cuda = ws_cuda_all_gather,
    .comm = IR_COMM_RING,
    .ring_latencies = 1,
    .ring_sent = sent_all_gather,
    .rt_fn = "rt_all_gather",
    .rt_start_fn = "rt_all_gather_start",
    .emit = emit_gather_scatter,
};

/* attr dim=d: the dim scattered (sum) */
const ir_op_desc ir_op_reduce_scatter = {
    .name = "reduce_scatter",
    .kind = IR_K_COLL,
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_reduce_scatter,
    .keeps_weight = true,
    .staging = staging_reduce_scatter,
    .ws_cuda = ws_cuda_reduce_scatter,
    .comm = IR_COMM_RING,
    .ring_latencies = 1,
    .ring_sent = sent_reduce_scatter,
    .rt_fn = "rt_reduce_scatter",
    .rt_start_fn = "rt_reduce_scatter_start",
    .emit = emit_gather_scatter,
};

/* sum */
const ir_op_desc ir_op_all_reduce = {
    .name = "all_reduce",
    .kind = IR_K_COLL,
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_all_reduce,
    .keeps_weight = true /* sums and reductions of weights stay weights */,
    .comm = IR_COMM_RING,
    .ring_latencies = 2 /* a reduce-scatter, then an all-gather */,
    .ring_sent = sent_all_reduce,
    .rt_fn = "rt_all_reduce",
    .rt_start_fn = "rt_all_reduce_start",
    .emit = emit_all_reduce,
};

/* attr peer=+r (group-relative offset); no type rule */
const ir_op_desc ir_op_send = {
    .name = "send",
    .kind = IR_K_P2P,
    .min_in = 1,
    .max_in = 1,
    .min_out = 0,
    .max_out = 0,
    .verify = NULL,
    .comm = IR_COMM_SEND,
    .rt_fn = "rt_send",
    .emit = emit_send,
};

/* attr peer=-r */
const ir_op_desc ir_op_recv = {
    .name = "recv",
    .kind = IR_K_P2P,
    .min_in = 0,
    .max_in = 0,
    .min_out = 1,
    .max_out = 1,
    .verify = NULL,
    .comm = IR_COMM_RECV,
    .rt_fn = "rt_recv",
    .emit = emit_recv,
};
