/* test_kernels.c — the fp32 CPU kernels of runtime/host/rt_host.h.
 *
 * Every backward is compared with central finite differences of its forward:
 * for a random projection r, L(x) = sum(r o y(x)) accumulated in double, and
 * the analytic gradient (the backward fed dy = r) must match
 * (L(x + h) - L(x - h)) / 2h entry by entry within
 *   |analytic - numeric| <= RTOL * max(|analytic|, |numeric|) + ATOL.
 * Forwards are compared with naive double-precision references written here
 * (attention with an explicit causal softmax over several tiles, rope by its
 * formula, the loss by a direct logsumexp); AdamW with a step worked by hand.
 * Inputs come from a fixed seed.  Each check prints its worst error; any
 * violation makes the program exit non-zero.  A negative control at the end
 * makes sure the checker itself rejects a gradient that is 3% off. */
#include "rt_host.h"

#define KTEST_SEED 0x9E3779B97F4A7C15ull
#include "ktest.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double RTOL = 1e-2, ATOL = 1e-3, FD_EPS = 1e-3;
static int g_failures;

/* ---- helpers ------------------------------------------------------------------ */

/* A buffer full of garbage, to catch outputs that are accumulated into
 * rather than overwritten. */
static float *fgarbage(int64_t n) { return frand(n, 1e3, 2e3); }
static double proj(const float *y, const float *r, int64_t n) {
    double s = 0.0;
    for (int64_t i = 0; i < n; i++) s += (double)y[i] * r[i];
    return s;
}

/* Worst error of one named comparison. */
typedef struct stats {
    const char *name;
    double worst_ratio, worst_abs; /* error / tolerance, and |error| */
    int64_t n;
} stats;

static void st_add(stats *st, double a, double b, double rtol, double atol) {
    double err = fabs(a - b), tol = rtol * fmax(fabs(a), fabs(b)) + atol;
    double ratio = !isfinite(err) ? INFINITY : err == 0.0 ? 0.0 : err / tol; /* tol 0: exact */
    if (ratio > st->worst_ratio || st->n == 0) st->worst_ratio = ratio;
    if (err > st->worst_abs || !isfinite(err)) st->worst_abs = err;
    st->n++;
}

/* Prints one line; returns 1 if within tolerance. */
static int st_report(const stats *st) {
    int ok = st->n > 0 && st->worst_ratio <= 1.0;
    printf("  %-34s n=%-5lld max|err|=%.3e  err/tol=%.3f  %s\n", st->name, (long long)st->n, st->worst_abs,
           st->worst_ratio, ok ? "ok" : "FAIL");
    if (!ok) g_failures++;
    return ok;
}

static void compare(const char *name, const float *got, const double *want, int64_t n, double rtol, double atol) {
    stats st = {name, 0, 0, 0};
    for (int64_t i = 0; i < n; i++) st_add(&st, got[i], want[i], rtol, atol);
    st_report(&st);
}

/* got and want hold the same bits (a kernel's variants that must agree
 * exactly, not within a tolerance). */
static void check_equal_bits(const char *name, const float *got, const float *want, int64_t n) {
    int64_t bad = 0, first = -1;
    for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &want[i], sizeof(float))) bad++, first = first < 0 ? i : first;
    printf("  %-34s n=%-5lld %s", name, (long long)n, bad ? "FAIL" : "identical ok");
    if (bad)
        printf(": %lld differ, first at %lld (%.9g vs %.9g)", (long long)bad, (long long)first, (double)got[first],
               (double)want[first]);
    printf("\n");
    if (bad) g_failures++;
}

/* Central differences of loss() w.r.t. x[0..n) against grad[0..n): every
 * entry when n <= 400, else 200 random ones.  The step actually taken is
 * (float)(x+h) - (float)(x-h), not 2h, since x+h rounds in fp32. */
typedef double (*loss_fn)(void *ctx);
static stats fd_stats(const char *name, float *x, int64_t n, const float *grad, loss_fn loss, void *ctx, double h) {
    stats st = {name, 0, 0, 0};
    int64_t count = n <= 400 ? n : 200;
    for (int64_t c = 0; c < count; c++) {
        int64_t i = n <= 400 ? c : (int64_t)(urand() * (double)n);
        float x0 = x[i], xp = (float)(x0 + h), xm = (float)(x0 - h);
        x[i] = xp;
        double lp = loss(ctx);
        x[i] = xm;
        double lm = loss(ctx);
        x[i] = x0;
        st_add(&st, grad[i], (lp - lm) / ((double)xp - (double)xm), RTOL, ATOL);
    }
    return st;
}
static void fd_check(const char *name, float *x, int64_t n, const float *grad, loss_fn loss, void *ctx, double h) {
    stats st = fd_stats(name, x, n, grad, loss, ctx, h);
    st_report(&st);
}

/* ---- embedding ------------------------------------------------------------------ */

typedef struct emb_ctx {
    int32_t *tok;
    float *w, *out, *r;
    int64_t N, V, D;
} emb_ctx;
static double emb_loss(void *p) {
    emb_ctx *c = p;
    kern_embedding_fwd(c->out, c->tok, c->w, c->N, c->V, c->D);
    return proj(c->out, c->r, c->N * c->D);
}

static void test_embedding(void) {
    printf("embedding\n");
    emb_ctx c = {NULL, NULL, NULL, NULL, 11, 6, 5};
    c.tok = malloc((size_t)c.N * sizeof(int32_t));
    for (int64_t n = 0; n < c.N; n++) c.tok[n] = (int32_t)(n * 7 % 5); /* repeats; id 5 never used */
    c.w = frand(c.V * c.D, -1, 1), c.out = frand(c.N * c.D, 0, 1), c.r = frand(c.N * c.D, -1, 1);
    kern_embedding_fwd(c.out, c.tok, c.w, c.N, c.V, c.D);
    double *want = malloc((size_t)(c.N * c.D) * sizeof(double));
    for (int64_t n = 0; n < c.N; n++)
        for (int64_t d = 0; d < c.D; d++) want[n * c.D + d] = c.w[c.tok[n] * c.D + d];
    compare("embedding fwd vs gather", c.out, want, c.N * c.D, 0, 0);
    float *dw = fgarbage(c.V * c.D);
    kern_embedding_bwd(dw, c.r, c.tok, c.N, c.V, c.D);
    fd_check("embedding_bwd dw (fd)", c.w, c.V * c.D, dw, emb_loss, &c, FD_EPS);
    free(c.tok), free(c.w), free(c.out), free(c.r), free(want), free(dw);
}

/* ---- rmsnorm ---------------------------------------------------------------------- */

typedef struct rms_ctx {
    float *x, *w, *y, *r;
    int64_t N, D;
    double eps;
} rms_ctx;
static double rms_loss(void *p) {
    rms_ctx *c = p;
    kern_rmsnorm_fwd(c->y, c->x, c->w, c->N, c->D, c->eps);
    return proj(c->y, c->r, c->N * c->D);
}

static void test_rmsnorm(void) {
    printf("rmsnorm\n");
    rms_ctx c = {NULL, NULL, NULL, NULL, 6, 24, 1e-5};
    c.x = frand(c.N * c.D, -2, 2), c.w = frand(c.D, 0.5, 1.5);
    c.y = frand(c.N * c.D, 0, 1), c.r = frand(c.N * c.D, -1, 1);
    kern_rmsnorm_fwd(c.y, c.x, c.w, c.N, c.D, c.eps);
    double *want = malloc((size_t)(c.N * c.D) * sizeof(double));
    for (int64_t n = 0; n < c.N; n++) {
        double ss = 0;
        for (int64_t d = 0; d < c.D; d++) ss += (double)c.x[n * c.D + d] * c.x[n * c.D + d];
        double inv = 1.0 / sqrt(ss / (double)c.D + c.eps);
        for (int64_t d = 0; d < c.D; d++) want[n * c.D + d] = c.x[n * c.D + d] * inv * c.w[d];
    }
    compare("rmsnorm fwd vs reference", c.y, want, c.N * c.D, 1e-5, 1e-6);
    float *dx = fgarbage(c.N * c.D), *dw = fgarbage(c.D);
    kern_rmsnorm_bwd(dx, dw, c.r, c.x, c.w, c.N, c.D, c.eps);
    fd_check("rmsnorm_bwd dx (fd)", c.x, c.N * c.D, dx, rms_loss, &c, FD_EPS);
    fd_check("rmsnorm_bwd dw (fd)", c.w, c.D, dw, rms_loss, &c, FD_EPS);
    free(c.x), free(c.w), free(c.y), free(c.r), free(want), free(dx), free(dw);
}

/* The residual add fused into the norm (passes/pass_fuse_elem.c).  With
 * L = <rmsnorm(s), r> + <s, q>, dL/ds = rmsnorm_bwd's dx of dy = r, plus q:
 * add_rmsnorm_bwd's ds with dr = q. */
typedef struct add_rms_ctx {
    rms_ctx n;
    float *q;
} add_rms_ctx;
static double add_rms_loss(void *p) {
    add_rms_ctx *c = p;
    return rms_loss(&c->n) + proj(c->n.x, c->q, c->n.N * c->n.D);
}

static void test_add_rmsnorm(void) {
    printf("add_rmsnorm\n");
    int64_t N = 5, D = 40, n = N * D;
    float *a = frand(n, -2, 2), *b = frand(n, -1, 1), *w = frand(D, 0.5, 1.5);
    float *s = fgarbage(n), *y = fgarbage(n), *s2 = fgarbage(n), *y2 = fgarbage(n);
    kern_add_rmsnorm_fwd(s, y, a, b, w, N, D, 1e-5);
    double *want = malloc((size_t)n * sizeof(double));
    for (int64_t r = 0; r < N; r++) { /* the sum in double, normalised in double */
        double ss = 0;
        for (int64_t d = 0; d < D; d++)
            ss += ((double)a[r * D + d] + b[r * D + d]) * ((double)a[r * D + d] + b[r * D + d]);
        double inv = 1.0 / sqrt(ss / (double)D + 1e-5);
        for (int64_t d = 0; d < D; d++) want[r * D + d] = ((double)a[r * D + d] + b[r * D + d]) * inv * w[d];
    }
    compare("add_rmsnorm y vs reference", y, want, n, 1e-5, 1e-6);
    /* ... and bit for bit the add, then the norm: a fused step trains as an
     * unfused one (train.fuse_elem.same) */
    kern_add(s2, a, b, n);
    kern_rmsnorm_fwd(y2, s2, w, N, D, 1e-5);
    check_equal_bits("add_rmsnorm s = add", s, s2, n);
    check_equal_bits("add_rmsnorm y = add then rmsnorm", y, y2, n);

    add_rms_ctx c = {{s2, w, fgarbage(n), frand(n, -1, 1), N, D, 1e-5}, frand(n, -1, 1)};
    float *ds = fgarbage(n), *dw = fgarbage(D), *dx = fgarbage(n), *dw2 = fgarbage(D), *ds2 = fgarbage(n);
    kern_add_rmsnorm_bwd(ds, dw, c.n.r, c.n.x, w, c.q, N, D, 1e-5);
    fd_check("add_rmsnorm_bwd ds (fd)", c.n.x, n, ds, add_rms_loss, &c, FD_EPS);
    fd_check("add_rmsnorm_bwd dw (fd)", w, D, dw, add_rms_loss, &c, FD_EPS);
    kern_rmsnorm_bwd(dx, dw2, c.n.r, c.n.x, w, N, D, 1e-5);
    kern_add(ds2, c.q, dx, n);
    check_equal_bits("add_rmsnorm_bwd ds = bwd then add", ds, ds2, n);
    check_equal_bits("add_rmsnorm_bwd dw = rmsnorm_bwd", dw, dw2, D);
    memcpy(ds2, c.q, (size_t)n * sizeof(float)); /* in place: ds over dr */
    kern_add_rmsnorm_bwd(ds2, dw2, c.n.r, c.n.x, w, ds2, N, D, 1e-5);
    check_equal_bits("add_rmsnorm_bwd ds in place of dr", ds2, ds, n);
    free(a), free(b), free(w), free(s), free(y), free(s2), free(y2), free(want), free(c.n.y), free(c.n.r), free(c.q);
    free(ds), free(dw), free(dx), free(dw2), free(ds2);
}

/* ---- rope ------------------------------------------------------------------------------ */

typedef struct rope_ctx {
    float *x, *y, *r;
    int64_t b, S, H, Dh, pos0;
    double theta;
    const kern_rope_scaling *sc; /* NULL: unscaled */
} rope_ctx;
static double rope_loss(void *p) {
    rope_ctx *c = p;
    kern_rope_fwd(c->y, c->x, c->b, c->S, c->H, c->Dh, c->pos0, c->theta, c->sc);
    return proj(c->y, c->r, c->b * c->S * c->H * c->Dh);
}

/* Llama 3 scaling straight from its definition (transformers'
 * _compute_llama3_parameters), in double; hits[0..2] count the pairs that
 * took the low-frequency (divided), high-frequency (kept) and interpolated
 * branch, so a test can insist that every branch was exercised. */
static double llama3_inv_freq_reference(double inv_freq, const kern_rope_scaling *sc, int hits[3]) {
    double old_context_len = (double)sc->original_max_pos;
    double low_freq_wavelen = old_context_len / sc->low_freq_factor;
    double high_freq_wavelen = old_context_len / sc->high_freq_factor;
    const double pi = 3.14159265358979323846;
    double wavelen = 2.0 * pi / inv_freq;
    if (wavelen > low_freq_wavelen) {
        hits[0]++;
        return inv_freq / sc->factor;
    }
    if (wavelen < high_freq_wavelen) {
        hits[1]++;
        return inv_freq;
    }
    hits[2]++;
    double smooth = (old_context_len / wavelen - sc->low_freq_factor) / (sc->high_freq_factor - sc->low_freq_factor);
    return (1.0 - smooth) * inv_freq / sc->factor + smooth * inv_freq;
}

/* y by the formula: pair (i, i+Dh/2) rotated by (pos0+si) * inv_freq_i,
 * inv_freq_i = theta^(-2i/Dh), scaled when c->sc is set. */
static void rope_reference(double *want, const rope_ctx *c, int hits[3]) {
    int64_t half = c->Dh / 2;
    double *inv = malloc((size_t)half * sizeof(double));
    for (int64_t i = 0; i < half; i++) {
        inv[i] = 1.0 / pow(c->theta, (double)(2 * i) / (double)c->Dh);
        if (c->sc) inv[i] = llama3_inv_freq_reference(inv[i], c->sc, hits);
    }
    for (int64_t bi = 0; bi < c->b; bi++)
        for (int64_t si = 0; si < c->S; si++)
            for (int64_t h = 0; h < c->H; h++)
                for (int64_t i = 0; i < half; i++) {
                    int64_t o = ((bi * c->S + si) * c->H + h) * c->Dh;
                    double a = (double)(c->pos0 + si) * inv[i];
                    double x0 = c->x[o + i], x1 = c->x[o + i + half];
                    want[o + i] = x0 * cos(a) - x1 * sin(a);
                    want[o + i + half] = x1 * cos(a) + x0 * sin(a);
                }
    free(inv);
}

/* Forward against the reference, backward against finite differences. */
static void rope_case(const char *label, rope_ctx c, int hits[3]) {
    char name[64];
    int64_t n = c.b * c.S * c.H * c.Dh;
    c.x = frand(n, -1, 1), c.y = frand(n, 0, 1), c.r = frand(n, -1, 1);
    double *want = malloc((size_t)n * sizeof(double));
    kern_rope_fwd(c.y, c.x, c.b, c.S, c.H, c.Dh, c.pos0, c.theta, c.sc);
    rope_reference(want, &c, hits);
    snprintf(name, sizeof name, "rope fwd vs formula (%s)", label);
    compare(name, c.y, want, n, 1e-5, 1e-6);
    float *dx = fgarbage(n);
    kern_rope_bwd(dx, c.r, c.b, c.S, c.H, c.Dh, c.pos0, c.theta, c.sc);
    snprintf(name, sizeof name, "rope_bwd dx (fd, %s)", label);
    fd_check(name, c.x, n, dx, rope_loss, &c, FD_EPS);
    free(c.x), free(c.y), free(c.r), free(want), free(dx);
}

static void test_rope(void) {
    printf("rope\n");
    int hits[3] = {0, 0, 0};
    /* A long-context offset stresses the angle precision. */
    rope_case("pos0=3", (rope_ctx){NULL, NULL, NULL, 2, 7, 3, 8, 3, 10000.0, NULL}, hits);
    rope_case("pos0=131000", (rope_ctx){NULL, NULL, NULL, 2, 7, 3, 8, 131000, 500000.0, NULL}, hits);
    /* Llama 3.2's parameters: with theta 5e5 and Dh 8 the wavelengths are
     * 6.3, 167, 4443 and 118k, against bands at 2048 and 8192, so one pair
     * is interpolated and one divided. */
    kern_rope_scaling l32 = {32.0, 1.0, 4.0, 8192};
    rope_case("llama3/32, pos0=131000", (rope_ctx){NULL, NULL, NULL, 2, 7, 3, 8, 131000, 500000.0, &l32}, hits);
    /* A short original context puts every branch inside a 16-wide head:
     * wavelengths 6.3 (kept), 19.9 and 62.8 (interpolated), the rest divided. */
    kern_rope_scaling small = {8.0, 1.0, 4.0, 64};
    rope_case("llama3/8 orig=64", (rope_ctx){NULL, NULL, NULL, 2, 7, 3, 16, 5, 10000.0, &small}, hits);
    /* The same shape again, unscaled and then with another factor: the
     * kernel's cos/sin cache must not hand back the previous table. */
    rope_case("unscaled, same shape", (rope_ctx){NULL, NULL, NULL, 2, 7, 3, 16, 5, 10000.0, NULL}, hits);
    kern_rope_scaling small2 = {2.0, 1.0, 4.0, 64};
    rope_case("llama3/2, same shape", (rope_ctx){NULL, NULL, NULL, 2, 7, 3, 16, 5, 10000.0, &small2}, hits);
    int ok = hits[0] > 0 && hits[1] > 0 && hits[2] > 0;
    printf("  %-34s divided=%d kept=%d interpolated=%d  %s\n", "llama3 branches exercised", hits[0], hits[1], hits[2],
           ok ? "ok" : "FAIL");
    if (!ok) g_failures++;
}

/* ---- swiglu, add -------------------------------------------------------------------------- */

typedef struct swi_ctx {
    float *g, *u, *y, *r;
    int64_t n;
} swi_ctx;
static double swi_loss(void *p) {
    swi_ctx *c = p;
    kern_swiglu_fwd(c->y, c->g, c->u, c->n);
    return proj(c->y, c->r, c->n);
}

static void test_swiglu_add(void) {
    printf("swiglu, add\n");
    swi_ctx c = {NULL, NULL, NULL, NULL, 300};
    c.g = frand(c.n, -6, 6), c.u = frand(c.n, -2, 2), c.y = frand(c.n, 0, 1), c.r = frand(c.n, -1, 1);
    double *want = malloc((size_t)c.n * sizeof(double));
    kern_swiglu_fwd(c.y, c.g, c.u, c.n);
    for (int64_t i = 0; i < c.n; i++) want[i] = c.g[i] / (1.0 + exp(-(double)c.g[i])) * c.u[i];
    compare("swiglu fwd vs reference", c.y, want, c.n, 1e-5, 1e-6);
    float *dg = fgarbage(c.n), *du = fgarbage(c.n);
    kern_swiglu_bwd(dg, du, c.r, c.g, c.u, c.n);
    fd_check("swiglu_bwd dg (fd)", c.g, c.n, dg, swi_loss, &c, FD_EPS);
    fd_check("swiglu_bwd du (fd)", c.u, c.n, du, swi_loss, &c, FD_EPS);
    /* Saturation and the analytic gradient, in double: g over +-100 (the
     * sigmoid's exp flushes to 0 below -87), n = 300 (a vector tail). */
    for (int64_t i = 0; i < c.n; i++) c.g[i] = (float)((i % 2 ? -1 : 1) * (double)i * i / 900.0);
    double *wg = malloc((size_t)c.n * sizeof(double)), *wu = malloc((size_t)c.n * sizeof(double));
    for (int64_t i = 0; i < c.n; i++) {
        double g = c.g[i], sg = 1.0 / (1.0 + exp(-g));
        want[i] = g * sg * c.u[i];
        wg[i] = c.r[i] * c.u[i] * sg * (1.0 + g * (1.0 - sg)), wu[i] = c.r[i] * g * sg;
    }
    kern_swiglu_fwd(c.y, c.g, c.u, c.n);
    compare("swiglu fwd, |g| up to 100", c.y, want, c.n, 1e-5, 1e-6);
    kern_swiglu_bwd(dg, du, c.r, c.g, c.u, c.n);
    compare("swiglu_bwd dg vs analytic", dg, wg, c.n, 1e-5, 1e-6);
    compare("swiglu_bwd du vs analytic", du, wu, c.n, 1e-5, 1e-6);
    free(wg), free(wu);
    kern_add(c.y, c.g, c.u, c.n);
    for (int64_t i = 0; i < c.n; i++) want[i] = (double)(c.g[i] + c.u[i]);
    compare("add vs reference", c.y, want, c.n, 0, 0);
    free(c.g), free(c.u), free(c.y), free(c.r), free(want), free(dg), free(du);
}

/* ---- linear ------------------------------------------------------------------------------------ */

typedef struct lin_ctx {
    float *x, *w, *y, *r;
    int64_t N, I, O;
} lin_ctx;
static double lin_loss(void *p) {
    lin_ctx *c = p;
    kern_linear_fwd(c->y, c->x, c->w, c->N, c->I, c->O);
    return proj(c->y, c->r, c->N * c->O);
}

static void test_linear(void) {
    printf("linear\n");
    lin_ctx c = {NULL, NULL, NULL, NULL, 9, 13, 6};
    c.x = frand(c.N * c.I, -1, 1), c.w = frand(c.I * c.O, -1, 1);
    c.y = frand(c.N * c.O, 0, 1), c.r = frand(c.N * c.O, -1, 1);
    kern_linear_fwd(c.y, c.x, c.w, c.N, c.I, c.O);
    double *want = calloc((size_t)(c.N * c.O), sizeof(double));
    for (int64_t n = 0; n < c.N; n++)
        for (int64_t o = 0; o < c.O; o++)
            for (int64_t i = 0; i < c.I; i++) want[n * c.O + o] += (double)c.x[n * c.I + i] * c.w[i * c.O + o];
    compare("linear fwd vs naive matmul", c.y, want, c.N * c.O, 1e-5, 1e-5);
    float *dx = fgarbage(c.N * c.I), *dw = fgarbage(c.I * c.O);
    kern_linear_bwd(dx, dw, c.r, c.x, c.w, c.N, c.I, c.O);
    fd_check("linear_bwd dx (fd)", c.x, c.N * c.I, dx, lin_loss, &c, FD_EPS);
    fd_check("linear_bwd dw (fd)", c.w, c.I * c.O, dw, lin_loss, &c, FD_EPS);
    free(c.x), free(c.w), free(c.y), free(c.r), free(want), free(dx), free(dw);
}

/* ---- bias ------------------------------------------------------------------------------------------ */

typedef struct bias_ctx {
    float *x, *b, *y, *r;
    int64_t N, M;
} bias_ctx;
static double bias_loss(void *p) {
    bias_ctx *c = p;
    kern_bias_add_fwd(c->y, c->x, c->b, c->N, c->M);
    return proj(c->y, c->r, c->N * c->M);
}

static void test_bias_add(void) {
    printf("bias_add\n");
    bias_ctx c = {NULL, NULL, NULL, NULL, 7, 12};
    c.x = frand(c.N * c.M, -1, 1), c.b = frand(c.M, -1, 1), c.y = fgarbage(c.N * c.M), c.r = frand(c.N * c.M, -1, 1);
    kern_bias_add_fwd(c.y, c.x, c.b, c.N, c.M);
    double *want = calloc((size_t)(c.N * c.M), sizeof(double));
    for (int64_t n = 0; n < c.N; n++)
        for (int64_t j = 0; j < c.M; j++) want[n * c.M + j] = (double)c.x[n * c.M + j] + c.b[j];
    compare("bias_add fwd vs formula", c.y, want, c.N * c.M, 1e-6, 1e-7);
    float *db = fgarbage(c.M);
    kern_bias_add_bwd(db, c.r, c.N, c.M);
    fd_check("bias_add_bwd db (fd)", c.b, c.M, db, bias_loss, &c, FD_EPS);
    free(c.x), free(c.b), free(c.y), free(c.r), free(want), free(db);
}

/* ---- tiled MLP ------------------------------------------------------------------------------------ */

typedef struct mlp_ctx {
    float *x, *wg, *wu, *wd, *y, *r;
    int64_t N, D, F, chunk;
} mlp_ctx;
static double mlp_loss(void *p) {
    mlp_ctx *c = p;
    kern_mlp_fwd(c->y, c->x, c->wg, c->wu, c->wd, c->N, c->D, c->F, c->chunk);
    return proj(c->y, c->r, c->N * c->D);
}

/* y = (silu(x wg) * (x wu)) wd in double, straight from the formula. */
static void mlp_reference(double *want, const mlp_ctx *c) {
    double *s = calloc((size_t)c->F, sizeof(double));
    for (int64_t n = 0; n < c->N; n++) {
        for (int64_t f = 0; f < c->F; f++) {
            double g = 0, u = 0;
            for (int64_t d = 0; d < c->D; d++)
                g += (double)c->x[n * c->D + d] * c->wg[d * c->F + f],
                    u += (double)c->x[n * c->D + d] * c->wu[d * c->F + f];
            s[f] = g / (1.0 + exp(-g)) * u;
        }
        for (int64_t d = 0; d < c->D; d++) {
            want[n * c->D + d] = 0;
            for (int64_t f = 0; f < c->F; f++) want[n * c->D + d] += s[f] * c->wd[f * c->D + d];
        }
    }
    free(s);
}

/* Chunks of 0 (all rows at once), 1, and 4 rows (not dividing N = 9, so the
 * last chunk is short): the forward against the formula, the backward
 * against finite differences of the forward; weight gradients accumulated
 * over chunks into garbage-filled buffers must be overwritten first. */
static void test_mlp(void) {
    printf("mlp (fused, tiled)\n");
    static const int64_t chunks[] = {0, 1, 4};
    for (int k = 0; k < 3; k++) {
        mlp_ctx c = {NULL, NULL, NULL, NULL, NULL, NULL, 9, 6, 10, chunks[k]};
        c.x = frand(c.N * c.D, -1, 1), c.wg = frand(c.D * c.F, -1, 1), c.wu = frand(c.D * c.F, -1, 1);
        c.wd = frand(c.F * c.D, -1, 1), c.y = fgarbage(c.N * c.D), c.r = frand(c.N * c.D, -1, 1);
        double *want = calloc((size_t)(c.N * c.D), sizeof(double));
        mlp_reference(want, &c);
        kern_mlp_fwd(c.y, c.x, c.wg, c.wu, c.wd, c.N, c.D, c.F, c.chunk);
        char name[64];
        snprintf(name, sizeof name, "mlp fwd vs formula, chunk %lld", (long long)c.chunk);
        compare(name, c.y, want, c.N * c.D, 1e-5, 1e-5);
        float *dx = fgarbage(c.N * c.D), *dwg = fgarbage(c.D * c.F), *dwu = fgarbage(c.D * c.F);
        float *dwd = fgarbage(c.F * c.D);
        kern_mlp_bwd(dx, dwg, dwu, dwd, c.r, c.x, c.wg, c.wu, c.wd, c.N, c.D, c.F, c.chunk);
        struct {
            const char *what;
            float *v, *g;
            int64_t n;
        } fd[] = {{"dx", c.x, dx, c.N * c.D},
                  {"dw_gate", c.wg, dwg, c.D * c.F},
                  {"dw_up", c.wu, dwu, c.D * c.F},
                  {"dw_down", c.wd, dwd, c.F * c.D}};
        for (int i = 0; i < 4; i++) {
            snprintf(name, sizeof name, "mlp_bwd %s (fd), chunk %lld", fd[i].what, (long long)c.chunk);
            fd_check(name, fd[i].v, fd[i].n, fd[i].g, mlp_loss, &c, FD_EPS);
        }
        free(c.x), free(c.wg), free(c.wu), free(c.wd), free(c.y), free(c.r), free(want);
        free(dx), free(dwg), free(dwu), free(dwd);
    }
}

/* ---- attention ------------------------------------------------------------------------------------ */

typedef struct att_ctx {
    float *q, *k, *v, *o, *r;
    int64_t b, S, H, Hkv, Dh;
} att_ctx;
static double att_loss(void *p) {
    att_ctx *c = p;
    kern_attention_fwd(c->o, c->q, c->k, c->v, c->b, c->S, c->H, c->Hkv, c->Dh);
    return proj(c->o, c->r, c->b * c->S * c->H * c->Dh);
}

/* softmax(q k^T / sqrt(Dh)) v with the causal mask, in double, one row at a
 * time; q head h reads kv head h / (H/Hkv). */
static void attention_reference_lse(double *want, double *lse, const att_ctx *c) {
    int64_t S = c->S, H = c->H, Hkv = c->Hkv, Dh = c->Dh, rep = H / Hkv;
    double *p = malloc((size_t)S * sizeof(double)), sc = 1.0 / sqrt((double)Dh);
    for (int64_t bi = 0; bi < c->b; bi++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < S; i++) {
                const float *qi = c->q + ((bi * S + i) * H + h) * Dh;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const float *kj = c->k + ((bi * S + j) * Hkv + h / rep) * Dh;
                    double dot = 0;
                    for (int64_t d = 0; d < Dh; d++) dot += (double)qi[d] * kj[d];
                    p[j] = dot * sc;
                    mx = fmax(mx, p[j]);
                }
                for (int64_t j = 0; j <= i; j++) sum += (p[j] = exp(p[j] - mx));
                if (lse) lse[(bi * H + h) * S + i] = mx + log(sum);
                double *oi = want + ((bi * S + i) * H + h) * Dh;
                for (int64_t d = 0; d < Dh; d++) {
                    double acc = 0;
                    for (int64_t j = 0; j <= i; j++) acc += p[j] * c->v[((bi * S + j) * Hkv + h / rep) * Dh + d];
                    oi[d] = acc / sum;
                }
            }
    free(p);
}
static void attention_reference(double *want, const att_ctx *c) { attention_reference_lse(want, NULL, c); }

static void att_alloc(att_ctx *c, double amp) {
    int64_t nq = c->b * c->S * c->H * c->Dh, nk = c->b * c->S * c->Hkv * c->Dh;
    c->q = frand(nq, -amp, amp), c->k = frand(nk, -amp, amp), c->v = frand(nk, -1, 1);
    c->o = frand(nq, 0, 1), c->r = frand(nq, -1, 1);
}
static void att_free(att_ctx *c) { free(c->q), free(c->k), free(c->v), free(c->o), free(c->r); }

static void test_attention_fwd(int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    att_ctx c = {NULL, NULL, NULL, NULL, NULL, b, S, H, Hkv, Dh};
    att_alloc(&c, 2.0); /* |scores| up to ~Dh/sqrt(Dh)*4: peaked softmaxes */
    int64_t n = b * S * H * Dh;
    double *want = malloc((size_t)n * sizeof(double));
    kern_attention_fwd(c.o, c.q, c.k, c.v, b, S, H, Hkv, Dh);
    attention_reference(want, &c);
    char name[80];
    snprintf(name, sizeof name, "attention fwd vs naive S=%lld H=%lld/%lld", (long long)S, (long long)H,
             (long long)Hkv);
    compare(name, c.o, want, n, 1e-4, 1e-5);
    /* The forward that keeps its rows' logsumexp: the same o bit for bit,
     * and lse [b,H,S] as the reference's (its scores are up to ~8 here,
     * so 1e-5 relative is a few fp32 ulps of the exp sums). */
    int64_t nr = b * H * S;
    float *o2 = fgarbage(n), *lse = fgarbage(nr);
    double *want_lse = malloc((size_t)nr * sizeof(double));
    kern_attention_fwd_lse(o2, lse, c.q, c.k, c.v, b, S, H, Hkv, Dh);
    attention_reference_lse(want, want_lse, &c);
    snprintf(name, sizeof name, "attention fwd lse vs naive S=%lld H=%lld/%lld", (long long)S, (long long)H,
             (long long)Hkv);
    compare(name, lse, want_lse, nr, 1e-5, 1e-5);
    check_equal_bits("attention fwd with lse: o", o2, c.o, n);
    free(o2), free(lse), free(want_lse);
    free(want);
    att_free(&c);
}

static void test_attention_bwd(int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    att_ctx c = {NULL, NULL, NULL, NULL, NULL, b, S, H, Hkv, Dh};
    att_alloc(&c, 1.0);
    int64_t nq = b * S * H * Dh, nk = b * S * Hkv * Dh;
    float *dq = fgarbage(nq), *dk = fgarbage(nk), *dv = fgarbage(nk);
    kern_attention_fwd(c.o, c.q, c.k, c.v, b, S, H, Hkv, Dh);
    kern_attention_bwd(dq, dk, dv, c.r, c.q, c.k, c.v, c.o, b, S, H, Hkv, Dh);
    char name[80];
    const char *what[3] = {"dq", "dk", "dv"};
    float *xs[3] = {c.q, c.k, c.v}, *gs[3] = {dq, dk, dv};
    int64_t ns[3] = {nq, nk, nk};
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "attention_bwd %s (fd) S=%lld H=%lld/%lld", what[i], (long long)S, (long long)H,
                 (long long)Hkv);
        fd_check(name, xs[i], ns[i], gs[i], att_loss, &c, FD_EPS);
    }
    /* With the forward's logsumexp the backward skips its first pass and
     * must give the same gradients bit for bit (training relies on it:
     * runtime/cpu/rt_kernels.c keeps it per forward). */
    float *lse = fgarbage(b * H * S), *g2[3] = {fgarbage(nq), fgarbage(nk), fgarbage(nk)};
    kern_attention_fwd_lse(c.o, lse, c.q, c.k, c.v, b, S, H, Hkv, Dh);
    kern_attention_bwd(dq, dk, dv, c.r, c.q, c.k, c.v, c.o, b, S, H, Hkv, Dh);
    kern_attention_bwd_lse(g2[0], g2[1], g2[2], c.r, c.q, c.k, c.v, c.o, lse, b, S, H, Hkv, Dh);
    for (int i = 0; i < 3; i++) {
        snprintf(name, sizeof name, "attention_bwd with the forward's lse: %s", what[i]);
        check_equal_bits(name, g2[i], gs[i], ns[i]);
        free(g2[i]);
    }
    free(lse);
    free(dq), free(dk), free(dv);
    att_free(&c);
}

static void test_attention(void) {
    printf("attention\n");
    test_attention_fwd(2, 7, 4, 2, 8);
    test_attention_fwd(1, 67, 4, 1, 16);
    test_attention_fwd(2, 130, 4, 2, 16);
    test_attention_fwd(1, 300, 2, 2, 64);
    test_attention_bwd(2, 7, 4, 2, 8);
    test_attention_bwd(1, 67, 4, 4, 8);
    test_attention_bwd(1, 200, 4, 1, 8); /* several query and key blocks */
}

/* ---- lm head + loss ---------------------------------------------------------------------------------- */

typedef struct lm_ctx {
    float *x, *w;
    int32_t *tgt;
    int64_t N, V, D;
    double scale;
} lm_ctx;
static double lm_loss(void *p) {
    lm_ctx *c = p;
    float loss;
    kern_lm_head_loss_fwd(&loss, c->x, c->w, c->tgt, c->N, c->V, c->D);
    return loss * c->scale;
}

static double lm_reference(const lm_ctx *c) {
    double total = 0;
    double *lg = malloc((size_t)c->V * sizeof(double));
    for (int64_t n = 0; n < c->N; n++) {
        if (c->tgt[n] < 0) continue;
        double mx = -INFINITY, sum = 0;
        for (int64_t v = 0; v < c->V; v++) {
            lg[v] = 0;
            for (int64_t d = 0; d < c->D; d++) lg[v] += (double)c->x[n * c->D + d] * c->w[v * c->D + d];
            mx = fmax(mx, lg[v]);
        }
        for (int64_t v = 0; v < c->V; v++) sum += exp(lg[v] - mx);
        total += mx + log(sum) - lg[c->tgt[n]];
    }
    free(lg);
    return total;
}

/* dx, dw of loss * scale in double, straight from the definition. */
static void lm_grad_reference(double *dx, double *dw, const lm_ctx *c) {
    int64_t V = c->V, D = c->D;
    double *p = malloc((size_t)V * sizeof(double));
    memset(dx, 0, (size_t)(c->N * D) * sizeof(double));
    memset(dw, 0, (size_t)(V * D) * sizeof(double));
    for (int64_t n = 0; n < c->N; n++) {
        if (c->tgt[n] < 0) continue;
        double mx = -INFINITY, sum = 0;
        for (int64_t v = 0; v < V; v++) {
            p[v] = 0;
            for (int64_t d = 0; d < D; d++) p[v] += (double)c->x[n * D + d] * c->w[v * D + d];
            mx = fmax(mx, p[v]);
        }
        for (int64_t v = 0; v < V; v++) sum += (p[v] = exp(p[v] - mx));
        for (int64_t v = 0; v < V; v++) {
            double g = (p[v] / sum - (v == c->tgt[n])) * c->scale;
            for (int64_t d = 0; d < D; d++) {
                dx[n * D + d] += g * c->w[v * D + d];
                dw[v * D + d] += g * c->x[n * D + d];
            }
        }
    }
    free(p);
}

static void lm_alloc(lm_ctx *c, int ignore_every) {
    c->x = frand(c->N * c->D, -1, 1), c->w = frand(c->V * c->D, -0.7, 0.7);
    c->tgt = malloc((size_t)c->N * sizeof(int32_t));
    for (int64_t n = 0; n < c->N; n++) c->tgt[n] = n % ignore_every == 1 ? -1 : (int32_t)(urand() * (double)c->V);
}

/* The blocked kernels against the double references on a shape of several
 * row chunks and vocabulary slices (CM_LM_HEAD_ROWS x CM_LM_HEAD_COLS), both
 * ragged: N = 2 ROWS + 77, V = 2 COLS + 89 (the last slice is not a
 * multiple of 16, so its padding columns are live).  Every 7th target is
 * ignored, and row 0, the last row and the first row of the second chunk
 * aim at the last column (the last slice's one-hot).
 * xamp scales x: at 1 the logits are ~1; at 60 they reach +-100 and more,
 * where exp() of a raw logit overflows in float, so only a logsumexp that rescales
 * its running sum when a later slice raises the row max gives a finite,
 * correct loss.
 * Tolerances: the loss sums N per-row terms computed from float logits
 * (each off by ~D ulp of its size, errors of both signs) and combined in
 * double: relative 1e-6 (the float result alone rounds by 6e-8; measured
 * below 1e-7).  The gradients:
 * dl = exp(l - lse) with l and lse in float, so each softmax entry carries a
 * relative error of ~ulp(|lse|) (1e-7 at xamp 1, ~1e-5 at xamp 60),
 * and dx, dw sum V or N such terms, which partly cancel (each dl row sums
 * to 0): rtol 1e-4 with an absolute floor of 1e-4 of the gradient's scale
 * (scale * max|w| for dx, scale * max|x| for dw) covers them with a margin
 * of ~10 while a missing one-hot (an error of scale) or one slice's wrong
 * scale fails by orders of magnitude. */
static void test_lm_head_blocked(double xamp) {
    int64_t R = CM_LM_HEAD_ROWS, C = CM_LM_HEAD_COLS;
    lm_ctx c = {NULL, NULL, NULL, 2 * R + 77, 2 * C + 89, 10, 1.0 / 700.0};
    lm_alloc(&c, 7);
    for (int64_t i = 0; i < c.N * c.D; i++) c.x[i] *= (float)xamp;
    c.tgt[0] = c.tgt[R] = c.tgt[c.N - 1] = (int32_t)(c.V - 1);
    char name[80];
    float loss;
    kern_lm_head_loss_fwd(&loss, c.x, c.w, c.tgt, c.N, c.V, c.D);
    double want = lm_reference(&c);
    snprintf(name, sizeof name, "lm_head fwd blocked, x*%g", xamp);
    compare(name, &loss, &want, 1, 1e-6, 0);
    float *dx = fgarbage(c.N * c.D), *dw = fgarbage(c.V * c.D);
    double *rdx = malloc((size_t)(c.N * c.D) * sizeof(double)), *rdw = malloc((size_t)(c.V * c.D) * sizeof(double));
    kern_lm_head_loss_bwd(dx, dw, c.x, c.w, c.tgt, c.N, c.V, c.D, c.scale);
    lm_grad_reference(rdx, rdw, &c);
    snprintf(name, sizeof name, "lm_head bwd blocked dx, x*%g", xamp);
    compare(name, dx, rdx, c.N * c.D, 1e-4, 1e-4 * c.scale * 0.7);
    snprintf(name, sizeof name, "lm_head bwd blocked dw, x*%g", xamp);
    compare(name, dw, rdw, c.V * c.D, 1e-4, 1e-4 * c.scale * xamp);
    /* The fused loss and gradient (the fuse-loss pass's op), against the
     * same double references with the same tolerances. */
    float floss, *fdx = fgarbage(c.N * c.D), *fdw = fgarbage(c.V * c.D);
    kern_lm_head_loss_grad(&floss, fdx, fdw, c.x, c.w, c.tgt, c.N, c.V, c.D, c.scale);
    snprintf(name, sizeof name, "lm_head grad blocked loss, x*%g", xamp);
    compare(name, &floss, &want, 1, 1e-6, 0);
    snprintf(name, sizeof name, "lm_head grad blocked dx, x*%g", xamp);
    compare(name, fdx, rdx, c.N * c.D, 1e-4, 1e-4 * c.scale * 0.7);
    snprintf(name, sizeof name, "lm_head grad blocked dw, x*%g", xamp);
    compare(name, fdw, rdw, c.V * c.D, 1e-4, 1e-4 * c.scale * xamp);
    /* ... and bit for bit the two separate kernels: the same blocks, the
     * same sums in the same order (a fused step trains as an unfused one). */
    check_equal_bits("lm_head grad loss = fwd", &floss, &loss, 1);
    check_equal_bits("lm_head grad dx = bwd", fdx, dx, c.N * c.D);
    check_equal_bits("lm_head grad dw = bwd", fdw, dw, c.V * c.D);
    free(c.x), free(c.w), free(c.tgt), free(dx), free(dw), free(fdx), free(fdw), free(rdx), free(rdw);
}

/* The fused op where no logits GEMM runs: no rows (dw zeroed, loss 0) and
 * no hidden dims (every logit 0: each counted row's loss is log V). */
static void test_lm_head_grad_empty(void) {
    int32_t tgt[3] = {2, -1, 0};
    float loss = -1, w[4 * 2], dw[4 * 2], x[3 * 2] = {0}, dx[3 * 2];
    for (int i = 0; i < 8; i++) w[i] = 0.5f, dw[i] = 7.0f;
    kern_lm_head_loss_grad(&loss, dx, dw, x, w, tgt, 0, 4, 2, 1.0);
    double zero = 0, zeros[8] = {0};
    compare("lm_head grad N=0 loss", &loss, &zero, 1, 0, 0);
    compare("lm_head grad N=0 dw zeroed", dw, zeros, 8, 0, 0);
    kern_lm_head_loss_grad(&loss, dx, dw, x, w, tgt, 3, 4, 0, 1.0);
    double want = 2 * log(4.0);
    compare("lm_head grad D=0 loss", &loss, &want, 1, 1e-6, 0);
}

static void test_lm_head(void) {
    printf("lm_head_loss\n");
    /* N = 150 rows, V = 37: one row chunk, one vocabulary slice (the blocked
     * shapes are test_lm_head_blocked's); every 7th target is ignored. */
    lm_ctx c = {NULL, NULL, NULL, 150, 37, 12, 1.0 / 150.0};
    lm_alloc(&c, 7);
    float loss;
    kern_lm_head_loss_fwd(&loss, c.x, c.w, c.tgt, c.N, c.V, c.D);
    double want = lm_reference(&c);
    compare("lm_head_loss fwd vs naive", &loss, &want, 1, 1e-6, 1e-5);
    float *dx = fgarbage(c.N * c.D), *dw = fgarbage(c.V * c.D);
    double *rdx = malloc((size_t)(c.N * c.D) * sizeof(double)), *rdw = malloc((size_t)(c.V * c.D) * sizeof(double));
    kern_lm_head_loss_bwd(dx, dw, c.x, c.w, c.tgt, c.N, c.V, c.D, c.scale);
    lm_grad_reference(rdx, rdw, &c);
    compare("lm_head_loss_bwd dx vs reference", dx, rdx, c.N * c.D, 1e-4, 1e-8);
    compare("lm_head_loss_bwd dw vs reference", dw, rdw, c.V * c.D, 1e-4, 1e-8);
    free(c.x), free(c.w), free(c.tgt), free(dx), free(dw), free(rdx), free(rdw);

    /* Finite differences on 70 rows, every other one ignored,
     * scale 1.  The loss comes back as a float of ~130 whose rounding
     * (~1e-5, with the float logits') would be ~5e-3 of noise at a 1e-3
     * step; the loss is smooth (curvature ~|w|^2 ~ 0.5), so a 2e-2 step cuts
     * the noise twentyfold while the truncation error stays ~1e-4 relative. */
    lm_ctx f = {NULL, NULL, NULL, 70, 37, 12, 1.0};
    lm_alloc(&f, 2);
    dx = fgarbage(f.N * f.D), dw = fgarbage(f.V * f.D);
    kern_lm_head_loss_bwd(dx, dw, f.x, f.w, f.tgt, f.N, f.V, f.D, f.scale);
    fd_check("lm_head_loss_bwd dx (fd)", f.x, f.N * f.D, dx, lm_loss, &f, 2e-2);
    fd_check("lm_head_loss_bwd dw (fd)", f.w, f.V * f.D, dw, lm_loss, &f, 2e-2);
    stats ign = {"lm_head_loss_bwd dx ignored rows", 0, 0, 0};
    for (int64_t n = 1; n < f.N; n += 2)
        for (int64_t d = 0; d < f.D; d++) st_add(&ign, dx[n * f.D + d], 0.0, 0, 0);
    st_report(&ign);
    free(f.x), free(f.w), free(f.tgt), free(dx), free(dw);
    test_lm_head_blocked(1.0);
    test_lm_head_blocked(60.0);
    test_lm_head_grad_empty();
}

/* ---- adamw, sumsq -------------------------------------------------------------------------------------- */

static void test_adamw(void) {
    printf("adamw, sumsq\n");
    float p[4] = {0.5f, -1.0f, 2.0f, 0.0f}, m[4] = {0}, v[4] = {0};
    const float g1[4] = {0.1f, -0.2f, 0.0f, 3.0f}, g2[4] = {0.3f, 0.1f, -0.4f, -1.0f};
    double lr = 1e-2, b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1, gs = 0.5;
    /* Step 1 by hand: m = 0.1 g, v = 0.001 g^2, so the bias-corrected ratio is
     * g/|g| (to eps): p1 = p (1 - lr wd) - lr sign(g); a zero gradient gives
     * exactly the decay. */
    double want1[4] = {0.5 * 0.999 - 0.01, -1.0 * 0.999 + 0.01, 2.0 * 0.999, 0.0 - 0.01};
    kern_adamw(p, m, v, g1, 4, lr, b1, b2, eps, wd, 1, gs);
    compare("adamw step 1 vs hand values", p, want1, 4, 1e-6, 1e-6);
    /* Step 2 from the recurrences in double. */
    double pd[4], md[4], vd[4], want2[4];
    for (int i = 0; i < 4; i++) {
        double ga = g1[i] * gs, gb = g2[i] * gs;
        md[i] = 0.1 * ga, vd[i] = 0.001 * ga * ga, pd[i] = want1[i];
        md[i] = 0.9 * md[i] + 0.1 * gb, vd[i] = 0.999 * vd[i] + 0.001 * gb * gb;
        double mh = md[i] / (1 - 0.81), vh = vd[i] / (1 - 0.999 * 0.999);
        want2[i] = pd[i] * (1 - lr * wd) - lr * mh / (sqrt(vh) + eps);
    }
    kern_adamw(p, m, v, g2, 4, lr, b1, b2, eps, wd, 2, gs);
    compare("adamw step 2 vs recurrences", p, want2, 4, 1e-6, 1e-6);
    compare("adamw step 2 first moment", m, md, 4, 1e-6, 1e-9);
    compare("adamw step 2 second moment", v, vd, 4, 1e-5, 1e-12);
    int64_t n = 1001;
    float *x = frand(n, -3, 3);
    double want = 0;
    for (int64_t i = 0; i < n; i++) want += (double)x[i] * x[i];
    double got = kern_sumsq(x, n);
    stats st = {"sumsq vs double sum", 0, 0, 0};
    st_add(&st, got, want, 1e-12, 0);
    st_report(&st);
    free(x);
}

/* ---- negative control ------------------------------------------------------------------------------------ */

/* The checker must reject a gradient that is 3% off (here: rmsnorm's dx
 * scaled by 1.03), or a broken kernel could pass unnoticed. */
static void test_checker_rejects(void) {
    printf("negative control\n");
    rms_ctx c = {NULL, NULL, NULL, NULL, 4, 16, 1e-5};
    c.x = frand(c.N * c.D, -2, 2), c.w = frand(c.D, 0.5, 1.5);
    c.y = frand(c.N * c.D, 0, 1), c.r = frand(c.N * c.D, -1, 1);
    float *dx = frand(c.N * c.D, 0, 1), *dw = frand(c.D, 0, 1);
    kern_rmsnorm_bwd(dx, dw, c.r, c.x, c.w, c.N, c.D, c.eps);
    for (int64_t i = 0; i < c.N * c.D; i++) dx[i] *= 1.03f;
    stats st = fd_stats("rmsnorm dx * 1.03", c.x, c.N * c.D, dx, rms_loss, &c, FD_EPS);
    int rejected = st.worst_ratio > 1.0;
    printf("  %-34s err/tol=%.3f  %s\n", "checker rejects dx * 1.03", st.worst_ratio,
           rejected ? "ok (rejected)" : "FAIL (accepted)");
    if (!rejected) g_failures++;
    free(c.x), free(c.w), free(c.y), free(c.r), free(dx), free(dw);
}

int main(void) {
    printf("kernel checks: rtol %.0e, atol %.0e, fd step %.0e\n", RTOL, ATOL, FD_EPS);
    test_embedding();
    test_rmsnorm();
    test_add_rmsnorm();
    test_rope();
    test_swiglu_add();
    test_linear();
    test_bias_add();
    test_mlp();
    test_attention();
    test_lm_head();
    test_adamw();
    test_checker_rejects();
    if (g_failures) {
        printf("%d check(s) FAILED\n", g_failures);
        return 1;
    }
    printf("all kernel checks passed\n");
    return 0;
}
