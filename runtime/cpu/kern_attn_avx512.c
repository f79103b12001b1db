/* kern_attn_avx512.c — causal GQA attention, forward and backward, fused
 * around one AVX-512 register-blocked micro-kernel.
 *
 * Why not cblas_sgemm per block (kern_attention.c's blocked path): every
 * block GEMM is small (64 x 64 x Dh), so the BLAS re-packs both operands on
 * every call, and the softmax between the two GEMMs makes an extra pass over
 * the score block.  Here nothing is re-packed per block:
 *
 *  - Score tiles are transposed: ST[t][r] holds key t against query r, with
 *    the 64 queries of a block along the vector lanes.  ST = K_j Q_i^T needs
 *    Q_i^T, packed once per query block (scale folded in); K_j is read in
 *    place, one broadcast per element.  The softmax over keys then runs down
 *    the columns: row maxima, exponentials and sums are vertical vector
 *    operations, no horizontal reductions, and lse/D load as vectors.
 *  - Every product a block needs is C[rows, 16*NV] (+)= A[rows, K] B[K, ..]
 *    with A read by broadcasts at any (row, k) strides and B's rows
 *    contiguous: Q K^T, P V (A = P^T read down its columns), dO V^T,
 *    dS^T Q, P^T dO and dS K all fit, with K, V, Q, dO in their strided
 *    [b,S,H,Dh] rows and the tiles in L1.  One micro-kernel (rows x 16*NV
 *    accumulators in registers) serves all of them.
 *
 * Blocks are 64 queries by 64 keys, aligned, so the diagonal block is the
 * only masked one and every query sees at least key 0 of its first block
 * (no all-masked column, no exp(-inf - -inf)).  The backward runs query
 * block by query block (Q_i^T and dO_i^T packed once), accumulating dQ_i
 * in place and dK_j, dV_j into the outputs.
 *
 * The forward's per-block softmax step and the backward's logsumexp
 * recomputation share one function, so lse from the forward and lse
 * recomputed in the backward are the same bits (kern_attention_bwd_lse's
 * contract).  Only reached through kern_attention.c, after it checked that
 * the CPU has AVX-512 (F, VL, DQ, BW) and Dh is a multiple of 16. */
#include "kernels.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#pragma GCC target("avx512f,avx512vl,avx512dq,avx512bw,avx2,fma")
#include <immintrin.h>
#include <math.h>

enum { TB = 64 }; /* queries per block = keys per block; a score tile is TB x TB */

/* ---- the micro-kernel ------------------------------------------------------ */

/* One product C[rows, 16*nv] (+)= A[rows, K] B[K, 16*nv]:
 * A(i, k) = a[i*ars + k*aks] (any strides: read by broadcasts),
 * B(k, :) = b + k*ldb (contiguous), C(i, :) = c + i*ldc.
 * accum: C += A B, with row i first scaled by cscale[i] when cscale is set;
 * else C = A B. */
typedef struct gemm_op {
    const float *a;
    int64_t ars, aks;
    const float *b;
    int64_t ldb;
    float *c;
    int64_t ldc;
    int K;
    bool accum;
    const float *cscale;
} gemm_op;

/* MR rows by NV vectors of C in registers; the loops have constant trip
 * counts once inlined into an instance, so the accumulators stay in zmm
 * registers (MR*NV <= 24 of the 32). */
static inline __attribute__((always_inline)) void ukr(const int MR, const int NV, const gemm_op *g, int row0,
                                                      int col0) {
    __m512 acc[16][4];
    const float *a = g->a + (int64_t)row0 * g->ars;
    const float *b = g->b + col0;
    float *c = g->c + (int64_t)row0 * g->ldc + col0;
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            if (!g->accum) {
                acc[i][v] = _mm512_setzero_ps();
            } else {
                acc[i][v] = _mm512_loadu_ps(c + i * g->ldc + 16 * v);
                if (g->cscale) acc[i][v] = _mm512_mul_ps(acc[i][v], _mm512_set1_ps(g->cscale[row0 + i]));
            }
        }
    }
    const int64_t ars = g->ars, aks = g->aks, ldb = g->ldb;
    for (int k = 0; k < g->K; k++) {
        __m512 bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = _mm512_loadu_ps(b + k * ldb + 16 * v);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            __m512 av = _mm512_set1_ps(a[i * ars + k * aks]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[i][v] = _mm512_fmadd_ps(av, bv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) _mm512_storeu_ps(c + i * g->ldc + 16 * v, acc[i][v]);
}

/* One instance per (rows, vectors): the full-height ones (6x4, 12x2, 16x1)
 * and every shorter height for the last rows of a product. */
typedef void (*ukr_fn)(const gemm_op *g, int row0, int col0);
#define UKR_INST(MR, NV) \
    static void ukr_##MR##x##NV(const gemm_op *g, int row0, int col0) { ukr(MR, NV, g, row0, col0); }
#define UKR_ROWS6(NV) UKR_INST(1, NV) UKR_INST(2, NV) UKR_INST(3, NV) UKR_INST(4, NV) UKR_INST(5, NV) UKR_INST(6, NV)
#define UKR_ROWS12(NV) \
    UKR_ROWS6(NV) UKR_INST(7, NV) UKR_INST(8, NV) UKR_INST(9, NV) UKR_INST(10, NV) UKR_INST(11, NV) UKR_INST(12, NV)
UKR_ROWS6(4)
UKR_ROWS12(2)
UKR_ROWS12(1)
UKR_INST(13, 1) UKR_INST(14, 1) UKR_INST(15, 1) UKR_INST(16, 1)

static const ukr_fn ukr_nv4[7] = {NULL, ukr_1x4, ukr_2x4, ukr_3x4, ukr_4x4, ukr_5x4, ukr_6x4};
static const ukr_fn ukr_nv2[13] = {NULL,    ukr_1x2, ukr_2x2, ukr_3x2,  ukr_4x2,  ukr_5x2, ukr_6x2,
                                   ukr_7x2, ukr_8x2, ukr_9x2, ukr_10x2, ukr_11x2, ukr_12x2};
static const ukr_fn ukr_nv1[17] = {NULL,     ukr_1x1,  ukr_2x1,  ukr_3x1,  ukr_4x1,  ukr_5x1,
                                   ukr_6x1,  ukr_7x1,  ukr_8x1,  ukr_9x1,  ukr_10x1, ukr_11x1,
                                   ukr_12x1, ukr_13x1, ukr_14x1, ukr_15x1, ukr_16x1};

/* C[rows, ncols] (+)= A B over all rows; ncols a multiple of 16, taken in
 * strips of 64, 32 and 16 columns. */
static void gemm(const gemm_op *g, int rows, int ncols) {
    for (int col0 = 0; col0 < ncols;) {
        int left = ncols - col0, nv = left >= 64 ? 4 : left >= 32 ? 2 : 1;
        const ukr_fn *tab = nv == 4 ? ukr_nv4 : nv == 2 ? ukr_nv2 : ukr_nv1;
        int mr = nv == 4 ? 6 : nv == 2 ? 12 : 16;
        int r = 0;
        for (; r + mr <= rows; r += mr) tab[mr](g, r, col0);
        if (r < rows) tab[rows - r](g, r, col0);
        col0 += 16 * nv;
    }
}

/* ---- element-wise steps ---------------------------------------------------- */

/* exp(x) for x <= 0, as kern_attention_simd.h's: Cephes expf, x = n ln2 + r,
 * degree-6 polynomial, times 2^n (scalef); x < -87 (and -inf) gives 0. */
static inline __m512 exp_neg(__m512 x) {
    __mmask16 live = _mm512_cmp_ps_mask(x, _mm512_set1_ps(-87.0f), _CMP_GE_OQ);
    __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                    _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m512 r = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
    r = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440e-4f), r);
    __m512 p = _mm512_set1_ps(1.9875691500e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.3981999507e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.3334519073e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.1665795894e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.6666665459e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.0000001201e-1f));
    __m512 y = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    return _mm512_maskz_scalef_ps(live, y, n);
}

/* The causal mask on the diagonal tile (keys j0.. against queries i0 = j0..):
 * key t is visible to query r iff t <= r. */
static void mask_diagonal(float *st, int nk) {
    for (int t = 1; t < nk; t++)
        for (int r = 0; r < t && r < TB; r++) st[t * TB + r] = -INFINITY;
}

/* Online softmax step over a score tile st[nk][TB] (keys down, queries
 * across): m = max(m, max_t st), alpha = exp(m_old - m), l = l*alpha +
 * sum_t exp(st - m), and with write_p the exponentials over st.  Shared by
 * the forward and the backward's logsumexp pass: one function, one
 * rounding. */
static __attribute__((noinline)) void softmax_step(float *st, int nk, float *m, float *l, float *alpha,
                                                   bool write_p) {
    for (int v = 0; v < TB / 16; v++) {
        __m512 mx = _mm512_loadu_ps(m + 16 * v);
        for (int t = 0; t < nk; t++) mx = _mm512_max_ps(mx, _mm512_loadu_ps(st + t * TB + 16 * v));
        __m512 al = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(m + 16 * v), mx));
        __m512 sum = _mm512_setzero_ps();
        for (int t = 0; t < nk; t++) {
            __m512 p = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(st + t * TB + 16 * v), mx));
            if (write_p) _mm512_storeu_ps(st + t * TB + 16 * v, p);
            sum = _mm512_add_ps(sum, p);
        }
        _mm512_storeu_ps(l + 16 * v, _mm512_fmadd_ps(_mm512_loadu_ps(l + 16 * v), al, sum));
        _mm512_storeu_ps(m + 16 * v, mx);
        _mm512_storeu_ps(alpha + 16 * v, al);
    }
}

/* Backward element-wise step: p = exp(st - lse) over st, and
 * ds = p (dp - D) scale over dp (the lse and D of the tile's queries). */
static void grad_step(float *st, float *dp, int nk, const float *lse, const float *D, float scale) {
    __m512 sc = _mm512_set1_ps(scale);
    for (int v = 0; v < TB / 16; v++) {
        __m512 lv = _mm512_loadu_ps(lse + 16 * v), dv = _mm512_loadu_ps(D + 16 * v);
        for (int t = 0; t < nk; t++) {
            float *s = st + t * TB + 16 * v, *d = dp + t * TB + 16 * v;
            __m512 p = exp_neg(_mm512_sub_ps(_mm512_loadu_ps(s), lv));
            _mm512_storeu_ps(s, p);
            _mm512_storeu_ps(d, _mm512_mul_ps(_mm512_mul_ps(p, _mm512_sub_ps(_mm512_loadu_ps(d), dv)), sc));
        }
    }
}

/* xt[d][r] = x[r*ld + d] * scale for r < n, 0 for n <= r < TB. */
static void pack_t(float *xt, const float *x, int64_t ld, int n, int Dh, float scale) {
    for (int d = 0; d < Dh; d++) {
        float *row = xt + (int64_t)d * TB;
        for (int r = 0; r < n; r++) row[r] = x[r * ld + d] * scale;
        for (int r = n; r < TB; r++) row[r] = 0.0f;
    }
}

/* ---- scratch ----------------------------------------------------------------- */

/* Grow-only, one thread per rank; at most about 5 * 64 * Dh floats. */
static float *scratch(int64_t nfloats) {
    static float *buf;
    static int64_t cap;
    if (nfloats > cap) {
        free(buf);
        size_t bytes = ((size_t)nfloats * sizeof(float) + 63) & ~(size_t)63;
        buf = aligned_alloc(64, bytes);
        if (!buf) {
            fprintf(stderr, "basp: attention: out of memory (%zu bytes of scratch)\n", bytes);
            abort();
        }
        cap = nfloats;
    }
    return buf;
}

static inline int imin(int64_t a, int64_t b) { return (int)(a < b ? a : b); }

/* One (batch, q head): first rows and row strides. */
typedef struct head {
    const float *q, *k, *v;
    int64_t ldq, ldk, S;
    int Dh;
    float scale;
} head;

/* ST[nk][TB] = scale * K_j Q_i^T (qt holds scale * Q_i^T), masked when
 * the tile is the diagonal one. */
static void scores(const head *hd, float *st, const float *qt, int64_t j0, int nk, bool diagonal) {
    gemm_op g = {hd->k + j0 * hd->ldk, hd->ldk, 1, qt, TB, st, TB, hd->Dh, false, NULL};
    gemm(&g, nk, TB);
    if (diagonal) mask_diagonal(st, nk);
}

/* ---- forward ------------------------------------------------------------------- */

/* Query block i0..i0+nq-1: m and l over all its keys (and, with o, the
 * output rows o[r*ldq] through the P V products). */
static void fwd_block(const head *hd, float *o, float *lse, int64_t i0, int nq, float *ws) {
    int Dh = hd->Dh;
    float *qt = ws, *st = qt + (int64_t)Dh * TB, *acc = st + TB * TB, *m = acc + (int64_t)TB * Dh;
    float *l = m + TB, *alpha = l + TB;
    pack_t(qt, hd->q + i0 * hd->ldq, hd->ldq, nq, Dh, hd->scale);
    for (int r = 0; r < TB; r++) m[r] = -INFINITY, l[r] = 0.0f;
    int64_t kend = i0 + nq;
    for (int64_t j0 = 0; j0 < kend; j0 += TB) {
        int nk = imin(TB, kend - j0);
        scores(hd, st, qt, j0, nk, j0 == i0);
        softmax_step(st, nk, m, l, alpha, o != NULL);
        if (!o) continue;
        /* acc[r][:] = alpha[r] acc[r][:] + sum_t P[t][r] V[j0+t][:] */
        gemm_op g = {st, 1, TB, hd->v + j0 * hd->ldk, hd->ldk, acc, Dh, nk, j0 > 0, alpha};
        gemm(&g, nq, Dh);
    }
    for (int r = 0; r < nq; r++) {
        if (o) {
            float inv = 1.0f / l[r]; /* l >= 1: the column max contributes exp(0) */
            for (int d = 0; d < Dh; d++) o[(i0 + r) * hd->ldq + d] = acc[(int64_t)r * Dh + d] * inv;
        }
        if (lse) lse[i0 + r] = m[r] + logf(l[r]);
    }
}

void kern_attn512_fwd(float *o, float *lse, const float *q, const float *k, const float *v, int64_t b, int64_t S,
                      int64_t H, int64_t Hkv, int64_t Dh) {
    float *ws = scratch(2 * Dh * TB + TB * TB + 3 * TB);
    int64_t rep = H / Hkv;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / rep;
            head hd = {q + (bi * S * H + h) * Dh, k + (bi * S * Hkv + g) * Dh, v + (bi * S * Hkv + g) * Dh,
                       H * Dh, Hkv * Dh, S, (int)Dh, (float)(1.0 / sqrt((double)Dh))};
            float *ob = o + (bi * S * H + h) * Dh, *lb = lse ? lse + (bi * H + h) * S : NULL;
            for (int64_t i0 = 0; i0 < S; i0 += TB) fwd_block(&hd, ob, lb, i0, imin(TB, S - i0), ws);
        }
}

/* ---- backward ------------------------------------------------------------------- */

typedef struct head_grad {
    const float *dout, *o;
    float *dq, *dk, *dv;
} head_grad;

/* Query block i0..i0+nq-1 against every key block it sees. */
static void bwd_block(const head *hd, const head_grad *hg, const float *lse_row, int64_t i0, int nq, float *ws) {
    int Dh = hd->Dh;
    int64_t ldq = hd->ldq, ldk = hd->ldk;
    float *qt = ws, *dot = qt + (int64_t)Dh * TB, *st = dot + (int64_t)Dh * TB, *dp = st + TB * TB;
    float *lse = dp + TB * TB, *D = lse + TB;
    pack_t(qt, hd->q + i0 * ldq, ldq, nq, Dh, hd->scale);
    pack_t(dot, hg->dout + i0 * ldq, ldq, nq, Dh, 1.0f);
    for (int r = 0; r < TB; r++) {
        lse[r] = 0.0f, D[r] = 0.0f; /* padding columns: finite, never read back */
        if (r >= nq) continue;
        lse[r] = lse_row[i0 + r];
        const float *dor = hg->dout + (i0 + r) * ldq, *orow = hg->o + (i0 + r) * ldq;
        double acc = 0.0; /* as kern_attention_bwd: the row sum in double */
        for (int d = 0; d < Dh; d++) acc += (double)dor[d] * orow[d];
        D[r] = (float)acc;
    }
    const float *qi = hd->q + i0 * ldq, *doi = hg->dout + i0 * ldq;
    int64_t kend = i0 + nq;
    for (int64_t j0 = 0; j0 < kend; j0 += TB) {
        int nk = imin(TB, kend - j0);
        const float *kj = hd->k + j0 * ldk, *vj = hd->v + j0 * ldk;
        scores(hd, st, qt, j0, nk, j0 == i0);
        gemm_op dpo = {vj, ldk, 1, dot, TB, dp, TB, Dh, false, NULL}; /* dP^T = V_j dO_i^T */
        gemm(&dpo, nk, TB);
        grad_step(st, dp, nk, lse, D, hd->scale); /* st <- P^T, dp <- scale dS^T */
        gemm_op dvo = {st, TB, 1, doi, ldq, hg->dv + j0 * ldk, ldk, nq, true, NULL}; /* dV_j += P^T dO_i */
        gemm(&dvo, nk, Dh);
        gemm_op dko = {dp, TB, 1, qi, ldq, hg->dk + j0 * ldk, ldk, nq, true, NULL}; /* dK_j += dS^T Q_i */
        gemm(&dko, nk, Dh);
        gemm_op dqo = {dp, 1, TB, kj, ldk, hg->dq + i0 * ldq, ldq, nk, true, NULL}; /* dQ_i += dS K_j */
        gemm(&dqo, nq, Dh);
    }
}

void kern_attn512_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                      const float *v, const float *o, const float *lse_fwd, int64_t b, int64_t S, int64_t H,
                      int64_t Hkv, int64_t Dh) {
    memset(dq, 0, (size_t)(b * S * H * Dh) * sizeof(float));
    memset(dk, 0, (size_t)(b * S * Hkv * Dh) * sizeof(float));
    memset(dv, 0, (size_t)(b * S * Hkv * Dh) * sizeof(float));
    float *ws = scratch(2 * Dh * TB + 2 * TB * TB + 2 * TB);
    /* one head's recomputed lse, in the workspace the memory plan counts
     * (ir_op_attn.c, IR_WS_CPU_DSTATS) */
    float *stats = lse_fwd ? NULL : kern_scratch(KERN_SCRATCH_DOCSTATS, 2 * S, "attention");
    int64_t rep = H / Hkv;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / rep, qoff = (bi * S * H + h) * Dh, koff = (bi * S * Hkv + g) * Dh;
            head hd = {q + qoff, k + koff, v + koff, H * Dh, Hkv * Dh, S, (int)Dh, (float)(1.0 / sqrt((double)Dh))};
            head_grad hg = {dout + qoff, o + qoff, dq + qoff, dk + koff, dv + koff};
            const float *lse = lse_fwd ? lse_fwd + (bi * H + h) * S : stats;
            if (!lse_fwd) /* the forward's statistics pass, without P V */
                for (int64_t i0 = 0; i0 < S; i0 += TB) fwd_block(&hd, NULL, stats, i0, imin(TB, S - i0), ws);
            for (int64_t i0 = 0; i0 < S; i0 += TB) bwd_block(&hd, &hg, lse, i0, imin(TB, S - i0), ws);
        }
}

bool kern_attn512_available(void) { return true; }

#else /* not x86-64 with GCC/clang: kern_attention.c never calls these */

bool kern_attn512_available(void) { return false; }
void kern_attn512_fwd(float *o, float *lse, const float *q, const float *k, const float *v, int64_t b, int64_t S,
                      int64_t H, int64_t Hkv, int64_t Dh) {
    abort();
}
void kern_attn512_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                      const float *v, const float *o, const float *lse_fwd, int64_t b, int64_t S, int64_t H,
                      int64_t Hkv, int64_t Dh) {
    abort();
}
#endif
