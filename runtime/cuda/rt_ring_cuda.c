/* rt_ring_cuda.c — ring attention on the CUDA backend (IR ops
 * ring_attention and ring_attention_bwd; the CPU version and the algorithm
 * are in runtime/cpu/rt_ring.c).
 *
 * Point-to-point here is always a pair: at each step every rank of the ring
 * sends its block to the next rank and receives the previous rank's, both
 * in one NCCL group on the communication stream.  Every rank posts the same
 * pairs in the same order, so no rank waits for a send that another rank
 * has not issued: the ring cannot deadlock.  The block's kernel runs on the
 * compute stream meanwhile (the exchange only waits for what cs issued
 * before it), and cs waits for the exchange before the next block.
 *
 * Everything carried from step to step is fp32 (kcu.h, "ring attention"):
 * the running output and lse, and the backward's dq, dk, dv accumulators;
 * the kv blocks travel in bf16, as they are stored.  At the end cs waits
 * for all of this op's work on ms, so the buffer-reuse fences of
 * rt_buf_cuda.c see the op as compute-stream work only.
 *
 * With packed documents every rank knows the whole step's document ids
 * (rt_doc_slice), so the ids of every ring position's block are looked up
 * and uploaded once per op on cs, never sent; the block kernels add "same
 * document" to the mask.
 *
 * Without documents, where cuDNN runs attention, each block is a few of
 * its fused calls on windows of the block instead of basp's block kernel
 * (rt_ring_split.c): the ring around them is the same. */
#include <math.h>
#include <stdlib.h>

#include "../data/rt_data.h"
#include "rt_cuda.h"

#define B16(p)  ((kcu_bf16 *)(void *)(p))
#define CB16(p) ((const kcu_bf16 *)(const void *)(p))

static void cuda_ring_check(int64_t H, int64_t Hkv, int64_t Dh) {
    RT_CHECK(Dh == 8 || Dh == 16 || Dh == 32 || Dh == 64 || Dh == 128,
             "ring attention: head_dim %lld is not supported by the CUDA kernels (8, 16, 32, 64 or 128)",
             (long long)Dh);
    RT_CHECK(Hkv > 0 && H % Hkv == 0, "ring attention: %lld q heads do not group over %lld kv heads", (long long)H,
             (long long)Hkv);
}

/* One step's exchange: n elements of each of the cnt buffers of src go to
 * the next rank, the previous rank's land in dst; `done` is recorded on ms
 * after it. */
static void cuda_ring_exchange(rt_ctx *rt, int g, void *const *dst, const void *const *src, int cnt, size_t n,
                               ncclDataType_t t, cudaEvent_t done, int64_t bytes) {
    rt_cuda_state *cu = cuda_state(rt);
    int R = rt_coll_set_size(rt, g), me = rt->gpos[g];
    cuda_follow_cs(rt);
    NCCL_CHECK(ncclGroupStart());
    for (int i = 0; i < cnt; i++) {
        NCCL_CHECK(ncclSend(src[i], n, t, (me + 1) % R, cu->comm[g], cu->ms));
        NCCL_CHECK(ncclRecv(dst[i], n, t, (me + R - 1) % R, cu->comm[g], cu->ms));
    }
    NCCL_CHECK(ncclGroupEnd());
    CU_CHECK(cudaEventRecord(done, cu->ms));
    rt_coll_count(rt, RT_C_SEND, bytes, 0.0);
}

/* The two events of the ring's exchanges, made once: an event may be
 * destroyed only after the work waiting on it has run. */
static cudaEvent_t cuda_ring_event(rt_ctx *rt, int i) {
    rt_cuda_state *cu = cuda_state(rt);
    if (!cu->ring_ev[i]) CU_CHECK(cudaEventCreateWithFlags(&cu->ring_ev[i], cudaEventDisableTiming));
    return cu->ring_ev[i];
}

/* The document ids [b,S] of ring position r's block: module-order indices
 * r*S .. r*S+S-1 of rows row0 .. row0+b-1 (NULL without documents). */
static const int32_t *cuda_ring_block_docs(const int32_t *docs, int64_t b, int64_t S, int r) {
    return docs ? docs + (int64_t)r * b * S : NULL;
}

/* Every ring position's ids, [R][b,S], uploaded on cs before the op's
 * first kernel; NULL without packed documents. */
static const int32_t *cuda_ring_docs(rt_ctx *rt, int64_t row0, int64_t b, int64_t S, int R) {
    if (!rt->docs) return NULL;
    size_t n = (size_t)(b * S), bytes = sizeof(int32_t) * n * (size_t)R;
    int32_t *host = RT_MALLOC(bytes > 0 ? bytes : 1);
    for (int r = 0; r < R; r++) rt_doc_slice(rt, row0, b, (int64_t)r * S, S, host + (size_t)r * n, NULL);
    const int32_t *dev = cuda_upload(rt, CM_WS_CUDA_DOC, host, bytes);
    free(host);
    return dev;
}

static void cuda_ring_time(rt_ctx *rt, cm_kernel_kind kind, double t0) {
    if (cuda_state(rt)->sync_timing) CU_CHECK(cudaStreamSynchronize(cuda_state(rt)->cs));
    rt_kern_count(rt, kind, t0);
}

void rt_ring_attention(rt_ctx *rt, int g, float *o, float *lse, const float *q, const float *k, const float *v,
                       int64_t row0, int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    rt_cuda_state *cu = cuda_state(rt);
    cuda_ring_check(H, Hkv, Dh);
    int R = rt_coll_set_size(rt, g), me = rt->gpos[g];
    size_t nq = (size_t)(b * S * H * Dh), nkv = (size_t)(b * S * Hkv * Dh);
    cuda_ring_split sp;
    bool split = cuda_ring_split_begin(rt, &sp, g, b, S, H, Hkv, Dh, false);
    size_t base = cuda_align(nq * 4 + 4 * nkv * 2);
    char *ws = cuda_ws(rt, CM_WS_CUDA_RING, base + (split ? cuda_ring_split_ws(&sp, false) : 256));
    if (split) cuda_ring_split_bind(&sp, ws + base, false);
    float *o32 = (float *)(void *)ws;
    kcu_bf16 *kvb = (kcu_bf16 *)(void *)(ws + nq * 4);
    const int64_t *pos = cuda_seq_pos(rt);
    const int32_t *docs = cuda_ring_docs(rt, row0, b, S, R);
    cudaEvent_t done = cuda_ring_event(rt, 0);
    double t0 = rt_now();
    CU_CHECK(cudaMemsetAsync(o32, 0, nq * 4, cu->cs));
    CU_CHECK(kcu_fill_f32(lse, -INFINITY, (int64_t)(b * S * H), cu->cs));
    const kcu_bf16 *cur[2] = {CB16(k), CB16(v)};
    for (int s = 0; s < R; s++) {
        kcu_bf16 *nxt[2] = {kvb + (size_t)(s % 2) * 2 * nkv, kvb + (size_t)(s % 2) * 2 * nkv + nkv};
        if (s < R - 1)
            cuda_ring_exchange(rt, g, (void *const *)nxt, (const void *const *)cur, 2, nkv, ncclBfloat16, done,
                               (int64_t)(2 * nkv * 2));
        int src = (me - s + R) % R; /* the ring position whose block this is */
        if (split)
            cuda_ring_split_fwd(rt, &sp, src, o32, lse, CB16(q), cur[0], cur[1], pos + (int64_t)me * S,
                                pos + (int64_t)src * S);
        else
            CU_CHECK(kcu_ring_block_fwd_doc(
                o32, lse, CB16(q), cur[0], cur[1], b, S, S, H, Hkv, Dh, pos + (int64_t)me * S, pos + (int64_t)src * S,
                cuda_ring_block_docs(docs, b, S, me), cuda_ring_block_docs(docs, b, S, src), cu->cs));
        if (s < R - 1) CU_CHECK(cudaStreamWaitEvent(cu->cs, done, 0));
        cur[0] = nxt[0], cur[1] = nxt[1];
    }
    if (split) cuda_ring_split_fwd_end(rt, &sp, o32, lse);
    CU_CHECK(kcu_f32_to_bf16(B16(o), o32, (int64_t)nq, cu->cs));
    cuda_ring_time(rt, CM_K_RING_ATTENTION, t0);
}

void rt_ring_attention_bwd(rt_ctx *rt, int g, float *dq, float *dk, float *dv, const float *dout, const float *q,
                           const float *k, const float *v, const float *o, const float *lse, int64_t row0, int64_t b,
                           int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    rt_cuda_state *cu = cuda_state(rt);
    cuda_ring_check(H, Hkv, Dh);
    int R = rt_coll_set_size(rt, g), me = rt->gpos[g];
    size_t nq = (size_t)(b * S * H * Dh), nkv = (size_t)(b * S * Hkv * Dh), nr = (size_t)(b * S * H);
    cuda_ring_split sp;
    bool split = cuda_ring_split_begin(rt, &sp, g, b, S, H, Hkv, Dh, true);
    size_t base = cuda_align(nr * 4 + nq * 4 + 4 * nkv * 2 + 4 * nkv * 4);
    char *ws = cuda_ws(rt, CM_WS_CUDA_RING, base + (split ? cuda_ring_split_ws(&sp, true) : 256));
    if (split) cuda_ring_split_bind(&sp, ws + base, true);
    float *D = (float *)(void *)ws, *dq32 = D + nr;
    kcu_bf16 *kvb = (kcu_bf16 *)(void *)(dq32 + nq);
    float *acc0 = (float *)(void *)(kvb + 4 * nkv); /* two slots of (dk, dv) */
    const int64_t *pos = cuda_seq_pos(rt);
    const int32_t *docs = cuda_ring_docs(rt, row0, b, S, R);
    cudaEvent_t kv_done = cuda_ring_event(rt, 0), acc_done = cuda_ring_event(rt, 1);
    double t0 = rt_now();
    CU_CHECK(kcu_ring_rowdot(D, CB16(dout), CB16(o), b, S, H, Dh, cu->cs));
    CU_CHECK(cudaMemsetAsync(dq32, 0, nq * 4, cu->cs));
    CU_CHECK(cudaMemsetAsync(acc0, 0, 2 * nkv * 4, cu->cs));
    const kcu_bf16 *cur[2] = {CB16(k), CB16(v)};
    float *acc[2] = {acc0, acc0 + nkv};
    for (int s = 0; s < R; s++) {
        kcu_bf16 *nxt[2] = {kvb + (size_t)(s % 2) * 2 * nkv, kvb + (size_t)(s % 2) * 2 * nkv + nkv};
        if (s < R - 1)
            cuda_ring_exchange(rt, g, (void *const *)nxt, (const void *const *)cur, 2, nkv, ncclBfloat16, kv_done,
                               (int64_t)(2 * nkv * 2));
        int src = (me - s + R) % R;
        if (split)
            cuda_ring_split_bwd(rt, &sp, src, dq32, acc[0], acc[1], CB16(dout), CB16(q), cur[0], cur[1], CB16(o), lse,
                                D, pos + (int64_t)me * S, pos + (int64_t)src * S);
        else
            CU_CHECK(kcu_ring_block_bwd_doc(dq32, acc[0], acc[1], CB16(dout), CB16(q), cur[0], cur[1], lse, D, b, S, S,
                                            H, Hkv, Dh, pos + (int64_t)me * S, pos + (int64_t)src * S,
                                            cuda_ring_block_docs(docs, b, S, me), cuda_ring_block_docs(docs, b, S, src),
                                            cu->cs));
        if (R > 1) { /* the accumulators go on once this rank's share is in */
            float *other = acc[0] == acc0 ? acc0 + 2 * nkv : acc0;
            float *gdst[2] = {other, other + nkv};
            cuda_ring_exchange(rt, g, (void *const *)gdst, (const void *const *)acc, 2, nkv, ncclFloat32, acc_done,
                               (int64_t)(2 * nkv * 4));
            CU_CHECK(cudaStreamWaitEvent(cu->cs, acc_done, 0));
            acc[0] = gdst[0], acc[1] = gdst[1];
        }
        if (s < R - 1) CU_CHECK(cudaStreamWaitEvent(cu->cs, kv_done, 0));
        cur[0] = nxt[0], cur[1] = nxt[1];
    }
    CU_CHECK(kcu_f32_to_bf16(B16(dq), dq32, (int64_t)nq, cu->cs));
    CU_CHECK(kcu_f32_to_bf16(B16(dk), acc[0], (int64_t)nkv, cu->cs));
    CU_CHECK(kcu_f32_to_bf16(B16(dv), acc[1], (int64_t)nkv, cu->cs));
    cuda_ring_time(rt, CM_K_RING_ATTENTION_BWD, t0);
}
