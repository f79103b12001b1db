/* gpu_gemm_bench.c — cuBLAS bf16 GEMM throughput (kcu_linear_fwd: bf16 in,
 * fp32 compute) at the projection shapes of the example models, for one
 * rank's tokens (N = 4096: micro-batch 2 x 16K over 8 ranks).
 *
 *   gpu_gemm_bench [--peak TFLOPS] [--tokens N]
 *
 * Median of 10 timed calls after a warm-up; exits 77 without a GPU. */
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kcu.h"

typedef struct shape {
    const char *model, *what;
    int64_t in, out;
} shape;

/* hidden, q/kv/o projections, gate/up, down, lm head (config.json values) */
static const shape shapes[] = {
    {"llama3.2-1b", "qkv", 2048, 3072},       {"llama3.2-1b", "o", 2048, 2048},
    {"llama3.2-1b", "gate+up", 2048, 16384},  {"llama3.2-1b", "down", 8192, 2048},
    {"llama3.2-1b", "lm_head", 2048, 128256}, {"llama3.1-8b", "qkv", 4096, 6144},
    {"llama3.1-8b", "o", 4096, 4096},         {"llama3.1-8b", "gate+up", 4096, 28672},
    {"llama3.1-8b", "down", 14336, 4096},     {"llama3.1-8b", "lm_head", 4096, 128256},
    {"qwen2.5-3b", "qkv", 2048, 2560},        {"qwen2.5-3b", "gate+up", 2048, 22016},
    {"qwen2.5-3b", "down", 11008, 2048},      {"qwen2.5-3b", "lm_head", 2048, 151936},
};

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    double peak = 989.0;
    int64_t N = 4096;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--peak"))
            peak = atof(argv[i + 1]);
        else if (!strcmp(argv[i], "--tokens"))
            N = atoll(argv[i + 1]);
    }
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("no CUDA device visible: GEMM benchmark skipped\n");
        return 77;
    }
    cublasHandle_t h;
    if (cublasCreate(&h) != CUBLAS_STATUS_SUCCESS) return 1;
    cudaEvent_t a, b;
    KCU_CHECK_EXIT(cudaEventCreate(&a));
    KCU_CHECK_EXIT(cudaEventCreate(&b));
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        int64_t I = shapes[s].in, O = shapes[s].out;
        kcu_bf16 *x, *w, *y;
        KCU_CHECK_EXIT(cudaMalloc((void **)&x, (size_t)(N * I) * 2));
        KCU_CHECK_EXIT(cudaMalloc((void **)&w, (size_t)(I * O) * 2));
        KCU_CHECK_EXIT(cudaMalloc((void **)&y, (size_t)(N * O) * 2));
        KCU_CHECK_EXIT(cudaMemset(x, 0x3c, (size_t)(N * I) * 2)); /* small finite bf16 values */
        KCU_CHECK_EXIT(cudaMemset(w, 0x3c, (size_t)(I * O) * 2));
        float ms[10];
        for (int r = -1; r < 10; r++) {
            KCU_CHECK_EXIT(cudaEventRecord(a, 0));
            KCU_CHECK_EXIT(kcu_linear_fwd(h, y, x, w, N, I, O));
            KCU_CHECK_EXIT(cudaEventRecord(b, 0));
            KCU_CHECK_EXIT(cudaEventSynchronize(b));
            if (r >= 0) KCU_CHECK_EXIT(cudaEventElapsedTime(&ms[r], a, b));
        }
        qsort(ms, 10, sizeof *ms, cmp_f);
        double tf = 2.0 * (double)N * (double)I * (double)O / (ms[5] * 1e-3) / 1e12;
        printf("gemm %-12s %-8s N=%lld I=%-6lld O=%-7lld %8.3f ms %7.1f TFLOP/s (%4.1f%% of %.0f)\n", shapes[s].model,
               shapes[s].what, (long long)N, (long long)I, (long long)O, ms[5], tf, 100 * tf / peak, peak);
        fflush(stdout);
        cudaFree(x), cudaFree(w), cudaFree(y);
    }
    cublasDestroy(h);
    return 0;
}
