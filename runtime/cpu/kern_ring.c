/* kern_ring.c — the per-block kernels of ring attention, forward and backward.
 *
 * Ring attention cuts the sequence over R ranks; a rank keeps its query block
 * and meets every key/value block in turn.  kern_ring_block_fwd merges one
 * key block into a running result (o normalised, lse the row log-sum-exp):
 * the running pair is loaded as the online-softmax state m = lse, l = 1,
 * acc = o (the same distribution: o = acc / l, lse = m + log l), the block's
 * tiles are folded in exactly as kern_attention.c folds its key tiles, and
 * the state is written back.  So the merge is the online softmax itself,
 * with no separate log-add-exp step to get wrong.
 *
 * The tokens of a block are in zig-zag order (kern_zigzag_pos), so the
 * causal mask compares the explicit original positions qpos/kpos, not
 * indices.  A tile pair (BQ queries x BK keys) whose smallest key position
 * exceeds its largest query position is skipped; one whose largest key
 * position is at most its smallest query position needs no mask.  With the
 * zig-zag order every block holds two contiguous runs of positions, so the
 * skipped pairs are about the masked half of the work.
 *
 * The backward is kern_attention.c's pass 2 against the FINAL lse of the
 * whole attention (given, not recomputed) and D = rowsum(dO o O)
 * (kern_ring_rowdot): P = exp(s - lse), dS = P (dP - D); dq, dk, dv are
 * accumulated (beta = 1), so a rank sums its contributions over the ring.
 *
 * The element-wise steps are kern_attention.c's (kern_attn_simd: one
 * instance per ISA, chosen at run time; BASP_SIMD caps it). */
#include "kernels.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    BQ = 64, /* queries per tile */
    BK = 64, /* keys per tile: smaller than kern_attention.c's 128 so that
                the skipping follows the zig-zag chunks more closely */
    PADW = 16, /* tile rows padded to the widest vector */
};

/* A finite stand-in for the max of a row that has seen nothing: the SIMD
 * softmax computes exp(s - m), and -inf - -inf would be NaN for a row whose
 * keys are all masked.  exp(-1e30 - s) flushes to exactly 0 once a key is
 * visible (kern_attention_simd.h clamps below -87). */
#define M_EMPTY (-1e30f)


/* ---- helpers ------------------------------------------------------------------- */

/* Grow-only scratch (one thread per rank, like the other kernels). */
static float *scratch_get(int64_t nfloats) {
    static float *buf;
    static int64_t cap;
    if (nfloats > cap) {
        free(buf);
        size_t bytes = ((size_t)nfloats * sizeof(float) + 63) & ~(size_t)63;
        buf = aligned_alloc(64, bytes);
        if (!buf) {
            fprintf(stderr, "basp: ring attention: out of memory (%zu bytes of scratch)\n", bytes);
            abort();
        }
        cap = nfloats;
    }
    return buf;
}

static void check_heads(int64_t H, int64_t Hk, int64_t Dh) {
    if (Hk <= 0 || H % Hk != 0 || Dh <= 0) {
        fprintf(stderr, "basp: ring attention: %lld q heads do not group over %lld kv heads (Dh %lld)\n",
                (long long)H, (long long)Hk, (long long)Dh);
        abort();
    }
}

static inline int imin(int64_t a, int64_t b) { return (int)(a < b ? a : b); }
static inline int padw(int n) { return (n + PADW - 1) / PADW * PADW; }

/* Smallest and largest of pos[0..n). */
static void pos_range(const int64_t *pos, int n, int64_t *lo, int64_t *hi) {
    *lo = *hi = pos[0];
    for (int i = 1; i < n; i++) {
        if (pos[i] < *lo) *lo = pos[i];
        if (pos[i] > *hi) *hi = pos[i];
    }
}

/* How a tile pair meets the mask. */
typedef enum { TILE_SKIP, TILE_FULL, TILE_MASKED } tile_kind;

static tile_kind tile_classify(const int64_t *qpos, int nq, const int64_t *kpos, int nk) {
    if (!kpos) return TILE_FULL;
    int64_t qlo, qhi, klo, khi;
    pos_range(qpos, nq, &qlo, &qhi);
    pos_range(kpos, nk, &klo, &khi);
    if (klo > qhi) return TILE_SKIP;
    return khi <= qlo ? TILE_FULL : TILE_MASKED;
}

/* One (batch, head) pass: base pointers and row strides of the block. */
typedef struct ring_view {
    const float *q, *k, *v; /* first row of this head / its kv head */
    int64_t Sq, Sk, Dh;
    int ldq, ldk;           /* row strides: H*Dh and Hk*Dh */
    int ldl;                /* row stride of lse and D: H */
    const int64_t *qpos, *kpos;
    float scale;
} ring_view;

/* s[nq, w] = scale * Q[i0..] K[j0..]^T; masked entries (kpos > qpos) and the
 * padding columns nk..w-1 set to -inf. */
static void tile_scores(const ring_view *rv, float *s, int64_t i0, int nq, int64_t j0, int nk, int w,
                        tile_kind kind) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, (int)rv->Dh, rv->scale, rv->q + i0 * rv->ldq,
                rv->ldq, rv->k + j0 * rv->ldk, rv->ldk, 0.0f, s, w);
    for (int r = 0; r < nq; r++) {
        float *row = s + (int64_t)r * w;
        if (kind == TILE_MASKED) {
            int64_t qp = rv->qpos[i0 + r];
            const int64_t *kp = rv->kpos + j0;
            for (int c = 0; c < nk; c++)
                if (kp[c] > qp) row[c] = -INFINITY;
        }
        for (int c = nk; c < w; c++) row[c] = -INFINITY;
    }
}

static tile_kind tile_kind_of(const ring_view *rv, int64_t i0, int nq, int64_t j0, int nk) {
    return rv->kpos ? tile_classify(rv->qpos + i0, nq, rv->kpos + j0, nk) : TILE_FULL;
}

/* ---- forward ----------------------------------------------------------------------- */

/* One query tile: loads the running (o, lse) rows as the softmax state, folds
 * in the visible key tiles, writes the state back.  o, lse: this head's rows. */
static void fwd_tile(const ring_view *rv, float *o, float *lse, int64_t i0, int nq, float *s, float *acc, float *m,
                     float *l, float *alpha) {
    int64_t Dh = rv->Dh;
    for (int r = 0; r < nq; r++) {
        float L = lse[(i0 + r) * rv->ldl];
        const float *orow = o + (i0 + r) * rv->ldq;
        bool seen = L != -INFINITY;
        m[r] = seen ? L : M_EMPTY, l[r] = seen ? 1.0f : 0.0f;
        for (int64_t d = 0; d < Dh; d++) acc[r * Dh + d] = seen ? orow[d] : 0.0f;
    }
    for (int64_t j0 = 0; j0 < rv->Sk; j0 += BK) {
        int nk = imin(BK, rv->Sk - j0), w = padw(nk);
        tile_kind kind = tile_kind_of(rv, i0, nq, j0, nk);
        if (kind == TILE_SKIP) continue;
        tile_scores(rv, s, i0, nq, j0, nk, w, kind);
        kern_attn_simd()->softmax(s, nq, w, m, l, alpha);
        for (int r = 0; r < nq; r++)
            if (alpha[r] != 1.0f)
                for (int64_t d = 0; d < Dh; d++) acc[r * Dh + d] *= alpha[r];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, (int)Dh, nk, 1.0f, s, w, rv->v + j0 * rv->ldk,
                    rv->ldk, 1.0f, acc, (int)Dh);
    }
    /* l == 0: nothing visible so far, the row stays (0, -inf).  A row that
     * saw nothing in this block keeps m = lse, l = 1 and acc = o exactly
     * (alpha is exactly 1), so it is written back unchanged. */
    for (int r = 0; r < nq; r++) {
        if (l[r] == 0.0f) continue;
        float inv = 1.0f / l[r];
        float *orow = o + (i0 + r) * rv->ldq;
        for (int64_t d = 0; d < Dh; d++) orow[d] = acc[r * Dh + d] * inv;
        lse[(i0 + r) * rv->ldl] = m[r] + logf(l[r]);
    }
}

void kern_ring_block_fwd(float *o, float *lse, const float *q, const float *k, const float *v, int64_t b,
                         int64_t Sq, int64_t Sk, int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos,
                         const int64_t *kpos) {
    check_heads(H, Hk, Dh);
    if (Sq <= 0 || Sk <= 0) return;
    float *s = scratch_get((int64_t)BQ * BK + (int64_t)BQ * Dh + 3 * BQ);
    float *acc = s + BQ * BK, *m = acc + BQ * Dh, *l = m + BQ, *alpha = l + BQ;
    int64_t rep = H / Hk;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / rep, qoff = (bi * Sq * H + h) * Dh, koff = (bi * Sk * Hk + g) * Dh;
            ring_view rv = {q + qoff, k + koff, v + koff, Sq, Sk, Dh, (int)(H * Dh), (int)(Hk * Dh), (int)H,
                            qpos, kpos, (float)(1.0 / sqrt((double)Dh))};
            float *ob = o + qoff, *lb = lse + bi * Sq * H + h;
            for (int64_t i0 = 0; i0 < Sq; i0 += BQ) fwd_tile(&rv, ob, lb, i0, imin(BQ, Sq - i0), s, acc, m, l, alpha);
        }
}

void kern_ring_rowdot(float *D, const float *dout, const float *o, int64_t b, int64_t S, int64_t H, int64_t Dh) {
    for (int64_t r = 0; r < b * S * H; r++) {
        const float *dr = dout + r * Dh, *orow = o + r * Dh;
        double acc = 0.0; /* as kern_attention_bwd: the row sum in double */
        for (int64_t d = 0; d < Dh; d++) acc += (double)dr[d] * orow[d];
        D[r] = (float)acc;
    }
}

/* ---- backward ------------------------------------------------------------------------ */

typedef struct ring_grad {
    const float *dout, *lse, *D; /* dout [.., ldq]; lse, D [.., ldl] of this head */
    float *dq;                   /* [.., ldq] */
    float *dk, *dv;              /* [.., ldk] rows of the kv head */
} ring_grad;

/* One query tile against every visible key tile of the block. */
static void bwd_tile(const ring_view *rv, const ring_grad *rg, int64_t i0, int nq, float *s, float *dp, float *lt,
                     float *dt) {
    int Dh = (int)rv->Dh, ldq = rv->ldq, ldk = rv->ldk;
    for (int r = 0; r < nq; r++) {
        float L = rg->lse[(i0 + r) * rv->ldl];
        /* A row that saw no key at all (lse -inf, o 0) gets no gradient:
         * exp(s - inf) is 0 where exp(-inf + inf) would be NaN. */
        lt[r] = L == -INFINITY ? INFINITY : L;
        dt[r] = rg->D[(i0 + r) * rv->ldl];
    }
    const float *qi = rv->q + i0 * ldq, *doi = rg->dout + i0 * ldq;
    float *dqi = rg->dq + i0 * ldq;
    for (int64_t j0 = 0; j0 < rv->Sk; j0 += BK) {
        int nk = imin(BK, rv->Sk - j0), w = padw(nk);
        tile_kind kind = tile_kind_of(rv, i0, nq, j0, nk);
        if (kind == TILE_SKIP) continue;
        const float *kj = rv->k + j0 * ldk, *vj = rv->v + j0 * ldk;
        tile_scores(rv, s, i0, nq, j0, nk, w, kind);
        /* dp[nq, nk] = dO V^T; its padding columns are never read back */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, Dh, 1.0f, doi, ldq, vj, ldk, 0.0f, dp, w);
        kern_attn_simd()->grad(s, dp, nq, w, lt, dt, rv->scale); /* s <- P, dp <- scale * dS */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, Dh, nk, 1.0f, dp, w, kj, ldk, 1.0f, dqi, ldq);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, Dh, nq, 1.0f, dp, w, qi, ldq, 1.0f,
                    rg->dk + j0 * ldk, ldk);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, Dh, nq, 1.0f, s, w, doi, ldq, 1.0f,
                    rg->dv + j0 * ldk, ldk);
    }
}

void kern_ring_block_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                         const float *v, const float *lse, const float *D, int64_t b, int64_t Sq, int64_t Sk,
                         int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos, const int64_t *kpos) {
    check_heads(H, Hk, Dh);
    if (Sq <= 0 || Sk <= 0) return;
    float *s = scratch_get(2 * (int64_t)BQ * BK + 2 * BQ);
    float *dp = s + BQ * BK, *lt = dp + BQ * BK, *dt = lt + BQ;
    int64_t rep = H / Hk;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / rep, qoff = (bi * Sq * H + h) * Dh, koff = (bi * Sk * Hk + g) * Dh;
            int64_t loff = bi * Sq * H + h;
            ring_view rv = {q + qoff, k + koff, v + koff, Sq, Sk, Dh, (int)(H * Dh), (int)(Hk * Dh), (int)H,
                            qpos, kpos, (float)(1.0 / sqrt((double)Dh))};
            ring_grad rg = {dout + qoff, lse + loff, D + loff, dq + qoff, dk + koff, dv + koff};
            for (int64_t i0 = 0; i0 < Sq; i0 += BQ) bwd_tile(&rv, &rg, i0, imin(BQ, Sq - i0), s, dp, lt, dt);
        }
}
