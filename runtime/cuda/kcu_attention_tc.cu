// kcu_attention_tc.cu — the causal GQA attention forward on tensor cores
// (WMMA, bf16 16x16x16 tiles, fp32 accumulation) for head dims 64 and 128.
// Same contract as the scalar kernel of kcu_attention.cu (kcu.h); the
// reference is ../host/kern_attention.c.
//
// Block: 4 warps and 64 query rows of one (batch, head), 16 rows per warp;
// key tiles of 64 rows of K and V staged in shared memory as bf16.  Per key
// tile, each warp:
//   1. S = Q K^T on tensor cores (Q's fragments stay in registers), stored
//      to shared memory as fp32;
//   2. the online softmax in log2 units, two lanes per row, each over half
//      of the tile's keys: the running max m and sum l, P = exp2(S - m) in
//      bf16 to shared memory, and the row of O rescaled by exp2(m_old - m);
//   3. O += P V on tensor cores, O itself kept in shared memory (fp32):
//      the accumulator fragment's layout is unspecified, and the rescaling
//      in 2 is per row.
// Warps whose rows all precede a key tile skip it (the causal mask).
// Shared memory: 62 KB at Dh 64, 93 KB at Dh 128 (over the default 48 KB,
// so the kernel opts in at its first launch).
#include <cuda_bf16.h>
#include <math.h>
#include <mma.h>

#include "kcu.h"

using namespace nvcuda;
typedef __nv_bfloat16 bf16;

namespace {

enum { TQ = 64, TK = 64, WARPS = 4, WQ = 16 }; // queries per block, keys per tile, warps, queries per warp

// Shared-memory layout (byte offsets; every WMMA pointer 32-byte aligned,
// every row stride a multiple of 16 bytes and padded against bank conflicts).
template <int DH> struct Tc {
    static constexpr int KLD = DH + 8; // bf16 K, V (and Q staging) row stride
    static constexpr int SLD = TK + 4; // fp32 scores
    static constexpr int PLD = TK + 8; // bf16 probabilities
    static constexpr int OLD = DH + 4; // fp32 output accumulator
    static constexpr size_t K_OFF = 0;
    static constexpr size_t V_OFF = K_OFF + (size_t)TK * KLD * 2;
    static constexpr size_t S_OFF = V_OFF + (size_t)TK * KLD * 2;
    static constexpr size_t P_OFF = S_OFF + (size_t)WARPS * WQ * SLD * 4;
    static constexpr size_t O_OFF = P_OFF + (size_t)WARPS * WQ * PLD * 2;
    static constexpr size_t BYTES = O_OFF + (size_t)WARPS * WQ * OLD * 4;
    static_assert(WQ * KLD * 2 <= WQ * SLD * 4, "Q staging must fit a warp's score tile");
};

struct __align__(32) a32 {
    float f[8];
};

typedef wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major> frag_a;
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major> frag_bt; // K^T from K rows
typedef wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major> frag_b;
typedef wmma::fragment<wmma::accumulator, 16, 16, 16, float> frag_c;

// rows r0 .. r0+R of head `hd` of t [b,S,NH,DH] -> dst [R][ld] (bf16), zero past S; 16 bytes at a time
template <int DH>
__device__ __forceinline__ void stage_rows(bf16 *dst, int ld, const bf16 *t, int bi, int r0, int R, int S, int NH,
                                           int hd, int tid, int nthreads) {
    for (int idx = tid; idx < R * DH / 8; idx += nthreads) {
        int row = idx / (DH / 8), c8 = idx % (DH / 8), r = r0 + row;
        uint4 val = make_uint4(0u, 0u, 0u, 0u);
        if (r < S) val = *(const uint4 *)(t + (((int64_t)bi * S + r) * NH + hd) * DH + c8 * 8);
        *(uint4 *)(dst + row * ld + c8 * 8) = val;
    }
}

} // namespace

// o [b,S,H,DH]; grid (query tiles, b*H), query tiles launched last-first
template <int DH>
__global__ void __launch_bounds__(WARPS * 32)
    k_attn_fwd_tc(bf16 *o, const bf16 *q, const bf16 *k, const bf16 *v, int S, int H, int Hkv, float sl2) {
    typedef Tc<DH> C;
    extern __shared__ a32 smem_a32[];
    unsigned char *smem = (unsigned char *)smem_a32;
    bf16 *Ks = (bf16 *)(smem + C::K_OFF), *Vs = (bf16 *)(smem + C::V_OFF);
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float *Sw = (float *)(smem + C::S_OFF) + warp * WQ * C::SLD;
    bf16 *Pw = (bf16 *)(smem + C::P_OFF) + warp * WQ * C::PLD;
    float *Ow = (float *)(smem + C::O_OFF) + warp * WQ * C::OLD;
    int qt = gridDim.x - 1 - blockIdx.x, bh = blockIdx.y, bi = bh / H, h = bh % H, hk = h / (H / Hkv);
    int q0 = qt * TQ + warp * WQ;      // this warp's first query
    int r = lane / 2, half = lane % 2; // softmax and output: row r, half the columns
    int qi = q0 + r;

    // Q: staged through the warp's score tile, then fragments for the whole loop.
    bf16 *Qw = (bf16 *)Sw;
    stage_rows<DH>(Qw, C::KLD, q, bi, q0, WQ, S, H, h, lane, 32);
    __syncwarp();
    frag_a qa[DH / 16];
    for (int kk = 0; kk < DH / 16; kk++) wmma::load_matrix_sync(qa[kk], Qw + kk * 16, C::KLD);
    for (int idx = lane; idx < WQ * C::OLD; idx += 32) Ow[idx] = 0.f;
    __syncwarp();

    float m = -INFINITY, l = 0.f;
    int kend = min(S, (qt + 1) * TQ);
    for (int k0 = 0; k0 < kend; k0 += TK) {
        __syncthreads(); // every warp is done with the previous tile
        stage_rows<DH>(Ks, C::KLD, k, bi, k0, TK, S, Hkv, hk, threadIdx.x, WARPS * 32);
        stage_rows<DH>(Vs, C::KLD, v, bi, k0, TK, S, Hkv, hk, threadIdx.x, WARPS * 32);
        __syncthreads();
        if (k0 > q0 + WQ - 1) continue; // every key after this warp's last query (warp-uniform)

        // 1. S = Q K^T
        for (int n = 0; n < TK / 16; n++) {
            frag_c sc;
            wmma::fill_fragment(sc, 0.f);
            for (int kk = 0; kk < DH / 16; kk++) {
                frag_bt kb;
                wmma::load_matrix_sync(kb, Ks + n * 16 * C::KLD + kk * 16, C::KLD);
                wmma::mma_sync(sc, qa[kk], kb, sc);
            }
            wmma::store_matrix_sync(Sw + n * 16, sc, C::SLD, wmma::mem_row_major);
        }
        __syncwarp();

        // 2. online softmax over this lane's TK/2 keys of row r
        const float *srow = Sw + r * C::SLD + half * (TK / 2);
        int kbase = k0 + half * (TK / 2);
        float mt = -INFINITY;
        for (int j = 0; j < TK / 2; j++)
            if (kbase + j <= qi && kbase + j < S) mt = fmaxf(mt, srow[j] * sl2);
        mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, 1));
        float mn = fmaxf(m, mt), alpha = mn == -INFINITY ? 1.f : exp2f(m - mn), ps = 0.f;
        bf16 *prow = Pw + r * C::PLD + half * (TK / 2);
        for (int j = 0; j < TK / 2; j++) {
            bool vis = kbase + j <= qi && kbase + j < S && mn != -INFINITY;
            float p = vis ? exp2f(srow[j] * sl2 - mn) : 0.f;
            ps += p;
            prow[j] = __float2bfloat16(p);
        }
        ps += __shfl_xor_sync(0xffffffffu, ps, 1);
        l = l * alpha + ps;
        m = mn;
        float *orow = Ow + r * C::OLD + half * (DH / 2);
        for (int c = 0; c < DH / 2; c++) orow[c] *= alpha;
        __syncwarp();

        // 3. O += P V
        frag_a pa[TK / 16];
        for (int kk = 0; kk < TK / 16; kk++) wmma::load_matrix_sync(pa[kk], Pw + kk * 16, C::PLD);
        for (int n = 0; n < DH / 16; n++) {
            frag_c oc;
            wmma::load_matrix_sync(oc, Ow + n * 16, C::OLD, wmma::mem_row_major);
            for (int kk = 0; kk < TK / 16; kk++) {
                frag_b vb;
                wmma::load_matrix_sync(vb, Vs + kk * 16 * C::KLD + n * 16, C::KLD);
                wmma::mma_sync(oc, pa[kk], vb, oc);
            }
            wmma::store_matrix_sync(Ow + n * 16, oc, C::OLD, wmma::mem_row_major);
        }
        __syncwarp();
    }

    if (qi < S) {
        const float *orow = Ow + r * C::OLD + half * (DH / 2);
        bf16 *op = o + (((int64_t)bi * S + qi) * H + h) * DH + half * (DH / 2);
        float inv = 1.f / l;
        for (int c = 0; c < DH / 2; c++) op[c] = __float2bfloat16(orow[c] * inv);
    }
}

template <int DH>
static cudaError_t launch_fwd_tc(bf16 *o, const bf16 *q, const bf16 *k, const bf16 *v, int64_t b, int S, int H, int Hkv,
                                 cudaStream_t st) {
    size_t bytes = Tc<DH>::BYTES;
    cudaError_t e = cudaFuncSetAttribute(k_attn_fwd_tc<DH>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes);
    if (e != cudaSuccess) return e;
    dim3 grid((unsigned)((S + TQ - 1) / TQ), (unsigned)(b * H));
    float sl2 = (float)(1.4426950408889634 / sqrt((double)DH));
    k_attn_fwd_tc<DH><<<grid, WARPS * 32, bytes, st>>>(o, q, k, v, S, H, Hkv, sl2);
    return cudaGetLastError();
}

extern "C" size_t kcu_attention_tc_smem(int64_t Dh) {
    return Dh == 64 ? Tc<64>::BYTES : Dh == 128 ? Tc<128>::BYTES : 0;
}

// Called by kcu_attention_fwd_impl (kcu_attention.cu), which has checked
// every dim but the head dim.
extern "C" cudaError_t kcu_attention_fwd_tc(kcu_bf16 *o, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v,
                                            int64_t b, int64_t S, int64_t H, int64_t Hkv, int64_t Dh, cudaStream_t st) {
    if (Dh != 64 && Dh != 128) return cudaErrorInvalidValue;
    if (Dh == 64)
        return launch_fwd_tc<64>((bf16 *)o, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, b, (int)S, (int)H,
                                 (int)Hkv, st);
    return launch_fwd_tc<128>((bf16 *)o, (const bf16 *)q, (const bf16 *)k, (const bf16 *)v, b, (int)S, (int)H, (int)Hkv,
                              st);
}
