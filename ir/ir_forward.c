/* ir_forward.c — the forward-only program of a training step: what a
 * validation pass runs.  It is the step's `phase = fwd` ops in schedule
 * order (ZeRO gathers and frees, sequence-parallel exchanges and ring
 * blocks included: the forward of every layout as the step runs it), with
 * no backward, no optimizer and no gradient reduction, plus the ops the
 * loss is computed from in any phase: the LM head's fused loss and
 * gradient (lm_head_loss_grad, passes/pass_fuse_loss.c) opens the
 * backward, and codegen emits its forward alone here.  Because it is a
 * prefix-closed subset of the step at the same buffer offsets, every value
 * live at one of its ops is live at the same op of the step: the step's
 * memory plan covers it, and it reuses the training arena.  Offloads
 * (train.offload) are left out: only the backward's fetches read their
 * host copies, so a validation pass would copy for nothing; the values
 * they read are still freed where the step frees them (codegen). */
#include "ir.h"

#include <stdlib.h>
#include <string.h>

/* need[i]: op i computes something the loss is computed from, outside the
 * apply phase (which runs once per optimizer step, not per forward). */
static bool *loss_ancestors(const ir_module *m, int loss) {
    bool *need = sup_xcalloc((size_t)m->nops + 1, sizeof *need);
    bool *want = sup_xcalloc((size_t)m->nvalues + 1, sizeof *want);
    if (loss >= 0 && loss < m->nvalues) want[loss] = true;
    for (int i = m->nops - 1; i >= 0; i--) {
        const ir_op *op = &m->ops[i];
        for (int k = 0; k < op->nout && !need[i]; k++) need[i] = want[op->out[k]];
        if (!need[i] || ir_op_desc_of(op->code)->kind == IR_K_OPT || !strcmp(ir_op_phase(op), "opt")) {
            need[i] = false;
            continue;
        }
        for (int k = 0; k < op->nin; k++) want[op->in[k]] = true;
    }
    free(want);
    return need;
}

bool ir_forward_program(const ir_module *m, int loss, bool *keep, char *why, size_t whylen) {
    bool *have = sup_xcalloc((size_t)m->nvalues + 1, sizeof *have);
    for (int v = 0; v < m->nvalues; v++) have[v] = m->values[v].kind != IR_V_RESULT;
    bool *need = loss_ancestors(m, loss);
    bool ok = true;
    for (int i = 0; i < m->nops && ok; i++) {
        const ir_op *op = &m->ops[i];
        keep[i] = (strcmp(ir_op_phase(op), "fwd") == 0 || need[i]) && ir_op_desc_of(op->code)->kind != IR_K_OPT &&
                  op->code != IR_OFFLOAD;
        if (!keep[i]) continue;
        for (int k = 0; k < op->nin && ok; k++)
            if (!have[op->in[k]]) {
                char o[160];
                snprintf(why, whylen, "%s reads %%%s, which no earlier forward op computes",
                         ir_op_str(m, i, o, sizeof o), m->values[op->in[k]].name);
                ok = false;
            }
        for (int k = 0; k < op->nout; k++) have[op->out[k]] = true;
    }
    if (ok && (loss < 0 || !have[loss])) {
        snprintf(why, whylen, "the loss%s%s is not computed by the forward ops", loss >= 0 ? " %" : "",
                 loss >= 0 ? m->values[loss].name : "");
        ok = false;
    }
    free(need);
    free(have);
    return ok;
}
