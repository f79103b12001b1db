/* cuemu_sub_ops.c — an attention for the split attentions' sub-blocks
 * (runtime/cuda/rt_ring_split.c, rt_doc_split.c) made of basp's kernels,
 * standing in for cuDNN's fused graphs where there is no cuDNN (cuemu).  A
 * sub-block's windows (L rows of [b, ld, heads, Dh]) are packed, a ring
 * block kernel runs from an empty state (positions 0..L-1 on both sides
 * for the causal diagonal, no key positions for a full block), its output
 * is rounded to bf16 into the window and its lse laid out as cuDNN's
 * statistics [b,H,L]; the backward takes the statistics back to the block
 * kernel's [b,L,H] and D from the window's o and dO.  cuemu_sub_ops_flipped
 * computes full sub-blocks as causal and causal ones as full: the planted
 * fault the one-time checks must refuse.
 *
 * Used by test_ring_split_emu.c, and by the emulated backend's training
 * runs when CUEMU_SUB_OPS is set (runtime/cuda/rt_kernels_cuda.c, built
 * with BASP_CUEMU). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "rt_cuda.h"

/* Device buffers of one call, freed at its end (after a synchronize). */
typedef struct {
    void *p[16];
    int n;
} scratch;

static void *grab(scratch *s, size_t bytes) {
    void *p = NULL;
    CU_CHECK(cudaMalloc(&p, bytes));
    s->p[s->n++] = p;
    return p;
}

static void release(scratch *s) {
    CU_CHECK(cudaDeviceSynchronize());
    for (int i = 0; i < s->n; i++) CU_CHECK(cudaFree(s->p[i]));
    s->n = 0;
}

/* The window's b x L rows of width w (ld rows apart) to or from a packed
 * [b, L, w] buffer. */
static void window(cudaStream_t st, kcu_bf16 *dst, const kcu_bf16 *src, const cuda_sub *sb, int64_t w, bool to_window) {
    for (int64_t bi = 0; bi < sb->b; bi++) {
        size_t wb = sizeof(kcu_bf16) * (size_t)w;
        kcu_bf16 *d = to_window ? dst + bi * sb->ld * w : dst + bi * sb->L * w;
        const kcu_bf16 *s = to_window ? src + bi * sb->L * w : src + bi * sb->ld * w;
        CU_CHECK(cudaMemcpyAsync(d, s, wb * (size_t)sb->L, cudaMemcpyDeviceToDevice, st));
    }
}

/* Positions 0 .. L-1 on both sides (the causal diagonal), or no key
 * positions (everything visible). */
static const int64_t *ref_pos(scratch *s, cudaStream_t st, int64_t L) {
    int64_t *h = malloc(sizeof(int64_t) * (size_t)L);
    for (int64_t i = 0; i < L; i++) h[i] = i;
    int64_t *d = grab(s, sizeof(int64_t) * (size_t)L);
    CU_CHECK(cudaMemcpyAsync(d, h, sizeof(int64_t) * (size_t)L, cudaMemcpyHostToDevice, st));
    CU_CHECK(cudaStreamSynchronize(st));
    free(h);
    return d;
}

static bool sub_prepare(rt_ctx *rt, const cuda_sub *sb, char *why, size_t nwhy) {
    (void)rt, (void)sb, (void)why, (void)nwhy;
    return true;
}

static void sub_fwd(rt_ctx *rt, const cuda_sub *sb, bool flip, kcu_bf16 *o, float *st, const kcu_bf16 *q,
                    const kcu_bf16 *k, const kcu_bf16 *v) {
    cudaStream_t cs = cuda_state(rt)->cs;
    scratch s = {.n = 0};
    int64_t wq = sb->H * sb->Dh, wk = sb->Hkv * sb->Dh, nq = sb->b * sb->L * wq, nk = sb->b * sb->L * wk;
    int64_t nr = sb->b * sb->L * sb->H;
    kcu_bf16 *qp = grab(&s, 2 * (size_t)nq), *kp = grab(&s, 2 * (size_t)nk), *vp = grab(&s, 2 * (size_t)nk);
    kcu_bf16 *ob = grab(&s, 2 * (size_t)nq);
    float *o32 = grab(&s, 4 * (size_t)nq), *lse = grab(&s, 4 * (size_t)nr);
    window(cs, qp, q, sb, wq, false), window(cs, kp, k, sb, wk, false), window(cs, vp, v, sb, wk, false);
    CU_CHECK(cudaMemsetAsync(o32, 0, 4 * (size_t)nq, cs));
    CU_CHECK(kcu_fill_f32(lse, -INFINITY, nr, cs));
    const int64_t *pos = ref_pos(&s, cs, sb->L);
    bool causal = !sb->full != flip;
    CU_CHECK(kcu_ring_block_fwd(o32, lse, qp, kp, vp, sb->b, sb->L, sb->L, sb->H, sb->Hkv, sb->Dh, pos,
                                causal ? pos : NULL, cs));
    CU_CHECK(kcu_f32_to_bf16(ob, o32, nq, cs));
    window(cs, o, ob, sb, wq, true);
    CU_CHECK(kcu_ring_lse_rows(st, lse, sb->b, sb->L, 0, sb->L, sb->H, cs));
    release(&s);
}

static void sub_bwd(rt_ctx *rt, const cuda_sub *sb, bool flip, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv,
                    const kcu_bf16 *dout, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o,
                    const float *st) {
    cudaStream_t cs = cuda_state(rt)->cs;
    scratch s = {.n = 0};
    int64_t wq = sb->H * sb->Dh, wk = sb->Hkv * sb->Dh, nq = sb->b * sb->L * wq, nk = sb->b * sb->L * wk;
    int64_t nr = sb->b * sb->L * sb->H;
    kcu_bf16 *p[5], *g[3];
    const kcu_bf16 *in[5] = {dout, q, o, k, v};
    for (int i = 0; i < 5; i++) {
        p[i] = grab(&s, 2 * (size_t)(i < 3 ? nq : nk));
        window(cs, p[i], in[i], sb, i < 3 ? wq : wk, false);
    }
    float *f[3], *D = grab(&s, 4 * (size_t)nr), *lse = grab(&s, 4 * (size_t)nr);
    for (int i = 0; i < 3; i++) {
        f[i] = grab(&s, 4 * (size_t)(i ? nk : nq));
        g[i] = grab(&s, 2 * (size_t)(i ? nk : nq));
        CU_CHECK(cudaMemsetAsync(f[i], 0, 4 * (size_t)(i ? nk : nq), cs));
    }
    /* st [b,H,L] back to the block kernels' [b,L,H], on the host */
    float *hs = malloc(4 * (size_t)nr), *hl = malloc(4 * (size_t)nr);
    CU_CHECK(cudaStreamSynchronize(cs));
    CU_CHECK(cudaMemcpy(hs, st, 4 * (size_t)nr, cudaMemcpyDeviceToHost));
    for (int64_t bi = 0; bi < sb->b; bi++)
        for (int64_t h = 0; h < sb->H; h++)
            for (int64_t i = 0; i < sb->L; i++) hl[(bi * sb->L + i) * sb->H + h] = hs[(bi * sb->H + h) * sb->L + i];
    CU_CHECK(cudaMemcpy(lse, hl, 4 * (size_t)nr, cudaMemcpyHostToDevice));
    free(hs), free(hl);
    CU_CHECK(kcu_ring_rowdot(D, p[0], p[2], sb->b, sb->L, sb->H, sb->Dh, cs));
    const int64_t *pos = ref_pos(&s, cs, sb->L);
    bool causal = !sb->full != flip;
    CU_CHECK(kcu_ring_block_bwd(f[0], f[1], f[2], p[0], p[1], p[3], p[4], lse, D, sb->b, sb->L, sb->L, sb->H, sb->Hkv,
                                sb->Dh, pos, causal ? pos : NULL, cs));
    kcu_bf16 *out[3] = {dq, dk, dv};
    for (int i = 0; i < 3; i++) {
        CU_CHECK(kcu_f32_to_bf16(g[i], f[i], i ? nk : nq, cs));
        window(cs, out[i], g[i], sb, i ? wk : wq, true);
    }
    release(&s);
}

static void sub_fwd_ok(rt_ctx *rt, const cuda_sub *sb, kcu_bf16 *o, float *st, const kcu_bf16 *q, const kcu_bf16 *k,
                       const kcu_bf16 *v) {
    sub_fwd(rt, sb, false, o, st, q, k, v);
}
static void sub_fwd_flip(rt_ctx *rt, const cuda_sub *sb, kcu_bf16 *o, float *st, const kcu_bf16 *q, const kcu_bf16 *k,
                         const kcu_bf16 *v) {
    sub_fwd(rt, sb, true, o, st, q, k, v);
}
static void sub_bwd_ok(rt_ctx *rt, const cuda_sub *sb, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv, const kcu_bf16 *dout,
                       const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o, const float *st) {
    sub_bwd(rt, sb, false, dq, dk, dv, dout, q, k, v, o, st);
}
static void sub_bwd_flip(rt_ctx *rt, const cuda_sub *sb, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv, const kcu_bf16 *dout,
                         const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o, const float *st) {
    sub_bwd(rt, sb, true, dq, dk, dv, dout, q, k, v, o, st);
}

const cuda_sub_ops cuemu_sub_ops = {sub_prepare, sub_fwd_ok, sub_bwd_ok};
const cuda_sub_ops cuemu_sub_ops_flipped = {sub_prepare, sub_fwd_flip, sub_bwd_flip};
