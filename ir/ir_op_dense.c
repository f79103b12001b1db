/* ir_op_dense.c — the ops with a weight over the last dims of an
 * activation: linear (a contraction, attr contract), rmsnorm and bias_add,
 * each with its backward, and add_rmsnorm (a residual add fused into the
 * norm after it) with its backward. */
#include "ir_op.h"

#include <inttypes.h>

/* ---- verify (ir/README.md rule 5) -------------------------------------------- */

/* linear(x, w) -> y with `contract` trailing dims of x against leading dims of w. */
static void check_linear_fwd(ir_vctx *c, const ir_op *op, const ir_value *x, const ir_value *w, const ir_value *y) {
    int64_t cn = ir_attr_int(op, "contract", 1);
    int r = x->type.rank, rw = w->type.rank;
    if (cn < 1 || cn > r || cn > rw) {
        ir_verr(c, sup_noloc(), "contract = %lld is outside 1..min(rank of %%%s, rank of %%%s) = %d", (long long)cn,
                x->name, w->name, r < rw ? r : rw);
        return;
    }
    int lead = r - (int)cn, trail = rw - (int)cn;
    char what[160], d[96];
    for (int j = 0; j < cn; j++) {
        if (w->type.dims[j] != x->type.dims[lead + j]) { /* described only for the report */
            snprintf(what, sizeof what, "%s dim %d (contracted)", ir_vdesc(c, x, d, sizeof d), lead + j);
            ir_vwant_dim(c, w, j, x->type.dims[lead + j], what);
        }
        ir_vwant_shard(c, x, lead + j, -1, " (contracted dims must be whole)");
    }
    if (y->type.rank != lead + trail) {
        char ty[IR_TYPE_STR_MAX];
        ir_verr(c, sup_noloc(), "%s must have rank %d (%d leading dims of %%%s and %d trailing dims of %%%s), found %s",
                ir_vdesc(c, y, d, sizeof d), lead + trail, lead, x->name, trail, w->name, ir_vtstr(c, y, ty));
        return;
    }
    ir_vsame_dims(c, x, 0, lead, y, "");
    for (int j = 0; j < trail; j++) {
        if (y->type.dims[lead + j] != w->type.dims[cn + j]) {
            snprintf(what, sizeof what, "%s dim %d", ir_vdesc(c, w, d, sizeof d), (int)cn + j);
            ir_vwant_dim(c, y, lead + j, w->type.dims[cn + j], what);
        }
        ir_vwant_shard(c, y, lead + j, -1, "");
    }
}

static void verify_linear(ir_vctx *c, const ir_op *op) {
    check_linear_fwd(c, op, ir_vv(c, op->in[0]), ir_vv(c, op->in[1]), ir_vv(c, op->out[0]));
}

/* linear_bwd(dy, x, w) -> (dx, dw) */
static void verify_linear_bwd(ir_vctx *c, const ir_op *op) {
    const ir_value *x = ir_vv(c, op->in[1]), *w = ir_vv(c, op->in[2]);
    check_linear_fwd(c, op, x, w, ir_vv(c, op->in[0]));
    const ir_value *dx = ir_vv(c, op->out[0]);
    ir_vsame_shape(c, x, dx);
    if (dx->type.rank == x->type.rank) ir_vsame_dims(c, x, 0, x->type.rank, dx, "");
    ir_vsame_shape(c, w, ir_vv(c, op->out[1]));
}

/* rmsnorm(x, w): w[D] with D = x's last dim, which must be whole. */
static bool check_rmsnorm_in(ir_vctx *c, const ir_value *x, const ir_value *w) {
    int r = x->type.rank;
    if (r < 1) {
        char d[96];
        ir_verr(c, sup_noloc(), "%s must have rank at least 1", ir_vdesc(c, x, d, sizeof d));
        return false;
    }
    if (ir_vwant_rank(c, w, 1, "[D]") && w->type.dims[0] != x->type.dims[r - 1]) {
        char what[128], d[96];
        snprintf(what, sizeof what, "the last dim of %s", ir_vdesc(c, x, d, sizeof d));
        ir_vwant_dim(c, w, 0, x->type.dims[r - 1], what);
    }
    ir_vwant_shard(c, x, r - 1, -1, " (rmsnorm normalizes over the whole last dim)");
    return true;
}

static void verify_rmsnorm(ir_vctx *c, const ir_op *op) {
    const ir_value *x = ir_vv(c, op->in[0]), *w = ir_vv(c, op->in[1]);
    check_rmsnorm_in(c, x, w);
    ir_vsame_type(c, x, ir_vv(c, op->out[0]));
}

/* rmsnorm_bwd(dy, x, w) -> (dx, dw) */
static void verify_rmsnorm_bwd(ir_vctx *c, const ir_op *op) {
    const ir_value *x = ir_vv(c, op->in[1]), *w = ir_vv(c, op->in[2]);
    check_rmsnorm_in(c, x, w);
    ir_vsame_type(c, x, ir_vv(c, op->in[0]));
    ir_vsame_type(c, x, ir_vv(c, op->out[0]));
    ir_vsame_shape(c, w, ir_vv(c, op->out[1]));
}

/* bias_add(x, b) -> y: b's dims are x's trailing dims, whole (the bias is
 * added where every rank holds them); y has x's type.
 * bias_add_bwd(dy) -> db: the same rule between dy and db. */
static void check_bias_add(ir_vctx *c, const ir_op *op, bool bwd) {
    const ir_value *x = ir_vv(c, op->in[0]), *y = ir_vv(c, op->out[0]);
    const ir_value *b = bwd ? y : ir_vv(c, op->in[1]);
    int r = x->type.rank, rb = b->type.rank;
    if (rb < 1 || rb > r) {
        char d[96], t[IR_TYPE_STR_MAX];
        ir_verr(c, sup_noloc(), "%s (%s) must have between 1 and %d dims: the trailing dims of the first operand",
                ir_vdesc(c, b, d, sizeof d), ir_vtstr(c, b, t), r);
        return;
    }
    char what[160], d[96];
    for (int k = 0; k < rb; k++) {
        if (b->type.dims[k] != x->type.dims[r - rb + k]) { /* described only for the report */
            snprintf(what, sizeof what, "dim %d of %s", r - rb + k, ir_vdesc(c, x, d, sizeof d));
            ir_vwant_dim(c, b, k, x->type.dims[r - rb + k], what);
        }
        ir_vwant_shard(c, x, r - rb + k, -1, " (a bias is added over whole trailing dims)");
        ir_vwant_shard(c, b, k, -1, " (a bias is used whole)");
    }
    if (!bwd) ir_vsame_type(c, x, y);
}

static void verify_bias_add(ir_vctx *c, const ir_op *op) { check_bias_add(c, op, false); }
static void verify_bias_add_bwd(ir_vctx *c, const ir_op *op) { check_bias_add(c, op, true); }

/* add_rmsnorm(a, b, w) -> (s, y): s = a + b, y = rmsnorm(s, w). */
static void verify_add_rmsnorm(ir_vctx *c, const ir_op *op) {
    const ir_value *a = ir_vv(c, op->in[0]), *w = ir_vv(c, op->in[2]);
    check_rmsnorm_in(c, a, w);
    ir_vsame_type(c, a, ir_vv(c, op->in[1]));
    ir_vsame_type(c, a, ir_vv(c, op->out[0]));
    ir_vsame_type(c, a, ir_vv(c, op->out[1]));
}

/* add_rmsnorm_bwd(dy, s, w, dr) -> (ds, dw): ds = dr + rmsnorm_bwd's dx. */
static void verify_add_rmsnorm_bwd(ir_vctx *c, const ir_op *op) {
    verify_rmsnorm_bwd(c, op);
    ir_vsame_type(c, ir_vv(c, op->in[1]), ir_vv(c, op->in[3]));
}

/* ---- kernel workspace (ir_mem_work_bytes) ----------------------------------------- */

/* rmsnorm_bwd on CUDA: the fp32 sum of the weight gradient. */
static void ws_cuda_rmsnorm_bwd(const ir_module *m, const ir_op *op, int64_t *w) {
    ir_ws_raise(&w[CM_WS_CUDA_F32], 4 * ir_op_local_elems(m, op->out[1]));
}

/* ---- work (the cost model's inputs) --------------------------------------------- */

/* N·I·O of a linear: x [N.., I..] (I = the last `contract` dims), y = x·w
 * with O output features; N and O from local element counts, so sharded
 * tokens and sharded heads are both counted as the rank holds them. */
static double linear_nio(const ir_module *m, const ir_op *op, int x, int y) {
    int c = (int)ir_attr_int(op, "contract", 1);
    const ir_type *xt = &m->values[x].type;
    double I = ir_op_tail_local(m, xt, c);
    double N = (double)ir_type_local_elems(m, xt) / (I > 0 ? I : 1);
    double O = (double)ir_type_local_elems(m, &m->values[y].type) / (N > 0 ? N : 1);
    return N * I * O;
}

static ir_op_work work_linear(const ir_module *m, const ir_op *op) {
    return (ir_op_work){.flops = 2 * linear_nio(m, op, op->in[0], op->out[0]), .bytes = ir_op_bytes_moved(m, op)};
}

/* The dx and dw GEMMs. */
static ir_op_work work_linear_bwd(const ir_module *m, const ir_op *op) {
    return (ir_op_work){.flops = 4 * linear_nio(m, op, op->in[1], op->in[0]), .bytes = ir_op_bytes_moved(m, op)};
}

/* ---- runtime call (codegen) ------------------------------------------------------- */

/* The pointer arguments shared by rmsnorm and linear: y, x, w forward;
 * dx, dw, dy, x, w backward (the runtime's argument order). */
static void args_x_w(ir_emit *e, bool bwd, const ir_value *x, const ir_value *w) {
    ir_emit_f32(e, ir_emit_out(e, 0));
    if (bwd) {
        ir_emit_f32(e, ir_emit_out(e, 1));
        ir_emit_f32(e, ir_emit_in(e, 0));
    }
    ir_emit_f32(e, x);
    ir_emit_f32(e, w);
}

/* rmsnorm(x, w) -> y ; rmsnorm_bwd(dy, x, w) -> dx, dw.  D = x's last dim. */
static void emit_rmsnorm_common(ir_emit *e, bool bwd) {
    const ir_value *x = ir_emit_in(e, bwd ? 1 : 0), *w = ir_emit_in(e, bwd ? 2 : 1);
    int r = x->type.rank;
    if (r < 1) { /* never silently drop the op */
        ir_emit_fail(e, "%%%s is a scalar; rmsnorm normalises a last dim", x->name);
        return;
    }
    if (!ir_emit_whole(e, x, r - 1, r, "the normalised dim") || !ir_emit_whole(e, w, 0, 1, "the norm weight")) return;
    ir_emit_call(e);
    args_x_w(e, bwd, x, w);
    ir_emit_int(e, ir_emit_lprod(e, x, 0, r - 1));
    ir_emit_int(e, x->type.dims[r - 1]);
    ir_emit_dbl(e, ir_emit_attr_or_config(e, "eps", "norm_eps"));
    ir_emit_end(e);
}

static void emit_rmsnorm(ir_emit *e) { emit_rmsnorm_common(e, false); }
static void emit_rmsnorm_bwd(ir_emit *e) { emit_rmsnorm_common(e, true); }

/* add_rmsnorm(a, b, w) -> s, y: rt_add_rmsnorm(s, y, a, b, w, N, D, eps);
 * add_rmsnorm_bwd(dy, s, w, dr) -> ds, dw: rt_add_rmsnorm_bwd(ds, dw, dy,
 * s, w, dr, N, D, eps).  D = the last dim, whole. */
static void emit_add_rmsnorm_common(ir_emit *e, bool bwd) {
    const ir_value *x = ir_emit_in(e, bwd ? 1 : 0), *w = ir_emit_in(e, 2);
    int r = x->type.rank;
    if (r < 1) {
        ir_emit_fail(e, "%%%s is a scalar; rmsnorm normalises a last dim", x->name);
        return;
    }
    if (!ir_emit_whole(e, x, r - 1, r, "the normalised dim") || !ir_emit_whole(e, w, 0, 1, "the norm weight")) return;
    ir_emit_call(e);
    ir_emit_f32(e, ir_emit_out(e, 0));
    ir_emit_f32(e, ir_emit_out(e, 1));
    for (int i = 0; i < 4; i++)
        if (i < e->op->nin) ir_emit_f32(e, ir_emit_in(e, i));
    ir_emit_int(e, ir_emit_lprod(e, x, 0, r - 1));
    ir_emit_int(e, x->type.dims[r - 1]);
    ir_emit_dbl(e, ir_emit_attr_or_config(e, "eps", "norm_eps"));
    ir_emit_end(e);
}

static void emit_add_rmsnorm(ir_emit *e) { emit_add_rmsnorm_common(e, false); }
static void emit_add_rmsnorm_bwd(ir_emit *e) { emit_add_rmsnorm_common(e, true); }

/* linear(x, w) -> y ; linear_bwd(dy, x, w) -> dx, dw ; attr contract = c:
 * N = leading rank-c local dims of x, I = x's trailing c dims, O = w's dims
 * after the first c. */
static void emit_linear_common(ir_emit *e, bool bwd) {
    const ir_value *x = ir_emit_in(e, bwd ? 1 : 0), *w = ir_emit_in(e, bwd ? 2 : 1);
    int64_t k = ir_attr_int(e->op, "contract", 1);
    int r = x->type.rank;
    if (k < 1 || k > r || k > w->type.rank) {
        ir_emit_fail(e, "contract = %" PRId64 " does not fit %%%s (rank %d) and %%%s (rank %d)", k, x->name, r, w->name,
                     w->type.rank);
        return;
    }
    if (!ir_emit_whole(e, x, r - (int)k, r, "a contracted dim") || !ir_emit_whole(e, w, 0, w->type.rank, "the weight"))
        return;
    int64_t N = ir_emit_lprod(e, x, 0, r - (int)k), I = ir_emit_lprod(e, x, r - (int)k, r);
    int64_t O = ir_emit_lprod(e, w, (int)k, w->type.rank);
    const ir_value *y = bwd ? ir_emit_in(e, 0) : ir_emit_out(e, 0);
    if (ir_type_local_elems(e->m, &y->type) != N * O) {
        ir_emit_fail(e, "%%%s holds %" PRId64 " local elements, not N*O = %" PRId64 "*%" PRId64, y->name,
                     ir_type_local_elems(e->m, &y->type), N, O);
        return;
    }
    ir_emit_call(e);
    args_x_w(e, bwd, x, w);
    ir_emit_int(e, N);
    ir_emit_int(e, I);
    ir_emit_int(e, O);
    ir_emit_end(e);
}

static void emit_linear(ir_emit *e) { emit_linear_common(e, false); }
static void emit_linear_bwd(ir_emit *e) { emit_linear_common(e, true); }

/* bias_add(x, b) -> y ; bias_add_bwd(dy) -> db: M = the bias's elements
 * (whole), N = the local elements of x (dy) / M. */
static void emit_bias_add_common(ir_emit *e, bool bwd) {
    const ir_value *x = ir_emit_in(e, 0), *b = bwd ? ir_emit_out(e, 0) : ir_emit_in(e, 1);
    int r = x->type.rank, rb = b->type.rank;
    if (rb < 1 || rb > r || !ir_emit_whole(e, b, 0, rb, "a bias") || !ir_emit_whole(e, x, r - rb, r, "the biased dims"))
        return;
    int64_t M = ir_emit_lprod(e, b, 0, rb);
    ir_emit_call(e);
    ir_emit_f32(e, ir_emit_out(e, 0));
    ir_emit_f32(e, x);
    if (!bwd) ir_emit_f32(e, b);
    ir_emit_int(e, ir_emit_lprod(e, x, 0, r - rb));
    ir_emit_int(e, M);
    ir_emit_end(e);
}

static void emit_bias_add(ir_emit *e) { emit_bias_add_common(e, false); }
static void emit_bias_add_bwd(ir_emit *e) { emit_bias_add_common(e, true); }

/* ---- descriptors ---------------------------------------------------------------- */

/* x[...,c..], w[c..,o..] -> [...,o..] ; attr contract = #c (default 1) */
const ir_op_desc ir_op_linear = {
    .name = "linear",
    .kind = IR_K_COMPUTE,
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_linear,
    .work = work_linear,
    .rt_fn = "rt_linear",
    .emit = emit_linear,
};

/* dy, x, w -> dx, dw */
const ir_op_desc ir_op_linear_bwd = {
    .name = "linear_bwd",
    .kind = IR_K_COMPUTE,
    .min_in = 3,
    .max_in = 3,
    .min_out = 2,
    .max_out = 2,
    .verify = verify_linear_bwd,
    .wgrad_outs = 1u << 1 /* dw */,
    .work = work_linear_bwd,
    .rt_fn = "rt_linear_bwd",
    .emit = emit_linear_bwd,
};

/* x[B,S,D], w[D] -> [B,S,D] ; attr eps (default config norm_eps) */
const ir_op_desc ir_op_rmsnorm = {
    .name = "rmsnorm",
    .kind = IR_K_COMPUTE,
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_rmsnorm,
    .rt_fn = "rt_rmsnorm",
    .emit = emit_rmsnorm,
};

/* dy, x, w -> dx, dw */
const ir_op_desc ir_op_rmsnorm_bwd = {
    .name = "rmsnorm_bwd",
    .kind = IR_K_COMPUTE,
    .min_in = 3,
    .max_in = 3,
    .min_out = 2,
    .max_out = 2,
    .verify = verify_rmsnorm_bwd,
    .wgrad_outs = 1u << 1 /* dw */,
    .ws_cuda = ws_cuda_rmsnorm_bwd,
    .rt_fn = "rt_rmsnorm_bwd",
    .emit = emit_rmsnorm_bwd,
};

/* a, b [B,S,D], w[D] -> s = a + b, y = rmsnorm(s, w): the residual add and
 * the norm after it in one pass over the rows (passes/pass_fuse_elem.c) */
const ir_op_desc ir_op_add_rmsnorm = {
    .name = "add_rmsnorm",
    .kind = IR_K_COMPUTE,
    .min_in = 3,
    .max_in = 3,
    .min_out = 2,
    .max_out = 2,
    .verify = verify_add_rmsnorm,
    .rt_fn = "rt_add_rmsnorm",
    .emit = emit_add_rmsnorm,
};

/* dy, s, w, dr -> ds = dr + rmsnorm_bwd(dy, s, w)'s dx, dw: the norm's
 * backward with the residual's gradient added as each row is written */
const ir_op_desc ir_op_add_rmsnorm_bwd = {
    .name = "add_rmsnorm_bwd",
    .kind = IR_K_COMPUTE,
    .min_in = 4,
    .max_in = 4,
    .min_out = 2,
    .max_out = 2,
    .verify = verify_add_rmsnorm_bwd,
    .wgrad_outs = 1u << 1 /* dw */,
    .ws_cuda = ws_cuda_rmsnorm_bwd,
    .rt_fn = "rt_add_rmsnorm_bwd",
    .emit = emit_add_rmsnorm_bwd,
};

/* x[..., t..] + b[t..]: a bias over x's trailing dims (Qwen's q/k/v biases,
 * b [H, Dh] on q [B,S,H,Dh]) */
const ir_op_desc ir_op_bias_add = {
    .name = "bias_add",
    .kind = IR_K_COMPUTE,
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_bias_add,
    .rt_fn = "rt_bias_add",
    .emit = emit_bias_add,
};

/* dy -> db[t..]: the sum of dy over its leading dims, db's rank giving the
 * trailing dims (dx is dy itself) */
const ir_op_desc ir_op_bias_add_bwd = {
    .name = "bias_add_bwd",
    .kind = IR_K_COMPUTE,
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_bias_add_bwd,
    .wgrad_outs = 1u << 0 /* db */,
    .rt_fn = "rt_bias_add_bwd",
    .emit = emit_bias_add_bwd,
};
