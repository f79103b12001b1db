/* gpu_attn_cases.c — the attention cases of the GPU kernel test
 * (test_gpu_kernels.c: the tolerances are in its header): basp's attention
 * kernels against the CPU reference; the ring's merge kernels
 * (kcu_ring_merge, kcu_ring_lse_rows, kcu_ring_acc_rows) against a double
 * reference, within 1e-5 of the largest value (fp32 arithmetic on the
 * same inputs: only exp/log and rounding differ); with cuDNN its fused
 * graphs, plain and as the ring's sub-blocks (windows of longer buffers,
 * full or causal), against the CPU's ring block kernels at the attention
 * tolerance 3e-2, rows outside the window left as they were (NaN). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gpu_test.h"
#include "rt_host.h"
#ifdef BASP_HAVE_CUDNN
#include "rt_attn_cudnn.h"
#endif

/* qk: the scale of q and k.  With 1 the softmax is nearly flat, so one key
 * too many or too few (a causal-mask or tile-boundary error) moves a row's
 * output by only ~1/S; with 3 the scores spread over several units and such
 * an error changes rows by a large fraction of max |o|. */
static void test_attention(int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh, float qk) {
    int64_t nq = b * S * H * Dh, nk = b * S * Hkv * Dh;
    float *q = gt_rnd(nq, qk), *k = gt_rnd(nk, qk), *v = gt_rnd(nk, 1), *dout = gt_rnd(nq, 1);
    float *o = malloc(nq * 4), *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nk * 4);
    kcu_bf16 *dq_ = gt_up(q, nq), *dk_ = gt_up(k, nk), *dv_ = gt_up(v, nk), *ddo = gt_up(dout, nq);
    kcu_bf16 *oo = gt_dzeros(nq), *odq = gt_dzeros(nq), *odk = gt_dzeros(nk), *odv = gt_dzeros(nk);
    float *ws = gt_dalloc((size_t)kcu_attention_bwd_ws(b, S, H) * 4);
    char name[64];
    kern_attention_fwd(o, q, k, v, b, S, H, Hkv, Dh);
    KCU_CHECK_EXIT(kcu_attention_fwd(oo, dq_, dk_, dv_, b, S, H, Hkv, Dh, 0));
    snprintf(name, sizeof name, "attention fwd Dh%d H%d/%d S%d x%g", (int)Dh, (int)H, (int)Hkv, (int)S, qk);
    gt_check_gpu(name, oo, o, nq, 3e-2);
    if (kcu_attention_tc_smem(Dh)) { /* both forward kernels: tensor cores and scalar */
        kcu_attn_impl other[] = {KCU_ATTN_TC, KCU_ATTN_SCALAR};
        const char *oname[] = {"tc", "scalar"};
        for (int i = 0; i < 2; i++) {
            kcu_bf16 *ox = gt_dzeros(nq);
            KCU_CHECK_EXIT(kcu_attention_fwd_impl(other[i], ox, dq_, dk_, dv_, b, S, H, Hkv, Dh, 0));
            snprintf(name, sizeof name, "attention fwd %s Dh%d x%g", oname[i], (int)Dh, qk);
            gt_check_gpu(name, ox, o, nq, 3e-2);
            cudaFree(ox);
        }
    }
    /* the backward reads the forward's output: give both sides the same o */
    float *ob = gt_down(oo, nq);
    kern_attention_bwd(dq, dk, dv, dout, q, k, v, ob, b, S, H, Hkv, Dh);
    KCU_CHECK_EXIT(kcu_attention_bwd(odq, odk, odv, ddo, dq_, dk_, dv_, oo, b, S, H, Hkv, Dh, ws, 0));
    snprintf(name, sizeof name, "attention bwd dq Dh%d x%g", (int)Dh, qk);
    gt_check_gpu(name, odq, dq, nq, 3e-2);
    snprintf(name, sizeof name, "attention bwd dk Dh%d x%g", (int)Dh, qk);
    gt_check_gpu(name, odk, dk, nk, 3e-2);
    snprintf(name, sizeof name, "attention bwd dv Dh%d x%g", (int)Dh, qk);
    gt_check_gpu(name, odv, dv, nk, 3e-2);
    cudaFree(dq_), cudaFree(dk_), cudaFree(dv_), cudaFree(ddo), cudaFree(oo), cudaFree(odq), cudaFree(odk);
    cudaFree(odv), cudaFree(ws);
    free(q), free(k), free(v), free(dout), free(o), free(dq), free(dk), free(dv), free(ob);
}

/* ---- the ring's merge kernels ------------------------------------------------------------- */
static float *dup32(const float *x, int64_t n) {
    float *d = gt_dalloc(sizeof(float) * (size_t)n);
    KCU_CHECK_EXIT(cudaMemcpy(d, x, sizeof(float) * (size_t)n, cudaMemcpyHostToDevice));
    return d;
}

static float *down32(const float *d, int64_t n) {
    float *x = malloc(sizeof(float) * (size_t)n);
    KCU_CHECK_EXIT(cudaDeviceSynchronize());
    KCU_CHECK_EXIT(cudaMemcpy(x, d, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost));
    return x;
}

/* got and ref equal within tol of the largest finite |ref| (infinities
 * must match exactly). */
static void check_inf(const char *name, const float *got, const float *ref, int64_t n, double tol) {
    double err = 0, mx = 1e-30;
    int64_t bad = 0;
    for (int64_t i = 0; i < n; i++) {
        if (!isfinite(ref[i]) || !isfinite(got[i])) {
            bad += memcmp(&got[i], &ref[i], sizeof(float)) != 0;
            continue;
        }
        double e = fabs((double)got[i] - ref[i]);
        if (e > err) err = e;
        if (fabs(ref[i]) > mx) mx = fabs(ref[i]);
    }
    bool ok = !bad && err <= tol * mx;
    printf("%-28s max err %.3e of max %.3e, %lld infinities differ  %s\n", name, err, mx, (long long)bad,
           ok ? "ok" : "FAIL");
    gt_failures += !ok;
}

/* A window of L rows from r0 of b sequences of ld rows: running (o, lse)
 * with rows that saw nothing (-inf), a sub-block (ob, st) with rows that
 * saw nothing; the merge against double arithmetic, rows outside the
 * window unchanged; the statistics window copied out; bf16 rows added into
 * fp32 accumulators (exact: the same fp32 additions). */
static void test_ring_merge(void) {
    enum { b = 2, ld = 96, r0 = 32, L = 48, H = 3, Dh = 16 };
    int64_t nq = b * ld * H * Dh, nr = b * ld * H, ns = b * H * L;
    float *o = gt_rnd(nq, 1), *lse = gt_rnd(nr, 2), *ob = gt_rnd(nq, 1), *st = gt_rnd(ns, 2);
    for (int64_t i = 0; i < nr; i += 7) lse[i] = -INFINITY, memset(o + i * Dh, 0, sizeof(float) * Dh);
    for (int64_t i = 0; i < ns; i += 5) st[i] = -INFINITY;
    float *eo = malloc(sizeof(float) * (size_t)nq), *el = malloc(sizeof(float) * (size_t)nr);
    memcpy(eo, o, sizeof(float) * (size_t)nq), memcpy(el, lse, sizeof(float) * (size_t)nr);
    float *est = malloc(sizeof(float) * (size_t)ns);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t i = 0; i < L; i++)
            for (int64_t h = 0; h < H; h++) {
                int64_t row = (bi * ld + r0 + i) * H + h;
                double la = lse[row], lb = st[(bi * H + h) * L + i];
                est[(bi * H + h) * L + i] = lse[row];
                if (lb == -INFINITY) continue;
                double m = la > lb ? la : lb, wa = la == -INFINITY ? 0 : exp(la - m), wb = exp(lb - m);
                el[row] = (float)(m + log(wa + wb));
                for (int64_t d = 0; d < Dh; d++)
                    eo[row * Dh + d] = (float)((o[row * Dh + d] * wa + ob[row * Dh + d] * wb) / (wa + wb));
            }
    float *d_o = dup32(o, nq), *d_l = dup32(lse, nr), *d_st = dup32(st, ns), *d_st2 = gt_dalloc(4 * (size_t)ns);
    kcu_bf16 *d_ob = gt_up(ob, nq);
    KCU_CHECK_EXIT(kcu_ring_lse_rows(d_st2, d_l, b, ld, r0, L, H, 0));
    KCU_CHECK_EXIT(kcu_ring_merge(d_o, d_l, d_ob, d_st, b, ld, r0, L, H, Dh, 0));
    float *go = down32(d_o, nq), *gl = down32(d_l, nr), *gs = down32(d_st2, ns);
    check_inf("ring merge o", go, eo, nq, 1e-5);
    check_inf("ring merge lse", gl, el, nr, 1e-5);
    check_inf("ring lse rows", gs, est, ns, 0);
    /* accumulate: acc (fp32) += the window of ob (bf16) */
    float *acc = gt_rnd(nq, 1), *eacc = malloc(sizeof(float) * (size_t)nq), *d_acc = dup32(acc, nq);
    memcpy(eacc, acc, sizeof(float) * (size_t)nq);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t i = 0; i < L * H * Dh; i++) eacc[(bi * ld + r0) * H * Dh + i] += ob[(bi * ld + r0) * H * Dh + i];
    KCU_CHECK_EXIT(kcu_ring_acc_rows(d_acc, d_ob, b, ld, r0, L, H * Dh, 0));
    float *gacc = down32(d_acc, nq);
    check_inf("ring acc rows", gacc, eacc, nq, 0);
    cudaError_t bad = kcu_ring_merge(d_o, d_l, d_ob, d_st, b, ld, ld - L + 1, L, H, Dh, 0); /* past the end */
    printf("%-28s %s  %s\n", "ring merge past ld", cudaGetErrorString(bad),
           bad == cudaErrorInvalidValue ? "ok" : "FAIL");
    gt_failures += bad != cudaErrorInvalidValue;
    cudaFree(d_o), cudaFree(d_l), cudaFree(d_st), cudaFree(d_st2), cudaFree(d_ob), cudaFree(d_acc);
    free(o), free(lse), free(ob), free(st), free(eo), free(el), free(est), free(go), free(gl), free(gs);
    free(acc), free(eacc), free(gacc);
}

#ifdef BASP_HAVE_CUDNN
/* The row log-sum-exp of the scaled, causal scores, [b,H,S] (the stats). */
static float *ref_lse(const float *q, const float *k, int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    float *lse = malloc(sizeof(float) * (size_t)(b * H * S));
    double sc = 1.0 / sqrt((double)Dh);
    double *row = malloc(sizeof(double) * (size_t)S);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < S; i++) {
                const float *qi = q + ((bi * S + i) * H + h) * Dh;
                double mx = -INFINITY, sum = 0;
                for (int64_t j = 0; j <= i; j++) {
                    const float *kj = k + ((bi * S + j) * Hkv + h / (H / Hkv)) * Dh;
                    double d = 0;
                    for (int64_t x = 0; x < Dh; x++) d += (double)qi[x] * kj[x];
                    row[j] = d * sc;
                    if (row[j] > mx) mx = row[j];
                }
                for (int64_t j = 0; j <= i; j++) sum += exp(row[j] - mx);
                lse[(bi * H + h) * S + i] = (float)(mx + log(sum));
            }
    free(row);
    return lse;
}

static void check_stats(const char *name, const float *dstats, const float *ref, int64_t n) {
    float *g = malloc(sizeof(float) * (size_t)n);
    KCU_CHECK_EXIT(cudaDeviceSynchronize());
    KCU_CHECK_EXIT(cudaMemcpy(g, dstats, sizeof(float) * (size_t)n, cudaMemcpyDeviceToHost));
    double worst = 0;
    for (int64_t i = 0; i < n; i++) {
        double e = fabs((double)g[i] - ref[i]) / (1.0 + fabs(ref[i]));
        if (!(e <= worst)) worst = e;
    }
    bool ok = worst <= 1e-3;
    printf("%-28s max err %.3e (relative to 1 + |lse|, tol 1e-03)  %s\n", name, worst, ok ? "ok" : "FAIL");
    gt_failures += !ok;
    free(g);
}

static kcu_bf16 *dnan(int64_t n) { /* bf16 0xffff: NaN */
    kcu_bf16 *d = gt_dalloc((size_t)n * 2);
    KCU_CHECK_EXIT(cudaMemset(d, 0xff, (size_t)n * 2));
    return d;
}

/* cuDNN's forward and backward at one shape against the CPU reference and
 * the basp kernels (tolerances in the file's header). */
static void test_cudnn_attention(cuda_cudnn *c, const cuda_cudnn_shape *sh, float qk) {
    int64_t b = sh->b, S = sh->S, H = sh->H, Hkv = sh->Hkv, Dh = sh->Dh, nq = b * S * H * Dh, nk = b * S * Hkv * Dh;
    char name[80], tag[40];
    snprintf(tag, sizeof tag, "Dh%d H%d/%d S%d x%g", (int)Dh, (int)H, (int)Hkv, (int)S, qk);
    if (cuda_cudnn_known_fault(sh)) { /* refused on purpose: the runtime uses the basp kernels here */
        printf("cudnn attention %-16s skipped: cuDNN %zu: %s\n", tag, cuda_cudnn_version(), cuda_cudnn_known_fault(sh));
        return;
    }
    if (cuda_cudnn_prepare(c, sh) != 0) {
        printf("cudnn attention %-16s not supported: %s  FAIL\n", tag, cuda_cudnn_error(c));
        gt_failures++;
        return;
    }
    float *q = gt_rnd(nq, qk), *k = gt_rnd(nk, qk), *v = gt_rnd(nk, 1), *dout = gt_rnd(nq, 1);
    float *o = malloc(nq * 4), *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nk * 4);
    kcu_bf16 *dq_ = gt_up(q, nq), *dk_ = gt_up(k, nk), *dv_ = gt_up(v, nk), *ddo = gt_up(dout, nq);
    kcu_bf16 *oc = dnan(nq), *ob = dnan(nq), *cq = dnan(nq), *ck = dnan(nk), *cv = dnan(nk);
    kcu_bf16 *bq = dnan(nq), *bk = dnan(nk), *bv = dnan(nk);
    float *stats = gt_dalloc((size_t)(b * H * S) * 4), *ws = gt_dalloc((size_t)kcu_attention_bwd_ws(b, S, H) * 4);
    void *cws = gt_dalloc(cuda_cudnn_ws_bytes(c, sh));
    if (cuda_cudnn_fwd(c, sh, oc, stats, dq_, dk_, dv_, cws) != 0) {
        printf("cudnn attention fwd %s: %s  FAIL\n", tag, cuda_cudnn_error(c));
        gt_failures++;
    }
    KCU_CHECK_EXIT(kcu_attention_fwd(ob, dq_, dk_, dv_, b, S, H, Hkv, Dh, 0));
    kern_attention_fwd(o, q, k, v, b, S, H, Hkv, Dh);
    snprintf(name, sizeof name, "cudnn fwd %s", tag);
    gt_check_gpu(name, oc, o, nq, 3e-2);
    float *gb = gt_down(ob, nq), *gc = gt_down(oc, nq), *lse = ref_lse(q, k, b, S, H, Hkv, Dh);
    gt_check("cudnn fwd vs basp", gc, gb, nq, 5e-2);
    check_stats("cudnn stats", stats, lse, b * H * S);
    /* both backwards read cuDNN's o, the reference too */
    kern_attention_bwd(dq, dk, dv, dout, q, k, v, gc, b, S, H, Hkv, Dh);
    if (cuda_cudnn_bwd(c, sh, cq, ck, cv, ddo, dq_, dk_, dv_, oc, stats, cws) != 0) {
        printf("cudnn attention bwd %s: %s  FAIL\n", tag, cuda_cudnn_error(c));
        gt_failures++;
    }
    KCU_CHECK_EXIT(kcu_attention_bwd(bq, bk, bv, ddo, dq_, dk_, dv_, oc, b, S, H, Hkv, Dh, ws, 0));
    kcu_bf16 *got[3] = {cq, ck, cv}, *basp[3] = {bq, bk, bv};
    float *ref[3] = {dq, dk, dv};
    const char *nm[3] = {"dq", "dk", "dv"};
    for (int i = 0; i < 3; i++) {
        int64_t n = i ? nk : nq;
        snprintf(name, sizeof name, "cudnn bwd %s %s", nm[i], tag);
        gt_check_gpu(name, got[i], ref[i], n, 3e-2);
        float *x = gt_down(got[i], n), *y = gt_down(basp[i], n);
        snprintf(name, sizeof name, "cudnn bwd %s vs basp", nm[i]);
        gt_check(name, x, y, n, 5e-2);
        free(x), free(y);
    }
    kcu_bf16 *dev[] = {dq_, dk_, dv_, ddo, oc, ob, cq, ck, cv, bq, bk, bv};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) cudaFree(dev[i]);
    cudaFree(stats), cudaFree(ws), cudaFree(cws);
    free(q), free(k), free(v), free(dout), free(o), free(dq), free(dk), free(dv), free(gb), free(gc), free(lse);
}

/* The window of L rows from r of b sequences of ld rows, width w, packed. */
static float *win(const float *x, int64_t b, int64_t ld, int64_t r, int64_t L, int64_t w) {
    float *y = malloc(sizeof(float) * (size_t)(b * L * w));
    for (int64_t bi = 0; bi < b; bi++) memcpy(y + bi * L * w, x + (bi * ld + r) * w, sizeof(float) * (size_t)(L * w));
    return y;
}

/* A device output's window against ref, and every row outside it still NaN. */
static void check_win(const char *name, const kcu_bf16 *d, const float *ref, int64_t b, int64_t ld, int64_t r,
                      int64_t L, int64_t w) {
    float *all = gt_down(d, b * ld * w), *x = win(all, b, ld, r, L, w);
    gt_check(name, x, ref, b * L * w, 3e-2);
    int64_t touched = 0;
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t i = 0; i < ld * w; i++)
            if ((i / w < r || i / w >= r + L) && !isnan(all[bi * ld * w + i])) touched++;
    printf("%-28s %lld elements outside the window written  %s\n", "  (window)", (long long)touched,
           touched ? "FAIL" : "ok");
    gt_failures += touched != 0;
    free(all), free(x);
}

/* cuDNN on one sub-block of ring attention: q rows [qr, qr+L) against k, v
 * rows [kr, kr+L) of buffers of ld = 2L rows, full (no mask) or causal,
 * against kern_ring_block_fwd / _bwd on the packed windows (positions
 * 0..L-1 on both sides for the diagonal, no key positions for a full
 * block); the backward from cuDNN's o and statistics, as the ring runs it. */
static void test_cudnn_ring_sub(cuda_cudnn *c, int64_t b, int64_t L, int64_t H, int64_t Hkv, int64_t Dh, bool full,
                                int64_t qr, int64_t kr) {
    int64_t ld = 2 * L, wq = H * Dh, wk = Hkv * Dh, nq = b * ld * wq, nk = b * ld * wk, nr = b * L * H;
    cuda_cudnn_shape sh = {b, L, H, Hkv, Dh, ld, full};
    char tag[80], name[112];
    snprintf(tag, sizeof tag, "ring %s Dh%d H%d/%d L%d", full ? "full" : "diag", (int)Dh, (int)H, (int)Hkv, (int)L);
    if (cuda_cudnn_known_fault(&sh)) {
        printf("cudnn %-22s skipped: cuDNN %zu: %s\n", tag, cuda_cudnn_version(), cuda_cudnn_known_fault(&sh));
        return;
    }
    if (cuda_cudnn_prepare(c, &sh) != 0) {
        printf("cudnn %-22s not supported: %s  FAIL\n", tag, cuda_cudnn_error(c));
        gt_failures++;
        return;
    }
    float *q = gt_rnd(nq, 3), *k = gt_rnd(nk, 3), *v = gt_rnd(nk, 1), *dout = gt_rnd(nq, 1);
    float *qw = win(q, b, ld, qr, L, wq), *kw = win(k, b, ld, kr, L, wk), *vw = win(v, b, ld, kr, L, wk);
    float *dw = win(dout, b, ld, qr, L, wq);
    int64_t *pos = malloc(sizeof(int64_t) * (size_t)L);
    for (int64_t i = 0; i < L; i++) pos[i] = i;
    float *o = calloc((size_t)(b * L * wq), 4), *lse = malloc(4 * (size_t)nr);
    for (int64_t i = 0; i < nr; i++) lse[i] = -INFINITY;
    kern_ring_block_fwd(o, lse, qw, kw, vw, b, L, L, H, Hkv, Dh, pos, full ? NULL : pos);
    kcu_bf16 *d_q = gt_up(q, nq), *d_k = gt_up(k, nk), *d_v = gt_up(v, nk), *d_do = gt_up(dout, nq), *d_o = dnan(nq);
    kcu_bf16 *d_dq = dnan(nq), *d_dk = dnan(nk), *d_dv = dnan(nk);
    float *st = gt_dalloc(4 * (size_t)nr);
    void *ws = gt_dalloc(cuda_cudnn_ws_bytes(c, &sh));
    int rc = cuda_cudnn_fwd(c, &sh, d_o + qr * wq, st, d_q + qr * wq, d_k + kr * wk, d_v + kr * wk, ws);
    snprintf(name, sizeof name, "cudnn fwd %s", tag);
    if (rc) printf("%s: %s  FAIL\n", name, cuda_cudnn_error(c)), gt_failures++;
    check_win(name, d_o, o, b, ld, qr, L, wq);
    /* statistics [b,H,L] against the reference lse [b,L,H] */
    float *gst = malloc(4 * (size_t)nr), *ref = malloc(4 * (size_t)nr);
    KCU_CHECK_EXIT(cudaDeviceSynchronize());
    KCU_CHECK_EXIT(cudaMemcpy(gst, st, 4 * (size_t)nr, cudaMemcpyDeviceToHost));
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++) ref[(bi * H + h) * L + i] = lse[(bi * L + i) * H + h];
    check_stats("  (statistics)", st, ref, nr);
    /* backward from cuDNN's o and statistics: the reference reads the same */
    float *go = gt_down(d_o, nq), *gow = win(go, b, ld, qr, L, wq), *D = malloc(4 * (size_t)nr);
    float *lse2 = malloc(4 * (size_t)nr);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t i = 0; i < L; i++) lse2[(bi * L + i) * H + h] = gst[(bi * H + h) * L + i];
    float *dq = calloc((size_t)(b * L * wq), 4), *dk = calloc((size_t)(b * L * wk), 4),
          *dv = calloc((size_t)(b * L * wk), 4);
    kern_ring_rowdot(D, dw, gow, b, L, H, Dh);
    kern_ring_block_bwd(dq, dk, dv, dw, qw, kw, vw, lse2, D, b, L, L, H, Hkv, Dh, pos, full ? NULL : pos);
    rc = cuda_cudnn_bwd(c, &sh, d_dq + qr * wq, d_dk + kr * wk, d_dv + kr * wk, d_do + qr * wq, d_q + qr * wq,
                        d_k + kr * wk, d_v + kr * wk, d_o + qr * wq, st, ws);
    if (rc) printf("cudnn bwd %s: %s  FAIL\n", tag, cuda_cudnn_error(c)), gt_failures++;
    snprintf(name, sizeof name, "cudnn bwd dq %s", tag);
    check_win(name, d_dq, dq, b, ld, qr, L, wq);
    snprintf(name, sizeof name, "cudnn bwd dk %s", tag);
    check_win(name, d_dk, dk, b, ld, kr, L, wk);
    snprintf(name, sizeof name, "cudnn bwd dv %s", tag);
    check_win(name, d_dv, dv, b, ld, kr, L, wk);
    kcu_bf16 *dev[] = {d_q, d_k, d_v, d_do, d_o, d_dq, d_dk, d_dv};
    for (size_t i = 0; i < sizeof dev / sizeof *dev; i++) cudaFree(dev[i]);
    cudaFree(st), cudaFree(ws);
    float *host[] = {q, k, v, dout, qw, kw, vw, dw, o, lse, gst, ref, go, gow, D, lse2, dq, dk, dv};
    for (size_t i = 0; i < sizeof host / sizeof *host; i++) free(host[i]);
    free(pos);
}

/* GQA groups of 1, 2, 4 and 8; Dh 64 and 128; S a multiple of 64 and not. */
static void test_cudnn(void) {
    char why[512];
    if (cuda_cudnn_known_fault(NULL)) { /* the runtime will not use this cuDNN at all */
        printf("cudnn attention skipped: cuDNN %zu: %s\n", cuda_cudnn_version(), cuda_cudnn_known_fault(NULL));
        return;
    }
    cuda_cudnn *c = cuda_cudnn_create(0, why, sizeof why);
    if (!c) {
        printf("cudnn attention: cannot create a handle: %s  FAIL\n", why);
        gt_failures++;
        return;
    }
    cuda_cudnn_shape shapes[] = {{1, 256, 8, 2, 64, 0, 0},
                                 {2, 200, 4, 1, 128, 0, 0},
                                 {1, 384, 16, 4, 128, 0, 0},
                                 {1, 130, 4, 4, 64, 0, 0},
                                 {2, 64, 8, 1, 64, 0, 0}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int sharp = 0; sharp < 2; sharp++) test_cudnn_attention(c, &shapes[i], sharp ? 3.f : 1.f);
    /* ring sub-blocks: the zig-zag halves (q the second half, k the first:
     * full; both the same half: the diagonal), GQA 4:1 and 1:1, b 1 and 2 */
    test_cudnn_ring_sub(c, 1, 256, 8, 2, 64, true, 256, 0);
    test_cudnn_ring_sub(c, 1, 256, 8, 2, 64, false, 256, 256);
    test_cudnn_ring_sub(c, 2, 128, 4, 4, 128, true, 128, 0);
    test_cudnn_ring_sub(c, 2, 128, 4, 4, 128, false, 0, 0);
    cuda_cudnn_destroy(c);
}
#endif

void gpu_attn_cases(void) {
    /* b, S, H, Hkv, Dh: every head dim, partial last tiles, S past several
     * 64-query / 32-key tiles, GQA groups of 1, 2, 4 */
    int shapes[][5] = {
        {1, 70, 8, 2, 8}, {2, 100, 4, 2, 16}, {1, 130, 4, 4, 32}, {1, 257, 8, 2, 64}, {2, 200, 4, 1, 128}};
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int sharp = 0; sharp < 2; sharp++)
            test_attention(shapes[i][0], shapes[i][1], shapes[i][2], shapes[i][3], shapes[i][4], sharp ? 3.f : 1.f);
    test_ring_merge();
#ifdef BASP_HAVE_CUDNN
    test_cudnn();
#endif
}
