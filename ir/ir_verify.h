/* ir_verify.h — shared by the verifier's files, private to ir/.
 * ir_verify.c checks structure (mesh, groups, values, def/use, attributes);
 * ir_verify_ops.c checks the per-op type and layout rules, ir_verify_groups.c
 * the groups together, ir_verify_async.c started collectives. */
#ifndef BASP_IR_VERIFY_H
#define BASP_IR_VERIFY_H

#include "ir.h"

typedef struct ir_vctx {
    const ir_module *m;
    const char *context; /* "after pass 'ulysses'", or NULL */
    int errors;
    int op; /* op being checked, -1 when none */
} ir_vctx;

/* Reports one violation, prefixed by the context and the current op, at the
 * op's location when it has one, else at `loc`. */
void ir_verr(ir_vctx *c, sup_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Type and layout rules of op c->op (its descriptor's verify); its operand
 * and result indices are known to be valid. */
void ir_verify_op_types(ir_vctx *c, const ir_op *op);
/* An accum value is read only by accumulate (its target) and the apply phase. */
void ir_verify_accum_reads(ir_vctx *c, const ir_op *op);

/* The sequence order (config seq_ring = R > 1: the ring's zig-zag order):
 * seq_len divides into 2R chunks, every ring_attention runs over a ring of
 * R ranks, and no attention masks by index (ir_verify_ops.c). */
void ir_verify_seq_order(ir_vctx *c);

/* The groups taken together (ir_verify_groups.c): every value sharded by
 * several groups covered evenly, and every collective's sets agreeing on
 * the blocks it does not exchange.  Needs valid groups, values and ops. */
void ir_verify_groups_joint(ir_vctx *c);

/* A module of batch_aware dynamic's variants (ops tagged variant = K):
 * contiguous runs, values and block groups kept to their variant, the same
 * world collectives in every variant (ir_verify_variants.c). */
void ir_verify_variants(ir_vctx *c);

/* Started collectives (async = 1) and their waits (ir_verify_async.c). */
void ir_verify_async(ir_vctx *c);

/* The memory plan's rules (ir_mem.c): placement, alignment, bounds, no
 * overlap of buffers live at the same time. */
void ir_verify_mem(ir_vctx *c);

/* Message helpers shared by the rule files (ir_verify_ops.c; the ops'
 * rules are in their family files ir_op_*.c). */
const ir_value *ir_vv(ir_vctx *c, int idx);
const char *ir_vgname(ir_vctx *c, int g);
/* "input %x" or "result %y" */
const char *ir_vdesc(ir_vctx *c, const ir_value *v, char *buf, size_t n);
const char *ir_vtstr(ir_vctx *c, const ir_value *v, char *buf);
/* "sharded by @sp" or "whole" */
const char *ir_vshard_str(ir_vctx *c, int g, char *buf, size_t n);
/* Each reports the mismatch and returns false. */
bool ir_vsame_type(ir_vctx *c, const ir_value *a, const ir_value *b);
bool ir_vwant_dim(ir_vctx *c, const ir_value *v, int d, int64_t size, const char *what);
bool ir_vwant_shard(ir_vctx *c, const ir_value *v, int d, int g, const char *why);
/* `shape` names the expected form in the message ("[B,S,D]"). */
bool ir_vwant_rank(ir_vctx *c, const ir_value *v, int rank, const char *shape);
bool ir_vwant_dtype(ir_vctx *c, const ir_value *v, ir_dtype dt);
/* Dims [from, to) of a and b agree in size and layout. */
void ir_vsame_dims(ir_vctx *c, const ir_value *a, int from, int to, const ir_value *b, const char *why);
/* Same rank and sizes; layouts may differ (gradients of params). */
void ir_vsame_shape(ir_vctx *c, const ir_value *a, const ir_value *b);

#endif
