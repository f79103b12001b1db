/* pass_fuse_rope.c — RoPE done by the sequence exchange's packing.
 *
 * Input: the step after ZeRO.  Under Ulysses each layer rotates q and k,
 * then trades the sequence shard for a head shard; the backward trades the
 * gradients back, then rotates them back:
 *     %l.qr = rope %l.q
 *     %l.kr = rope %l.k
 *     %l.qr.heads, %l.kr.heads, %l.v.heads = all_to_all %l.qr, %l.kr, %l.v {split = 2, concat = 1}
 *     …
 *     %d.l.qr, %d.l.kr, %d.l.v = all_to_all %d.l.qr.heads, … {split = 1, concat = 2}
 *     %d.l.q = rope_bwd %d.l.qr
 *     %d.l.k = rope_bwd %d.l.kr
 *
 * Why: a rotation is a memory-bound pass over q or k (read, write, read
 * again by the exchange's pack), and the pack already reads every head of
 * every token once to copy it into the send buffer.  Rotating the head as
 * it is copied (and, in the backward, as it is copied out of the receive
 * buffer) saves a write and a read of q and k per layer and direction, two
 * ops per layer and direction (their launches, on a GPU), and the buffers
 * %l.qr, %l.kr, %d.l.qr, %d.l.kr in the memory plan.
 *
 * Output: the exchange names the pairs it rotates and the base of the
 * angles; the rotations are gone:
 *     %l.qr.heads, %l.kr.heads, %l.v.heads = all_to_all %l.q, %l.k, %l.v {…, rope = 3, theta = 1e+04}
 *     %d.l.q, %d.l.k, %d.l.v = all_to_all %d.l.qr.heads, … {…, rope_bwd = 3, theta = 1e+04}
 * rope (rope_bwd): bit k set when pair k's operand is rotated as it is
 * packed (its result rotated back as it is unpacked).  The runtime
 * (rt_all_to_all_rope) rotates with the kernels' own table and arithmetic,
 * so losses, gradients and weights are bit for bit those of
 * `fuse_rope off`.
 *
 * Rules: a rotation is fused when the exchange is the only reader of its
 * result (frees aside, which go with it), forward, or when the rotation
 * back is the only reader of the exchange's result, backward; both ops of
 * one layer, phase and variant (the recompute pass re-runs a layer's
 * forward from what enters it); the exchange of the right way (seq ->
 * heads, split 2 and concat 1, forward; heads -> seq backward); and every
 * rotation of one exchange with one theta.  In the forward the rotation's
 * operand must not be freed before the exchange, which now reads it.
 *
 * config fuse_rope = 0 (train.fuse_rope off) leaves the step unchanged. */
#include "pass_util.h"

#include <stdlib.h>
#include <string.h>

static bool same_place(const ir_op *a, const ir_op *b) {
    return ir_op_layer(a) == ir_op_layer(b) && ir_attr_int(a, "variant", 0) == ir_attr_int(b, "variant", 0) &&
           !strcmp(ir_op_phase(a), ir_op_phase(b));
}

/* The exchange's way: forward (seq -> heads) or backward (heads -> seq). */
static bool exchange_way(const ir_op *x, bool fwd) {
    if (x->code != IR_ALL_TO_ALL) return false;
    int64_t split = ir_attr_int(x, "split", -1), concat = ir_attr_int(x, "concat", -1);
    return fwd ? split == 2 && concat == 1 : split == 1 && concat == 2;
}

/* A number attribute (int or float), else def. */
static double attr_num(const ir_op *op, const char *key, double def) {
    const ir_attr *a = ir_attr_get(op, key);
    if (a && a->kind == IR_A_FLOAT) return a->f;
    if (a && a->kind == IR_A_INT) return (double)a->i;
    return def;
}

/* The module's rope_theta (the language's default when absent). */
static double config_theta(const ir_module *m) {
    const char *s = ir_config_get(m, "rope_theta");
    return s ? strtod(s, NULL) : 10000.0;
}

/* The rotation's theta (def: the module's), and whether the exchange's
 * rotations so far (its attr, or one fused earlier in this pass: want) use
 * another. */
static bool theta_agrees(const ir_op *r, double def, double *want) {
    double t = attr_num(r, "theta", def);
    if (*want >= 0 && *want != t) return false;
    *want = t;
    return true;
}

/* Pair k of exchange x whose side (in or out) is value v, -1 if none. */
static int pair_of(const ir_op *x, int v, bool in) {
    for (int k = 0; k < x->nin; k++)
        if ((in ? x->in[k] : x->out[k]) == v) return k;
    return -1;
}

/* An op among (from, to) frees v. */
static bool freed_between(const ir_module *m, int v, int from, int to) {
    for (int i = from + 1; i < to; i++)
        if (m->ops[i].code == IR_FREE && pu_reads(&m->ops[i], v)) return true;
    return false;
}

typedef struct fr_state {
    ir_op *x;      /* per op: the exchange as rewritten so far (copies) */
    bool *changed; /* per op: x[i] differs from the module's */
    double *theta; /* per op: its rotations' theta, -1 none yet */
    double theta0; /* the module's rope_theta */
    int fwd, bwd;  /* rotations fused */
} fr_state;

/* rope r at op index i: fused into the exchange reading its result. */
static void fuse_forward(const ir_module *m, const pu_uses *u, fr_state *st, pass_edits *e, int i) {
    const ir_op *r = &m->ops[i];
    int y = r->out[0], a = u->reader[y];
    if (u->nread[y] != 1 || a <= i || !exchange_way(&m->ops[a], true) || !same_place(r, &m->ops[a])) return;
    int k = pair_of(&st->x[a], y, true);
    if (k < 0 || freed_between(m, r->in[0], i, a) || !theta_agrees(r, st->theta0, &st->theta[a])) return;
    st->x[a].in[k] = r->in[0];
    ir_attr_set_int(&st->x[a], "rope", ir_attr_int(&st->x[a], "rope", 0) | (1 << k));
    st->changed[a] = true;
    pass_edits_remove(e, i);
    if (u->freed[y] >= 0) pass_edits_remove(e, u->freed[y]);
    st->fwd++;
}

/* rope_bwd r at op index i: fused into the exchange defining its operand. */
static void fuse_backward(const ir_module *m, const pu_uses *u, fr_state *st, pass_edits *e, int i) {
    const ir_op *r = &m->ops[i];
    int dy = r->in[0], a = u->def[dy];
    if (a < 0 || a >= i || u->nread[dy] != 1 || !exchange_way(&m->ops[a], false) || !same_place(r, &m->ops[a])) return;
    int k = pair_of(&st->x[a], dy, false);
    if (k < 0 || !theta_agrees(r, st->theta0, &st->theta[a])) return;
    st->x[a].out[k] = r->out[0];
    ir_attr_set_int(&st->x[a], "rope_bwd", ir_attr_int(&st->x[a], "rope_bwd", 0) | (1 << k));
    st->changed[a] = true;
    pass_edits_remove(e, i);
    if (u->freed[dy] >= 0) pass_edits_remove(e, u->freed[dy]);
    st->bwd++;
}

/* The layer and phase printed last again, after the new attributes. */
static void retag(ir_op *x) {
    int layer = ir_op_layer(x);
    const char *ph = ir_op_phase(x);
    if (!*ph) return;
    ir_attr_remove(x, "layer"), ir_attr_remove(x, "phase");
    ir_op_tag(x, layer, ph);
}

bool pass_fuse_rope(ir_module *m, const pass_options *opt) {
    if (ir_config_int(m, "fuse_rope", 1) == 0) {
        pu_remark(opt, "fuse-rope: off (fuse_rope off); the rotations stay separate ops");
        return true;
    }
    pu_uses u = pu_uses_of(m);
    fr_state st = {sup_xmalloc(sizeof(ir_op) * ((size_t)m->nops + 1)),
                   sup_xcalloc((size_t)m->nops + 1, sizeof(bool)),
                   sup_xmalloc(sizeof(double) * ((size_t)m->nops + 1)),
                   config_theta(m),
                   0,
                   0};
    for (int i = 0; i < m->nops; i++) {
        st.x[i] = m->ops[i];
        st.theta[i] = -1;
        if (m->ops[i].code == IR_ALL_TO_ALL && (ir_attr_get(&m->ops[i], "rope") || ir_attr_get(&m->ops[i], "rope_bwd")))
            st.theta[i] = attr_num(&m->ops[i], "theta", st.theta0);
    }
    pass_edits e = {0};
    for (int i = 0; i < m->nops; i++) {
        if (m->ops[i].code == IR_ROPE)
            fuse_forward(m, &u, &st, &e, i);
        else if (m->ops[i].code == IR_ROPE_BWD)
            fuse_backward(m, &u, &st, &e, i);
    }
    for (int a = 0; a < m->nops; a++) {
        if (!st.changed[a]) continue;
        ir_attr_set_float(&st.x[a], "theta", st.theta[a]);
        retag(&st.x[a]);
        pass_insert_before(&e, a, &st.x[a]);
        pass_edits_remove(&e, a);
    }
    pass_edits_apply(m, &e);
    if (st.fwd + st.bwd)
        pu_remark(opt, "fuse-rope: %d rope and %d rope_bwd fused into the all_to_alls next to them", st.fwd, st.bwd);
    else
        pu_remark(opt, "fuse-rope: no rotation next to a sequence exchange");
    free(st.x), free(st.changed), free(st.theta);
    pu_uses_free(&u);
    return true;
}
