/* ir_op_mlp.c — the SwiGLU MLP fused and tiled over the tokens (DeepSpeed
 * ALST's TiledMLP) and its backward: chunk tokens at a time, so no
 * [tokens, F] value exists. */
#include "ir_op.h"

/* ---- verify (ir/README.md rule 5) -------------------------------------------- */

/* mlp(x, wg, wu, wd) -> y and mlp_bwd(dy, x, wg, wu, wd) -> (dx, dwg, dwu,
 * dwd): x [..., D] with D whole; wg, wu [D, F]; wd [F, D]; y, dy, dx have
 * x's type; each weight gradient the shape of its weight; attr chunk >= 1
 * when present. */
static void check_mlp(ir_vctx *c, const ir_op *op, bool bwd)
{
    const ir_value *x = ir_vv(c, op->in[bwd]);
    const ir_value *w[3] = {ir_vv(c, op->in[bwd + 1]), ir_vv(c, op->in[bwd + 2]), ir_vv(c, op->in[bwd + 3])};
    int r = x->type.rank;
    if (r < 1) {
        char d[96];
        ir_verr(c, sup_noloc(), "%s must have rank at least 1", ir_vdesc(c, x, d, sizeof d));
        return;
    }
    ir_vwant_shard(c, x, r - 1, -1, " (the MLP contracts the whole hidden dim)");
    bool ok = ir_vwant_rank(c, w[0], 2, "[D,F]") & ir_vwant_rank(c, w[1], 2, "[D,F]") & ir_vwant_rank(c, w[2], 2, "[F,D]");
    if (ok) {
        char what[128], d[96];
        snprintf(what, sizeof what, "the last dim of %s", ir_vdesc(c, x, d, sizeof d));
        ir_vwant_dim(c, w[0], 0, x->type.dims[r - 1], what);
        ir_vwant_dim(c, w[2], 1, x->type.dims[r - 1], what);
        ir_vsame_shape(c, w[0], w[1]);
        snprintf(what, sizeof what, "dim 1 of %s", ir_vdesc(c, w[0], d, sizeof d));
        ir_vwant_dim(c, w[2], 0, w[0]->type.dims[1], what);
    }
    const ir_attr *ch = ir_attr_get(op, "chunk");
    if (ch && (ch->kind != IR_A_INT || ch->i < 1))
        ir_verr(c, sup_noloc(), "attribute chunk must be an integer >= 1 (tokens per chunk)");
    ir_vsame_type(c, x, ir_vv(c, op->out[0]));
    if (!bwd)
        return;
    ir_vsame_type(c, x, ir_vv(c, op->in[0]));
    for (int k = 0; k < 3; k++)
        ir_vsame_shape(c, w[k], ir_vv(c, op->out[k + 1]));
}

static void verify_mlp(ir_vctx *c, const ir_op *op) { check_mlp(c, op, false); }
static void verify_mlp_bwd(ir_vctx *c, const ir_op *op) { check_mlp(c, op, true); }

/* ---- descriptors ---------------------------------------------------------------- */

/* x[B,S,D], w_gate[D,F], w_up[D,F], w_down[F,D] -> silu(x@wg)*(x@wu)@wd
 * [B,S,D] ; attr chunk (tokens per chunk, default all) */
const ir_op_desc ir_op_mlp = {
    .name = "mlp", .kind = IR_K_COMPUTE, .min_in = 4, .max_in = 4, .min_out = 1, .max_out = 1,
    .verify = verify_mlp,
};

/* dy, x, wg, wu, wd -> dx, dwg, dwu, dwd; recomputes each chunk's forward */
const ir_op_desc ir_op_mlp_bwd = {
    .name = "mlp_bwd", .kind = IR_K_COMPUTE, .min_in = 5, .max_in = 5, .min_out = 4, .max_out = 4,
    .verify = verify_mlp_bwd,
};
