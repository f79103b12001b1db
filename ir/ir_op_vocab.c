/* ir_op_vocab.c — the ops over the vocabulary: embedding (token ids ->
 * rows of the table) and the LM head with its cross-entropy loss, each with
 * its backward.  Shapes: tok i32 [B,S], w [V,D], x [B,S,D]. */
#include "ir_op.h"

#include <inttypes.h>

/* ---- verify (ir/README.md rule 5) -------------------------------------------- */

/* tok i32[B,S] with y/dy [B,S,D] laid out like tok on B and S. */
static bool check_tokens(ir_vctx *c, const ir_value *tok, const ir_value *y) {
    if (!ir_vwant_rank(c, tok, 2, "[B,S]") || !ir_vwant_rank(c, y, 3, "[B,S,D]")) return false;
    ir_vwant_dtype(c, tok, IR_I32);
    ir_vsame_dims(c, tok, 0, 2, y, "");
    return true;
}

/* embedding(tok, w) -> y: w [V,D], y [B,S,D] laid out like tok on B and S, D whole. */
static void verify_embedding(ir_vctx *c, const ir_op *op) {
    const ir_value *tok = ir_vv(c, op->in[0]), *w = ir_vv(c, op->in[1]), *y = ir_vv(c, op->out[0]);
    if (!check_tokens(c, tok, y) || !ir_vwant_rank(c, w, 2, "[V,D]")) return;
    char what[128], d[96];
    snprintf(what, sizeof what, "dim 1 of %s", ir_vdesc(c, w, d, sizeof d));
    ir_vwant_dim(c, y, 2, w->type.dims[1], what);
    ir_vwant_shard(c, y, 2, -1, "");
}

/* embedding_bwd(dy, tok) -> dw[V,D] */
static void verify_embedding_bwd(ir_vctx *c, const ir_op *op) {
    const ir_value *dy = ir_vv(c, op->in[0]), *tok = ir_vv(c, op->in[1]), *dw = ir_vv(c, op->out[0]);
    if (!check_tokens(c, tok, dy) || !ir_vwant_rank(c, dw, 2, "[V,D]")) return;
    char what[128], d[96];
    snprintf(what, sizeof what, "dim 2 of %s", ir_vdesc(c, dy, d, sizeof d));
    ir_vwant_dim(c, dw, 1, dy->type.dims[2], what);
}

/* lm_head_loss(x[B,S,D], w[V,D], tgt i32[B,S]) */
static bool check_lm_head_in(ir_vctx *c, const ir_value *x, const ir_value *w, const ir_value *tgt) {
    if (!ir_vwant_rank(c, x, 3, "[B,S,D]") || !ir_vwant_rank(c, w, 2, "[V,D]")) return false;
    char what[128], d[96];
    snprintf(what, sizeof what, "%s dim 2", ir_vdesc(c, x, d, sizeof d));
    ir_vwant_dim(c, w, 1, x->type.dims[2], what);
    ir_vwant_shard(c, x, 2, -1, "");
    check_tokens(c, tgt, x);
    return true;
}

/* lm_head_loss(x, w, tgt) -> loss: an f32 scalar (the rank's partial sum). */
static void verify_lm_head_loss(ir_vctx *c, const ir_op *op) {
    const ir_value *x = ir_vv(c, op->in[0]), *w = ir_vv(c, op->in[1]);
    if (!check_lm_head_in(c, x, w, ir_vv(c, op->in[2]))) return;
    const ir_value *loss = ir_vv(c, op->out[0]);
    ir_vwant_rank(c, loss, 0, "(a scalar)");
    ir_vwant_dtype(c, loss, IR_F32);
}

/* lm_head_loss_bwd(x, w, tgt) -> (dx, dw): dx x's type, dw w's shape. */
static void verify_lm_head_loss_bwd(ir_vctx *c, const ir_op *op) {
    const ir_value *x = ir_vv(c, op->in[0]), *w = ir_vv(c, op->in[1]);
    if (!check_lm_head_in(c, x, w, ir_vv(c, op->in[2]))) return;
    ir_vsame_type(c, x, ir_vv(c, op->out[0]));
    ir_vsame_shape(c, w, ir_vv(c, op->out[1]));
}

/* lm_head_loss_grad(x, w, tgt) -> (loss, dx, dw): the two above in one. */
static void verify_lm_head_loss_grad(ir_vctx *c, const ir_op *op) {
    const ir_value *x = ir_vv(c, op->in[0]), *w = ir_vv(c, op->in[1]);
    if (!check_lm_head_in(c, x, w, ir_vv(c, op->in[2]))) return;
    const ir_value *loss = ir_vv(c, op->out[0]);
    ir_vwant_rank(c, loss, 0, "(a scalar)");
    ir_vwant_dtype(c, loss, IR_F32);
    ir_vsame_type(c, x, ir_vv(c, op->out[1]));
    ir_vsame_shape(c, w, ir_vv(c, op->out[2]));
}

/* ---- kernel workspace (ir_mem_work_bytes) ----------------------------------------- */

/* embedding_bwd on CUDA: the fp32 [V, D] gradient sum. */
static void ws_cuda_embedding_bwd(const ir_module *m, const ir_op *op, int64_t *w) {
    ir_ws_raise(&w[CM_WS_CUDA_F32], 4 * ir_op_local_elems(m, op->out[0]));
}

/* The CPU LM head (runtime/host/kern_lmhead.c): one row chunk's logits and
 * its row statistics, cm_lm_head_ws_floats(V). */
static void ws_cpu_lm_head(const ir_module *m, const ir_op *op, int64_t *w) {
    if (op->nin < 2) return;
    int64_t V = m->values[op->in[1]].type.dims[0];
    ir_ws_raise(&w[CM_WS_CPU_LOGITS], 4 * cm_lm_head_ws_floats(V > 0 ? V : 1));
}

/* Rows (or, for the backward, vocabulary columns) of one LM-head chunk:
 * kcu_lm_head_chunk(N, V) and kcu_lm_head_vchunk(R, V) = lm_chunk(V, R)
 * for blocks of R rows in runtime/cuda/kcu_gemm.cu. */
static int64_t lm_chunk(int64_t N, int64_t V) {
    int64_t c = ((int64_t)256 << 20) / (6 * (V > 0 ? V : 1));
    if (c >= 64) c = c / 64 * 64;
    if (c < 1) c = 1;
    return c < N ? c : (N > 0 ? N : 1);
}

/* Rows per block of the CUDA backward (kcu_lm_head_xchunk(N, V, D)): all
 * N rows while N <= V + r, else r, the rows of ~256 MiB of fp32 [r, D]. */
static int64_t lm_xchunk(int64_t N, int64_t V, int64_t D) {
    int64_t r = ((int64_t)256 << 20) / (4 * (D > 0 ? D : 1));
    if (r >= 64) r = r / 64 * 64;
    if (r < 1) r = 1;
    int64_t n = N > 0 ? N : 1;
    return n <= (V > 0 ? V : 0) + r ? n : r;
}

/* The CUDA LM head, forward: [chunk, V] logits, the row losses and
 * statistics; backward, in blocks of xc rows: also [xc, vchunk] logits and
 * dlogits, one block's fp32 dx [xc, D], and with more than one block dw's
 * fp32 sum [V, D] after it. */
static void ws_cuda_lm_head_common(const ir_module *m, const ir_op *op, int64_t *w, bool bwd) {
    int64_t N = ir_op_rows_of(m, op->in[0]), V = m->values[op->in[1]].type.dims[0];
    int64_t D = m->values[op->in[1]].type.dims[1], c = lm_chunk(N, V), n = N > 0 ? N : 1;
    ir_ws_raise(&w[CM_WS_CUDA_LOGITS], 4 * c * V);
    ir_ws_raise(&w[CM_WS_CUDA_LSE], 4 * n);
    if (!bwd) {
        ir_ws_raise(&w[CM_WS_CUDA_ROWS], 4 * n);
        return;
    }
    int64_t xc = lm_xchunk(N, V, D), vc = lm_chunk(V, xc);
    ir_ws_raise(&w[CM_WS_CUDA_LOGITS], 4 * xc * vc);
    ir_ws_raise(&w[CM_WS_CUDA_DL], 2 * xc * vc);
    ir_ws_raise(&w[CM_WS_CUDA_F32], 4 * (xc * D + (xc < N ? V * D : 0)));
}

static void ws_cuda_lm_head(const ir_module *m, const ir_op *op, int64_t *w) {
    ws_cuda_lm_head_common(m, op, w, false);
}

static void ws_cuda_lm_head_bwd(const ir_module *m, const ir_op *op, int64_t *w) {
    ws_cuda_lm_head_common(m, op, w, true);
}

/* The fused op runs the forward's kernel, then the backward's. */
static void ws_cuda_lm_head_grad(const ir_module *m, const ir_op *op, int64_t *w) {
    ws_cuda_lm_head_common(m, op, w, false);
    ws_cuda_lm_head_common(m, op, w, true);
}

/* ---- work (the cost model's inputs) --------------------------------------------- */

/* An embedding reads only the rows it looks up (about its output). */
static ir_op_work work_embedding(const ir_module *m, const ir_op *op) {
    return (ir_op_work){.bytes = 2 * ir_op_local_bytes(m, op->out[0]) + ir_op_local_bytes(m, op->in[0])};
}

/* Its backward zero-fills dw then adds dx into it. */
static ir_op_work work_embedding_bwd(const ir_module *m, const ir_op *op) {
    return (ir_op_work){.bytes = 2 * ir_op_local_bytes(m, op->in[0]) + ir_op_local_bytes(m, op->out[0])};
}

/* lm_head_loss x [N.., D], w [V, D]: the logits GEMM is 2·N·V·D. */
static double lm_head_nvd(const ir_module *m, const ir_op *op) {
    const ir_type *x = &m->values[op->in[0]].type, *w = &m->values[op->in[1]].type;
    double D = ir_op_tail_local(m, x, 1);
    double N = (double)ir_type_local_elems(m, x) / (D > 0 ? D : 1);
    double V = w->rank > 0 ? (double)w->dims[0] : 0;
    return N * V * D;
}

/* The logits GEMM (forward) or the logits again and two GEMMs (backward);
 * the cross-entropy exponentiates every one of the N·V logits. */
static ir_op_work work_lm_head_common(const ir_module *m, const ir_op *op, double gemms) {
    double D = ir_op_tail_local(m, &m->values[op->in[0]].type, 1);
    return (ir_op_work){.flops = gemms * lm_head_nvd(m, op),
                        .bytes = ir_op_bytes_moved(m, op),
                        .exps = D > 0 ? lm_head_nvd(m, op) / D : 0};
}

static ir_op_work work_lm_head(const ir_module *m, const ir_op *op) { return work_lm_head_common(m, op, 2); }
static ir_op_work work_lm_head_bwd(const ir_module *m, const ir_op *op) { return work_lm_head_common(m, op, 6); }

/* Fused: the backward's work, which forms the logits once, on the CPU; on
 * GPUs the forward's as well (its two kernels run, rt_lm_head_loss_grad). */
static ir_op_work work_lm_head_grad(const ir_module *m, const ir_op *op) {
    ir_mem_target t;
    bool cuda = ir_mem_target_of(m, &t) && t.cuda;
    return work_lm_head_common(m, op, cuda ? 8 : 6);
}

/* ---- runtime call (codegen) ------------------------------------------------------- */

/* embedding(tok, w) -> y ; embedding_bwd(dy, tok) -> dw.  N = local tokens. */
static void emit_embedding_common(ir_emit *e, bool bwd) {
    const ir_value *tok = ir_emit_in(e, bwd ? 1 : 0);
    const ir_value *w = bwd ? ir_emit_out(e, 0) : ir_emit_in(e, 1);
    if (!ir_emit_rank(e, w, 2) || !ir_emit_whole(e, w, 0, 2, "the embedding table")) return;
    ir_emit_call(e);
    if (bwd) {
        ir_emit_f32(e, w);
        ir_emit_f32(e, ir_emit_in(e, 0));
        ir_emit_i32(e, tok);
    } else {
        ir_emit_f32(e, ir_emit_out(e, 0));
        ir_emit_i32(e, tok);
        ir_emit_f32(e, w);
    }
    ir_emit_int(e, ir_emit_lprod(e, tok, 0, tok->type.rank));
    ir_emit_int(e, w->type.dims[0]);
    ir_emit_int(e, w->type.dims[1]);
    ir_emit_end(e);
}

static void emit_embedding(ir_emit *e) { emit_embedding_common(e, false); }
static void emit_embedding_bwd(ir_emit *e) { emit_embedding_common(e, true); }

/* 1/(A*B*S): the backward seeds the gradient of the mean loss over the
 * optimizer step's A micro-steps (config accum, default 1).  With packed
 * documents the number of counted targets changes by step (the last token
 * of each document has none): the runtime's count over the micro-steps. */
static void emit_loss_scale(ir_emit *e) {
    if (e->config_int(e, "documents")) {
        e->loss_scale(e, 0);
        return;
    }
    int64_t B = e->config_int(e, "micro_batch"), S = e->config_int(e, "seq_len");
    if (B <= 0 || S <= 0) {
        ir_emit_fail(e, "the loss scale 1/(micro_batch*seq_len) needs config micro_batch and seq_len (or an "
                        "input %%tokens [B,S])");
        return;
    }
    int64_t A = ir_config_int(e->m, "accum", 1);
    e->loss_scale(e, (A > 1 ? A : 1) * B * S);
}

/* lm_head_loss(x, w, tgt) -> loss ; lm_head_loss_bwd(x, w, tgt) -> dx, dw ;
 * lm_head_loss_grad(x, w, tgt) -> loss, dx, dw.  In a forward-only program
 * (validation) the fused op is the forward alone: rt_lm_head_loss, its
 * loss. */
static void emit_lm_head_common(ir_emit *e, bool bwd) {
    const ir_value *x = ir_emit_in(e, 0), *w = ir_emit_in(e, 1), *tgt = ir_emit_in(e, 2);
    if (!ir_emit_rank(e, w, 2) || !ir_emit_whole(e, w, 0, 2, "the head weight")) return;
    int64_t N = ir_emit_lprod(e, tgt, 0, tgt->type.rank);
    if (ir_type_local_elems(e->m, &x->type) != N * w->type.dims[1]) {
        ir_emit_fail(e, "%%%s does not hold one row of %" PRId64 " per local target", x->name, w->type.dims[1]);
        return;
    }
    bool loss_only = e->forward_only && e->op->code == IR_LM_HEAD_LOSS_GRAD;
    if (loss_only)
        e->call(e, "rt_lm_head_loss");
    else
        ir_emit_call(e);
    for (int o = 0; o < (loss_only ? 1 : e->op->nout); o++) ir_emit_f32(e, ir_emit_out(e, o));
    ir_emit_f32(e, x);
    ir_emit_f32(e, w);
    ir_emit_i32(e, tgt);
    ir_emit_int(e, N);
    ir_emit_int(e, w->type.dims[0]);
    ir_emit_int(e, w->type.dims[1]);
    if (bwd && !loss_only) emit_loss_scale(e);
    ir_emit_end(e);
}

static void emit_lm_head(ir_emit *e) { emit_lm_head_common(e, false); }
static void emit_lm_head_bwd(ir_emit *e) { emit_lm_head_common(e, true); }

/* ---- descriptors ---------------------------------------------------------------- */

/* tok i32[B,S], w[V,D] -> [B,S,D] */
const ir_op_desc ir_op_embedding = {
    .name = "embedding",
    .kind = IR_K_COMPUTE,
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_embedding,
    .work = work_embedding,
    .rt_fn = "rt_embedding",
    .emit = emit_embedding,
};

/* dy[B,S,D], tok -> dw[V,D] */
const ir_op_desc ir_op_embedding_bwd = {
    .name = "embedding_bwd",
    .kind = IR_K_COMPUTE,
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_embedding_bwd,
    .wgrad_outs = 1u << 0 /* dw */,
    .ws_cuda = ws_cuda_embedding_bwd,
    .work = work_embedding_bwd,
    .rt_fn = "rt_embedding_bwd",
    .emit = emit_embedding_bwd,
};

/* x[B,S,D], w[V,D], tgt i32[B,S] -> f32[] (the sum of the rank's token losses) */
const ir_op_desc ir_op_lm_head_loss = {
    .name = "lm_head_loss",
    .kind = IR_K_COMPUTE,
    .min_in = 3,
    .max_in = 3,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_lm_head_loss,
    .partial_loss = true,
    .ws_cpu = ws_cpu_lm_head,
    .ws_cuda = ws_cuda_lm_head,
    .work = work_lm_head,
    .rt_fn = "rt_lm_head_loss",
    .emit = emit_lm_head,
};

/* x, w, tgt -> dx, dw */
const ir_op_desc ir_op_lm_head_loss_bwd = {
    .name = "lm_head_loss_bwd",
    .kind = IR_K_COMPUTE,
    .min_in = 3,
    .max_in = 3,
    .min_out = 2,
    .max_out = 2,
    .verify = verify_lm_head_loss_bwd,
    .wgrad_outs = 1u << 1 /* dw */,
    .ws_cpu = ws_cpu_lm_head,
    .ws_cuda = ws_cuda_lm_head_bwd,
    .work = work_lm_head_bwd,
    .rt_fn = "rt_lm_head_loss_bwd",
    .emit = emit_lm_head_bwd,
};

/* x, w, tgt -> loss, dx, dw (passes/pass_fuse_loss.c) */
const ir_op_desc ir_op_lm_head_loss_grad = {
    .name = "lm_head_loss_grad",
    .kind = IR_K_COMPUTE,
    .min_in = 3,
    .max_in = 3,
    .min_out = 3,
    .max_out = 3,
    .verify = verify_lm_head_loss_grad,
    .partial_loss = true,
    .wgrad_outs = 1u << 2 /* dw */,
    .ws_cpu = ws_cpu_lm_head,
    .ws_cuda = ws_cuda_lm_head_grad,
    .work = work_lm_head_grad,
    .rt_fn = "rt_lm_head_loss_grad",
    .emit = emit_lm_head_bwd,
};
