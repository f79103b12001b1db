/* ir_op_mlp.c — the SwiGLU MLP fused and tiled over the tokens (DeepSpeed
 * ALST's TiledMLP) and its backward: chunk tokens at a time, so no
 * [tokens, F] value exists. */
#include "ir_op.h"

/* ---- verify (ir/README.md rule 5) -------------------------------------------- */

/* mlp(x, wg, wu, wd) -> y and mlp_bwd(dy, x, wg, wu, wd) -> (dx, dwg, dwu,
 * dwd): x [..., D] with D whole; wg, wu [D, F]; wd [F, D]; y, dy, dx have
 * x's type; each weight gradient the shape of its weight; attr chunk >= 1
 * when present. */
static void check_mlp(ir_vctx *c, const ir_op *op, bool bwd) {
    const ir_value *x = ir_vv(c, op->in[bwd]);
    const ir_value *w[3] = {ir_vv(c, op->in[bwd + 1]), ir_vv(c, op->in[bwd + 2]), ir_vv(c, op->in[bwd + 3])};
    int r = x->type.rank;
    if (r < 1) {
        char d[96];
        ir_verr(c, sup_noloc(), "%s must have rank at least 1", ir_vdesc(c, x, d, sizeof d));
        return;
    }
    ir_vwant_shard(c, x, r - 1, -1, " (the MLP contracts the whole hidden dim)");
    /* all three checked (and reported), then the shapes if all hold */
    bool r0 = ir_vwant_rank(c, w[0], 2, "[D,F]"), r1 = ir_vwant_rank(c, w[1], 2, "[D,F]");
    bool r2 = ir_vwant_rank(c, w[2], 2, "[F,D]");
    if (r0 && r1 && r2) {
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
    if (!bwd) return;
    ir_vsame_type(c, x, ir_vv(c, op->in[0]));
    for (int k = 0; k < 3; k++) ir_vsame_shape(c, w[k], ir_vv(c, op->out[k + 1]));
}

static void verify_mlp(ir_vctx *c, const ir_op *op) { check_mlp(c, op, false); }
static void verify_mlp_bwd(ir_vctx *c, const ir_op *op) { check_mlp(c, op, true); }

/* ---- kernel workspace (ir_mem_work_bytes) ----------------------------------------- */

/* The CPU MLP (runtime/host/kern_mlp.c): g, u and s of one chunk of rows,
 * 3 x chunk x F floats. */
static void ws_cpu_mlp_common(const ir_module *m, const ir_op *op, int64_t *w, bool bwd) {
    if (op->nin < 4) return;
    int64_t rows = ir_op_rows_of(m, op->in[bwd]);
    int64_t chunk = ir_attr_int(op, "chunk", 0);
    if (chunk >= 1 && chunk < rows) rows = chunk;
    ir_ws_raise(&w[CM_WS_CPU_MLP], ir_mem_mul(ir_mem_mul(rows, m->values[op->in[bwd ? 2 : 1]].type.dims[1]), 12));
}

static void ws_cpu_mlp(const ir_module *m, const ir_op *op, int64_t *w) { ws_cpu_mlp_common(m, op, w, false); }
static void ws_cpu_mlp_bwd(const ir_module *m, const ir_op *op, int64_t *w) { ws_cpu_mlp_common(m, op, w, true); }

/* The CUDA MLP: bf16 g, u and s of one chunk of rows. */
static void ws_cuda_mlp_common(const ir_module *m, const ir_op *op, int64_t *w, bool bwd) {
    int64_t N = ir_op_rows_of(m, op->in[bwd]), chunk = ir_attr_int(op, "chunk", 0);
    int64_t c = chunk >= 1 && chunk < N ? chunk : N;
    ir_ws_raise(&w[CM_WS_CUDA_MLP], 2 * 3 * c * m->values[op->in[bwd + 1]].type.dims[1]);
}

static void ws_cuda_mlp(const ir_module *m, const ir_op *op, int64_t *w) { ws_cuda_mlp_common(m, op, w, false); }
static void ws_cuda_mlp_bwd(const ir_module *m, const ir_op *op, int64_t *w) { ws_cuda_mlp_common(m, op, w, true); }

/* ---- work (the cost model's inputs) --------------------------------------------- */

/* mlp / mlp_bwd x [N.., D], w_gate [D, F]: one of its GEMMs is 2·N·D·F;
 * returns N·D·F. */
static double mlp_ndf(const ir_module *m, const ir_op *op, bool bwd) {
    const ir_type *x = &m->values[op->in[bwd]].type, *wg = &m->values[op->in[bwd + 1]].type;
    double D = ir_op_tail_local(m, x, 1);
    double N = (double)ir_type_local_elems(m, x) / (D > 0 ? D : 1);
    return N * D * (wg->rank == 2 ? (double)wg->dims[1] : 0);
}

/* Forward: gate, up, down (6·NDF); backward: gate and up again and six
 * GEMMs of the gradients (16·NDF).  The sigmoid of every [N, F] entry
 * (again in the backward). */
static ir_op_work work_mlp_common(const ir_module *m, const ir_op *op, bool bwd) {
    double D = ir_op_tail_local(m, &m->values[op->in[bwd]].type, 1);
    return (ir_op_work){.flops = (bwd ? 16 : 6) * mlp_ndf(m, op, bwd),
                        .bytes = ir_op_bytes_moved(m, op),
                        .exps = D > 0 ? mlp_ndf(m, op, bwd) / D : 0};
}

static ir_op_work work_mlp(const ir_module *m, const ir_op *op) { return work_mlp_common(m, op, false); }
static ir_op_work work_mlp_bwd(const ir_module *m, const ir_op *op) { return work_mlp_common(m, op, true); }

/* ---- runtime call (codegen) ------------------------------------------------------- */

/* mlp(x, wg, wu, wd) -> y ; mlp_bwd(dy, x, wg, wu, wd) -> dx, dwg, dwu, dwd:
 * N = local rows of x (all dims but the last), D its last dim, F = dim 1 of
 * wg, chunk = attr chunk (0: one chunk). */
static void emit_mlp_common(ir_emit *e, bool bwd) {
    const ir_value *x = ir_emit_in(e, bwd), *wg = ir_emit_in(e, bwd + 1);
    for (int k = 1; k <= 3; k++)
        if (!ir_emit_rank(e, ir_emit_in(e, bwd + k), 2) ||
            !ir_emit_whole(e, ir_emit_in(e, bwd + k), 0, 2, "an MLP weight"))
            return;
    int r = x->type.rank;
    if (!ir_emit_whole(e, x, r - 1, r, "the hidden dim")) return;
    ir_emit_call(e);
    for (int o = 0; o < e->op->nout; o++) ir_emit_f32(e, ir_emit_out(e, o));
    for (int i = 0; i < e->op->nin; i++) ir_emit_f32(e, ir_emit_in(e, i));
    ir_emit_int(e, ir_emit_lprod(e, x, 0, r - 1));
    ir_emit_int(e, x->type.dims[r - 1]);
    ir_emit_int(e, wg->type.dims[1]);
    ir_emit_int(e, ir_attr_int(e->op, "chunk", 0));
    ir_emit_end(e);
}

static void emit_mlp(ir_emit *e) { emit_mlp_common(e, false); }
static void emit_mlp_bwd(ir_emit *e) { emit_mlp_common(e, true); }

/* ---- descriptors ---------------------------------------------------------------- */

/* x[B,S,D], w_gate[D,F], w_up[D,F], w_down[F,D] -> silu(x@wg)*(x@wu)@wd
 * [B,S,D] ; attr chunk (tokens per chunk, default all) */
const ir_op_desc ir_op_mlp = {
    .name = "mlp",
    .kind = IR_K_COMPUTE,
    .min_in = 4,
    .max_in = 4,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_mlp,
    .ws_cpu = ws_cpu_mlp,
    .ws_cuda = ws_cuda_mlp,
    .work = work_mlp,
    .rt_fn = "rt_mlp",
    .emit = emit_mlp,
};

/* dy, x, wg, wu, wd -> dx, dwg, dwu, dwd; recomputes each chunk's forward */
const ir_op_desc ir_op_mlp_bwd = {
    .name = "mlp_bwd",
    .kind = IR_K_COMPUTE,
    .min_in = 5,
    .max_in = 5,
    .min_out = 4,
    .max_out = 4,
    .verify = verify_mlp_bwd,
    .wgrad_outs = 7u << 1 /* dwg, dwu, dwd */,
    .ws_cpu = ws_cpu_mlp_bwd,
    .ws_cuda = ws_cuda_mlp_bwd,
    .work = work_mlp_bwd,
    .rt_fn = "rt_mlp_bwd",
    .emit = emit_mlp_bwd,
};
