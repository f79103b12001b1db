/* ir_op_elem.c — the elementwise ops, every operand and result of one
 * type: add, swiglu and rope, with the backwards of swiglu and rope. */
#include "ir_op.h"

#include <inttypes.h>

/* ---- verify (ir/README.md rule 5) -------------------------------------------- */

/* add, swiglu, swiglu_bwd, rope, rope_bwd: every operand and result has the
 * type of the first operand. */
static void check_elementwise(ir_vctx *c, const ir_op *op, int rank) {
    const ir_value *a = ir_vv(c, op->in[0]);
    if (rank >= 0) ir_vwant_rank(c, a, rank, "[B,S,H,Dh]");
    for (int k = 1; k < op->nin; k++) ir_vsame_type(c, a, ir_vv(c, op->in[k]));
    for (int k = 0; k < op->nout; k++) ir_vsame_type(c, a, ir_vv(c, op->out[k]));
}

static void verify_same_type(ir_vctx *c, const ir_op *op) { check_elementwise(c, op, -1); }
static void verify_rope(ir_vctx *c, const ir_op *op) { check_elementwise(c, op, 4); }

/* ---- kernel workspace (ir_mem_work_bytes) ----------------------------------------- */

/* The CPU RoPE (runtime/host/kern_basic.c rope_table_get): the cos/sin
 * table of the local positions and one float more; with explicit positions
 * (the ring's zig-zag order, packed documents) also a copy of them. */
void ir_ws_cpu_rope_of(const ir_module *m, const ir_op *op, const ir_value *v, int64_t *w) {
    if (v->type.rank != 4) return;
    bool docs = ir_config_int(m, "documents", 0) != 0;
    const ir_type *x = &v->type;
    int64_t S = ir_type_max_local_dim(m, x, 1), b = (S * x->dims[3] + 1) * 4;
    if (ir_op_config_int(m, op, "seq_ring", 0) > 1 || docs) /* the table keeps a copy of the positions */
        b += 8 * S;
    ir_ws_raise(&w[CM_WS_CPU_ROPE], b);
}

static void ws_cpu_rope(const ir_module *m, const ir_op *op, int64_t *w) {
    if (op->nin >= 1) ir_ws_cpu_rope_of(m, op, &m->values[op->in[0]], w);
}

/* The CUDA RoPE: the rotation table (in the ring's zig-zag order, and
 * within packed documents, one table covers all seq_len positions), the
 * zig-zag positions, and with documents every row's positions within them. */
void ir_ws_cuda_rope_of(const ir_module *m, const ir_op *op, const ir_value *v, int64_t *w) {
    bool docs = ir_config_int(m, "documents", 0) != 0;
    const ir_type *x = &v->type;
    bool zigzag = ir_op_config_int(m, op, "seq_ring", 0) > 1;
    int64_t rows = zigzag || docs ? ir_op_config_int(m, op, "seq_len", 0) : ir_type_max_local_dim(m, x, 1);
    if (x->rank != 4) return;
    ir_ws_raise(&w[CM_WS_CUDA_ROPE], 4 * rows * x->dims[3] + 1);
    if (zigzag) ir_ws_raise(&w[CM_WS_CUDA_POS], 8 * ir_op_config_int(m, op, "seq_len", 0));
    if (docs) ir_ws_raise(&w[CM_WS_CUDA_DOC], 8 * ir_type_max_local_dim(m, x, 0) * ir_type_max_local_dim(m, x, 1));
}

static void ws_cuda_rope(const ir_module *m, const ir_op *op, int64_t *w) {
    if (op->nin >= 1) ir_ws_cuda_rope_of(m, op, &m->values[op->in[0]], w);
}

/* ---- work (the cost model's inputs) --------------------------------------------- */

/* SwiGLU's sigmoid: one exponential per element. */
static ir_op_work work_swiglu(const ir_module *m, const ir_op *op) {
    return (ir_op_work){.bytes = ir_op_bytes_moved(m, op),
                        .exps = (double)ir_type_local_elems(m, &m->values[op->out[0]].type)};
}

static ir_op_work work_swiglu_bwd(const ir_module *m, const ir_op *op) {
    return (ir_op_work){.bytes = ir_op_bytes_moved(m, op),
                        .exps = (double)ir_type_local_elems(m, &m->values[op->in[0]].type)};
}

/* ---- runtime call (codegen) ------------------------------------------------------- */

/* rope(x) -> y ; rope_bwd(dy) -> dx.  x [b,s,H,Dh] local; a rank holding a
 * slice of the sequence starts at its position in the sharding set times
 * the local sequence length. */
static void emit_rope(ir_emit *e) {
    const ir_value *x = ir_emit_in(e, 0);
    if (!ir_emit_rank(e, x, 4) || !ir_emit_whole(e, x, 3, 4, "the head dim")) return;
    int64_t b = ir_type_max_local_dim(e->m, &x->type, 0), s = ir_type_max_local_dim(e->m, &x->type, 1);
    int64_t H = ir_type_max_local_dim(e->m, &x->type, 2), Dh = x->type.dims[3];
    if (Dh % 2) {
        ir_emit_fail(e, "head dim %" PRId64 " of %%%s is odd; rope rotates pairs (i, i + Dh/2)", Dh, x->name);
        return;
    }
    ir_emit_call(e);
    ir_emit_f32(e, ir_emit_out(e, 0));
    ir_emit_f32(e, x);
    ir_emit_row0(e, x);
    ir_emit_int(e, b);
    ir_emit_int(e, s);
    ir_emit_int(e, H);
    ir_emit_int(e, Dh);
    if (x->type.shard[1] >= 0)
        e->group_pos(e, x->type.shard[1], s);
    else
        ir_emit_int(e, 0);
    ir_emit_dbl(e, ir_emit_attr_or_config(e, "theta", "rope_theta"));
    ir_emit_end(e);
}

/* add, swiglu, swiglu_bwd: n = local elements (operands share one type). */
static void emit_elementwise(ir_emit *e) {
    ir_emit_call(e);
    for (int o = 0; o < e->op->nout; o++) ir_emit_f32(e, ir_emit_out(e, o));
    for (int i = 0; i < e->op->nin; i++) ir_emit_f32(e, ir_emit_in(e, i));
    ir_emit_int(e, ir_type_local_elems(e->m, &ir_emit_out(e, 0)->type));
    ir_emit_end(e);
}

/* ---- descriptors ---------------------------------------------------------------- */

/* a, b -> a+b (same type) */
const ir_op_desc ir_op_add = {
    .name = "add",
    .kind = IR_K_COMPUTE,
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_same_type,
    .keeps_weight = true /* the sum of tied gradients */,
    .rt_fn = "rt_add",
    .emit = emit_elementwise,
};

/* g[B,S,F], u[B,S,F] -> silu(g)*u */
const ir_op_desc ir_op_swiglu = {
    .name = "swiglu",
    .kind = IR_K_COMPUTE,
    .min_in = 2,
    .max_in = 2,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_same_type,
    .work = work_swiglu,
    .rt_fn = "rt_swiglu",
    .emit = emit_elementwise,
};

/* dy, g, u -> dg, du */
const ir_op_desc ir_op_swiglu_bwd = {
    .name = "swiglu_bwd",
    .kind = IR_K_COMPUTE,
    .min_in = 3,
    .max_in = 3,
    .min_out = 2,
    .max_out = 2,
    .verify = verify_same_type,
    .work = work_swiglu_bwd,
    .rt_fn = "rt_swiglu_bwd",
    .emit = emit_elementwise,
};

/* x[B,S,H,Dh] -> same ; attr theta (default config rope_theta) */
const ir_op_desc ir_op_rope = {
    .name = "rope",
    .kind = IR_K_COMPUTE,
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_rope,
    .ws_cpu = ws_cpu_rope,
    .ws_cuda = ws_cuda_rope,
    .rt_fn = "rt_rope",
    .emit = emit_rope,
};

/* dy -> dx */
const ir_op_desc ir_op_rope_bwd = {
    .name = "rope_bwd",
    .kind = IR_K_COMPUTE,
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_rope,
    .ws_cpu = ws_cpu_rope,
    .ws_cuda = ws_cuda_rope,
    .rt_fn = "rt_rope_bwd",
    .emit = emit_rope,
};
