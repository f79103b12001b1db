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
 * Optional document ids (the _doc entry points; kern_docattn.c uses them for
 * packed rows) add a second condition: key j is visible to query i only if
 * kdoc[j] == qdoc[i].  A tile pair is skipped when either condition rules out
 * every pair (key positions all after the query positions, or the ranges of
 * key and query documents disjoint), and needs no mask when both admit every
 * pair (one single document on both sides).  The ranges are the tile's
 * min/max, so the result is exact for any ids; rows of non-decreasing ids
 * (packed documents) are what make the disjoint ranges, and so the skipping,
 * common.  The plain entry points call the _doc ones with no ids: there is one
 * implementation.
 *
 * The backward is kern_attention.c's pass 2 against the FINAL lse of the
 * whole attention (given, not recomputed) and D = rowsum(dO o O)
 * (kern_ring_rowdot): P = exp(s - lse), dS = P (dP - D); dq, dk, dv are
 * accumulated (beta = 1), so a rank sums its contributions over the ring.
 *
 * The element-wise steps are kern_attention.c's (kern_attn_simd: one
 * instance per ISA, chosen at run time; BASP_SIMD caps it).  Where the fused
 * kernels run (kern_attention_fused), both entry points hand over to them
 * (kern_attn_fused.h's ring_fwd/ring_bwd: the same tiles, skipping and
 * state, with transposed score tiles and no BLAS calls); the tile extents
 * here are shared with them. */
#include "rt_host.h"

#include <cblas.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum {
    BQ = 64,        /* queries per tile */
    BK = KERN_TILE, /* keys per tile (64): smaller than kern_attention.c's 128 so
                        that the skipping follows the zig-zag chunks more closely */
    PADW = 16,      /* tile rows padded to the widest vector */
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
    return kern_grow(&buf, &cap, nfloats, "ring attention");
}

static void check_heads(int64_t H, int64_t Hk, int64_t Dh) {
    if (Hk <= 0 || H % Hk != 0 || Dh <= 0) {
        fprintf(stderr, "basp: ring attention: %lld q heads do not group over %lld kv heads (Dh %lld)\n", (long long)H,
                (long long)Hk, (long long)Dh);
        abort();
    }
}

static inline int imin(int64_t a, int64_t b) { return (int)(a < b ? a : b); }
static inline int padw(int n) { return (n + PADW - 1) / PADW * PADW; }

/* pos/doc: the tile's n entries; NULL: that extent is not needed (left 0). */
kern_tile_range kern_tile_range_of(const int64_t *pos, const int32_t *doc, int n) {
    kern_tile_range r = {0, 0, 0, 0};
    if (pos) {
        r.plo = r.phi = pos[0];
        for (int i = 1; i < n; i++) {
            if (pos[i] < r.plo) r.plo = pos[i];
            if (pos[i] > r.phi) r.phi = pos[i];
        }
    }
    if (doc) {
        r.dlo = r.dhi = doc[0];
        for (int i = 1; i < n; i++) {
            if (doc[i] < r.dlo) r.dlo = doc[i];
            if (doc[i] > r.dhi) r.dhi = doc[i];
        }
    }
    return r;
}

/* From the extents of the query tile q and the key tile k; by_pos / by_doc:
 * whether that condition applies. */
kern_tile_kind kern_tile_classify(const kern_tile_range *q, const kern_tile_range *k, bool by_pos, bool by_doc) {
    bool full = true;
    if (by_pos) {
        if (k->plo > q->phi) return KERN_TILE_SKIP;
        full = k->phi <= q->plo;
    }
    if (by_doc) {
        if (k->dhi < q->dlo || k->dlo > q->dhi) return KERN_TILE_SKIP; /* no key shares a query's document */
        full = full && q->dlo == q->dhi && k->dlo == k->dhi && q->dlo == k->dlo;
    }
    return full ? KERN_TILE_FULL : KERN_TILE_MASKED;
}

/* One (batch, head) pass: base pointers and row strides of the block. */
typedef struct ring_view {
    const float *q, *k, *v; /* first row of this head / its kv head */
    int64_t Sq, Sk, Dh;
    int ldq, ldk; /* row strides: H*Dh and Hk*Dh */
    int ldl;      /* row stride of lse and D: H */
    const int64_t *qpos, *kpos;
    const int32_t *qdoc, *kdoc; /* this batch row's document ids, or NULL */
    const kern_tile_range *kr;  /* the extents of the key tiles, kr[j0 / BK] */
    float scale;
} ring_view;

/* s[nq, w] = scale * Q[i0..] K[j0..]^T; masked entries (kpos > qpos, or
 * kdoc != qdoc) and the padding columns nk..w-1 set to -inf. */
static void tile_scores(const ring_view *rv, float *s, int64_t i0, int nq, int64_t j0, int nk, int w,
                        kern_tile_kind kind) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, (int)rv->Dh, rv->scale, rv->q + i0 * rv->ldq, rv->ldq,
                rv->k + j0 * rv->ldk, rv->ldk, 0.0f, s, w);
    for (int r = 0; r < nq; r++) {
        float *row = s + (int64_t)r * w;
        if (kind == KERN_TILE_MASKED && rv->kpos) {
            int64_t qp = rv->qpos[i0 + r];
            const int64_t *kp = rv->kpos + j0;
            for (int c = 0; c < nk; c++)
                if (kp[c] > qp) row[c] = -INFINITY;
        }
        if (kind == KERN_TILE_MASKED && rv->kdoc) {
            int32_t qd = rv->qdoc[i0 + r];
            const int32_t *kd = rv->kdoc + j0;
            for (int c = 0; c < nk; c++)
                if (kd[c] != qd) row[c] = -INFINITY;
        }
        for (int c = nk; c < w; c++) row[c] = -INFINITY;
    }
}

/* The extent of query tile i0..i0+nq-1, computed once per query tile. */
static kern_tile_range query_range(const ring_view *rv, int64_t i0, int nq) {
    return kern_tile_range_of(rv->kpos ? rv->qpos + i0 : NULL, rv->kdoc ? rv->qdoc + i0 : NULL, nq);
}

static kern_tile_kind tile_kind_of(const ring_view *rv, const kern_tile_range *qr, int64_t j0) {
    return kern_tile_classify(qr, &rv->kr[j0 / BK], rv->kpos != NULL, rv->kdoc != NULL);
}

/* kr [ceil(Sk / BK)]: the key tiles' extents for batch row bi (kdoc row bi),
 * once per row rather than once per tile pair: with many short documents
 * most pairs are skipped, and classifying them would otherwise cost
 * O(BQ + BK) each. */
const kern_tile_range *kern_tile_key_ranges(int64_t bi, int64_t Sk, const int64_t *kpos, const int32_t *kdoc) {
    static kern_tile_range *buf;
    static int64_t cap;
    int64_t n = (Sk + BK - 1) / BK;
    if (n > cap) {
        free(buf);
        buf = malloc((size_t)n * sizeof *buf);
        if (!buf) {
            fprintf(stderr, "basp: ring attention: out of memory (%lld tile ranges)\n", (long long)n);
            abort();
        }
        cap = n;
    }
    for (int64_t t = 0; t < n; t++) {
        int64_t j0 = t * BK;
        buf[t] = kern_tile_range_of(kpos ? kpos + j0 : NULL, kdoc ? kdoc + bi * Sk + j0 : NULL, imin(BK, Sk - j0));
    }
    return buf;
}

/* The view of batch row bi, head h; kr from key_ranges for row bi. */
static ring_view view_of(const float *q, const float *k, const float *v, int64_t bi, int64_t h, int64_t Sq, int64_t Sk,
                         int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos, const int64_t *kpos,
                         const int32_t *qdoc, const int32_t *kdoc, const kern_tile_range *kr) {
    int64_t g = h / (H / Hk), qoff = (bi * Sq * H + h) * Dh, koff = (bi * Sk * Hk + g) * Dh;
    return (ring_view){q + qoff,
                       k + koff,
                       v + koff,
                       Sq,
                       Sk,
                       Dh,
                       (int)(H * Dh),
                       (int)(Hk * Dh),
                       (int)H,
                       qpos,
                       kpos,
                       qdoc ? qdoc + bi * Sq : NULL,
                       kdoc ? kdoc + bi * Sk : NULL,
                       kr,
                       (float)(1.0 / sqrt((double)Dh))};
}

/* Both document arrays or neither: one alone would be a caller's mistake
 * that silently drops the condition. */
static void check_docs(const int32_t *qdoc, const int32_t *kdoc) {
    if (!qdoc != !kdoc) {
        fprintf(stderr, "basp: ring attention: document ids given for %s only\n", qdoc ? "queries" : "keys");
        abort();
    }
}

/* ---- forward ----------------------------------------------------------------------- */

/* One query tile: loads the running (o, lse) rows as the softmax state, folds
 * in the visible key tiles, writes the state back.  o, lse: this head's rows;
 * o NULL: the statistics only (no acc, no P V product). */
static void fwd_tile(const ring_view *rv, float *o, float *lse, int64_t i0, int nq, float *s, float *acc, float *m,
                     float *l, float *alpha) {
    int64_t Dh = rv->Dh;
    for (int r = 0; r < nq; r++) {
        float L = lse[(i0 + r) * rv->ldl];
        bool seen = L != -INFINITY;
        m[r] = seen ? L : M_EMPTY, l[r] = seen ? 1.0f : 0.0f;
        if (!o) continue;
        const float *orow = o + (i0 + r) * rv->ldq;
        for (int64_t d = 0; d < Dh; d++) acc[r * Dh + d] = seen ? orow[d] : 0.0f;
    }
    kern_tile_range qr = query_range(rv, i0, nq);
    for (int64_t j0 = 0; j0 < rv->Sk; j0 += BK) {
        int nk = imin(BK, rv->Sk - j0), w = padw(nk);
        kern_tile_kind kind = tile_kind_of(rv, &qr, j0);
        if (kind == KERN_TILE_SKIP) continue;
        tile_scores(rv, s, i0, nq, j0, nk, w, kind);
        kern_attn_simd()->softmax(s, nq, w, m, l, alpha);
        if (!o) continue;
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
        lse[(i0 + r) * rv->ldl] = m[r] + logf(l[r]);
        if (!o) continue;
        float inv = 1.0f / l[r];
        float *orow = o + (i0 + r) * rv->ldq;
        for (int64_t d = 0; d < Dh; d++) orow[d] = acc[r * Dh + d] * inv;
    }
}

void kern_ring_block_fwd_doc(float *o, float *lse, const float *q, const float *k, const float *v, int64_t b,
                             int64_t Sq, int64_t Sk, int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos,
                             const int64_t *kpos, const int32_t *qdoc, const int32_t *kdoc) {
    check_heads(H, Hk, Dh);
    check_docs(qdoc, kdoc);
    if (Sq <= 0 || Sk <= 0) return;
    const kern_attn_fused_ops *fused = kern_attention_fused(Dh);
    if (fused) {
        fused->ring_fwd(o, lse, q, k, v, b, Sq, Sk, H, Hk, Dh, qpos, kpos, qdoc, kdoc);
        return;
    }
    float *s = scratch_get((int64_t)BQ * BK + (int64_t)BQ * Dh + 3 * BQ);
    float *acc = s + BQ * BK, *m = acc + BQ * Dh, *l = m + BQ, *alpha = l + BQ;
    for (int64_t bi = 0; bi < b; bi++) {
        const kern_tile_range *kr = kern_tile_key_ranges(bi, Sk, kpos, kdoc);
        for (int64_t h = 0; h < H; h++) {
            ring_view rv = view_of(q, k, v, bi, h, Sq, Sk, H, Hk, Dh, qpos, kpos, qdoc, kdoc, kr);
            float *ob = o ? o + (bi * Sq * H + h) * Dh : NULL, *lb = lse + bi * Sq * H + h;
            for (int64_t i0 = 0; i0 < Sq; i0 += BQ) fwd_tile(&rv, ob, lb, i0, imin(BQ, Sq - i0), s, acc, m, l, alpha);
        }
    }
}

void kern_ring_block_fwd(float *o, float *lse, const float *q, const float *k, const float *v, int64_t b, int64_t Sq,
                         int64_t Sk, int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos, const int64_t *kpos) {
    kern_ring_block_fwd_doc(o, lse, q, k, v, b, Sq, Sk, H, Hk, Dh, qpos, kpos, NULL, NULL);
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
    kern_tile_range qr = query_range(rv, i0, nq);
    for (int64_t j0 = 0; j0 < rv->Sk; j0 += BK) {
        int nk = imin(BK, rv->Sk - j0), w = padw(nk);
        kern_tile_kind kind = tile_kind_of(rv, &qr, j0);
        if (kind == KERN_TILE_SKIP) continue;
        const float *kj = rv->k + j0 * ldk, *vj = rv->v + j0 * ldk;
        tile_scores(rv, s, i0, nq, j0, nk, w, kind);
        /* dp[nq, nk] = dO V^T; its padding columns are never read back */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, nq, nk, Dh, 1.0f, doi, ldq, vj, ldk, 0.0f, dp, w);
        kern_attn_simd()->grad(s, dp, nq, w, lt, dt, rv->scale); /* s <- P, dp <- scale * dS */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, nq, Dh, nk, 1.0f, dp, w, kj, ldk, 1.0f, dqi, ldq);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, Dh, nq, 1.0f, dp, w, qi, ldq, 1.0f, rg->dk + j0 * ldk,
                    ldk);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, nk, Dh, nq, 1.0f, s, w, doi, ldq, 1.0f, rg->dv + j0 * ldk,
                    ldk);
    }
}

void kern_ring_block_bwd_doc(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                             const float *v, const float *lse, const float *D, int64_t b, int64_t Sq, int64_t Sk,
                             int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos, const int64_t *kpos,
                             const int32_t *qdoc, const int32_t *kdoc) {
    check_heads(H, Hk, Dh);
    check_docs(qdoc, kdoc);
    if (Sq <= 0 || Sk <= 0) return;
    const kern_attn_fused_ops *fused = kern_attention_fused(Dh);
    if (fused) {
        fused->ring_bwd(dq, dk, dv, dout, q, k, v, lse, D, b, Sq, Sk, H, Hk, Dh, qpos, kpos, qdoc, kdoc);
        return;
    }
    float *s = scratch_get(2 * (int64_t)BQ * BK + 2 * BQ);
    float *dp = s + BQ * BK, *lt = dp + BQ * BK, *dt = lt + BQ;
    int64_t rep = H / Hk;
    for (int64_t bi = 0; bi < b; bi++) {
        const kern_tile_range *kr = kern_tile_key_ranges(bi, Sk, kpos, kdoc);
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / rep, qoff = (bi * Sq * H + h) * Dh, koff = (bi * Sk * Hk + g) * Dh;
            int64_t loff = bi * Sq * H + h;
            ring_view rv = view_of(q, k, v, bi, h, Sq, Sk, H, Hk, Dh, qpos, kpos, qdoc, kdoc, kr);
            ring_grad rg = {dout + qoff, lse + loff, D + loff, dq + qoff, dk + koff, dv + koff};
            for (int64_t i0 = 0; i0 < Sq; i0 += BQ) bwd_tile(&rv, &rg, i0, imin(BQ, Sq - i0), s, dp, lt, dt);
        }
    }
}

void kern_ring_block_bwd(float *dq, float *dk, float *dv, const float *dout, const float *q, const float *k,
                         const float *v, const float *lse, const float *D, int64_t b, int64_t Sq, int64_t Sk, int64_t H,
                         int64_t Hk, int64_t Dh, const int64_t *qpos, const int64_t *kpos) {
    kern_ring_block_bwd_doc(dq, dk, dv, dout, q, k, v, lse, D, b, Sq, Sk, H, Hk, Dh, qpos, kpos, NULL, NULL);
}
