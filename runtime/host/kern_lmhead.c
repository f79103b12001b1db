/* kern_lmhead.c — LM head fused with the cross-entropy loss, and its backward.
 *
 * The logits of all N tokens ([N, V], V up to ~150K) would dwarf every other
 * activation, so both directions form them for a chunk of rows at a time:
 * logits[c, V] = x[c, D] @ w^T (one sgemm), then per row a numerically
 * stable logsumexp.  The backward forms the same chunk, turns it into
 * dlogits = (softmax - onehot) * scale in place, and accumulates
 * dx = dlogits @ w and dw += dlogits^T @ x.
 * Semantics and shapes: rt_host.h. */
#include "rt_host.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Rows per chunk: 64 keeps the sgemm efficient; fewer when V is so large that
 * the [chunk, V] buffer would pass ~16 MiB. */
static int64_t chunk_rows(int64_t V) {
    int64_t c = (int64_t)(4 << 20) / (V > 0 ? V : 1);
    if (c > 64) c = 64;
    return c < 1 ? 1 : c;
}

static float *logits_buf(int64_t nfloats) { return kern_scratch(CM_WS_CPU_LOGITS, nfloats, "lm_head"); }

static void check_dims(int64_t N, int64_t V, int64_t D) {
    if (N > INT_MAX || V > INT_MAX || D > INT_MAX || V <= 0) {
        fprintf(stderr, "basp: lm_head: sizes N=%lld V=%lld D=%lld are out of range\n", (long long)N, (long long)V,
                (long long)D);
        abort();
    }
}

/* A target is ignored when negative; one at or past V is a data error. */
static int target_of(const int32_t *tgt, int64_t n, int64_t V) {
    int32_t t = tgt[n];
    if (t >= V) {
        fprintf(stderr, "basp: lm_head: target %d at row %lld is outside the vocabulary [0, %lld)\n", (int)t,
                (long long)n, (long long)V);
        abort();
    }
    return t;
}

/* logits[c, V] of rows n0 .. n0+c-1 */
static void chunk_logits(float *lg, const float *x, const float *w, int64_t n0, int64_t c, int64_t V, int64_t D) {
    if (D == 0) {
        memset(lg, 0, (size_t)(c * V) * sizeof(float));
        return;
    }
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c, (int)V, (int)D, 1.0f, x + n0 * D, (int)D, w, (int)D,
                0.0f, lg, (int)V);
}

/* max and log(sum(exp(row - max))) + max of one row; the sum in double */
static double row_logsumexp(const float *row, int64_t V) {
    float mx = row[0];
    for (int64_t j = 1; j < V; j++) mx = row[j] > mx ? row[j] : mx;
    double sum = 0.0;
    for (int64_t j = 0; j < V; j++) sum += (double)expf(row[j] - mx);
    return (double)mx + log(sum);
}

void kern_lm_head_loss_fwd(float *loss, const float *x, const float *w, const int32_t *tgt, int64_t N, int64_t V,
                           int64_t D) {
    check_dims(N, V, D);
    int64_t C = chunk_rows(V);
    float *lg = logits_buf(C * V);
    double total = 0.0;
    for (int64_t n0 = 0; n0 < N; n0 += C) {
        int64_t c = N - n0 < C ? N - n0 : C;
        chunk_logits(lg, x, w, n0, c, V, D);
        for (int64_t r = 0; r < c; r++) {
            int t = target_of(tgt, n0 + r, V);
            if (t < 0) continue;
            const float *row = lg + r * V;
            total += row_logsumexp(row, V) - (double)row[t];
        }
    }
    loss[0] = (float)total;
}

/* Turns row (logits) into (softmax - onehot(t)) * scale, or zeros if t < 0. */
static void row_dlogits(float *row, int64_t V, int t, double scale) {
    if (t < 0) {
        memset(row, 0, (size_t)V * sizeof(float));
        return;
    }
    float mx = row[0];
    for (int64_t j = 1; j < V; j++) mx = row[j] > mx ? row[j] : mx;
    double sum = 0.0;
    for (int64_t j = 0; j < V; j++) {
        row[j] = expf(row[j] - mx);
        sum += row[j];
    }
    float f = (float)(scale / sum);
    for (int64_t j = 0; j < V; j++) row[j] *= f;
    row[t] -= (float)scale;
}

void kern_lm_head_loss_bwd(float *dx, float *dw, const float *x, const float *w, const int32_t *tgt, int64_t N,
                           int64_t V, int64_t D, double scale) {
    check_dims(N, V, D);
    memset(dw, 0, (size_t)(V * D) * sizeof(float));
    if (D == 0) return;
    int64_t C = chunk_rows(V);
    float *lg = logits_buf(C * V);
    for (int64_t n0 = 0; n0 < N; n0 += C) {
        int64_t c = N - n0 < C ? N - n0 : C;
        chunk_logits(lg, x, w, n0, c, V, D);
        for (int64_t r = 0; r < c; r++) row_dlogits(lg + r * V, V, target_of(tgt, n0 + r, V), scale);
        /* dx[c, D] = dl[c, V] @ w[V, D] */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)c, (int)D, (int)V, 1.0f, lg, (int)V, w, (int)D,
                    0.0f, dx + n0 * D, (int)D);
        /* dw[V, D] += dl^T @ x[c, D] */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)V, (int)D, (int)c, 1.0f, lg, (int)V, x + n0 * D,
                    (int)D, 1.0f, dw, (int)D);
    }
}
