/* kern_attention.c — causal grouped-query attention, forward and backward:
 * the entry points, the choice of implementation, and the blocked kernels.
 *
 * On a CPU with AVX-512 (Dh % 16 == 0) or AVX2 (Dh % 8 == 0) the entry
 * points hand over to the fused kernels (kern_attn_fused.h, 1.1-1.5x
 * faster); kern_attention_fused decides, for kern_ring.c and kern_docattn.c
 * too.  Everywhere else, and with BASP_CPU_ATTENTION=blas, the blocked
 * kernels below run.
 *
 * Blocked kernels: the flash-attention structure on the CPU: for each
 * (batch, q head), blocks of BQ queries meet blocks of BK keys.  The two
 * GEMMs of a block pair (Q K^T and P V) go through cblas_sgemm directly on
 * the strided [b,S,H,Dh] layout (the row stride is the lda), and the
 * softmax between them is an online softmax (running row max m and row sum
 * l), so the memory is O(BQ*BK), never O(S*S).
 *
 * The backward takes each row's logsumexp from the forward when the caller
 * kept it (kern_attention_fwd_lse), else recomputes it: for every query
 * block it first reruns Q K^T over the keys (about a fifth of the
 * backward's time).  Then per key block it forms
 * P = exp(S - lse), dP = dO V^T, dS = P o (dP - rowsum(dO o O)) and
 * accumulates dQ += dS K, dK += dS^T Q, dV += P^T dO straight into the
 * outputs (beta = 1), which also sums dk/dv over the q heads of a kv group.
 *
 * The element-wise work (one exp per score, plus row max and sums) is written
 * with GCC vector extensions and a polynomial exp in kern_attention_simd.h,
 * instantiated for SSE2, AVX2 and AVX-512 in kern_simd.c and chosen at run
 * time: the build does not assume -march, and with Dh = 64 there are only
 * 4*Dh GEMM flops per exp, so the element-wise part decides whether the
 * kernel runs near sgemm speed (the SSE2 instance reaches ~0.5 of sgemm,
 * AVX-512 ~0.67). */
#include "rt_host.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    BQ = 64,  /* queries per block */
    BK = 128, /* keys per block (64/128 measured best of 32..256, bench/README.md) */
};

/* Block rows are padded to a multiple of this (the widest vector). */
enum { PADW = 16 };

/* The fused kernels run in the ISA of the widest element-wise instance
 * (kern_simd.c; BASP_SIMD=avx2 picks the AVX2 ones, generic none) when Dh
 * is a multiple of its vector width; elsewhere, or with
 * BASP_CPU_ATTENTION=blas or kern_attention_set_impl(KERN_ATTN_BLAS), the
 * blocked BLAS code below. */
static int attn_impl = -1; /* kern_attn_impl; -1: BASP_CPU_ATTENTION not read yet */

kern_attn_impl kern_attention_set_impl(kern_attn_impl impl) {
    kern_attn_impl old = kern_attention_get_impl();
    attn_impl = (int)impl;
    return old;
}

kern_attn_impl kern_attention_get_impl(void) {
    if (attn_impl < 0) {
        const char *e = getenv("BASP_CPU_ATTENTION");
        if (!e || !*e || !strcmp(e, "auto"))
            attn_impl = KERN_ATTN_AUTO;
        else if (!strcmp(e, "fused"))
            attn_impl = KERN_ATTN_FUSED;
        else if (!strcmp(e, "blas"))
            attn_impl = KERN_ATTN_BLAS;
        else {
            fprintf(stderr, "basp: BASP_CPU_ATTENTION=%s: expected auto, fused or blas\n", e);
            exit(2);
        }
    }
    return (kern_attn_impl)attn_impl;
}

const kern_attn_fused_ops *kern_attention_fused(int64_t Dh) {
    kern_attn_impl impl = kern_attention_get_impl();
    int w = kern_attn_simd_width();
    /* the widest instance whose vectors divide Dh: an AVX-512 CPU runs the
     * AVX2 one for head dims that are a multiple of 8 but not of 16 */
    const kern_attn_fused_ops *ops = NULL;
    if (w >= 16 && kern_attn_fused_avx512.name && Dh % kern_attn_fused_avx512.vl == 0)
        ops = &kern_attn_fused_avx512;
    else if (w >= 8 && kern_attn_fused_avx2.name && Dh % kern_attn_fused_avx2.vl == 0)
        ops = &kern_attn_fused_avx2;
    /* AVX2 above head dim 64: the fused backward measured 0.8-0.9x the
     * blocked one (Q_i^T and dO_i^T, 64 KiB, leave L1 and its 12-register
     * tiles reload them; bench/README.md), so auto keeps the blocked
     * kernels there; BASP_CPU_ATTENTION=fused still takes them. */
    if (ops == &kern_attn_fused_avx2 && Dh > 64 && impl == KERN_ATTN_AUTO) return NULL;
    if (impl == KERN_ATTN_FUSED && !ops) {
        fprintf(stderr,
                "basp: BASP_CPU_ATTENTION=fused, but the fused kernels need AVX2 and FMA (or AVX-512) with a head "
                "dim that is a multiple of 8 (this CPU%s: %d-float vectors; head dim %lld)\n",
                getenv("BASP_SIMD") ? ", capped by BASP_SIMD" : "", w, (long long)Dh);
        exit(2);
    }
    return impl == KERN_ATTN_BLAS ? NULL : ops;
}

const char *kern_attention_impl_name(int64_t Dh) {
    const kern_attn_fused_ops *ops = kern_attention_fused(Dh);
    return ops ? ops->name : "blas-blocked";
}

/* ---- block helpers --------------------------------------------------------- */

/* Sets to -inf the entries of the score block s[nq, ldw] (query rows i0..,
 * key columns j0..) that the causal mask removes, and the padding columns
 * nk..ldw-1. */
static void mask_block(float *s, int nq, int nk, int ldw, int64_t i0, int64_t j0) {
    for (int r = 0; r < nq; r++) {
        int64_t lim = i0 + r - j0 + 1; /* keys j0 .. i0+r are visible */
        int start = lim < 0 ? 0 : (lim > nk ? nk : (int)lim);
        for (int c = start; c < ldw; c++) s[(int64_t)r * ldw + c] = -INFINITY;
    }
}

/* ---- scratch ----------------------------------------------------------------- */

/* Grow-only scratch shared by forward and backward (one thread per rank). */
static float *scratch_get(int64_t nfloats) {
    static float *buf;
    static int64_t cap;
    return kern_grow(&buf, &cap, nfloats, "attention");
}

static void check_heads(int64_t H, int64_t Hkv, int64_t Dh) {
    if (Hkv <= 0 || H % Hkv != 0 || Dh <= 0) {
        fprintf(stderr, "basp: attention: %lld q heads do not group over %lld kv heads (Dh %lld)\n", (long long)H,
                (long long)Hkv, (long long)Dh);
        abort();
    }
}

static inline int imin(int64_t a, int64_t b) { return (int)(a < b ? a : b); }
static inline int padw(int n) { return (n + PADW - 1) / PADW * PADW; }

/* Everything one (batch, head) pass needs: base pointers and row strides. */
typedef struct head_view {
    const float *q, *k, *v; /* first row of this head / its kv head */
    int64_t S, Dh;
    int ldq, ldk; /* row strides: H*Dh and Hkv*Dh */
    float scale;
} head_view;

/* s[nq, w] = scale * Q[i0.., :] K[j0.., :]^T, then the causal/padding mask. */
static void block_scores(const head_view *hv, float *s, int64_t i0, int nq, int64_t j0, int nk, int w) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, (int)hv->Dh, hv->scale, hv->q + i0 * hv->ldq, hv->ldq,
                hv->k + j0 * hv->ldk, hv->ldk, 0.0f, s, w);
    if (j0 + nk - 1 > i0 || nk < w) mask_block(s, nq, nk, w, i0, j0);
}

/* ---- forward -------------------------------------------------------------------- */

/* One query block of one head: o[i0..i0+nq) over keys 0..i0+nq-1. */
static void fwd_block(const head_view *hv, float *o, float *lse, int64_t i0, int nq, float *s, float *acc, float *m,
                      float *l, float *alpha) {
    int64_t Dh = hv->Dh;
    memset(acc, 0, (size_t)nq * (size_t)Dh * sizeof(float));
    for (int r = 0; r < nq; r++) m[r] = -INFINITY, l[r] = 0.0f;
    int64_t kend = i0 + nq; /* keys past the last query are all masked */
    for (int64_t j0 = 0; j0 < kend; j0 += BK) {
        int nk = imin(BK, kend - j0), w = padw(nk);
        block_scores(hv, s, i0, nq, j0, nk, w);
        kern_attn_simd()->softmax(s, nq, w, m, l, alpha);
        for (int r = 0; r < nq; r++)
            if (alpha[r] != 1.0f)
                for (int64_t d = 0; d < Dh; d++) acc[r * Dh + d] *= alpha[r];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, (int)Dh, nk, 1.0f, s, w, hv->v + j0 * hv->ldk,
                    hv->ldk, 1.0f, acc, (int)Dh);
    }
    for (int r = 0; r < nq; r++) {
        float inv = 1.0f / l[r]; /* l >= 1: the row max contributes exp(0) */
        float *orow = o + (i0 + r) * hv->ldq;
        for (int64_t d = 0; d < Dh; d++) orow[d] = acc[r * Dh + d] * inv;
    }
    /* The backward's pass 1 runs the same (m, l) updates on the same score
     * blocks, so these are its values bit for bit. */
    if (lse)
        for (int r = 0; r < nq; r++) lse[i0 + r] = m[r] + logf(l[r]);
}

void kern_attention_fwd(float *o, const float *q, const float *k, const float *v, int64_t b, int64_t S, int64_t H,
                        int64_t Hkv, int64_t Dh) {
    kern_attention_fwd_lse(o, NULL, q, k, v, b, S, H, Hkv, Dh);
}

void kern_attention_fwd_lse(float *o, float *lse, const float *q, const float *k, const float *v, int64_t b, int64_t S,
                            int64_t H, int64_t Hkv, int64_t Dh) {
    check_heads(H, Hkv, Dh);
    const kern_attn_fused_ops *fused = kern_attention_fused(Dh);
    if (fused) {
        fused->fwd(o, lse, q, k, v, b, S, H, Hkv, Dh);
        return;
    }
    float *s = scratch_get((int64_t)BQ * BK + (int64_t)BQ * Dh + 3 * BQ);
    float *acc = s + BQ * BK, *m = acc + BQ * Dh, *l = m + BQ, *alpha = l + BQ;
    int64_t rep = H / Hkv;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / rep;
            head_view hv = {q + (bi * S * H + h) * Dh,
                            k + (bi * S * Hkv + g) * Dh,
                            v + (bi * S * Hkv + g) * Dh,
                            S,
                            Dh,
                            (int)(H * Dh),
                            (int)(Hkv * Dh),
                            (float)(1.0 / sqrt((double)Dh))};
            float *ob = o + (bi * S * H + h) * Dh, *lb = lse ? lse + (bi * H + h) * S : NULL;
            for (int64_t i0 = 0; i0 < S; i0 += BQ) fwd_block(&hv, ob, lb, i0, imin(BQ, S - i0), s, acc, m, l, alpha);
        }
}

/* ---- backward ------------------------------------------------------------------- */

/* Per-head gradients and the incoming/outgoing rows for the backward. */
typedef struct head_grad {
    const float *dout, *o; /* [.., ldq] rows of this head */
    float *dq;             /* [.., ldq] */
    float *dk, *dv;        /* [.., ldk] rows of the kv head */
} head_grad;

/* Pass 1 for query rows i0..i0+nq-1: lse[r] (unless the forward's is
 * known), and dsum[r] = rowsum(dO o O). */
static void bwd_rowstats(const head_view *hv, const head_grad *hg, int64_t i0, int nq, float *s, float *lse,
                         float *dsum, float *l, bool have_lse) {
    if (!have_lse) {
        for (int r = 0; r < nq; r++) lse[r] = -INFINITY, l[r] = 0.0f;
        int64_t kend = i0 + nq;
        for (int64_t j0 = 0; j0 < kend; j0 += BK) {
            int nk = imin(BK, kend - j0), w = padw(nk);
            block_scores(hv, s, i0, nq, j0, nk, w);
            kern_attn_simd()->rowstats(s, nq, w, lse, l);
        }
        for (int r = 0; r < nq; r++) lse[r] += logf(l[r]);
    }
    for (int r = 0; r < nq; r++) {
        const float *dor = hg->dout + (i0 + r) * hv->ldq, *orow = hg->o + (i0 + r) * hv->ldq;
        double acc = 0.0;
        for (int64_t d = 0; d < hv->Dh; d++) acc += (double)dor[d] * orow[d];
        dsum[r] = (float)acc;
    }
}

/* Pass 2 for one (query block, key block) pair: P and dS from the row
 * statistics, then dQ_i += dS K_j, dK_j += dS^T Q_i, dV_j += P^T dO_i.  The
 * key block is cut at the block's last query (kend = i0 + nq), as the
 * forward cuts it. */
static void bwd_pair(const head_view *hv, const head_grad *hg, int64_t i0, int nq, int64_t j0, float *s, float *dp,
                     const float *lse, const float *dsum) {
    int Dh = (int)hv->Dh, ldq = hv->ldq, ldk = hv->ldk;
    int nk = imin(BK, i0 + nq - j0), w = padw(nk);
    const float *qi = hv->q + i0 * ldq, *doi = hg->dout + i0 * ldq, *kj = hv->k + j0 * ldk, *vj = hv->v + j0 * ldk;
    block_scores(hv, s, i0, nq, j0, nk, w);
    /* dp[nq, nk] = dO V^T; its padding columns are never read back */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, Dh, 1.0f, doi, ldq, vj, ldk, 0.0f, dp, w);
    kern_attn_simd()->grad(s, dp, nq, w, lse, dsum, hv->scale); /* s <- P, dp <- scale * dS */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, Dh, nk, 1.0f, dp, w, kj, ldk, 1.0f, hg->dq + i0 * ldq,
                ldq);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, Dh, nq, 1.0f, dp, w, qi, ldq, 1.0f, hg->dk + j0 * ldk,
                ldk);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, Dh, nq, 1.0f, s, w, doi, ldq, 1.0f, hg->dv + j0 * ldk,
                ldk);
}

/* One head: pass 1 (every query row's statistics), then pass 2 key block
 * by key block, so that a key block's dK and dV rows stay in cache while
 * the query blocks reaching it stream past (query-major, every query block
 * re-read and re-wrote all of dK and dV).  Every output element still
 * receives its terms in the same order (dK_j, dV_j over ascending query
 * blocks, dQ_i over ascending key blocks) from GEMMs of the same shapes:
 * the results are bit for bit the query-major ones. */
static void bwd_head(const head_view *hv, const head_grad *hg, float *s, float *dp, float *lse, float *dsum, float *l,
                     bool have_lse) {
    int64_t S = hv->S;
    for (int64_t i0 = 0; i0 < S; i0 += BQ)
        bwd_rowstats(hv, hg, i0, imin(BQ, S - i0), s, lse + i0, dsum + i0, l, have_lse);
    for (int64_t j0 = 0; j0 < S; j0 += BK)
        for (int64_t i0 = j0 / BQ * BQ; i0 < S; i0 += BQ) /* the query blocks reaching key j0 */
            bwd_pair(hv, hg, i0, imin(BQ, S - i0), j0, s, dp, lse + i0, dsum + i0);
}

void kern_attention_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, const float *o, int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    kern_attention_bwd_lse(dq, dk, dv, dout, q, k, v, o, NULL, b, S, H, Hkv, Dh);
}

void kern_attention_bwd_lse(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                            const float *v, const float *o, const float *lse_fwd, int64_t b, int64_t S, int64_t H,
                            int64_t Hkv, int64_t Dh) {
    check_heads(H, Hkv, Dh);
    const kern_attn_fused_ops *fused = kern_attention_fused(Dh);
    if (fused) {
        fused->bwd(dq, dk, dv, dout, q, k, v, o, lse_fwd, b, S, H, Hkv, Dh);
        return;
    }
    /* The GEMMs accumulate (beta = 1) into the outputs, which start at zero. */
    memset(dq, 0, (size_t)(b * S * H * Dh) * sizeof(float));
    memset(dk, 0, (size_t)(b * S * Hkv * Dh) * sizeof(float));
    memset(dv, 0, (size_t)(b * S * Hkv * Dh) * sizeof(float));
    float *s = scratch_get(2 * (int64_t)BQ * BK + BQ);
    float *dp = s + BQ * BK, *l = dp + BQ * BK;
    /* one head's row statistics, in the workspace the memory plan counts
     * (ir_op_attn.c, CM_WS_CPU_DSTATS) */
    float *stats = kern_scratch(CM_WS_CPU_DSTATS, 2 * S, "attention"), *dsum = stats + S;
    int64_t rep = H / Hkv;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / rep, qoff = (bi * S * H + h) * Dh, koff = (bi * S * Hkv + g) * Dh;
            head_view hv = {q + qoff, k + koff,      v + koff,        S,
                            Dh,       (int)(H * Dh), (int)(Hkv * Dh), (float)(1.0 / sqrt((double)Dh))};
            head_grad hg = {dout + qoff, o + qoff, dq + qoff, dk + koff, dv + koff};
            /* pass 2 only reads lse: the forward's row may be used in place */
            float *lse = lse_fwd ? (float *)lse_fwd + (bi * H + h) * S : stats;
            bwd_head(&hv, &hg, s, dp, lse, dsum, l, lse_fwd != NULL);
        }
}
