/* ir_op_heads.c — the head-chunk copies of head-chunked attention
 * (config attention_chunks, passes/pass_ulysses.c): head_slice takes one
 * chunk of the heads out of sequence-layout tensors, head_concat puts the
 * chunks back together.  Shapes: [B,S,H,Dh] with the heads (dim 2) whole
 * on every rank; chunk c of C holds heads c*H/C .. (c+1)*H/C - 1.
 *
 *   %q.c1, %k.c1 = head_slice %q, %k {chunk = 1, chunks = 4}   : [B,S,H/4,Dh] each
 *   %o = head_concat %o.c0, %o.c1, %o.c2, %o.c3 {chunks = 4}    : [B,S,H,Dh]
 *
 * Chunks hold whole kv groups: the pass slices q's H and k's Hk heads by
 * the same C, so chunk c's q heads read only chunk c's kv heads. */
#include "ir_op.h"

#include <inttypes.h>

/* ---- verify (ir/README.md rule 5) -------------------------------------------- */

/* The chunk attributes: 1 <= chunk < chunks (head_slice) or chunks = the
 * operand count (head_concat).  Returns chunks, 0 when bad (reported). */
static int64_t check_chunks(ir_vctx *c, const ir_op *op, bool slice) {
    int64_t C = ir_attr_int(op, "chunks", 0), k = ir_attr_int(op, "chunk", -1);
    if (C < 1) {
        ir_verr(c, sup_noloc(), "needs a 'chunks = C' attribute (C >= 1)");
        return 0;
    }
    if (slice && !ir_attr_get(op, "chunk")) {
        ir_verr(c, sup_noloc(), "needs a 'chunk = c' attribute: which of the %" PRId64 " chunks", C);
        return 0;
    }
    if (slice && (k < 0 || k >= C)) {
        ir_verr(c, sup_noloc(), "chunk = %" PRId64 " is not one of the %" PRId64 " chunks", k, C);
        return 0;
    }
    if (!slice && C != op->nin) {
        ir_verr(c, sup_noloc(), "chunks = %" PRId64 ", but %d operand(s): one per chunk", C, op->nin);
        return 0;
    }
    return C;
}

/* whole [B,S,H,Dh] (heads whole, even) against chunk [B,S,H/C,Dh]: the
 * same dtype and layout, dim 2 divided by C. */
static void check_chunk_pair(ir_vctx *c, const ir_value *whole, const ir_value *chunk, int64_t C) {
    if (!ir_vwant_rank(c, whole, 4, "[B,S,H,Dh]") || !ir_vwant_rank(c, chunk, 4, "[B,S,H/C,Dh]")) return;
    ir_vwant_dtype(c, chunk, whole->type.dtype);
    ir_vwant_shard(c, whole, 2, -1, " (head chunks are taken from whole heads)");
    if (whole->type.unit[2] || chunk->type.unit[2])
        ir_verr(c, sup_noloc(), "head chunks need an even head dim (%%%s, %%%s)", whole->name, chunk->name);
    if (whole->type.dims[2] % C) {
        ir_verr(c, sup_noloc(), "%%%s has %" PRId64 " heads, not a multiple of chunks = %" PRId64, whole->name,
                whole->type.dims[2], C);
        return;
    }
    char what[128], d[96];
    snprintf(what, sizeof what, "%s heads / %" PRId64, ir_vdesc(c, whole, d, sizeof d), C);
    ir_vwant_dim(c, chunk, 2, whole->type.dims[2] / C, what);
    ir_vsame_dims(c, whole, 0, 2, chunk, " (a head chunk keeps the batch and sequence)");
    ir_vsame_dims(c, whole, 3, 4, chunk, " (a head chunk keeps the head dim)");
}

static void verify_head_slice(ir_vctx *c, const ir_op *op) {
    int64_t C = check_chunks(c, op, true);
    if (!C) return;
    if (op->nin != op->nout) {
        ir_verr(c, sup_noloc(), "%d operand(s) but %d result(s): one chunk per operand", op->nin, op->nout);
        return;
    }
    for (int k = 0; k < op->nin; k++) check_chunk_pair(c, ir_vv(c, op->in[k]), ir_vv(c, op->out[k]), C);
}

static void verify_head_concat(ir_vctx *c, const ir_op *op) {
    int64_t C = check_chunks(c, op, false);
    if (!C) return;
    const ir_value *first = ir_vv(c, op->in[0]);
    for (int k = 1; k < op->nin; k++) ir_vsame_type(c, first, ir_vv(c, op->in[k]));
    check_chunk_pair(c, ir_vv(c, op->out[0]), first, C);
}

/* ---- runtime call (codegen) ------------------------------------------------------- */

/* The local rows (b * s) and heads of a chunk-pair's whole side. */
static bool emit_dims(ir_emit *e, const ir_value *whole, int64_t *rows, int64_t *H) {
    if (!ir_emit_rank(e, whole, 4) || !ir_emit_whole(e, whole, 2, 4, "the heads and head dim")) return false;
    *rows = ir_emit_lprod(e, whole, 0, 2);
    *H = whole->type.dims[2];
    return true;
}

/* head_slice: one rt_head_slice(y, x, rows, H, Hc, Dh, h0) per pair. */
static void emit_head_slice(ir_emit *e) {
    int64_t C = ir_attr_int(e->op, "chunks", 1), chunk = ir_attr_int(e->op, "chunk", 0);
    for (int k = 0; k < e->op->nin; k++) {
        const ir_value *x = ir_emit_in(e, k);
        int64_t rows, H;
        if (!emit_dims(e, x, &rows, &H)) return;
        ir_emit_call(e);
        ir_emit_f32(e, ir_emit_out(e, k));
        ir_emit_f32(e, x);
        ir_emit_int(e, rows);
        ir_emit_int(e, H);
        ir_emit_int(e, H / C);
        ir_emit_int(e, x->type.dims[3]);
        ir_emit_int(e, chunk * (H / C));
        ir_emit_end(e);
    }
}

/* head_concat: rt_head_concat(y, rows, Hc, Dh, n, x0, .., x{n-1}). */
static void emit_head_concat(ir_emit *e) {
    const ir_value *y = ir_emit_out(e, 0);
    int64_t rows, H;
    if (!emit_dims(e, y, &rows, &H)) return;
    ir_emit_call(e);
    ir_emit_f32(e, y);
    ir_emit_int(e, rows);
    ir_emit_int(e, H / e->op->nin);
    ir_emit_int(e, y->type.dims[3]);
    ir_emit_int(e, e->op->nin);
    for (int k = 0; k < e->op->nin; k++) ir_emit_f32(e, ir_emit_in(e, k));
    ir_emit_end(e);
}

/* ---- descriptors ---------------------------------------------------------------- */

/* x0..x{n-1} [B,S,H,Dh] -> chunk `chunk` of each [B,S,H/C,Dh] ; n <= 4 */
const ir_op_desc ir_op_head_slice = {
    .name = "head_slice",
    .kind = IR_K_COMPUTE,
    .min_in = 1,
    .max_in = 4,
    .min_out = 1,
    .max_out = 4,
    .verify = verify_head_slice,
    .rt_fn = "rt_head_slice",
    .emit = emit_head_slice,
};

/* C chunks [B,S,H/C,Dh] -> [B,S,H,Dh] */
const ir_op_desc ir_op_head_concat = {
    .name = "head_concat",
    .kind = IR_K_COMPUTE,
    .min_in = 1,
    .max_in = IR_MAX_IN,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_head_concat,
    .rt_fn = "rt_head_concat",
    .emit = emit_head_concat,
};
