/* kern_mlp.c — the SwiGLU MLP fused and tiled over the tokens, and its
 * backward (IR ops mlp / mlp_bwd).
 *
 * The unfused MLP keeps g = x@wg, u = x@wu and s = silu(g)*u, three
 * [N, F] tensors per layer, from the forward to the backward.  Tiled, each
 * direction forms them for `chunk` rows at a time in a grow-only workspace
 * of 3 x chunk x F floats, and the backward recomputes a chunk's g and u
 * from x (two extra GEMMs) instead of reading them: DeepSpeed ALST's
 * TiledMLP.  Per chunk c of rows:
 *   forward    g, u = x_c@wg, x_c@wu;  s = silu(g)*u;  y_c = s@wd
 *   backward   g, u, s as above;  dwd += s^T@dy_c;  ds = dy_c@wd^T (into s);
 *              dg, du = swiglu_bwd(ds, g, u) (in place into g, u);
 *              dx_c = dg@wg^T + du@wu^T;  dwg += x_c^T@dg;  dwu += x_c^T@du
 * The weight gradients are overwritten by the first chunk and accumulated
 * by the others, so their summation order differs from the unfused ops'
 * (held to the equivalence tolerances, not bit for bit).
 * Semantics and shapes: rt_host.h. */
#include "rt_host.h"

#include <cblas.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

static int mlp_dim(int64_t v, const char *who) {
    if (v < 0 || v > INT_MAX) {
        fprintf(stderr, "basp: %s: dimension %lld does not fit a BLAS int\n", who, (long long)v);
        abort();
    }
    return (int)v;
}

static float *mlp_ws(int64_t nfloats) { return kern_scratch(CM_WS_CPU_MLP, nfloats, "mlp"); }

int64_t kern_mlp_ws_floats(int64_t N, int64_t F, int64_t chunk) {
    int64_t c = chunk < 1 || chunk > N ? N : chunk;
    return 3 * (c > 0 ? c : 1) * F;
}

/* g, u, s of rows [r, r+n) of x (ld D) into ws (each [n, F]). */
static void mlp_gus(float *g, float *u, float *s, const float *x, const float *wg, const float *wu, int n, int D,
                    int F) {
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, F, D, 1.0f, x, D, wg, F, 0.0f, g, F);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, F, D, 1.0f, x, D, wu, F, 0.0f, u, F);
    kern_swiglu_fwd(s, g, u, (int64_t)n * F);
}

void kern_mlp_fwd(float *y, const float *x, const float *wg, const float *wu, const float *wd, int64_t N, int64_t D,
                  int64_t F, int64_t chunk) {
    int n = mlp_dim(N, "mlp"), d = mlp_dim(D, "mlp"), f = mlp_dim(F, "mlp");
    int c = chunk < 1 || chunk > N ? n : (int)chunk;
    if (n == 0 || d == 0 || f == 0) return;
    float *g = mlp_ws(kern_mlp_ws_floats(N, F, chunk)), *u = g + (size_t)c * f, *s = u + (size_t)c * f;
    for (int r = 0; r < n; r += c) {
        int m = n - r < c ? n - r : c;
        const float *xc = x + (size_t)r * d;
        mlp_gus(g, u, s, xc, wg, wu, m, d, f);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, f, 1.0f, s, f, wd, d, 0.0f, y + (size_t)r * d, d);
    }
}

void kern_mlp_bwd(float *dx, float *dwg, float *dwu, float *dwd, const float *dy, const float *x, const float *wg,
                  const float *wu, const float *wd, int64_t N, int64_t D, int64_t F, int64_t chunk) {
    int n = mlp_dim(N, "mlp_bwd"), d = mlp_dim(D, "mlp_bwd"), f = mlp_dim(F, "mlp_bwd");
    int c = chunk < 1 || chunk > N ? n : (int)chunk;
    if (d == 0 || f == 0) return;
    if (n == 0) { /* no tokens: the weight gradients are exactly zero */
        for (int64_t i = 0; i < D * F; i++) dwg[i] = dwu[i] = dwd[i] = 0.0f;
        return;
    }
    float *g = mlp_ws(kern_mlp_ws_floats(N, F, chunk)), *u = g + (size_t)c * f, *s = u + (size_t)c * f;
    for (int r = 0; r < n; r += c) {
        int m = n - r < c ? n - r : c;
        float beta = r == 0 ? 0.0f : 1.0f;
        const float *xc = x + (size_t)r * d, *dyc = dy + (size_t)r * d;
        float *dxc = dx + (size_t)r * d;
        mlp_gus(g, u, s, xc, wg, wu, m, d, f);
        /* dwd[F,D] (+)= s^T @ dy_c, then ds = dy_c @ wd^T over s */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, f, d, m, 1.0f, s, f, dyc, d, beta, dwd, d);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, f, d, 1.0f, dyc, d, wd, d, 0.0f, s, f);
        kern_swiglu_bwd(g, u, s, g, u, (int64_t)m * f); /* elementwise: in place is safe */
        /* dx_c = dg @ wg^T + du @ wu^T */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, d, f, 1.0f, g, f, wg, f, 0.0f, dxc, d);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, d, f, 1.0f, u, f, wu, f, 1.0f, dxc, d);
        /* dwg, dwu [D,F] (+)= x_c^T @ dg, x_c^T @ du */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, f, m, 1.0f, xc, d, g, f, beta, dwg, f);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, d, f, m, 1.0f, xc, d, u, f, beta, dwu, f);
    }
}
