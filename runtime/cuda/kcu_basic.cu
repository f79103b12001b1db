// kcu_basic.cu — element-wise and row-wise CUDA kernels: conversions,
// embedding, RMSNorm, RoPE, SwiGLU, add, AdamW, the sum of squares, and the
// data movement of the collectives (box copy, all_to_all pack/unpack, the
// latter also with RoPE fused in).
// C interface and semantics: kcu.h; the reference is ../host/kern_*.c.
//
// Storage is bf16, arithmetic fp32; long sums (norm rows, gradient norms)
// are reduced per block first.  Element-wise kernels use grid-stride loops
// so that one launch shape serves any n.
#include <cuda_bf16.h>
#include <math.h>
#include <string.h>

#include "kcu.h"

typedef __nv_bfloat16 bf16;

static __device__ __forceinline__ float ldf(const bf16 *p, int64_t i) { return __bfloat162float(p[i]); }
static __device__ __forceinline__ bf16 tobf(float x) { return __float2bfloat16(x); }
#define BF(p)  reinterpret_cast<bf16 *>(p)
#define CBF(p) reinterpret_cast<const bf16 *>(p)

enum { THREADS = 256 };

// Enough blocks to fill the GPU, no more: the loops stride over the rest.
static unsigned grid_for(int64_t n) {
    int64_t b = (n + THREADS - 1) / THREADS;
    if (b > 4096) b = 4096;
    return (unsigned)(b > 0 ? b : 1);
}

// ---- 16-byte accesses ------------------------------------------------------------
// The element-wise kernels are memory-bound: 2-byte loads leave most of the
// memory system's bandwidth unused, 16-byte ones (8 bf16 or 4 floats per
// access) come close to it.  A kernel takes the vector path for the first
// nv = n / 8 groups when every pointer it touches is 16-byte aligned (the
// arena's slots are, at 256 bytes; a slice of one may not be) and does the
// remaining n - 8 nv elements one by one.
enum { VEC = 8 };
struct alignas(16) bf16x8 {
    bf16 h[VEC];
};
static __device__ __forceinline__ void ld8(const bf16 *p, int64_t i, float *f) {
    bf16x8 v = *reinterpret_cast<const bf16x8 *>(p + i);
    for (int k = 0; k < VEC; k++) f[k] = __bfloat162float(v.h[k]);
}
static __device__ __forceinline__ void st8(bf16 *p, int64_t i, const float *f) {
    bf16x8 v;
    for (int k = 0; k < VEC; k++) v.h[k] = __float2bfloat16(f[k]);
    *reinterpret_cast<bf16x8 *>(p + i) = v;
}
static __device__ __forceinline__ void ld8f(const float *p, int64_t i, float *f) {
    float4 a = *reinterpret_cast<const float4 *>(p + i), b = *reinterpret_cast<const float4 *>(p + i + 4);
    f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
}
static __device__ __forceinline__ void st8f(float *p, int64_t i, const float *f) {
    *reinterpret_cast<float4 *>(p + i) = make_float4(f[0], f[1], f[2], f[3]);
    *reinterpret_cast<float4 *>(p + i + 4) = make_float4(f[4], f[5], f[6], f[7]);
}
static bool aligned16(const void *a, const void *b = NULL, const void *c = NULL, const void *d = NULL,
                      const void *e = NULL) {
    return ((uintptr_t)a | (uintptr_t)b | (uintptr_t)c | (uintptr_t)d | (uintptr_t)e) % 16 == 0;
}
// Groups of 8 for the vector path: n / 8 when all pointers are 16-byte aligned, else 0.
static int64_t vec_groups(int64_t n, const void *a, const void *b = NULL, const void *c = NULL, const void *d = NULL,
                          const void *e = NULL) {
    return aligned16(a, b, c, d, e) && n > 0 ? n / VEC : 0;
}
// The launch for nv groups and n - 8 nv single elements.
static unsigned grid_vec(int64_t n, int64_t nv) { return grid_for(nv > n - nv * VEC ? nv : n - nv * VEC); }

#define GRID_STRIDE(i, n)                                                                                              \
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < (n); i += (int64_t)gridDim.x * blockDim.x)

static __device__ __forceinline__ float warp_sum(float v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Sum over the block, returned to every thread (blockDim a multiple of 32).
static __device__ float block_sum(float v) {
    __shared__ float sh[33];
    int lane = threadIdx.x & 31, wid = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = warp_sum(v);
    if (lane == 0) sh[wid] = v;
    __syncthreads();
    if (wid == 0) {
        float t = lane < nw ? sh[lane] : 0.f;
        t = warp_sum(t);
        if (lane == 0) sh[32] = t;
    }
    __syncthreads();
    float r = sh[32];
    __syncthreads(); // sh is reused by the next call
    return r;
}

// ---- conversions ----------------------------------------------------------------
// y[n] = bf16(x[n])
__global__ void k_f32_to_bf16(bf16 *y, const float *x, int64_t n, int64_t nv) {
    GRID_STRIDE(v, nv) {
        float f[VEC];
        ld8f(x, v * VEC, f);
        st8(y, v * VEC, f);
    }
    GRID_STRIDE(i, n - nv * VEC) y[nv * VEC + i] = tobf(x[nv * VEC + i]);
}
// y[n] = float(x[n])
__global__ void k_bf16_to_f32(float *y, const bf16 *x, int64_t n, int64_t nv) {
    GRID_STRIDE(v, nv) {
        float f[VEC];
        ld8(x, v * VEC, f);
        st8f(y, v * VEC, f);
    }
    GRID_STRIDE(i, n - nv * VEC) y[nv * VEC + i] = ldf(x, nv * VEC + i);
}

extern "C" cudaError_t kcu_f32_to_bf16(kcu_bf16 *y, const float *x, int64_t n, cudaStream_t st) {
    int64_t nv = vec_groups(n, y, x);
    k_f32_to_bf16<<<grid_vec(n, nv), THREADS, 0, st>>>(BF(y), x, n, nv);
    return cudaGetLastError();
}

__global__ void k_fill_f32(float *x, float v, int64_t n) { GRID_STRIDE(i, n) x[i] = v; }

extern "C" cudaError_t kcu_fill_f32(float *x, float v, int64_t n, cudaStream_t st) {
    if (n <= 0) return cudaSuccess;
    k_fill_f32<<<grid_for(n), THREADS, 0, st>>>(x, v, n);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_bf16_to_f32(float *y, const kcu_bf16 *x, int64_t n, cudaStream_t st) {
    int64_t nv = vec_groups(n, y, x);
    k_bf16_to_f32<<<grid_vec(n, nv), THREADS, 0, st>>>(y, CBF(x), n, nv);
    return cudaGetLastError();
}

extern "C" kcu_bf16 kcu_host_to_bf16(float x) {
    uint32_t u;
    memcpy(&u, &x, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (kcu_bf16)((u >> 16) | 0x40); // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);                                          // round to nearest even
    return (kcu_bf16)(u >> 16);
}

extern "C" float kcu_host_from_bf16(kcu_bf16 x) {
    uint32_t u = (uint32_t)x << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

// ---- embedding --------------------------------------------------------------------
// out[N,D] = w[tok[n], :]; one thread per output element
__global__ void k_embedding_fwd(bf16 *out, const int32_t *tok, const bf16 *w, int64_t N, int64_t V, int64_t D,
                                int *err) {
    GRID_STRIDE(i, N * D) {
        int64_t n = i / D, d = i % D;
        int32_t t = tok[n];
        if (t < 0 || t >= V) {
            out[i] = tobf(0.f);
            *err = 1;
        } else {
            out[i] = w[(int64_t)t * D + d];
        }
    }
}

// ws32[V,D] += dout[n,:] at row tok[n]; one thread per dout element
__global__ void k_embedding_bwd(float *ws32, const bf16 *dout, const int32_t *tok, int64_t N, int64_t V, int64_t D,
                                int *err) {
    GRID_STRIDE(i, N * D) {
        int64_t n = i / D, d = i % D;
        int32_t t = tok[n];
        if (t < 0 || t >= V)
            *err = 1;
        else
            atomicAdd(&ws32[(int64_t)t * D + d], ldf(dout, i));
    }
}

extern "C" cudaError_t kcu_embedding_fwd(kcu_bf16 *out, const int32_t *tok, const kcu_bf16 *w, int64_t N, int64_t V,
                                         int64_t D, int *err, cudaStream_t st) {
    k_embedding_fwd<<<grid_for(N * D), THREADS, 0, st>>>(BF(out), tok, CBF(w), N, V, D, err);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_embedding_bwd(kcu_bf16 *dw, const kcu_bf16 *dout, const int32_t *tok, int64_t N, int64_t V,
                                         int64_t D, float *ws32, int *err, cudaStream_t st) {
    cudaError_t e = cudaMemsetAsync(ws32, 0, (size_t)(V * D) * sizeof(float), st);
    if (e != cudaSuccess) return e;
    k_embedding_bwd<<<grid_for(N * D), THREADS, 0, st>>>(ws32, CBF(dout), tok, N, V, D, err);
    e = cudaGetLastError();
    return e != cudaSuccess ? e : kcu_f32_to_bf16(dw, ws32, V * D, st);
}

// ---- rmsnorm ------------------------------------------------------------------------
// y[N,D]: one block per row
// vec: groups of 8 (D a multiple of 8, every pointer 16-byte aligned).

// y = x * r * w over one row, each thread its columns (those it summed).
static __device__ __forceinline__ void scale_row(bf16 *yr, const bf16 *xr, const bf16 *w, int64_t D, float r,
                                                 bool vec) {
    int64_t step = vec ? blockDim.x * VEC : blockDim.x;
    for (int64_t d = threadIdx.x * (vec ? VEC : 1); d < D; d += step) {
        if (vec) {
            float f[VEC], g[VEC];
            ld8(xr, d, f), ld8(w, d, g);
            for (int k = 0; k < VEC; k++) f[k] = f[k] * r * g[k];
            st8(yr, d, f);
        } else {
            yr[d] = tobf(ldf(xr, d) * r * ldf(w, d));
        }
    }
}

__global__ void k_rmsnorm_fwd(bf16 *y, const bf16 *x, const bf16 *w, int64_t D, float eps, bool vec) {
    const bf16 *xr = x + blockIdx.x * D;
    bf16 *yr = y + blockIdx.x * D;
    int64_t step = vec ? blockDim.x * VEC : blockDim.x;
    float ss = 0.f;
    for (int64_t d = threadIdx.x * (vec ? VEC : 1); d < D; d += step) {
        if (vec) {
            float f[VEC];
            ld8(xr, d, f);
            for (int k = 0; k < VEC; k++) ss += f[k] * f[k];
        } else {
            ss += ldf(xr, d) * ldf(xr, d);
        }
    }
    scale_row(yr, xr, w, D, rsqrtf(block_sum(ss) / (float)D + eps), vec);
}

// s[N,D] = a + b and y = rmsnorm(s) * w: k_add then k_rmsnorm_fwd in one
// pass per row.  The norm reads s as stored (rounded to bf16), so the numbers
// are those of the two kernels; each thread reads back only what it wrote.
__global__ void k_add_rmsnorm_fwd(bf16 *s, bf16 *y, const bf16 *a, const bf16 *b, const bf16 *w, int64_t D, float eps,
                                  bool vec) {
    const bf16 *ar = a + blockIdx.x * D, *br = b + blockIdx.x * D;
    bf16 *sr = s + blockIdx.x * D, *yr = y + blockIdx.x * D;
    int64_t step = vec ? blockDim.x * VEC : blockDim.x;
    float ss = 0.f;
    for (int64_t d = threadIdx.x * (vec ? VEC : 1); d < D; d += step) {
        if (vec) {
            float f[VEC], g[VEC];
            ld8(ar, d, f), ld8(br, d, g);
            for (int k = 0; k < VEC; k++) f[k] = __bfloat162float(tobf(f[k] + g[k])), ss += f[k] * f[k];
            st8(sr, d, f);
        } else {
            float v = __bfloat162float(tobf(ldf(ar, d) + ldf(br, d)));
            sr[d] = tobf(v);
            ss += v * v;
        }
    }
    scale_row(yr, sr, w, D, rsqrtf(block_sum(ss) / (float)D + eps), vec);
}

// dx[N,D]; dw partial sums: blocks stride over rows, each sums its rows' dw
// in shared memory (D floats) and adds them to ws32[D] once.
//   dx_j = r w_j dy_j - x_j r^3 / D * sum_k dy_k w_k x_k ;  dw_j = sum_n dy_nj x_nj r_n
// (vec: as the forward's; a thread owns the same 8 columns in every row.)
// With dr (add_rmsnorm_bwd) dx_j, rounded to bf16 as k_rmsnorm_bwd stores
// it, plus dr_j: the numbers of k_rmsnorm_bwd then k_add.
__global__ void k_rmsnorm_bwd(bf16 *dx, const bf16 *dy, const bf16 *x, const bf16 *w, const bf16 *dr, int64_t N,
                              int64_t D, float eps, float *ws32, bool vec) {
    extern __shared__ float dwsh[];
    int w8 = vec ? VEC : 1;
    int64_t step = blockDim.x * w8;
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) dwsh[d] = 0.f;
    __syncthreads();
    for (int64_t n = blockIdx.x; n < N; n += gridDim.x) {
        const bf16 *xr = x + n * D, *gr = dy + n * D;
        float ss = 0.f, dot = 0.f;
        for (int64_t d = threadIdx.x * w8; d < D; d += step) {
            float xv[VEC], g[VEC], wv[VEC];
            if (vec)
                ld8(xr, d, xv), ld8(gr, d, g), ld8(w, d, wv);
            else
                xv[0] = ldf(xr, d), g[0] = ldf(gr, d), wv[0] = ldf(w, d);
            for (int k = 0; k < w8; k++) ss += xv[k] * xv[k], dot += g[k] * wv[k] * xv[k];
        }
        ss = block_sum(ss);
        dot = block_sum(dot);
        float r = rsqrtf(ss / (float)D + eps), c = dot * r * r * r / (float)D;
        for (int64_t d = threadIdx.x * w8; d < D; d += step) {
            float xv[VEC], g[VEC], wv[VEC], o[VEC];
            if (vec)
                ld8(xr, d, xv), ld8(gr, d, g), ld8(w, d, wv);
            else
                xv[0] = ldf(xr, d), g[0] = ldf(gr, d), wv[0] = ldf(w, d);
            for (int k = 0; k < w8; k++) {
                o[k] = r * wv[k] * g[k] - c * xv[k];
                dwsh[d + k] += g[k] * xv[k] * r; // each thread owns its columns: no race
            }
            if (dr) {
                float q[VEC];
                if (vec)
                    ld8(dr + n * D, d, q);
                else
                    q[0] = ldf(dr, n * D + d);
                for (int k = 0; k < w8; k++) o[k] = __bfloat162float(tobf(o[k])) + q[k];
            }
            if (vec)
                st8(dx + n * D, d, o);
            else
                dx[n * D + d] = tobf(o[0]);
        }
    }
    __syncthreads();
    for (int64_t d = threadIdx.x; d < D; d += blockDim.x) atomicAdd(&ws32[d], dwsh[d]);
}

extern "C" cudaError_t kcu_rmsnorm_fwd(kcu_bf16 *y, const kcu_bf16 *x, const kcu_bf16 *w, int64_t N, int64_t D,
                                       double eps, cudaStream_t st) {
    bool vec = D % VEC == 0 && aligned16(y, x, w);
    if (N > 0) k_rmsnorm_fwd<<<(unsigned)N, THREADS, 0, st>>>(BF(y), CBF(x), CBF(w), D, (float)eps, vec);
    return cudaGetLastError();
}

// The backward's D floats of dynamic shared memory plus block_sum's static
// array must fit the 48 KiB a launch gets by default; past that (hidden
// above ~12K) the kernel opts in to the device's larger per-block limit.
static cudaError_t rmsnorm_bwd_smem(size_t dyn) {
    cudaFuncAttributes fa;
    cudaError_t e = cudaFuncGetAttributes(&fa, k_rmsnorm_bwd);
    if (e != cudaSuccess) return e;
    if (fa.sharedSizeBytes + dyn <= 48 * 1024) return cudaSuccess;
    int dev, optin;
    if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
    if ((e = cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev)) != cudaSuccess) return e;
    if (fa.sharedSizeBytes + dyn > (size_t)optin) return cudaErrorInvalidValue;
    return cudaFuncSetAttribute(k_rmsnorm_bwd, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)dyn);
}

static cudaError_t rmsnorm_bwd(bf16 *dx, kcu_bf16 *dw, const bf16 *dy, const bf16 *x, const bf16 *w, const bf16 *dr,
                               int64_t N, int64_t D, double eps, float *ws32, cudaStream_t st) {
    cudaError_t e = rmsnorm_bwd_smem((size_t)D * sizeof(float));
    if (e != cudaSuccess) return e;
    e = cudaMemsetAsync(ws32, 0, (size_t)D * sizeof(float), st);
    if (e != cudaSuccess) return e;
    unsigned blocks = (unsigned)(N < 512 ? (N > 0 ? N : 1) : 512);
    bool vec = D % VEC == 0 && aligned16(dx, dy, x, w, dr);
    k_rmsnorm_bwd<<<blocks, THREADS, (size_t)D * sizeof(float), st>>>(dx, dy, x, w, dr, N, D, (float)eps, ws32, vec);
    e = cudaGetLastError();
    return e != cudaSuccess ? e : kcu_f32_to_bf16(dw, ws32, D, st);
}

extern "C" cudaError_t kcu_rmsnorm_bwd(kcu_bf16 *dx, kcu_bf16 *dw, const kcu_bf16 *dy, const kcu_bf16 *x,
                                       const kcu_bf16 *w, int64_t N, int64_t D, double eps, float *ws32,
                                       cudaStream_t st) {
    return rmsnorm_bwd(BF(dx), dw, CBF(dy), CBF(x), CBF(w), NULL, N, D, eps, ws32, st);
}

extern "C" cudaError_t kcu_add_rmsnorm_fwd(kcu_bf16 *s, kcu_bf16 *y, const kcu_bf16 *a, const kcu_bf16 *b,
                                           const kcu_bf16 *w, int64_t N, int64_t D, double eps, cudaStream_t st) {
    bool vec = D % VEC == 0 && aligned16(s, y, a, b, w);
    if (N > 0)
        k_add_rmsnorm_fwd<<<(unsigned)N, THREADS, 0, st>>>(BF(s), BF(y), CBF(a), CBF(b), CBF(w), D, (float)eps, vec);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_add_rmsnorm_bwd(kcu_bf16 *ds, kcu_bf16 *dw, const kcu_bf16 *dy, const kcu_bf16 *s,
                                           const kcu_bf16 *w, const kcu_bf16 *dr, int64_t N, int64_t D, double eps,
                                           float *ws32, cudaStream_t st) {
    return rmsnorm_bwd(BF(ds), dw, CBF(dy), CBF(s), CBF(w), CBF(dr), N, D, eps, ws32, st);
}

// ---- rope -------------------------------------------------------------------------------
// The one rotation of every rope kernel (k_rope, k_rope_pos, k_a2a_rope):
// (x0, x1) by (c, s).  The rounding is spelled out, x * c fused and the
// other product rounded (what nvcc made of the plain expression in the
// 8-pair path on sm_90; the one-pair path fused the other way round), so
// that every kernel and both paths give the same bits whatever the
// compiler would contract: the exchange with RoPE fused in must equal
// rope then the exchange bit for bit.
static __device__ __forceinline__ float rope_y0(float x0, float x1, float c, float s) {
    return __fmaf_rn(x0, c, -__fmul_rn(x1, s));
}
static __device__ __forceinline__ float rope_y1(float x0, float x1, float c, float s) {
    return __fmaf_rn(x1, c, __fmul_rn(x0, s));
}

// Rotates the pair (i, i+half) of the row at off by (c, s).
static __device__ __forceinline__ void rope_pair(bf16 *y, const bf16 *x, int64_t off, int64_t i, int64_t half, float c,
                                                 float s) {
    float x0 = ldf(x, off + i), x1 = ldf(x, off + i + half);
    y[off + i] = tobf(rope_y0(x0, x1, c, s));
    y[off + i + half] = tobf(rope_y1(x0, x1, c, s));
}

// Pairs i .. i+7 of a row at off, with their 8 cosines c and sines s (sign applied here).
static __device__ __forceinline__ void rope8(bf16 *y, const bf16 *x, int64_t off, int64_t i, int64_t half,
                                             const float *c, const float *s, float sign) {
    float x0[VEC], x1[VEC], y0[VEC], y1[VEC];
    ld8(x, off + i, x0), ld8(x, off + i + half, x1);
    for (int k = 0; k < VEC; k++) {
        float sk = sign * s[k];
        y0[k] = rope_y0(x0[k], x1[k], c[k], sk);
        y1[k] = rope_y1(x0[k], x1[k], c[k], sk);
    }
    st8(y, off + i, y0), st8(y, off + i + half, y1);
}

// Whether RoPE can take 8 pairs per thread: half a multiple of 8, all aligned.
static bool rope_vec(const void *y, const void *x, const float *cs, const float *sn, int64_t Dh) {
    return (Dh / 2) % VEC == 0 && aligned16(y, x, cs, sn);
}

// y, x [b,S,H,Dh]; one thread per rotated pair, or per 8 pairs (vec)
__global__ void k_rope(bf16 *y, const bf16 *x, const float *cs, const float *sn, int64_t b, int64_t S, int64_t H,
                       int64_t Dh, float sign, bool vec) {
    int64_t half = Dh / 2, per = vec ? VEC : 1, groups = half / per;
    GRID_STRIDE(idx, b * S * H * groups) {
        int64_t i = idx % groups * per, row = idx / groups, si = (row / H) % S;
        if (vec) {
            float c[VEC], s[VEC];
            ld8f(cs, si * half + i, c), ld8f(sn, si * half + i, s);
            rope8(y, x, row * Dh, i, half, c, s, sign);
        } else {
            rope_pair(y, x, row * Dh, i, half, cs[si * half + i], sign * sn[si * half + i]);
        }
    }
}

extern "C" cudaError_t kcu_rope(kcu_bf16 *y, const kcu_bf16 *x, const float *cs, const float *sn, int64_t b, int64_t S,
                                int64_t H, int64_t Dh, float sign, cudaStream_t st) {
    if (Dh % 2) return cudaErrorInvalidValue;
    bool vec = rope_vec(y, x, cs, sn, Dh);
    k_rope<<<grid_for(b * S * H * Dh / 2 / (vec ? VEC : 1)), THREADS, 0, st>>>(BF(y), CBF(x), cs, sn, b, S, H, Dh, sign,
                                                                               vec);
    return cudaGetLastError();
}

// The same with token si at position pos[si]: row pos[si] of the table of
// positions 0..P-1.  A position outside it gives NaN (a loud error, not a
// silently unrotated token).
// Pair i (vec: pairs i .. i+7) of the row at off, rotated by row p of the
// table cs, sn [P, half]; the one lookup of k_rope_pos and k_a2a_rope.
static __device__ __forceinline__ void rope_at(bf16 *y, const bf16 *x, int64_t off, int64_t i, int64_t half,
                                               const float *cs, const float *sn, int64_t P, int64_t p, float sign,
                                               bool vec) {
    bool in = p >= 0 && p < P;
    if (vec) {
        float c[VEC], s[VEC];
        if (in)
            ld8f(cs, p * half + i, c), ld8f(sn, p * half + i, s);
        else
            for (int k = 0; k < VEC; k++) c[k] = s[k] = NAN;
        rope8(y, x, off, i, half, c, s, sign);
    } else {
        float c = in ? cs[p * half + i] : NAN, s = in ? sign * sn[p * half + i] : NAN;
        rope_pair(y, x, off, i, half, c, s);
    }
}

__global__ void k_rope_pos(bf16 *y, const bf16 *x, const float *cs, const float *sn, int64_t P, const int64_t *pos,
                           int64_t b, int64_t S, int64_t H, int64_t Dh, float sign, bool vec) {
    int64_t half = Dh / 2, per = vec ? VEC : 1, groups = half / per;
    GRID_STRIDE(idx, b * S * H * groups) {
        int64_t i = idx % groups * per, row = idx / groups;
        rope_at(y, x, row * Dh, i, half, cs, sn, P, pos[(row / H) % S], sign, vec);
    }
}

extern "C" cudaError_t kcu_rope_pos(kcu_bf16 *y, const kcu_bf16 *x, const float *cs, const float *sn, int64_t P,
                                    const int64_t *pos, int64_t b, int64_t S, int64_t H, int64_t Dh, float sign,
                                    cudaStream_t st) {
    if (Dh % 2 || P <= 0) return cudaErrorInvalidValue;
    bool vec = rope_vec(y, x, cs, sn, Dh);
    k_rope_pos<<<grid_for(b * S * H * Dh / 2 / (vec ? VEC : 1)), THREADS, 0, st>>>(BF(y), CBF(x), cs, sn, P, pos, b, S,
                                                                                   H, Dh, sign, vec);
    return cudaGetLastError();
}

// ---- swiglu, add --------------------------------------------------------------------------
static __device__ __forceinline__ float sigm(float g) { return 1.f / (1.f + __expf(-g)); }

static __device__ __forceinline__ float swiglu(float g, float u) { return g * sigm(g) * u; }
// d silu(g)/dg = s (1 + g (1 - s)): dg, du of y = silu(g) u for dy
static __device__ __forceinline__ void swiglu_bwd(float d, float g, float u, float *dg, float *du) {
    float s = sigm(g);
    *dg = d * u * s * (1.f + g * (1.f - s));
    *du = d * g * s;
}

// y[n] = silu(g) * u (y may alias g or u: the MLP writes it over g)
__global__ void k_swiglu_fwd(bf16 *y, const bf16 *g, const bf16 *u, int64_t n, int64_t nv) {
    GRID_STRIDE(v, nv) {
        float a[VEC], b[VEC];
        ld8(g, v * VEC, a), ld8(u, v * VEC, b);
        for (int k = 0; k < VEC; k++) a[k] = swiglu(a[k], b[k]);
        st8(y, v * VEC, a);
    }
    GRID_STRIDE(r, n - nv * VEC) {
        int64_t i = nv * VEC + r;
        y[i] = tobf(swiglu(ldf(g, i), ldf(u, i)));
    }
}

// dg[n], du[n] (they may alias g and u: the MLP's backward writes them in place)
__global__ void k_swiglu_bwd(bf16 *dg, bf16 *du, const bf16 *dy, const bf16 *g, const bf16 *u, int64_t n, int64_t nv) {
    GRID_STRIDE(v, nv) {
        float d[VEC], a[VEC], b[VEC], ga[VEC], ua[VEC];
        ld8(dy, v * VEC, d), ld8(g, v * VEC, a), ld8(u, v * VEC, b);
        for (int k = 0; k < VEC; k++) swiglu_bwd(d[k], a[k], b[k], &ga[k], &ua[k]);
        st8(dg, v * VEC, ga), st8(du, v * VEC, ua);
    }
    GRID_STRIDE(r, n - nv * VEC) {
        int64_t i = nv * VEC + r;
        float ga, ua;
        swiglu_bwd(ldf(dy, i), ldf(g, i), ldf(u, i), &ga, &ua);
        dg[i] = tobf(ga), du[i] = tobf(ua);
    }
}

// y[n] = a + b (y may alias a or b)
__global__ void k_add(bf16 *y, const bf16 *a, const bf16 *b, int64_t n, int64_t nv) {
    GRID_STRIDE(v, nv) {
        float x[VEC], z[VEC];
        ld8(a, v * VEC, x), ld8(b, v * VEC, z);
        for (int k = 0; k < VEC; k++) x[k] += z[k];
        st8(y, v * VEC, x);
    }
    GRID_STRIDE(r, n - nv * VEC) {
        int64_t i = nv * VEC + r;
        y[i] = tobf(ldf(a, i) + ldf(b, i));
    }
}

extern "C" cudaError_t kcu_swiglu_fwd(kcu_bf16 *y, const kcu_bf16 *g, const kcu_bf16 *u, int64_t n, cudaStream_t st) {
    int64_t nv = vec_groups(n, y, g, u);
    k_swiglu_fwd<<<grid_vec(n, nv), THREADS, 0, st>>>(BF(y), CBF(g), CBF(u), n, nv);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_swiglu_bwd(kcu_bf16 *dg, kcu_bf16 *du, const kcu_bf16 *dy, const kcu_bf16 *g,
                                      const kcu_bf16 *u, int64_t n, cudaStream_t st) {
    int64_t nv = vec_groups(n, dg, du, dy, g, u);
    k_swiglu_bwd<<<grid_vec(n, nv), THREADS, 0, st>>>(BF(dg), BF(du), CBF(dy), CBF(g), CBF(u), n, nv);
    return cudaGetLastError();
}

// y[n, j] = x[n, j] + b[j] over N rows of M (y may alias x)
__global__ void k_bias_add(bf16 *y, const bf16 *x, const bf16 *b, int64_t N, int64_t M) {
    GRID_STRIDE(i, N * M) y[i] = tobf(ldf(x, i) + ldf(b, i % M));
}

// db[j] = sum over the rows of dy[n, j]: one thread per column, the rows in
// order into an fp32 sum (coalesced: neighbouring threads read neighbouring
// columns of a row).
__global__ void k_bias_add_bwd(bf16 *db, const bf16 *dy, int64_t N, int64_t M) {
    GRID_STRIDE(j, M) {
        float s = 0.f;
        for (int64_t n = 0; n < N; n++) s += ldf(dy, n * M + j);
        db[j] = tobf(s);
    }
}

extern "C" cudaError_t kcu_bias_add(kcu_bf16 *y, const kcu_bf16 *x, const kcu_bf16 *b, int64_t N, int64_t M,
                                    cudaStream_t st) {
    k_bias_add<<<grid_for(N * M), THREADS, 0, st>>>(BF(y), CBF(x), CBF(b), N, M);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_bias_add_bwd(kcu_bf16 *db, const kcu_bf16 *dy, int64_t N, int64_t M, cudaStream_t st) {
    k_bias_add_bwd<<<grid_for(M), THREADS, 0, st>>>(BF(db), CBF(dy), N, M);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_add(kcu_bf16 *y, const kcu_bf16 *a, const kcu_bf16 *b, int64_t n, cudaStream_t st) {
    int64_t nv = vec_groups(n, y, a, b);
    k_add<<<grid_vec(n, nv), THREADS, 0, st>>>(BF(y), CBF(a), CBF(b), n, nv);
    return cudaGetLastError();
}

// ---- head chunks ----------------------------------------------------------------------------
// rows x width elements between two row strides: one thread per element
// (the copies are a few per attention; memory-bound either way).
__global__ void k_copy_rows(bf16 *y, int64_t ldy, const bf16 *x, int64_t ldx, int64_t rows, int64_t width) {
    int64_t n = rows * width;
    for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
        int64_t r = i / width, c = i - r * width;
        y[r * ldy + c] = x[r * ldx + c];
    }
}

extern "C" cudaError_t kcu_copy_rows(kcu_bf16 *y, int64_t ldy, const kcu_bf16 *x, int64_t ldx, int64_t rows,
                                     int64_t width, cudaStream_t st) {
    k_copy_rows<<<grid_for(rows * width), THREADS, 0, st>>>(BF(y), ldy, CBF(x), ldx, rows, width);
    return cudaGetLastError();
}

// ---- optimizer ------------------------------------------------------------------------------
// n elements, in place on w32, m, v; p = bf16(w32).  The step's scalars
// (kcu_adamw_step: the learning rate, the bias corrections, the clip
// factor) come from device memory, so a captured step (CUDA graph) reads
// each step's own; the rest are the run's constants.
typedef struct adamw_k {
    float b1, b2, c1, c2, e;
} adamw_k;

// One element: the moments and the master weight in place, returns the new weight.
static __device__ __forceinline__ float adamw1(const adamw_k &k, const kcu_adamw_step &s, float decay, float g,
                                               float &w, float &m, float &v) {
    g *= s.gs;
    m = k.b1 * m + k.c1 * g;
    v = k.b2 * v + k.c2 * g * g;
    w = w * decay - s.step * m / (sqrtf(v) * s.rbc2 + k.e);
    return w;
}

// nv groups of 8 (16-byte accesses), then the rest one by one.
__global__ void k_adamw(bf16 *p, float *w32, float *m, float *v, const bf16 *g, int64_t n, int64_t nv, adamw_k k,
                        const kcu_adamw_step *sp, int decayed) {
    const kcu_adamw_step s = *sp;
    const float decay = decayed ? s.decay : 1.0f;
    GRID_STRIDE(j, nv) {
        float gv[VEC], wv[VEC], mv[VEC], vv[VEC];
        ld8(g, j * VEC, gv), ld8f(w32, j * VEC, wv), ld8f(m, j * VEC, mv), ld8f(v, j * VEC, vv);
        for (int q = 0; q < VEC; q++) adamw1(k, s, decay, gv[q], wv[q], mv[q], vv[q]);
        st8f(w32, j * VEC, wv), st8f(m, j * VEC, mv), st8f(v, j * VEC, vv), st8(p, j * VEC, wv);
    }
    GRID_STRIDE(r, n - nv * VEC) {
        int64_t i = nv * VEC + r;
        p[i] = tobf(adamw1(k, s, decay, ldf(g, i), w32[i], m[i], v[i]));
    }
}

// In double, then rounded once, as kern_adamw computes them.
extern "C" kcu_adamw_step kcu_adamw_scalars(double lr, double beta1, double beta2, double wd, int64_t t,
                                            double gscale) {
    double bc1 = 1.0 - pow(beta1, (double)t), bc2 = 1.0 - pow(beta2, (double)t);
    kcu_adamw_step s = {(float)(1.0 - lr * wd), (float)(lr / bc1), (float)(1.0 / sqrt(bc2)), (float)gscale};
    return s;
}

extern "C" cudaError_t kcu_adamw(kcu_bf16 *p, float *w32, float *m, float *v, const kcu_bf16 *g, int64_t n,
                                 double beta1, double beta2, double eps, const kcu_adamw_step *step, bool decay,
                                 cudaStream_t st) {
    adamw_k k = {(float)beta1, (float)beta2, (float)(1.0 - beta1), (float)(1.0 - beta2), (float)eps};
    int64_t nv = vec_groups(n, p, w32, m, v, g);
    k_adamw<<<grid_vec(n, nv), THREADS, 0, st>>>(BF(p), w32, m, v, CBF(g), n, nv, k, step, decay ? 1 : 0);
    return cudaGetLastError();
}

// *acc += sum x^2: per-thread double sums (8 elements per access when
// aligned), a warp reduction, one atomic per warp
__global__ void k_sumsq(const bf16 *x, int64_t n, int64_t nv, double *acc) {
    double s = 0.0;
    GRID_STRIDE(j, nv) {
        float f[VEC];
        ld8(x, j * VEC, f);
        for (int q = 0; q < VEC; q++) s += (double)f[q] * (double)f[q];
    }
    GRID_STRIDE(r, n - nv * VEC) {
        double v = (double)ldf(x, nv * VEC + r);
        s += v * v;
    }
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if ((threadIdx.x & 31) == 0) atomicAdd(acc, s);
}

extern "C" cudaError_t kcu_sumsq(const kcu_bf16 *x, int64_t n, double *acc, cudaStream_t st) {
    int64_t nv = vec_groups(n, x);
    k_sumsq<<<grid_vec(n, nv), THREADS, 0, st>>>(CBF(x), n, nv, acc);
    return cudaGetLastError();
}

// ---- data movement ------------------------------------------------------------------------------
// One thread per element of the box; T is the element type (2 or 4 bytes).
template <typename T> __global__ void k_copy_box(T *dst, const T *src, kcu_box bx, int64_t total) {
    GRID_STRIDE(e, total) {
        int64_t r = e, so = 0, dof = 0, sm = 1, dm = 1;
        for (int i = bx.nd - 1; i >= 0; i--) {
            int64_t c = r % bx.box[i];
            r /= bx.box[i];
            so += (bx.soff[i] + c) * sm;
            dof += (bx.doff[i] + c) * dm;
            sm *= bx.sdims[i];
            dm *= bx.ddims[i];
        }
        dst[dof] = src[so];
    }
}

extern "C" cudaError_t kcu_copy_box(void *dst, const void *src, const kcu_box *bx, int esize, cudaStream_t st) {
    int64_t total = 1;
    for (int i = 0; i < bx->nd; i++) total *= bx->box[i];
    if (total <= 0) return cudaSuccess;
    if (esize == 2)
        k_copy_box<uint16_t><<<grid_for(total), THREADS, 0, st>>>((uint16_t *)dst, (const uint16_t *)src, *bx, total);
    else if (esize == 4)
        k_copy_box<uint32_t><<<grid_for(total), THREADS, 0, st>>>((uint32_t *)dst, (const uint32_t *)src, *bx, total);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

// The chunk is rows of I contiguous elements, one per (o, ka, m, kb) over
// [O, ca, M, cb]: the index arithmetic (64-bit divisions) is done once per
// row (each of the row's threads does the same few), and the I elements
// are copied with consecutive threads on consecutive addresses.  A block
// is A2A_X threads along a row times A2A_Y rows.
enum { A2A_X = 32, A2A_Y = THREADS / A2A_X };
struct a2a_row {
    int64_t o, ka, m, kb;
};
static __device__ __forceinline__ a2a_row a2a_split(const kcu_a2a &g, int64_t r) {
    a2a_row c;
    c.kb = r % g.cb;
    r /= g.cb;
    c.m = r % g.M;
    r /= g.M;
    c.ka = r % g.ca;
    c.o = r / g.ca;
    return c;
}

#define A2A_ROWS(r, rows)                                                                                              \
    for (int64_t r = blockIdx.x * (int64_t)A2A_Y + threadIdx.y; r < (rows); r += (int64_t)gridDim.x * A2A_Y)

static unsigned a2a_grid(int64_t rows) {
    int64_t b = (rows + A2A_Y - 1) / A2A_Y;
    return (unsigned)(b > 4096 ? 4096 : b > 0 ? b : 1);
}

// dst[chunk] = x at split entries (base + k) / f
template <typename T> __global__ void k_a2a_pack(T *dst, const T *x, kcu_a2a g, int64_t rows) {
    A2A_ROWS(r, rows) {
        a2a_row c = a2a_split(g, r);
        int64_t xa = g.a_split ? (g.base + c.ka) / g.f - g.off : c.ka;
        int64_t xb = g.a_split ? c.kb : (g.base + c.kb) / g.f - g.off;
        const T *in = x + (((c.o * g.xa + xa) * g.M + c.m) * g.xb + xb) * g.I;
        T *out = dst + r * g.I;
        for (int64_t i = threadIdx.x; i < g.I; i += A2A_X) out[i] = in[i];
    }
}

// The row of y that chunk row r goes to: concat entries (base + k) / f.
static __device__ __forceinline__ int64_t a2a_yrow(const kcu_a2a &g, int64_t r) {
    a2a_row c = a2a_split(g, r);
    int64_t ya = g.a_split ? c.ka : (g.base + c.ka) / g.f - g.off;
    int64_t yb = g.a_split ? (g.base + c.kb) / g.f - g.off : c.kb;
    return (((c.o * g.ya + ya) * g.M + c.m) * g.yb + yb) * g.I;
}

template <typename T> __global__ void k_a2a_unpack(T *y, const T *src, kcu_a2a g, int64_t rows) {
    A2A_ROWS(r, rows) {
        T *out = y + a2a_yrow(g, r);
        const T *in = src + r * g.I;
        for (int64_t i = threadIdx.x; i < g.I; i += A2A_X) out[i] = in[i];
    }
}

// Under fanin (f > 1) several chunk rows land on one y row: summed atomically.
__global__ void k_a2a_unpack_sum(bf16 *y, const bf16 *src, kcu_a2a g, int64_t rows) {
    A2A_ROWS(r, rows) {
        bf16 *out = y + a2a_yrow(g, r);
        const bf16 *in = src + r * g.I;
        for (int64_t i = threadIdx.x; i < g.I; i += A2A_X) atomicAdd(&out[i], in[i]);
    }
}

extern "C" cudaError_t kcu_a2a_pack(void *dst, const void *x, const kcu_a2a *g, int esize, cudaStream_t st) {
    int64_t rows = g->O * g->ca * g->M * g->cb;
    if (rows <= 0 || g->I <= 0) return cudaSuccess;
    dim3 blk(A2A_X, A2A_Y);
    if (esize == 2)
        k_a2a_pack<uint16_t><<<a2a_grid(rows), blk, 0, st>>>((uint16_t *)dst, (const uint16_t *)x, *g, rows);
    else if (esize == 4)
        k_a2a_pack<uint32_t><<<a2a_grid(rows), blk, 0, st>>>((uint32_t *)dst, (const uint32_t *)x, *g, rows);
    else
        return cudaErrorInvalidValue;
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_a2a_unpack(void *y, const void *src, const kcu_a2a *g, int esize, cudaStream_t st) {
    int64_t rows = g->O * g->ca * g->M * g->cb;
    if (rows <= 0 || g->I <= 0) return cudaSuccess;
    dim3 blk(A2A_X, A2A_Y);
    if (g->f > 1) {
        if (esize != 2) return cudaErrorInvalidValue;
        k_a2a_unpack_sum<<<a2a_grid(rows), blk, 0, st>>>(BF(y), CBF(src), *g, rows);
    } else if (esize == 2) {
        k_a2a_unpack<uint16_t><<<a2a_grid(rows), blk, 0, st>>>((uint16_t *)y, (const uint16_t *)src, *g, rows);
    } else if (esize == 4) {
        k_a2a_unpack<uint32_t><<<a2a_grid(rows), blk, 0, st>>>((uint32_t *)y, (const uint32_t *)src, *g, rows);
    } else {
        return cudaErrorInvalidValue;
    }
    return cudaGetLastError();
}

// ---- all_to_all with RoPE fused in --------------------------------------------------------
// The rotated side's row (in elements) of chunk row r, and the index into
// pos of that row's token (o, a): x's row for a pack, y's for an unpack.
// A pack maps the split dim through (base + k) / f, an unpack the concat
// dim; that is dim a when pack == a_split.
static __device__ __forceinline__ int64_t a2a_side_row(const kcu_a2a &g, int64_t r, bool pack, int64_t pstride,
                                                       int64_t *tok) {
    a2a_row c = a2a_split(g, r);
    bool map_a = pack == (g.a_split != 0);
    int64_t ia = map_a ? (g.base + c.ka) / g.f - g.off : c.ka;
    int64_t ib = map_a ? c.kb : (g.base + c.kb) / g.f - g.off;
    int64_t na = pack ? g.xa : g.ya, nb = pack ? g.xb : g.yb;
    *tok = c.o * pstride + ia;
    return (((c.o * na + ia) * g.M + c.m) * nb + ib) * g.I;
}

// One thread per rotated pair (or 8 pairs: vec) of every chunk row, with
// k_rope_pos's table lookup and its rope_pair / rope8, so that the numbers
// are kcu_rope_pos's bit for bit; only where they are read from and
// written to differs (a pack reads x, writes the chunk; an unpack the
// reverse).
__global__ void k_a2a_rope(bf16 *dst, const bf16 *src, kcu_a2a g, int64_t rows, bool pack, const float *cs,
                           const float *sn, int64_t P, const int64_t *pos, int64_t pstride, float sign, bool vec) {
    int64_t half = g.I / 2, per = vec ? VEC : 1, groups = half / per;
    GRID_STRIDE(idx, rows * groups) {
        int64_t i = idx % groups * per, r = idx / groups, tok;
        int64_t side = a2a_side_row(g, r, pack, pstride, &tok);
        const bf16 *x = pack ? src + side : src + r * g.I;
        bf16 *y = pack ? dst + r * g.I : dst + side;
        rope_at(y, x, 0, i, half, cs, sn, P, pos[tok], sign, vec);
    }
}

static cudaError_t a2a_rope(bool pack, void *dst, const void *src, const kcu_a2a *g, const float *cs, const float *sn,
                            int64_t P, const int64_t *pos, int64_t pstride, float sign, cudaStream_t st) {
    if (g->I % 2 || P <= 0 || (!pack && g->f > 1)) return cudaErrorInvalidValue;
    int64_t rows = g->O * g->ca * g->M * g->cb;
    if (rows <= 0 || g->I <= 0) return cudaSuccess;
    bool vec = rope_vec(dst, src, cs, sn, g->I);
    int64_t n = rows * (g->I / 2 / (vec ? VEC : 1));
    k_a2a_rope<<<grid_for(n), THREADS, 0, st>>>(BF(dst), CBF(src), *g, rows, pack, cs, sn, P, pos, pstride, sign, vec);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_a2a_pack_rope(void *dst, const void *x, const kcu_a2a *g, const float *cs, const float *sn,
                                         int64_t P, const int64_t *pos, int64_t pstride, float sign, cudaStream_t st) {
    return a2a_rope(true, dst, x, g, cs, sn, P, pos, pstride, sign, st);
}

extern "C" cudaError_t kcu_a2a_unpack_rope(void *y, const void *src, const kcu_a2a *g, const float *cs, const float *sn,
                                           int64_t P, const int64_t *pos, int64_t pstride, float sign,
                                           cudaStream_t st) {
    return a2a_rope(false, y, src, g, cs, sn, P, pos, pstride, sign, st);
}
