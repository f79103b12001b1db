// kcu_split.cu — the helpers of the attentions split into calls of another
// attention (cuDNN): ring attention's sub-blocks (rt_ring_split.c: the
// merge of a sub-block into the ring's fp32 running state, the statistics'
// window, the accumulation of bf16 shares) and packed documents
// (rt_doc_split.c: documents gathered into zero-padded batches, results
// scattered back).  C interface: kcu.h.  Apart from kcu_ring.cu so that a
// program using only these (the GPU kernel test) does not link the block
// kernels' device code.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "kcu.h"

typedef __nv_bfloat16 bf16;

static __device__ __forceinline__ float ldf(const bf16 *p, int64_t i) { return __bfloat162float(p[i]); }

// Blocks of 256 threads, each thread one element, grid-stride.
static unsigned grid_for(int64_t n) {
    int64_t g = (n + 255) / 256;
    return (unsigned)(g < 4096 ? g : 4096);
}

// The weights of the running state (la) and of the sub-block (lb) in the
// merged softmax: exp(la - m) / s and exp(lb - m) / s over s = both, m the
// larger; a side that saw nothing (-inf) weighs 0.
static __device__ __forceinline__ void merge_weights(float la, float lb, float *ca, float *cb, float *lnew) {
    float m = fmaxf(la, lb);
    float wa = la == -INFINITY ? 0.f : expf(la - m), wb = lb == -INFINITY ? 0.f : expf(lb - m), s = wa + wb;
    *ca = wa / s, *cb = wb / s, *lnew = m + logf(s);
}

// A window: rows r0 .. r0+L-1 of each of the b sequences of [b, ld, ...]
// storage.
__global__ void k_ring_merge_o(float *o, const float *lse, const bf16 *ob, const float *st, int64_t b, int64_t ld,
                               int64_t r0, int64_t L, int H, int Dh) {
    int64_t n = b * L * H * Dh;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = e / Dh, h = r % H, i = r / H % L, bi = r / H / L;
        int64_t row = (bi * ld + r0 + i) * H + h;
        float lb = st[(bi * H + h) * L + i], ca, cb, ln;
        if (lb == -INFINITY) continue;
        merge_weights(lse[row], lb, &ca, &cb, &ln);
        int64_t at = row * Dh + e % Dh;
        o[at] = o[at] * ca + ldf(ob, at) * cb;
    }
}

__global__ void k_ring_merge_lse(float *lse, const float *st, int64_t b, int64_t ld, int64_t r0, int64_t L, int H) {
    int64_t n = b * L * H;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < n; r += (int64_t)gridDim.x * blockDim.x) {
        int64_t h = r % H, i = r / H % L, bi = r / H / L, row = (bi * ld + r0 + i) * H + h;
        float lb = st[(bi * H + h) * L + i], ca, cb, ln;
        if (lb == -INFINITY) continue;
        merge_weights(lse[row], lb, &ca, &cb, &ln);
        lse[row] = ln;
    }
}

__global__ void k_ring_lse_rows(float *st, const float *lse, int64_t b, int64_t ld, int64_t r0, int64_t L, int H) {
    int64_t n = b * L * H;
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < n; r += (int64_t)gridDim.x * blockDim.x) {
        int64_t h = r % H, i = r / H % L, bi = r / H / L;
        st[(bi * H + h) * L + i] = lse[(bi * ld + r0 + i) * H + h];
    }
}

__global__ void k_ring_acc_rows(float *acc, const bf16 *x, int64_t b, int64_t ld, int64_t r0, int64_t L, int64_t W) {
    int64_t n = b * L * W;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t at = ((e / W / L) * ld + r0 + e / W % L) * W + e % W;
        acc[at] += ldf(x, at);
    }
}

static bool window_ok(int64_t b, int64_t ld, int64_t r0, int64_t L, int64_t w) {
    return b > 0 && L > 0 && w > 0 && r0 >= 0 && r0 + L <= ld;
}

extern "C" cudaError_t kcu_ring_merge(float *o, float *lse, const kcu_bf16 *ob, const float *st, int64_t b, int64_t ld,
                                      int64_t r0, int64_t L, int64_t H, int64_t Dh, cudaStream_t st_) {
    if (!window_ok(b, ld, r0, L, H * Dh)) return cudaErrorInvalidValue;
    k_ring_merge_o<<<grid_for(b * L * H * Dh), 256, 0, st_>>>(o, lse, (const bf16 *)ob, st, b, ld, r0, L, (int)H,
                                                              (int)Dh);
    k_ring_merge_lse<<<grid_for(b * L * H), 256, 0, st_>>>(lse, st, b, ld, r0, L, (int)H);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_ring_lse_rows(float *st, const float *lse, int64_t b, int64_t ld, int64_t r0, int64_t L,
                                         int64_t H, cudaStream_t s) {
    if (!window_ok(b, ld, r0, L, H)) return cudaErrorInvalidValue;
    k_ring_lse_rows<<<grid_for(b * L * H), 256, 0, s>>>(st, lse, b, ld, r0, L, (int)H);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_ring_acc_rows(float *acc, const kcu_bf16 *x, int64_t b, int64_t ld, int64_t r0, int64_t L,
                                         int64_t W, cudaStream_t s) {
    if (!window_ok(b, ld, r0, L, W)) return cudaErrorInvalidValue;
    k_ring_acc_rows<<<grid_for(b * L * W), 256, 0, s>>>(acc, (const bf16 *)x, b, ld, r0, L, W);
    return cudaGetLastError();
}

// ---- packed documents in padded batches ---------------------------------------------------
__global__ void k_doc_gather(bf16 *dst, const bf16 *src, const int64_t *off, const int64_t *len, int64_t nb, int64_t L,
                             int64_t W) {
    int64_t n = nb * L * W;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = e / W / L, i = e / W % L;
        dst[e] = i < len[j] ? src[(off[j] + i) * W + e % W] : __float2bfloat16(0.f);
    }
}

__global__ void k_doc_scatter(bf16 *dst, const bf16 *src, const int64_t *off, const int64_t *len, int64_t nb, int64_t L,
                              int64_t W) {
    int64_t n = nb * L * W;
    for (int64_t e = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; e < n; e += (int64_t)gridDim.x * blockDim.x) {
        int64_t j = e / W / L, i = e / W % L;
        if (i < len[j]) dst[(off[j] + i) * W + e % W] = src[e];
    }
}

extern "C" cudaError_t kcu_doc_gather(kcu_bf16 *dst, const kcu_bf16 *src, const int64_t *off, const int64_t *len,
                                      int64_t nb, int64_t L, int64_t W, cudaStream_t s) {
    if (nb <= 0 || L <= 0 || W <= 0) return cudaErrorInvalidValue;
    k_doc_gather<<<grid_for(nb * L * W), 256, 0, s>>>((bf16 *)dst, (const bf16 *)src, off, len, nb, L, W);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_doc_scatter(kcu_bf16 *dst, const kcu_bf16 *src, const int64_t *off, const int64_t *len,
                                       int64_t nb, int64_t L, int64_t W, cudaStream_t s) {
    if (nb <= 0 || L <= 0 || W <= 0) return cudaErrorInvalidValue;
    k_doc_scatter<<<grid_for(nb * L * W), 256, 0, s>>>((bf16 *)dst, (const bf16 *)src, off, len, nb, L, W);
    return cudaGetLastError();
}
