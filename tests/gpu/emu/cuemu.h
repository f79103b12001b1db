/* cuemu.h — the CUDA device built-ins for kernel sources run on the CPU.
 *
 * cu2cpp.py turns a .cu file into C++ that includes this header first; the
 * result is compiled by the host C++ compiler and linked with libcuemu
 * (cuemu_sched.cpp runs the kernels, cuemu_rt.c, cuemu_blas.c and
 * cuemu_nccl.c stand in for cudart, cuBLAS and NCCL).  See README.md for
 * what this checks and what it cannot.
 *
 * A kernel launch runs every block in turn; the threads of a block are
 * fibers that run until they reach a barrier (__syncthreads, a warp
 * shuffle) and resume when every thread it waits for has arrived.  So the
 * order of shared-memory accesses between barriers is one legal order, and
 * a missing barrier shows up as wrong results. */
#ifndef BASP_CUEMU_H
#define BASP_CUEMU_H

#include <cuda_bf16.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include <functional>
#include <tuple>
#include <type_traits>

/* ---- qualifiers: plain C++ functions and block-wide statics ------------------ */
#undef __global__
#undef __device__
#undef __host__
#undef __shared__
#undef __launch_bounds__
#undef __forceinline__
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
/* Blocks run one after another, so a function-local static is exactly one
 * block's shared memory.  cu2cpp adds a cuemu_shared() call after each
 * declaration, which fills it with NaN bytes once per block: shared memory
 * starts undefined on a GPU too. */
#define __shared__ static

/* ---- thread and block coordinates, set by the scheduler on every switch ---- */
extern uint3 cuemu_thread_idx, cuemu_block_idx;
extern dim3 cuemu_block_dim, cuemu_grid_dim;
#define threadIdx cuemu_thread_idx
#define blockIdx  cuemu_block_idx
#define blockDim  cuemu_block_dim
#define gridDim   cuemu_grid_dim
#define warpSize  32

/* ---- scheduler interface (cuemu_sched.cpp) ------------------------------------ */
/* Checks the launch now (launch errors are synchronous), then queues the
 * grid on st. */
void cuemu_launch_fn(const char *name, const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                     std::function<void()> body);
void cuemu_syncthreads(const char *site);
/* The lanes of mask meet (__syncwarp, and each warp-wide WMMA call). */
void cuemu_syncwarp(unsigned mask);
uint64_t cuemu_shfl_xor_bits(unsigned mask, uint64_t bits, int lane_mask, int width);
void *cuemu_dyn_smem(void);
void cuemu_shared(void *p, size_t bytes);

struct cuemu_cfg {
    dim3 grid, block;
    size_t smem;
    cudaStream_t st;
};
static inline cuemu_cfg cuemu_config(dim3 grid, dim3 block, size_t smem = 0, cudaStream_t st = 0) {
    return cuemu_cfg{grid, block, smem, st};
}

/* NAME<<<grid, block, smem, stream>>>(ARGS), as cu2cpp writes it: the
 * arguments are converted to the kernel's parameter types and copied now,
 * as a launch does, and the grid runs when its stream is flushed. */
template <class... P, class... A>
static inline void cuemu_launch(const char *name, void (*fn)(P...), cuemu_cfg c, A &&...a) {
    std::tuple<typename std::decay<P>::type...> args(std::forward<A>(a)...);
    cuemu_launch_fn(name, (const void *)fn, c.grid, c.block, c.smem, c.st, [fn, args]() { std::apply(fn, args); });
}

/* The call site identifies the barrier: threads of a block that wait at
 * different __syncthreads are reported (divergent barrier). */
#define CUEMU_STR2(x)   #x
#define CUEMU_STR(x)    CUEMU_STR2(x)
#define __syncthreads() cuemu_syncthreads(__FILE__ ":" CUEMU_STR(__LINE__))

template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type over 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = cuemu_shfl_xor_bits(mask, bits, lane_mask, width);
    memcpy(&v, &bits, sizeof v);
    return v;
}

static inline void __syncwarp(unsigned mask = 0xffffffffu) { cuemu_syncwarp(mask); }

/* Fibers switch only at barriers, so a read-modify-write is atomic. */
template <class T> static inline T atomicAdd(T *p, T v) {
    T old = *p;
    *p = old + v;
    return old;
}

/* ---- math built-ins missing from the host library ------------------------------ */
static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
#define __expf expf /* glibc declares its own __expf and __logf */
#define __logf logf
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); } /* one rounding, as on a GPU */
static inline float __fmul_rn(float a, float b) { return a * b; }
template <class A, class B> static inline typename std::common_type<A, B>::type min(A a, B b) { return a < b ? a : b; }
template <class A, class B> static inline typename std::common_type<A, B>::type max(A a, B b) { return a < b ? b : a; }

/* ---- WMMA (nvcuda::wmma, <mma.h>): warp-wide 16x16x16 tiles -------------------- *
 * A GPU spreads a fragment over the 32 lanes in an unspecified layout; here
 * every lane holds the whole tile (row-major in x[]), so element-wise code
 * over x[0 .. num_elements) means the same, and code that assumes a layout
 * cannot (it has none to assume).  Every call is a warp barrier, as the
 * *_sync calls require the whole warp; loads and stores check the pointer
 * (256-bit aligned) and ldm (a multiple of 16 bytes) as the hardware does. */
void cuemu_wmma_check(const void *p, unsigned ldm_bytes, const char *what);
/* Scratch of 256 floats for the calling warp's current WMMA call; *first is
 * true for the first lane to get it after the call's barrier. */
float *cuemu_wmma_scratch(bool *first);
namespace nvcuda {
namespace wmma {
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void> struct fragment {
    static constexpr int rows = std::is_same<Use, matrix_b>::value ? K : M;
    static constexpr int cols = std::is_same<Use, matrix_a>::value ? K : N;
    static constexpr int num_elements = rows * cols;
    T x[num_elements];
};

template <class U, int M, int N, int K, class T, class L, class V>
static inline void fill_fragment(fragment<U, M, N, K, T, L> &f, const V &v) {
    cuemu_syncwarp(0xffffffffu);
    for (int i = 0; i < f.num_elements; i++) f.x[i] = (T)v;
}

template <class F, class T> static inline void cuemu_wmma_load(F &f, const T *p, unsigned ldm, bool row) {
    cuemu_syncwarp(0xffffffffu);
    cuemu_wmma_check(p, ldm * (unsigned)sizeof(T), "load_matrix_sync");
    for (int r = 0; r < F::rows; r++)
        for (int c = 0; c < F::cols; c++) f.x[r * F::cols + c] = row ? p[(size_t)r * ldm + c] : p[(size_t)c * ldm + r];
    cuemu_syncwarp(0xffffffffu);
}
template <class U, int M, int N, int K, class T, class L>
static inline void load_matrix_sync(fragment<U, M, N, K, T, L> &f, const T *p, unsigned ldm) {
    cuemu_wmma_load(f, p, ldm, std::is_same<L, row_major>::value);
}
template <int M, int N, int K, class T>
static inline void load_matrix_sync(fragment<accumulator, M, N, K, T> &f, const T *p, unsigned ldm, layout_t l) {
    cuemu_wmma_load(f, p, ldm, l == mem_row_major);
}
template <int M, int N, int K, class T>
static inline void store_matrix_sync(T *p, const fragment<accumulator, M, N, K, T> &f, unsigned ldm, layout_t l) {
    cuemu_syncwarp(0xffffffffu);
    cuemu_wmma_check(p, ldm * (unsigned)sizeof(T), "store_matrix_sync");
    for (int r = 0; r < M; r++)
        for (int c = 0; c < N; c++) {
            T v = f.x[r * N + c];
            if (l == mem_row_major)
                p[(size_t)r * ldm + c] = v;
            else
                p[(size_t)c * ldm + r] = v;
        }
    cuemu_syncwarp(0xffffffffu);
}
// d = a b + c, products and sums in fp32.  The lanes of a warp hold the
// same fragments (the code is warp-uniform), so the first lane past the
// barrier computes the tile into the warp's scratch and the others copy
// it.  The operands are widened once (bf16 -> fp32 is exact).  As the
// hottest code of an emulated kernel it is not instrumented by the
// sanitizers (the loads and stores around it are).
__attribute__((no_sanitize("address", "undefined"), always_inline)) static inline float cuemu_widen(float x) {
    return x;
}
__attribute__((no_sanitize("address", "undefined"), always_inline)) static inline float cuemu_widen(__nv_bfloat16 x) {
    uint16_t b;
    memcpy(&b, &x, sizeof b);
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}
template <int M, int N, int K, class TA, class LA, class LB, class TC>
__attribute__((no_sanitize("address", "undefined"))) static inline void
mma_sync(fragment<accumulator, M, N, K, TC> &d, const fragment<matrix_a, M, N, K, TA, LA> &a,
         const fragment<matrix_b, M, N, K, TA, LB> &b, const fragment<accumulator, M, N, K, TC> &c) {
    static_assert(M * N <= 256, "tile over 256 elements");
    cuemu_syncwarp(0xffffffffu);
    bool first;
    float *out = cuemu_wmma_scratch(&first);
    if (first) {
        float fa[M * K], fb[K * N];
        for (int i = 0; i < M * K; i++) fa[i] = cuemu_widen(a.x[i]);
        for (int i = 0; i < K * N; i++) fb[i] = cuemu_widen(b.x[i]);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float acc = cuemu_widen(c.x[i * N + j]);
                for (int k = 0; k < K; k++) acc += fa[i * K + k] * fb[k * N + j];
                out[i * N + j] = acc;
            }
    }
    for (int i = 0; i < M * N; i++) d.x[i] = (TC)out[i];
    cuemu_syncwarp(0xffffffffu);
}
} // namespace wmma
} // namespace nvcuda

/* The runtime API takes kernels as `const void *`; nvcc's cuda_runtime.h
 * adds these overloads for function pointers. */
template <class T> static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, T *fn) {
    return cudaFuncGetAttributes(a, (const void *)fn);
}
template <class T> static inline cudaError_t cudaFuncSetAttribute(T *fn, cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void *)fn, attr, value);
}

#endif
