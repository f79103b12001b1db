/* pass_fuse_elem.c — the residual adds fused into the norms next to them.
 *
 * Input: the step after ZeRO, with each decoder layer as lower emits it.
 * In the forward the residual stream is added, then normalised:
 *     %l.x1 = add %x, %l.attn
 *     %l.h2 = rmsnorm %l.x1, %l.mlp_norm
 * and in the backward each norm's gradient is added to the residual's:
 *     %d.l.x1.n, %d.l.mlp_norm = rmsnorm_bwd %d.l.h2, %l.x1, %l.mlp_norm
 *     %d.l.x1 = add %d.l.x2, %d.l.x1.n
 *
 * Why: both are memory-bound passes over a [tokens, hidden] row block.
 * Fused, the sum is normalised while its row is in cache (one read of x1
 * fewer), and the norm's gradient is never written to be read back by
 * the add (a write and two reads fewer, and one [tokens, hidden] buffer
 * fewer for the memory plan).  At real shapes the adds and norms were
 * 2.5% of a CPU step, and half of that is saved
 * (bench/results/step_torch/fused_elem).
 *
 * Output:
 *     %l.x1, %l.h2 = add_rmsnorm %x, %l.attn, %l.mlp_norm
 *     %d.l.x1, %d.l.mlp_norm = add_rmsnorm_bwd %d.l.h2, %l.x1, %l.mlp_norm, %d.l.x2
 * each where the norm was, with the norm's attributes.  The kernels compute
 * exactly what the two ops compute (runtime/include/basp_rt.h), so losses,
 * gradients and weights are bit for bit those of `fuse_elem off`.
 *
 * Rules, so that no value is read before it is defined or after it is
 * freed: the forward pair is fused when both ops are of one layer (the
 * recompute pass re-runs a layer's forward from what enters it, so a fused
 * op may not reach into the layer before) and nothing between them reads
 * the sum or frees an addend; the backward pair when the norm's gradient
 * has no reader but the add (and frees, which go with it) and the
 * residual's gradient is defined before the norm.
 * The final norm has no add before it in its layer, and the first layer's
 * attention-norm gradient is added like any other.
 *
 * config fuse_elem = 0 (train.fuse_elem off) leaves the step unchanged. */
#include "pass_util.h"

#include <stdlib.h>
#include <string.h>

/* A free of value v among ops (from, to). */
static bool freed_between(const ir_module *m, int v, int from, int to) {
    for (int i = from + 1; i < to; i++)
        if (m->ops[i].code == IR_FREE && pu_reads(&m->ops[i], v)) return true;
    return false;
}

/* Some op among (from, to) reads v. */
static bool read_between(const ir_module *m, int v, int from, int to) {
    for (int i = from + 1; i < to; i++)
        if (pu_reads(&m->ops[i], v)) return true;
    return false;
}

static bool same_place(const ir_op *a, const ir_op *b) {
    return ir_op_layer(a) == ir_op_layer(b) && ir_attr_int(a, "variant", 0) == ir_attr_int(b, "variant", 0) &&
           !strcmp(ir_op_phase(a), ir_op_phase(b));
}

/* The forward pair ending at rmsnorm r: the index of its add, or -1. */
static int forward_add(const ir_module *m, int r) {
    const ir_op *n = &m->ops[r];
    int s = n->in[0], a = m->values[s].def;
    if (a < 0 || a >= r || m->ops[a].code != IR_ADD || !same_place(&m->ops[a], n)) return -1;
    const ir_op *add = &m->ops[a];
    if (read_between(m, s, a, r) || freed_between(m, add->in[0], a, r) || freed_between(m, add->in[1], a, r)) return -1;
    return a;
}

/* `%s, %y = add_rmsnorm %a, %b, %w` at r in place of the add a and norm r. */
static void fuse_forward(ir_module *m, pass_edits *e, int a, int r) {
    ir_op op = m->ops[r];
    op.code = IR_ADD_RMSNORM;
    op.nin = 3;
    op.in[0] = m->ops[a].in[0];
    op.in[1] = m->ops[a].in[1];
    op.in[2] = m->ops[r].in[1];
    op.nout = 2;
    op.out[0] = m->ops[a].out[0];
    op.out[1] = m->ops[r].out[0];
    pass_insert_before(e, r, &op);
    pass_edits_remove(e, r);
    pass_edits_remove(e, a);
}

/* The backward pair starting at rmsnorm_bwd r: the index of the add that
 * is the only reader of its dx (frees aside), or -1. */
static int backward_add(const ir_module *m, const pu_uses *u, int r) {
    int dx = m->ops[r].out[0], a = u->reader[dx];
    if (u->nread[dx] != 1 || a <= r || m->ops[a].code != IR_ADD) return -1;
    const ir_op *add = &m->ops[a];
    int dr = add->in[0] == dx ? add->in[1] : add->in[0];
    if (dr == dx || m->values[dr].def >= r) return -1; /* (the add reads dr: it is not freed before) */
    return a;
}

/* `%ds, %dw = add_rmsnorm_bwd %dy, %s, %w, %dr` at r in place of the norm's
 * backward r and the add a; dx's free goes too. */
static void fuse_backward(ir_module *m, pass_edits *e, const pu_uses *u, int r, int a) {
    int dx = m->ops[r].out[0];
    const ir_op *add = &m->ops[a];
    ir_op op = m->ops[r];
    op.code = IR_ADD_RMSNORM_BWD;
    op.nin = 4;
    op.in[3] = add->in[0] == dx ? add->in[1] : add->in[0];
    op.out[0] = add->out[0];
    pass_insert_before(e, r, &op);
    pass_edits_remove(e, r);
    pass_edits_remove(e, a);
    if (u->freed[dx] >= 0) pass_edits_remove(e, u->freed[dx]);
}

bool pass_fuse_elem(ir_module *m, const pass_options *opt) {
    if (ir_config_int(m, "fuse_elem", 1) == 0) {
        pu_remark(opt, "fuse-elem: off (fuse_elem off); the residual adds and the norms stay separate ops");
        return true;
    }
    pass_edits e = {0};
    pu_uses u = pu_uses_of(m);
    int fwd = 0, bwd = 0;
    /* An add is fused at most once: a forward sum read by two norms (never
     * in a lowered step) pairs with the first. */
    bool *taken = sup_xcalloc((size_t)m->nops + 1, sizeof *taken);
    for (int r = 0; r < m->nops; r++) {
        int a;
        if (m->ops[r].code == IR_RMSNORM && (a = forward_add(m, r)) >= 0 && !taken[a]) {
            fuse_forward(m, &e, a, r);
            taken[a] = true;
            fwd++;
        } else if (m->ops[r].code == IR_RMSNORM_BWD && (a = backward_add(m, &u, r)) >= 0 && !taken[a]) {
            fuse_backward(m, &e, &u, r, a);
            taken[a] = true;
            bwd++;
        }
    }
    free(taken);
    pu_uses_free(&u);
    pass_edits_apply(m, &e);
    if (fwd + bwd)
        pu_remark(
            opt,
            "fuse-elem: %d add + rmsnorm pair(s) fused into add_rmsnorm, %d rmsnorm_bwd + add into add_rmsnorm_bwd",
            fwd, bwd);
    else
        pu_remark(opt, "fuse-elem: no residual add next to a norm");
    return true;
}
