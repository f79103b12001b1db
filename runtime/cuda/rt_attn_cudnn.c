/* rt_attn_cudnn.c — causal GQA flash attention, forward and backward, as
 * cuDNN backend-API operation graphs (rt_attn_cudnn.h).
 *
 * cuDNN has no "attention" call that every 9.x release accepts with a
 * causal mask; what every 9.x release fuses into its flash-attention
 * kernels is a graph of matmul, pointwise, reduction and reshape
 * operations in a fixed shape, the one cuDNN's own frontend emits for its
 * SDPA node.  This file builds those graphs through the C backend API
 * (cudnnBackendCreateDescriptor / SetAttribute / Finalize).  The heuristics
 * (mode A, then the fallback list) rank the engine configurations; the
 * first one that finalizes into an execution plan within the workspace
 * bound is kept.  A graph that no engine accepts fails cuda_cudnn_prepare,
 * and the caller keeps its own kernels.
 *
 * Tensors use cuDNN's [b, h, s, d] dimension order with the strides of our
 * [b, s, h, d] storage, so nothing is transposed in memory.  K (and V in the
 * backward) enter as their transposes [b, hkv, d, s]: a matmul computes
 * A [.., m, k] x B [.., k, n], and Q Kᵀ needs Kᵀ; GQA is expressed by the
 * kv tensors' head dim being Hkv where the q side has H (cuDNN broadcasts
 * each kv head over its group), and in the backward by reducing dK, dV
 * from H heads to Hkv. */
#include <cudnn.h>
#include <float.h>
#include <math.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_attn_cudnn.h"

/* ---- descriptors: every call checked, the first failure remembered ------------ */
enum { DNN_MAX_DESC = 128, DNN_MAX_OPS = 40, DNN_MAX_CFG = 32, DNN_ERR = 768 };

/* One graph under construction, and after cuda_cudnn_prepare its plan.  The
 * descriptors stay alive with the plan (a plan refers to its graph). */
typedef struct cuda_dnn_graph {
    cudnnBackendDescriptor_t desc[DNN_MAX_DESC];
    int ndesc;
    cudnnBackendDescriptor_t ops[DNN_MAX_OPS];
    int nops;
    int64_t next_uid;                   /* virtual tensors' ids */
    cudnnBackendDescriptor_t plan, cfg; /* the chosen plan and its engine configuration */
    int64_t plan_ws;
    bool failed;
    char err[DNN_ERR];
} cuda_dnn_graph;

/* Fixed ids of the tensors the variant pack names. */
enum {
    UID_Q = 1,
    UID_K,
    UID_V,
    UID_O,
    UID_STATS,
    UID_SCALE,
    UID_NEG,
    UID_ONE,
    UID_DO,
    UID_DQ,
    UID_DK,
    UID_DV,
    UID_DQ_ACC,
    UID_FIRST_VIRTUAL = 100
};

static void cuda_dnn_fail(cuda_dnn_graph *g, cudnnStatus_t st, const char *fmt, ...) {
    if (g->failed) return;
    g->failed = true;
    char what[256], last[384] = "";
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(what, sizeof what, fmt, ap);
    va_end(ap);
    cudnnGetLastErrorString(last, sizeof last);
    snprintf(g->err, sizeof g->err, "%s: %s%s%s", what, cudnnGetErrorString(st), last[0] ? ": " : "", last);
}

static cudnnBackendDescriptor_t cuda_dnn_new(cuda_dnn_graph *g, cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = NULL;
    if (g->failed) return NULL;
    if (g->ndesc == DNN_MAX_DESC) {
        snprintf(g->err, sizeof g->err, "too many cuDNN descriptors in one graph");
        g->failed = true;
        return NULL;
    }
    cudnnStatus_t st = cudnnBackendCreateDescriptor(type, &d);
    if (st != CUDNN_STATUS_SUCCESS) {
        cuda_dnn_fail(g, st, "cudnnBackendCreateDescriptor(type %d)", (int)type);
        return NULL;
    }
    g->desc[g->ndesc++] = d;
    return d;
}

static void cuda_dnn_set(cuda_dnn_graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                         cudnnBackendAttributeType_t type, int64_t n, const void *val) {
    if (g->failed) return;
    cudnnStatus_t st = cudnnBackendSetAttribute(d, name, type, n, val);
    if (st != CUDNN_STATUS_SUCCESS) cuda_dnn_fail(g, st, "cudnnBackendSetAttribute(attribute %d)", (int)name);
}

static void cuda_dnn_finalize(cuda_dnn_graph *g, cudnnBackendDescriptor_t d, const char *what) {
    if (g->failed) return;
    cudnnStatus_t st = cudnnBackendFinalize(d);
    if (st != CUDNN_STATUS_SUCCESS) cuda_dnn_fail(g, st, "finalizing %s", what);
}

static void cuda_dnn_free(cuda_dnn_graph *g) {
    if (g->plan) cudnnBackendDestroyDescriptor(g->plan);
    if (g->cfg) cudnnBackendDestroyDescriptor(g->cfg);
    for (int i = g->ndesc - 1; i >= 0; i--) cudnnBackendDestroyDescriptor(g->desc[i]);
    g->ndesc = g->nops = 0;
    g->plan = g->cfg = NULL;
}

/* ---- tensors ------------------------------------------------------------------------- */
typedef struct cuda_dnn_dims {
    int64_t d[4], s[4];
} cuda_dnn_dims;

enum { T_VIRTUAL = 1, T_BY_VALUE = 2, T_F16X16 = 4 };

/* A 4-d tensor; virtual ones get the next free id (uid 0). */
static cudnnBackendDescriptor_t cuda_dnn_tensor(cuda_dnn_graph *g, int64_t uid, cudnnDataType_t dt, cuda_dnn_dims x,
                                                int flags) {
    cudnnBackendDescriptor_t t = cuda_dnn_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    int64_t align = 16;
    bool virt = flags & T_VIRTUAL, byval = flags & T_BY_VALUE;
    if (uid == 0) uid = g->next_uid++;
    cuda_dnn_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    cuda_dnn_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, x.d);
    cuda_dnn_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, x.s);
    cuda_dnn_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    cuda_dnn_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    cuda_dnn_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    if (byval) cuda_dnn_set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &byval);
    if (flags & T_F16X16) {
        cudnnBackendTensorReordering_t r = CUDNN_TENSOR_REORDERING_F16x16;
        cuda_dnn_set(g, t, CUDNN_ATTR_TENSOR_REORDERING_MODE, CUDNN_TYPE_TENSOR_REORDERING_MODE, 1, &r);
    }
    cuda_dnn_finalize(g, t, "a tensor descriptor");
    return t;
}

static cudnnBackendDescriptor_t cuda_dnn_virt(cuda_dnn_graph *g, cudnnDataType_t dt, cuda_dnn_dims x) {
    return cuda_dnn_tensor(g, 0, dt, x, T_VIRTUAL);
}

/* A host fp32 scalar passed by value in the variant pack. */
static cudnnBackendDescriptor_t cuda_dnn_scalar(cuda_dnn_graph *g, int64_t uid) {
    cuda_dnn_dims one = {{1, 1, 1, 1}, {1, 1, 1, 1}};
    return cuda_dnn_tensor(g, uid, CUDNN_DATA_FLOAT, one, T_BY_VALUE);
}

/* ---- operations ---------------------------------------------------------------------- */
static void cuda_dnn_add_op(cuda_dnn_graph *g, cudnnBackendDescriptor_t op, const char *what) {
    cuda_dnn_finalize(g, op, what);
    if (g->failed) return;
    if (g->nops == DNN_MAX_OPS) {
        snprintf(g->err, sizeof g->err, "too many operations in one graph");
        g->failed = true;
        return;
    }
    g->ops[g->nops++] = op;
}

/* y = mode(x[, b[, t]]); axis >= 0 only for GEN_INDEX. */
static void cuda_dnn_pw(cuda_dnn_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec, cudnnBackendDescriptor_t x,
                        cudnnBackendDescriptor_t b, cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                        int64_t axis) {
    cudnnBackendDescriptor_t pw = cuda_dnn_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    cuda_dnn_set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    cuda_dnn_set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) cuda_dnn_set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    cuda_dnn_finalize(g, pw, "a pointwise descriptor");
    cudnnBackendDescriptor_t op = cuda_dnn_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    cuda_dnn_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &pw);
    cuda_dnn_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    if (b) cuda_dnn_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    if (t) cuda_dnn_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &t);
    cuda_dnn_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    cuda_dnn_add_op(g, op, "a pointwise operation");
}

/* Shorthand: an fp32 pointwise op into a new fp32 virtual tensor of dims x. */
static cudnnBackendDescriptor_t cuda_dnn_pwf(cuda_dnn_graph *g, cudnnPointwiseMode_t mode, cudnnBackendDescriptor_t a,
                                             cudnnBackendDescriptor_t b, cuda_dnn_dims x) {
    cudnnBackendDescriptor_t y = cuda_dnn_virt(g, CUDNN_DATA_FLOAT, x);
    cuda_dnn_pw(g, mode, CUDNN_DATA_FLOAT, a, b, NULL, y, -1);
    return y;
}

/* c = a @ b, fp32 accumulation. */
static void cuda_dnn_matmul(cuda_dnn_graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                            cudnnBackendDescriptor_t c) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t mm = cuda_dnn_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cuda_dnn_set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    cuda_dnn_finalize(g, mm, "a matmul descriptor");
    cudnnBackendDescriptor_t op = cuda_dnn_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    cuda_dnn_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &a);
    cuda_dnn_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &b);
    cuda_dnn_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &c);
    cuda_dnn_set(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &mm);
    cuda_dnn_add_op(g, op, "a matmul operation");
}

/* y = reduce(x) over the dims where y has extent 1 (or fewer heads). */
static void cuda_dnn_reduce(cuda_dnn_graph *g, cudnnReduceTensorOp_t how, cudnnBackendDescriptor_t x,
                            cudnnBackendDescriptor_t y) {
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t rd = cuda_dnn_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cuda_dnn_set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &how);
    cuda_dnn_set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    cuda_dnn_finalize(g, rd, "a reduction descriptor");
    cudnnBackendDescriptor_t op = cuda_dnn_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    cuda_dnn_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    cuda_dnn_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    cuda_dnn_set(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &rd);
    cuda_dnn_add_op(g, op, "a reduction operation");
}

/* y: the same elements as x seen through other dims/strides (a transpose). */
static void cuda_dnn_reshape(cuda_dnn_graph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = cuda_dnn_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    cuda_dnn_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &x);
    cuda_dnn_set(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &y);
    cuda_dnn_add_op(g, op, "a reshape operation");
}

/* ---- the attention graphs --------------------------------------------------------------- */
/* The layouts, in cuDNN's [b, h, s, d] order over our [b, s, h, d] storage. */
typedef struct cuda_dnn_layout {
    cuda_dnn_dims q;     /* q, o, dq, dout: [b,H,S,Dh] */
    cuda_dnn_dims kv;    /* k, v, dk, dv: [b,Hkv,S,Dh] */
    cuda_dnn_dims kvt;   /* k, v as their transposes [b,Hkv,Dh,S] */
    cuda_dnn_dims rows;  /* stats and row vectors [b,H,S,1] */
    cuda_dnn_dims sc;    /* scores [b,H,S,S], row-major */
    cuda_dnn_dims sct;   /* scores transposed [b,H,S(k),S(q)] over the same elements */
    cuda_dnn_dims qfull; /* a packed [b,H,S,Dh] intermediate (dQ accumulator, per-q-head dK, dV) */
} cuda_dnn_layout;

/* The rows of q, k, v and o storage per sequence (the shape's ld). */
static int64_t cuda_dnn_ld(const cuda_cudnn_shape *s) { return s->ld > 0 ? s->ld : s->S; }

static cuda_dnn_layout cuda_dnn_layout_of(const cuda_cudnn_shape *s) {
    int64_t b = s->b, S = s->S, H = s->H, G = s->Hkv, D = s->Dh, ld = cuda_dnn_ld(s);
    cuda_dnn_layout L = {
        .q = {{b, H, S, D}, {ld * H * D, D, H * D, 1}},
        .kv = {{b, G, S, D}, {ld * G * D, D, G * D, 1}},
        .kvt = {{b, G, D, S}, {ld * G * D, D, 1, G * D}},
        .rows = {{b, H, S, 1}, {H * S, S, 1, 1}},
        .sc = {{b, H, S, S}, {H * S * S, S * S, S, 1}},
        .sct = {{b, H, S, S}, {H * S * S, S * S, 1, S}},
        .qfull = {{b, H, S, D}, {H * S * D, S * D, D, 1}},
    };
    return L;
}

/* The causal mask on scores x (row = query index >= col = key index, else
 * the lowest float, so exp gives exactly 0): returns the masked scores. */
static cudnnBackendDescriptor_t cuda_dnn_causal(cuda_dnn_graph *g, const cuda_dnn_layout *L, cudnnBackendDescriptor_t x,
                                                cudnnBackendDescriptor_t neg) {
    cudnnBackendDescriptor_t row = cuda_dnn_virt(g, CUDNN_DATA_INT32, L->sc);
    cudnnBackendDescriptor_t col = cuda_dnn_virt(g, CUDNN_DATA_INT32, L->sc);
    cuda_dnn_pw(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, NULL, NULL, row, 2);
    cuda_dnn_pw(g, CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, x, NULL, NULL, col, 3);
    cudnnBackendDescriptor_t keep = cuda_dnn_virt(g, CUDNN_DATA_BOOLEAN, L->sc);
    cuda_dnn_pw(g, CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, col, NULL, keep, -1);
    cudnnBackendDescriptor_t y = cuda_dnn_virt(g, CUDNN_DATA_FLOAT, L->sc);
    cuda_dnn_pw(g, CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, x, neg, keep, y, -1);
    return y;
}

/* Scaled scores (q kᵀ) * scale from q and kᵀ, masked unless neg is NULL
 * (a full block: no mask, as the frontend's SDPA without causal). */
static cudnnBackendDescriptor_t cuda_dnn_scores(cuda_dnn_graph *g, const cuda_dnn_layout *L, cudnnBackendDescriptor_t q,
                                                cudnnBackendDescriptor_t kt, cudnnBackendDescriptor_t scale,
                                                cudnnBackendDescriptor_t neg) {
    cudnnBackendDescriptor_t s = cuda_dnn_virt(g, CUDNN_DATA_FLOAT, L->sc);
    cuda_dnn_matmul(g, q, kt, s);
    s = cuda_dnn_pwf(g, CUDNN_POINTWISE_MUL, s, scale, L->sc);
    return neg ? cuda_dnn_causal(g, L, s, neg) : s;
}

/* The mask's fill value, a graph input only when the shape is causal. */
static cudnnBackendDescriptor_t cuda_dnn_neg(cuda_dnn_graph *g, const cuda_cudnn_shape *sh) {
    return sh->full ? NULL : cuda_dnn_scalar(g, UID_NEG);
}

/* Forward: S = (Q Kᵀ) scale, masked; M = rowmax S; E = exp(S - M);
 * Z = rowsum E; stats = M + log Z; P = E / Z (bf16); O = P V. */
static void cuda_dnn_build_fwd(cuda_dnn_graph *g, const cuda_cudnn_shape *sh) {
    cuda_dnn_layout L = cuda_dnn_layout_of(sh);
    cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t q = cuda_dnn_tensor(g, UID_Q, bf, L.q, 0), kt = cuda_dnn_tensor(g, UID_K, bf, L.kvt, 0);
    cudnnBackendDescriptor_t v = cuda_dnn_tensor(g, UID_V, bf, L.kv, 0), o = cuda_dnn_tensor(g, UID_O, bf, L.q, 0);
    cudnnBackendDescriptor_t stats = cuda_dnn_tensor(g, UID_STATS, f, L.rows, 0);
    cudnnBackendDescriptor_t scale = cuda_dnn_scalar(g, UID_SCALE), neg = cuda_dnn_neg(g, sh);
    cudnnBackendDescriptor_t s = cuda_dnn_scores(g, &L, q, kt, scale, neg);
    cudnnBackendDescriptor_t mx = cuda_dnn_virt(g, f, L.rows), z = cuda_dnn_virt(g, f, L.rows);
    cuda_dnn_reduce(g, CUDNN_REDUCE_TENSOR_MAX, s, mx);
    cudnnBackendDescriptor_t e = cuda_dnn_pwf(g, CUDNN_POINTWISE_SUB, s, mx, L.sc);
    e = cuda_dnn_pwf(g, CUDNN_POINTWISE_EXP, e, NULL, L.sc);
    cuda_dnn_reduce(g, CUDNN_REDUCE_TENSOR_ADD, e, z);
    cudnnBackendDescriptor_t lz = cuda_dnn_pwf(g, CUDNN_POINTWISE_LOG, z, NULL, L.rows);
    cuda_dnn_pw(g, CUDNN_POINTWISE_ADD, f, mx, lz, NULL, stats, -1);
    cudnnBackendDescriptor_t p = cuda_dnn_virt(g, bf, L.sc); /* the second matmul takes P in the io type */
    cuda_dnn_pw(g, CUDNN_POINTWISE_DIV, f, e, z, NULL, p, -1);
    cuda_dnn_matmul(g, p, v, o);
}

/* dX for X of kv layout from the [b,H,S,Dh] product A B: directly when
 * H == Hkv, else through a per-q-head bf16 intermediate summed over each
 * kv head's group of q heads. */
static void cuda_dnn_kv_grad(cuda_dnn_graph *g, const cuda_dnn_layout *L, const cuda_cudnn_shape *sh,
                             cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b, int64_t uid) {
    cudnnBackendDescriptor_t out = cuda_dnn_tensor(g, uid, CUDNN_DATA_BFLOAT16, L->kv, 0);
    if (sh->H == sh->Hkv) {
        cuda_dnn_matmul(g, a, b, out);
        return;
    }
    cudnnBackendDescriptor_t full = cuda_dnn_virt(g, CUDNN_DATA_BFLOAT16, L->qfull);
    cuda_dnn_matmul(g, a, b, full);
    cuda_dnn_reduce(g, CUDNN_REDUCE_TENSOR_ADD, full, out);
}

/* Backward (flash-attention 2): D = rowsum(dO o O); P = exp(S - stats);
 * dV = Pᵀ dO; dP = dO Vᵀ; dS = P (dP - D) scale; dK = dSᵀ Q; dQ = dS K,
 * accumulated in fp32 (the zeroed accumulator in the workspace) and then
 * converted.  The multiplications by 1 stand where the frontend's graph
 * has its dropout factors: the engines match that graph. */
static void cuda_dnn_build_bwd(cuda_dnn_graph *g, const cuda_cudnn_shape *sh) {
    cuda_dnn_layout L = cuda_dnn_layout_of(sh);
    cudnnDataType_t bf = CUDNN_DATA_BFLOAT16, f = CUDNN_DATA_FLOAT;
    cudnnBackendDescriptor_t q = cuda_dnn_tensor(g, UID_Q, bf, L.q, 0), kt = cuda_dnn_tensor(g, UID_K, bf, L.kvt, 0);
    cudnnBackendDescriptor_t vt = cuda_dnn_tensor(g, UID_V, bf, L.kvt, 0), o = cuda_dnn_tensor(g, UID_O, bf, L.q, 0);
    cudnnBackendDescriptor_t dout = cuda_dnn_tensor(g, UID_DO, bf, L.q, 0), dq = cuda_dnn_tensor(g, UID_DQ, bf, L.q, 0);
    cudnnBackendDescriptor_t stats = cuda_dnn_tensor(g, UID_STATS, f, L.rows, 0);
    cudnnBackendDescriptor_t scale = cuda_dnn_scalar(g, UID_SCALE), neg = cuda_dnn_neg(g, sh);
    cudnnBackendDescriptor_t one = cuda_dnn_scalar(g, UID_ONE);
    cudnnBackendDescriptor_t dqacc = cuda_dnn_tensor(g, UID_DQ_ACC, f, L.qfull, T_F16X16);
    /* D = rowsum(dO * O) */
    cudnnBackendDescriptor_t d = cuda_dnn_pwf(g, CUDNN_POINTWISE_MUL, dout, o, L.qfull);
    cudnnBackendDescriptor_t dsum = cuda_dnn_virt(g, f, L.rows);
    cuda_dnn_reduce(g, CUDNN_REDUCE_TENSOR_ADD, d, dsum);
    dsum = cuda_dnn_pwf(g, CUDNN_POINTWISE_MUL, dsum, one, L.rows);
    /* P = exp(S - stats); dV = Pᵀ dO */
    cudnnBackendDescriptor_t s = cuda_dnn_scores(g, &L, q, kt, scale, neg);
    cudnnBackendDescriptor_t p = cuda_dnn_pwf(g, CUDNN_POINTWISE_SUB, s, stats, L.sc);
    p = cuda_dnn_pwf(g, CUDNN_POINTWISE_EXP, p, NULL, L.sc);
    cudnnBackendDescriptor_t pt = cuda_dnn_virt(g, bf, L.sct);
    cuda_dnn_reshape(g, p, pt);
    cuda_dnn_kv_grad(g, &L, sh, pt, dout, UID_DV);
    /* dS = P (dO Vᵀ - D) scale; dK = dSᵀ Q */
    cudnnBackendDescriptor_t dp = cuda_dnn_virt(g, f, L.sc);
    cuda_dnn_matmul(g, dout, vt, dp);
    dp = cuda_dnn_pwf(g, CUDNN_POINTWISE_MUL, dp, one, L.sc);
    dp = cuda_dnn_pwf(g, CUDNN_POINTWISE_SUB, dp, dsum, L.sc);
    dp = cuda_dnn_pwf(g, CUDNN_POINTWISE_MUL, dp, p, L.sc);
    cudnnBackendDescriptor_t ds = cuda_dnn_pwf(g, CUDNN_POINTWISE_MUL, dp, scale, L.sc);
    cudnnBackendDescriptor_t dst = cuda_dnn_virt(g, bf, L.sct);
    cuda_dnn_reshape(g, ds, dst);
    cuda_dnn_kv_grad(g, &L, sh, dst, q, UID_DK);
    /* dQ = dS K (K seen again in its own [b,Hkv,S,Dh] layout), via fp32 */
    cudnnBackendDescriptor_t k = cuda_dnn_virt(g, f, L.kv);
    cuda_dnn_reshape(g, kt, k);
    cuda_dnn_matmul(g, ds, k, dqacc);
    cuda_dnn_pw(g, CUDNN_POINTWISE_IDENTITY, f, dqacc, NULL, NULL, dq, -1);
}

/* ---- plans: the operation graph, the heuristics' ranking, the first plan that fits ---- */
/* The execution plan of one engine configuration, or NULL (its reason in g). */
static cudnnBackendDescriptor_t cuda_dnn_try_cfg(cuda_dnn_graph *g, cudnnHandle_t h, cudnnBackendDescriptor_t cfg,
                                                 int64_t bound) {
    cudnnBackendDescriptor_t plan = NULL;
    cudnnStatus_t st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, &plan);
    if (st != CUDNN_STATUS_SUCCESS) return NULL;
    int64_t ws = -1, n = 0;
    st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1,
                                      &cfg);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(plan);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendGetAttribute(plan, CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE, CUDNN_TYPE_INT64, 1, &n, &ws);
    if (st == CUDNN_STATUS_SUCCESS && n == 1 && ws >= 0 && ws <= bound) {
        g->plan_ws = ws;
        return plan;
    }
    if (st != CUDNN_STATUS_SUCCESS) {
        char last[384] = "";
        cudnnGetLastErrorString(last, sizeof last);
        snprintf(g->err, sizeof g->err, "no engine configuration gave an execution plan (last: %s%s%s)",
                 cudnnGetErrorString(st), last[0] ? ": " : "", last);
    } else {
        snprintf(g->err, sizeof g->err, "the only execution plans need %lld bytes of workspace, over the %lld allowed",
                 (long long)ws, (long long)bound);
    }
    cudnnBackendDestroyDescriptor(plan);
    return NULL;
}

/* Ranks the graph's engine configurations with heuristics `mode` and keeps
 * the first plan that finalizes within `bound` bytes of workspace. */
static bool cuda_dnn_plan_with(cuda_dnn_graph *g, cudnnHandle_t h, cudnnBackendDescriptor_t opg,
                               cudnnBackendHeurMode_t mode, int64_t bound) {
    cudnnBackendDescriptor_t heur = NULL, cfg[DNN_MAX_CFG];
    int64_t n = 0, got = 0;
    if (cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, &heur) != CUDNN_STATUS_SUCCESS) return false;
    cudnnStatus_t st =
        cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &opg);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendSetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, 1, &mode);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnBackendFinalize(heur);
    if (st == CUDNN_STATUS_SUCCESS)
        st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &n, NULL);
    if (n > DNN_MAX_CFG) n = DNN_MAX_CFG;
    int made = 0;
    while (st == CUDNN_STATUS_SUCCESS && made < n) {
        st = cudnnBackendCreateDescriptor(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, &cfg[made]);
        if (st == CUDNN_STATUS_SUCCESS) made++;
    }
    if (st == CUDNN_STATUS_SUCCESS && n > 0)
        st = cudnnBackendGetAttribute(heur, CUDNN_ATTR_ENGINEHEUR_RESULTS, CUDNN_TYPE_BACKEND_DESCRIPTOR, n, &got, cfg);
    if (st != CUDNN_STATUS_SUCCESS) {
        g->failed = false;
        cuda_dnn_fail(g, st, "the engine heuristics (mode %d)", (int)mode);
        got = 0;
    } else if (got == 0) {
        snprintf(g->err, sizeof g->err, "the heuristics (mode %d) found no engine for the graph", (int)mode);
    }
    /* The plan keeps its configuration: the chosen one lives as long as the plan. */
    for (int64_t i = 0; i < got && i < made && !g->plan; i++) {
        g->plan = cuda_dnn_try_cfg(g, h, cfg[i], bound);
        if (g->plan) g->cfg = cfg[i], cfg[i] = NULL;
    }
    for (int i = 0; i < made; i++)
        if (cfg[i]) cudnnBackendDestroyDescriptor(cfg[i]);
    cudnnBackendDestroyDescriptor(heur);
    return g->plan != NULL;
}

/* The graph's operations as one finalized operation graph, then a plan. */
static bool cuda_dnn_plan(cuda_dnn_graph *g, cudnnHandle_t h, int64_t bound) {
    cudnnBackendDescriptor_t opg = cuda_dnn_new(g, CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR);
    cuda_dnn_set(g, opg, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR, g->nops, g->ops);
    cuda_dnn_set(g, opg, CUDNN_ATTR_OPERATIONGRAPH_HANDLE, CUDNN_TYPE_HANDLE, 1, &h);
    cuda_dnn_finalize(g, opg, "the operation graph");
    if (g->failed) return false;
    char first[DNN_ERR];
    bool ok = cuda_dnn_plan_with(g, h, opg, CUDNN_HEUR_MODE_A, bound);
    snprintf(first, sizeof first, "%s", g->err);
    if (!ok) ok = cuda_dnn_plan_with(g, h, opg, CUDNN_HEUR_MODE_FALLBACK, bound);
    if (ok) {
        g->failed = false;
        g->err[0] = '\0';
        return true;
    }
    snprintf(g->err, sizeof g->err, "%s", first); /* mode A's reason is the informative one */
    g->failed = true;
    return false;
}

/* ---- the context: a handle and the plans of each shape seen ------------------------------ */
typedef struct cuda_dnn_entry {
    cuda_cudnn_shape s;
    bool ok;
    cuda_dnn_graph fwd, bwd;
    size_t ws;     /* max of the forward's and the backward's needs */
    size_t dq_acc; /* bytes of the backward's fp32 dQ accumulator, at the start of ws */
    char err[DNN_ERR + 32];
} cuda_dnn_entry;

struct cuda_cudnn {
    cudnnHandle_t h;
    cudaStream_t st;
    cuda_dnn_entry **e;
    int ne, cap;
    /* The by-value scalars, read from host memory when a plan executes.
     * Their tensors declare 16-byte alignment like every other tensor of
     * the graphs, so each scalar gets a 16-byte aligned slot. */
    _Alignas(16) float scale;
    _Alignas(16) float neg;
    _Alignas(16) float one;
    char err[DNN_ERR + 32];
};

size_t cuda_cudnn_version(void) { return cudnnGetVersion(); }

const char *cuda_cudnn_known_fault(const cuda_cudnn_shape *s) {
    size_t v = cudnnGetVersion();
    if (v < 90000) return "the fused attention graphs need cuDNN 9.0 or newer";
    /* cuDNN's own frontend refuses fp16/bf16 SDPA forward on these two
     * releases for known bugs (sdpa_support_surface.h); so do we. */
    if (v == 91000 || v == 91001) return "this cuDNN's fused attention forward has known bugs (use 9.10.2 or newer)";
    /* Up to 9.15.0 the fused backward can produce NaN when S is not a
     * multiple of 128 and no padding mask is given; cuDNN's frontend adds a
     * full-length padding mask there.  These graphs have none: such shapes
     * stay on the basp kernels with those releases. */
    if (s && s->S % 128 != 0 && v <= 91500)
        return "this cuDNN's fused backward is unreliable for S not a multiple of 128 (fixed in 9.15.1)";
    return NULL;
}

cuda_cudnn *cuda_cudnn_create(cudaStream_t st, char *why, size_t nwhy) {
    const char *fault = cuda_cudnn_known_fault(NULL);
    if (fault) {
        snprintf(why, nwhy, "cuDNN %zu is loaded: %s", cudnnGetVersion(), fault);
        return NULL;
    }
    cudnnHandle_t h = NULL;
    cudnnStatus_t s = cudnnCreate(&h);
    if (s == CUDNN_STATUS_SUCCESS) s = cudnnSetStream(h, st);
    if (s != CUDNN_STATUS_SUCCESS) {
        char last[384] = "";
        cudnnGetLastErrorString(last, sizeof last);
        snprintf(why, nwhy, "cudnnCreate/cudnnSetStream: %s%s%s", cudnnGetErrorString(s), last[0] ? ": " : "", last);
        if (h) cudnnDestroy(h);
        return NULL;
    }
    cuda_cudnn *c = calloc(1, sizeof *c);
    if (!c) {
        cudnnDestroy(h);
        snprintf(why, nwhy, "out of host memory");
        return NULL;
    }
    c->h = h, c->st = st;
    return c;
}

void cuda_cudnn_destroy(cuda_cudnn *c) {
    if (!c) return;
    for (int i = 0; i < c->ne; i++) {
        cuda_dnn_free(&c->e[i]->fwd);
        cuda_dnn_free(&c->e[i]->bwd);
        free(c->e[i]);
    }
    free(c->e);
    cudnnDestroy(c->h);
    free(c);
}

const char *cuda_cudnn_error(const cuda_cudnn *c) { return c->err; }

int64_t cuda_cudnn_ws_bound(int64_t b, int64_t S, int64_t H, int64_t Dh) {
    int64_t rows = b * S * H, acc = 4 * rows * Dh;
    return acc + (acc + 8 * rows + ((int64_t)1 << 20));
}

static bool cuda_dnn_same(const cuda_cudnn_shape *a, const cuda_cudnn_shape *b) {
    return a->b == b->b && a->S == b->S && a->H == b->H && a->Hkv == b->Hkv && a->Dh == b->Dh &&
           cuda_dnn_ld(a) == cuda_dnn_ld(b) && !a->full == !b->full;
}

static cuda_dnn_entry *cuda_dnn_find(const cuda_cudnn *c, const cuda_cudnn_shape *s) {
    for (int i = 0; i < c->ne; i++)
        if (cuda_dnn_same(&c->e[i]->s, s)) return c->e[i];
    return NULL;
}

static size_t cuda_dnn_align(size_t n) { return (n + 255) / 256 * 256; }

/* Builds and plans both graphs of a new entry; false with e->err. */
static bool cuda_dnn_build_entry(cuda_cudnn *c, cuda_dnn_entry *e) {
    const cuda_cudnn_shape *s = &e->s;
    if (s->b < 1 || s->S < 1 || s->Hkv < 1 || s->H % s->Hkv != 0 || s->Dh % 8 != 0 || s->Dh > 128 ||
        cuda_dnn_ld(s) < s->S) {
        snprintf(e->err, sizeof e->err,
                 "shape outside the fused attention's range (Dh a multiple of 8 up to 128, ld >= S)");
        return false;
    }
    const char *fault = cuda_cudnn_known_fault(s);
    if (fault) {
        snprintf(e->err, sizeof e->err, "cuDNN %zu: %s", cudnnGetVersion(), fault);
        return false;
    }
    e->dq_acc = cuda_dnn_align((size_t)(4 * s->b * s->H * s->S * s->Dh));
    int64_t bound = cuda_cudnn_ws_bound(s->b, s->S, s->H, s->Dh) - (int64_t)e->dq_acc;
    cuda_dnn_graph *gs[2] = {&e->fwd, &e->bwd};
    for (int i = 0; i < 2; i++) {
        gs[i]->next_uid = UID_FIRST_VIRTUAL;
        if (i == 0)
            cuda_dnn_build_fwd(gs[i], s);
        else
            cuda_dnn_build_bwd(gs[i], s);
        if (gs[i]->failed || !cuda_dnn_plan(gs[i], c->h, bound)) {
            snprintf(e->err, sizeof e->err, "%s graph: %s", i ? "backward" : "forward", gs[i]->err);
            return false;
        }
    }
    size_t fw = (size_t)e->fwd.plan_ws, bw = e->dq_acc + (size_t)e->bwd.plan_ws;
    e->ws = fw > bw ? fw : bw;
    return true;
}

int cuda_cudnn_check_ops(const cuda_cudnn_shape *s, char *why, size_t nwhy) {
    int nops[2] = {0, 0};
    if (cuda_dnn_ld(s) < s->S) {
        snprintf(why, nwhy, "ld %lld is under S %lld: the rows would overlap", (long long)s->ld, (long long)s->S);
        return -1;
    }
    for (int i = 0; i < 2; i++) {
        cuda_dnn_graph g = {.next_uid = UID_FIRST_VIRTUAL};
        if (i == 0)
            cuda_dnn_build_fwd(&g, s);
        else
            cuda_dnn_build_bwd(&g, s);
        bool ok = !g.failed;
        if (!ok) snprintf(why, nwhy, "%s graph: %s", i ? "backward" : "forward", g.err);
        nops[i] = g.nops;
        cuda_dnn_free(&g);
        if (!ok) return -1;
    }
    snprintf(why, nwhy, "forward %d operations, backward %d", nops[0], nops[1]);
    return 0;
}

int cuda_cudnn_prepare(cuda_cudnn *c, const cuda_cudnn_shape *s) {
    cuda_dnn_entry *e = cuda_dnn_find(c, s);
    if (!e) {
        if (c->ne == c->cap) {
            int cap = c->cap ? 2 * c->cap : 8;
            cuda_dnn_entry **ne = realloc(c->e, sizeof *ne * (size_t)cap);
            if (!ne) {
                snprintf(c->err, sizeof c->err, "out of host memory");
                return -1;
            }
            c->e = ne, c->cap = cap;
        }
        e = calloc(1, sizeof *e);
        if (!e) {
            snprintf(c->err, sizeof c->err, "out of host memory");
            return -1;
        }
        e->s = *s;
        e->ok = cuda_dnn_build_entry(c, e);
        if (!e->ok) cuda_dnn_free(&e->fwd), cuda_dnn_free(&e->bwd);
        c->e[c->ne++] = e;
    }
    if (e->ok) return 0;
    snprintf(c->err, sizeof c->err, "%s", e->err);
    return -1;
}

size_t cuda_cudnn_ws_bytes(const cuda_cudnn *c, const cuda_cudnn_shape *s) {
    const cuda_dnn_entry *e = cuda_dnn_find(c, s);
    return e && e->ok ? e->ws : 0;
}

/* Runs plan g with the n (uid, pointer) pairs and workspace ws. */
static int cuda_dnn_execute(cuda_cudnn *c, cuda_dnn_graph *g, int n, const int64_t *uid, void *const *ptr, void *ws) {
    cuda_dnn_graph vp = {0};
    cudnnBackendDescriptor_t pack = cuda_dnn_new(&vp, CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR);
    cuda_dnn_set(&vp, pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, n, uid);
    cuda_dnn_set(&vp, pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR, n, ptr);
    cuda_dnn_set(&vp, pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR, 1, &ws);
    cuda_dnn_finalize(&vp, pack, "the variant pack");
    if (!vp.failed) {
        cudnnStatus_t st = cudnnBackendExecute(c->h, g->plan, pack);
        if (st != CUDNN_STATUS_SUCCESS) {
            /* A launch that failed inside cuDNN leaves its CUDA error pending;
             * take it here (name it in the message) so that the caller's
             * fallback kernels, which check cudaGetLastError, do not fail on
             * it.  A sticky error stays and fails the next CUDA call anyway. */
            cudaError_t ce = cudaGetLastError();
            cuda_dnn_fail(&vp, st, "cudnnBackendExecute (CUDA: %s)", cudaGetErrorString(ce));
        }
    }
    int r = vp.failed ? -1 : 0;
    if (r) snprintf(c->err, sizeof c->err, "%s", vp.err);
    cuda_dnn_free(&vp);
    return r;
}

/* The shape's ready entry, or NULL with c->err. */
static cuda_dnn_entry *cuda_dnn_ready(cuda_cudnn *c, const cuda_cudnn_shape *s) {
    if (cuda_cudnn_prepare(c, s) != 0) return NULL;
    cuda_dnn_entry *e = cuda_dnn_find(c, s);
    c->scale = (float)(1.0 / sqrt((double)s->Dh));
    c->neg = -FLT_MAX; /* the lowest float: exp of it minus any row max is 0 */
    c->one = 1.0f;
    c->err[0] = '\0';
    return e;
}

int cuda_cudnn_fwd(cuda_cudnn *c, const cuda_cudnn_shape *s, kcu_bf16 *o, float *stats, const kcu_bf16 *q,
                   const kcu_bf16 *k, const kcu_bf16 *v, void *ws) {
    cuda_dnn_entry *e = cuda_dnn_ready(c, s);
    if (!e) return -1;
    int64_t uid[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_NEG};
    void *ptr[] = {(void *)q, (void *)k, (void *)v, o, stats, &c->scale, &c->neg};
    return cuda_dnn_execute(c, &e->fwd, s->full ? 6 : 7, uid, ptr, ws); /* a full block has no mask value */
}

int cuda_cudnn_bwd(cuda_cudnn *c, const cuda_cudnn_shape *s, kcu_bf16 *dq, kcu_bf16 *dk, kcu_bf16 *dv,
                   const kcu_bf16 *dout, const kcu_bf16 *q, const kcu_bf16 *k, const kcu_bf16 *v, const kcu_bf16 *o,
                   const float *stats, void *ws) {
    cuda_dnn_entry *e = cuda_dnn_ready(c, s);
    if (!e) return -1;
    /* The dQ accumulator is summed into by the kernels: it starts at 0. */
    cudaError_t ce = cudaMemsetAsync(ws, 0, e->dq_acc, c->st);
    if (ce != cudaSuccess) {
        (void)cudaGetLastError(); /* reported here, not by the fallback's next check */
        snprintf(c->err, sizeof c->err, "cudaMemsetAsync of the dQ accumulator: %s", cudaGetErrorString(ce));
        return -1;
    }
    void *plan_ws = (char *)ws + e->dq_acc;
    /* the mask value last: a full block's graph has none */
    int64_t uid[] = {UID_Q,  UID_K,  UID_V,  UID_O,  UID_STATS,  UID_SCALE, UID_ONE,
                     UID_DO, UID_DQ, UID_DK, UID_DV, UID_DQ_ACC, UID_NEG};
    void *ptr[] = {(void *)q, (void *)k, (void *)v, (void *)o, (void *)stats, &c->scale, &c->one, (void *)dout,
                   dq,        dk,        dv,        ws,        &c->neg};
    return cuda_dnn_execute(c, &e->bwd, s->full ? 12 : 13, uid, ptr, plan_ws);
}
