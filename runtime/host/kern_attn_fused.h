/* kern_attn_fused.h — causal GQA attention, forward and backward, fused
 * around one register-blocked micro-kernel, written once over a vector ISA:
 * kern_attn_avx512.c and kern_attn_avx2.c include it after defining
 *   FV, FVL          the vector type and its floats
 *   f_load, f_store, f_set1, f_zero, f_fma, f_mul, f_add, f_sub, f_max,
 *   f_round, f_fnma  (f_max(a, b) gives b when either is NaN, as max_ps)
 *   f_scale2n_live   y 2^n where x >= KERN_EXP_MIN or NaN, else 0 (exp_neg)
 *   f_mask_ids       the ring/document mask of one score tile
 *   F_MR4, F_MR2, F_MR1   micro-kernel heights for 4, 2, 1 vectors
 *   F_NV_MAX         the widest strip gemm() takes (4 or 2 vectors)
 *   F_NAME(x)        the exported names
 * No include guard on purpose.  The dense kernels (kern_attention.c) and the
 * ring-block / packed-document ones (kern_ring.c, kern_docattn.c) run here
 * when the CPU has AVX-512 (Dh % 16 == 0) or AVX2 (Dh % 8 == 0).
 *
 * Why not cblas_sgemm per tile (the blocked path): every tile GEMM is small
 * (64 x 64 x Dh), so the BLAS re-packs both operands on every call, and the
 * softmax between the two GEMMs makes extra passes over the score tile.
 * Here nothing is re-packed per tile:
 *
 *  - Score tiles are transposed: ST[t][r] holds key t against query r, with
 *    the 64 queries of a tile along the vector lanes (4 or 8 vectors).
 *    ST = K_j Q_i^T needs Q_i^T, packed once per query tile (scale folded
 *    in); K_j is read in place, one broadcast per element.  The softmax
 *    over keys then runs down the columns: maxima, exponentials and sums
 *    are vertical vector operations, no horizontal reductions, and lse/D
 *    load as vectors.
 *  - Every product a tile needs is C[rows, FVL*NV] (+)= A[rows, K] B[K, ..]
 *    with A read by broadcasts at any (row, k) strides and B's rows
 *    contiguous: Q K^T, P V (A = P^T read down its columns), dO V^T,
 *    dS^T Q, P^T dO and dS K all fit, with K, V, Q, dO in their strided
 *    [b,S,H,Dh] rows and the tiles in L1.  One micro-kernel (up to 24 zmm
 *    or 12 ymm accumulators) serves all of them.
 *
 * Tiles are 64 queries by 64 keys (KERN_TILE).  Dense attention: aligned
 * tiles, so only the diagonal one is masked and every query sees key 0 of
 * its first tile.  Ring blocks and packed documents: kern_ring.c's tile
 * extents skip tiles and leave whole ones unmasked, the mask compares
 * positions and document ids (16 queries at a time with AVX-512), and the
 * running state (o, lse) is loaded and stored as kern_ring.c does; a column
 * that has seen nothing starts its max at M_EMPTY, so no exp(-inf - -inf)
 * arises.  The backward runs query tile by query tile (Q_i^T and dO_i^T
 * packed once), accumulating dQ_i in place and dK_j, dV_j into the
 * outputs.
 *
 * The forward's softmax step and the backward's logsumexp recomputation are
 * one function (fwd_tile without o), so lse from the forward and lse
 * recomputed are the same bits (kern_attention_bwd_lse's contract).  The
 * exponential is kern_attention_simd.h's polynomial.  Only reached after
 * kern_attention_fused() checked the CPU and Dh. */

#include "kern_exp_coef.h"

enum { TB = KERN_TILE }; /* queries per block = keys per block (64); a score tile is TB x TB */

/* ---- the micro-kernel ------------------------------------------------------ */

/* One product C[rows, FVL*nv] (+)= A[rows, K] B[K, FVL*nv]:
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
 * counts once inlined into an instance, so the accumulators stay in
 * registers (MR*NV <= F_MR4*4: 24 of AVX-512's 32, 12 of AVX2's 16). */
static inline __attribute__((always_inline)) void ukr(const int MR, const int NV, const gemm_op *g, int row0,
                                                      int col0) {
    FV acc[16][4];
    const float *a = g->a + (int64_t)row0 * g->ars;
    const float *b = g->b + col0;
    float *c = g->c + (int64_t)row0 * g->ldc + col0;
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++) {
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) {
            if (!g->accum) {
                acc[i][v] = f_zero();
            } else {
                acc[i][v] = f_load(c + i * g->ldc + FVL * v);
                if (g->cscale) acc[i][v] = f_mul(acc[i][v], f_set1(g->cscale[row0 + i]));
            }
        }
    }
    const int64_t ars = g->ars, aks = g->aks, ldb = g->ldb;
    for (int k = 0; k < g->K; k++) {
        FV bv[4];
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) bv[v] = f_load(b + k * ldb + FVL * v);
#pragma GCC unroll 16
        for (int i = 0; i < MR; i++) {
            FV av = f_set1(a[i * ars + k * aks]);
#pragma GCC unroll 4
            for (int v = 0; v < NV; v++) acc[i][v] = f_fma(av, bv[v], acc[i][v]);
        }
    }
#pragma GCC unroll 16
    for (int i = 0; i < MR; i++)
#pragma GCC unroll 4
        for (int v = 0; v < NV; v++) f_store(c + i * g->ldc + FVL * v, acc[i][v]);
}

/* One instance per (rows, vectors), every height up to 6, 12 and 16 rows
 * for 4, 2 and 1 vectors; gemm() uses those up to this ISA's F_MR4, F_MR2,
 * F_MR1 (the taller ones would spill: AVX2 never calls them). */
typedef void (*ukr_fn)(const gemm_op *g, int row0, int col0);
#define UKR_INST(MR, NV)                                                                                               \
    static void ukr_##MR##x##NV(const gemm_op *g, int row0, int col0) { ukr(MR, NV, g, row0, col0); }
#define UKR_ROWS6(NV) UKR_INST(1, NV) UKR_INST(2, NV) UKR_INST(3, NV) UKR_INST(4, NV) UKR_INST(5, NV) UKR_INST(6, NV)
#define UKR_ROWS12(NV)                                                                                                 \
    UKR_ROWS6(NV) UKR_INST(7, NV) UKR_INST(8, NV) UKR_INST(9, NV) UKR_INST(10, NV) UKR_INST(11, NV) UKR_INST(12, NV)
/* The instances expand to functions that no statement ends, which the
 * formatter would read as one declaration: kept as written. */
/* clang-format off */
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
/* clang-format on */

/* C[rows, ncols] (+)= A B over all rows; ncols a multiple of FVL, taken
 * in strips of 4, 2 and 1 vectors. */
static void gemm(const gemm_op *g, int rows, int ncols) {
    for (int col0 = 0; col0 < ncols;) {
        int left = ncols - col0, nv = left >= 4 * FVL && F_NV_MAX >= 4 ? 4 : left >= 2 * FVL ? 2 : 1;
        const ukr_fn *tab = nv == 4 ? ukr_nv4 : nv == 2 ? ukr_nv2 : ukr_nv1;
        int mr = nv == 4 ? F_MR4 : nv == 2 ? F_MR2 : F_MR1;
        int r = 0;
        for (; r + mr <= rows; r += mr) tab[mr](g, r, col0);
        if (r < rows) tab[rows - r](g, r, col0);
        col0 += FVL * nv;
    }
}

/* ---- element-wise steps ---------------------------------------------------- */

/* exp(x) for x <= 0, kern_attention_simd.h's polynomial with
 * kern_exp_coef.h's constants: x clamped to KERN_EXP_MIN first (max_ps
 * keeps a NaN, the second operand), so n stays in the normal range;
 * x < KERN_EXP_MIN (and -inf) gives 0, NaN stays NaN, so a diverging run
 * shows in the loss. */
static inline FV exp_neg(FV x) {
    FV xc = f_max(f_set1(KERN_EXP_MIN), x);
    FV n = f_round(f_mul(xc, f_set1(KERN_EXP_LOG2E)));
    FV r = f_fnma(n, f_set1(KERN_EXP_LN2_HI), xc);
    r = f_fnma(n, f_set1(KERN_EXP_LN2_LO), r);
    FV p = f_set1(KERN_EXP_P0);
    p = f_fma(p, r, f_set1(KERN_EXP_P1));
    p = f_fma(p, r, f_set1(KERN_EXP_P2));
    p = f_fma(p, r, f_set1(KERN_EXP_P3));
    p = f_fma(p, r, f_set1(KERN_EXP_P4));
    p = f_fma(p, r, f_set1(KERN_EXP_P5));
    FV y = f_add(f_fma(f_mul(p, r), r, r), f_set1(1.0f));
    return f_scale2n_live(y, n, x);
}

/* Online softmax step over a score tile st[nk][TB] (keys down, queries
 * across): m = max(m, max_t st), alpha = exp(m_old - m), l = l*alpha +
 * sum_t exp(st - m), and with write_p the exponentials over st.  Shared by
 * the forward and the backward's logsumexp pass: one function, one
 * rounding. */
static __attribute__((noinline)) void softmax_step(float *st, int nk, float *m, float *l, float *alpha, bool write_p) {
    for (int v = 0; v < TB / FVL; v++) {
        FV mx = f_load(m + FVL * v);
        /* f_max(a, b) returns b when either is NaN: mx second keeps a NaN
         * max, and a NaN score still reaches l through its exp */
        for (int t = 0; t < nk; t++) mx = f_max(f_load(st + t * TB + FVL * v), mx);
        FV al = exp_neg(f_sub(f_load(m + FVL * v), mx));
        FV sum = f_zero();
        for (int t = 0; t < nk; t++) {
            FV p = exp_neg(f_sub(f_load(st + t * TB + FVL * v), mx));
            if (write_p) f_store(st + t * TB + FVL * v, p);
            sum = f_add(sum, p);
        }
        f_store(l + FVL * v, f_fma(f_load(l + FVL * v), al, sum));
        f_store(m + FVL * v, mx);
        f_store(alpha + FVL * v, al);
    }
}

/* Backward element-wise step: p = exp(st - lse) over st, and
 * ds = p (dp - D) scale over dp (the lse and D of the tile's queries). */
static void grad_step(float *st, float *dp, int nk, const float *lse, const float *D, float scale) {
    FV sc = f_set1(scale);
    for (int v = 0; v < TB / FVL; v++) {
        FV lv = f_load(lse + FVL * v), dv = f_load(D + FVL * v);
        for (int t = 0; t < nk; t++) {
            float *s = st + t * TB + FVL * v, *d = dp + t * TB + FVL * v;
            FV p = exp_neg(f_sub(f_load(s), lv));
            f_store(s, p);
            f_store(d, f_mul(f_mul(p, f_sub(f_load(d), dv)), sc));
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

/* Grow-only, one thread per rank: (2 Dh + 2 TB + 3) TB floats at most. */
static float *scratch(int64_t nfloats) {
    static float *buf;
    static int64_t cap;
    return kern_grow(&buf, &cap, nfloats, "attention");
}

static inline int imin(int64_t a, int64_t b) { return (int)(a < b ? a : b); }

/* A finite start for the running max of a column that has seen nothing
 * (as kern_ring.c's): exp(M_EMPTY - s) is exactly 0 once a key is visible,
 * and m - m_new never meets -inf - -inf. */
#define M_EMPTY (-1e30f)

/* One (batch, q head) against one block of keys: first rows, row strides,
 * and the mask.  Dense causal attention masks by index, key j0+t visible to
 * query i0+r iff j0+t <= i0+r; ring blocks and packed documents mask by the
 * explicit positions and document ids (either may be NULL: that condition
 * does not apply), with kern_ring.c's tile extents (kr) to skip tiles and
 * leave whole ones unmasked. */
typedef struct view {
    const float *q, *k, *v;
    int64_t ldq, ldk, Sk;
    int Dh;
    float scale;
    bool dense;                 /* causal by index; else by qpos/kpos, qdoc/kdoc */
    const int64_t *qpos, *kpos; /* NULL: no position condition */
    const int32_t *qdoc, *kdoc; /* this batch row's ids, or NULL */
    const kern_tile_range *kr;  /* key tile extents, kr[j0 / TB] */
} view;

/* How key tile j0 (nk keys) meets query tile i0 (nq queries, extent qr). */
static kern_tile_kind tile_kind(const view *vw, const kern_tile_range *qr, int64_t i0, int nq, int64_t j0, int nk) {
    if (vw->dense) return j0 > i0 + nq - 1 ? KERN_TILE_SKIP : j0 + nk - 1 <= i0 ? KERN_TILE_FULL : KERN_TILE_MASKED;
    return kern_tile_classify(qr, &vw->kr[j0 / TB], vw->kpos != NULL, vw->kdoc != NULL);
}

/* The query tile's positions and ids for the vector mask, padded to TB
 * (padding columns: never masked by position, and their scores never
 * read back). */
typedef struct qtile_ids {
    int64_t pos[TB];
    int32_t doc[TB];
} qtile_ids;

static void qtile_ids_of(const view *vw, qtile_ids *ids, int64_t i0, int nq) {
    if (vw->dense) return;
    for (int r = 0; r < TB; r++) {
        ids->pos[r] = r < nq && vw->kpos ? vw->qpos[i0 + r] : INT64_MAX;
        ids->doc[r] = r < nq && vw->kdoc ? vw->qdoc[i0 + r] : 0;
    }
}

/* -inf over the masked entries of the score tile st[nk][TB] (keys down,
 * queries across).  Dense: key j0+t is masked for query i0+r < j0+t (only
 * the diagonal tile gets here).  Else key t is masked where its position
 * exceeds the query's, or its document differs (f_mask_ids: the ISA's
 * compares where it has them). */
static void mask_tile(const view *vw, const qtile_ids *ids, float *st, int64_t i0, int nq, int64_t j0, int nk) {
    if (vw->dense) {
        for (int t = 0; t < nk; t++)
            for (int r = 0; r < nq && i0 + r < j0 + t; r++) st[t * TB + r] = -INFINITY;
        return;
    }
    f_mask_ids(vw->kpos, vw->kdoc, ids->pos, ids->doc, st, j0, nk);
}

/* ST[nk][TB] = scale * K_j Q_i^T (qt holds scale * Q_i^T), then the mask. */
static void scores(const view *vw, const qtile_ids *ids, float *st, const float *qt, int64_t i0, int nq, int64_t j0,
                   int nk, kern_tile_kind kind) {
    gemm_op g = {vw->k + j0 * vw->ldk, vw->ldk, 1, qt, TB, st, TB, vw->Dh, false, NULL};
    gemm(&g, nk, TB);
    if (kind == KERN_TILE_MASKED) mask_tile(vw, ids, st, i0, nq, j0, nk);
}

/* The tile extent of queries i0..i0+nq-1 (ring and documents only). */
static kern_tile_range query_range(const view *vw, int64_t i0, int nq) {
    kern_tile_range r = {0, 0, 0, 0};
    if (!vw->dense) r = kern_tile_range_of(vw->kpos ? vw->qpos + i0 : NULL, vw->kdoc ? vw->qdoc + i0 : NULL, nq);
    return r;
}

/* ---- forward ------------------------------------------------------------------- */

/* The running state of one query tile: o rows (ldo apart) and lse (ldl
 * apart).  load: start from them (a ring block merging into a running
 * result: m = lse, l = 1, acc = o; lse -inf means nothing seen); else
 * start empty.  o NULL: the statistics only. */
typedef struct fwd_state {
    float *o, *lse;
    int64_t ldo, ldl;
    bool load;
} fwd_state;

/* Query tile i0..i0+nq-1 against every key tile it sees; writes back o and
 * lse of the columns that saw a key. */
static void fwd_tile(const view *vw, const fwd_state *fs, int64_t i0, int nq, float *ws) {
    int Dh = vw->Dh;
    float *qt = ws, *st = qt + (int64_t)Dh * TB, *acc = st + TB * TB, *m = acc + (int64_t)TB * Dh;
    float *l = m + TB, *alpha = l + TB;
    pack_t(qt, vw->q + i0 * vw->ldq, vw->ldq, nq, Dh, vw->scale);
    for (int r = 0; r < TB; r++) {
        float L = fs->load && r < nq ? fs->lse[(i0 + r) * fs->ldl] : -INFINITY;
        bool seen = L != -INFINITY;
        m[r] = seen ? L : M_EMPTY, l[r] = seen ? 1.0f : 0.0f;
        if (!fs->o) continue;
        for (int d = 0; d < Dh; d++) acc[(int64_t)r * Dh + d] = seen ? fs->o[(i0 + r) * fs->ldo + d] : 0.0f;
    }
    kern_tile_range qr = query_range(vw, i0, nq);
    qtile_ids ids;
    qtile_ids_of(vw, &ids, i0, nq);
    for (int64_t j0 = 0; j0 < vw->Sk; j0 += TB) {
        int nk = imin(TB, vw->Sk - j0);
        kern_tile_kind kind = tile_kind(vw, &qr, i0, nq, j0, nk);
        if (kind == KERN_TILE_SKIP) continue;
        scores(vw, &ids, st, qt, i0, nq, j0, nk, kind);
        softmax_step(st, nk, m, l, alpha, fs->o != NULL);
        if (!fs->o) continue;
        /* acc[r][:] = alpha[r] acc[r][:] + sum_t P[t][r] V[j0+t][:] */
        gemm_op g = {st, 1, TB, vw->v + j0 * vw->ldk, vw->ldk, acc, Dh, nk, true, alpha};
        gemm(&g, nq, Dh);
    }
    /* l == 0 in a running state: nothing visible yet, the column stays
     * (o, -inf).  A column that saw nothing new keeps m = lse, l = 1, acc =
     * o (alpha exactly 1), so it is written back unchanged.  Dense causal
     * attention always sees its own key, so l == 0 there means non-finite
     * scores: the column is written (lse -inf, o NaN), never left stale. */
    for (int r = 0; r < nq; r++) {
        if (l[r] == 0.0f && fs->load) continue;
        if (fs->lse) fs->lse[(i0 + r) * fs->ldl] = m[r] + logf(l[r]);
        if (!fs->o) continue;
        float inv = 1.0f / l[r];
        for (int d = 0; d < Dh; d++) fs->o[(i0 + r) * fs->ldo + d] = acc[(int64_t)r * Dh + d] * inv;
    }
}

static float *fwd_scratch(int64_t Dh) { return scratch(2 * Dh * TB + TB * TB + 3 * TB); }

static void F_NAME(fwd)(float *o, float *lse, const float *q, const float *k, const float *v, int64_t b, int64_t S,
                        int64_t H, int64_t Hkv, int64_t Dh) {
    float *ws = fwd_scratch(Dh);
    int64_t rep = H / Hkv;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / rep;
            view vw = {q + (bi * S * H + h) * Dh,
                       k + (bi * S * Hkv + g) * Dh,
                       v + (bi * S * Hkv + g) * Dh,
                       H * Dh,
                       Hkv * Dh,
                       S,
                       (int)Dh,
                       (float)(1.0 / sqrt((double)Dh)),
                       true,
                       NULL,
                       NULL,
                       NULL,
                       NULL,
                       NULL};
            fwd_state fs = {o + (bi * S * H + h) * Dh, lse ? lse + (bi * H + h) * S : NULL, H * Dh, 1, false};
            for (int64_t i0 = 0; i0 < S; i0 += TB) fwd_tile(&vw, &fs, i0, imin(TB, S - i0), ws);
        }
}

/* ---- backward ------------------------------------------------------------------- */

/* One head's backward inputs and outputs: lse and D ldl apart (D NULL:
 * computed here, rowsum(dO o O) in double). */
typedef struct grad_io {
    const float *dout, *o, *lse, *D;
    int64_t ldl;
    float *dq, *dk, *dv;
} grad_io;

/* Query tile i0..i0+nq-1 against every key tile it sees: dQ_i in place,
 * dK_j and dV_j accumulated into the outputs. */
static void bwd_tile(const view *vw, const grad_io *gi, int64_t i0, int nq, float *ws) {
    int Dh = vw->Dh;
    int64_t ldq = vw->ldq, ldk = vw->ldk;
    float *qt = ws, *dot = qt + (int64_t)Dh * TB, *st = dot + (int64_t)Dh * TB, *dp = st + TB * TB;
    float *lse = dp + TB * TB, *D = lse + TB;
    pack_t(qt, vw->q + i0 * ldq, ldq, nq, Dh, vw->scale);
    pack_t(dot, gi->dout + i0 * ldq, ldq, nq, Dh, 1.0f);
    for (int r = 0; r < TB; r++) {
        lse[r] = INFINITY, D[r] = 0.0f; /* padding columns: P = 0, never read back */
        if (r >= nq) continue;
        float L = gi->lse[(i0 + r) * gi->ldl];
        /* a column that saw no key at all (lse -inf) gets no gradient:
         * exp(s - inf) is 0 where exp(-inf + inf) would be NaN */
        lse[r] = L == -INFINITY ? INFINITY : L;
        if (gi->D) {
            D[r] = gi->D[(i0 + r) * gi->ldl];
            continue;
        }
        const float *dor = gi->dout + (i0 + r) * ldq, *orow = gi->o + (i0 + r) * ldq;
        double acc = 0.0; /* as kern_attention_bwd: the row sum in double */
        for (int d = 0; d < Dh; d++) acc += (double)dor[d] * orow[d];
        D[r] = (float)acc;
    }
    const float *qi = vw->q + i0 * ldq, *doi = gi->dout + i0 * ldq;
    kern_tile_range qr = query_range(vw, i0, nq);
    qtile_ids ids;
    qtile_ids_of(vw, &ids, i0, nq);
    for (int64_t j0 = 0; j0 < vw->Sk; j0 += TB) {
        int nk = imin(TB, vw->Sk - j0);
        kern_tile_kind kind = tile_kind(vw, &qr, i0, nq, j0, nk);
        if (kind == KERN_TILE_SKIP) continue;
        const float *kj = vw->k + j0 * ldk, *vj = vw->v + j0 * ldk;
        scores(vw, &ids, st, qt, i0, nq, j0, nk, kind);
        gemm_op dpo = {vj, ldk, 1, dot, TB, dp, TB, Dh, false, NULL}; /* dP^T = V_j dO_i^T */
        gemm(&dpo, nk, TB);
        grad_step(st, dp, nk, lse, D, vw->scale);                                    /* st <- P^T, dp <- scale dS^T */
        gemm_op dvo = {st, TB, 1, doi, ldq, gi->dv + j0 * ldk, ldk, nq, true, NULL}; /* dV_j += P^T dO_i */
        gemm(&dvo, nk, Dh);
        gemm_op dko = {dp, TB, 1, qi, ldq, gi->dk + j0 * ldk, ldk, nq, true, NULL}; /* dK_j += dS^T Q_i */
        gemm(&dko, nk, Dh);
        gemm_op dqo = {dp, 1, TB, kj, ldk, gi->dq + i0 * ldq, ldq, nk, true, NULL}; /* dQ_i += dS K_j */
        gemm(&dqo, nq, Dh);
    }
}

static float *bwd_scratch(int64_t Dh) { return scratch(2 * Dh * TB + 2 * TB * TB + 2 * TB); }

static void F_NAME(bwd)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                        const float *v, const float *o, const float *lse_fwd, int64_t b, int64_t S, int64_t H,
                        int64_t Hkv, int64_t Dh) {
    memset(dq, 0, (size_t)(b * S * H * Dh) * sizeof(float));
    memset(dk, 0, (size_t)(b * S * Hkv * Dh) * sizeof(float));
    memset(dv, 0, (size_t)(b * S * Hkv * Dh) * sizeof(float));
    float *ws = bwd_scratch(Dh);
    /* one head's recomputed lse, in the workspace the memory plan counts
     * (ir_op_attn.c, CM_WS_CPU_DSTATS) */
    float *stats = lse_fwd ? NULL : kern_scratch(CM_WS_CPU_DSTATS, 2 * S, "attention");
    int64_t rep = H / Hkv;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / rep, qoff = (bi * S * H + h) * Dh, koff = (bi * S * Hkv + g) * Dh;
            view vw = {q + qoff, k + koff, v + koff, H * Dh, Hkv * Dh, S,   (int)Dh, (float)(1.0 / sqrt((double)Dh)),
                       true,     NULL,     NULL,     NULL,   NULL,     NULL};
            const float *lse = lse_fwd ? lse_fwd + (bi * H + h) * S : stats;
            if (!lse_fwd) { /* the forward's statistics pass, without P V: the forward's bits */
                fwd_state fs = {NULL, stats, 0, 1, false};
                for (int64_t i0 = 0; i0 < S; i0 += TB) fwd_tile(&vw, &fs, i0, imin(TB, S - i0), ws);
            }
            grad_io gi = {dout + qoff, o + qoff, lse, NULL, 1, dq + qoff, dk + koff, dv + koff};
            for (int64_t i0 = 0; i0 < S; i0 += TB) bwd_tile(&vw, &gi, i0, imin(TB, S - i0), ws);
        }
}

/* ---- ring blocks and packed documents (kern_ring.c's entry points) ------------- */

static view ring_view_of(const float *q, const float *k, const float *v, int64_t bi, int64_t h, int64_t Sq, int64_t Sk,
                         int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos, const int64_t *kpos,
                         const int32_t *qdoc, const int32_t *kdoc, const kern_tile_range *kr) {
    int64_t g = h / (H / Hk), qoff = (bi * Sq * H + h) * Dh, koff = (bi * Sk * Hk + g) * Dh;
    return (view){q + qoff,
                  k + koff,
                  v + koff,
                  H * Dh,
                  Hk * Dh,
                  Sk,
                  (int)Dh,
                  (float)(1.0 / sqrt((double)Dh)),
                  false,
                  qpos,
                  kpos,
                  qdoc ? qdoc + bi * Sq : NULL,
                  kdoc ? kdoc + bi * Sk : NULL,
                  kr};
}

static void F_NAME(ring_fwd)(float *o, float *lse, const float *q, const float *k, const float *v, int64_t b,
                             int64_t Sq, int64_t Sk, int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos,
                             const int64_t *kpos, const int32_t *qdoc, const int32_t *kdoc) {
    float *ws = fwd_scratch(Dh);
    for (int64_t bi = 0; bi < b; bi++) {
        const kern_tile_range *kr = kern_tile_key_ranges(bi, Sk, kpos, kdoc);
        for (int64_t h = 0; h < H; h++) {
            view vw = ring_view_of(q, k, v, bi, h, Sq, Sk, H, Hk, Dh, qpos, kpos, qdoc, kdoc, kr);
            fwd_state fs = {o ? o + (bi * Sq * H + h) * Dh : NULL, lse + bi * Sq * H + h, H * Dh, H, true};
            for (int64_t i0 = 0; i0 < Sq; i0 += TB) fwd_tile(&vw, &fs, i0, imin(TB, Sq - i0), ws);
        }
    }
}

static void F_NAME(ring_bwd)(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                             const float *v, const float *lse, const float *D, int64_t b, int64_t Sq, int64_t Sk,
                             int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos, const int64_t *kpos,
                             const int32_t *qdoc, const int32_t *kdoc) {
    float *ws = bwd_scratch(Dh);
    int64_t rep = H / Hk;
    for (int64_t bi = 0; bi < b; bi++) {
        const kern_tile_range *kr = kern_tile_key_ranges(bi, Sk, kpos, kdoc);
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / rep, qoff = (bi * Sq * H + h) * Dh, koff = (bi * Sk * Hk + g) * Dh;
            int64_t loff = bi * Sq * H + h;
            view vw = ring_view_of(q, k, v, bi, h, Sq, Sk, H, Hk, Dh, qpos, kpos, qdoc, kdoc, kr);
            grad_io gi = {dout + qoff, NULL, lse + loff, D + loff, H, dq + qoff, dk + koff, dv + koff};
            for (int64_t i0 = 0; i0 < Sq; i0 += TB) bwd_tile(&vw, &gi, i0, imin(TB, Sq - i0), ws);
        }
    }
}
