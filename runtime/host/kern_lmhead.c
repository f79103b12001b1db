/* kern_lmhead.c — LM head fused with the cross-entropy loss, and its backward.
 *
 * The logits of all N tokens ([N, V], V up to ~150K) would dwarf every other
 * activation, so both directions work on a chunk of ROWS rows at a time, and
 * within it on blocks of at most COLS vocabulary columns: logits[c, vc] =
 * x[c, D] @ w[v0:v0+vc]^T, one sgemm per block.
 *
 * Forward: per row chunk, one pass over the vocabulary slices with an online
 * logsumexp (the SIMD rowstats step per block, combined across slices in
 * double), and the target's logit taken from the slice holding it; each
 * block is dropped once used.
 *
 * Backward: the same pass keeps every block, i.e. the chunk's [c, V] logits
 * (the LOGITS workspace: ROWS * V floats, 1 KiB per vocabulary entry).  A
 * second pass over the kept blocks turns each into dlogits = (softmax -
 * onehot) * scale in place (SIMD exp) and applies it at once:
 *   dx[chunk] (+)= dl[c, vc] @ w[v0:v0+vc]
 *   dw[slice] (+)= dl^T @ x[chunk]     (overwritten by the first row chunk)
 * So the logits are formed once (6 N V D FLOPs, the minimum), dw is read and
 * written N / ROWS times rather than once per 64 rows, and every sgemm has
 * two sizes >= min(ROWS, D) and one of COLS.  Kept logits beat recomputing
 * them over a 1 MiB-L2 block (8 N V D FLOPs): 0.92 against 0.76 of the
 * sgemm rate (bench/lmhead_bench.c); 256 rows beat 128 (0.86) and match 512.
 *
 * Forward and backward in one (kern_lm_head_loss_grad, the op the
 * fuse-loss pass makes): the backward's statistics pass also sums the
 * loss, so a training step forms the logits once: 6 N V D FLOPs in all,
 * where a separate forward adds 2 N V D.
 * Semantics and shapes: rt_host.h. */
#include "rt_host.h"

#include <cblas.h>
#include <limits.h>
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Block sizes, by measurement (bench/lmhead_bench.c); the workspace,
 * cm_lm_head_ws_floats (common.h), is what ir/ir_op_vocab.c plans. */
#define ROWS CM_LM_HEAD_ROWS
#define COLS CM_LM_HEAD_COLS

static int64_t pad16(int64_t n) { return (n + 15) / 16 * 16; }

/* The workspace: per-row statistics, then the blocks of one row chunk, each
 * [c, pad16(vc)] and contiguous, slice v0's at c * v0 (pad16(V) columns in
 * all, COLS being a multiple of 16). */
typedef struct lm_ws {
    double *M, *L, *T;      /* running max, sum of exp(l - M), target logit */
    float *m, *l, *lse, *f; /* one slice's max and sum; the row's lse; its factor */
    float *blk;
} lm_ws;

static lm_ws lm_workspace(int64_t V) {
    float *p = kern_scratch(CM_WS_CPU_LOGITS, cm_lm_head_ws_floats(V), "lm_head");
    lm_ws s;
    s.M = (double *)p, s.L = s.M + ROWS, s.T = s.L + ROWS;
    s.m = (float *)(s.T + ROWS), s.l = s.m + ROWS, s.lse = s.l + ROWS, s.f = s.lse + ROWS;
    s.blk = s.f + ROWS;
    return s;
}

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

/* blk[c, ld] = x[n0 .. n0+c) @ w[v0 .. v0+vc)^T; the columns vc .. ld-1 are
 * set to -inf (exp 0) for the SIMD steps, which run over whole vectors. */
static void block_logits(float *blk, int64_t ld, const float *x, const float *w, int64_t n0, int64_t c, int64_t v0,
                         int64_t vc, int64_t D) {
    if (D == 0) {
        for (int64_t r = 0; r < c; r++) memset(blk + r * ld, 0, (size_t)vc * sizeof(float));
    } else {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)c, (int)vc, (int)D, 1.0f, x + n0 * D, (int)D,
                    w + v0 * D, (int)D, 0.0f, blk, (int)ld);
    }
    for (int64_t r = 0; r < c; r++)
        for (int64_t j = vc; j < ld; j++) blk[r * ld + j] = -INFINITY;
}

/* Rows n0 .. n0+c: s.lse[r] = logsumexp of the row's logits, s.T[r] = the
 * target's logit (0 for an ignored row); keep: each slice's block stays at
 * its own place (slice_block), else all share the first. */
static float *slice_block(const lm_ws *s, int64_t c, int64_t v0) { return s->blk + c * v0; }

static void chunk_logsumexp(const lm_ws *s, const kern_attn_simd_ops *ops, const float *x, const float *w,
                            const int32_t *tgt, int64_t n0, int64_t c, int64_t V, int64_t D, bool keep) {
    for (int64_t r = 0; r < c; r++) s->M[r] = -INFINITY, s->L[r] = 0.0, s->T[r] = 0.0;
    for (int64_t v0 = 0; v0 < V; v0 += COLS) {
        int64_t vc = V - v0 < COLS ? V - v0 : COLS, ld = pad16(vc);
        float *blk = keep ? slice_block(s, c, v0) : s->blk;
        block_logits(blk, ld, x, w, n0, c, v0, vc, D);
        for (int64_t r = 0; r < c; r++) s->m[r] = -INFINITY, s->l[r] = 0.0f;
        ops->rowstats(blk, (int)c, (int)ld, s->m, s->l);
        for (int64_t r = 0; r < c; r++) {
            double m = s->m[r], M = s->M[r] > m ? s->M[r] : m;
            s->L[r] = (s->M[r] == -INFINITY ? 0.0 : s->L[r] * exp(s->M[r] - M)) + (double)s->l[r] * exp(m - M);
            s->M[r] = M;
            int64_t t = tgt[n0 + r];
            if (t >= v0 && t < v0 + vc) s->T[r] = blk[r * ld + (t - v0)];
        }
    }
    for (int64_t r = 0; r < c; r++) s->lse[r] = (float)(s->M[r] + log(s->L[r]));
}

void kern_lm_head_loss_fwd(float *loss, const float *x, const float *w, const int32_t *tgt, int64_t N, int64_t V,
                           int64_t D) {
    check_dims(N, V, D);
    for (int64_t n = 0; n < N; n++) target_of(tgt, n, V);
    lm_ws s = lm_workspace(V);
    const kern_attn_simd_ops *ops = kern_attn_simd();
    double total = 0.0;
    for (int64_t n0 = 0; n0 < N; n0 += ROWS) {
        int64_t c = N - n0 < ROWS ? N - n0 : ROWS;
        chunk_logsumexp(&s, ops, x, w, tgt, n0, c, V, D, false);
        for (int64_t r = 0; r < c; r++)
            if (tgt[n0 + r] >= 0) total += s.M[r] + log(s.L[r]) - s.T[r];
    }
    loss[0] = (float)total;
}

/* The backward; with loss not NULL also the forward's loss, from the same
 * row statistics (kern_lm_head_loss_grad). */
static void lm_head_grad(float *loss, float *dx, float *dw, const float *x, const float *w, const int32_t *tgt,
                         int64_t N, int64_t V, int64_t D, double scale) {
    check_dims(N, V, D);
    if (N == 0 || D == 0) { /* no logits GEMM to share: the forward's loss alone */
        if (loss) kern_lm_head_loss_fwd(loss, x, w, tgt, N, V, D);
        if (D > 0) memset(dw, 0, (size_t)(V * D) * sizeof(float));
        return;
    }
    for (int64_t n = 0; n < N; n++) target_of(tgt, n, V);
    lm_ws s = lm_workspace(V);
    const kern_attn_simd_ops *ops = kern_attn_simd();
    double total = 0.0;
    for (int64_t n0 = 0; n0 < N; n0 += ROWS) {
        int64_t c = N - n0 < ROWS ? N - n0 : ROWS;
        chunk_logsumexp(&s, ops, x, w, tgt, n0, c, V, D, true);
        for (int64_t r = 0; r < c; r++) {
            s.f[r] = tgt[n0 + r] < 0 ? 0.0f : (float)scale;
            if (tgt[n0 + r] >= 0) total += s.M[r] + log(s.L[r]) - s.T[r];
        }
        for (int64_t v0 = 0; v0 < V; v0 += COLS) {
            int64_t vc = V - v0 < COLS ? V - v0 : COLS, ld = pad16(vc);
            float *blk = slice_block(&s, c, v0);
            ops->lm_expscale(blk, (int)c, (int)ld, s.lse, s.f);
            for (int64_t r = 0; r < c; r++) {
                int64_t t = tgt[n0 + r];
                if (t >= v0 && t < v0 + vc) blk[r * ld + (t - v0)] -= (float)scale;
            }
            /* dx[chunk] (+)= dl @ w[slice];  dw[slice] (+)= dl^T @ x[chunk] */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)c, (int)D, (int)vc, 1.0f, blk, (int)ld,
                        w + v0 * D, (int)D, v0 == 0 ? 0.0f : 1.0f, dx + n0 * D, (int)D);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, (int)vc, (int)D, (int)c, 1.0f, blk, (int)ld,
                        x + n0 * D, (int)D, n0 == 0 ? 0.0f : 1.0f, dw + v0 * D, (int)D);
        }
    }
    if (loss) loss[0] = (float)total;
}

void kern_lm_head_loss_bwd(float *dx, float *dw, const float *x, const float *w, const int32_t *tgt, int64_t N,
                           int64_t V, int64_t D, double scale) {
    lm_head_grad(NULL, dx, dw, x, w, tgt, N, V, D, scale);
}

void kern_lm_head_loss_grad(float *loss, float *dx, float *dw, const float *x, const float *w, const int32_t *tgt,
                            int64_t N, int64_t V, int64_t D, double scale) {
    lm_head_grad(loss, dx, dw, x, w, tgt, N, V, D, scale);
}
