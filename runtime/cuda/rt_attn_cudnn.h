/* rt_attn_cudnn.h — causal GQA flash attention through cuDNN's backend
 * graph API (rt_attn_cudnn.c), with no runtime context: used by the
 * runtime's attention calls (rt_attn_cudnn_rt.c), the GPU tests and the
 * attention benchmark.  Only built with cuDNN (BASP_HAVE_CUDNN).
 *
 * Semantics are kcu_attention_fwd/_bwd's (kcu.h): bf16 q, o, dq [b,S,H,Dh]
 * and k, v, dk, dv [b,S,Hkv,Dh], contiguous (or S rows of [b,ld,..]: the
 * shape's ld); scale 1/sqrt(Dh); causal (or not: the shape's full); q
 * head h reads kv head h / (H/Hkv); dq, dk, dv are overwritten.  The
 * forward also writes the softmax statistics the backward consumes: fp32
 * stats [b,H,S] (row max + log of the row sum of exp, natural log, of the
 * scaled scores), head-major, unlike the activations.
 *
 * Each function enqueues on the stream given to cuda_cudnn_create and
 * returns 0, or -1 with the reason in cuda_cudnn_error (cuDNN's status string
 * and its last error message). */
#ifndef BASP_RT_ATTN_CUDNN_H
#define BASP_RT_ATTN_CUDNN_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "kcu.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_cudnn cuda_cudnn;

/* b sequences of S queries and S keys, H q and Hkv kv heads of Dh.  Two
 * fields serve ring attention's sub-blocks (rt_ring_split.c), where q, k, v
 * and o are S rows inside longer [b, ld, heads, Dh] buffers; both 0 (a
 * shape's other users leave them so) mean the plain causal attention:
 *   ld    rows per sequence of the q/k/v/o (dq/dk/dv/dout) storage, 0: S;
 *   full  1: no causal mask (every key before every query), 0: causal,
 *         key j visible to query i iff j <= i. */
typedef struct cuda_cudnn_shape {
    int64_t b, S, H, Hkv, Dh;
    int64_t ld, full;
} cuda_cudnn_shape;

/* Why the loaded cuDNN must not run these graphs (for shape s, or at all
 * with s NULL), as cuDNN's own frontend refuses its releases with known
 * faults; NULL when nothing is known against it. */
const char *cuda_cudnn_known_fault(const cuda_cudnn_shape *s);
/* A cuDNN handle on stream st and an empty plan cache; NULL (why filled)
 * when cuDNN cannot be used here (no library, no device, version < 9, or
 * 9.10.0 / 9.10.1, whose bf16 attention forward has known bugs). */
cuda_cudnn *cuda_cudnn_create(cudaStream_t st, char *why, size_t nwhy);
void cuda_cudnn_destroy(cuda_cudnn *c);
/* The loaded library's version, e.g. 91900 for 9.19.0 (0: not loadable). */
size_t cuda_cudnn_version(void);
/* Builds the shape's two graphs up to their operations, every tensor and
 * operation descriptor finalized, with no handle and no device: cuDNN
 * checks each attribute's name, type and count and each operation's
 * operands (matmul shapes, broadcasts, reductions) on the host.  The
 * operation graph, the engines and execution need a GPU.  0 (why: the
 * operation counts), or -1 with the reason in why. */
int cuda_cudnn_check_ops(const cuda_cudnn_shape *s, char *why, size_t nwhy);
/* Builds the shape's forward and backward execution plans, once per shape
 * (later calls return the cached result, failure included). */
int cuda_cudnn_prepare(cuda_cudnn *c, const cuda_cudnn_shape *s);
/* Device workspace bytes the shape's forward and backward need (after a
 * successful cuda_cudnn_prepare; 0 before).  Never above cuda_cudnn_ws_bound:
 * an engine configuration needing more is passed over. */
size_t cuda_cudnn_ws_bytes(const cuda_cudnn *c, const cuda_cudnn_shape *s);
/* The most workspace a shape may use: the backward's fp32 dQ accumulator
 * [b,H,S,Dh] plus an allowance for the engine's own workspace of another
 * such accumulator, two fp32 row vectors and 1 MiB.  ir/ir_mem.c
 * (cw_cudnn_ws) plans exactly this; keep the two in step. */
int64_t cuda_cudnn_ws_bound(int64_t b, int64_t S, int64_t H, int64_t Dh);
/* o, stats [b,H,S] fp32 (packed, whatever ld) from q, k, v; ws:
 * cuda_cudnn_ws_bytes bytes. */
int cuda_cudnn_fwd(cuda_cudnn *c, const cuda_cudnn_shape *s, kcu_bf16 *o, float *stats, const kcu_bf16 *q,
                   const kcu_bf16 *k, const kcu_bf16 *v, void *ws);
/* dq, dk, dv from dout and the forward's q, k, v, o and stats. */
int cuda_cudnn_bwd(cuda_cudnn *c, const cuda_cudnn_shape *s, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv,
                   const kcu_bf16 *dout, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o,
                   const float *stats, void *ws);
/* Why the last call failed (empty when none did). */
const char *cuda_cudnn_error(const cuda_cudnn *c);

#ifdef __cplusplus
}
#endif

#endif
