// kcu_ring.cu — the per-block kernels of ring attention, forward and backward.
// C interface and dtype contract: kcu.h; reference: ../host/kern_ring.c.
//
// A rank keeps its query block and meets every key/value block in turn; each
// call folds one key block into a running result.  The running state is
// fp32 (o [b,Sq,H,Dh], lse [b,Sq,H], natural log) and so are the gradient
// accumulators (dq, dk, dv): a bf16 state would be rounded once per ring
// step, R times, where the single-pass kernels round once.
//
// The kernels follow kcu_attention.cu (TPR threads own a row, E = Dh/TPR
// entries each in registers, shuffles reduce the row dots, scalar fp32 FMA,
// scores in log2 units) with two changes: the causal mask compares the
// explicit positions qpos/kpos (device int64) instead of indices, and a
// whole tile pair is skipped when its smallest key position exceeds its
// largest query position (every thread computes both bounds from global
// memory, so the decision is uniform over the block and no barrier is
// spent on it).  Packed documents add optional ids qdoc/kdoc (device int32
// [b,Sq], [b,Sk]): a key is visible only to queries of its own document,
// and a tile pair whose key and query id ranges are disjoint is skipped
// the same way.
//
// Forward: one block per (query tile, batch x head); the running (o, lse)
// row is loaded as the online-softmax state m = lse, l = 1, acc = o, the
// visible key tiles are folded in, and the state is written back only by
// rows that saw a key in this block (the others stay bit for bit).  With
// o NULL only lse is kept (the statistics a backward recomputes: no P V).
// Backward: dq query-parallel, dk/dv key-parallel (each kv head's block
// loops over its q heads), each output element owned by one thread that
// adds its sum to the accumulator: no atomics.
#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>

#include "kcu.h"

typedef __nv_bfloat16 bf16;

enum { BQ = 64, BK = 32 };   // forward / dq: queries per block, keys per shared tile
enum { BKV = 64, BQ2 = 32 }; // dk/dv: keys per block, queries per shared tile

#define LOG2E 1.4426950408889634f
#define LN2   0.6931471805599453f

#include "kcu_attn_tile.cuh"

// The extent of a tile's positions and document ids (the fields of an
// array not given stay 0).
struct Span {
    int64_t plo, phi;
    int32_t dlo, dhi;
};

// The extent of entries r0 .. min(r0 + n, S) - 1 (r0 < S) of pos and doc
// (doc already at its batch row; either may be NULL).
static __device__ __forceinline__ Span span_of(const int64_t *pos, const int32_t *doc, int r0, int n, int S) {
    Span t = {0, 0, 0, 0};
    int end = r0 + n < S ? r0 + n : S;
    if (pos) {
        t.plo = t.phi = pos[r0];
        for (int i = r0 + 1; i < end; i++) {
            t.plo = pos[i] < t.plo ? pos[i] : t.plo;
            t.phi = pos[i] > t.phi ? pos[i] : t.phi;
        }
    }
    if (doc) {
        t.dlo = t.dhi = doc[r0];
        for (int i = r0 + 1; i < end; i++) {
            t.dlo = doc[i] < t.dlo ? doc[i] : t.dlo;
            t.dhi = doc[i] > t.dhi ? doc[i] : t.dhi;
        }
    }
    return t;
}

// No key of tile k is visible to any query of tile q: the keys all come
// after the queries, or no key shares a query's document.
static __device__ __forceinline__ bool span_masked(const Span &q, const Span &k, bool by_pos, bool by_doc) {
    return (by_pos && k.plo > q.phi) || (by_doc && (k.dhi < q.dlo || k.dlo > q.dhi));
}

// ---- forward ------------------------------------------------------------------------------
// (o, lse) [b,Sq,H,DH] / [b,Sq,H] updated with the key block k, v [b,Sk,Hk,DH].
template <int DH>
__global__ void __launch_bounds__(BQ *Cfg<DH>::TPR)
    k_ring_fwd(float *o, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int Sq, int Sk, int H, int Hk,
               float sl2, const int64_t *qpos, const int64_t *kpos, const int32_t *qdoc, const int32_t *kdoc) {
    constexpr int TPR = Cfg<DH>::TPR, E = Cfg<DH>::E;
    __shared__ float Ks[BK][DH];
    __shared__ float Vs[BK][DH];
    __shared__ int64_t Kp[BK];
    __shared__ int32_t Kd[BK];
    int qt = blockIdx.x, bh = blockIdx.y, bi = bh / H, h = bh % H, hk = h / (H / Hk);
    int row = threadIdx.x / TPR, part = threadIdx.x % TPR, qi = qt * BQ + row;
    bool valid = qi < Sq;
    int64_t lrow = ((int64_t)bi * Sq + (valid ? qi : 0)) * H + h, roff = lrow * DH;
    float L = valid ? lse[lrow] : -INFINITY;
    bool seen = L != -INFINITY, any = false;
    float m = seen ? L * LOG2E : -INFINITY, l = seen ? 1.f : 0.f, qv[E], acc[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        qv[e] = valid ? ldf(q, roff + e * TPR + part) * sl2 : 0.f;
        acc[e] = seen && o ? o[roff + e * TPR + part] : 0.f;
    }
    if (kdoc) qdoc += (int64_t)bi * Sq, kdoc += (int64_t)bi * Sk;
    int64_t qp = valid && kpos ? qpos[qi] : 0;
    int32_t qd = valid && kdoc ? qdoc[qi] : 0;
    Span qs = span_of(kpos ? qpos : nullptr, kdoc ? qdoc : nullptr, qt * BQ, BQ, Sq);
    for (int k0 = 0; k0 < Sk; k0 += BK) {
        if (span_masked(qs, span_of(kpos, kdoc, k0, BK, Sk), kpos != nullptr, kdoc != nullptr)) continue;
        __syncthreads();
        load_tile<DH, BK>(Ks, k, bi, k0, Sk, Hk, hk);
        load_tile<DH, BK>(Vs, v, bi, k0, Sk, Hk, hk);
        for (int j = threadIdx.x; j < BK; j += blockDim.x) {
            Kp[j] = kpos && k0 + j < Sk ? kpos[k0 + j] : 0;
            Kd[j] = kdoc && k0 + j < Sk ? kdoc[k0 + j] : 0;
        }
        __syncthreads();
        float s[BK], mt = -INFINITY;
#pragma unroll
        for (int j = 0; j < BK; j++) {
            float d = 0.f;
#pragma unroll
            for (int e = 0; e < E; e++) d += qv[e] * Ks[j][e * TPR + part];
            d = row_sum<TPR>(d);
            s[j] = valid && k0 + j < Sk && (!kpos || Kp[j] <= qp) && (!kdoc || Kd[j] == qd) ? d : -INFINITY;
            mt = fmaxf(mt, s[j]);
        }
        if (mt == -INFINITY) continue; // nothing visible to this row in this tile
        any = true;
        float mn = fmaxf(m, mt), alpha = exp2f(m - mn), ps = 0.f;
#pragma unroll
        for (int j = 0; j < BK; j++) s[j] = exp2f(s[j] - mn), ps += s[j];
        l = l * alpha + ps;
        m = mn;
        if (!o) continue; // statistics only
#pragma unroll
        for (int e = 0; e < E; e++) {
            float a = acc[e] * alpha;
#pragma unroll
            for (int j = 0; j < BK; j++) a += s[j] * Vs[j][e * TPR + part];
            acc[e] = a;
        }
    }
    if (!valid || !any) return;
#pragma unroll
    for (int e = 0; e < E && o; e++) o[roff + e * TPR + part] = acc[e] / l;
    if (part == 0) lse[lrow] = (m + log2f(l)) * LN2;
}

// D[b,S,H] = sum_d dO * O ; one thread per row
__global__ void k_ring_rowdot(float *D, const bf16 *dout, const bf16 *o, int64_t rows, int Dh) {
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < rows; r += (int64_t)gridDim.x * blockDim.x) {
        float s = 0.f;
        for (int d = 0; d < Dh; d++) s += ldf(dout, r * Dh + d) * ldf(o, r * Dh + d);
        D[r] = s;
    }
}

// ---- backward -----------------------------------------------------------------------------
// The final lse of a row in log2 units; a row that saw no key at all gets
// +inf, so that exp2(s - L) is 0 rather than NaN.
static __device__ __forceinline__ float lse2(float L) { return L == -INFINITY ? INFINITY : L * LOG2E; }

// dq [b,Sq,H,DH] += scale * sum over visible keys of p (dp - D) k,
// p = exp2(s - lse), dp = dO . v
template <int DH>
__global__ void __launch_bounds__(BQ *Cfg<DH>::TPR)
    k_ring_bwd_dq(float *dq, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                  const float *D, int Sq, int Sk, int H, int Hk, float sl2, float scale, const int64_t *qpos,
                  const int64_t *kpos, const int32_t *qdoc, const int32_t *kdoc) {
    constexpr int TPR = Cfg<DH>::TPR, E = Cfg<DH>::E;
    __shared__ float Ks[BK][DH];
    __shared__ float Vs[BK][DH];
    __shared__ int64_t Kp[BK];
    __shared__ int32_t Kd[BK];
    int qt = blockIdx.x, bh = blockIdx.y, bi = bh / H, h = bh % H, hk = h / (H / Hk);
    int row = threadIdx.x / TPR, part = threadIdx.x % TPR, qi = qt * BQ + row;
    bool valid = qi < Sq;
    int64_t lrow = ((int64_t)bi * Sq + (valid ? qi : 0)) * H + h, roff = lrow * DH;
    float qv[E], dov[E], dqa[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        qv[e] = valid ? ldf(q, roff + e * TPR + part) * sl2 : 0.f;
        dov[e] = valid ? ldf(dout, roff + e * TPR + part) : 0.f;
        dqa[e] = 0.f;
    }
    float L = valid ? lse2(lse[lrow]) : INFINITY, Di = valid ? D[lrow] : 0.f;
    if (kdoc) qdoc += (int64_t)bi * Sq, kdoc += (int64_t)bi * Sk;
    int64_t qp = valid && kpos ? qpos[qi] : 0;
    int32_t qd = valid && kdoc ? qdoc[qi] : 0;
    Span qs = span_of(kpos ? qpos : nullptr, kdoc ? qdoc : nullptr, qt * BQ, BQ, Sq);
    for (int k0 = 0; k0 < Sk; k0 += BK) {
        if (span_masked(qs, span_of(kpos, kdoc, k0, BK, Sk), kpos != nullptr, kdoc != nullptr)) continue;
        __syncthreads();
        load_tile<DH, BK>(Ks, k, bi, k0, Sk, Hk, hk);
        load_tile<DH, BK>(Vs, v, bi, k0, Sk, Hk, hk);
        for (int j = threadIdx.x; j < BK; j += blockDim.x) {
            Kp[j] = kpos && k0 + j < Sk ? kpos[k0 + j] : 0;
            Kd[j] = kdoc && k0 + j < Sk ? kdoc[k0 + j] : 0;
        }
        __syncthreads();
#pragma unroll 4
        for (int j = 0; j < BK; j++) {
            float s = 0.f, dp = 0.f;
#pragma unroll
            for (int e = 0; e < E; e++) s += qv[e] * Ks[j][e * TPR + part], dp += dov[e] * Vs[j][e * TPR + part];
            s = row_sum<TPR>(s);
            dp = row_sum<TPR>(dp);
            bool vis = valid && k0 + j < Sk && (!kpos || Kp[j] <= qp) && (!kdoc || Kd[j] == qd);
            float p = vis ? exp2f(s - L) : 0.f, ds = p * (dp - Di);
#pragma unroll
            for (int e = 0; e < E; e++) dqa[e] += ds * Ks[j][e * TPR + part];
        }
    }
    if (!valid) return;
#pragma unroll
    for (int e = 0; e < E; e++) dq[roff + e * TPR + part] += dqa[e] * scale;
}

// dk, dv [b,Sk,Hk,DH] += over the visible queries of every q head of the kv
// head: dv += p dO, dk += scale * p (dp - D) q
template <int DH>
__global__ void __launch_bounds__(BKV *Cfg<DH>::TPR)
    k_ring_bwd_dkv(float *dk, float *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
                   const float *lse, const float *D, int Sq, int Sk, int H, int Hk, float sl2, float scale,
                   const int64_t *qpos, const int64_t *kpos, const int32_t *qdoc, const int32_t *kdoc) {
    constexpr int TPR = Cfg<DH>::TPR, E = Cfg<DH>::E;
    __shared__ float Qs[BQ2][DH];
    __shared__ float Os[BQ2][DH]; // dO
    __shared__ float Ls[BQ2], Ds[BQ2];
    __shared__ int64_t Qp[BQ2];
    __shared__ int32_t Qd[BQ2];
    int kt = blockIdx.x, bhk = blockIdx.y, bi = bhk / Hk, hk = bhk % Hk, G = H / Hk;
    int row = threadIdx.x / TPR, part = threadIdx.x % TPR, kj = kt * BKV + row;
    bool valid = kj < Sk;
    int64_t roff = (((int64_t)bi * Sk + (valid ? kj : 0)) * Hk + hk) * DH;
    float kv[E], vv[E], dka[E], dva[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        kv[e] = valid ? ldf(k, roff + e * TPR + part) * sl2 : 0.f;
        vv[e] = valid ? ldf(v, roff + e * TPR + part) : 0.f;
        dka[e] = dva[e] = 0.f;
    }
    if (kdoc) qdoc += (int64_t)bi * Sq, kdoc += (int64_t)bi * Sk;
    int64_t kp = valid && kpos ? kpos[kj] : 0;
    int32_t kd = valid && kdoc ? kdoc[kj] : 0;
    Span ks = span_of(kpos, kdoc, kt * BKV, BKV, Sk);
    for (int h = hk * G; h < (hk + 1) * G; h++) {
        for (int q0 = 0; q0 < Sq; q0 += BQ2) {
            Span qs = span_of(kpos ? qpos : nullptr, kdoc ? qdoc : nullptr, q0, BQ2, Sq);
            if (span_masked(qs, ks, kpos != nullptr, kdoc != nullptr)) continue; // the whole tile pair is masked
            __syncthreads();
            load_tile<DH, BQ2>(Qs, q, bi, q0, Sq, H, h);
            load_tile<DH, BQ2>(Os, dout, bi, q0, Sq, H, h);
            for (int i = threadIdx.x; i < BQ2; i += blockDim.x) {
                int64_t lr = ((int64_t)bi * Sq + q0 + i) * H + h;
                bool in = q0 + i < Sq;
                Ls[i] = in ? lse2(lse[lr]) : INFINITY;
                Ds[i] = in ? D[lr] : 0.f;
                Qp[i] = in && kpos ? qpos[q0 + i] : 0;
                Qd[i] = in && kdoc ? qdoc[q0 + i] : 0;
            }
            __syncthreads();
#pragma unroll 4
            for (int i = 0; i < BQ2; i++) {
                float s = 0.f, dp = 0.f;
#pragma unroll
                for (int e = 0; e < E; e++) s += kv[e] * Qs[i][e * TPR + part], dp += vv[e] * Os[i][e * TPR + part];
                s = row_sum<TPR>(s);
                dp = row_sum<TPR>(dp);
                bool vis = valid && q0 + i < Sq && (!kpos || kp <= Qp[i]) && (!kdoc || kd == Qd[i]);
                float p = vis ? exp2f(s - Ls[i]) : 0.f, ds = p * (dp - Ds[i]);
#pragma unroll
                for (int e = 0; e < E; e++) dva[e] += p * Os[i][e * TPR + part], dka[e] += ds * Qs[i][e * TPR + part];
            }
        }
    }
    if (!valid) return;
#pragma unroll
    for (int e = 0; e < E; e++) {
        dk[roff + e * TPR + part] += dka[e] * scale;
        dv[roff + e * TPR + part] += dva[e];
    }
}

// ---- launchers ---------------------------------------------------------------------------------
static bool ring_dims_ok(int64_t b, int64_t Sq, int64_t Sk, int64_t H, int64_t Hk, int64_t Dh) {
    return b > 0 && Sq > 0 && Sk > 0 && Hk > 0 && H % Hk == 0 && b * H <= 65535 && Sq <= (1 << 30) && Sk <= (1 << 30) &&
           (Dh == 8 || Dh == 16 || Dh == 32 || Dh == 64 || Dh == 128);
}

#define RING_DISPATCH_DH(Dh, CALL)                                                                                     \
    switch (Dh) {                                                                                                      \
    case 8: CALL(8); break;                                                                                            \
    case 16: CALL(16); break;                                                                                          \
    case 32: CALL(32); break;                                                                                          \
    case 64: CALL(64); break;                                                                                          \
    default: CALL(128); break;                                                                                         \
    }

// Positions without query positions, or document ids on one side only, are
// a caller's mistake.
static bool ring_ids_ok(const int64_t *qpos, const int64_t *kpos, const int32_t *qdoc, const int32_t *kdoc) {
    return !(kpos && !qpos) && !qdoc == !kdoc;
}

extern "C" cudaError_t kcu_ring_block_fwd_doc(float *o, float *lse, const kcu_bf16 *q, const kcu_bf16 *k,
                                              const kcu_bf16 *v, int64_t b, int64_t Sq, int64_t Sk, int64_t H,
                                              int64_t Hk, int64_t Dh, const int64_t *qpos, const int64_t *kpos,
                                              const int32_t *qdoc, const int32_t *kdoc, cudaStream_t st) {
    if (!ring_dims_ok(b, Sq, Sk, H, Hk, Dh) || !ring_ids_ok(qpos, kpos, qdoc, kdoc)) return cudaErrorInvalidValue;
    dim3 grid((unsigned)((Sq + BQ - 1) / BQ), (unsigned)(b * H));
    float sl2 = (float)(1.4426950408889634 / sqrt((double)Dh));
#define FWD(D)                                                                                                         \
    k_ring_fwd<D><<<grid, BQ * Cfg<D>::TPR, 0, st>>>(o, lse, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v,        \
                                                     (int)Sq, (int)Sk, (int)H, (int)Hk, sl2, qpos, kpos, qdoc, kdoc)
    RING_DISPATCH_DH(Dh, FWD)
#undef FWD
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_ring_block_fwd(float *o, float *lse, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v,
                                          int64_t b, int64_t Sq, int64_t Sk, int64_t H, int64_t Hk, int64_t Dh,
                                          const int64_t *qpos, const int64_t *kpos, cudaStream_t st) {
    return kcu_ring_block_fwd_doc(o, lse, q, k, v, b, Sq, Sk, H, Hk, Dh, qpos, kpos, nullptr, nullptr, st);
}

extern "C" cudaError_t kcu_ring_rowdot(float *D, const kcu_bf16 *dout, const kcu_bf16 *o, int64_t b, int64_t S,
                                       int64_t H, int64_t Dh, cudaStream_t st) {
    int64_t rows = b * S * H;
    if (rows <= 0 || Dh <= 0) return cudaErrorInvalidValue;
    unsigned blocks = (unsigned)((rows + 255) / 256 < 4096 ? (rows + 255) / 256 : 4096);
    k_ring_rowdot<<<blocks, 256, 0, st>>>(D, (const bf16 *)dout, (const bf16 *)o, rows, (int)Dh);
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_ring_block_bwd_doc(float *dq, float *dk, float *dv, const kcu_bf16 *dout, const kcu_bf16 *q,
                                              const kcu_bf16 *k, const kcu_bf16 *v, const float *lse, const float *D,
                                              int64_t b, int64_t Sq, int64_t Sk, int64_t H, int64_t Hk, int64_t Dh,
                                              const int64_t *qpos, const int64_t *kpos, const int32_t *qdoc,
                                              const int32_t *kdoc, cudaStream_t st) {
    if (!ring_dims_ok(b, Sq, Sk, H, Hk, Dh) || !ring_ids_ok(qpos, kpos, qdoc, kdoc)) return cudaErrorInvalidValue;
    double scale = 1.0 / sqrt((double)Dh);
    float sl2 = (float)(1.4426950408889634 * scale);
    dim3 gq((unsigned)((Sq + BQ - 1) / BQ), (unsigned)(b * H)),
        gk((unsigned)((Sk + BKV - 1) / BKV), (unsigned)(b * Hk));
#define BWD(DH_)                                                                                                       \
    do {                                                                                                               \
        k_ring_bwd_dq<DH_><<<gq, BQ * Cfg<DH_>::TPR, 0, st>>>(                                                         \
            dq, (const bf16 *)dout, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, lse, D, (int)Sq, (int)Sk,       \
            (int)H, (int)Hk, sl2, (float)scale, qpos, kpos, qdoc, kdoc);                                               \
        k_ring_bwd_dkv<DH_><<<gk, BKV * Cfg<DH_>::TPR, 0, st>>>(                                                       \
            dk, dv, (const bf16 *)dout, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, lse, D, (int)Sq, (int)Sk,   \
            (int)H, (int)Hk, sl2, (float)scale, qpos, kpos, qdoc, kdoc);                                               \
    } while (0)
    RING_DISPATCH_DH(Dh, BWD)
#undef BWD
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_ring_block_bwd(float *dq, float *dk, float *dv, const kcu_bf16 *dout, const kcu_bf16 *q,
                                          const kcu_bf16 *k, const kcu_bf16 *v, const float *lse, const float *D,
                                          int64_t b, int64_t Sq, int64_t Sk, int64_t H, int64_t Hk, int64_t Dh,
                                          const int64_t *qpos, const int64_t *kpos, cudaStream_t st) {
    return kcu_ring_block_bwd_doc(dq, dk, dv, dout, q, k, v, lse, D, b, Sq, Sk, H, Hk, Dh, qpos, kpos, nullptr, nullptr,
                                  st);
}
