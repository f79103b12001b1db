/* test_cudnn_ops.c — the cuDNN attention graphs (runtime/cuda/rt_attn_cudnn.c)
 * built on the host, no GPU needed: every tensor and operation descriptor
 * of the forward and the backward must finalize, which has cuDNN check
 * each attribute's name, type and count and each operation's operands
 * (matmul shapes and batch broadcasts, reduction and reshape shapes) for
 * the shapes training uses: GQA groups 1 to 8, head dims 64 and 128, one
 * and two sequences.  And a shape whose kv heads do not divide the q heads
 * must be refused: the check is not vacuous.  What this cannot check (the
 * operation graph needs a handle, hence a device): whether an engine fuses
 * the graph, and the numbers (test_gpu_kernels.c, on a GPU). */
#include <cudnn.h>
#include <stdio.h>

#include "rt_attn_cudnn.h"

int main(void) {
    static const cuda_cudnn_shape ok[] = {
        {1, 256, 8, 2, 64},   {2, 200, 4, 1, 128}, {1, 384, 16, 4, 128},
        {1, 130, 4, 4, 64},   {2, 64, 8, 1, 64},   {1, 16384, 32, 8, 64}, /* Llama-3.2-1B at 16K on one GPU */
        {1, 4096, 8, 2, 128},                                             /* Llama-3.1-8B, 8-way Ulysses */
    };
    int failures = 0;
    char why[1024];
    printf("cuDNN %zu (headers %d.%d.%d)\n", cuda_cudnn_version(), CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        const cuda_cudnn_shape *s = &ok[i];
        int rc = cuda_cudnn_check_ops(s, why, sizeof why);
        printf("b %lld S %lld H %lld Hkv %lld Dh %lld: %s  %s\n", (long long)s->b, (long long)s->S, (long long)s->H,
               (long long)s->Hkv, (long long)s->Dh, why, rc == 0 ? "ok" : "FAIL");
        failures += rc != 0;
    }
    cuda_cudnn_shape bad = {1, 256, 6, 4, 64}; /* 4 kv heads cannot serve 6 q heads */
    int rc = cuda_cudnn_check_ops(&bad, why, sizeof why);
    printf("H 6 over Hkv 4 (must be refused): %s  %s\n", rc ? why : "accepted", rc ? "ok" : "FAIL");
    failures += rc == 0;
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "passed", failures);
    return failures != 0;
}
