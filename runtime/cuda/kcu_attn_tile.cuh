// kcu_attn_tile.cuh — device helpers shared by the attention kernels
// (kcu_attention.cu) and the ring attention blocks (kcu_ring.cu): the
// thread layout per head dim, bf16 loads, row sums over a row's lanes, and
// the load of a [rows, DH] tile of one head into shared memory (fp32).
// Included after `typedef __nv_bfloat16 bf16;`.
#ifndef BASP_KCU_ATTN_TILE_CUH
#define BASP_KCU_ATTN_TILE_CUH

template <int DH> struct Cfg {
    static constexpr int TPR = DH >= 64 ? DH / 32 : 1; // threads per row
    static constexpr int E = DH / TPR;                 // entries per thread
};

static __device__ __forceinline__ float ldf(const bf16 *p, int64_t i) { return __bfloat162float(p[i]); }

// Sum over the TPR consecutive lanes that own one row.
template <int TPR> static __device__ __forceinline__ float row_sum(float v) {
#pragma unroll
    for (int o = TPR / 2; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// tile[BR][DH] (fp32) = rows r0 .. r0+BR of head `hd` of t [b,S,NH,DH]; zero past S
template <int DH, int BR>
static __device__ __forceinline__ void load_tile(float (*tile)[DH], const bf16 *t, int bi, int r0, int S, int NH,
                                                 int hd) {
    for (int idx = threadIdx.x; idx < BR * DH; idx += blockDim.x) {
        int j = idx / DH, d = idx % DH, r = r0 + j;
        tile[j][d] = r < S ? ldf(t, (((int64_t)bi * S + r) * NH + hd) * DH + d) : 0.f;
    }
}

#endif
