/* kern_basic.c — embedding, rmsnorm, rope, swiglu, add (fp32, CPU).
 * Semantics and shapes: rt_host.h. */
#include "rt_host.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- scratch ----------------------------------------------------------------- */
static float *scratch_buf[CM_WS_CPU_NSLOTS];
static int64_t scratch_cap[CM_WS_CPU_NSLOTS];
static int64_t rope_table_floats; /* the RoPE table's (rope_table_get) */

int64_t kern_scratch_bytes(void) {
    int64_t n = rope_table_floats;
    for (int k = 0; k < CM_WS_CPU_NSLOTS; k++) n += scratch_cap[k];
    return n * (int64_t)sizeof(float);
}

float *kern_scratch(cm_ws_cpu_slot slot, int64_t nfloats, const char *who) {
    float **buf = scratch_buf;
    int64_t *cap = scratch_cap;
    if (nfloats > cap[slot]) {
        free(buf[slot]);
        buf[slot] = malloc((size_t)nfloats * sizeof(float));
        if (!buf[slot]) {
            fprintf(stderr, "basp: %s: out of memory (%lld floats of scratch)\n", who, (long long)nfloats);
            abort();
        }
        cap[slot] = nfloats;
    }
    return buf[slot];
}

float *kern_grow(float **buf, int64_t *cap, int64_t nfloats, const char *who) {
    if (nfloats > *cap) {
        free(*buf);
        size_t bytes = ((size_t)nfloats * sizeof(float) + 63) & ~(size_t)63;
        *buf = aligned_alloc(64, bytes);
        if (!*buf) {
            fprintf(stderr, "basp: %s: out of memory (%zu bytes of scratch)\n", who, bytes);
            abort();
        }
        *cap = nfloats;
    }
    return *buf;
}

/* A token id outside the table would read or write past it; stop loudly. */
static void check_token(const char *who, int32_t t, int64_t n, int64_t V) {
    if (t < 0 || t >= V) {
        fprintf(stderr, "basp: %s: token %d at row %lld is outside the vocabulary [0, %lld)\n", who, (int)t,
                (long long)n, (long long)V);
        abort();
    }
}

/* ---- embedding ---------------------------------------------------------- */

void kern_embedding_fwd(float *out, const int32_t *tok, const float *w, int64_t N, int64_t V, int64_t D) {
    for (int64_t n = 0; n < N; n++) {
        check_token("embedding", tok[n], n, V);
        memcpy(out + n * D, w + (int64_t)tok[n] * D, (size_t)D * sizeof(float));
    }
}

void kern_embedding_bwd(float *dw, const float *dout, const int32_t *tok, int64_t N, int64_t V, int64_t D) {
    memset(dw, 0, (size_t)(V * D) * sizeof(float));
    for (int64_t n = 0; n < N; n++) {
        check_token("embedding_bwd", tok[n], n, V);
        float *row = dw + (int64_t)tok[n] * D;
        const float *g = dout + n * D;
        for (int64_t d = 0; d < D; d++) row[d] += g[d];
    }
}

/* ---- rmsnorm -------------------------------------------------------------- */

/* Row sums in double, because D can be several thousand and activations
 * grow large in deep stacks, over RMS_LANES interleaved partial sums: one
 * running sum waits on each addition's latency; independent ones pipeline
 * (3-4x faster at hidden 2048 and up, bench/norm_bench.c).  Lane k takes
 * the elements d = k mod RMS_LANES of the whole groups, lane 0 the tail. */
enum { RMS_LANES = 8 };

static double lanes_total(const double *s) { return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7])); }

/* 1 / sqrt(mean(x^2) + eps) of one row. */
static double rms_inv(const float *x, int64_t D, double eps) {
    double s[RMS_LANES] = {0};
    int64_t d = 0;
    for (; d + RMS_LANES <= D; d += RMS_LANES)
        for (int k = 0; k < RMS_LANES; k++) s[k] += (double)x[d + k] * x[d + k];
    for (; d < D; d++) s[0] += (double)x[d] * x[d];
    return 1.0 / sqrt(lanes_total(s) / (double)D + eps);
}

/* rms_inv of x's row and sum_d dy_d w_d x_d, in one pass over the row. */
static double rms_inv_dot(const float *x, const float *g, const float *w, int64_t D, double eps, double *dot) {
    double s[RMS_LANES] = {0}, t[RMS_LANES] = {0};
    int64_t d = 0;
    for (; d + RMS_LANES <= D; d += RMS_LANES)
        for (int k = 0; k < RMS_LANES; k++) {
            s[k] += (double)x[d + k] * x[d + k];
            t[k] += (double)g[d + k] * w[d + k] * x[d + k];
        }
    for (; d < D; d++) {
        s[0] += (double)x[d] * x[d];
        t[0] += (double)g[d] * w[d] * x[d];
    }
    *dot = lanes_total(t);
    return 1.0 / sqrt(lanes_total(s) / (double)D + eps);
}

void kern_rmsnorm_fwd(float *y, const float *x, const float *w, int64_t N, int64_t D, double eps) {
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * D;
        float *yr = y + n * D;
        float r = (float)rms_inv(xr, D, eps);
        for (int64_t d = 0; d < D; d++) yr[d] = xr[d] * r * w[d];
    }
}

/* With r = rsqrt(mean(x^2) + eps) and y_j = x_j r w_j:
 *   dx_j = r w_j dy_j - x_j r^3 / D * sum_k dy_k w_k x_k
 *   dw_j = sum_n dy_nj x_nj r_n
 * dw is accumulated in double across rows (N can be tens of thousands). */
static void rmsnorm_bwd_rows(float *dx, float *dw, const float *dy, const float *x, const float *w, const float *dr,
                             int64_t N, int64_t D, double eps) {
    double *acc = calloc((size_t)(D > 0 ? D : 1), sizeof(double));
    if (!acc) {
        fprintf(stderr, "basp: rmsnorm_bwd: out of memory\n");
        abort();
    }
    for (int64_t n = 0; n < N; n++) {
        const float *xr = x + n * D, *gr = dy + n * D;
        float *dxr = dx + n * D;
        double dot, r = rms_inv_dot(xr, gr, w, D, eps, &dot);
        float a = (float)r, c = (float)(dot * r * r * r / (double)D);
        for (int64_t d = 0; d < D; d++) acc[d] += (double)gr[d] * xr[d] * r;
        if (dr) { /* the residual's gradient added as the row is written */
            const float *rr = dr + n * D;
            for (int64_t d = 0; d < D; d++) {
                float v = a * w[d] * gr[d] - c * xr[d];
                dxr[d] = rr[d] + v;
            }
        } else {
            for (int64_t d = 0; d < D; d++) dxr[d] = a * w[d] * gr[d] - c * xr[d];
        }
    }
    for (int64_t d = 0; d < D; d++) dw[d] = (float)acc[d];
    free(acc);
}

void kern_rmsnorm_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t N, int64_t D,
                      double eps) {
    rmsnorm_bwd_rows(dx, dw, dy, x, w, NULL, N, D, eps);
}

void kern_add_rmsnorm_bwd(float *ds, float *dw, const float *dy, const float *s, const float *w, const float *dr,
                          int64_t N, int64_t D, double eps) {
    rmsnorm_bwd_rows(ds, dw, dy, s, w, dr, N, D, eps);
}

void kern_add_rmsnorm_fwd(float *s, float *y, const float *a, const float *b, const float *w, int64_t N, int64_t D,
                          double eps) {
    for (int64_t n = 0; n < N; n++) { /* the sum is normalised while its row is in cache */
        kern_add(s + n * D, a + n * D, b + n * D, D);
        kern_rmsnorm_fwd(y + n * D, s + n * D, w, 1, D, eps);
    }
}

/* ---- rope ------------------------------------------------------------------ */

/* theta^(-2i/Dh), then the Llama 3 adjustment (rt_host.h): low
 * frequencies (wavelengths longer than the original context / low) are
 * divided by factor, high ones kept, and the band between interpolated. */
static double rope_inv_freq(int64_t i, int64_t Dh, double theta, const kern_rope_scaling *sc) {
    double inv_freq = pow(theta, -2.0 * (double)i / (double)Dh);
    if (!sc) return inv_freq;
    const double pi = 3.14159265358979323846;
    double orig = (double)sc->original_max_pos;
    double wavelen = 2.0 * pi / inv_freq;
    double low_freq_wavelen = orig / sc->low_freq_factor, high_freq_wavelen = orig / sc->high_freq_factor;
    if (wavelen > low_freq_wavelen) return inv_freq / sc->factor;
    if (wavelen < high_freq_wavelen) return inv_freq;
    double smooth = (orig / wavelen - sc->low_freq_factor) / (sc->high_freq_factor - sc->low_freq_factor);
    return (1.0 - smooth) * inv_freq / sc->factor + smooth * inv_freq;
}

/* Parameters that would divide by zero or flip the bands give NaN or
 * silently wrong angles for every token; stop instead. */
static void rope_check_scaling(const kern_rope_scaling *sc) {
    if (!sc) return;
    if (sc->factor > 0 && sc->low_freq_factor > 0 && sc->high_freq_factor > sc->low_freq_factor &&
        sc->original_max_pos > 0)
        return;
    fprintf(stderr,
            "basp: rope: invalid llama3 scaling: factor %g, low_freq_factor %g, high_freq_factor %g, "
            "original_max_pos %lld (need factor, low > 0, high > low, original_max_pos > 0)\n",
            sc->factor, sc->low_freq_factor, sc->high_freq_factor, (long long)sc->original_max_pos);
    abort();
}

/* The position of row si: pos[si], or pos0 + si when pos is NULL. */
static inline int64_t rope_row_pos(const int64_t *pos, int64_t pos0, int64_t si) { return pos ? pos[si] : pos0 + si; }

/* cs, sn [S, Dh/2] for the rows' positions: the one place angles are made,
 * so the pos0 and explicit-position forms agree bit for bit. */
static void rope_table_fill(float *cs, float *sn, int64_t S, int64_t Dh, const int64_t *pos, int64_t pos0, double theta,
                            const kern_rope_scaling *sc) {
    rope_check_scaling(sc);
    int64_t half = Dh / 2;
    for (int64_t i = 0; i < half; i++) {
        double inv_freq = rope_inv_freq(i, Dh, theta, sc);
        for (int64_t si = 0; si < S; si++) {
            double ang = (double)rope_row_pos(pos, pos0, si) * inv_freq;
            cs[si * half + i] = (float)cos(ang);
            sn[si * half + i] = (float)sin(ang);
        }
    }
}

void kern_rope_table(float *cs, float *sn, int64_t S, int64_t Dh, int64_t pos0, double theta,
                     const kern_rope_scaling *sc) {
    rope_table_fill(cs, sn, S, Dh, NULL, pos0, theta, sc);
}

/* cos/sin of every (position, pair) of one call's shape, [S, Dh/2] each.
 * Computed in double (pos * inv_freq reaches 1e5 rad for long contexts,
 * where float angles lose all precision) and kept for the next call with the
 * same shape, positions and frequencies: q and k, forward and backward, of
 * every layer share it, and the S * Dh/2 sin/cos evaluations would otherwise
 * rival the rotation itself.  The key includes the scaling, so a call with
 * other scaling parameters never reads a stale table.  Explicit positions
 * are keyed by a copy of them (comparing S integers is cheap next to the
 * rotation); pos0 calls by pos0 alone. */
typedef struct rope_table {
    int64_t S, Dh, pos0;
    double theta;
    bool scaled;
    kern_rope_scaling sc; /* when scaled */
    int64_t *pos;         /* [S] when keyed by explicit positions, else NULL */
    float *cs, *sn;
} rope_table;

static bool rope_table_matches(const rope_table *t, int64_t S, int64_t Dh, const int64_t *pos, int64_t pos0,
                               double theta, const kern_rope_scaling *sc) {
    if (!t->cs || t->S != S || t->Dh != Dh || t->theta != theta || t->scaled != (sc != NULL) ||
        (t->pos != NULL) != (pos != NULL))
        return false;
    if (pos ? memcmp(t->pos, pos, (size_t)S * sizeof *pos) != 0 : t->pos0 != pos0) return false;
    return !sc || (t->sc.factor == sc->factor && t->sc.low_freq_factor == sc->low_freq_factor &&
                   t->sc.high_freq_factor == sc->high_freq_factor && t->sc.original_max_pos == sc->original_max_pos);
}

static const rope_table *rope_table_get(int64_t S, int64_t Dh, const int64_t *pos, int64_t pos0, double theta,
                                        const kern_rope_scaling *sc) {
    static rope_table t = {-1, -1, 0, 0.0, false, {0, 0, 0, 0}, NULL, NULL, NULL};
    if (rope_table_matches(&t, S, Dh, pos, pos0, theta, sc)) return &t;
    rope_check_scaling(sc);
    int64_t half = Dh / 2;
    free(t.cs);
    free(t.pos);
    t.cs = malloc((size_t)(2 * S * half + 1) * sizeof(float));
    t.pos = pos ? malloc((size_t)(S > 0 ? S : 1) * sizeof *pos) : NULL;
    /* workspace in floats: the table, and the position key (2 floats each) */
    rope_table_floats = 2 * S * half + 1 + (pos ? 2 * S : 0);
    if (!t.cs || (pos && !t.pos)) {
        fprintf(stderr, "basp: rope: out of memory\n");
        abort();
    }
    if (pos) memcpy(t.pos, pos, (size_t)S * sizeof *pos);
    t.sn = t.cs + S * half;
    t.S = S, t.Dh = Dh, t.pos0 = pos0, t.theta = theta;
    t.scaled = sc != NULL;
    if (sc) t.sc = *sc;
    rope_table_fill(t.cs, t.sn, S, Dh, pos, pos0, theta, sc);
    return &t;
}

/* Rotates every (i, i+half) pair of x by +angle (sign = 1) or -angle
 * (sign = -1, the transpose, for the backward); token si is at position
 * pos[si], or pos0 + si when pos is NULL. */
static void rope_apply(float *y, const float *x, int64_t b, int64_t S, int64_t H, int64_t Dh, const int64_t *pos,
                       int64_t pos0, double theta, const kern_rope_scaling *sc, float sign) {
    if (Dh % 2 != 0) {
        fprintf(stderr, "basp: rope: head_dim %lld is odd\n", (long long)Dh);
        abort();
    }
    int64_t half = Dh / 2;
    const rope_table *t = rope_table_get(S, Dh, pos, pos0, theta, sc);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t si = 0; si < S; si++) {
            const float *cs = t->cs + si * half, *sn = t->sn + si * half;
            for (int64_t h = 0; h < H; h++) {
                int64_t off = ((bi * S + si) * H + h) * Dh;
                kern_rope_run(y + off, x + off, Dh, cs, sn, sign);
            }
        }
}

void kern_rope_rows(const float **cs, const float **sn, int64_t S, int64_t Dh, const int64_t *pos, int64_t pos0,
                    double theta, const kern_rope_scaling *scaling) {
    const rope_table *t = rope_table_get(S, Dh, pos, pos0, theta, scaling);
    *cs = t->cs, *sn = t->sn;
}

void kern_rope_fwd(float *y, const float *x, int64_t b, int64_t S, int64_t H, int64_t Dh, int64_t pos0, double theta,
                   const kern_rope_scaling *scaling) {
    rope_apply(y, x, b, S, H, Dh, NULL, pos0, theta, scaling, 1.0f);
}

void kern_rope_bwd(float *dx, const float *dy, int64_t b, int64_t S, int64_t H, int64_t Dh, int64_t pos0, double theta,
                   const kern_rope_scaling *scaling) {
    rope_apply(dx, dy, b, S, H, Dh, NULL, pos0, theta, scaling, -1.0f);
}

void kern_rope_fwd_pos(float *y, const float *x, int64_t b, int64_t S, int64_t H, int64_t Dh, const int64_t *pos,
                       double theta, const kern_rope_scaling *scaling) {
    rope_apply(y, x, b, S, H, Dh, pos, 0, theta, scaling, 1.0f);
}

void kern_rope_bwd_pos(float *dx, const float *dy, int64_t b, int64_t S, int64_t H, int64_t Dh, const int64_t *pos,
                       double theta, const kern_rope_scaling *scaling) {
    rope_apply(dx, dy, b, S, H, Dh, pos, 0, theta, scaling, -1.0f);
}

/* ---- swiglu, add ------------------------------------------------------------ */

/* SwiGLU's sigmoid needs an exponential per element: the SIMD instances of
 * kern_attention_simd.h (the attention's polynomial exp, ~1e-7 relative)
 * run it several times faster than a scalar expf loop. */
void kern_swiglu_fwd(float *y, const float *g, const float *u, int64_t n) { kern_attn_simd()->swiglu_fwd(y, g, u, n); }

void kern_swiglu_bwd(float *dg, float *du, const float *dy, const float *g, const float *u, int64_t n) {
    kern_attn_simd()->swiglu_bwd(dg, du, dy, g, u, n);
}

void kern_bias_add_fwd(float *y, const float *x, const float *b, int64_t N, int64_t M) {
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < M; j++) y[n * M + j] = x[n * M + j] + b[j];
}

/* Row by row into a double accumulator per column (the order of a GEMM's
 * reduction would not make the sum any more exact). */
void kern_bias_add_bwd(float *db, const float *dy, int64_t N, int64_t M) {
    double *acc = calloc((size_t)(M > 0 ? M : 1), sizeof *acc);
    if (!acc) {
        fprintf(stderr, "basp: bias_add_bwd: out of memory (%lld columns)\n", (long long)M);
        abort();
    }
    for (int64_t n = 0; n < N; n++)
        for (int64_t j = 0; j < M; j++) acc[j] += dy[n * M + j];
    for (int64_t j = 0; j < M; j++) db[j] = (float)acc[j];
    free(acc);
}

void kern_add(float *y, const float *a, const float *b, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

/* ---- zig-zag order ----------------------------------------------------------
 * Ring attention's sequence order (rt_host.h).  Here rather than in
 * kern_ring.c: the runtime core (rt_data.c) calls it, and the CUDA backend
 * links this file alone of the CPU kernels, without BLAS. */
int64_t kern_zigzag_pos(int64_t i, int64_t S, int64_t R) {
    if (R <= 0 || S % (2 * R) != 0 || i < 0 || i >= S) {
        fprintf(stderr, "basp: zig-zag order: index %lld of %lld tokens over %lld ranks (need S %% 2R == 0)\n",
                (long long)i, (long long)S, (long long)R);
        abort();
    }
    int64_t C = S / (2 * R), r = i / (2 * C), w = i % (2 * C);
    return w < C ? r * C + w : (2 * R - 1 - r) * C + (w - C);
}
