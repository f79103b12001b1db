/* ir_op_vocab.c — the ops over the vocabulary: embedding (token ids ->
 * rows of the table) and the LM head with its cross-entropy loss, each with
 * its backward.  Shapes: tok i32 [B,S], w [V,D], x [B,S,D]. */
#include "ir_op.h"

/* ---- verify (ir/README.md rule 5) -------------------------------------------- */

/* tok i32[B,S] with y/dy [B,S,D] laid out like tok on B and S. */
static bool check_tokens(ir_vctx *c, const ir_value *tok, const ir_value *y)
{
    if (!ir_vwant_rank(c, tok, 2, "[B,S]") || !ir_vwant_rank(c, y, 3, "[B,S,D]"))
        return false;
    ir_vwant_dtype(c, tok, IR_I32);
    ir_vsame_dims(c, tok, 0, 2, y, "");
    return true;
}

/* embedding(tok, w) -> y: w [V,D], y [B,S,D] laid out like tok on B and S, D whole. */
static void verify_embedding(ir_vctx *c, const ir_op *op)
{
    const ir_value *tok = ir_vv(c, op->in[0]), *w = ir_vv(c, op->in[1]), *y = ir_vv(c, op->out[0]);
    if (!check_tokens(c, tok, y) || !ir_vwant_rank(c, w, 2, "[V,D]"))
        return;
    char what[128], d[96];
    snprintf(what, sizeof what, "dim 1 of %s", ir_vdesc(c, w, d, sizeof d));
    ir_vwant_dim(c, y, 2, w->type.dims[1], what);
    ir_vwant_shard(c, y, 2, -1, "");
}

/* embedding_bwd(dy, tok) -> dw[V,D] */
static void verify_embedding_bwd(ir_vctx *c, const ir_op *op)
{
    const ir_value *dy = ir_vv(c, op->in[0]), *tok = ir_vv(c, op->in[1]), *dw = ir_vv(c, op->out[0]);
    if (!check_tokens(c, tok, dy) || !ir_vwant_rank(c, dw, 2, "[V,D]"))
        return;
    char what[128], d[96];
    snprintf(what, sizeof what, "dim 2 of %s", ir_vdesc(c, dy, d, sizeof d));
    ir_vwant_dim(c, dw, 1, dy->type.dims[2], what);
}

/* lm_head_loss(x[B,S,D], w[V,D], tgt i32[B,S]) */
static bool check_lm_head_in(ir_vctx *c, const ir_value *x, const ir_value *w, const ir_value *tgt)
{
    if (!ir_vwant_rank(c, x, 3, "[B,S,D]") || !ir_vwant_rank(c, w, 2, "[V,D]"))
        return false;
    char what[128], d[96];
    snprintf(what, sizeof what, "%s dim 2", ir_vdesc(c, x, d, sizeof d));
    ir_vwant_dim(c, w, 1, x->type.dims[2], what);
    ir_vwant_shard(c, x, 2, -1, "");
    check_tokens(c, tgt, x);
    return true;
}

/* lm_head_loss(x, w, tgt) -> loss: an f32 scalar (the rank's partial sum). */
static void verify_lm_head_loss(ir_vctx *c, const ir_op *op)
{
    const ir_value *x = ir_vv(c, op->in[0]), *w = ir_vv(c, op->in[1]);
    if (!check_lm_head_in(c, x, w, ir_vv(c, op->in[2])))
        return;
    const ir_value *loss = ir_vv(c, op->out[0]);
    ir_vwant_rank(c, loss, 0, "(a scalar)");
    ir_vwant_dtype(c, loss, IR_F32);
}

/* lm_head_loss_bwd(x, w, tgt) -> (dx, dw): dx x's type, dw w's shape. */
static void verify_lm_head_loss_bwd(ir_vctx *c, const ir_op *op)
{
    const ir_value *x = ir_vv(c, op->in[0]), *w = ir_vv(c, op->in[1]);
    if (!check_lm_head_in(c, x, w, ir_vv(c, op->in[2])))
        return;
    ir_vsame_type(c, x, ir_vv(c, op->out[0]));
    ir_vsame_shape(c, w, ir_vv(c, op->out[1]));
}

/* ---- descriptors ---------------------------------------------------------------- */

/* tok i32[B,S], w[V,D] -> [B,S,D] */
const ir_op_desc ir_op_embedding = {
    .name = "embedding", .kind = IR_K_COMPUTE, .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .verify = verify_embedding,
};

/* dy[B,S,D], tok -> dw[V,D] */
const ir_op_desc ir_op_embedding_bwd = {
    .name = "embedding_bwd", .kind = IR_K_COMPUTE, .min_in = 2, .max_in = 2, .min_out = 1, .max_out = 1,
    .verify = verify_embedding_bwd,
};

/* x[B,S,D], w[V,D], tgt i32[B,S] -> f32[] (the sum of the rank's token losses) */
const ir_op_desc ir_op_lm_head_loss = {
    .name = "lm_head_loss", .kind = IR_K_COMPUTE, .min_in = 3, .max_in = 3, .min_out = 1, .max_out = 1,
    .verify = verify_lm_head_loss,
};

/* x, w, tgt -> dx, dw */
const ir_op_desc ir_op_lm_head_loss_bwd = {
    .name = "lm_head_loss_bwd", .kind = IR_K_COMPUTE, .min_in = 3, .max_in = 3, .min_out = 2, .max_out = 2,
    .verify = verify_lm_head_loss_bwd,
};
