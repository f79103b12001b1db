/* ir_op_elem.c — the elementwise ops, every operand and result of one
 * type: add, swiglu and rope, with the backwards of swiglu and rope. */
#include "ir_op.h"

/* ---- verify (ir/README.md rule 5) -------------------------------------------- */

/* add, swiglu, swiglu_bwd, rope, rope_bwd: every operand and result has the
 * type of the first operand. */
static void check_elementwise(ir_vctx *c, const ir_op *op, int rank)
{
    const ir_value *a = ir_vv(c, op->in[0]);
    if (rank >= 0)
        ir_vwant_rank(c, a, rank, "[B,S,H,Dh]");
    for (int k = 1; k < op->nin; k++)
        ir_vsame_type(c, a, ir_vv(c, op->in[k]));
    for (int k = 0; k < op->nout; k++)
        ir_vsame_type(c, a, ir_vv(c, op->out[k]));
}

static void verify_same_type(ir_vctx *c, const ir_op *op) { check_elementwise(c, op, -1); }
static void verify_rope(ir_vctx *c, const ir_op *op) { check_elementwise(c, op, 4); }

/* ---- descriptors ---------------------------------------------------------------- */

/* a, b -> a+b (same type) */
const ir_op_desc ir_op_add = {
    .name = "add", .kind = IR_K_COMPUTE, .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .verify = verify_same_type,
};

/* g[B,S,F], u[B,S,F] -> silu(g)*u */
const ir_op_desc ir_op_swiglu = {
    .name = "swiglu", .kind = IR_K_COMPUTE, .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .verify = verify_same_type,
};

/* dy, g, u -> dg, du */
const ir_op_desc ir_op_swiglu_bwd = {
    .name = "swiglu_bwd", .kind = IR_K_COMPUTE, .min_in = 3, .max_in = 3, .min_out = 2, .max_out = 2,
    .verify = verify_same_type,
};

/* x[B,S,H,Dh] -> same ; attr theta (default config rope_theta) */
const ir_op_desc ir_op_rope = {
    .name = "rope", .kind = IR_K_COMPUTE, .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
    .verify = verify_rope,
};

/* dy -> dx */
const ir_op_desc ir_op_rope_bwd = {
    .name = "rope_bwd", .kind = IR_K_COMPUTE, .min_in = 1, .max_in = 1, .min_out = 1, .max_out = 1,
    .verify = verify_rope,
};
