/* test_attention.c — the dense causal attention kernels against a reference
 * in double, for both implementations (kern_attention_set_impl): the fused
 * AVX-512 one (where this CPU has AVX-512; kernels.attention checks the
 * run really took it) and the blocked BLAS one.
 *
 * The reference is the definition, one query row at a time in double:
 *   p = softmax(scale q_i K^T) over keys j <= i,  o_i = p V,
 *   dP_j = dO_i . V_j,  dS_j = p_j (dP_j - sum_j p_j dP_j),
 *   dQ_i = scale sum_j dS_j K_j,  dK_j += scale dS_j Q_i,  dV_j += p_j dO_i
 * (dK, dV summed over the q heads of a kv group).  kernels.fd checks the
 * same backward against finite differences of the forward on small shapes;
 * this file covers the shapes the fused kernel's blocking has edges at:
 * S around multiples of its 64-row blocks, Dh in 16-column strips of 64,
 * 32 and 16, GQA, MHA and MQA, b > 1.
 *
 * Tolerance: |err| <= 2e-5 * max|reference| of the tensor + 1e-6.  fp32
 * accumulation over at most 257 keys and Dh <= 128 products gives relative
 * errors of a few 1e-7 (seen: below 3e-6 for every case); the bound leaves
 * ten times that.  A planted bug (one key block dropped, a mask off by one,
 * a wrong scale) moves results by 1e-3 or more.
 *
 * Also: o and lse with and without lse output are the same bits, and the
 * backward with the forward's lse equals the one recomputing it bit for bit
 * (kern_attention_bwd_lse's contract, which training relies on); the
 * ring-block / packed-document entry points, fused against blocked; NaN and
 * infinite inputs, which must reach the outputs; and the AVX2 instance
 * taking head dims 8 (mod 16) on an AVX-512 CPU (below). */
#include "rt_host.h"

#define KTEST_SEED 0xA77E57105EEDull
#include "ktest.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int g_failures;

typedef struct shape {
    int64_t b, S, H, Hkv, Dh;
} shape;

/* o, lse (natural log), dq, dk, dv in double, straight from the definition. */
typedef struct refs {
    double *o, *lse, *dq, *dk, *dv;
} refs;

static void reference(refs *r, const shape *s, const float *q, const float *k, const float *v, const float *dout) {
    int64_t S = s->S, H = s->H, Hkv = s->Hkv, Dh = s->Dh, rep = H / Hkv;
    int64_t nq = s->b * S * H * Dh, nk = s->b * S * Hkv * Dh;
    r->o = calloc((size_t)nq, sizeof(double)), r->dq = calloc((size_t)nq, sizeof(double));
    r->dk = calloc((size_t)nk, sizeof(double)), r->dv = calloc((size_t)nk, sizeof(double));
    r->lse = calloc((size_t)(s->b * H * S), sizeof(double));
    double sc = 1.0 / sqrt((double)Dh), *p = malloc((size_t)S * sizeof(double)),
           *dp = malloc((size_t)S * sizeof(double));
    for (int64_t bi = 0; bi < s->b; bi++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < S; i++) {
                int64_t qo = ((bi * S + i) * H + h) * Dh;
                double mx = -INFINITY, sum = 0, pdp = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const float *kj = k + ((bi * S + j) * Hkv + h / rep) * Dh;
                    double dot = 0;
                    for (int64_t d = 0; d < Dh; d++) dot += (double)q[qo + d] * kj[d];
                    p[j] = dot * sc;
                    mx = fmax(mx, p[j]);
                }
                for (int64_t j = 0; j <= i; j++) sum += (p[j] = exp(p[j] - mx));
                r->lse[(bi * H + h) * S + i] = mx + log(sum);
                for (int64_t j = 0; j <= i; j++) {
                    int64_t ko = ((bi * S + j) * Hkv + h / rep) * Dh;
                    p[j] /= sum;
                    double dot = 0;
                    for (int64_t d = 0; d < Dh; d++) {
                        r->o[qo + d] += p[j] * v[ko + d];
                        dot += (double)dout[qo + d] * v[ko + d];
                    }
                    dp[j] = dot;
                    pdp += p[j] * dot;
                }
                for (int64_t j = 0; j <= i; j++) {
                    int64_t ko = ((bi * S + j) * Hkv + h / rep) * Dh;
                    double ds = p[j] * (dp[j] - pdp) * sc;
                    for (int64_t d = 0; d < Dh; d++) {
                        r->dq[qo + d] += ds * k[ko + d];
                        r->dk[ko + d] += ds * q[qo + d];
                        r->dv[ko + d] += p[j] * dout[qo + d];
                    }
                }
            }
    free(p), free(dp);
}

static void refs_free(refs *r) { free(r->o), free(r->lse), free(r->dq), free(r->dk), free(r->dv); }

/* One line per tensor; |got - want| <= 2e-5 max|want| + 1e-6 (see the top). */
static void check(const char *impl, const shape *s, const char *what, const float *got, const double *want, int64_t n) {
    double big = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) big = fmax(big, fabs(want[i]));
    double tol = 2e-5 * big + 1e-6;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)got[i] - want[i]);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    bool ok = worst <= tol;
    printf("  %-6s b=%lld S=%-3lld H=%lld/%lld Dh=%-3lld %-3s max|err|=%.2e tol=%.2e %s\n", impl, (long long)s->b,
           (long long)s->S, (long long)s->H, (long long)s->Hkv, (long long)s->Dh, what, worst, tol, ok ? "ok" : "FAIL");
    if (!ok) g_failures++;
}

static void same_bits(const char *what, const float *a, const float *b, int64_t n) {
    if (memcmp(a, b, (size_t)n * sizeof(float)) != 0) {
        printf("  FAIL: %s differ\n", what);
        g_failures++;
    }
}

/* The first implementation tested: the fused kernels wherever they can run
 * Dh (AVX2 or AVX-512 and Dh a multiple of 8; KERN_ATTN_FUSED: also where
 * auto prefers the blocked ones, AVX2 above head dim 64), else auto (the
 * blocked ones, tested twice). */
static kern_attn_impl first_impl(int64_t Dh) {
    return kern_attn_simd_width() >= 8 && Dh % 8 == 0 ? KERN_ATTN_FUSED : KERN_ATTN_AUTO;
}

static void run_shape(const shape *s) {
    int64_t nq = s->b * s->S * s->H * s->Dh, nk = s->b * s->S * s->Hkv * s->Dh, nl = s->b * s->H * s->S;
    float *q = frand(nq, -2, 2), *k = frand(nk, -2, 2), *v = frand(nk, -1, 1), *dout = frand(nq, -1, 1);
    refs r;
    reference(&r, s, q, k, v, dout);
    const kern_attn_impl impls[2] = {first_impl(s->Dh), KERN_ATTN_BLAS};
    for (int ii = 0; ii < 2; ii++) {
        kern_attention_set_impl(impls[ii]);
        const char *name = ii == 1                       ? "blas"
                           : kern_attention_fused(s->Dh) ? kern_attention_impl_name(s->Dh) + 6
                                                         : "auto";
        float *o = frand(nq, 1e3, 2e3), *o2 = frand(nq, 1e3, 2e3), *lse = frand(nl, 1e3, 2e3);
        float *dq = frand(nq, 1e3, 2e3), *dk = frand(nk, 1e3, 2e3), *dv = frand(nk, 1e3, 2e3);
        float *dq2 = frand(nq, 1e3, 2e3), *dk2 = frand(nk, 1e3, 2e3), *dv2 = frand(nk, 1e3, 2e3);
        kern_attention_fwd_lse(o, lse, q, k, v, s->b, s->S, s->H, s->Hkv, s->Dh);
        kern_attention_fwd(o2, q, k, v, s->b, s->S, s->H, s->Hkv, s->Dh);
        check(name, s, "o", o, r.o, nq);
        check(name, s, "lse", lse, r.lse, nl);
        same_bits("o with and without lse", o, o2, nq);
        kern_attention_bwd_lse(dq, dk, dv, dout, q, k, v, o, lse, s->b, s->S, s->H, s->Hkv, s->Dh);
        kern_attention_bwd(dq2, dk2, dv2, dout, q, k, v, o, s->b, s->S, s->H, s->Hkv, s->Dh);
        check(name, s, "dq", dq, r.dq, nq);
        check(name, s, "dk", dk, r.dk, nk);
        check(name, s, "dv", dv, r.dv, nk);
        same_bits("dq with the forward's lse and recomputed", dq, dq2, nq);
        same_bits("dk with the forward's lse and recomputed", dk, dk2, nk);
        same_bits("dv with the forward's lse and recomputed", dv, dv2, nk);
        free(o), free(o2), free(lse), free(dq), free(dk), free(dv), free(dq2), free(dk2), free(dv2);
    }
    kern_attention_set_impl(KERN_ATTN_AUTO);
    refs_free(&r);
    free(q), free(k), free(v), free(dout);
}

/* ---- ring blocks and packed documents: fused against blocked ------------------
 * kern_ring_block_{fwd,bwd}_doc with both implementations on the same
 * inputs and running state.  The blocked one is checked against the dense
 * kernels and finite differences in test_ring.c / test_docattn.c; here the
 * fused one must agree with it: positions random (some keys after every
 * query, some tiles skipped, some queries that see no key at all) or NULL
 * (no causal condition), document ids or
 * none, a fresh state (lse -inf) or a running one from an earlier block,
 * and accumulation into gradients that already hold values.  Tolerance as
 * above, against max|blocked|. */
typedef struct ring_case {
    int64_t b, Sq, Sk, H, Hk, Dh;
    bool pos, docs, running;
} ring_case;

static void cmp_impls(const ring_case *c, const char *what, const float *a, const float *b, int64_t n) {
    double big = 0, worst = 0;
    for (int64_t i = 0; i < n; i++) big = fmax(big, fabs((double)b[i]));
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)a[i] - b[i]);
        if (!(e <= worst)) worst = isnan(e) ? INFINITY : e;
    }
    double tol = 2e-5 * big + 1e-6;
    bool ok = worst <= tol;
    printf("  ring Sq=%-3lld Sk=%-3lld Dh=%-3lld pos=%d docs=%d running=%d %-3s fused-blocked %.2e tol %.2e %s\n",
           (long long)c->Sq, (long long)c->Sk, (long long)c->Dh, c->pos, c->docs, c->running, what, worst, tol,
           ok ? "ok" : "FAIL");
    if (!ok) g_failures++;
}

static float *fdup(const float *x, int64_t n) {
    float *y = malloc((size_t)n * sizeof(float));
    memcpy(y, x, (size_t)n * sizeof(float));
    return y;
}

static void run_ring_case(const ring_case *c) {
    int64_t nq = c->b * c->Sq * c->H * c->Dh, nk = c->b * c->Sk * c->Hk * c->Dh, nl = c->b * c->Sq * c->H;
    float *q = frand(nq, -2, 2), *k = frand(nk, -2, 2), *v = frand(nk, -1, 1), *dout = frand(nq, -1, 1);
    int64_t *qpos = malloc((size_t)c->Sq * sizeof(int64_t)), *kpos = malloc((size_t)c->Sk * sizeof(int64_t));
    for (int64_t i = 0; i < c->Sq; i++) qpos[i] = (int64_t)(urand() * 3 * (double)c->Sq);
    /* no key before position Sq/2: the queries before it see nothing (lse
     * stays -inf without a running state; the backward must give them 0) */
    for (int64_t j = 0; j < c->Sk; j++)
        kpos[j] = j < c->Sk / 2 ? j + c->Sq / 2 : c->Sq / 2 + (int64_t)(urand() * 4 * (double)c->Sq);
    int32_t *qdoc = malloc((size_t)(c->b * c->Sq) * sizeof(int32_t)),
            *kdoc = malloc((size_t)(c->b * c->Sk) * sizeof(int32_t));
    /* 3 documents in batch row 0, 4 in row 1, ...: each row's own ids */
    for (int64_t i = 0; i < c->b * c->Sq; i++) qdoc[i] = (int32_t)((i % c->Sq) * (3 + i / c->Sq) / c->Sq);
    for (int64_t j = 0; j < c->b * c->Sk; j++) kdoc[j] = (int32_t)((j % c->Sk) * (3 + j / c->Sk) / c->Sk);
    /* the running state: nothing seen (lse -inf, o 0), or an earlier block's */
    float *o0 = fzero(nq), *lse0 = frand(nl, 0, 0);
    for (int64_t i = 0; i < nl; i++) lse0[i] = -INFINITY;
    if (c->running) {
        float *kk = frand(nk, -2, 2), *vv = frand(nk, -1, 1);
        kern_ring_block_fwd_doc(o0, lse0, q, kk, vv, c->b, c->Sq, c->Sk, c->H, c->Hk, c->Dh, NULL, NULL, NULL, NULL);
        free(kk), free(vv);
    }
    const int64_t *qp = c->pos ? qpos : NULL, *kp = c->pos ? kpos : NULL;
    const int32_t *qd = c->docs ? qdoc : NULL, *kd = c->docs ? kdoc : NULL;
    float *o[2], *lse[2], *dq[2], *dk[2], *dv[2], *D = frand(nl, -1, 1);
    float *g0q = frand(nq, -1, 1), *g0k = frand(nk, -1, 1), *g0v = frand(nk, -1, 1);
    for (int ii = 0; ii < 2; ii++) {
        kern_attention_set_impl(ii == 0 ? first_impl(c->Dh) : KERN_ATTN_BLAS);
        o[ii] = fdup(o0, nq), lse[ii] = fdup(lse0, nl);
        kern_ring_block_fwd_doc(o[ii], lse[ii], q, k, v, c->b, c->Sq, c->Sk, c->H, c->Hk, c->Dh, qp, kp, qd, kd);
        dq[ii] = fdup(g0q, nq), dk[ii] = fdup(g0k, nk), dv[ii] = fdup(g0v, nk);
        /* both backwards read the same (fused) lse: the comparison is of the backward alone */
        kern_ring_block_bwd_doc(dq[ii], dk[ii], dv[ii], dout, q, k, v, lse[0], D, c->b, c->Sq, c->Sk, c->H, c->Hk,
                                c->Dh, qp, kp, qd, kd);
    }
    kern_attention_set_impl(KERN_ATTN_AUTO);
    /* lse: rows that saw nothing stay -inf in both; compare the finite ones as 0 */
    for (int64_t i = 0; i < nl; i++)
        if (lse[0][i] == -INFINITY && lse[1][i] == -INFINITY) lse[0][i] = lse[1][i] = 0.0f;
    cmp_impls(c, "o", o[0], o[1], nq);
    cmp_impls(c, "lse", lse[0], lse[1], nl);
    cmp_impls(c, "dq", dq[0], dq[1], nq);
    cmp_impls(c, "dk", dk[0], dk[1], nk);
    cmp_impls(c, "dv", dv[0], dv[1], nk);
    for (int ii = 0; ii < 2; ii++) free(o[ii]), free(lse[ii]), free(dq[ii]), free(dk[ii]), free(dv[ii]);
    free(q), free(k), free(v), free(dout), free(qpos), free(kpos), free(qdoc), free(kdoc), free(o0), free(lse0);
    free(D), free(g0q), free(g0k), free(g0v);
}

/* ---- non-finite inputs ---------------------------------------------------------
 * A diverging run must show in the loss: a NaN or infinity in the inputs
 * reaches the outputs it touches and is never dropped, nor an output left
 * as it was.  A NaN in key row 2 (the only kv head): every query from 2 on,
 * in every head, gets a non-finite o and dq row, and the o rows before stay
 * finite (their dq rows may not: a block product meets K's NaN times a
 * masked zero); +inf in query row 10, head 1: that o row is non-finite
 * (its scores are +-inf), the others finite; -inf in query row 0, head 0,
 * against a positive key element: its one score is -inf, so no key is
 * visible, and its o row must still be written (non-finite), the others
 * finite.  o starts as finite garbage. */
static bool row_finite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return false;
    return true;
}

static void run_nonfinite(int64_t Dh, kern_attn_impl impl) {
    const int64_t S = 100, H = 2, nq = S * H * Dh, nk = S * Dh;
    kern_attention_set_impl(impl);
    const char *name = kern_attention_impl_name(Dh);
    for (int kase = 0; kase < 3; kase++) {
        float *q = frand(nq, -2, 2), *k = frand(nk, -2, 2), *v = frand(nk, -1, 1), *dout = frand(nq, -1, 1);
        float *o = frand(nq, 1e3, 2e3), *lse = frand(S * H, 1e3, 2e3), *dq = fzero(nq), *dk = fzero(nk);
        float *dv = fzero(nk);
        if (kase == 0)
            k[2 * Dh + 5] = NAN;
        else if (kase == 1)
            q[(10 * H + 1) * Dh + 3] = INFINITY;
        else
            q[3] = -INFINITY, k[3] = 1.0f;
        kern_attention_fwd_lse(o, lse, q, k, v, 1, S, H, 1, Dh);
        kern_attention_bwd_lse(dq, dk, dv, dout, q, k, v, o, lse, 1, S, H, 1, Dh);
        int bad = 0;
        for (int64_t i = 0; i < S; i++)
            for (int64_t h = 0; h < H; h++) {
                bool hit = kase == 0 ? i >= 2 : kase == 1 ? i == 10 && h == 1 : i == 0 && h == 0;
                const float *orow = o + (i * H + h) * Dh, *qrow = dq + (i * H + h) * Dh;
                if (row_finite(orow, Dh) == hit || (kase == 0 && hit && row_finite(qrow, Dh))) bad++;
            }
        const char *where = kase == 0 ? "K" : kase == 1 ? "Q+" : "Q-";
        printf("  non-finite %-4s Dh=%-3lld %-12s %s\n", where, (long long)Dh, name, bad ? "FAIL" : "ok");
        if (bad) printf("  FAIL: %d (query, head) rows finite where they should not be, or the reverse\n", bad);
        g_failures += bad != 0;
        free(q), free(k), free(v), free(dout), free(o), free(lse), free(dq), free(dk), free(dv);
    }
    kern_attention_set_impl(KERN_ATTN_AUTO);
}

int main(int argc, char **argv) {
    /* --expect NAME: fail unless Dh = 64 runs those kernels (the ctests
     * on a CPU with AVX-512, and with BASP_SIMD=avx2, so a broken dispatch
     * cannot pass by testing the BLAS path twice). */
    if (argc > 2 && strcmp(argv[1], "--expect") == 0 && strcmp(kern_attention_impl_name(64), argv[2]) != 0) {
        printf("FAIL: --expect %s, but Dh=64 runs %s\n", argv[2], kern_attention_impl_name(64));
        return 1;
    }
    printf("attention (fused: %s for Dh=64)\n", kern_attention_impl_name(64));
    const shape shapes[] = {
        {1, 1, 2, 1, 16},   {2, 5, 4, 2, 32},    {1, 63, 4, 2, 64},  {1, 64, 3, 3, 48},   {1, 65, 4, 1, 64},
        {2, 130, 4, 2, 16}, {1, 129, 2, 2, 80},  {1, 200, 4, 2, 32}, {1, 257, 2, 1, 128}, {1, 128, 2, 2, 96},
        {1, 70, 2, 1, 112}, {1, 100, 2, 1, 256}, {1, 40, 4, 2, 8},   {1, 90, 2, 1, 72},   {2, 50, 2, 2, 40},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) run_shape(&shapes[i]);
    const ring_case rings[] = {
        {1, 100, 150, 4, 2, 32, true, false, false}, {2, 64, 64, 2, 2, 16, true, true, true},
        {1, 130, 70, 4, 1, 48, false, false, true},  {1, 77, 200, 2, 1, 64, true, true, false},
        {1, 65, 129, 2, 2, 128, false, true, true},
    };
    for (size_t i = 0; i < sizeof rings / sizeof rings[0]; i++) run_ring_case(&rings[i]);
    const int64_t dhs[] = {64, 40};
    for (int d = 0; d < 2; d++) {
        run_nonfinite(dhs[d], first_impl(dhs[d]));
        run_nonfinite(dhs[d], KERN_ATTN_BLAS);
    }
    /* head dims a multiple of 8 but not 16 run the AVX2 instance on AVX-512 */
    if (kern_attn_simd_width() == 16 && strcmp(kern_attention_impl_name(40), "fused-avx2") != 0) {
        printf("  FAIL: Dh=40 on AVX-512 runs %s, not fused-avx2\n", kern_attention_impl_name(40));
        g_failures++;
    }
    if (g_failures)
        printf("%d FAILED\n", g_failures);
    else
        printf("all passed\n");
    return g_failures ? 1 : 0;
}
