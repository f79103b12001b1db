/* pass_attention_lse.c — each attention forward's softmax statistics as a
 * value of the step, read by its backward.
 *
 * Input: the partitioned step, where an unchunked attention is
 *   %o.heads = attention %qr.heads, %kr.heads, %v.heads
 *   ...
 *   %d.qr.heads, ... = attention_bwd %d.o.heads, %qr.heads, %kr.heads, %v.heads, %o.heads
 * (head-chunked attention, ring attention and their backwards already
 * carry them: passes/pass_ulysses.c, pass_ring.c).
 *
 * Why: the backward needs each row's log-sum-exp of the forward (about a
 * fifth of its time when it recomputes them; cuDNN's backward cannot).
 * Without this pass the backends keep them per output address outside the
 * arena (the CPU's and the CUDA backend's statistics entries,
 * CM_WS_CPU_LSE and CM_WS_CUDA_CUDNN_STATS), counted by the plan as one
 * entry per attention forward op, live for the whole step, and out of
 * reach of the offload pass.  As values they live from the forward to its
 * backward: the memory plan frees each after its backward (under
 * recompute full a layer's first forward's statistics at once, since the
 * backward reads the recomputed ones), and offload moves them to host
 * memory with the rest of a layer's saved state.
 *
 * Output:
 *   %o.heads, %o.heads.lse = attention %qr.heads, %kr.heads, %v.heads
 *   ...
 *   ... = attention_bwd %d.o.heads, %qr.heads, %kr.heads, %v.heads, %o.heads, %o.heads.lse
 * %o.heads.lse is f32 [B, S, H] laid out like q's first three dims (the
 * kernels' [b, H, S] rows; ir_op_attn.c check_lse).  Each backward reads
 * the statistics of the forward that wrote its o from its own q, k and v
 * (several backwards of one forward read the same value); a forward whose
 * output no such backward reads (a hand-written module) is left as it is.
 * The validation program, derived from the step afterwards (ir_forward.c),
 * keeps the forward with both results.
 *
 * A TIME pass (passes.def): it changes the ops the cost model reads (the
 * attention ops move the statistics' bytes), so the planner's timed builds
 * run it too and time the ops the compile builds (driver/settle.c reuses a
 * full build for timing when recompute and offload left it alone).
 *
 * Left as is with packed documents (config documents): their kernels
 * recompute the statistics in the backward and keep none, on both backends.
 * config attention_lse = 0 (train.attention_lse off) leaves the step
 * unchanged: the backends' entries then hold the statistics. */
#include "pass_util.h"

#include <stdlib.h>

bool pass_attention_lse(ir_module *m, const pass_options *opt) {
    if (ir_config_int(m, "attention_lse", 1) == 0) {
        pu_remark(opt, "attention-lse: off (attention_lse off); the backends keep the statistics");
        return true;
    }
    if (ir_config_int(m, "documents", 0) != 0) {
        pu_remark(opt, "attention-lse: packed documents: their kernels recompute the statistics; none kept");
        return true;
    }
    /* fwd_of[v]: the unchunked attention forward whose output is v, or -1 */
    int nv = m->nvalues, added = 0, reads = 0, other = 0;
    int *fwd_of = sup_xmalloc((size_t)(nv > 0 ? nv : 1) * sizeof *fwd_of);
    int *lse_of = sup_xmalloc((size_t)(m->nops > 0 ? m->nops : 1) * sizeof *lse_of);
    for (int v = 0; v < nv; v++) fwd_of[v] = -1;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        lse_of[i] = -1;
        if (op->code == IR_ATTENTION && op->nout == 1 && op->out[0] >= 0 && op->out[0] < nv) fwd_of[op->out[0]] = i;
    }
    for (int i = 0; i < m->nops; i++) {
        ir_op *b = &m->ops[i];
        if (b->code != IR_ATTENTION_BWD || b->nin != 5 || b->in[4] < 0 || b->in[4] >= nv) continue;
        int f = fwd_of[b->in[4]];
        if (f < 0) continue;
        const ir_op *fw = &m->ops[f];
        if (b->in[1] != fw->in[0] || b->in[2] != fw->in[1] || b->in[3] != fw->in[2]) {
            other++; /* statistics of other q, k, v: the backward recomputes its own */
            continue;
        }
        if (lse_of[f] < 0) { /* the forward's first backward adds its output */
            lse_of[f] = pass_value_derived(m, m->ops[f].out[0], ".lse", pu_lse_type(&m->values[m->ops[f].in[0]].type));
            ir_op_add_output(&m->ops[f], lse_of[f]);
            added++;
        }
        ir_op_add_input(b, lse_of[f]);
        reads++;
    }
    free(fwd_of);
    free(lse_of);
    if (added) ir_renumber(m);
    pu_remark(opt, "attention-lse: %d attention forward(s) keep their statistics as values for %d backward(s)", added,
              reads);
    if (other)
        pu_remark(opt,
                  "attention-lse: %d backward(s) of another q, k or v than their output's forward left as they are",
                  other);
    return true;
}
