/* ir_verify_ops.c — per-op type and layout rules (rule 5 of ir/README.md).
 *
 * Shapes are global; a layout is the group sharding each dim (or whole).
 * Each check reports what it found and what the op needs, naming the value
 * and the dim, and the caller keeps going so every violation is listed. */
#include "ir_verify.h"

#include <string.h>

const ir_value *ir_vv(ir_vctx *c, int idx) { return &c->m->values[idx]; }

const char *ir_vgname(ir_vctx *c, int g) { return g >= 0 && g < c->m->ngroups ? c->m->groups[g].name : "?"; }

/* "input %x" or "result %y" for messages. */
const char *ir_vdesc(ir_vctx *c, const ir_value *v, char *buf, size_t n) {
    snprintf(buf, n, "%s %%%s", v->kind == IR_V_RESULT && v->def == c->op ? "result" : "input", v->name);
    return buf;
}

const char *ir_vtstr(ir_vctx *c, const ir_value *v, char *buf) {
    return ir_type_str(c->m, &v->type, buf, IR_TYPE_STR_MAX);
}

/* "sharded by @sp" or "whole" */
const char *ir_vshard_str(ir_vctx *c, int g, char *buf, size_t n) {
    if (g == -1)
        snprintf(buf, n, "whole");
    else
        snprintf(buf, n, "sharded by @%s", ir_vgname(c, g));
    return buf;
}

bool ir_vsame_type(ir_vctx *c, const ir_value *a, const ir_value *b) {
    if (ir_type_equal(&a->type, &b->type)) return true;
    char da[96], db[96], ta[IR_TYPE_STR_MAX], tb[IR_TYPE_STR_MAX];
    ir_verr(c, sup_noloc(), "%s has type %s, but must have the type of %s (%s)", ir_vdesc(c, b, db, sizeof db),
            ir_vtstr(c, b, tb), ir_vdesc(c, a, da, sizeof da), ir_vtstr(c, a, ta));
    return false;
}

bool ir_vwant_rank(ir_vctx *c, const ir_value *v, int rank, const char *shape) {
    if (v->type.rank == rank) return true;
    char d[96], t[IR_TYPE_STR_MAX];
    ir_verr(c, sup_noloc(), "%s must have rank %d %s, found %s", ir_vdesc(c, v, d, sizeof d), rank, shape,
            ir_vtstr(c, v, t));
    return false;
}

bool ir_vwant_dtype(ir_vctx *c, const ir_value *v, ir_dtype dt) {
    if (v->type.dtype == dt) return true;
    char d[96];
    ir_verr(c, sup_noloc(), "%s must have element type %s, found %s", ir_vdesc(c, v, d, sizeof d), ir_dtype_name(dt),
            ir_dtype_name(v->type.dtype));
    return false;
}

/* v.dims[d] == size, where `what` names the expected size */
bool ir_vwant_dim(ir_vctx *c, const ir_value *v, int d, int64_t size, const char *what) {
    if (v->type.dims[d] == size) return true;
    char ds[96];
    ir_verr(c, sup_noloc(), "%s dim %d has size %lld, but must equal %s (%lld)", ir_vdesc(c, v, ds, sizeof ds), d,
            (long long)v->type.dims[d], what, (long long)size);
    return false;
}

/* v.shard[d] == g, where `why` explains the rule (may be "") */
bool ir_vwant_shard(ir_vctx *c, const ir_value *v, int d, int g, const char *why) {
    if (v->type.shard[d] == g) return true;
    char ds[96], want[80], got[80];
    ir_vshard_str(c, g, want, sizeof want);
    if (g == -1) snprintf(want, sizeof want, "whole (unsharded)");
    ir_verr(c, sup_noloc(), "%s dim %d must be %s, but is %s%s", ir_vdesc(c, v, ds, sizeof ds), d, want,
            ir_vshard_str(c, v->type.shard[d], got, sizeof got), why);
    return false;
}

/* dims [from, to) of a and b agree in size and layout */
void ir_vsame_dims(ir_vctx *c, const ir_value *a, int from, int to, const ir_value *b, const char *why) {
    char what[160], da[96];
    for (int d = from; d < to; d++) {
        if (b->type.dims[d] != a->type.dims[d]) { /* described only for the report: formatting costs */
            snprintf(what, sizeof what, "%s dim %d", ir_vdesc(c, a, da, sizeof da), d);
            ir_vwant_dim(c, b, d, a->type.dims[d], what);
        }
        ir_vwant_shard(c, b, d, a->type.shard[d], why);
    }
}

/* Same rank and sizes, layouts may differ (gradients of params). */
void ir_vsame_shape(ir_vctx *c, const ir_value *a, const ir_value *b) {
    if (a->type.rank != b->type.rank) {
        char da[96], db[96], ta[IR_TYPE_STR_MAX], tb[IR_TYPE_STR_MAX];
        ir_verr(c, sup_noloc(), "%s has type %s, but must have the shape of %s (%s)", ir_vdesc(c, b, db, sizeof db),
                ir_vtstr(c, b, tb), ir_vdesc(c, a, da, sizeof da), ir_vtstr(c, a, ta));
        return;
    }
    char what[160], da[96];
    for (int d = 0; d < a->type.rank; d++) {
        if (b->type.dims[d] == a->type.dims[d]) continue; /* described only for the report */
        snprintf(what, sizeof what, "%s dim %d", ir_vdesc(c, a, da, sizeof da), d);
        ir_vwant_dim(c, b, d, a->type.dims[d], what);
    }
}

void ir_verify_seq_order(ir_vctx *c) {
    const ir_module *m = c->m;
    int64_t R = ir_config_int(m, "seq_ring", 0), S = ir_config_int(m, "seq_len", 0);
    if (R <= 1) return;
    c->op = -1;
    if (S > 0 && S % (2 * R))
        ir_verr(c, sup_noloc(), "config seq_ring = %lld: seq_len %lld does not divide into 2R = %lld zig-zag chunks",
                (long long)R, (long long)S, (long long)(2 * R));
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        c->op = i;
        int g = ir_op_group(op);
        if ((op->code == IR_RING_ATTENTION || op->code == IR_RING_ATTENTION_BWD) && g >= 0 && g < m->ngroups &&
            m->groups[g].set_size != R)
            ir_verr(c, sup_noloc(),
                    "runs over a ring of %d ranks, but config seq_ring = %lld orders the sequence "
                    "for a ring of %lld",
                    m->groups[g].set_size, (long long)R, (long long)R);
        if (op->code == IR_ATTENTION || op->code == IR_ATTENTION_BWD)
            ir_verr(c, sup_noloc(),
                    "masks by sequence index, but config seq_ring = %lld keeps the sequence in the "
                    "ring's zig-zag order (only ring_attention masks by position)",
                    (long long)R);
    }
    c->op = -1;
}

void ir_verify_accum_reads(ir_vctx *c, const ir_op *op) {
    for (int k = 0; k < op->nin; k++) {
        const ir_value *v = ir_vv(c, op->in[k]);
        if (v->kind != IR_V_ACCUM || (op->code == IR_ACCUMULATE && k == 0) || !strcmp(ir_op_phase(op), "opt")) continue;
        ir_verr(c, sup_noloc(),
                "reads the accumulator %%%s in phase '%s': it holds the whole step's gradient only "
                "in the apply phase ('phase = opt'), after every micro-step",
                v->name, ir_op_phase(op));
    }
}

void ir_verify_op_types(ir_vctx *c, const ir_op *op) {
    const ir_op_desc *d = ir_op_desc_of(op->code);
    if (d && d->verify) d->verify(c, op);
}
