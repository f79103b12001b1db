/* ir_op_state.c — the ops on the step's state rather than on activations:
 * the AdamW update, gradient accumulation across micro-steps, free, wait,
 * and the copies between device and host memory (offload, fetch). */
#include "ir_op.h"

/* ---- verify (ir/README.md rule 5) -------------------------------------------- */

/* adamw(w, dw): same shape; dw laid out like w, or whole where w is sharded
 * (ZeRO-1: each rank updates the slice of w it owns from the full gradient). */
static void verify_adamw(ir_vctx *c, const ir_op *op) {
    const ir_value *w = ir_vv(c, op->in[0]), *dw = ir_vv(c, op->in[1]);
    if (w->kind != IR_V_PARAM) ir_verr(c, sup_noloc(), "%%%s is not a param (adamw updates a param in place)", w->name);
    ir_vsame_shape(c, w, dw);
    if (w->type.rank != dw->type.rank) return;
    for (int d = 0; d < w->type.rank; d++) {
        int gw = w->type.shard[d], gd = dw->type.shard[d];
        if (gw == gd || (gd == -1 && gw >= 0)) continue;
        char a[80], b[80];
        ir_verr(c, sup_noloc(),
                "gradient %%%s dim %d is %s but param %%%s dim %d is %s (the gradient must be laid "
                "out like the param, or whole where the param is sharded)",
                dw->name, d, ir_vshard_str(c, gd, a, sizeof a), w->name, d, ir_vshard_str(c, gw, b, sizeof b));
    }
}

/* accumulate(acc, g): acc an accum value of g's type (shape and sharding),
 * added to once per micro-step; an accum value is written by nothing else,
 * and read otherwise only by the apply phase (`phase = opt`), after the
 * micro-steps. */
static void verify_accumulate(ir_vctx *c, const ir_op *op) {
    const ir_value *acc = ir_vv(c, op->in[0]), *g = ir_vv(c, op->in[1]);
    if (acc->kind != IR_V_ACCUM)
        ir_verr(c, sup_noloc(), "%%%s is a%s %s, not an accum value (accumulate adds into a gradient accumulator)",
                acc->name, acc->kind == IR_V_INPUT ? "n" : "", ir_value_kind_name(acc->kind));
    if (g->kind == IR_V_ACCUM)
        ir_verr(c, sup_noloc(), "accumulate adds a micro-step's gradient, not the accumulator %%%s", g->name);
    ir_vsame_type(c, acc, g);
}

/* offload x -> x.host: a copy of an op result in host memory, of x's type.
 * Parameters and inputs live the whole step on the device: moving them
 * would free nothing. */
static void verify_offload(ir_vctx *c, const ir_op *op) {
    const ir_value *x = ir_vv(c, op->in[0]);
    if (x->kind != IR_V_RESULT)
        ir_verr(c, sup_noloc(),
                "offload moves an op result to host memory; %%%s is a%s %s, which lives the whole "
                "step on the device",
                x->name, x->kind == IR_V_INPUT || x->kind == IR_V_ACCUM ? "n" : "", ir_value_kind_name(x->kind));
    ir_vsame_type(c, x, ir_vv(c, op->out[0]));
}

/* fetch x.host -> x: the copy to the device, of the same type; its operand
 * is an offload's result or an offloaded parameter. */
static void verify_fetch(ir_vctx *c, const ir_op *op) {
    const ir_value *h = ir_vv(c, op->in[0]);
    if (!ir_mem_on_host(c->m, op->in[0]))
        ir_verr(c, sup_noloc(),
                "fetch copies a value in host memory to the device; %%%s lives on the device "
                "(only offload's results, and parameters with offload.params = 1, live in host memory)",
                h->name);
    ir_vsame_type(c, h, ir_vv(c, op->out[0]));
}

/* ---- staging and kernel workspace (ir_mem.c) --------------------------------------- */

/* Whether adamw's gradient is laid out like its param (else ZeRO-1 copies
 * the param's slice of the whole gradient to the staging area). */
static bool grad_like_param(const ir_module *m, int p, int g) {
    const ir_type *a = &m->values[p].type, *b = &m->values[g].type;
    for (int i = 0; i < a->rank && i < b->rank; i++)
        if (a->shard[i] != b->shard[i]) return false;
    return true;
}

/* ZeRO-1's adamw stages the rank's slice of the whole gradient
 * (runtime/cpu/rt_opt.c). */
static void staging_adamw(const ir_module *m, const ir_op *op, int64_t e[2]) {
    if (op->nin == 2 && !grad_like_param(m, op->in[0], op->in[1])) e[0] = ir_op_local_elems(m, op->in[0]);
}

/* The same slice on CUDA, in bf16. */
static void ws_cuda_adamw(const ir_module *m, const ir_op *op, int64_t *w) {
    int64_t e[2] = {0, 0};
    staging_adamw(m, op, e);
    ir_ws_raise(&w[CM_WS_CUDA_SLICE], 2 * e[0]);
}

/* ---- work (the cost model's inputs) --------------------------------------------- */

/* AdamW reads and writes w and its two fp32 moments and reads dw. */
static ir_op_work work_adamw(const ir_module *m, const ir_op *op) {
    return (ir_op_work){.bytes = 2 * ir_op_local_bytes(m, op->in[0]) + ir_op_local_bytes(m, op->in[1]) +
                                 16.0 * (double)ir_type_local_elems(m, &m->values[op->in[0]].type)};
}

/* A copy over the host link: the operand's bytes once (the cost model
 * divides them by the link's bandwidth, IR_COMM_HOST). */
static ir_op_work work_copy(const ir_module *m, const ir_op *op) {
    return (ir_op_work){.bytes = ir_op_local_bytes(m, op->in[0])};
}

/* ---- runtime call (codegen) ------------------------------------------------------- */

/* offload / fetch x -> y: the runtime copies x's local buffer into y's. */
static void emit_copy(ir_emit *e) {
    ir_emit_call(e);
    ir_emit_val(e, ir_emit_in(e, 0));
    ir_emit_val(e, ir_emit_out(e, 0));
    ir_emit_end(e);
}

static void emit_adamw(ir_emit *e) {
    ir_emit_call(e);
    ir_emit_val(e, ir_emit_in(e, 0));
    ir_emit_val(e, ir_emit_in(e, 1));
    ir_emit_end(e);
}

/* accumulate acc, g: acc += g, an in-place add (elementwise: y may be a). */
static void emit_accumulate(ir_emit *e) {
    ir_emit_call(e);
    ir_emit_f32(e, ir_emit_in(e, 0));
    ir_emit_f32(e, ir_emit_in(e, 0));
    ir_emit_f32(e, ir_emit_in(e, 1));
    ir_emit_int(e, ir_type_local_elems(e->m, &ir_emit_in(e, 0)->type));
    ir_emit_end(e);
}

static void emit_free_op(ir_emit *e) {
    ir_emit_call(e);
    ir_emit_val(e, ir_emit_in(e, 0));
    ir_emit_end(e);
}

/* wait %a, %b: one runtime call completing the collectives they came from */
static void emit_wait(ir_emit *e) {
    ir_emit_call(e);
    ir_emit_int(e, e->op->nin);
    e->values(e, e->op->in, e->op->nin);
    ir_emit_end(e);
}

/* ---- descriptors ---------------------------------------------------------------- */

/* w, dw (same type): updates w in place */
const ir_op_desc ir_op_adamw = {
    .name = "adamw",
    .kind = IR_K_OPT,
    .min_in = 2,
    .max_in = 2,
    .min_out = 0,
    .max_out = 0,
    .verify = verify_adamw,
    .staging = staging_adamw,
    .ws_cuda = ws_cuda_adamw,
    .work = work_adamw,
    .rt_fn = "rt_adamw",
    .emit = emit_adamw,
};

/* Gradient accumulation (config accum > 1): acc, g (same type), acc an
 * accum value: acc += g in place, once per micro-step. */
const ir_op_desc ir_op_accumulate = {
    .name = "accumulate",
    .kind = IR_K_COMPUTE,
    .min_in = 2,
    .max_in = 2,
    .min_out = 0,
    .max_out = 0,
    .verify = verify_accumulate,
    .rt_fn = "rt_add",
    .emit = emit_accumulate,
};

/* the value is dead: release its buffer */
const ir_op_desc ir_op_free = {
    .name = "free",
    .kind = IR_K_MEM,
    .min_in = 1,
    .max_in = 1,
    .min_out = 0,
    .max_out = 0,
    .verify = NULL,
    .rt_fn = "rt_free",
    .emit = emit_free_op,
};

/* the results of started collectives (async = 1) are complete: readers may
 * follow, and the collectives' operands may be released (ir_verify_async.c) */
const ir_op_desc ir_op_wait = {
    .name = "wait",
    .kind = IR_K_MEM,
    .min_in = 1,
    .max_in = IR_MAX_IN,
    .min_out = 0,
    .max_out = 0,
    .verify = NULL,
    .rt_fn = "rt_wait",
    .emit = emit_wait,
};

/* x -> x.host: a copy of x in host memory (ir/README.md "Host memory") */
const ir_op_desc ir_op_offload = {
    .name = "offload",
    .kind = IR_K_MEM,
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_offload,
    .keeps_weight = true, /* a gradient's host copy is a gradient */
    .host_outs = 1u,
    .comm = IR_COMM_HOST,
    .work = work_copy,
    .rt_fn = "rt_offload",
    .emit = emit_copy,
};

/* x.host -> x: the copy back to the device */
const ir_op_desc ir_op_fetch = {
    .name = "fetch",
    .kind = IR_K_MEM,
    .min_in = 1,
    .max_in = 1,
    .min_out = 1,
    .max_out = 1,
    .verify = verify_fetch,
    .keeps_weight = true,
    .reads_host = true,
    .comm = IR_COMM_HOST,
    .work = work_copy,
    .rt_fn = "rt_fetch",
    .emit = emit_copy,
};
