/* pass_fuse_loss.c — the LM head's loss and its gradient in one op.
 *
 * Input: the step after ZeRO, with the loss as lower emits it: in the
 * forward `%loss.part = lm_head_loss %xf, %w, %targets`, at the start of
 * the backward `%d.xf, %d.w = lm_head_loss_bwd %xf, %w2, %targets`, where
 * %w2 is %w or ZeRO-3's second gather of the same parameter.
 *
 * Why: the loss ends the forward and its backward begins the backward;
 * nothing between them but the loss's all_reduce (and ZeRO-3's release and
 * re-gather of the head).  The CPU backward already forms every logit and
 * its row's log-sum-exp, so summing the loss there as well saves the
 * forward's logits GEMM: 2 N V D of the 8 N V D FLOPs the two ops take,
 * 10-26% of a real-vocabulary step's GEMM work (bench/results/step_torch).
 * With ZeRO-3 the head is gathered once instead of twice.
 *
 * Output: `%loss.part, %d.xf, %d.w = lm_head_loss_grad %xf, %w, %targets`
 * where the forward was, tagged like the backward (phase bwd: the
 * backward starts there).  The validation program still computes the
 * loss: it keeps the ops the loss is computed from, whatever their phase,
 * and the fused op runs its forward alone there (ir_forward_program,
 * ir_emit.forward_only).  The backward is gone, and so are a gather only
 * it read and that gather's frees.  The gradients live from the fused op
 * to their readers, which the memory plan sees; the loss's all_reduce
 * between them is a scalar.
 *
 * config fuse_loss = 0 (train.fuse_loss off) leaves the step unchanged, as
 * does a forward without its backward (a hand-written module). */
#include "pass_util.h"

#include <stdlib.h>
#include <string.h>

/* a and b hold the same weight: one value, or gathers of one parameter
 * over one group along one dim. */
static bool same_weight(const ir_module *m, int a, int b) {
    if (a == b) return true;
    int da = m->values[a].def, db = m->values[b].def;
    if (da < 0 || db < 0) return false;
    const ir_op *ga = &m->ops[da], *gb = &m->ops[db];
    return ga->code == IR_ALL_GATHER && gb->code == IR_ALL_GATHER && ga->in[0] == gb->in[0] &&
           ir_attr_int(ga, "dim", 0) == ir_attr_int(gb, "dim", 0) && ir_op_group(ga) == ir_op_group(gb);
}

/* The backward of the loss computed by op f: the first lm_head_loss_bwd
 * after it on the same x, weight, targets and variant, with no compute in
 * between (only collectives, frees and waits); -1 if none. */
static int backward_of(const ir_module *m, int f) {
    const ir_op *fw = &m->ops[f];
    for (int j = f + 1; j < m->nops; j++) {
        const ir_op *b = &m->ops[j];
        if (b->code == IR_LM_HEAD_LOSS_BWD && b->in[0] == fw->in[0] && b->in[2] == fw->in[2] &&
            ir_attr_int(b, "variant", 0) == ir_attr_int(fw, "variant", 0) && same_weight(m, fw->in[1], b->in[1]))
            return j;
        if (ir_op_desc_of(b->code)->kind == IR_K_COMPUTE) return -1;
    }
    return -1;
}

/* Removes the gather of v (the backward's own copy of the head) when the
 * backward at op b was its only reader besides frees. */
static void drop_own_gather(const ir_module *m, pass_edits *e, int v, int b) {
    int g = m->values[v].def;
    if (g < 0 || m->ops[g].code != IR_ALL_GATHER) return;
    for (int i = 0; i < m->nops; i++)
        if (i != b && m->ops[i].code != IR_FREE && pu_reads(&m->ops[i], v)) return;
    pass_edits_remove(e, g);
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].code == IR_FREE && pu_reads(&m->ops[i], v)) pass_edits_remove(e, i);
}

/* Op f's forward and op b's backward as one op at f, tagged like b. */
static void fuse(ir_module *m, pass_edits *e, int f, int b) {
    ir_op op = m->ops[f];
    op.code = IR_LM_HEAD_LOSS_GRAD;
    op.nout = 3;
    op.out[1] = m->ops[b].out[0];
    op.out[2] = m->ops[b].out[1];
    pu_tag_like(&op, &m->ops[b]); /* layer and phase replaced where they stand */
    if (m->ops[b].in[1] != op.in[1]) drop_own_gather(m, e, m->ops[b].in[1], b);
    /* The loss's all_reduce and ZeRO's release of the head, between the
     * two, now follow the backward's first op: they run in its phase, so
     * that the backward's early collectives may start under the fused op
     * (pass_overlap.c stops at a change of phase). */
    for (int i = f + 1; i < b; i++)
        if (!strcmp(ir_op_phase(&m->ops[i]), "fwd")) pu_tag_like(&m->ops[i], &m->ops[b]);
    pass_insert_before(e, f, &op);
    pass_edits_remove(e, f);
    pass_edits_remove(e, b);
}

bool pass_fuse_loss(ir_module *m, const pass_options *opt) {
    if (ir_config_int(m, "fuse_loss", 1) == 0) {
        pu_remark(opt, "fuse-loss: off (fuse_loss off); the loss and its gradient stay two ops");
        return true;
    }
    pass_edits e = {0};
    int fused = 0, alone = 0;
    for (int f = 0; f < m->nops; f++) {
        if (m->ops[f].code != IR_LM_HEAD_LOSS) continue;
        int b = backward_of(m, f);
        if (b < 0) {
            alone++;
            continue;
        }
        fuse(m, &e, f, b);
        fused++;
    }
    pass_edits_apply(m, &e);
    if (fused)
        pu_remark(opt, "fuse-loss: %d lm_head_loss + lm_head_loss_bwd pair(s) fused into lm_head_loss_grad", fused);
    if (alone)
        pu_remark(opt, "fuse-loss: %d lm_head_loss without its backward right after it (no compute between) left as is",
                  alone);
    return true;
}
