// kcu_gemm.cu — the GEMM-shaped ops: linear forward/backward and the LM
// head fused with the cross-entropy, through cublasGemmEx (bf16 inputs,
// fp32 compute).  C interface: kcu.h; reference: ../host/kern_linear.c and
// ../host/kern_lmhead.c.
//
// cuBLAS is column-major: a row-major [r, c] matrix is a column-major
// [c, r] one, so each row-major product C = A @ B is issued as
// C^T = B^T A^T with the operands swapped (shapes in the comments are the
// row-major ones).
#include <cuda_bf16.h>
#include <limits.h>
#include <stdio.h>

#include "kcu.h"

typedef __nv_bfloat16 bf16;

// A failed cuBLAS call is reported with its place and status here; the
// caller sees cudaErrorUnknown and stops with its own file and line.
#define KCU_BLAS(call)                                                                                                 \
    do {                                                                                                               \
        cublasStatus_t s_ = (call);                                                                                    \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                                             \
            fprintf(stderr, "%s:%d: error: %s failed: %s\n", __FILE__, __LINE__, #call, cublasGetStatusString(s_));    \
            return cudaErrorUnknown;                                                                                   \
        }                                                                                                              \
    } while (0)

static bool fits_int(int64_t a, int64_t b, int64_t c) {
    return a >= 0 && b >= 0 && c >= 0 && a <= INT_MAX && b <= INT_MAX && c <= INT_MAX;
}

// C[m,n] (column-major, ldc) = alpha op(A) op(B) + beta C; A, B bf16, C ctype.
static cublasStatus_t gemm(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n,
                           int64_t k, const void *A, int64_t lda, const void *B, int64_t ldb, float beta, void *C,
                           cudaDataType_t ctype, int64_t ldc) {
    float alpha = 1.f;
    return cublasGemmEx(h, ta, tb, (int)m, (int)n, (int)k, &alpha, A, CUDA_R_16BF, (int)lda, B, CUDA_R_16BF, (int)ldb,
                        &beta, C, ctype, (int)ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
}

// y[N,O] = x[N,I] @ w[I,O]
extern "C" cudaError_t kcu_linear_fwd(cublasHandle_t h, kcu_bf16 *y, const kcu_bf16 *x, const kcu_bf16 *w, int64_t N,
                                      int64_t I, int64_t O) {
    if (!fits_int(N, I, O)) return cudaErrorInvalidValue;
    if (N == 0 || O == 0) return cudaSuccess;
    KCU_BLAS(gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, O, N, I, w, O, x, I, 0.f, y, CUDA_R_16BF, O));
    return cudaSuccess;
}

// dx[N,I] = dy[N,O] @ w^T ; dw[I,O] = x^T @ dy
extern "C" cudaError_t kcu_linear_bwd(cublasHandle_t h, kcu_bf16 *dx, kcu_bf16 *dw, const kcu_bf16 *dy,
                                      const kcu_bf16 *x, const kcu_bf16 *w, int64_t N, int64_t I, int64_t O) {
    if (!fits_int(N, I, O)) return cudaErrorInvalidValue;
    if (N == 0 || I == 0 || O == 0) return cudaSuccess;
    KCU_BLAS(gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, I, N, O, w, O, dy, O, 0.f, dx, CUDA_R_16BF, I));
    KCU_BLAS(gemm(h, CUBLAS_OP_N, CUBLAS_OP_T, O, I, N, dy, O, x, I, 0.f, dw, CUDA_R_16BF, O));
    return cudaSuccess;
}

// ---- the tiled SwiGLU MLP ------------------------------------------------------------------
// Row-major C[M,N] = op(A) @ op(B) + beta C: op(A) is [M,K] (stored [K,M]
// when ta), op(B) is [K,N] (stored [N,K] when tb); issued column-major as
// C^T = op(B)^T op(A)^T.
static cublasStatus_t gemm_rm(cublasHandle_t h, bool ta, bool tb, int64_t M, int64_t N, int64_t K, const void *A,
                              const void *B, float beta, void *C) {
    return gemm(h, tb ? CUBLAS_OP_T : CUBLAS_OP_N, ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, B, tb ? K : N, A,
                ta ? M : K, beta, C, CUDA_R_16BF, N);
}

// Rows per chunk: `chunk` when 1..N, else all N at once.
static int64_t mlp_rows(int64_t N, int64_t chunk) { return chunk >= 1 && chunk < N ? chunk : (N > 0 ? N : 1); }

extern "C" int64_t kcu_mlp_ws_elems(int64_t N, int64_t F, int64_t chunk) { return 3 * mlp_rows(N, chunk) * F; }

// g, u = x_c @ wg, x_c @ wu ; s = silu(g) * u   (each [m, F] in ws)
static cudaError_t mlp_gus(cublasHandle_t h, bf16 *g, bf16 *u, bf16 *s, const bf16 *xc, const bf16 *wg, const bf16 *wu,
                           int64_t m, int64_t D, int64_t F, cudaStream_t st) {
    KCU_BLAS(gemm_rm(h, false, false, m, F, D, xc, wg, 0.f, g));
    KCU_BLAS(gemm_rm(h, false, false, m, F, D, xc, wu, 0.f, u));
    return kcu_swiglu_fwd((kcu_bf16 *)s, (const kcu_bf16 *)g, (const kcu_bf16 *)u, m * F, st);
}

// y[N,D] = (silu(x@wg) * (x@wu)) @ wd, chunk rows at a time (../host/kern_mlp.c)
extern "C" cudaError_t kcu_mlp_fwd(cublasHandle_t h, kcu_bf16 *y, const kcu_bf16 *x, const kcu_bf16 *wg,
                                   const kcu_bf16 *wu, const kcu_bf16 *wd, int64_t N, int64_t D, int64_t F,
                                   int64_t chunk, kcu_bf16 *ws, cudaStream_t st) {
    if (!fits_int(N, D, F)) return cudaErrorInvalidValue;
    int64_t c = mlp_rows(N, chunk);
    bf16 *g = (bf16 *)ws, *u = g + c * F, *s = u + c * F;
    for (int64_t r = 0; r < N; r += c) {
        int64_t m = N - r < c ? N - r : c;
        cudaError_t e = mlp_gus(h, g, u, s, (const bf16 *)x + r * D, (const bf16 *)wg, (const bf16 *)wu, m, D, F, st);
        if (e != cudaSuccess) return e;
        KCU_BLAS(gemm_rm(h, false, false, m, D, F, s, wd, 0.f, (bf16 *)y + r * D));
    }
    return cudaSuccess;
}

// Backward, recomputing each chunk's g and u; the weight gradients are
// overwritten by the first chunk and accumulated (in bf16, fp32 compute) by
// the others.
extern "C" cudaError_t kcu_mlp_bwd(cublasHandle_t h, kcu_bf16 *dx, kcu_bf16 *dwg, kcu_bf16 *dwu, kcu_bf16 *dwd,
                                   const kcu_bf16 *dy, const kcu_bf16 *x, const kcu_bf16 *wg, const kcu_bf16 *wu,
                                   const kcu_bf16 *wd, int64_t N, int64_t D, int64_t F, int64_t chunk, kcu_bf16 *ws,
                                   cudaStream_t st) {
    if (!fits_int(N, D, F)) return cudaErrorInvalidValue;
    if (N == 0) return cudaErrorInvalidValue; // the IR never has an empty shard
    int64_t c = mlp_rows(N, chunk);
    bf16 *g = (bf16 *)ws, *u = g + c * F, *s = u + c * F;
    for (int64_t r = 0; r < N; r += c) {
        int64_t m = N - r < c ? N - r : c;
        float beta = r == 0 ? 0.f : 1.f;
        const bf16 *xc = (const bf16 *)x + r * D, *dyc = (const bf16 *)dy + r * D;
        bf16 *dxc = (bf16 *)dx + r * D;
        cudaError_t e = mlp_gus(h, g, u, s, xc, (const bf16 *)wg, (const bf16 *)wu, m, D, F, st);
        if (e != cudaSuccess) return e;
        KCU_BLAS(gemm_rm(h, true, false, F, D, m, s, dyc, beta, dwd)); // dwd (+)= s^T @ dy_c
        KCU_BLAS(gemm_rm(h, false, true, m, F, D, dyc, wd, 0.f, s));   // ds = dy_c @ wd^T
        e = kcu_swiglu_bwd((kcu_bf16 *)g, (kcu_bf16 *)u, (const kcu_bf16 *)s, (const kcu_bf16 *)g, (const kcu_bf16 *)u,
                           m * F, st); // elementwise, in place
        if (e != cudaSuccess) return e;
        KCU_BLAS(gemm_rm(h, false, true, m, D, F, g, wg, 0.f, dxc));  // dx_c = dg @ wg^T
        KCU_BLAS(gemm_rm(h, false, true, m, D, F, u, wu, 1.f, dxc));  //      + du @ wu^T
        KCU_BLAS(gemm_rm(h, true, false, D, F, m, xc, g, beta, dwg)); // dwg (+)= x_c^T @ dg
        KCU_BLAS(gemm_rm(h, true, false, D, F, m, xc, u, beta, dwu)); // dwu (+)= x_c^T @ du
    }
    return cudaSuccess;
}

// ---- lm head + cross-entropy -------------------------------------------------------------

// Rows per chunk of the forward (and of the backward's statistics pass):
// the fp32 logits of one chunk stay under ~256 MiB at 6 bytes an element
// (V = 128K: 320 rows), in multiples of 64 rows.
extern "C" int64_t kcu_lm_head_chunk(int64_t N, int64_t V) {
    int64_t c = ((int64_t)256 << 20) / (6 * (V > 0 ? V : 1));
    if (c >= 64) c = c / 64 * 64;
    if (c < 1) c = 1;
    return c < N ? c : (N > 0 ? N : 1);
}

// Vocabulary columns per chunk of the backward: the fp32 logits and bf16
// dlogits of one block of N rows (kcu_lm_head_xchunk) for those columns
// stay under the same ~256 MiB.
extern "C" int64_t kcu_lm_head_vchunk(int64_t N, int64_t V) {
    int64_t c = ((int64_t)256 << 20) / (6 * (N > 0 ? N : 1));
    if (c >= 64) c = c / 64 * 64;
    if (c < 1) c = 1;
    return c < V ? c : (V > 0 ? V : 1);
}

// Rows per block of the backward, whose dx is summed over the vocabulary
// in fp32 [rows, D].  All N rows in one block while that is no larger than
// the alternative: blocks of ~256 MiB of fp32 dx rows (in multiples of 64)
// plus dw summed over the blocks in fp32 [V, D], i.e. while N <= V + block.
extern "C" int64_t kcu_lm_head_xchunk(int64_t N, int64_t V, int64_t D) {
    int64_t r = ((int64_t)256 << 20) / (4 * (D > 0 ? D : 1));
    if (r >= 64) r = r / 64 * 64;
    if (r < 1) r = 1;
    int64_t n = N > 0 ? N : 1;
    return n <= (V > 0 ? V : 0) + r ? n : r;
}

static __device__ __forceinline__ float warp_max(float v) {
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Max (is_max) or sum over the block, returned to every thread.
static __device__ float block_reduce(float v, bool is_max) {
    __shared__ float sh[33];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float t = lane < nw ? sh[lane] : (is_max ? -INFINITY : 0.f);
        t = is_max ? warp_max(t) : warp_sum(t);
        if (lane == 0) sh[32] = t;
    }
    __syncthreads();
    float r = sh[32];
    __syncthreads();
    return r;
}

// Row max and log(sum(exp(row - max))) + max of one logits row (V floats).
static __device__ float row_lse(const float *row, int64_t V, float *mx_out) {
    float mx = -INFINITY;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) mx = fmaxf(mx, row[j]);
    mx = block_reduce(mx, true);
    float s = 0.f;
    for (int64_t j = threadIdx.x; j < V; j += blockDim.x) s += __expf(row[j] - mx);
    s = block_reduce(s, false);
    *mx_out = mx;
    return mx + logf(s);
}

// rowloss[c] for logits [c, V], and each row's log-sum-exp (lse, when not
// NULL; the backward's statistics): one block per row
__global__ void k_ce_fwd(const float *logits, const int32_t *tgt, int64_t V, float *rowloss, float *lse_out, int *err) {
    const float *row = logits + blockIdx.x * V;
    float mx;
    float lse = row_lse(row, V, &mx);
    if (threadIdx.x == 0) {
        int32_t t = tgt[blockIdx.x];
        if (t >= V) *err = 1;
        if (rowloss) rowloss[blockIdx.x] = t < 0 || t >= V ? 0.f : lse - row[t];
        if (lse_out) lse_out[blockIdx.x] = lse;
    }
}

// dl[N, vc] for the vocabulary columns v0 .. v0+vc of logits [N, vc]:
// (softmax - onehot(t)) * scale with each row's lse, zero for ignored rows.
__global__ void k_ce_bwd_cols(const float *logits, const float *lse, const int32_t *tgt, int64_t V, int64_t v0,
                              int64_t vc, float scale, bf16 *dl) {
    const float *row = logits + blockIdx.x * vc;
    bf16 *out = dl + blockIdx.x * vc;
    int32_t t = tgt[blockIdx.x];
    bool skip = t < 0 || t >= V;
    float l = skip ? 0.f : lse[blockIdx.x];
    for (int64_t j = threadIdx.x; j < vc; j += blockDim.x) {
        float p = skip ? 0.f : __expf(row[j] - l) * scale;
        out[j] = __float2bfloat16(v0 + j == t ? p - scale : p);
    }
}

// loss[0] = sum of rowloss[N], in double, one block (deterministic)
__global__ void k_sum_rows(const float *rowloss, int64_t N, float *loss) {
    __shared__ double sh[1024];
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < N; i += blockDim.x) s += rowloss[i];
    sh[threadIdx.x] = s;
    __syncthreads();
    for (int w = blockDim.x / 2; w > 0; w >>= 1) {
        if ((int)threadIdx.x < w) sh[threadIdx.x] += sh[threadIdx.x + w];
        __syncthreads();
    }
    if (threadIdx.x == 0) loss[0] = (float)sh[0];
}

// logits[c, V] (fp32) = x[n0 .. n0+c, D] @ w[V, D]^T
static cublasStatus_t chunk_logits(cublasHandle_t h, float *lg, const bf16 *x, const bf16 *w, int64_t n0, int64_t c,
                                   int64_t V, int64_t D) {
    return gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, V, c, D, w, D, x + n0 * D, D, 0.f, lg, CUDA_R_32F, V);
}

extern "C" cudaError_t kcu_lm_head_loss_fwd(cublasHandle_t h, float *loss, const kcu_bf16 *x, const kcu_bf16 *w,
                                            const int32_t *tgt, int64_t N, int64_t V, int64_t D,
                                            const kcu_lmhead_ws *ws, cudaStream_t st) {
    if (!fits_int(N, V, D) || V <= 0) return cudaErrorInvalidValue;
    const bf16 *xb = (const bf16 *)x, *wb = (const bf16 *)w;
    for (int64_t n0 = 0; n0 < N; n0 += ws->chunk) {
        int64_t c = N - n0 < ws->chunk ? N - n0 : ws->chunk;
        KCU_BLAS(chunk_logits(h, ws->logits, xb, wb, n0, c, V, D));
        k_ce_fwd<<<(unsigned)c, 256, 0, st>>>(ws->logits, tgt + n0, V, ws->rowloss + n0,
                                              ws->lse ? ws->lse + n0 : (float *)NULL, ws->err);
    }
    k_sum_rows<<<1, 1024, 0, st>>>(ws->rowloss, N, loss);
    return cudaGetLastError();
}

// One block of rows n0 .. n0+r of the backward, over the vocabulary in
// chunks of vc columns: dw's rows for those columns come out of one GEMM
// over the block's rows, and dx [r, D] is summed across the chunks in
// fp32, then written in bf16.  dw32 NULL (one block, r = N): dw is written
// once, in bf16; else it is summed over the blocks in dw32 [V, D].
static cudaError_t lm_head_bwd_rows(cublasHandle_t h, bf16 *dx, bf16 *dw, float *dw32, const bf16 *xb, const bf16 *wb,
                                    const int32_t *tgt, int64_t n0, int64_t r, int64_t V, int64_t D, float scale,
                                    const kcu_lmhead_ws *ws, cudaStream_t st) {
    const bf16 *xr = xb + n0 * D;
    for (int64_t v0 = 0; v0 < V; v0 += ws->vchunk) {
        int64_t vc = V - v0 < ws->vchunk ? V - v0 : ws->vchunk;
        const bf16 *wc = wb + v0 * D;
        // logits[r, vc] = x[n0 .. n0+r] @ w[v0 .. v0+vc]^T
        KCU_BLAS(gemm(h, CUBLAS_OP_T, CUBLAS_OP_N, vc, r, D, wc, D, xr, D, 0.f, ws->logits, CUDA_R_32F, vc));
        k_ce_bwd_cols<<<(unsigned)r, 256, 0, st>>>(ws->logits, ws->lse + n0, tgt + n0, V, v0, vc, scale,
                                                   (bf16 *)ws->dl);
        // dw[v0 .. v0+vc, D] (+)= dl^T @ x[n0 .. n0+r]
        if (dw32)
            KCU_BLAS(gemm(h, CUBLAS_OP_N, CUBLAS_OP_T, D, vc, r, xr, D, ws->dl, vc, n0 ? 1.f : 0.f, dw32 + v0 * D,
                          CUDA_R_32F, D));
        else
            KCU_BLAS(gemm(h, CUBLAS_OP_N, CUBLAS_OP_T, D, vc, r, xr, D, ws->dl, vc, 0.f, dw + v0 * D, CUDA_R_16BF, D));
        // dx32[r, D] (+)= dl @ w[v0 .. v0+vc]
        KCU_BLAS(
            gemm(h, CUBLAS_OP_N, CUBLAS_OP_N, D, r, vc, wc, D, ws->dl, vc, v0 ? 1.f : 0.f, ws->dx32, CUDA_R_32F, D));
    }
    cudaError_t e = cudaGetLastError();
    return e != cudaSuccess ? e : kcu_f32_to_bf16((kcu_bf16 *)(dx + n0 * D), ws->dx32, r * D, st);
}

// The backward goes over blocks of ws->xchunk rows, each over the
// vocabulary in chunks (lm_head_bwd_rows).  Summing dw [V, D] in fp32 over
// small chunks of rows would read and write the whole fp32 [V, D] once per
// chunk: 51 times 4 GiB for Llama-3.1-8B at 16K tokens in 320-row chunks
// (128256 x 4096), about 40 ms of memory traffic a step on an H200.  So up
// to V + one block of rows (kcu_lm_head_xchunk) all N rows form one block:
// dw needs no fp32 sum, and dx's [N, D] is no larger than dw's would be.
// Past that, ~256 MiB blocks of rows bound dx's fp32 sum, and dw's costs
// one read and write of [V, D] fp32 per block: at D = 4096 (16K-row
// blocks) about 2% of the time the block's three GEMMs of 2 x 16K x V x D
// flops take on an H100 or H200.  The softmax needs each row's log-sum-exp
// over the whole vocabulary first: the forward's (ws->lse, lse_valid), else
// a statistics pass over chunks of rows as in the forward.
extern "C" cudaError_t kcu_lm_head_loss_bwd(cublasHandle_t h, kcu_bf16 *dx, kcu_bf16 *dw, const kcu_bf16 *x,
                                            const kcu_bf16 *w, const int32_t *tgt, int64_t N, int64_t V, int64_t D,
                                            double scale, const kcu_lmhead_ws *ws, cudaStream_t st) {
    if (!fits_int(N, V, D) || V <= 0 || ws->vchunk < 1 || ws->xchunk < 1) return cudaErrorInvalidValue;
    if (ws->xchunk < N && !ws->dw32) return cudaErrorInvalidValue;
    if (N == 0) return cudaMemsetAsync(dw, 0, (size_t)(V * D) * sizeof(kcu_bf16), st);
    const bf16 *xb = (const bf16 *)x, *wb = (const bf16 *)w;
    if (!ws->lse_valid) {
        for (int64_t n0 = 0; n0 < N; n0 += ws->chunk) {
            int64_t c = N - n0 < ws->chunk ? N - n0 : ws->chunk;
            KCU_BLAS(chunk_logits(h, ws->logits, xb, wb, n0, c, V, D));
            k_ce_fwd<<<(unsigned)c, 256, 0, st>>>(ws->logits, tgt + n0, V, (float *)NULL, ws->lse + n0, ws->err);
        }
    }
    float *dw32 = ws->xchunk < N ? ws->dw32 : NULL;
    for (int64_t n0 = 0; n0 < N; n0 += ws->xchunk) {
        int64_t r = N - n0 < ws->xchunk ? N - n0 : ws->xchunk;
        cudaError_t e =
            lm_head_bwd_rows(h, (bf16 *)dx, (bf16 *)dw, dw32, xb, wb, tgt, n0, r, V, D, (float)scale, ws, st);
        if (e != cudaSuccess) return e;
    }
    return dw32 ? kcu_f32_to_bf16(dw, dw32, V * D, st) : cudaSuccess;
}
