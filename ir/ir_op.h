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

/* ---- kernel workspace (ir_mem_work_bytes) ---------------------------------
 * Each slot is one grow-only buffer of the target's runtime: it grows to the
 * largest request of any op, and the slots are separate allocations, so the
 * workspace is the sum of the slots.  An op's ws_cpu / ws_cuda raises the
 * slots it uses (ir_ws_raise); cuDNN's statistics add up instead. */
typedef enum {
    IR_WS_CPU_LOGITS, /* runtime/cpu/kern_lmhead.c: a [chunk, V] logits block */
    IR_WS_CPU_ROPE,   /* kern_basic.c: the RoPE table (and positions) */
    IR_WS_CPU_MLP,    /* kern_mlp.c: g, u and s of one chunk of rows */
    IR_WS_CPU_DSTATS, /* kern_docattn.c: the row statistics */
    IR_WS_CPU_DPOS,   /* kern_docattn.c: the positions */
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
