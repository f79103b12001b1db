// kcu_attention.cu — causal grouped-query attention, forward and backward,
// flash-attention-2 style: tiles of queries meet tiles of keys in shared
// memory with an online softmax, so no S x S matrix is ever stored.
// C interface: kcu.h; reference: ../host/kern_attention.c.
//
// Layout: q, o [b,S,H,Dh], k, v [b,S,Hkv,Dh] (bf16); q head h reads kv head
// h / (H/Hkv).  Scores are kept in log2 units (q pre-scaled by
// log2(e)/sqrt(Dh)), so every exponential is one exp2f.
//
// Threads: each query (or key) row is owned by TPR threads, each holding
// E = Dh/TPR of its Dh entries in registers (entries e*TPR + part, so that
// the TPR threads of a row read adjacent shared-memory words); row dot
// products are reduced across the TPR threads with shuffles.  The math is
// scalar fp32 FMA: correct and simple, not tensor-core speed.  At Dh 64
// and 128 the forward runs on tensor cores instead (kcu_attention_tc.cu);
// the backward and its row statistics stay here.
//
// Forward: one block per (query tile, batch x head); query tiles are
// launched last-first and key tiles first-first, so that the blocks with the
// most causal work start first.
// Backward: lse (forward without V) and Dsum = rowsum(dO o O) first; then
// dQ query-parallel and dK/dV key-parallel (each kv head's block loops over
// its q heads), so nothing is accumulated with atomics and the result does
// not depend on scheduling.
#include <cuda_bf16.h>
#include <math.h>

#include "kcu.h"

typedef __nv_bfloat16 bf16;

enum { BQ = 64, BK = 32 };   // forward / dQ: queries per block, keys per shared tile
enum { BKV = 64, BQ2 = 32 }; // dK/dV: keys per block, queries per shared tile

#include "kcu_attn_tile.cuh"

// o [b,S,H,DH] and lse [b,H,S] (log2 units); WITH_V = false computes lse only.
template <int DH, bool WITH_V>
__global__ void __launch_bounds__(BQ *Cfg<DH>::TPR)
    k_attn_fwd(bf16 *o, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int S, int H, int Hkv, float sl2) {
    constexpr int TPR = Cfg<DH>::TPR, E = Cfg<DH>::E;
    __shared__ float Ks[BK][DH];
    __shared__ float Vs[WITH_V ? BK : 1][DH];
    int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, bi = bh / H, h = bh % H, hk = h / (H / Hkv);
    int row = threadIdx.x / TPR, part = threadIdx.x % TPR, qi = qt * BQ + row;
    bool valid = qi < S;
    float qv[E], acc[E];
    const bf16 *qp = q + (((int64_t)bi * S + (valid ? qi : 0)) * H + h) * DH;
#pragma unroll
    for (int e = 0; e < E; e++) qv[e] = valid ? ldf(qp, e * TPR + part) * sl2 : 0.f, acc[e] = 0.f;
    float m = -INFINITY, l = 0.f;
    int kend = min(S, (qt + 1) * BQ);
    for (int k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads();
        load_tile<DH, BK>(Ks, k, bi, k0, S, Hkv, hk);
        if (WITH_V) load_tile<DH, BK>(Vs, v, bi, k0, S, Hkv, hk);
        __syncthreads();
        float s[BK], mt = -INFINITY;
#pragma unroll
        for (int j = 0; j < BK; j++) {
            float d = 0.f;
#pragma unroll
            for (int e = 0; e < E; e++) d += qv[e] * Ks[j][e * TPR + part];
            d = row_sum<TPR>(d);
            s[j] = k0 + j <= qi && k0 + j < S ? d : -INFINITY;
            mt = fmaxf(mt, s[j]);
        }
        float mn = fmaxf(m, mt);
        if (mn == -INFINITY) continue; // nothing visible to this row yet
        float alpha = exp2f(m - mn), ps = 0.f;
#pragma unroll
        for (int j = 0; j < BK; j++) s[j] = exp2f(s[j] - mn), ps += s[j];
        l = l * alpha + ps;
        m = mn;
        if (WITH_V) {
#pragma unroll
            for (int e = 0; e < E; e++) {
                float a = acc[e] * alpha;
#pragma unroll
                for (int j = 0; j < BK; j++) a += s[j] * Vs[j][e * TPR + part];
                acc[e] = a;
            }
        }
    }
    if (!valid) return;
    if (WITH_V) {
        bf16 *op = o + (((int64_t)bi * S + qi) * H + h) * DH;
#pragma unroll
        for (int e = 0; e < E; e++) op[e * TPR + part] = __float2bfloat16(acc[e] / l);
    }
    if (lse && part == 0) lse[(int64_t)bh * S + qi] = m + log2f(l);
}

// Dsum[b,H,S] = sum_d dO * O ; one thread per row
__global__ void k_attn_dsum(float *dsum, const bf16 *dout, const bf16 *o, int64_t b, int S, int H, int Dh) {
    for (int64_t r = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; r < b * S * H;
         r += (int64_t)gridDim.x * blockDim.x) {
        int64_t bi = r / ((int64_t)S * H), si = (r / H) % S, h = r % H;
        float s = 0.f;
        for (int d = 0; d < Dh; d++) s += ldf(dout, r * Dh + d) * ldf(o, r * Dh + d);
        dsum[(bi * H + h) * S + si] = s;
    }
}

// dq [b,S,H,DH]: per query row, over its visible keys:
//   p = exp2(s - lse), dp = dO . v, ds = p (dp - Dsum), dq += ds k ; dq *= 1/sqrt(Dh)
template <int DH>
__global__ void __launch_bounds__(BQ *Cfg<DH>::TPR)
    k_attn_bwd_dq(bf16 *dq, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                  const float *dsum, int S, int H, int Hkv, float sl2, float scale) {
    constexpr int TPR = Cfg<DH>::TPR, E = Cfg<DH>::E;
    __shared__ float Ks[BK][DH];
    __shared__ float Vs[BK][DH];
    int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, bi = bh / H, h = bh % H, hk = h / (H / Hkv);
    int row = threadIdx.x / TPR, part = threadIdx.x % TPR, qi = qt * BQ + row;
    bool valid = qi < S;
    int64_t roff = (((int64_t)bi * S + (valid ? qi : 0)) * H + h) * DH;
    float qv[E], dov[E], dqa[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        qv[e] = valid ? ldf(q, roff + e * TPR + part) * sl2 : 0.f;
        dov[e] = valid ? ldf(dout, roff + e * TPR + part) : 0.f;
        dqa[e] = 0.f;
    }
    float L = valid ? lse[(int64_t)bh * S + qi] : 0.f, Di = valid ? dsum[(int64_t)bh * S + qi] : 0.f;
    int kend = min(S, (qt + 1) * BQ);
    for (int k0 = 0; k0 < kend; k0 += BK) {
        __syncthreads();
        load_tile<DH, BK>(Ks, k, bi, k0, S, Hkv, hk);
        load_tile<DH, BK>(Vs, v, bi, k0, S, Hkv, hk);
        __syncthreads();
#pragma unroll 4
        for (int j = 0; j < BK; j++) {
            float s = 0.f, dp = 0.f;
#pragma unroll
            for (int e = 0; e < E; e++) s += qv[e] * Ks[j][e * TPR + part], dp += dov[e] * Vs[j][e * TPR + part];
            s = row_sum<TPR>(s);
            dp = row_sum<TPR>(dp);
            float p = valid && k0 + j <= qi ? exp2f(s - L) : 0.f, ds = p * (dp - Di);
#pragma unroll
            for (int e = 0; e < E; e++) dqa[e] += ds * Ks[j][e * TPR + part];
        }
    }
    if (!valid) return;
#pragma unroll
    for (int e = 0; e < E; e++) dq[roff + e * TPR + part] = __float2bfloat16(dqa[e] * scale);
}

// dk, dv [b,S,Hkv,DH]: per key row, over the visible queries of every q head
// of its kv head:  dv += p dO ;  dk += ds q ; dk *= 1/sqrt(Dh)
template <int DH>
__global__ void __launch_bounds__(BKV *Cfg<DH>::TPR)
    k_attn_bwd_dkv(bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v, const float *lse,
                   const float *dsum, int S, int H, int Hkv, float sl2, float scale) {
    constexpr int TPR = Cfg<DH>::TPR, E = Cfg<DH>::E;
    __shared__ float Qs[BQ2][DH];
    __shared__ float Os[BQ2][DH]; // dO
    __shared__ float Ls[BQ2], Ds[BQ2];
    int kt = blockIdx.x, bhk = blockIdx.y, bi = bhk / Hkv, hk = bhk % Hkv, G = H / Hkv;
    int row = threadIdx.x / TPR, part = threadIdx.x % TPR, kj = kt * BKV + row;
    bool valid = kj < S;
    int64_t roff = (((int64_t)bi * S + (valid ? kj : 0)) * Hkv + hk) * DH;
    float kv[E], vv[E], dka[E], dva[E];
#pragma unroll
    for (int e = 0; e < E; e++) {
        kv[e] = valid ? ldf(k, roff + e * TPR + part) * sl2 : 0.f;
        vv[e] = valid ? ldf(v, roff + e * TPR + part) : 0.f;
        dka[e] = dva[e] = 0.f;
    }
    for (int h = hk * G; h < (hk + 1) * G; h++) {
        const float *lrow = lse + ((int64_t)bi * H + h) * S, *drow = dsum + ((int64_t)bi * H + h) * S;
        for (int q0 = kt * BKV / BQ2 * BQ2; q0 < S; q0 += BQ2) {
            __syncthreads();
            load_tile<DH, BQ2>(Qs, q, bi, q0, S, H, h);
            load_tile<DH, BQ2>(Os, dout, bi, q0, S, H, h);
            for (int i = threadIdx.x; i < BQ2; i += blockDim.x) {
                Ls[i] = q0 + i < S ? lrow[q0 + i] : 0.f;
                Ds[i] = q0 + i < S ? drow[q0 + i] : 0.f;
            }
            __syncthreads();
#pragma unroll 4
            for (int i = 0; i < BQ2; i++) {
                float s = 0.f, dp = 0.f;
#pragma unroll
                for (int e = 0; e < E; e++) s += kv[e] * Qs[i][e * TPR + part], dp += vv[e] * Os[i][e * TPR + part];
                s = row_sum<TPR>(s);
                dp = row_sum<TPR>(dp);
                int qi = q0 + i;
                float p = valid && qi < S && kj <= qi ? exp2f(s - Ls[i]) : 0.f, ds = p * (dp - Ds[i]);
#pragma unroll
                for (int e = 0; e < E; e++) dva[e] += p * Os[i][e * TPR + part], dka[e] += ds * Qs[i][e * TPR + part];
            }
        }
    }
    if (!valid) return;
#pragma unroll
    for (int e = 0; e < E; e++) {
        dk[roff + e * TPR + part] = __float2bfloat16(dka[e] * scale);
        dv[roff + e * TPR + part] = __float2bfloat16(dva[e]);
    }
}

// ---- launchers ----------------------------------------------------------------------------------
static bool dims_ok(int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh) {
    return b > 0 && S > 0 && Hkv > 0 && H % Hkv == 0 && b * H <= 65535 && S <= (1 << 30) &&
           (Dh == 8 || Dh == 16 || Dh == 32 || Dh == 64 || Dh == 128);
}

template <int DH, bool WITH_V>
static void launch_fwd(bf16 *o, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int64_t b, int S, int H,
                       int Hkv, cudaStream_t st) {
    dim3 grid((unsigned)((S + BQ - 1) / BQ), (unsigned)(b * H));
    float sl2 = (float)(1.4426950408889634 / sqrt((double)DH));
    k_attn_fwd<DH, WITH_V><<<grid, BQ * Cfg<DH>::TPR, 0, st>>>(o, lse, q, k, v, S, H, Hkv, sl2);
}

template <int DH>
static void launch_bwd(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *q, const bf16 *k, const bf16 *v,
                       const float *lse, const float *dsum, int64_t b, int S, int H, int Hkv, cudaStream_t st) {
    double scale = 1.0 / sqrt((double)DH);
    float sl2 = (float)(1.4426950408889634 * scale);
    dim3 gq((unsigned)((S + BQ - 1) / BQ), (unsigned)(b * H));
    k_attn_bwd_dq<DH><<<gq, BQ * Cfg<DH>::TPR, 0, st>>>(dq, dout, q, k, v, lse, dsum, S, H, Hkv, sl2, (float)scale);
    dim3 gk((unsigned)((S + BKV - 1) / BKV), (unsigned)(b * Hkv));
    k_attn_bwd_dkv<DH>
        <<<gk, BKV * Cfg<DH>::TPR, 0, st>>>(dk, dv, dout, q, k, v, lse, dsum, S, H, Hkv, sl2, (float)scale);
}

#define DISPATCH_DH(Dh, CALL)                                                                                          \
    switch (Dh) {                                                                                                      \
    case 8: CALL(8); break;                                                                                            \
    case 16: CALL(16); break;                                                                                          \
    case 32: CALL(32); break;                                                                                          \
    case 64: CALL(64); break;                                                                                          \
    default: CALL(128); break;                                                                                         \
    }

// kcu_attention_tc.cu's launcher: Dh 64 or 128 (else cudaErrorInvalidValue);
// the other dims are checked here, by dims_ok, before it is called.
extern "C" cudaError_t kcu_attention_fwd_tc(kcu_bf16 *o, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v,
                                            int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh, cudaStream_t st);

// The tensor-core forward applies at Dh 64 and 128 when the device grants
// its shared memory (sm_80 and later do: 163 KB and more per block).
static bool tc_fits(int64_t Dh) {
    size_t need = kcu_attention_tc_smem(Dh);
    int dev, optin = 0;
    if (!need || cudaGetDevice(&dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
        return false;
    return (size_t)optin >= need;
}

extern "C" cudaError_t kcu_attention_fwd_impl(kcu_attn_impl impl, kcu_bf16 *o, const kcu_bf16 *q, const kcu_bf16 *k,
                                              const kcu_bf16 *v, int64_t b, int64_t S, int64_t H, int64_t Hkv,
                                              int64_t Dh, cudaStream_t st) {
    if (!dims_ok(b, S, H, Hkv, Dh)) return cudaErrorInvalidValue;
    if (impl == KCU_ATTN_TC || (impl == KCU_ATTN_AUTO && tc_fits(Dh)))
        return kcu_attention_fwd_tc(o, q, k, v, b, S, H, Hkv, Dh, st);
#define FWD(D)                                                                                                         \
    launch_fwd<D, true>((bf16 *)o, nullptr, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, b, (int)S, (int)H,      \
                        (int)Hkv, st)
    DISPATCH_DH(Dh, FWD)
#undef FWD
    return cudaGetLastError();
}

extern "C" cudaError_t kcu_attention_fwd(kcu_bf16 *o, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v,
                                         int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh, cudaStream_t st) {
    return kcu_attention_fwd_impl(KCU_ATTN_AUTO, o, q, k, v, b, S, H, Hkv, Dh, st);
}

extern "C" int64_t kcu_attention_bwd_ws(int64_t b, int64_t S, int64_t H) { return 2 * b * S * H; }

extern "C" cudaError_t kcu_attention_bwd(kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv, const kcu_bf16 *dout,
                                         const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o,
                                         int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh, float *ws,
                                         cudaStream_t st) {
    if (!dims_ok(b, S, H, Hkv, Dh)) return cudaErrorInvalidValue;
    float *lse = ws, *dsum = ws + b * S * H;
    // The row statistics are recomputed, as on the CPU: nothing is kept
    // between the forward and the backward.
#define LSE(D)                                                                                                         \
    launch_fwd<D, false>(nullptr, lse, (const bf16 *)q, (const bf16 *)k, nullptr, b, (int)S, (int)H, (int)Hkv, st)
    DISPATCH_DH(Dh, LSE)
#undef LSE
    int64_t rows = b * S * H;
    unsigned blocks = (unsigned)((rows + 255) / 256 < 4096 ? (rows + 255) / 256 : 4096);
    k_attn_dsum<<<blocks, 256, 0, st>>>(dsum, (const bf16 *)dout, (const bf16 *)o, b, (int)S, (int)H, (int)Dh);
#define BWD(D)                                                                                                         \
    launch_bwd<D>((bf16 *)dq, (bf16 *)dk, (bf16 *)dv, (const bf16 *)dout, (const bf16 *)q, (const bf16 *)k,            \
                  (const bf16 *)v, lse, dsum, b, (int)S, (int)H, (int)Hkv, st)
    DISPATCH_DH(Dh, BWD)
#undef BWD
    return cudaGetLastError();
}
