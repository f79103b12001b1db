/* test_ring.c — the ring-attention block kernels and RoPE with explicit
 * positions (runtime/host/rt_host.h, kern_ring.c and kern_basic.c).
 *
 * A ring is simulated in one process: the sequence is permuted into the
 * zig-zag order (kern_zigzag_pos), cut into R blocks, and every query block
 * meets every key block in ring order, starting at its own (the order in
 * which a rank receives them).  Checked:
 *   (a) blockwise == dense: the ring's o, dq, dk, dv, un-permuted, against
 *       kern_attention_fwd/bwd on the original order, max |diff| <= 1e-5
 *       (both are fp32 and compute the same sums; they differ only by
 *       reassociation: other tile boundaries, the merge order of the
 *       blocks, exp(m_old - m_new) rescalings.  Outputs are O(1), so that is
 *       a few ulps of fp32 per term); the final lse against a double
 *       reference, 1e-5;
 *   (b) central finite differences of L = sum(r o o) + sum(r_l o lse)
 *       through the whole chain of kern_ring_block_fwd calls against the
 *       ring backward (dout = r, D = rowdot(r, o) - r_l, which is exactly the
 *       lse term's gradient: dS = P (dP - D) = P (dP + r_l - rowdot));
 *       |analytic - numeric| <= 1e-2 relative + 1e-3 (the kernel tests'
 *       tolerance) with a step of 1e-2: a key perturbs the lse of every row
 *       that sees it, whose fp32 roundings (~2e-7 each) a 1e-3 step turns
 *       into errors up to 7.6e-4, too near the tolerance; the truncation
 *       error of a 1e-2 step is ~1e-5 here;
 *   (c) negative controls: the mask comparison flipped to kpos < qpos
 *       (every kpos + 1) and a merge that drops the running lse must both
 *       fail (a);
 *   (d) kern_rope_fwd_pos/bwd_pos with pos = pos0 + s equal kern_rope_fwd/bwd
 *       bit for bit; with the zig-zag positions they equal the permuted
 *       result of kern_rope_fwd on the original order, bit for bit.
 * Larger shapes (S = 512) cover several 64 x 64 tiles per block, where whole
 * tiles are skipped or need no mask. */
#include "rt_host.h"

#define KTEST_SEED 0x2545F4914F6CDD1Dull
#include "ktest.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double RTOL = 1e-2, ATOL = 1e-3, FD_EPS = 1e-2, EXACT_TOL = 1e-5;
static int g_failures;

static void report(const char *name, double err, double tol) {
    bool ok = err <= tol;
    printf("  %-46s max|diff|=%.3e  tol %.0e  %s\n", name, err, tol, ok ? "ok" : "FAIL");
    if (!ok) g_failures++;
}

/* ---- the simulated ring ----------------------------------------------------------- */

/* One problem: dense tensors in the original order, the ring's in zig-zag
 * order, cut into R blocks of n = S/R rows ([b, n, heads, Dh] each). */
typedef struct ring {
    int64_t b, S, H, Hk, Dh, R, n;
    float *q, *k, *v;       /* original order */
    int64_t *perm;          /* ring index -> original position */
    float **qb, **kb, **vb; /* per block, zig-zag order */
    float **ob, **lb;       /* running (o, lse) per block */
    bool lt_mask;           /* negative control: the mask kpos < qpos */
    bool drop_lse;          /* negative control: forget the running lse */
} ring;

/* dst [b, n, heads, Dh] = rows perm[r*n ..] of src [b, S, heads, Dh]. */
static void gather(float *dst, const float *src, const ring *g, int64_t heads, int64_t r) {
    int64_t row = heads * g->Dh;
    for (int64_t bi = 0; bi < g->b; bi++)
        for (int64_t i = 0; i < g->n; i++)
            memcpy(dst + (bi * g->n + i) * row, src + (bi * g->S + g->perm[r * g->n + i]) * row,
                   (size_t)row * sizeof(float));
}
/* The inverse: dst [b, S, heads, Dh] rows perm[r*n ..] = src [b, n, ...]. */
static void scatter(float *dst, const float *src, const ring *g, int64_t heads, int64_t r) {
    int64_t row = heads * g->Dh;
    for (int64_t bi = 0; bi < g->b; bi++)
        for (int64_t i = 0; i < g->n; i++)
            memcpy(dst + (bi * g->S + g->perm[r * g->n + i]) * row, src + (bi * g->n + i) * row,
                   (size_t)row * sizeof(float));
}

static void ring_init(ring *g, int64_t b, int64_t S, int64_t H, int64_t Hk, int64_t Dh, int64_t R) {
    *g = (ring){b, S, H, Hk, Dh, R, S / R, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, false, false};
    g->q = frand(b * S * H * Dh, -1, 1), g->k = frand(b * S * Hk * Dh, -1, 1), g->v = frand(b * S * Hk * Dh, -1, 1);
    g->perm = malloc((size_t)S * sizeof(int64_t));
    for (int64_t i = 0; i < S; i++) g->perm[i] = kern_zigzag_pos(i, S, R);
    float ***arrs[5] = {&g->qb, &g->kb, &g->vb, &g->ob, &g->lb};
    for (int a = 0; a < 5; a++) *arrs[a] = calloc((size_t)R, sizeof(float *));
    for (int64_t r = 0; r < R; r++) {
        g->qb[r] = fzero(b * g->n * H * Dh), g->kb[r] = fzero(b * g->n * Hk * Dh);
        g->vb[r] = fzero(b * g->n * Hk * Dh), g->ob[r] = fzero(b * g->n * H * Dh);
        g->lb[r] = fzero(b * g->n * H);
    }
}

static void ring_free(ring *g) {
    for (int64_t r = 0; r < g->R; r++) free(g->qb[r]), free(g->kb[r]), free(g->vb[r]), free(g->ob[r]), free(g->lb[r]);
    free(g->qb), free(g->kb), free(g->vb), free(g->ob), free(g->lb);
    free(g->q), free(g->k), free(g->v), free(g->perm);
}

/* Key positions of block r as the kernel sees them (+1 under lt_mask:
 * kpos + 1 <= qpos is the flipped comparison kpos < qpos). */
static const int64_t *kpos_of(const ring *g, int64_t r, int64_t *tmp) {
    if (!g->lt_mask) return g->perm + r * g->n;
    for (int64_t i = 0; i < g->n; i++) tmp[i] = g->perm[r * g->n + i] + 1;
    return tmp;
}

/* The ring forward from q, k, v (original order) to (ob, lb) per block. */
static void ring_fwd(ring *g) {
    int64_t nq = g->b * g->n * g->H * g->Dh, nl = g->b * g->n * g->H;
    int64_t *tmp = malloc((size_t)g->n * sizeof(int64_t));
    for (int64_t r = 0; r < g->R; r++) {
        gather(g->qb[r], g->q, g, g->H, r), gather(g->kb[r], g->k, g, g->Hk, r), gather(g->vb[r], g->v, g, g->Hk, r);
    }
    for (int64_t r = 0; r < g->R; r++) {
        memset(g->ob[r], 0, (size_t)nq * sizeof(float));
        for (int64_t i = 0; i < nl; i++) g->lb[r][i] = -INFINITY;
        for (int64_t t = 0; t < g->R; t++) {
            int64_t src = (r - t + g->R) % g->R; /* own block first, then the left neighbour's, ... */
            if (g->drop_lse && t > 0)
                for (int64_t i = 0; i < nl; i++) g->lb[r][i] = -INFINITY;
            kern_ring_block_fwd(g->ob[r], g->lb[r], g->qb[r], g->kb[src], g->vb[src], g->b, g->n, g->n, g->H, g->Hk,
                                g->Dh, g->perm + r * g->n, kpos_of(g, src, tmp));
        }
    }
    free(tmp);
}

/* The ring backward: dq, dk, dv (original order, overwritten) from dout
 * (original order), with D = rowdot(dout, o) - rl (rl [b,S,H] original
 * order, the lse term's weights; NULL: none). */
static void ring_bwd(ring *g, float *dq, float *dk, float *dv, const float *dout, const float *rl) {
    int64_t nq = g->b * g->n * g->H * g->Dh, nk = g->b * g->n * g->Hk * g->Dh, nl = g->b * g->n * g->H;
    float **dqb = calloc((size_t)g->R, sizeof(float *)), **dkb = calloc((size_t)g->R, sizeof(float *));
    float **dvb = calloc((size_t)g->R, sizeof(float *)), **dob = calloc((size_t)g->R, sizeof(float *));
    float **Db = calloc((size_t)g->R, sizeof(float *));
    ring gl = *g; /* lse and D gather as a [b, S, H, 1] tensor */
    gl.Dh = 1;
    for (int64_t r = 0; r < g->R; r++) {
        dqb[r] = fzero(nq), dkb[r] = fzero(nk), dvb[r] = fzero(nk), dob[r] = fzero(nq), Db[r] = fzero(nl);
        gather(dob[r], dout, g, g->H, r);
        kern_ring_rowdot(Db[r], dob[r], g->ob[r], g->b, g->n, g->H, g->Dh);
        if (rl) {
            float *rlb = fzero(nl);
            gather(rlb, rl, &gl, g->H, r);
            for (int64_t i = 0; i < nl; i++) Db[r][i] -= rlb[i];
            free(rlb);
        }
    }
    for (int64_t r = 0; r < g->R; r++)
        for (int64_t t = 0; t < g->R; t++) {
            int64_t src = (r - t + g->R) % g->R;
            kern_ring_block_bwd(dqb[r], dkb[src], dvb[src], dob[r], g->qb[r], g->kb[src], g->vb[src], g->lb[r], Db[r],
                                g->b, g->n, g->n, g->H, g->Hk, g->Dh, g->perm + r * g->n, g->perm + src * g->n);
        }
    for (int64_t r = 0; r < g->R; r++) {
        scatter(dq, dqb[r], g, g->H, r), scatter(dk, dkb[r], g, g->Hk, r), scatter(dv, dvb[r], g, g->Hk, r);
        free(dqb[r]), free(dkb[r]), free(dvb[r]), free(dob[r]), free(Db[r]);
    }
    free(dqb), free(dkb), free(dvb), free(dob), free(Db);
}

/* Row log-sum-exp of the causal scores in double: lse [b, S, H], original order. */
static void lse_reference(double *lse, const ring *g) {
    int64_t S = g->S, H = g->H, Dh = g->Dh, rep = H / g->Hk;
    double sc = 1.0 / sqrt((double)Dh);
    for (int64_t bi = 0; bi < g->b; bi++)
        for (int64_t i = 0; i < S; i++)
            for (int64_t h = 0; h < H; h++) {
                const float *qi = g->q + ((bi * S + i) * H + h) * Dh;
                double mx = -INFINITY, sum = 0, *s = malloc((size_t)(i + 1) * sizeof(double));
                for (int64_t j = 0; j <= i; j++) {
                    const float *kj = g->k + ((bi * S + j) * g->Hk + h / rep) * Dh;
                    double dot = 0;
                    for (int64_t d = 0; d < Dh; d++) dot += (double)qi[d] * kj[d];
                    s[j] = dot * sc, mx = fmax(mx, s[j]);
                }
                for (int64_t j = 0; j <= i; j++) sum += exp(s[j] - mx);
                lse[(bi * S + i) * H + h] = mx + log(sum);
                free(s);
            }
}

/* ---- (a) blockwise == dense ------------------------------------------------------------ */

/* Max |ring - dense| over o and lse (forward) or dq, dk, dv (backward). */
typedef struct ring_err {
    double o, lse, dq, dk, dv;
} ring_err;

static ring_err ring_vs_dense(ring *g, bool backward) {
    int64_t nq = g->b * g->S * g->H * g->Dh, nk = g->b * g->S * g->Hk * g->Dh, nl = g->b * g->S * g->H;
    float *o = fzero(nq), *ro = fzero(nq), *rlse = fzero(nl);
    double *lse = malloc((size_t)nl * sizeof(double));
    ring_err e = {0, 0, 0, 0, 0};
    kern_attention_fwd(o, g->q, g->k, g->v, g->b, g->S, g->H, g->Hk, g->Dh);
    ring_fwd(g);
    ring gl = *g;
    gl.Dh = 1;
    for (int64_t r = 0; r < g->R; r++) scatter(ro, g->ob[r], g, g->H, r), scatter(rlse, g->lb[r], &gl, g->H, r);
    e.o = max_abs_diff(ro, o, nq);
    lse_reference(lse, g);
    for (int64_t i = 0; i < nl; i++) {
        double d = fabs(rlse[i] - lse[i]);
        if (!(d <= e.lse)) e.lse = d;
    }
    if (backward) {
        float *dout = frand(nq, -1, 1), *dq = fzero(nq), *dk = fzero(nk), *dv = fzero(nk);
        float *rq = fzero(nq), *rk = fzero(nk), *rv = fzero(nk);
        kern_attention_bwd(dq, dk, dv, dout, g->q, g->k, g->v, o, g->b, g->S, g->H, g->Hk, g->Dh);
        ring_bwd(g, rq, rk, rv, dout, NULL);
        e.dq = max_abs_diff(rq, dq, nq), e.dk = max_abs_diff(rk, dk, nk), e.dv = max_abs_diff(rv, dv, nk);
        free(dout), free(dq), free(dk), free(dv), free(rq), free(rk), free(rv);
    }
    free(o), free(ro), free(rlse), free(lse);
    return e;
}

static void test_dense_case(int64_t b, int64_t S, int64_t H, int64_t Hk, int64_t Dh, int64_t R) {
    ring g;
    ring_init(&g, b, S, H, Hk, Dh, R);
    ring_err e = ring_vs_dense(&g, true);
    char name[96];
    const char *what[5] = {"o", "lse (vs double)", "dq", "dk", "dv"};
    double errs[5] = {e.o, e.lse, e.dq, e.dk, e.dv};
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "S=%lld H=%lld/%lld Dh=%lld R=%lld %s", (long long)S, (long long)H, (long long)Hk,
                 (long long)Dh, (long long)R, what[i]);
        report(name, errs[i], EXACT_TOL);
    }
    ring_free(&g);
}

/* ---- (b) finite differences ------------------------------------------------------------- */

typedef struct fd_ctx {
    ring *g;
    const float *r, *rl; /* weights of o and lse, original order */
} fd_ctx;

/* L = sum r o o + sum rl o lse over the ring's result, in double. */
static double fd_loss(const fd_ctx *c) {
    ring *g = c->g;
    ring gl = *g;
    gl.Dh = 1;
    int64_t nq = g->b * g->S * g->H * g->Dh, nl = g->b * g->S * g->H;
    float *o = fzero(nq), *lse = fzero(nl);
    ring_fwd(g);
    for (int64_t r = 0; r < g->R; r++) scatter(o, g->ob[r], g, g->H, r), scatter(lse, g->lb[r], &gl, g->H, r);
    double L = 0;
    for (int64_t i = 0; i < nq; i++) L += (double)o[i] * c->r[i];
    for (int64_t i = 0; i < nl; i++) L += (double)lse[i] * c->rl[i];
    free(o), free(lse);
    return L;
}

/* Every entry when n <= 300, else 150 random ones. */
static void fd_check(const char *name, float *x, int64_t n, const float *grad, const fd_ctx *c) {
    double worst = 0, worst_abs = 0;
    int64_t count = n <= 300 ? n : 150;
    for (int64_t t = 0; t < count; t++) {
        int64_t i = n <= 300 ? t : (int64_t)(urand() * (double)n);
        float x0 = x[i], xp = (float)(x0 + FD_EPS), xm = (float)(x0 - FD_EPS);
        x[i] = xp;
        double lp = fd_loss(c);
        x[i] = xm;
        double lm = fd_loss(c);
        x[i] = x0;
        double num = (lp - lm) / ((double)xp - (double)xm), err = fabs(grad[i] - num);
        double ratio = err / (RTOL * fmax(fabs(grad[i]), fabs(num)) + ATOL);
        if (!(ratio <= worst)) worst = ratio;
        if (!(err <= worst_abs)) worst_abs = err;
    }
    bool ok = worst <= 1.0;
    printf("  %-46s max|err|=%.3e  err/tol=%.3f  %s\n", name, worst_abs, worst, ok ? "ok" : "FAIL");
    if (!ok) g_failures++;
}

static void test_fd(int64_t b, int64_t S, int64_t H, int64_t Hk, int64_t Dh, int64_t R) {
    ring g;
    ring_init(&g, b, S, H, Hk, Dh, R);
    int64_t nq = b * S * H * Dh, nk = b * S * Hk * Dh;
    float *r = frand(nq, -1, 1), *rl = frand(b * S * H, -1, 1);
    float *dq = fzero(nq), *dk = fzero(nk), *dv = fzero(nk);
    fd_ctx c = {&g, r, rl};
    ring_fwd(&g);
    ring_bwd(&g, dq, dk, dv, r, rl);
    char name[96];
    const char *what[3] = {"dq", "dk", "dv"};
    float *xs[3] = {g.q, g.k, g.v}, *gs[3] = {dq, dk, dv};
    int64_t ns[3] = {nq, nk, nk};
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "fd S=%lld H=%lld/%lld R=%lld %s (o and lse)", (long long)S, (long long)H,
                 (long long)Hk, (long long)R, what[i]);
        fd_check(name, xs[i], ns[i], gs[i], &c);
    }
    free(r), free(rl), free(dq), free(dk), free(dv);
    ring_free(&g);
}

/* ---- (c) negative controls -------------------------------------------------------------- */

static void expect_rejected(const char *name, double err) {
    bool rejected = err > EXACT_TOL;
    printf("  %-46s max|diff|=%.3e  %s\n", name, err, rejected ? "ok (rejected)" : "FAIL (accepted)");
    if (!rejected) g_failures++;
}

static void test_controls(void) {
    ring g;
    ring_init(&g, 2, 48, 4, 2, 16, 3);
    g.lt_mask = true; /* rows at position 0 see nothing: o 0 */
    ring_err e = ring_vs_dense(&g, false);
    expect_rejected("mask flipped to kpos < qpos: o", e.o);
    g.lt_mask = false, g.drop_lse = true;
    e = ring_vs_dense(&g, false);
    expect_rejected("merge ignoring the running lse: o", e.o);
    ring_free(&g);
}

/* ---- zig-zag order and the block entry points ----------------------------------------- */

static void test_zigzag(void) {
    /* S = 16, R = 2: chunks of 4; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2 */
    static const int64_t want[16] = {0, 1, 2, 3, 12, 13, 14, 15, 4, 5, 6, 7, 8, 9, 10, 11};
    int bad = 0;
    for (int64_t i = 0; i < 16; i++) bad += kern_zigzag_pos(i, 16, 2) != want[i];
    /* a permutation for other shapes */
    int64_t S = 96, R = 3;
    char *seen = calloc((size_t)S, 1);
    for (int64_t i = 0; i < S; i++) seen[kern_zigzag_pos(i, S, R)]++;
    for (int64_t i = 0; i < S; i++) bad += seen[i] != 1;
    free(seen);
    report("zig-zag order (S=16 R=2 by hand, S=96 R=3 bijective)", bad, 0);
}

/* One block from (0, -inf) in double: o [Sq,H,Dh], lse [Sq,H] (b = 1);
 * key j visible to query i iff kpos == NULL or kpos[j] <= qpos[i]. */
static void block_reference(double *o, double *lse, const float *q, const float *k, const float *v, int64_t Sq,
                            int64_t Sk, int64_t H, int64_t Hk, int64_t Dh, const int64_t *qpos, const int64_t *kpos) {
    double sc = 1.0 / sqrt((double)Dh), *s = malloc((size_t)Sk * sizeof(double));
    for (int64_t i = 0; i < Sq; i++)
        for (int64_t h = 0; h < H; h++) {
            int64_t g = h / (H / Hk);
            double mx = -INFINITY, sum = 0;
            for (int64_t j = 0; j < Sk; j++) {
                double dot = 0;
                for (int64_t d = 0; d < Dh; d++) dot += (double)q[(i * H + h) * Dh + d] * k[(j * Hk + g) * Dh + d];
                s[j] = !kpos || kpos[j] <= qpos[i] ? dot * sc : -INFINITY;
                mx = fmax(mx, s[j]);
            }
            for (int64_t j = 0; j < Sk; j++) sum += (s[j] = mx == -INFINITY ? 0 : exp(s[j] - mx));
            for (int64_t d = 0; d < Dh; d++) {
                double acc = 0;
                for (int64_t j = 0; j < Sk; j++) acc += s[j] * v[(j * Hk + g) * Dh + d];
                o[(i * H + h) * Dh + d] = sum > 0 ? acc / sum : 0;
            }
            lse[i * H + h] = sum > 0 ? mx + log(sum) : -INFINITY;
        }
    free(s);
}

/* Max |kernel - reference| of one block call from (0, -inf); -inf lse must
 * match exactly. */
static double block_case(const float *q, const float *k, const float *v, int64_t Sq, int64_t Sk, int64_t H, int64_t Hk,
                         int64_t Dh, const int64_t *qpos, const int64_t *kpos) {
    int64_t n = Sq * H * Dh;
    float *o = fzero(n), *lse = fzero(Sq * H);
    double *wo = malloc((size_t)n * sizeof(double)), *wl = malloc((size_t)(Sq * H) * sizeof(double)), err = 0;
    for (int64_t i = 0; i < Sq * H; i++) lse[i] = -INFINITY;
    kern_ring_block_fwd(o, lse, q, k, v, 1, Sq, Sk, H, Hk, Dh, qpos, kpos);
    block_reference(wo, wl, q, k, v, Sq, Sk, H, Hk, Dh, qpos, kpos);
    for (int64_t i = 0; i < n; i++) err = fmax(err, fabs(o[i] - wo[i]));
    for (int64_t i = 0; i < Sq * H; i++)
        if (isinf(wl[i]) || isinf(lse[i]))
            err = fmax(err, wl[i] == lse[i] ? 0 : INFINITY);
        else
            err = fmax(err, fabs(lse[i] - wl[i]));
    free(o), free(lse), free(wo), free(wl);
    return err;
}

/* Single blocks against a double reference (Sq != Sk, several tiles):
 * kpos NULL; unsorted random positions with repeats (every tile kind, rows
 * that see nothing); a key tile whose first position is the query tile's
 * last (one visible pair: skipping it would be wrong; that query also sees
 * keys 0..31).  Then a block whose
 * keys all come after the queries leaves (o, lse) untouched, bit for bit. */
static void test_block_vs_double(void) {
    int64_t Sq = 70, Sk = 130, H = 4, Hk = 2, Dh = 8, n = Sq * H * Dh;
    float *q = frand(n, -1, 1), *k = frand(Sk * Hk * Dh, -1, 1), *v = frand(Sk * Hk * Dh, -1, 1);
    int64_t *qp = malloc((size_t)Sq * sizeof(int64_t)), *kp = malloc((size_t)Sk * sizeof(int64_t));
    report("block, kpos NULL (all visible), vs double", block_case(q, k, v, Sq, Sk, H, Hk, Dh, NULL, NULL), EXACT_TOL);
    for (int64_t i = 0; i < Sq; i++) qp[i] = (int64_t)(urand() * 100);
    for (int64_t j = 0; j < Sk; j++) kp[j] = (int64_t)(urand() * 100);
    report("block, random positions, vs double", block_case(q, k, v, Sq, Sk, H, Hk, Dh, qp, kp), EXACT_TOL);
    for (int64_t i = 0; i < Sq; i++) qp[i] = i;
    for (int64_t j = 0; j < Sk; j++) kp[j] = j < 32 ? j : j < 64 ? 1000 : 63 + (j - 64); /* tile 1 starts at 63 */
    report("block, one visible pair in a tile, vs double", block_case(q, k, v, Sq, Sk, H, Hk, Dh, qp, kp), EXACT_TOL);
    float *o = frand(n, -1, 1), *lse = frand(Sq * H, -3, 3), *o2 = fzero(n), *l2 = fzero(Sq * H);
    memcpy(o2, o, (size_t)n * sizeof(float)), memcpy(l2, lse, (size_t)(Sq * H) * sizeof(float));
    for (int64_t j = 0; j < Sk; j++) kp[j] = Sq + j;
    kern_ring_block_fwd(o2, l2, q, k, v, 1, Sq, Sk, H, Hk, Dh, qp, kp);
    bool same = memcmp(o2, o, (size_t)n * sizeof(float)) == 0 && memcmp(l2, lse, (size_t)(Sq * H) * 4) == 0;
    report("all-masked block leaves (o, lse) bit for bit", same ? 0 : 1, 0);
    free(q), free(k), free(v), free(qp), free(kp), free(o), free(lse), free(o2), free(l2);
}

/* ---- (d) rope with positions -------------------------------------------------------------- */

static void test_rope_pos(void) {
    int64_t b = 2, S = 24, H = 3, Dh = 16, n = b * S * H * Dh, pos0 = 37, R = 3;
    kern_rope_scaling sc = {8.0, 1.0, 4.0, 16};
    const kern_rope_scaling *scs[2] = {NULL, &sc};
    float *x = frand(n, -2, 2), *y = fzero(n), *yp = fzero(n), *xz = fzero(n), *yz = fzero(n);
    int64_t *pos = malloc((size_t)S * sizeof(int64_t)), *zz = malloc((size_t)S * sizeof(int64_t));
    for (int64_t i = 0; i < S; i++) pos[i] = pos0 + i, zz[i] = kern_zigzag_pos(i, S, R);
    int bad = 0;
    for (int c = 0; c < 2; c++) {
        kern_rope_fwd(y, x, b, S, H, Dh, pos0, 1e4, scs[c]);
        kern_rope_fwd_pos(yp, x, b, S, H, Dh, pos, 1e4, scs[c]);
        bad += memcmp(y, yp, (size_t)n * sizeof(float)) != 0;
        kern_rope_bwd(y, x, b, S, H, Dh, pos0, 1e4, scs[c]);
        kern_rope_bwd_pos(yp, x, b, S, H, Dh, pos, 1e4, scs[c]);
        bad += memcmp(y, yp, (size_t)n * sizeof(float)) != 0;
        /* zig-zag: permute x, rotate by the original positions = permute the rotated */
        int64_t row = H * Dh;
        for (int dir = 0; dir < 2; dir++) {
            for (int64_t bi = 0; bi < b; bi++)
                for (int64_t i = 0; i < S; i++)
                    memcpy(xz + (bi * S + i) * row, x + (bi * S + zz[i]) * row, (size_t)row * sizeof(float));
            if (dir == 0) {
                kern_rope_fwd(y, x, b, S, H, Dh, 0, 1e4, scs[c]);
                kern_rope_fwd_pos(yz, xz, b, S, H, Dh, zz, 1e4, scs[c]);
            } else {
                kern_rope_bwd(y, x, b, S, H, Dh, 0, 1e4, scs[c]);
                kern_rope_bwd_pos(yz, xz, b, S, H, Dh, zz, 1e4, scs[c]);
            }
            for (int64_t bi = 0; bi < b; bi++)
                for (int64_t i = 0; i < S; i++)
                    bad += memcmp(yz + (bi * S + i) * row, y + (bi * S + zz[i]) * row, (size_t)row * 4) != 0;
        }
    }
    report("rope_pos == rope (pos0+s; zig-zag permuted), bits", bad, 0);
    free(x), free(y), free(yp), free(xz), free(yz), free(pos), free(zz);
}

int main(void) {
    printf("ring attention kernels: exact tol %.0e; fd rtol %.0e atol %.0e step %.0e\n", EXACT_TOL, RTOL, ATOL, FD_EPS);
    printf("zig-zag order, block entry points\n");
    test_zigzag();
    test_block_vs_double();
    printf("(a) blockwise == dense (kern_attention_fwd/bwd)\n");
    for (int64_t R = 2; R <= 3; R++) {
        test_dense_case(2, 48, 4, 2, 16, R); /* GQA */
        test_dense_case(2, 48, 4, 4, 16, R); /* MHA */
    }
    test_dense_case(1, 512, 2, 1, 32, 2); /* several 64 x 64 tiles: skipped, unmasked, masked */
    test_dense_case(1, 512, 2, 2, 16, 4);
    printf("(b) finite differences through the ring forward\n");
    test_fd(1, 24, 2, 1, 8, 2);
    test_fd(2, 48, 4, 2, 16, 3);
    printf("(c) negative controls\n");
    test_controls();
    printf("(d) rope with explicit positions\n");
    test_rope_pos();
    if (g_failures) {
        printf("%d check(s) FAILED\n", g_failures);
        return 1;
    }
    printf("all ring attention checks passed\n");
    return 0;
}
