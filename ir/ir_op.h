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
 * An op's ws_cpu / ws_cuda raises the target's slots its kernel takes
 * (ir_ws_raise), indexed by the rows of common/common.h (CM_WS_CPU_*,
 * CM_WS_CUDA_*) that the backends index their buffers by; the statistics
 * attention forwards keep for their backwards (the SUMS rows) add up
 * instead.  The array holds CM_WS_CPU_N or CM_WS_CUDA_N entries. */
static inline void ir_ws_raise(int64_t *slot, int64_t b) {
    if (b > *slot) *slot = b;
}

/* RoPE's workspace for rotating value v ([b,s,H,Dh]) in op op: the rope
 * ops' (ir_op_elem.c), and the exchange's that rotates as it packs
 * (ir_op_coll.c). */
void ir_ws_cpu_rope_of(const ir_module *m, const ir_op *op, const ir_value *v, int64_t *w);
void ir_ws_cuda_rope_of(const ir_module *m, const ir_op *op, const ir_value *v, int64_t *w);

/* n * k, or -1 on overflow (n, k >= 0). */
static inline int64_t ir_mem_mul(int64_t n, int64_t k) { return k != 0 && n > INT64_MAX / k ? -1 : n * k; }

/* Elements value v holds on one rank (the largest share when uneven). */
static inline int64_t ir_op_local_elems(const ir_module *m, int v) {
    return ir_type_local_elems(m, &m->values[v].type);
}

/* Rows of x [.., D]: every local dim but the last. */
static inline int64_t ir_op_rows_of(const ir_module *m, int v) {
    const ir_type *x = &m->values[v].type;
    return x->rank > 0 ? ir_type_local_elems(m, x) / x->dims[x->rank - 1] : 1;
}

#endif
