/* test_ring_emu.c — the CUDA ring-attention kernels and kcu_rope_pos
 * (runtime/cuda/kcu_ring.cu, kcu_basic.cu) against the fp32 CPU kernels
 * (runtime/host/kern_ring.c, kern_basic.c), under cuemu or on a GPU.
 *
 * A ring of R blocks in zig-zag order is simulated on both sides: every
 * query block meets every key block, own block first; the backward runs
 * over the same pairs against the final lse.  Inputs are rounded to bf16
 * first, so both sides see the same numbers.  The ring kernels keep
 * everything in fp32 past the bf16 loads (scores, P, the running o and lse,
 * the gradient accumulators), so what differs is the summation order,
 * exp2f in log2 units against the CPU's polynomial exp, and the tile
 * boundaries: relative errors of order 1e-6.  Tolerance: 1e-4 of the
 * largest |reference| per tensor (lse: 1e-4 absolute), which a one-position
 * mask error exceeds by orders of magnitude (the negative control).
 * Packed documents (the _doc entry points): the same rings with document
 * ids over the natural sequence (blocks cut across documents) against
 * kern_ring_block_*_doc, and whole packed rows as the CUDA backend's
 * rt_attention runs them (one block, positions 0..S-1, the statistics-only
 * forward for the backward) against kern_docattn_fwd/bwd, same tolerance;
 * GPU-side ids all 0 (no document mask) must fail.
 * Rope with positions: against kcu_rope with a per-row table of the same
 * positions bit for bit, and against kern_rope_fwd_pos/bwd_pos within 1e-2
 * (one bf16 rounding of the output: 2^-8 = 3.9e-3).
 * Exits 77 (CTest: skipped) when no CUDA device is visible. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "kcu.h"
#include "rt_host.h"

static const double TOL = 1e-4;
static int failures;

static uint64_t rng = 0x853c49e6748fea9bULL;
static float frand(void) { /* uniform in [-1, 1) */
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (float)((double)(rng >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}
static float *rnd(int64_t n, float s) { /* rounded to bf16 */
    float *x = malloc((size_t)(n ? n : 1) * sizeof(float));
    for (int64_t i = 0; i < n; i++) x[i] = kcu_host_from_bf16(kcu_host_to_bf16(s * frand()));
    return x;
}
static void *upbytes(const void *x, size_t bytes) {
    void *d = gt_dalloc(bytes);
    KCU_CHECK_EXIT(cudaMemcpy(d, x, bytes, cudaMemcpyHostToDevice));
    return d;
}
static float *down32(const float *d, int64_t n) {
    float *x = malloc((size_t)(n ? n : 1) * sizeof(float));
    KCU_CHECK_EXIT(cudaDeviceSynchronize());
    KCU_CHECK_EXIT(cudaMemcpy(x, d, (size_t)n * 4, cudaMemcpyDeviceToHost));
    return x;
}

/* max |got - ref| / max |ref| (abs: max |got - ref|); NaN fails. */
static double rel_err(const float *got, const float *ref, int64_t n, bool abs_only) {
    double err = 0, mx = 1e-30;
    for (int64_t i = 0; i < n; i++) {
        double e = (isinf(got[i]) && got[i] == ref[i]) ? 0 : fabs((double)got[i] - ref[i]);
        if (!(e <= err)) err = e;
        if (isfinite(ref[i]) && fabs(ref[i]) > mx) mx = fabs(ref[i]);
    }
    return abs_only ? err : err / mx;
}
static void check(const char *name, double err, double tol) {
    bool ok = err <= tol;
    printf("%-44s err %.3e (tol %.0e)  %s\n", name, err, tol, ok ? "ok" : "FAIL");
    failures += !ok;
}

/* ---- the ring on both sides ------------------------------------------------------------- */

typedef struct ring {
    int64_t b, S, H, Hk, Dh, R, n; /* n = S / R rows per block */
    float **q, **k, **v, **dout;   /* host blocks [b, n, heads, Dh], bf16 values */
    int64_t *pos;                  /* [S] zig-zag positions */
    int32_t **doc;                 /* per block [b, n] document ids, or NULL */
} ring;

/* Packed rows: doc [b,S] numbers documents of random lengths 1..maxlen back
 * to back (row 1 starts with a one-token document). */
static int32_t *packed_docs(int64_t b, int64_t S, int64_t maxlen) {
    int32_t *doc = malloc((size_t)(b * S) * sizeof(int32_t));
    for (int64_t bi = 0; bi < b; bi++) {
        int32_t id = -1;
        for (int64_t i = 0, left = 0; i < S; i++, left--) {
            if (left == 0) {
                left = bi == 1 && i == 0 ? 1 : 1 + (int64_t)((frand() + 1) * 0.5 * (double)maxlen);
                id++;
            }
            doc[bi * S + i] = id;
        }
    }
    return doc;
}

/* Each block's ids: the natural sequence packed into documents, read at the
 * block's zig-zag positions, so blocks cut across documents. */
static void ring_add_docs(ring *g, int64_t maxlen) {
    int32_t *nat = packed_docs(g->b, g->S, maxlen);
    g->doc = calloc((size_t)g->R, sizeof(int32_t *));
    for (int64_t r = 0; r < g->R; r++) {
        g->doc[r] = malloc((size_t)(g->b * g->n) * sizeof(int32_t));
        for (int64_t bi = 0; bi < g->b; bi++)
            for (int64_t i = 0; i < g->n; i++) g->doc[r][bi * g->n + i] = nat[bi * g->S + g->pos[r * g->n + i]];
    }
    free(nat);
}

/* One block of a [b, S, heads, Dh] tensor drawn at random: the ring order
 * is a relabelling, so random blocks are as good as gathered ones. */
static void ring_init(ring *g, int64_t b, int64_t S, int64_t H, int64_t Hk, int64_t Dh, int64_t R, float qk) {
    *g = (ring){b, S, H, Hk, Dh, R, S / R, NULL, NULL, NULL, NULL, NULL, NULL};
    g->q = calloc((size_t)R, sizeof(float *)), g->k = calloc((size_t)R, sizeof(float *));
    g->v = calloc((size_t)R, sizeof(float *)), g->dout = calloc((size_t)R, sizeof(float *));
    for (int64_t r = 0; r < R; r++) {
        g->q[r] = rnd(b * g->n * H * Dh, qk), g->k[r] = rnd(b * g->n * Hk * Dh, qk);
        g->v[r] = rnd(b * g->n * Hk * Dh, 1), g->dout[r] = rnd(b * g->n * H * Dh, 1);
    }
    g->pos = malloc((size_t)S * sizeof(int64_t));
    for (int64_t i = 0; i < S; i++) g->pos[i] = kern_zigzag_pos(i, S, R);
}

static void ring_free(ring *g) {
    for (int64_t r = 0; r < g->R; r++) free(g->q[r]), free(g->k[r]), free(g->v[r]), free(g->dout[r]);
    for (int64_t r = 0; g->doc && r < g->R; r++) free(g->doc[r]);
    free(g->q), free(g->k), free(g->v), free(g->dout), free(g->pos), free(g->doc);
}

/* Max errors of one ring: o, lse, D, dq, dk, dv. */
typedef struct ring_errs {
    double e[6];
} ring_errs;

/* kpos_shift 1: the GPU side's key positions + 1 (the mask kpos < qpos),
 * for the negative control. */
static ring_errs ring_compare(const ring *g, int kpos_shift) {
    int64_t R = g->R, n = g->n, b = g->b, H = g->H, Hk = g->Hk, Dh = g->Dh;
    int64_t nq = b * n * H * Dh, nk = b * n * Hk * Dh, nl = b * n * H;
    ring_errs out = {{0}};
    kcu_bf16 **dq16 = calloc((size_t)R, sizeof(void *)), **dk16 = calloc((size_t)R, sizeof(void *));
    kcu_bf16 **dv16 = calloc((size_t)R, sizeof(void *)), **ddo16 = calloc((size_t)R, sizeof(void *));
    int64_t **dqp = calloc((size_t)R, sizeof(void *)), **dkp = calloc((size_t)R, sizeof(void *));
    int64_t *shifted = malloc((size_t)n * sizeof(int64_t));
    int32_t **gdoc = calloc((size_t)R, sizeof(void *)); /* NULL without documents */
    for (int64_t r = 0; r < R; r++) {
        if (g->doc) gdoc[r] = upbytes(g->doc[r], (size_t)(b * n) * sizeof(int32_t));
        dq16[r] = gt_up(g->q[r], nq), dk16[r] = gt_up(g->k[r], nk), dv16[r] = gt_up(g->v[r], nk);
        ddo16[r] = gt_up(g->dout[r], nq);
        dqp[r] = upbytes(g->pos + r * n, (size_t)n * 8);
        for (int64_t i = 0; i < n; i++) shifted[i] = g->pos[r * n + i] + kpos_shift;
        dkp[r] = upbytes(shifted, (size_t)n * 8);
    }
    float *o = malloc((size_t)nq * 4), *lse = malloc((size_t)nl * 4), *D = malloc((size_t)nl * 4);
    float *dq = malloc((size_t)nq * 4), **dk = calloc((size_t)R, sizeof(float *)),
          **dv = calloc((size_t)R, sizeof(float *));
    float *go = gt_dalloc((size_t)nq * 4), *glse = gt_dalloc((size_t)nl * 4), *gD = gt_dalloc((size_t)nl * 4);
    float *gdq = gt_dalloc((size_t)nq * 4), **gdk = calloc((size_t)R, sizeof(float *)),
          **gdv = calloc((size_t)R, sizeof(float *));
    kcu_bf16 *go16 = gt_dalloc((size_t)nq * 2);
    for (int64_t r = 0; r < R; r++) {
        dk[r] = calloc((size_t)nk, 4), dv[r] = calloc((size_t)nk, 4);
        gdk[r] = gt_dalloc((size_t)nk * 4), gdv[r] = gt_dalloc((size_t)nk * 4);
    }
    float *lse_init = malloc((size_t)nl * 4);
    for (int64_t i = 0; i < nl; i++) lse_init[i] = -INFINITY;
    for (int64_t r = 0; r < R; r++) {
        const int64_t *qp = g->pos + r * n;
        memset(o, 0, (size_t)nq * 4), memcpy(lse, lse_init, (size_t)nl * 4);
        KCU_CHECK_EXIT(cudaMemset(go, 0, (size_t)nq * 4));
        KCU_CHECK_EXIT(cudaMemcpy(glse, lse_init, (size_t)nl * 4, cudaMemcpyHostToDevice));
        for (int64_t t = 0; t < R; t++) {
            int64_t src = (r - t + R) % R;
            const int32_t *qd = g->doc ? g->doc[r] : NULL, *kd = g->doc ? g->doc[src] : NULL;
            kern_ring_block_fwd_doc(o, lse, g->q[r], g->k[src], g->v[src], b, n, n, H, Hk, Dh, qp, g->pos + src * n, qd,
                                    kd);
            KCU_CHECK_EXIT(kcu_ring_block_fwd_doc(go, glse, dq16[r], dk16[src], dv16[src], b, n, n, H, Hk, Dh, dqp[r],
                                                  dkp[src], gdoc[r], gdoc[src], 0));
        }
        float *got = down32(go, nq), *gotl = down32(glse, nl);
        out.e[0] = fmax(out.e[0], rel_err(got, o, nq, false));
        out.e[1] = fmax(out.e[1], rel_err(gotl, lse, nl, true));
        /* the backward reads the saved (bf16) output: both sides get the GPU's */
        KCU_CHECK_EXIT(kcu_f32_to_bf16(go16, go, nq, 0));
        float *ob = gt_down(go16, nq);
        kern_ring_rowdot(D, g->dout[r], ob, b, n, H, Dh);
        KCU_CHECK_EXIT(kcu_ring_rowdot(gD, ddo16[r], go16, b, n, H, Dh, 0));
        float *gotD = down32(gD, nl);
        out.e[2] = fmax(out.e[2], rel_err(gotD, D, nl, false));
        memset(dq, 0, (size_t)nq * 4);
        KCU_CHECK_EXIT(cudaMemset(gdq, 0, (size_t)nq * 4));
        for (int64_t t = 0; t < R; t++) {
            int64_t src = (r - t + R) % R;
            const int32_t *qd = g->doc ? g->doc[r] : NULL, *kd = g->doc ? g->doc[src] : NULL;
            kern_ring_block_bwd_doc(dq, dk[src], dv[src], g->dout[r], g->q[r], g->k[src], g->v[src], lse, D, b, n, n, H,
                                    Hk, Dh, qp, g->pos + src * n, qd, kd);
            KCU_CHECK_EXIT(kcu_ring_block_bwd_doc(gdq, gdk[src], gdv[src], ddo16[r], dq16[r], dk16[src], dv16[src],
                                                  glse, gD, b, n, n, H, Hk, Dh, dqp[r], dkp[src], gdoc[r], gdoc[src],
                                                  0));
        }
        float *gotq = down32(gdq, nq);
        out.e[3] = fmax(out.e[3], rel_err(gotq, dq, nq, false));
        free(got), free(gotl), free(ob), free(gotD), free(gotq);
    }
    for (int64_t r = 0; r < R; r++) {
        float *gk = down32(gdk[r], nk), *gv = down32(gdv[r], nk);
        out.e[4] = fmax(out.e[4], rel_err(gk, dk[r], nk, false));
        out.e[5] = fmax(out.e[5], rel_err(gv, dv[r], nk, false));
        free(gk), free(gv), free(dk[r]), free(dv[r]);
        cudaFree(gdk[r]), cudaFree(gdv[r]), cudaFree(dq16[r]), cudaFree(dk16[r]), cudaFree(dv16[r]);
        cudaFree(ddo16[r]), cudaFree(dqp[r]), cudaFree(dkp[r]), cudaFree(gdoc[r]);
    }
    free(gdoc);
    cudaFree(go), cudaFree(glse), cudaFree(gD), cudaFree(gdq), cudaFree(go16);
    free(dq16), free(dk16), free(dv16), free(ddo16), free(dqp), free(dkp), free(shifted), free(o), free(lse);
    free(D), free(dq), free(dk), free(dv), free(gdk), free(gdv), free(lse_init);
    return out;
}

/* doc_maxlen > 0: packed documents of up to that many tokens. */
static void test_ring(int64_t b, int64_t S, int64_t H, int64_t Hk, int64_t Dh, int64_t R, float qk,
                      int64_t doc_maxlen) {
    ring g;
    ring_init(&g, b, S, H, Hk, Dh, R, qk);
    if (doc_maxlen > 0) ring_add_docs(&g, doc_maxlen);
    ring_errs e = ring_compare(&g, 0);
    const char *what[6] = {"o", "lse (abs)", "D", "dq", "dk", "dv"};
    for (int i = 0; i < 6; i++) {
        char name[96];
        snprintf(name, sizeof name, "ring%s Dh%d H%d/%d S%d R%d x%g %s", doc_maxlen > 0 ? " docs" : "", (int)Dh, (int)H,
                 (int)Hk, (int)S, (int)R, qk, what[i]);
        check(name, e.e[i], TOL);
    }
    ring_free(&g);
}

/* The mask flipped to kpos < qpos on the GPU side must fail the comparison. */
static void test_negative_control(void) {
    ring g;
    ring_init(&g, 1, 96, 2, 1, 16, 3, 1.f);
    ring_errs e = ring_compare(&g, 1);
    bool rejected = e.e[0] > TOL && e.e[3] > TOL && e.e[4] > TOL;
    printf("%-44s o %.2e dq %.2e dk %.2e  %s\n", "negative control: mask kpos < qpos", e.e[0], e.e[3], e.e[4],
           rejected ? "ok (rejected)" : "FAIL (accepted)");
    failures += !rejected;
    ring_free(&g);
}

/* kpos NULL (every key visible), and a block whose keys all follow the
 * queries, which must leave (o, lse) bit for bit. */
static void test_unmasked_and_untouched(void) {
    int64_t Sq = 40, Sk = 70, H = 2, Hk = 2, Dh = 32, nq = Sq * H * Dh, nk = Sk * Hk * Dh, nl = Sq * H;
    float *q = rnd(nq, 1), *k = rnd(nk, 1), *v = rnd(nk, 1), *o = calloc((size_t)nq, 4), *lse = malloc((size_t)nl * 4);
    for (int64_t i = 0; i < nl; i++) lse[i] = -INFINITY;
    kcu_bf16 *dq = gt_up(q, nq), *dk = gt_up(k, nk), *dv = gt_up(v, nk);
    float *go = upbytes(o, (size_t)nq * 4), *gl = upbytes(lse, (size_t)nl * 4);
    kern_ring_block_fwd(o, lse, q, k, v, 1, Sq, Sk, H, Hk, Dh, NULL, NULL);
    KCU_CHECK_EXIT(kcu_ring_block_fwd(go, gl, dq, dk, dv, 1, Sq, Sk, H, Hk, Dh, NULL, NULL, 0));
    float *got = down32(go, nq), *gotl = down32(gl, nl);
    check("block kpos NULL o", rel_err(got, o, nq, false), TOL);
    check("block kpos NULL lse (abs)", rel_err(gotl, lse, nl, true), TOL);
    int64_t *qp = malloc((size_t)Sq * 8), *kp = malloc((size_t)Sk * 8);
    for (int64_t i = 0; i < Sq; i++) qp[i] = i;
    for (int64_t j = 0; j < Sk; j++) kp[j] = Sq + j;
    int64_t *gqp = upbytes(qp, (size_t)Sq * 8), *gkp = upbytes(kp, (size_t)Sk * 8);
    KCU_CHECK_EXIT(kcu_ring_block_fwd(go, gl, dq, dk, dv, 1, Sq, Sk, H, Hk, Dh, gqp, gkp, 0));
    float *got2 = down32(go, nq), *gotl2 = down32(gl, nl);
    bool same = memcmp(got2, got, (size_t)nq * 4) == 0 && memcmp(gotl2, gotl, (size_t)nl * 4) == 0;
    check("all-masked block leaves (o, lse) bits", same ? 0 : 1, 0);
    cudaFree(dq), cudaFree(dk), cudaFree(dv), cudaFree(go), cudaFree(gl), cudaFree(gqp), cudaFree(gkp);
    free(q), free(k), free(v), free(o), free(lse), free(got), free(gotl), free(qp), free(kp), free(got2), free(gotl2);
}

/* One block from (0, -inf), forward and backward, GPU against CPU with the
 * given positions; checks o, lse, dq, dk, dv. */
static void block_compare(const char *label, int64_t Sq, int64_t Sk, const int64_t *qp, const int64_t *kp) {
    int64_t H = 4, Hk = 2, Dh = 16, nq = Sq * H * Dh, nk = Sk * Hk * Dh, nl = Sq * H;
    float *q = rnd(nq, 2), *k = rnd(nk, 2), *v = rnd(nk, 1), *dout = rnd(nq, 1);
    float *o = calloc((size_t)nq, 4), *lse = malloc((size_t)nl * 4), *D = malloc((size_t)nl * 4);
    float *dq = calloc((size_t)nq, 4), *dk = calloc((size_t)nk, 4), *dv = calloc((size_t)nk, 4);
    for (int64_t i = 0; i < nl; i++) lse[i] = -INFINITY;
    kcu_bf16 *gq = gt_up(q, nq), *gk = gt_up(k, nk), *gv = gt_up(v, nk), *gdo = gt_up(dout, nq),
             *go16 = gt_dalloc(nq * 2);
    float *go = upbytes(o, (size_t)nq * 4), *gl = upbytes(lse, (size_t)nl * 4), *gD = gt_dalloc((size_t)nl * 4);
    float *gdq = gt_dalloc((size_t)nq * 4), *gdk = gt_dalloc((size_t)nk * 4), *gdv = gt_dalloc((size_t)nk * 4);
    int64_t *gqp = upbytes(qp, (size_t)Sq * 8), *gkp = upbytes(kp, (size_t)Sk * 8);
    kern_ring_block_fwd(o, lse, q, k, v, 1, Sq, Sk, H, Hk, Dh, qp, kp);
    KCU_CHECK_EXIT(kcu_ring_block_fwd(go, gl, gq, gk, gv, 1, Sq, Sk, H, Hk, Dh, gqp, gkp, 0));
    KCU_CHECK_EXIT(kcu_f32_to_bf16(go16, go, nq, 0));
    float *got_o = down32(go, nq), *got_l = down32(gl, nl), *ob = gt_down(go16, nq);
    kern_ring_rowdot(D, dout, ob, 1, Sq, H, Dh);
    kern_ring_block_bwd(dq, dk, dv, dout, q, k, v, lse, D, 1, Sq, Sk, H, Hk, Dh, qp, kp);
    KCU_CHECK_EXIT(kcu_ring_rowdot(gD, gdo, go16, 1, Sq, H, Dh, 0));
    KCU_CHECK_EXIT(kcu_ring_block_bwd(gdq, gdk, gdv, gdo, gq, gk, gv, gl, gD, 1, Sq, Sk, H, Hk, Dh, gqp, gkp, 0));
    float *got[5] = {got_o, got_l, down32(gdq, nq), down32(gdk, nk), down32(gdv, nk)}, *ref[5] = {o, lse, dq, dk, dv};
    int64_t ns[5] = {nq, nl, nq, nk, nk};
    const char *what[5] = {"o", "lse (abs)", "dq", "dk", "dv"};
    for (int i = 0; i < 5; i++) {
        char name[96];
        snprintf(name, sizeof name, "block %s %s", label, what[i]);
        check(name, rel_err(got[i], ref[i], ns[i], i == 1), TOL);
        free(got[i]);
    }
    cudaFree(gq), cudaFree(gk), cudaFree(gv), cudaFree(gdo), cudaFree(go16), cudaFree(go), cudaFree(gl);
    cudaFree(gD), cudaFree(gdq), cudaFree(gdk), cudaFree(gdv), cudaFree(gqp), cudaFree(gkp);
    free(q), free(k), free(v), free(dout), free(o), free(lse), free(D), free(dq), free(dk), free(dv), free(ob);
}

/* Unsorted random positions with repeats (every tile kind, rows that see
 * nothing), and a key tile whose first position is the last of a query
 * tile (one visible pair, which skipping must not drop; that query also
 * sees keys 0..31, since with a single visible key dS = P (dP - D) is 0
 * and dq would not notice). */
static void test_block_positions(void) {
    int64_t Sq = 70, Sk = 130, *qp = malloc((size_t)Sq * 8), *kp = malloc((size_t)Sk * 8);
    for (int64_t i = 0; i < Sq; i++) qp[i] = (int64_t)((frand() + 1) * 50);
    for (int64_t j = 0; j < Sk; j++) kp[j] = (int64_t)((frand() + 1) * 50);
    block_compare("random positions", Sq, Sk, qp, kp);
    for (int64_t i = 0; i < Sq; i++) qp[i] = i;
    for (int64_t j = 0; j < Sk; j++) kp[j] = j < 32 ? j : j < 64 ? 1000 : 63 + (j - 64);
    block_compare("one visible pair in a tile", Sq, Sk, qp, kp);
    free(qp), free(kp);
}

/* ---- attention within packed documents ------------------------------------------------------ */

/* Max errors of one packed attention: o, lse, dq, dk, dv, and whether the
 * statistics-only forward's lse differs from the full forward's (bits). */
typedef struct doc_errs {
    double e[6];
} doc_errs;

/* As rt_attention / rt_attention_bwd run it on the CUDA backend with
 * documents: one ring block over the whole row, positions 0..S-1 both sides,
 * against kern_docattn_fwd/bwd.  gpu_ids_zero: the GPU side is given ids all
 * 0, i.e. no document mask (the negative control). */
static doc_errs docattn_compare(int64_t b, int64_t S, int64_t H, int64_t Hk, int64_t Dh, float qk, int64_t maxlen,
                                bool gpu_ids_zero) {
    int64_t nq = b * S * H * Dh, nk = b * S * Hk * Dh, nl = b * S * H;
    float *q = rnd(nq, qk), *k = rnd(nk, qk), *v = rnd(nk, 1), *dout = rnd(nq, 1);
    int32_t *doc = packed_docs(b, S, maxlen), *zero = calloc((size_t)(b * S), sizeof(int32_t));
    int64_t *pos = malloc((size_t)S * 8);
    float *o = malloc((size_t)nq * 4), *lse = malloc((size_t)nl * 4), *empty = malloc((size_t)nl * 4);
    float *dq = malloc((size_t)nq * 4), *dk = malloc((size_t)nk * 4), *dv = malloc((size_t)nk * 4);
    for (int64_t i = 0; i < S; i++) pos[i] = i;
    for (int64_t i = 0; i < nl; i++) empty[i] = -INFINITY;
    kcu_bf16 *gq = gt_up(q, nq), *gk = gt_up(k, nk), *gv = gt_up(v, nk), *gdo = gt_up(dout, nq),
             *go16 = gt_dalloc(nq * 2);
    int64_t *gpos = upbytes(pos, (size_t)S * 8);
    int32_t *gdoc = upbytes(gpu_ids_zero ? zero : doc, (size_t)(b * S) * sizeof(int32_t));
    float *go = gt_dalloc((size_t)nq * 4), *gl = upbytes(empty, (size_t)nl * 4), *gl2 = upbytes(empty, (size_t)nl * 4);
    float *gD = gt_dalloc((size_t)nl * 4), *gdq = gt_dalloc((size_t)nq * 4), *gdk = gt_dalloc((size_t)nk * 4);
    float *gdv = gt_dalloc((size_t)nk * 4);
    kern_docattn_fwd(o, lse, q, k, v, doc, b, S, H, Hk, Dh);
    KCU_CHECK_EXIT(kcu_ring_block_fwd_doc(go, gl, gq, gk, gv, b, S, S, H, Hk, Dh, gpos, gpos, gdoc, gdoc, 0));
    KCU_CHECK_EXIT(kcu_f32_to_bf16(go16, go, nq, 0));
    /* the backward: statistics only, rowdot with the saved bf16 o, then the gradients */
    KCU_CHECK_EXIT(kcu_ring_block_fwd_doc(NULL, gl2, gq, gk, gv, b, S, S, H, Hk, Dh, gpos, gpos, gdoc, gdoc, 0));
    KCU_CHECK_EXIT(kcu_ring_rowdot(gD, gdo, go16, b, S, H, Dh, 0));
    KCU_CHECK_EXIT(
        kcu_ring_block_bwd_doc(gdq, gdk, gdv, gdo, gq, gk, gv, gl2, gD, b, S, S, H, Hk, Dh, gpos, gpos, gdoc, gdoc, 0));
    float *ob = gt_down(go16, nq);
    kern_docattn_bwd(dq, dk, dv, dout, q, k, v, ob, doc, b, S, H, Hk, Dh);
    float *got[5] = {down32(go, nq), down32(gl, nl), down32(gdq, nq), down32(gdk, nk), down32(gdv, nk)};
    float *ref[5] = {o, lse, dq, dk, dv}, *stats = down32(gl2, nl);
    int64_t ns[5] = {nq, nl, nq, nk, nk};
    doc_errs out;
    for (int i = 0; i < 5; i++) out.e[i] = rel_err(got[i], ref[i], ns[i], i == 1), free(got[i]);
    float *full = down32(gl, nl);
    out.e[5] = memcmp(stats, full, (size_t)nl * 4) ? 1 : 0;
    cudaFree(gq), cudaFree(gk), cudaFree(gv), cudaFree(gdo), cudaFree(go16), cudaFree(gpos), cudaFree(gdoc);
    cudaFree(go), cudaFree(gl), cudaFree(gl2), cudaFree(gD), cudaFree(gdq), cudaFree(gdk), cudaFree(gdv);
    free(q), free(k), free(v), free(dout), free(doc), free(zero), free(pos), free(o), free(lse), free(empty);
    free(dq), free(dk), free(dv), free(ob), free(stats), free(full);
    return out;
}

static void test_docattn(int64_t b, int64_t S, int64_t H, int64_t Hk, int64_t Dh, float qk, int64_t maxlen) {
    doc_errs e = docattn_compare(b, S, H, Hk, Dh, qk, maxlen, false);
    const char *what[6] = {"o", "lse (abs)", "dq", "dk", "dv", "stats-only lse (bits)"};
    for (int i = 0; i < 6; i++) {
        char name[96];
        snprintf(name, sizeof name, "docattn Dh%d H%d/%d b%d S%d doc<=%d %s", (int)Dh, (int)H, (int)Hk, (int)b, (int)S,
                 (int)maxlen, what[i]);
        check(name, e.e[i], i == 5 ? 0 : TOL);
    }
}

/* The GPU side without the document mask (ids all 0) must fail. */
static void test_docattn_negative_control(void) {
    doc_errs e = docattn_compare(2, 96, 2, 1, 16, 1.f, 24, true);
    bool rejected = e.e[0] > TOL && e.e[2] > TOL && e.e[3] > TOL && e.e[4] > TOL;
    printf("%-44s o %.2e dq %.2e dk %.2e dv %.2e  %s\n", "negative control: no document mask", e.e[0], e.e[2], e.e[3],
           e.e[4], rejected ? "ok (rejected)" : "FAIL (accepted)");
    failures += !rejected;
}

/* ---- rope with positions ------------------------------------------------------------------ */

static void test_rope_pos(void) {
    int64_t b = 2, S = 48, H = 3, Dh = 16, n = b * S * H * Dh, half = Dh / 2, R = 3;
    kern_rope_scaling sc = {8.0, 1.0, 4.0, 16}; /* all three bands at Dh 16 */
    int64_t *pos = malloc((size_t)S * 8);
    for (int64_t i = 0; i < S; i++) pos[i] = kern_zigzag_pos(i, S, R);
    float *x = rnd(n, 1), *y = malloc((size_t)n * 4), *tab = malloc((size_t)S * Dh * 4);
    float *rowtab = malloc((size_t)S * Dh * 4);
    kern_rope_table(tab, tab + S * half, S, Dh, 0, 500000.0, &sc); /* positions 0..S-1 */
    for (int64_t i = 0; i < S; i++)                                /* the same angles, one row per token */
        kern_rope_table(rowtab + i * half, rowtab + S * half + i * half, 1, Dh, pos[i], 500000.0, &sc);
    float *dtab = upbytes(tab, (size_t)S * Dh * 4), *drow = upbytes(rowtab, (size_t)S * Dh * 4);
    int64_t *dpos = upbytes(pos, (size_t)S * 8);
    kcu_bf16 *dx = gt_up(x, n), *dy = gt_dalloc((size_t)n * 2), *dy2 = gt_dalloc((size_t)n * 2);
    for (int dir = 0; dir < 2; dir++) {
        float sign = dir ? -1.0f : 1.0f;
        if (dir)
            kern_rope_bwd_pos(y, x, b, S, H, Dh, pos, 500000.0, &sc);
        else
            kern_rope_fwd_pos(y, x, b, S, H, Dh, pos, 500000.0, &sc);
        KCU_CHECK_EXIT(kcu_rope_pos(dy, dx, dtab, dtab + S * half, S, dpos, b, S, H, Dh, sign, 0));
        KCU_CHECK_EXIT(kcu_rope(dy2, dx, drow, drow + S * half, b, S, H, Dh, sign, 0));
        float *got = gt_down(dy, n), *got2 = gt_down(dy2, n);
        check(dir ? "rope_pos bwd vs kern_rope_bwd_pos" : "rope_pos fwd vs kern_rope_fwd_pos",
              rel_err(got, y, n, false), 1e-2);
        check(dir ? "rope_pos bwd == kcu_rope, row table (bits)" : "rope_pos fwd == kcu_rope, row table (bits)",
              memcmp(got, got2, (size_t)n * 4) ? 1 : 0, 0);
        free(got), free(got2);
    }
    cudaFree(dtab), cudaFree(drow), cudaFree(dpos), cudaFree(dx), cudaFree(dy), cudaFree(dy2);
    free(pos), free(x), free(y), free(tab), free(rowtab);
}

int main(void) {
    int ndev = 0;
    cudaError_t e = cudaGetDeviceCount(&ndev);
    if (e != cudaSuccess || ndev == 0) {
        printf("no CUDA device visible (%s): ring kernel tests skipped\n",
               e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    test_rope_pos();
    test_unmasked_and_untouched();
    test_block_positions();
    /* b, S, H, Hk, Dh, R: GQA and MHA, R 2 and 3, every head dim's thread
     * layout (TPR 1, 2, 4), blocks of several tiles where pairs are skipped */
    test_ring(2, 48, 4, 2, 16, 2, 1.f, 0);
    test_ring(2, 48, 4, 4, 16, 3, 1.f, 0);
    test_ring(1, 96, 2, 1, 8, 3, 3.f, 0);
    test_ring(1, 256, 2, 1, 64, 2, 1.f, 0);
    test_ring(1, 256, 2, 2, 128, 2, 3.f, 0);
    test_ring(1, 192, 4, 2, 32, 3, 3.f, 0);
    test_negative_control();
    /* packed documents: rings whose blocks cut across documents, and whole
     * rows as rt_attention runs them (short and long documents, several
     * tiles, every thread layout) */
    test_ring(2, 96, 4, 2, 16, 3, 1.f, 20);
    test_ring(1, 256, 2, 1, 64, 2, 3.f, 90);
    test_docattn(2, 160, 4, 2, 16, 1.f, 30);
    test_docattn(2, 200, 2, 1, 8, 3.f, 12);
    test_docattn(1, 256, 2, 2, 64, 1.f, 100);
    test_docattn(1, 192, 2, 1, 128, 3.f, 70);
    test_docattn_negative_control();
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "passed", failures);
    return failures ? 1 : 0;
}
