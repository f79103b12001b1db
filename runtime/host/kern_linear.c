/* kern_linear.c — y = x @ w and its backward, through cblas_sgemm.
 * Semantics and shapes: rt_host.h. */
#include "rt_host.h"

#include <cblas.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CBLAS takes int sizes; a local dimension past INT_MAX would wrap. */
static int blas_dim(int64_t v, const char *who) {
    if (v < 0 || v > INT_MAX) {
        fprintf(stderr, "basp: %s: dimension %lld does not fit a BLAS int\n", who, (long long)v);
        abort();
    }
    return (int)v;
}

void kern_linear_fwd(float *y, const float *x, const float *w, int64_t N, int64_t In, int64_t Out) {
    int n = blas_dim(N, "linear"), i = blas_dim(In, "linear"), o = blas_dim(Out, "linear");
    if (n == 0 || o == 0) return;
    if (i == 0) { /* empty contraction: BLAS implementations differ on beta handling */
        memset(y, 0, (size_t)n * (size_t)o * sizeof(float));
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, o, i, 1.0f, x, i, w, o, 0.0f, y, o);
}

void kern_linear_bwd(float *dx, float *dw, const float *dy, const float *x, const float *w, int64_t N, int64_t In,
                     int64_t Out) {
    int n = blas_dim(N, "linear_bwd"), i = blas_dim(In, "linear_bwd"), o = blas_dim(Out, "linear_bwd");
    if (n == 0 || o == 0) {
        /* no tokens or no outputs: both gradients are exactly zero */
        if (n > 0 && i > 0) memset(dx, 0, (size_t)n * (size_t)i * sizeof(float));
        if (i > 0 && o > 0) memset(dw, 0, (size_t)i * (size_t)o * sizeof(float));
        return;
    }
    if (i == 0) return;
    /* dx[N,In] = dy[N,Out] @ w[In,Out]^T */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, i, o, 1.0f, dy, o, w, o, 0.0f, dx, i);
    /* dw[In,Out] = x[N,In]^T @ dy[N,Out] ; beta 0 overwrites */
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, i, o, n, 1.0f, x, i, dy, o, 0.0f, dw, o);
}
