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
#define blockIdx cuemu_block_idx
#define blockDim cuemu_block_dim
#define gridDim cuemu_grid_dim
#define warpSize 32

/* ---- scheduler interface (cuemu_sched.cpp) ------------------------------------ */
/* Checks the launch now (launch errors are synchronous), then queues the
 * grid on st. */
void cuemu_launch_fn(const char *name, const void *fn, dim3 grid, dim3 block, size_t smem, cudaStream_t st,
                     std::function<void()> body);
void cuemu_syncthreads(const char *site);
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
#define CUEMU_STR2(x) #x
#define CUEMU_STR(x) CUEMU_STR2(x)
#define __syncthreads() cuemu_syncthreads(__FILE__ ":" CUEMU_STR(__LINE__))

template <class T> static inline T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "shuffle of a type over 8 bytes");
    uint64_t bits = 0;
    memcpy(&bits, &v, sizeof v);
    bits = cuemu_shfl_xor_bits(mask, bits, lane_mask, width);
    memcpy(&v, &bits, sizeof v);
    return v;
}

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
template <class A, class B> static inline typename std::common_type<A, B>::type min(A a, B b) {
    return a < b ? a : b;
}
template <class A, class B> static inline typename std::common_type<A, B>::type max(A a, B b) {
    return a < b ? b : a;
}

/* The runtime API takes kernels as `const void *`; nvcc's cuda_runtime.h
 * adds these overloads for function pointers. */
template <class T> static inline cudaError_t cudaFuncGetAttributes(cudaFuncAttributes *a, T *fn) {
    return cudaFuncGetAttributes(a, (const void *)fn);
}
template <class T> static inline cudaError_t cudaFuncSetAttribute(T *fn, cudaFuncAttribute attr, int value) {
    return cudaFuncSetAttribute((const void *)fn, attr, value);
}

#endif
