/* pass_util.h — small helpers shared by the passes.  Private to passes/: the
 * public interface of the folder is passes.h. */
#ifndef BASP_PASS_UTIL_H
#define BASP_PASS_UTIL_H

#include <stdbool.h>

#include "passes.h"

/* The value helpers and the exchange the partitioning passes share are in
 * passes.h (pass_value_derived, pass_exchange, pass_shard_sequence), since
 * the pass-writer API exposes them too. */
/* The sequence group of ulysses and ring: @sp, G contiguous sets of K =
 * N/G ranks, listed before batch-aware's @dp (the group that shares a
 * sequence first, as the schedule report and the generated program name
 * them), with every activation's sequence sharded over it; its index. */
int pu_sequence_group(ir_module *m, int G);
/* G: the set size of batch-aware's @dp, 1 without it (with a remark naming
 * `pass` when the config asks for groups that batch-aware did not make). */
int pu_batch_groups(const ir_module *m, const pass_options *opt, const char *pass);
/* Same layer/phase as op `from`. */
void pu_tag_like(ir_op *op, const ir_op *from);

/* True for an activation: not weight-like (ir_weight_flags, the one rule
 * the memory report shares), rank >= 2; the passes shard activations'
 * batch and sequence dimensions. */
bool pu_is_activation(const ir_module *m, const bool *weight, int v);

/* Config string with a default. */
const char *pu_cfg(const ir_module *m, const char *key, const char *def);
/* Number of ops with this opcode. */
int pu_count_ops(const ir_module *m, ir_opcode code);
/* Index of the first op at or after `start` reading value v, -1 if none. */
int pu_first_use(const ir_module *m, int v, int start);
/* True when op reads value v. */
bool pu_reads(const ir_op *op, int v);
/* Per value, from one walk over the step: its readers other than frees
 * (how many: an op reading it twice counts once when the operands are
 * adjacent, `add %a, %a`; and the last one), the free that releases it
 * and the op defining it (-1: none).  The fusion passes' rules read them. */
typedef struct pu_uses {
    int *nread, *reader, *freed, *def;
} pu_uses;
pu_uses pu_uses_of(const ir_module *m);
void pu_uses_free(pu_uses *u);

/* A remark, unless the options ask for quiet. */
void pu_remark(const pass_options *opt, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The model sizes the partitioning passes reason about.  Read from the
 * config (lower copies them there); when a hand-written module lacks a key,
 * taken from the IR itself (tokens [B,S], the first attention's q and k). */
typedef struct pu_dims {
    int64_t B, S, H, Hk;
} pu_dims;
pu_dims pu_model_dims(const ir_module *m);

/* layout_heads_uneven on the module's dimensions (pass_layout_dims). */
bool pu_heads_uneven(const ir_module *m, int K);
/* Config attention_chunks: the head chunks attention runs in (1: unchunked). */
int64_t pu_attention_chunks(const ir_module *m);
/* Head chunks (pass_ulysses.c, pass_ring.c): v's type with C times fewer
 * heads (dim 2); the head_slice of chunk c of ins[0..n) into outs, and the
 * head_concat of C chunks into out, tagged like `like`. */
enum { PU_MAX_CHUNKS = 8 };
ir_type pu_chunk_type(const ir_module *m, int v, int C);
/* An attention's row statistics (its lse value): f32 [B,S,H] laid out like
 * q's first three dims (pass_ulysses.c, pass_ring.c, pass_attention_lse.c;
 * the verifier's rule in ir/ir_op_attn.c). */
ir_type pu_lse_type(const ir_type *q);
ir_op pu_head_slice_op(const int *ins, const int *outs, int n, int c, int C, const ir_op *like);
ir_op pu_head_concat_op(const int *ins, int C, int out, const ir_op *like);
/* Config attention_chunks against the model: at most PU_MAX_CHUNKS,
 * dividing the heads and the kv heads (chunks hold whole kv groups); false
 * after an error naming `pass`. */
bool pu_check_chunks(const ir_module *m, int C, const char *pass);
/* The forward chunks of one attention, for its backward. */
typedef struct pu_chunked {
    int qr;                 /* the forward's q operand (its backward reads the same value) */
    int lse[PU_MAX_CHUNKS]; /* per chunk: the row statistics */
} pu_chunked;
/* A pass's chunked wraps of one attention (op i) and of one attention_bwd,
 * recorded in e; ctx is the pass's own. */
typedef struct pu_chunker {
    const char *pass;
    const void *ctx;
    void (*fwd)(ir_module *m, const void *ctx, pass_edits *e, int i, int C, pu_chunked *rec);
    void (*bwd)(ir_module *m, const void *ctx, pass_edits *e, int i, int C, const pu_chunked *rec);
} pu_chunker;
/* Wraps every attention in C head chunks, then every attention_bwd with
 * the chunks of the forward that read its q; false (reported) when a
 * backward has none. */
bool pu_wrap_chunked(ir_module *m, const pu_chunker *k, int C);

/* Swaps groups a and b in the module's list, and every reference to them
 * (shards, group attributes): the order groups are printed in. */
void pu_group_swap(ir_module *m, int a, int b);

/* pass_overlap_sp.c: splits the fused sequence-parallel exchanges whose
 * split pays in the cost model (one part started and waited around compute
 * that does not need it); returns how many. */
typedef struct pass_ovsp_stats {
    int candidates; /* fused exchanges of two or more tensors */
    int hoisted;    /* split with the start moved up (the others: sunk) */
    int link_kept;  /* kept whole: across nodes, where ZeRO's collectives cross too */
} pass_ovsp_stats;
int pass_overlap_exchanges(ir_module *m, const pass_cost_params *cp, pass_ovsp_stats *st);
/* pass_overlap.c: op i is a ZeRO gather of a weight that its walk starts
 * early (blocking, of a parameter, landing in place, outside the apply
 * phase); *fetch (may be NULL) receives the op fetching its shard from host
 * memory right before it, which moves with it, or -1. */
bool pass_overlap_movable_gather(const ir_module *m, int i, int *fetch);

#endif
