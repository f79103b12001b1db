/* test_docattn.c — causal attention within documents (kern_docattn_fwd/bwd,
 * runtime/host/rt_host.h; the ring block kernels with document ids underneath).
 *
 * Checked:
 *   (a) independent check: every document of a packed row, cut out into a row
 *       of its own (starting at position 0) and run through the plain causal
 *       kern_attention_fwd/bwd, which knows nothing of documents, gives that
 *       document's o, dq, dk, dv of the packed run within 1e-5.  Both are fp32
 *       and compute the same sums over the same visible keys; they differ only
 *       by reassociation (64 x 64 against 64 x 128 tiles, other online-softmax
 *       rescalings), a few ulps per term on O(1) outputs.  The forward's lse
 *       against a double reference with the document mask, 1e-5.  The first
 *       case is the A (37 tokens) + B (27 tokens) row of S = 64;
 *   (b) doc == NULL equals kern_attention_fwd/bwd on the whole row, 1e-5;
 *   (c) central finite differences of L = sum(r o o), in double, through
 *       kern_docattn_fwd against kern_docattn_bwd with dout = r:
 *       |analytic - numeric| <= 1e-2 relative + 1e-3 with a step of 1e-2 (the
 *       kernel tests' tolerance and step; test_ring.c explains the step);
 *   (d) planted bugs must fail (a): the document condition dropped
 *       (doc = NULL on a packed row), and the A/B boundary moved by one token;
 *   (e) GQA (H=4, Hk=2) and MHA (H=Hk=4), b = 2 rows with different packings,
 *       S up to 320 (several 64 x 64 tiles: skipped, unmasked, masked), one-
 *       token documents, ids that are not 0, 1, 2, ...;
 *   (f) tiles are skipped: NaN planted in the keys and values of a tile that
 *       lies wholly in an earlier document must not reach the later
 *       document's results (a computed-then-masked tile would multiply the NaN
 *       by 0, which is NaN). */
#include "rt_host.h"

#define KTEST_SEED 0x9E3779B97F4A7C15ull
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
    printf("  %-52s max|diff|=%.3e  tol %.0e  %s\n", name, err, tol, ok ? "ok" : "FAIL");
    if (!ok) g_failures++;
}

static void expect_rejected(const char *name, double err) {
    bool rejected = err > EXACT_TOL;
    printf("  %-52s max|diff|=%.3e  %s\n", name, err, rejected ? "ok (rejected)" : "FAIL (accepted)");
    if (!rejected) g_failures++;
}

/* ---- one packed problem --------------------------------------------------------------- */

typedef struct pack {
    int64_t b, S, H, Hk, Dh;
    float *q, *k, *v, *dout; /* q, dout [b,S,H,Dh]; k, v [b,S,Hk,Dh] */
    int32_t *doc;            /* [b,S] */
} pack;

/* lens[bi]: the document lengths of row bi, ending with 0, summing to S;
 * row bi's ids start at 3 bi + 1 and step by 2 (ids need not be 0, 1, ...). */
static void pack_init(pack *p, int64_t b, int64_t S, int64_t H, int64_t Hk, int64_t Dh, const int *const *lens) {
    *p = (pack){b, S, H, Hk, Dh, NULL, NULL, NULL, NULL, NULL};
    p->q = frand(b * S * H * Dh, -1, 1), p->k = frand(b * S * Hk * Dh, -1, 1);
    p->v = frand(b * S * Hk * Dh, -1, 1), p->dout = frand(b * S * H * Dh, -1, 1);
    p->doc = malloc((size_t)(b * S) * sizeof(int32_t));
    for (int64_t bi = 0; bi < b; bi++) {
        int64_t t = 0;
        for (int d = 0; lens[bi][d] > 0; d++)
            for (int i = 0; i < lens[bi][d]; i++) p->doc[bi * S + t++] = (int32_t)(3 * bi + 1 + 2 * d);
        if (t != S) {
            fprintf(stderr, "test_docattn: row %lld lengths sum to %lld, not S = %lld\n", (long long)bi, (long long)t,
                    (long long)S);
            exit(2);
        }
    }
}

static void pack_free(pack *p) { free(p->q), free(p->k), free(p->v), free(p->dout), free(p->doc); }

/* Row log-sum-exp in double with the document mask: lse [b,S,H]. */
static void lse_reference(double *lse, const pack *p) {
    int64_t S = p->S, H = p->H, Dh = p->Dh, rep = H / p->Hk;
    double sc = 1.0 / sqrt((double)Dh), *s = malloc((size_t)S * sizeof(double));
    for (int64_t bi = 0; bi < p->b; bi++)
        for (int64_t i = 0; i < S; i++)
            for (int64_t h = 0; h < H; h++) {
                const float *qi = p->q + ((bi * S + i) * H + h) * Dh;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const float *kj = p->k + ((bi * S + j) * p->Hk + h / rep) * Dh;
                    double dot = 0;
                    for (int64_t d = 0; d < Dh; d++) dot += (double)qi[d] * kj[d];
                    s[j] = p->doc[bi * S + j] == p->doc[bi * S + i] ? dot * sc : -INFINITY;
                    mx = fmax(mx, s[j]);
                }
                for (int64_t j = 0; j <= i; j++) sum += exp(s[j] - mx);
                lse[(bi * S + i) * H + h] = mx + log(sum);
            }
    free(s);
}

/* ---- (a) every document against itself alone ------------------------------------------ */

typedef struct doc_err {
    double o, lse, dq, dk, dv;
} doc_err;

static void fmax_into(double *m, double e) {
    if (!(e <= *m)) *m = e;
}

/* Document [s0, s0 + l) of row bi cut out into its own row and run through
 * kern_attention_fwd/bwd; the max differences to the packed results o, dq, dk,
 * dv (row bi's spans) are folded into e. */
static void alone_vs_packed(const pack *p, int64_t bi, int64_t s0, int64_t l, const float *o, const float *dq,
                            const float *dk, const float *dv, doc_err *e) {
    int64_t rq = p->H * p->Dh, rk = p->Hk * p->Dh, offq = (bi * p->S + s0) * rq, offk = (bi * p->S + s0) * rk;
    float *ao = fzero(l * rq), *adq = fzero(l * rq), *adk = fzero(l * rk), *adv = fzero(l * rk);
    kern_attention_fwd(ao, p->q + offq, p->k + offk, p->v + offk, 1, l, p->H, p->Hk, p->Dh);
    kern_attention_bwd(adq, adk, adv, p->dout + offq, p->q + offq, p->k + offk, p->v + offk, ao, 1, l, p->H, p->Hk,
                       p->Dh);
    fmax_into(&e->o, max_abs_diff(o + offq, ao, l * rq));
    fmax_into(&e->dq, max_abs_diff(dq + offq, adq, l * rq));
    fmax_into(&e->dk, max_abs_diff(dk + offk, adk, l * rk));
    fmax_into(&e->dv, max_abs_diff(dv + offk, adv, l * rk));
    free(ao), free(adq), free(adk), free(adv);
}

/* Runs kern_docattn_fwd/bwd on the packed rows with `doc` (the true ids, a
 * corrupted copy, or NULL) and compares every TRUE document with itself
 * alone; lse against the double reference of the true mask. */
static doc_err docs_vs_alone(const pack *p, const int32_t *doc) {
    int64_t nq = p->b * p->S * p->H * p->Dh, nk = p->b * p->S * p->Hk * p->Dh, nl = p->b * p->S * p->H;
    float *o = fzero(nq), *lse = fzero(nl), *dq = fzero(nq), *dk = fzero(nk), *dv = fzero(nk);
    double *want = malloc((size_t)nl * sizeof(double));
    doc_err e = {0, 0, 0, 0, 0};
    kern_docattn_fwd(o, lse, p->q, p->k, p->v, doc, p->b, p->S, p->H, p->Hk, p->Dh);
    kern_docattn_bwd(dq, dk, dv, p->dout, p->q, p->k, p->v, o, doc, p->b, p->S, p->H, p->Hk, p->Dh);
    for (int64_t bi = 0; bi < p->b; bi++)
        for (int64_t s0 = 0, s1; s0 < p->S; s0 = s1) {
            for (s1 = s0 + 1; s1 < p->S && p->doc[bi * p->S + s1] == p->doc[bi * p->S + s0]; s1++) {}
            alone_vs_packed(p, bi, s0, s1 - s0, o, dq, dk, dv, &e);
        }
    lse_reference(want, p);
    for (int64_t i = 0; i < nl; i++) fmax_into(&e.lse, isnan(lse[i]) ? INFINITY : fabs(lse[i] - want[i]));
    free(o), free(lse), free(dq), free(dk), free(dv), free(want);
    return e;
}

static void report_doc_err(const char *tag, doc_err e) {
    const char *what[5] = {"o", "lse (vs double)", "dq", "dk", "dv"};
    double errs[5] = {e.o, e.lse, e.dq, e.dk, e.dv};
    char name[96];
    for (int i = 0; i < 5; i++) {
        snprintf(name, sizeof name, "%s %s", tag, what[i]);
        report(name, errs[i], EXACT_TOL);
    }
}

static void test_alone(const char *tag, int64_t b, int64_t S, int64_t H, int64_t Hk, int64_t Dh,
                       const int *const *lens) {
    pack p;
    pack_init(&p, b, S, H, Hk, Dh, lens);
    report_doc_err(tag, docs_vs_alone(&p, p.doc));
    pack_free(&p);
}

/* ---- (b) doc == NULL is kern_attention ------------------------------------------------- */

static void test_plain(int64_t b, int64_t S, int64_t H, int64_t Hk, int64_t Dh) {
    const int one[] = {(int)S, 0}; /* one document per row; unused by the kernels here */
    const int *const lens[2] = {one, one};
    pack p;
    pack_init(&p, b, S, H, Hk, Dh, lens);
    int64_t nq = b * S * H * Dh, nk = b * S * Hk * Dh;
    float *o = fzero(nq), *ro = fzero(nq), *dq = fzero(nq), *dk = fzero(nk), *dv = fzero(nk);
    float *rq = fzero(nq), *rk = fzero(nk), *rv = fzero(nk);
    kern_docattn_fwd(o, NULL, p.q, p.k, p.v, NULL, b, S, H, Hk, Dh);
    kern_docattn_bwd(dq, dk, dv, p.dout, p.q, p.k, p.v, o, NULL, b, S, H, Hk, Dh);
    kern_attention_fwd(ro, p.q, p.k, p.v, b, S, H, Hk, Dh);
    kern_attention_bwd(rq, rk, rv, p.dout, p.q, p.k, p.v, ro, b, S, H, Hk, Dh);
    char name[96];
    const char *what[4] = {"o", "dq", "dk", "dv"};
    double errs[4] = {max_abs_diff(o, ro, nq), max_abs_diff(dq, rq, nq), max_abs_diff(dk, rk, nk),
                      max_abs_diff(dv, rv, nk)};
    for (int i = 0; i < 4; i++) {
        snprintf(name, sizeof name, "doc NULL S=%lld H=%lld/%lld %s", (long long)S, (long long)H, (long long)Hk,
                 what[i]);
        report(name, errs[i], EXACT_TOL);
    }
    free(o), free(ro), free(dq), free(dk), free(dv), free(rq), free(rk), free(rv);
    pack_free(&p);
}

/* ---- (c) finite differences ------------------------------------------------------------ */

/* L = sum r o o over kern_docattn_fwd's output, in double. */
static double fd_loss(const pack *p, const float *r, float *o) {
    int64_t nq = p->b * p->S * p->H * p->Dh;
    kern_docattn_fwd(o, NULL, p->q, p->k, p->v, p->doc, p->b, p->S, p->H, p->Hk, p->Dh);
    double L = 0;
    for (int64_t i = 0; i < nq; i++) L += (double)o[i] * r[i];
    return L;
}

/* Every entry when n <= 300, else 150 random ones. */
static void fd_check(const char *name, float *x, int64_t n, const float *grad, const pack *p, float *o) {
    double worst = 0, worst_abs = 0;
    int64_t count = n <= 300 ? n : 150;
    for (int64_t t = 0; t < count; t++) {
        int64_t i = n <= 300 ? t : (int64_t)(urand() * (double)n);
        float x0 = x[i], xp = (float)(x0 + FD_EPS), xm = (float)(x0 - FD_EPS);
        x[i] = xp;
        double lp = fd_loss(p, p->dout, o);
        x[i] = xm;
        double lm = fd_loss(p, p->dout, o);
        x[i] = x0;
        double num = (lp - lm) / ((double)xp - (double)xm), err = fabs(grad[i] - num);
        double ratio = err / (RTOL * fmax(fabs(grad[i]), fabs(num)) + ATOL);
        if (!(ratio <= worst)) worst = ratio;
        if (!(err <= worst_abs)) worst_abs = err;
    }
    bool ok = worst <= 1.0;
    printf("  %-52s max|err|=%.3e  err/tol=%.3f  %s\n", name, worst_abs, worst, ok ? "ok" : "FAIL");
    if (!ok) g_failures++;
}

static void test_fd(int64_t b, int64_t S, int64_t H, int64_t Hk, int64_t Dh, const int *const *lens) {
    pack p;
    pack_init(&p, b, S, H, Hk, Dh, lens);
    int64_t nq = b * S * H * Dh, nk = b * S * Hk * Dh;
    float *o = fzero(nq), *dq = fzero(nq), *dk = fzero(nk), *dv = fzero(nk);
    kern_docattn_fwd(o, NULL, p.q, p.k, p.v, p.doc, b, S, H, Hk, Dh);
    kern_docattn_bwd(dq, dk, dv, p.dout, p.q, p.k, p.v, o, p.doc, b, S, H, Hk, Dh); /* dout = r */
    const char *what[3] = {"dq", "dk", "dv"};
    float *xs[3] = {p.q, p.k, p.v}, *gs[3] = {dq, dk, dv};
    int64_t ns[3] = {nq, nk, nk};
    char name[96];
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "fd b=%lld S=%lld H=%lld/%lld %s", (long long)b, (long long)S, (long long)H,
                 (long long)Hk, what[i]);
        fd_check(name, xs[i], ns[i], gs[i], &p, o);
    }
    free(o), free(dq), free(dk), free(dv);
    pack_free(&p);
}

/* ---- (d) planted bugs -------------------------------------------------------------------- */

static double worst_of(doc_err e) { return fmax(fmax(e.o, e.dq), fmax(e.dk, e.dv)); }

static void test_planted(void) {
    static const int ab[] = {37, 27, 0};
    const int *lens[1] = {ab};
    pack p;
    pack_init(&p, 1, 64, 4, 2, 16, lens);
    expect_rejected("document condition dropped (doc NULL): A+B vs alone", worst_of(docs_vs_alone(&p, NULL)));
    int32_t *moved = malloc(64 * sizeof(int32_t));
    memcpy(moved, p.doc, 64 * sizeof(int32_t));
    moved[37] = moved[36]; /* B's first token put into A */
    expect_rejected("A/B boundary moved by one token: A+B vs alone", worst_of(docs_vs_alone(&p, moved)));
    free(moved);
    pack_free(&p);
}

/* ---- (f) tiles in earlier documents are skipped ------------------------------------------ */

/* Row of S = 256: document 0 = tokens 0..127, document 1 = 128..255.  Keys
 * and values 0..63 (a whole 64-key tile of document 0) are NaN: document 1's
 * o, dq, dk, dv must still equal document 1 alone. */
static void test_skipping(void) {
    static const int halves[] = {128, 128, 0};
    const int *lens[1] = {halves};
    pack p;
    pack_init(&p, 1, 256, 2, 1, 16, lens);
    for (int64_t i = 0; i < 64 * p.Hk * p.Dh; i++) p.k[i] = p.v[i] = NAN;
    int64_t nq = 256 * p.H * p.Dh, nk = 256 * p.Hk * p.Dh;
    float *o = fzero(nq), *dq = fzero(nq), *dk = fzero(nk), *dv = fzero(nk);
    kern_docattn_fwd(o, NULL, p.q, p.k, p.v, p.doc, 1, 256, p.H, p.Hk, p.Dh);
    kern_docattn_bwd(dq, dk, dv, p.dout, p.q, p.k, p.v, o, p.doc, 1, 256, p.H, p.Hk, p.Dh);
    doc_err e = {0, 0, 0, 0, 0};
    alone_vs_packed(&p, 0, 128, 128, o, dq, dk, dv, &e);
    report("skipping: NaN keys of doc 0 tile, doc 1 vs alone", worst_of(e), EXACT_TOL);
    free(o), free(dq), free(dk), free(dv);
    pack_free(&p);
}

int main(void) {
    printf("document attention kernels: exact tol %.0e; fd rtol %.0e atol %.0e step %.0e\n", EXACT_TOL, RTOL, ATOL,
           FD_EPS);
    static const int ab[] = {37, 27, 0}, ba[] = {27, 37, 0}, one[] = {64, 0}, ones[] = {1, 1, 30, 1, 31, 0};
    static const int r0[] = {100, 1, 63, 136, 20, 0}, r1[] = {7, 250, 43, 20, 0};
    static const int f0[] = {9, 14, 1, 16, 0}, f1[] = {40, 0};
    printf("(a) every document equals itself alone (kern_attention_fwd/bwd)\n");
    test_alone("A37+B27 S=64 H=4/2", 1, 64, 4, 2, 16, (const int *const[]){ab});
    printf("(e) GQA and MHA, b=2 rows with different packings\n");
    test_alone("b=2 S=64 H=4/2", 2, 64, 4, 2, 16, (const int *const[]){ab, ones});
    test_alone("b=2 S=64 H=4/4", 2, 64, 4, 4, 16, (const int *const[]){ba, one});
    test_alone("b=2 S=320 H=4/2", 2, 320, 4, 2, 16, (const int *const[]){r0, r1});
    test_alone("b=2 S=320 H=4/4", 2, 320, 4, 4, 32, (const int *const[]){r1, r0});
    printf("(b) doc NULL equals kern_attention_fwd/bwd\n");
    test_plain(2, 64, 4, 2, 16);
    test_plain(2, 320, 4, 4, 16);
    test_plain(1, 200, 4, 2, 32);
    printf("(c) finite differences through kern_docattn_fwd\n");
    test_fd(2, 40, 4, 2, 8, (const int *const[]){f0, f1});
    test_fd(1, 40, 2, 2, 8, (const int *const[]){f0});
    printf("(d) planted bugs must fail (a)\n");
    test_planted();
    printf("(f) tiles wholly in earlier documents are skipped\n");
    test_skipping();
    if (g_failures) {
        printf("%d check(s) FAILED\n", g_failures);
        return 1;
    }
    printf("all document attention checks passed\n");
    return 0;
}
