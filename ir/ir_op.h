/* ir_op.h — shared by the op family files (ir_op_*.c) and the op table
 * (ir_ops.c); private to ir/.  Each family file defines the descriptors of
 * its ops (ir_op_<name>, listed in ir_ops.def) and keeps every function
 * they point to static. */
#ifndef BASP_IR_OP_H
#define BASP_IR_OP_H

#include "ir_verify.h"

#include <stdint.h>

#define IR_OP(e, d) extern const ir_op_desc ir_op_##d;
#include "ir_ops.def"
#undef IR_OP

/* ---- work (ir_ops.c; the cost model's inputs) ------------------------------ */
/* Bytes of value v on one rank in its IR dtype. */
double ir_op_local_bytes(const ir_module *m, int v);
/* Product of the last n dims of t as one rank holds them. */
double ir_op_tail_local(const ir_module *m, const ir_type *t, int n);
/* Every operand read once and every result written once. */
double ir_op_bytes_moved(const ir_module *m, const ir_op *op);

/* ---- runtime-call emission helpers (ir_emit.c) ------------------------------
 * The op's emit builds its call from these; each argument goes through the
 * emitter (ir.h), which codegen implements. */
const ir_value *ir_emit_in(const ir_emit *e, int k);  /* operand k */
const ir_value *ir_emit_out(const ir_emit *e, int k); /* result k */
void ir_emit_fail(ir_emit *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void ir_emit_call(ir_emit *e); /* opens the call of the op's rt_fn */
void ir_emit_end(ir_emit *e);
void ir_emit_int(ir_emit *e, int64_t v);
void ir_emit_dbl(ir_emit *e, double v);
void ir_emit_f32(ir_emit *e, const ir_value *v); /* a float buffer (f32 on the CPU) */
void ir_emit_i32(ir_emit *e, const ir_value *v); /* an int32 buffer */
void ir_emit_val(ir_emit *e, const ir_value *v); /* the value itself */
/* Product of the local sizes of dims [from, to) of v. */
int64_t ir_emit_lprod(const ir_emit *e, const ir_value *v, int from, int to);
/* Kernels index these dims as full rows or full weight matrices: a shard
 * there would need a different kernel, so refuse it (false, reported). */
bool ir_emit_whole(ir_emit *e, const ir_value *v, int from, int to, const char *why);
bool ir_emit_rank(ir_emit *e, const ir_value *v, int want);
/* The row0 argument: the first global row (batch index) of this rank's
 * slice of v's dim 0, for the runtime's per-row document tables. */
void ir_emit_row0(ir_emit *e, const ir_value *v);
/* A float attribute (int accepted), else the module config (with the
 * language's default). */
double ir_emit_attr_or_config(ir_emit *e, const char *attr, const char *key);

/* ---- kernel workspace (ir_mem_work_bytes) ---------------------------------
 * Each slot is one grow-only buffer of the target's runtime: it grows to the
 * largest request of any op, and the slots are separate allocations, so the
 * workspace is the sum of the slots.  An op's ws_cpu / ws_cuda raises the
 * slots it uses (ir_ws_raise); the statistics attention forwards keep for
 * their backwards (cuDNN's, the CPU's) add up instead. */
typedef enum {
    IR_WS_CPU_LOGITS, /* runtime/cpu/kern_lmhead.c: a [chunk, V] logits block */
    IR_WS_CPU_ROPE,   /* kern_basic.c: the RoPE table (and positions) */
    IR_WS_CPU_MLP,    /* kern_mlp.c: g, u and s of one chunk of rows */
    IR_WS_CPU_DSTATS, /* kern_docattn.c: the row statistics; kern_attention.c's backward: one head's */
    IR_WS_CPU_DPOS,   /* kern_docattn.c: the positions */
    IR_WS_CPU_LSE,    /* not a slot: a sum over the attention forwards (ir_op_attn.c) */
    IR_WS_CPU_N
} ir_ws_cpu_slot;

/* The CUDA backend's device workspaces (runtime/cuda/rt_cuda.h
 * rt_cu_ws_slot), which also hold the collectives' staging. */
typedef enum {
    IR_WS_SEND, IR_WS_RECV, IR_WS_COMM, IR_WS_F32, IR_WS_LOGITS, IR_WS_DL, IR_WS_ROWS, IR_WS_ATTN, IR_WS_SLICE,
    IR_WS_ROPE, IR_WS_MLP, IR_WS_RING, IR_WS_POS, IR_WS_DOC, IR_WS_CUDNN, IR_WS_LSE,
    IR_WS_CUDNN_STATS, /* not a slot: a sum over the attention forwards (ir_op_attn.c) */
    IR_WS_CUDA_N
} ir_ws_cuda_slot;

static inline void ir_ws_raise(int64_t *slot, int64_t b)
{
    if (b > *slot)
        *slot = b;
}

/* n * k, or -1 on overflow (n, k >= 0). */
static inline int64_t ir_mem_mul(int64_t n, int64_t k) { return k != 0 && n > INT64_MAX / k ? -1 : n * k; }

/* Elements value v holds on one rank (the largest share when uneven). */
static inline int64_t ir_op_local_elems(const ir_module *m, int v)
{
    return ir_type_local_elems(m, &m->values[v].type);
}

/* Rows of x [.., D]: every local dim but the last. */
static inline int64_t ir_op_rows_of(const ir_module *m, int v)
{
    const ir_type *x = &m->values[v].type;
    return x->rank > 0 ? ir_type_local_elems(m, x) / x->dims[x->rank - 1] : 1;
}

#endif
