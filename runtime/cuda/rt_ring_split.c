/* rt_ring_split.c — ring attention's blocks run by another attention
 * (cuDNN's fused graphs, rt_attn_cudnn_rt.c) instead of basp's block
 * kernels (kcu_ring.cu).  rt_ring_cuda.c keeps the ring (the exchanges,
 * the fp32 running state and accumulators); this file only replaces the
 * kernel each step runs on a block.
 *
 * Why it can.  A block's rows hold runs of consecutive positions: one run
 * per block in the natural order, two in the zig-zag order (chunks i and
 * 2R-1-i), every run L rows long.  Between a run of queries and a run of
 * keys starting at positions qa and ka, the causal mask kpos <= qpos is
 *   all visible   when ka + L - 1 <= qa  (a "full" sub-block, no mask),
 *   the diagonal  when ka == qa          (plain causal attention of L),
 *   nothing       when ka > qa + L - 1   (skipped),
 * and anything else (runs of different lengths, a shifted diagonal) is a
 * mask the fused graphs do not take: such a ring keeps the basp kernels
 * (the shape for the rest of the run when its first op meets it), and so
 * do ring blocks over packed documents.  So a block is a few fused calls
 * on windows of the q, k, v buffers (the shape's ld: no copies), each
 * followed by a small merge kernel:
 *   forward: the sub-block's bf16 output and fp32 statistics [b,H,L]
 *     folded into the running (o, lse) (kcu_ring_merge), the online
 *     softmax of the block kernels at sub-block granularity;
 *   backward: against the FINAL o and lse (their window copied out as
 *     [b,H,L] statistics: kcu_ring_lse_rows), which makes each sub-block's
 *     dq, dk, dv its exact share; they are added into the fp32
 *     accumulators (kcu_ring_acc_rows), overwritten by the next.
 * Each sub-block's outputs are rounded to bf16 once before the fp32 sums,
 * one rounding per ring step where the block kernels have none.
 *
 * The check.  Like plain attention's (rt_attn_cudnn_rt.c), the first
 * forward and the first backward op of each shape also run the basp block
 * kernels and compare: the forward keeps a second running state and
 * compares o and lse after the last block; the backward compares each
 * block's dq, dk, dv shares (computed into zeroed temporaries by both),
 * then computes the verdict's share again into the accumulators.  A mismatch prints one warning, puts the basp
 * kernels' results in place and keeps them for the shape.  Tolerances: o,
 * dq, dk, dv within 5e-2 of the tensor's max |basp| (the bf16 rounding of
 * P, dS and the outputs, as for plain attention); lse within 2e-2 absolute
 * (natural log: both are fp32 sums of the same bf16 products, apart by
 * summation order; 2e-2 is a 2% weight).  NaN or Inf on one side only is a
 * mismatch.
 *
 * The sub-block attention is cuda_state(rt)->sub_ops when set (the
 * cuemu test puts basp's own kernels there: rt_ring_split's merging and
 * windows run on the CPU), else cuDNN's when BASP_ATTENTION lets cuDNN
 * run (cm_attention_impl: CM_ATTN_CUDNN_RING; cuda_sub_ops_for). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../data/rt_data.h"
#include "rt_cuda.h"

enum { SPLIT_MAX_RUNS = 8 }; /* pieces per block: the zig-zag order has 2; more would be a ring of tiny calls */
enum { SUB_NONE, SUB_FULL, SUB_CAUSAL, SUB_PARTIAL };

/* The verdicts, and the runs of every ring position for (seq_len,
 * seq_ring, S): [R][nrun]. */
struct cuda_ring_split_state {
    cuda_split_shapes shapes;
    int64_t key_seq, key_ring, key_S;
    int key_R, nrun;
    int64_t L;
    int64_t *run_row, *run_pos;
    bool runs_ok;
    const char *runs_why; /* why not, when not */
};

void cuda_ring_split_fini(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    struct cuda_ring_split_state *s = cu->ring_split;
    if (!s) return;
    free(s->shapes.sh), free(s->run_row), free(s->run_pos), free(s);
    cu->ring_split = NULL;
}

static struct cuda_ring_split_state *split_state(rt_ctx *rt) {
    rt_cuda_state *cu = cuda_state(rt);
    if (!cu->ring_split) {
        cu->ring_split = calloc(1, sizeof *cu->ring_split);
        RT_CHECK(cu->ring_split, "out of host memory");
    }
    return cu->ring_split;
}

/* The runs of consecutive positions of each of the R blocks of S rows, cut
 * into pieces of one length L: the shortest maximal run, which every
 * maximal run must be a multiple of (the zig-zag order's last rank holds
 * chunks R-1 and R, one maximal run of two chunks).  True when every block
 * has the same number of pieces, at most SPLIT_MAX_RUNS; cached per
 * sequence order. */
static bool split_kind_ok(const struct cuda_ring_split_state *s, int R);

static bool split_runs(rt_ctx *rt, struct cuda_ring_split_state *s, int64_t S, int R, const char **why) {
    const rt_program *p = rt->p;
    if (s->key_seq == p->seq_len && s->key_ring == p->seq_ring && s->key_S == S && s->key_R == R) {
        *why = s->runs_why;
        return s->runs_ok;
    }
    s->key_seq = p->seq_len, s->key_ring = p->seq_ring, s->key_S = S, s->key_R = R;
    s->runs_ok = false;
    free(s->run_row), free(s->run_pos);
    s->run_row = RT_MALLOC(sizeof(int64_t) * SPLIT_MAX_RUNS * (size_t)R);
    s->run_pos = RT_MALLOC(sizeof(int64_t) * SPLIT_MAX_RUNS * (size_t)R);
    if ((int64_t)R * S > p->seq_len || S < 1) {
        *why = s->runs_why = "its blocks are not slices of the sequence";
        return false;
    }
    int64_t n = (int64_t)R * S, L = S;
    int64_t *pos = RT_MALLOC(sizeof(int64_t) * (size_t)n);
    rt_seq_positions(rt, 0, n, pos);
    /* the shortest maximal run (runs end at block boundaries) */
    for (int64_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && j % S != 0 && pos[j] == pos[j - 1] + 1;) j++;
        if (j - i < L) L = j - i;
    }
    bool ok = S % L == 0 && S / L <= SPLIT_MAX_RUNS;
    for (int64_t i = 0; i < n && ok; i += L) { /* every piece of L consecutive positions */
        for (int64_t j = i + 1; j < i + L && ok; j++) ok = pos[j] == pos[j - 1] + 1;
        int r = (int)(i / S), k = (int)(i % S / L);
        if (ok) s->run_row[r * SPLIT_MAX_RUNS + k] = i % S, s->run_pos[r * SPLIT_MAX_RUNS + k] = pos[i];
    }
    free(pos);
    s->nrun = (int)(S / L), s->L = L;
    s->runs_why = !ok                    ? "its blocks are not runs of consecutive positions of one length"
                  : !split_kind_ok(s, R) ? "a block pair's runs meet on a shifted diagonal"
                                         : NULL;
    s->runs_ok = s->runs_why == NULL;
    *why = s->runs_why;
    return s->runs_ok;
}

/* How a run of L queries from position qa sees a run of L keys from ka. */
static int split_kind(int64_t qa, int64_t ka, int64_t L) {
    if (ka + L - 1 <= qa) return SUB_FULL;
    if (ka == qa) return SUB_CAUSAL;
    if (ka > qa + L - 1) return SUB_NONE;
    return SUB_PARTIAL;
}

/* Every mask a block of this ring meets is full, causal or empty. */
static bool split_kind_ok(const struct cuda_ring_split_state *s, int R) {
    for (int64_t i = 0; i < (int64_t)R * s->nrun * R * s->nrun; i++) {
        int64_t qi = i / (R * s->nrun), ki = i % (R * s->nrun);
        int qr = (int)(qi / s->nrun), kr = (int)(ki / s->nrun);
        int64_t qa = s->run_pos[qr * SPLIT_MAX_RUNS + qi % s->nrun];
        int64_t ka = s->run_pos[kr * SPLIT_MAX_RUNS + ki % s->nrun];
        if (split_kind(qa, ka, s->L) == SUB_PARTIAL) return false;
    }
    return true;
}

cuda_split_shape *cuda_split_shape_of(cuda_split_shapes *t, int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    for (int i = 0; i < t->n; i++) {
        cuda_split_shape *x = &t->sh[i];
        if (x->b == b && x->S == S && x->H == H && x->Hkv == Hkv && x->Dh == Dh) return x;
    }
    if (t->n == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 4;
        t->sh = realloc(t->sh, sizeof *t->sh * (size_t)t->cap);
        RT_CHECK(t->sh, "out of host memory");
    }
    cuda_split_shape *x = &t->sh[t->n++];
    *x = (cuda_split_shape){b, S, H, Hkv, Dh, CUDA_SPLIT_NEW, false, false};
    return x;
}

const cuda_sub_ops *cuda_sub_ops_for(rt_ctx *rt, cm_attn_impl want) {
    rt_cuda_state *cu = cuda_state(rt);
    if (cu->sub_ops) return cu->sub_ops;
    if (rt_backend_attention_impl(rt, want == CM_ATTN_CUDNN_RING) != want) return NULL;
#ifdef BASP_HAVE_CUDNN
    return &cuda_dnn_sub_ops;
#else
    return NULL;
#endif
}

/* The shape goes to the basp kernels for good; rank 0 says why, once. */
static void split_refuse(rt_ctx *rt, cuda_split_shape *x, const char *why) {
    x->state = CUDA_SPLIT_OWN;
    RT_CHECK(cuda_state(rt)->attn_mode != CUDA_ATTN_CUDNN,
             "ring attention: BASP_ATTENTION=cudnn, but cuDNN cannot run b=%lld S=%lld H=%lld Hkv=%lld Dh=%lld: %s",
             (long long)x->b, (long long)x->S, (long long)x->H, (long long)x->Hkv, (long long)x->Dh, why);
    if (rt->rank == 0)
        fprintf(stderr,
                "warning: ring attention: sub-blocks not used for b=%lld S=%lld H=%lld Hkv=%lld Dh=%lld: %s; the "
                "basp block kernels run this shape\n",
                (long long)x->b, (long long)x->S, (long long)x->H, (long long)x->Hkv, (long long)x->Dh, why);
}

bool cuda_ring_split_begin(rt_ctx *rt, cuda_ring_split *sp, int g, int64_t b, int64_t S, int64_t H, int64_t Hkv,
                           int64_t Dh, bool bwd) {
    memset(sp, 0, sizeof *sp);
    const cuda_sub_ops *ops = rt->docs ? NULL : cuda_sub_ops_for(rt, CM_ATTN_CUDNN_RING);
    if (!ops) return false;
    struct cuda_ring_split_state *s = split_state(rt);
    cuda_split_shape *x = cuda_split_shape_of(&s->shapes, b, S, H, Hkv, Dh);
    if (x->state == CUDA_SPLIT_OWN) return false;
    int R = rt_coll_set_size(rt, g);
    /* The runs (and so L) follow the sequence order, which a dynamic
     * variant may change for the same shape: checked for each order.  An
     * order that does not split leaves this op to the block kernels, and
     * refuses the shape if it is the shape's first. */
    const char *runs_why = NULL;
    if (!split_runs(rt, s, S, R, &runs_why)) {
        if (x->state == CUDA_SPLIT_NEW) split_refuse(rt, x, runs_why);
        return false;
    }
    char why[600] = ""; /* cuDNN's plans, built once per sub-block shape (then looked up) */
    cuda_sub probe[2] = {{b, s->L, S, H, Hkv, Dh, false}, {b, s->L, S, H, Hkv, Dh, true}};
    for (int i = 0; i < 2; i++)
        if (!ops->prepare(rt, &probe[i], why, sizeof why)) {
            split_refuse(rt, x, why);
            return false;
        }
    x->state = CUDA_SPLIT_OK;
    *sp = (cuda_ring_split){.ops = ops,
                            .shape = x,
                            .R = R,
                            .me = rt->gpos[g],
                            .b = b,
                            .S = S,
                            .H = H,
                            .Hkv = Hkv,
                            .Dh = Dh,
                            .L = s->L,
                            .nrun = s->nrun};
    sp->check = cuda_state(rt)->attn_mode == CUDA_ATTN_AUTO && !(bwd ? x->bwd_checked : x->fwd_checked);
    if (bwd)
        x->bwd_checked = true;
    else
        x->fwd_checked = true;
    return true;
}

size_t cuda_ring_split_ws(const cuda_ring_split *sp, bool bwd) {
    size_t nq = (size_t)(sp->b * sp->S * sp->H * sp->Dh), nkv = (size_t)(sp->b * sp->S * sp->Hkv * sp->Dh);
    size_t st = 4 * (size_t)(sp->b * sp->H * sp->S);
    return bwd ? 2 * nq + 4 * nkv + st + 256 : 2 * nq + st + 256;
}

void cuda_ring_split_bind(cuda_ring_split *sp, void *ws, bool bwd) {
    size_t nq = (size_t)(sp->b * sp->S * sp->H * sp->Dh), nkv = (size_t)(sp->b * sp->S * sp->Hkv * sp->Dh);
    kcu_bf16 *t = ws;
    sp->t_q = t, sp->t_k = bwd ? t + nq : NULL, sp->t_v = bwd ? t + nq + nkv : NULL;
    sp->t_st = (float *)(void *)(t + nq + (bwd ? 2 * nkv : 0));
}

/* The i-th run of ring position r: its first row and position. */
static int64_t run_row(const rt_ctx *rt, int r, int i) {
    return cuda_state(rt)->ring_split->run_row[r * SPLIT_MAX_RUNS + i];
}
static int64_t run_pos(const rt_ctx *rt, int r, int i) {
    return cuda_state(rt)->ring_split->run_pos[r * SPLIT_MAX_RUNS + i];
}

/* The sub-block of q run qi of this rank against k run ki of position src
 * (-1: nothing to compute). */
static int split_sub(const rt_ctx *rt, const cuda_ring_split *sp, int src, int qi, int ki, cuda_sub *sb, int64_t *qr,
                     int64_t *kr) {
    int kind = split_kind(run_pos(rt, sp->me, qi), run_pos(rt, src, ki), sp->L);
    RT_CHECK(kind != SUB_PARTIAL, "ring attention: a sub-block on a shifted diagonal (split_runs let it through)");
    if (kind == SUB_NONE) return -1;
    *sb = (cuda_sub){sp->b, sp->L, sp->S, sp->H, sp->Hkv, sp->Dh, kind == SUB_FULL};
    *qr = run_row(rt, sp->me, qi), *kr = run_row(rt, src, ki);
    return kind;
}

/* Folds ring position src's block (k, v) into the running (o, lse). */
static void split_fwd_block(rt_ctx *rt, const cuda_ring_split *sp, int src, float *o, float *lse, const kcu_bf16 *q,
                            const kcu_bf16 *k, const kcu_bf16 *v) {
    cudaStream_t cs = cuda_state(rt)->cs;
    size_t wq = (size_t)(sp->H * sp->Dh), wk = (size_t)(sp->Hkv * sp->Dh);
    for (int qi = 0; qi < sp->nrun; qi++)
        for (int ki = 0; ki < sp->nrun; ki++) {
            cuda_sub sb;
            int64_t qr, kr;
            if (split_sub(rt, sp, src, qi, ki, &sb, &qr, &kr) < 0) continue;
            sp->ops->fwd(rt, &sb, sp->t_q + qr * wq, sp->t_st, q + qr * wq, k + kr * wk, v + kr * wk);
            CU_CHECK(kcu_ring_merge(o, lse, sp->t_q, sp->t_st, sp->b, sp->S, qr, sp->L, sp->H, sp->Dh, cs));
        }
}

/* ---- the check ------------------------------------------------------------------------ */
/* max |a - ref| over n device floats against max |ref| (rel: whether the
 * bound is relative to it), NaN/Inf on one side only failing; *err gets
 * the figure compared. */
static bool split_close(rt_ctx *rt, const float *a, const float *ref, int64_t n, double tol, bool rel, double *err) {
    float *h = RT_MALLOC(sizeof(float) * 2 * (size_t)n);
    CU_CHECK(cudaStreamSynchronize(cuda_state(rt)->cs));
    CU_CHECK(cudaMemcpy(h, a, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost));
    CU_CHECK(cudaMemcpy(h + n, ref, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost));
    double e = 0, mx = 1e-30;
    bool ok = true;
    for (int64_t i = 0; i < n; i++) {
        double x = h[i], y = h[n + i];
        if (!isfinite(x) || !isfinite(y)) {
            ok = ok && x == y; /* both -inf: a row that saw nothing on both sides */
            continue;
        }
        if (fabs(x - y) > e) e = fabs(x - y);
        if (fabs(y) > mx) mx = fabs(y);
    }
    free(h);
    *err = rel ? e / mx : e;
    return ok && *err <= tol;
}

/* The forward's check: the basp kernels' running state, or nothing. */
typedef struct split_fwd_ref {
    float *o, *lse;
} split_fwd_ref;

static split_fwd_ref split_fwd_ref_start(rt_ctx *rt, cuda_ring_split *sp) {
    size_t nq = (size_t)(sp->b * sp->S * sp->H * sp->Dh), nr = (size_t)(sp->b * sp->S * sp->H);
    split_fwd_ref r = {cuda_try_malloc(4 * nq), cuda_try_malloc(4 * nr)};
    if (!r.o || !r.lse) {
        cudaFree(r.o), cudaFree(r.lse);
        split_refuse(rt, sp->shape, "no device memory for its one-time check against the basp kernels");
        r.o = r.lse = NULL;
        sp->failed = true;
        return r;
    }
    cudaStream_t cs = cuda_state(rt)->cs;
    CU_CHECK(cudaMemsetAsync(r.o, 0, 4 * nq, cs));
    CU_CHECK(kcu_fill_f32(r.lse, -INFINITY, (int64_t)nr, cs));
    return r;
}

void cuda_ring_split_fwd(rt_ctx *rt, cuda_ring_split *sp, int src, float *o, float *lse, const kcu_bf16 *q,
                         const kcu_bf16 *k, const kcu_bf16 *v, const int64_t *qpos, const int64_t *kpos) {
    if (sp->check && !sp->ref_o && !sp->failed) {
        split_fwd_ref r = split_fwd_ref_start(rt, sp);
        sp->ref_o = r.o, sp->ref_lse = r.lse;
    }
    if (sp->failed) { /* refused before this block: the basp kernels, as the op began */
        CU_CHECK(kcu_ring_block_fwd(o, lse, q, k, v, sp->b, sp->S, sp->S, sp->H, sp->Hkv, sp->Dh, qpos, kpos,
                                    cuda_state(rt)->cs));
        return;
    }
    split_fwd_block(rt, sp, src, o, lse, q, k, v);
    if (sp->check)
        CU_CHECK(kcu_ring_block_fwd(sp->ref_o, sp->ref_lse, q, k, v, sp->b, sp->S, sp->S, sp->H, sp->Hkv, sp->Dh, qpos,
                                    kpos, cuda_state(rt)->cs));
}

void cuda_ring_split_fwd_end(rt_ctx *rt, cuda_ring_split *sp, float *o, float *lse) {
    if (!sp->ref_o) return;
    size_t nq = (size_t)(sp->b * sp->S * sp->H * sp->Dh), nr = (size_t)(sp->b * sp->S * sp->H);
    double eo = 0, el = 0;
    bool ok = split_close(rt, o, sp->ref_o, (int64_t)nq, 5e-2, true, &eo) &&
              split_close(rt, lse, sp->ref_lse, (int64_t)nr, 2e-2, false, &el);
    if (!ok) {
        char why[200];
        snprintf(why, sizeof why,
                 "its forward differs from the basp kernels' (o: %.3g of max |o|, over 5e-2; lse: %.3g, over 2e-2)", eo,
                 el);
        split_refuse(rt, sp->shape, why);
        cudaStream_t cs = cuda_state(rt)->cs;
        CU_CHECK(cudaMemcpyAsync(o, sp->ref_o, 4 * nq, cudaMemcpyDeviceToDevice, cs));
        CU_CHECK(cudaMemcpyAsync(lse, sp->ref_lse, 4 * nr, cudaMemcpyDeviceToDevice, cs));
    }
    CU_CHECK(cudaStreamSynchronize(cuda_state(rt)->cs));
    CU_CHECK(cudaFree(sp->ref_o));
    CU_CHECK(cudaFree(sp->ref_lse));
    sp->ref_o = sp->ref_lse = NULL;
}

/* Adds ring position src's block's share of dq, dk, dv (fp32
 * accumulators) through the sub-blocks. */
static void split_bwd_block(rt_ctx *rt, const cuda_ring_split *sp, int src, float *dq, float *dk, float *dv,
                            const kcu_bf16 *dout, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v,
                            const kcu_bf16 *o, const float *lse) {
    cudaStream_t cs = cuda_state(rt)->cs;
    int64_t wq = sp->H * sp->Dh, wk = sp->Hkv * sp->Dh;
    for (int qi = 0; qi < sp->nrun; qi++) {
        bool have_st = false;
        for (int ki = 0; ki < sp->nrun; ki++) {
            cuda_sub sb;
            int64_t qr, kr;
            if (split_sub(rt, sp, src, qi, ki, &sb, &qr, &kr) < 0) continue;
            if (!have_st) CU_CHECK(kcu_ring_lse_rows(sp->t_st, lse, sp->b, sp->S, qr, sp->L, sp->H, cs));
            have_st = true;
            sp->ops->bwd(rt, &sb, sp->t_q + qr * wq, sp->t_k + kr * wk, sp->t_v + kr * wk, dout + qr * wq, q + qr * wq,
                         k + kr * wk, v + kr * wk, o + qr * wq, sp->t_st);
            CU_CHECK(kcu_ring_acc_rows(dq, sp->t_q, sp->b, sp->S, qr, sp->L, wq, cs));
            CU_CHECK(kcu_ring_acc_rows(dk, sp->t_k, sp->b, sp->S, kr, sp->L, wk, cs));
            CU_CHECK(kcu_ring_acc_rows(dv, sp->t_v, sp->b, sp->S, kr, sp->L, wk, cs));
        }
    }
}

/* The backward's check of one block: both shares into zeroed
 * temporaries, compared; false (refused, nothing added) on a mismatch. */
static bool split_bwd_check(rt_ctx *rt, cuda_ring_split *sp, int src, const kcu_bf16 *dout, const kcu_bf16 *q,
                            const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o, const float *lse, const float *D,
                            const int64_t *qpos, const int64_t *kpos) {
    size_t nq = (size_t)(sp->b * sp->S * sp->H * sp->Dh), nkv = (size_t)(sp->b * sp->S * sp->Hkv * sp->Dh);
    size_t n[3] = {nq, nkv, nkv};
    float *t[6] = {NULL};
    bool have = true;
    for (int i = 0; i < 6; i++) have = have && (t[i] = cuda_try_malloc(4 * n[i % 3])) != NULL;
    bool ok = have;
    if (have) {
        cudaStream_t cs = cuda_state(rt)->cs;
        for (int i = 0; i < 6; i++) CU_CHECK(cudaMemsetAsync(t[i], 0, 4 * n[i % 3], cs));
        split_bwd_block(rt, sp, src, t[0], t[1], t[2], dout, q, k, v, o, lse);
        CU_CHECK(kcu_ring_block_bwd(t[3], t[4], t[5], dout, q, k, v, lse, D, sp->b, sp->S, sp->S, sp->H, sp->Hkv,
                                    sp->Dh, qpos, kpos, cs));
        static const char *const name[3] = {"dq", "dk", "dv"};
        double e = 0;
        for (int i = 0; i < 3 && ok; i++)
            if (!split_close(rt, t[i], t[3 + i], (int64_t)n[i], 5e-2, true, &e)) {
                char why[200];
                snprintf(why, sizeof why,
                         "its backward differs from the basp kernels' (%s of ring position %d's block: %.3g of max "
                         "|%s|, over 5e-2)",
                         name[i], src, e, name[i]);
                split_refuse(rt, sp->shape, why);
                ok = false;
            }
        CU_CHECK(cudaStreamSynchronize(cs));
    } else {
        split_refuse(rt, sp->shape, "no device memory for its one-time check against the basp kernels");
    }
    for (int i = 0; i < 6; i++)
        if (t[i]) CU_CHECK(cudaFree(t[i]));
    return ok;
}

void cuda_ring_split_bwd(rt_ctx *rt, cuda_ring_split *sp, int src, float *dq, float *dk, float *dv,
                         const kcu_bf16 *dout, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v,
                         const kcu_bf16 *o, const float *lse, const float *D, const int64_t *qpos,
                         const int64_t *kpos) {
    if (!sp->failed && sp->check && !split_bwd_check(rt, sp, src, dout, q, k, v, o, lse, D, qpos, kpos))
        sp->failed = true;
    if (sp->failed) {
        CU_CHECK(kcu_ring_block_bwd(dq, dk, dv, dout, q, k, v, lse, D, sp->b, sp->S, sp->S, sp->H, sp->Hkv, sp->Dh,
                                    qpos, kpos, cuda_state(rt)->cs));
        return;
    }
    split_bwd_block(rt, sp, src, dq, dk, dv, dout, q, k, v, o, lse);
}
