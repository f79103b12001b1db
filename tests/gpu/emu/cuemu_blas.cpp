// cuemu_blas.cpp — the cuBLAS calls the backend makes: handles, streams and
// cublasGemmEx with bf16 or fp32 operands and fp32 compute, run by
// OpenBLAS's sgemm on fp32 copies in the handle's stream.  The arguments
// are checked as cuBLAS checks them (leading dimensions, types).
#include <cblas.h>
#include <cublas_v2.h>
#include <cuda_bf16.h>
#include <string.h>

#include <vector>

#include "cuemu_internal.h"

struct cublasContext {
    cudaStream_t st = nullptr;
};

namespace {

bool type_ok(cudaDataType_t t) { return t == CUDA_R_16BF || t == CUDA_R_32F; }

// m x n column-major matrix with leading dimension ld, to packed fp32.
std::vector<float> load(const void *p, cudaDataType_t t, int rows, int cols, int ld) {
    std::vector<float> out((size_t)rows * cols);
    for (int j = 0; j < cols; j++)
        for (int i = 0; i < rows; i++) {
            size_t at = (size_t)j * ld + i;
            out[(size_t)j * rows + i] = t == CUDA_R_32F ? ((const float *)p)[at]
                                                         : __bfloat162float(((const __nv_bfloat16 *)p)[at]);
        }
    return out;
}

void store(void *p, cudaDataType_t t, const std::vector<float> &c, int rows, int cols, int ld) {
    for (int j = 0; j < cols; j++)
        for (int i = 0; i < rows; i++) {
            size_t at = (size_t)j * ld + i;
            float v = c[(size_t)j * rows + i];
            if (t == CUDA_R_32F) ((float *)p)[at] = v;
            else ((__nv_bfloat16 *)p)[at] = __float2bfloat16(v);
        }
}

} // namespace

extern "C" {

cublasStatus_t cublasCreate_v2(cublasHandle_t *h) {
    if (!h) return CUBLAS_STATUS_INVALID_VALUE;
    *h = new cublasContext();
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasDestroy_v2(cublasHandle_t h) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    delete h;
    return CUBLAS_STATUS_SUCCESS;
}

// The backend hands cuBLAS a workspace so that no call allocates one during
// a stream capture; the emulated GEMMs need none.
cublasStatus_t cublasSetWorkspace_v2(cublasHandle_t h, void *ws, size_t bytes) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (bytes && !cuemu_is_device(ws, bytes)) return CUBLAS_STATUS_INVALID_VALUE;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasSetStream_v2(cublasHandle_t h, cudaStream_t st) {
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    h->st = st;
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasGetStatusString(cublasStatus_t s) {
    switch (s) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED";
    default: return "CUBLAS_STATUS_(unlisted)";
    }
}

// C = alpha op(A) op(B) + beta C, column-major; op(A) m x k, op(B) k x n.
cublasStatus_t cublasGemmEx(cublasHandle_t h, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                            const void *alpha, const void *A, cudaDataType_t at, int lda, const void *B,
                            cudaDataType_t bt, int ldb, const void *beta, void *C, cudaDataType_t ct, int ldc,
                            cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    (void)algo;
    if (!h) return CUBLAS_STATUS_NOT_INITIALIZED;
    bool tA = ta != CUBLAS_OP_N, tB = tb != CUBLAS_OP_N;
    int ar = tA ? k : m, ac = tA ? m : k, br = tB ? n : k, bc = tB ? k : n;
    if (m < 0 || n < 0 || k < 0 || lda < (ar > 1 ? ar : 1) || ldb < (br > 1 ? br : 1) || ldc < (m > 1 ? m : 1) ||
        !alpha || !beta) {
        cuemu_warn("cublasGemmEx: invalid m %d n %d k %d lda %d ldb %d ldc %d", m, n, k, lda, ldb, ldc);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    if (!type_ok(at) || !type_ok(bt) || !type_ok(ct) || at != bt ||
        (compute != CUBLAS_COMPUTE_32F && compute != CUBLAS_COMPUTE_32F_FAST_16BF)) {
        cuemu_warn("cublasGemmEx: types %d %d %d compute %d are not emulated", at, bt, ct, compute);
        return CUBLAS_STATUS_NOT_SUPPORTED;
    }
    if (!m || !n) return CUBLAS_STATUS_SUCCESS;
    size_t need_a = (size_t)lda * ((size_t)ac - 1) + (size_t)ar, need_b = (size_t)ldb * ((size_t)bc - 1) + (size_t)br;
    size_t need_c = (size_t)ldc * ((size_t)n - 1) + (size_t)m;
    size_t ea = at == CUDA_R_32F ? 4 : 2, ec = ct == CUDA_R_32F ? 4 : 2;
    if ((k && (!cuemu_is_device(A, need_a * ea) || !cuemu_is_device(B, need_b * ea))) ||
        !cuemu_is_device(C, need_c * ec)) {
        cuemu_warn("cublasGemmEx: an operand is not inside one device allocation (m %d n %d k %d)", m, n, k);
        return CUBLAS_STATUS_INVALID_VALUE;
    }
    float al = *(const float *)alpha, be = *(const float *)beta; // host pointer mode: read now
    cuemu_enqueue(h->st, [=]() {
        std::vector<float> a = k ? load(A, at, ar, ac, lda) : std::vector<float>(),
                           b = k ? load(B, bt, br, bc, ldb) : std::vector<float>();
        std::vector<float> c = be != 0.f ? load(C, ct, m, n, ldc) : std::vector<float>((size_t)m * n, 0.f);
        if (k)
            cblas_sgemm(CblasColMajor, tA ? CblasTrans : CblasNoTrans, tB ? CblasTrans : CblasNoTrans, m, n, k, al,
                        a.data(), ar, b.data(), br, be, c.data(), m);
        else
            for (float &x : c) x *= be;
        store(C, ct, c, m, n, ldc);
    });
    return CUBLAS_STATUS_SUCCESS;
}

} // extern "C"
