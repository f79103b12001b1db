/* ir_op_attn.c — causal attention over the whole sequence (after an
 * all_to_all traded the sequence shard for a head shard) and ring attention
 * over a sequence sharded around a ring, each with its backward.  Shapes:
 * q [B,S,H,Dh], k and v [B,S,Hk,Dh] with H a multiple of Hk (GQA). */
#include "ir_op.h"

#include <inttypes.h>

/* ---- verify (ir/README.md rule 5) -------------------------------------------- */

/* q [B,S,H,Dh], k and v [B,S,Hk,Dh] alike: rank 4, dims 0, 1, 3 equal and
 * H a multiple of Hk (attention and ring_attention).  False when a rank is
 * wrong (reported). */
static bool check_qkv_shapes(ir_vctx *c, const ir_value *q, const ir_value *k, const ir_value *v) {
    if (!ir_vwant_rank(c, q, 4, "[B,S,H,Dh]") || !ir_vwant_rank(c, k, 4, "[B,S,Hk,Dh]")) return false;
    ir_vsame_type(c, k, v);
    char what[128], d[96];
    static const int same_dims[] = {0, 1, 3};
    for (int i = 0; i < 3; i++) {
        if (k->type.dims[same_dims[i]] == q->type.dims[same_dims[i]]) continue; /* described only for the report */
        snprintf(what, sizeof what, "%s dim %d", ir_vdesc(c, q, d, sizeof d), same_dims[i]);
        ir_vwant_dim(c, k, same_dims[i], q->type.dims[same_dims[i]], what);
    }
    if (k->type.dims[2] > 0 && q->type.dims[2] % k->type.dims[2])
        ir_verr(c, sup_noloc(), "%%%s has %lld heads, not a multiple of the %lld heads of %%%s", q->name,
                (long long)q->type.dims[2], (long long)k->type.dims[2], k->name);
    return true;
}

/* attention(q, k, v): [B,S,H,Dh] / [B,S,Hk,Dh], whole sequence, H % Hk == 0. */
static void check_attention_in(ir_vctx *c, const ir_value *q, const ir_value *k, const ir_value *v) {
    if (!check_qkv_shapes(c, q, k, v)) return;
    const char *why = " (attention needs the whole sequence: an all_to_all must trade the sequence shard for "
                      "a head shard first)";
    ir_vwant_shard(c, q, 1, -1, why);
    ir_vwant_shard(c, k, 1, -1, why);
    if (v->type.rank == 4 && v != k) /* k == v in tests and fused kv: report once */
        ir_vwant_shard(c, v, 1, -1, why);
    ir_vwant_shard(c, k, 0, q->type.shard[0], " (q and k must split the batch alike)");
    ir_vwant_shard(c, k, 2, q->type.shard[2], " (q and k must split the heads alike)");
    /* Uneven head splits: q's unit spans exactly the q heads of k's unit, so
     * every rank's q heads read only its own kv heads. */
    int64_t uq = q->type.unit[2], uk = k->type.unit[2];
    if ((uq != 0) != (uk != 0))
        ir_verr(c, sup_noloc(), "%%%s and %%%s must both split the heads evenly or both unevenly (units %lld and %lld)",
                q->name, k->name, (long long)uq, (long long)uk);
    else if (uq != 0 && uq * k->type.dims[2] != uk * q->type.dims[2])
        ir_verr(c, sup_noloc(),
                "%%%s splits its %lld heads in units of %lld, but %%%s splits its %lld heads in units "
                "of %lld: the units must hold matching q and kv heads (unit ratio = head ratio)",
                q->name, (long long)q->type.dims[2], (long long)uq, k->name, (long long)k->type.dims[2], (long long)uk);
}

static void check_lse(ir_vctx *c, const ir_value *q, const ir_value *lse);

/* attention(q, k, v) -> o [, lse]: with the second result the row
 * statistics are a value of the step (passes/pass_attention_lse.c, and
 * head-chunked attention), not the runtime's per-output table. */
static void verify_attention(ir_vctx *c, const ir_op *op) {
    const ir_value *q = ir_vv(c, op->in[0]);
    check_attention_in(c, q, ir_vv(c, op->in[1]), ir_vv(c, op->in[2]));
    ir_vsame_type(c, q, ir_vv(c, op->out[0]));
    if (op->nout == 2) check_lse(c, q, ir_vv(c, op->out[1]));
}

/* attention_bwd(do, q, k, v, o [, lse]) -> (dq, dk, dv) */
static void verify_attention_bwd(ir_vctx *c, const ir_op *op) {
    const ir_value *q = ir_vv(c, op->in[1]), *k = ir_vv(c, op->in[2]), *v = ir_vv(c, op->in[3]);
    check_attention_in(c, q, k, v);
    ir_vsame_type(c, q, ir_vv(c, op->in[0]));
    ir_vsame_type(c, q, ir_vv(c, op->in[4]));
    if (op->nin == 6) check_lse(c, q, ir_vv(c, op->in[5]));
    ir_vsame_type(c, q, ir_vv(c, op->out[0]));
    ir_vsame_type(c, k, ir_vv(c, op->out[1]));
    ir_vsame_type(c, v, ir_vv(c, op->out[2]));
}

/* ring_attention(q, k, v) -> (o, lse): attention's shapes, but the sequence
 * dim of every operand is sharded by the op's group (the ring), and the
 * heads split evenly. */
static bool check_ring_in(ir_vctx *c, const ir_op *op, const ir_value *q, const ir_value *k, const ir_value *v) {
    int g = ir_op_group(op);
    if (g < 0 || g >= c->m->ngroups) {
        ir_verr(c, sup_noloc(), "needs a 'group = @G' attribute naming the ring");
        return false;
    }
    if (!check_qkv_shapes(c, q, k, v)) return false;
    const char *why = " (ring attention: each rank holds its slice of the sequence)";
    ir_vwant_shard(c, q, 1, g, why);
    ir_vwant_shard(c, k, 1, g, why);
    ir_vwant_shard(c, k, 0, q->type.shard[0], " (q and k must split the batch alike)");
    ir_vwant_shard(c, k, 2, q->type.shard[2], " (q and k must split the heads alike)");
    if (q->type.unit[2] || k->type.unit[2])
        ir_verr(c, sup_noloc(), "ring attention needs an even head split (%%%s, %%%s)", q->name, k->name);
    return true;
}

/* lse f32 [B,S,H], laid out like q's first three dims (an uneven head
 * split in q's units). */
static void check_lse(ir_vctx *c, const ir_value *q, const ir_value *lse) {
    if (!ir_vwant_rank(c, lse, 3, "[B,S,H]")) return;
    ir_vwant_dtype(c, lse, IR_F32);
    char what[128], d[96];
    for (int i = 0; i < 3; i++) {
        if (lse->type.dims[i] != q->type.dims[i]) { /* described only for the report */
            snprintf(what, sizeof what, "%s dim %d", ir_vdesc(c, q, d, sizeof d), i);
            ir_vwant_dim(c, lse, i, q->type.dims[i], what);
        }
        ir_vwant_shard(c, lse, i, q->type.shard[i], " (lse is laid out like q)");
    }
    if (lse->type.unit[2] != q->type.unit[2])
        ir_verr(c, sup_noloc(), "%%%s splits its heads in units of %lld, %%%s in units of %lld: lse is laid out like q",
                lse->name, (long long)lse->type.unit[2], q->name, (long long)q->type.unit[2]);
}

static void check_ring_attention(ir_vctx *c, const ir_op *op, bool bwd) {
    const ir_value *q = ir_vv(c, op->in[bwd]), *k = ir_vv(c, op->in[bwd + 1]), *v = ir_vv(c, op->in[bwd + 2]);
    if (!check_ring_in(c, op, q, k, v)) return;
    if (!bwd) {
        ir_vsame_type(c, q, ir_vv(c, op->out[0]));
        check_lse(c, q, ir_vv(c, op->out[1]));
        return;
    }
    /* ring_attention_bwd(do, q, k, v, o, lse) -> (dq, dk, dv) */
    ir_vsame_type(c, q, ir_vv(c, op->in[0]));
    ir_vsame_type(c, q, ir_vv(c, op->in[4]));
    check_lse(c, q, ir_vv(c, op->in[5]));
    ir_vsame_type(c, q, ir_vv(c, op->out[0]));
    ir_vsame_type(c, k, ir_vv(c, op->out[1]));
    ir_vsame_type(c, v, ir_vv(c, op->out[2]));
}

static void verify_ring_attention(ir_vctx *c, const ir_op *op) { check_ring_attention(c, op, false); }
static void verify_ring_attention_bwd(ir_vctx *c, const ir_op *op) { check_ring_attention(c, op, true); }

/* ---- staging and kernel workspace (ir_mem.c) --------------------------------------- */

/* With packed documents the CPU attention (runtime/host/kern_docattn.c)
 * keeps the row statistics (lse; the backward also D) and the positions
 * 0 .. S-1.  Without, the backward (kern_attention.c) keeps one head's
 * statistics (lse and D of its S rows) in the same slot, and each forward
 * leaves its rows' logsumexp [b,H,S] in fp32 for its backward
 * (runtime/cpu/rt_kernels.c), kept per output slot outside the arena: at
 * most one per attention forward op, so the sum over the forwards bounds
 * them. */
static void ws_cpu_attention_common(const ir_module *m, const ir_op *op, int64_t *w, bool bwd) {
    const ir_type *q = &m->values[op->in[bwd]].type;
    int64_t nr = q->rank == 4 ? ir_type_max_local_dim(m, q, 0) * q->dims[1] * ir_type_max_local_dim(m, q, 2) : 0;
    if (ir_config_int(m, "documents", 0) == 0) {
        if (bwd && q->rank == 4) ir_ws_raise(&w[CM_WS_CPU_DSTATS], 8 * q->dims[1]);
        if (!bwd && op->nout == 1) w[CM_WS_CPU_LSE] += 4 * nr; /* else the lse value holds them */
        return;
    }
    int64_t st = (bwd ? 8 : 4) * nr, ps = q->rank == 4 ? 8 * q->dims[1] : 0;
    ir_ws_raise(&w[CM_WS_CPU_DSTATS], st);
    ir_ws_raise(&w[CM_WS_CPU_DPOS], ps);
}

static void ws_cpu_attention(const ir_module *m, const ir_op *op, int64_t *w) {
    ws_cpu_attention_common(m, op, w, false);
}

static void ws_cpu_attention_bwd(const ir_module *m, const ir_op *op, int64_t *w) {
    ws_cpu_attention_common(m, op, w, true);
}

/* The most workspace cuDNN's attention may take for a shape (CM_WS_CUDA_CUDNN):
 * the backward's fp32 dQ accumulator [b,H,S,Dh] plus the allowance for the
 * engine's own workspace (another such accumulator, two fp32 row vectors
 * and 1 MiB).  cuda_cudnn_ws_bound in runtime/cuda/rt_attn_cudnn.c: the
 * runtime passes over engine configurations that need more, so this stays
 * an upper bound. */
static int64_t cudnn_ws(int64_t b, int64_t S, int64_t H, int64_t Dh) {
    int64_t rows = b * S * H, acc = 4 * rows * Dh;
    return acc + (acc + 8 * rows + ((int64_t)1 << 20));
}

static int64_t align256(int64_t n) { return (n + 255) / 256 * 256; }

/* Packed documents on cuDNN (runtime/cuda/rt_doc_split.c): a padded
 * batch of at most R = max(b S, the padded length of S: a power of two,
 * at least 128) rows: the (offset, length) table of at most 2 b S
 * entries, then q, k, v, o (and dO, dq, dk, dv with the backward) of R rows
 * and the fp32 statistics, each part 256-aligned; cuDNN's workspace for R
 * rows. */
static void docs_split_ws(int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh, bool bwd, int64_t *w) {
    int64_t top = cm_docs_padded(S), R = b * S > top ? b * S : top;
    int64_t parts = align256(2 * R * H * Dh) + align256(2 * R * Hkv * Dh);
    ir_ws_raise(&w[CM_WS_CUDA_DOCS], align256(32 * b * S) + (bwd ? 4 : 2) * parts + 4 * R * H);
    ir_ws_raise(&w[CM_WS_CUDA_CUDNN], cudnn_ws(1, R, H, Dh));
}

/* Attention's device workspace: the backward's two fp32 row statistics per
 * (b, s, h); with packed documents (cuda_docattn_*) fp32 o and lse
 * forward, lse, D and fp32 dq, dk, dv backward, and the positions and the
 * rows' ids uploaded.  Without documents the runtime may also run cuDNN's
 * fused attention (runtime/cuda/rt_attn_cudnn_rt.c): its workspace slot,
 * and the fp32 softmax statistics [b,H,S] each forward leaves for its
 * backward, kept per output slot (at most one per attention forward op, so
 * the sum over the forwards bounds them; they live outside the arena). */
static void ws_cuda_attention_common(const ir_module *m, const ir_op *op, int64_t *w, bool bwd) {
    bool docs = ir_config_int(m, "documents", 0) != 0;
    const ir_type *q = &m->values[op->in[bwd]].type, *k = &m->values[op->in[bwd + 1]].type;
    if (q->rank != 4 || k->rank != 4) return;
    int64_t b = ir_type_max_local_dim(m, q, 0), S = q->dims[1];
    int64_t nr = b * S * ir_type_max_local_dim(m, q, 2), nq = nr * q->dims[3];
    int64_t nkv = b * S * ir_type_max_local_dim(m, k, 2) * k->dims[3];
    if (!docs) {
        if (bwd) ir_ws_raise(&w[CM_WS_CUDA_ATTN], 8 * nr);
        ir_ws_raise(&w[CM_WS_CUDA_CUDNN], cudnn_ws(b, S, ir_type_max_local_dim(m, q, 2), q->dims[3]));
        if (!bwd && op->nout == 1) w[CM_WS_CUDA_CUDNN_STATS] += 4 * nr; /* else the lse value holds them */
        return;
    }
    ir_ws_raise(&w[CM_WS_CUDA_ATTN], bwd ? 4 * (2 * nr + nq + 2 * nkv) : 4 * (nq + nr));
    ir_ws_raise(&w[CM_WS_CUDA_DOC], 8 * S + 4 * b * S);
    docs_split_ws(b, S, ir_type_max_local_dim(m, q, 2), ir_type_max_local_dim(m, k, 2), q->dims[3], bwd, w);
}

static void ws_cuda_attention(const ir_module *m, const ir_op *op, int64_t *w) {
    ws_cuda_attention_common(m, op, w, false);
}

static void ws_cuda_attention_bwd(const ir_module *m, const ir_op *op, int64_t *w) {
    ws_cuda_attention_common(m, op, w, true);
}

/* The CPU ring (runtime/cpu/rt_ring.c) stages two (k, v) blocks: the one in
 * use and the next. */
static void staging_ring_attention(const ir_module *m, const ir_op *op, int64_t e[2]) {
    e[0] = 2 * (ir_op_local_elems(m, op->in[1]) + ir_op_local_elems(m, op->in[2]));
}

/* Backward: two (k, v) and two (dk, dv) blocks, and D. */
static void staging_ring_attention_bwd(const ir_module *m, const ir_op *op, int64_t e[2]) {
    int64_t kv = ir_op_local_elems(m, op->in[2]) + ir_op_local_elems(m, op->in[3]);
    e[0] = 2 * kv;
    e[1] = 2 * kv + ir_op_local_elems(m, op->in[5]);
}

/* Without documents the runtime may run the ring's blocks as cuDNN
 * sub-blocks (runtime/cuda/rt_ring_split.c): after the ring's own part,
 * 256-byte aligned, one sub-block's bf16 outputs (o, or dq, dk, dv) and
 * fp32 statistics [b,H,S] (ring_split_ws: bytes of CM_WS_CUDA_RING), and
 * cuDNN's workspace for a sub-block of at most the rank's S rows
 * (ring_split_cudnn_ws).  q: the op's q value, nkv: one kv block's
 * elements. */
static int64_t ring_split_ws(const ir_module *m, int q, int64_t nkv, bool bwd) {
    if (ir_config_int(m, "documents", 0) != 0) return 256;
    const ir_type *t = &m->values[q].type;
    int64_t nq = ir_op_local_elems(m, q), nr = t->rank == 4 ? nq / t->dims[3] : nq;
    return 2 * nq + (bwd ? 4 * nkv : 0) + 4 * nr + 256;
}

static void ring_split_cudnn_ws(const ir_module *m, int q, int64_t *w) {
    const ir_type *t = &m->values[q].type;
    if (ir_config_int(m, "documents", 0) == 0 && t->rank == 4)
        ir_ws_raise(&w[CM_WS_CUDA_CUDNN], cudnn_ws(ir_type_max_local_dim(m, t, 0), ir_type_max_local_dim(m, t, 1),
                                                   ir_type_max_local_dim(m, t, 2), t->dims[3]));
}

/* The CUDA ring: an fp32 running output and two bf16 (k, v) blocks; the
 * zig-zag positions; with documents every ring position's ids (the rows'
 * whole sequence). */
static void ws_cuda_ring_attention(const ir_module *m, const ir_op *op, int64_t *w) {
    bool docs = ir_config_int(m, "documents", 0) != 0;
    int64_t nkv = ir_op_local_elems(m, op->in[1]);
    ir_ws_raise(&w[CM_WS_CUDA_RING],
                align256(4 * ir_op_local_elems(m, op->in[0]) + 8 * nkv) + ring_split_ws(m, op->in[0], nkv, false));
    ring_split_cudnn_ws(m, op->in[0], w);
    ir_ws_raise(&w[CM_WS_CUDA_POS], 8 * ir_op_config_int(m, op, "seq_len", 0));
    if (docs)
        ir_ws_raise(&w[CM_WS_CUDA_DOC], 4 * ir_type_max_local_dim(m, &m->values[op->in[0]].type, 0) *
                                            ir_op_config_int(m, op, "seq_len", 0));
}

/* Backward: D, fp32 dq; two bf16 (k, v) and two fp32 (dk, dv) blocks;
 * the sub-blocks' part as above. */
static void ws_cuda_ring_attention_bwd(const ir_module *m, const ir_op *op, int64_t *w) {
    bool docs = ir_config_int(m, "documents", 0) != 0;
    int64_t nkv = ir_op_local_elems(m, op->in[2]);
    ir_ws_raise(&w[CM_WS_CUDA_RING],
                align256(4 * ir_op_local_elems(m, op->in[5]) + 4 * ir_op_local_elems(m, op->in[1]) + 24 * nkv) +
                    ring_split_ws(m, op->in[1], nkv, true));
    ring_split_cudnn_ws(m, op->in[1], w);
    ir_ws_raise(&w[CM_WS_CUDA_POS], 8 * ir_op_config_int(m, op, "seq_len", 0));
    if (docs)
        ir_ws_raise(&w[CM_WS_CUDA_DOC], 4 * ir_type_max_local_dim(m, &m->values[op->in[1]].type, 0) *
                                            ir_op_config_int(m, op, "seq_len", 0));
}

/* ---- work (the cost model's inputs) --------------------------------------------- */

/* Causal attention on q [b,S,H,Dh]: QK^T and PV are 2·b·H·S²·Dh each;
 * the causal mask halves both: 2·b·H·S²·Dh in all. */
static double attention_flops(const ir_module *m, int q) {
    const ir_type *t = &m->values[q].type;
    if (t->rank < 4) return 0;
    double b = (double)ir_type_max_local_dim(m, t, 0), S = (double)ir_type_max_local_dim(m, t, 1);
    double H = (double)ir_type_max_local_dim(m, t, 2), Dh = (double)ir_type_max_local_dim(m, t, 3);
    return 2 * b * H * S * S * Dh;
}

/* The softmax exponentiates every score (again in the backward, which
 * recomputes it): 2·b·H·S²·Dh FLOPs over the causal half, b·H·S²/2 scores. */
static double attention_exps(const ir_module *m, int q, double flops) {
    const ir_type *t = &m->values[q].type;
    double Dh = t->rank >= 4 ? (double)ir_type_max_local_dim(m, t, 3) : 0;
    return Dh > 0 ? flops / (4 * Dh) : 0;
}

static ir_op_work work_attention(const ir_module *m, const ir_op *op) {
    return (ir_op_work){.flops = attention_flops(m, op->in[0]),
                        .bytes = ir_op_bytes_moved(m, op),
                        .exps = attention_exps(m, op->in[0], attention_flops(m, op->in[0]))};
}

static ir_op_work work_attention_bwd(const ir_module *m, const ir_op *op) {
    return (ir_op_work){.flops = 2.5 * attention_flops(m, op->in[1]),
                        .bytes = ir_op_bytes_moved(m, op),
                        .exps = attention_exps(m, op->in[1], attention_flops(m, op->in[1]))};
}

/* Ring attention on R ranks: the local q [b, S_loc, H, Dh] against the
 * whole sequence S_loc*R, half of the dense 4·b·H·S_loc·S_full·Dh (the
 * zig-zag order gives every rank the same share of the mask), in R blocks.
 * While a block computes, the next (k, v) block travels one hop; the
 * backward also hands the (dk, dv) accumulators on after each block, and
 * the next block waits for them (both runtimes keep them in fp32). */
static ir_op_work work_ring_common(const ir_module *m, const ir_op *op, bool bwd) {
    int gi = ir_op_group(op);
    int R = gi >= 0 && gi < m->ngroups && m->groups[gi].set_size > 0 ? m->groups[gi].set_size : 1;
    int q = op->in[bwd ? 1 : 0], k = op->in[bwd ? 2 : 1], v = op->in[bwd ? 3 : 2];
    double ring_flops = attention_flops(m, q) * R;
    ir_op_work w = {.flops = (bwd ? 2.5 : 1.0) * ring_flops, .exps = attention_exps(m, q, ring_flops)};
    w.bytes = ir_op_bytes_moved(m, op);
    w.hop_bytes = ir_op_local_bytes(m, k) + ir_op_local_bytes(m, v);
    w.tail_hops = bwd;
    if (bwd)
        w.tail_bytes =
            4.0 * (double)(ir_type_local_elems(m, &m->values[k].type) + ir_type_local_elems(m, &m->values[v].type));
    return w;
}

static ir_op_work work_ring(const ir_module *m, const ir_op *op) { return work_ring_common(m, op, false); }
static ir_op_work work_ring_bwd(const ir_module *m, const ir_op *op) { return work_ring_common(m, op, true); }

/* ---- runtime call (codegen) ------------------------------------------------------- */

/* attention(q, k, v) -> o ; attention_bwd(do, q, k, v, o) -> dq, dk, dv.
 * The kernel is causal over the whole sequence: dim 1 must be whole. */
static void emit_attention_common(ir_emit *e, bool bwd) {
    const ir_value *q = ir_emit_in(e, bwd ? 1 : 0), *k = ir_emit_in(e, bwd ? 2 : 1);
    if (ir_attr_int(e->op, "causal", 1) != 1) {
        ir_emit_fail(e, "only causal attention (causal = 1) has a runtime kernel");
        return;
    }
    if (!ir_emit_rank(e, q, 4) || !ir_emit_rank(e, k, 4)) return;
    if (!ir_emit_whole(e, q, 1, 2, "the attention sequence") || !ir_emit_whole(e, q, 3, 4, "the head dim")) return;
    int64_t H = ir_type_max_local_dim(e->m, &q->type, 2), Hkv = ir_type_max_local_dim(e->m, &k->type, 2);
    /* Uneven head split: the local head counts differ by rank, so the
     * program asks the runtime; the units keep the q/kv ratio uq/uk. */
    bool uneven = q->type.unit[2] != 0 || k->type.unit[2] != 0;
    if (uneven && (q->type.unit[2] < 1 || k->type.unit[2] < 1 || q->type.unit[2] % k->type.unit[2])) {
        ir_emit_fail(e, "uneven head units %" PRId64 " (q) and %" PRId64 " (kv) do not group q heads by kv head",
                     q->type.unit[2], k->type.unit[2]);
        return;
    }
    if (!uneven && H % Hkv) {
        ir_emit_fail(e, "%" PRId64 " local q heads do not share %" PRId64 " local kv heads evenly", H, Hkv);
        return;
    }
    /* The row statistics as a value (lse result / operand): the _lse call. */
    bool lse = bwd ? e->op->nin == 6 : e->op->nout == 2;
    if (lse)
        e->call(e, bwd ? "rt_attention_bwd_lse" : "rt_attention_lse");
    else
        ir_emit_call(e);
    for (int o = 0; o < e->op->nout; o++) ir_emit_f32(e, ir_emit_out(e, o));
    for (int i = 0; i < e->op->nin; i++) ir_emit_f32(e, ir_emit_in(e, i));
    ir_emit_row0(e, q);
    ir_emit_int(e, ir_type_max_local_dim(e->m, &q->type, 0));
    ir_emit_int(e, q->type.dims[1]);
    if (uneven) {
        e->local_dim(e, (int)(q - e->m->values), 2);
        e->local_dim(e, (int)(k - e->m->values), 2);
    } else {
        ir_emit_int(e, H);
        ir_emit_int(e, Hkv);
    }
    ir_emit_int(e, q->type.dims[3]);
    ir_emit_end(e);
}

static void emit_attention(ir_emit *e) { emit_attention_common(e, false); }
static void emit_attention_bwd(ir_emit *e) { emit_attention_common(e, true); }

/* ring_attention(q, k, v) -> o, lse ; ring_attention_bwd(do, q, k, v, o,
 * lse) -> dq, dk, dv.  Local sizes: this rank's slice of the sequence. */
static void emit_ring_attention_common(ir_emit *e, bool bwd) {
    const ir_value *q = ir_emit_in(e, bwd ? 1 : 0), *k = ir_emit_in(e, bwd ? 2 : 1);
    int g = ir_op_group(e->op);
    if (g < 0 || !ir_emit_rank(e, q, 4) || !ir_emit_rank(e, k, 4) || !ir_emit_whole(e, q, 3, 4, "the head dim")) return;
    if (q->type.shard[1] != g) {
        ir_emit_fail(e, "the sequence of %%%s must be sharded by the ring group", q->name);
        return;
    }
    int64_t H = ir_type_max_local_dim(e->m, &q->type, 2), Hkv = ir_type_max_local_dim(e->m, &k->type, 2);
    if (Hkv < 1 || H % Hkv) {
        ir_emit_fail(e, "%" PRId64 " local q heads do not share %" PRId64 " local kv heads evenly", H, Hkv);
        return;
    }
    ir_emit_call(e);
    e->group(e, g);
    for (int o = 0; o < e->op->nout; o++) ir_emit_f32(e, ir_emit_out(e, o));
    for (int i = 0; i < e->op->nin; i++) ir_emit_f32(e, ir_emit_in(e, i));
    ir_emit_row0(e, q);
    ir_emit_int(e, ir_type_max_local_dim(e->m, &q->type, 0));
    ir_emit_int(e, ir_type_max_local_dim(e->m, &q->type, 1));
    ir_emit_int(e, H);
    ir_emit_int(e, Hkv);
    ir_emit_int(e, q->type.dims[3]);
    ir_emit_end(e);
}

static void emit_ring_attention(ir_emit *e) { emit_ring_attention_common(e, false); }
static void emit_ring_attention_bwd(ir_emit *e) { emit_ring_attention_common(e, true); }

/* ---- descriptors ---------------------------------------------------------------- */

/* q[B,S,H,Dh] k,v[B,S,Hk,Dh] -> [B,S,H,Dh] [, lse f32 [B,S,H]] ; causal */
const ir_op_desc ir_op_attention = {
    .name = "attention",
    .kind = IR_K_COMPUTE,
    .min_in = 3,
    .max_in = 3,
    .min_out = 1,
    .max_out = 2,
    .verify = verify_attention,
    .f32_outs = 2,
    .ws_cpu = ws_cpu_attention,
    .ws_cuda = ws_cuda_attention,
    .attention = true,
    .work = work_attention,
    .rt_fn = "rt_attention",
    .emit = emit_attention,
};

/* do, q, k, v, o [, lse] -> dq, dk, dv */
const ir_op_desc ir_op_attention_bwd = {
    .name = "attention_bwd",
    .kind = IR_K_COMPUTE,
    .min_in = 5,
    .max_in = 6,
    .min_out = 3,
    .max_out = 3,
    .verify = verify_attention_bwd,
    .ws_cpu = ws_cpu_attention_bwd,
    .ws_cuda = ws_cuda_attention_bwd,
    .attention = true,
    .work = work_attention_bwd,
    .rt_fn = "rt_attention_bwd",
    .emit = emit_attention_bwd,
};

/* Ring attention (sequence ring / hybrid): q[B,S,H,Dh], k,v[B,S,Hk,Dh] with
 * the sequence sharded over the ring (attr group = @G, R ranks) -> o
 * [B,S,H,Dh] and lse f32[B,S,H] (log-sum-exp per query, for the backward).
 * Causal over the original positions of the module's sequence order
 * (config seq_ring = R: the zig-zag order).  The kv blocks travel around
 * the ring inside the op, each step one paired send and receive. */
const ir_op_desc ir_op_ring_attention = {
    .name = "ring_attention",
    .kind = IR_K_COMPUTE,
    .min_in = 3,
    .max_in = 3,
    .min_out = 2,
    .max_out = 2,
    .verify = verify_ring_attention,
    .f32_outs = 1u << 1 /* lse: the backward exponentiates against it */,
    .staging = staging_ring_attention,
    .ws_cuda = ws_cuda_ring_attention,
    .comm = IR_COMM_RING_OVERLAP,
    .attention = true,
    .work = work_ring,
    .rt_fn = "rt_ring_attention",
    .emit = emit_ring_attention,
};

/* do, q, k, v, o, lse -> dq, dk, dv; (k, v, dk, dv) travel around the ring */
const ir_op_desc ir_op_ring_attention_bwd = {
    .name = "ring_attention_bwd",
    .kind = IR_K_COMPUTE,
    .min_in = 6,
    .max_in = 6,
    .min_out = 3,
    .max_out = 3,
    .verify = verify_ring_attention_bwd,
    .staging = staging_ring_attention_bwd,
    .ws_cuda = ws_cuda_ring_attention_bwd,
    .comm = IR_COMM_RING_OVERLAP,
    .attention = true,
    .work = work_ring_bwd,
    .rt_fn = "rt_ring_attention_bwd",
    .emit = emit_ring_attention_bwd,
};
