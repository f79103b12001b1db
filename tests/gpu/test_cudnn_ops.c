/* test_cudnn_ops.c — the cuDNN attention graphs (runtime/cuda/rt_attn_cudnn.c)
 * built on the host, no GPU needed: every tensor and operation descriptor
 * of the forward and the backward must finalize, which has cuDNN check
 * each attribute's name, type and count and each operation's operands
 * (matmul shapes and batch broadcasts, reduction and reshape shapes) for
 * the shapes training uses: GQA groups 1 to 8, head dims 64 and 128, one
 * and two sequences; and ring attention's sub-blocks (rows of longer
 * buffers, with and without the causal mask), where the graph without the
 * mask must have fewer operations.  And a shape whose kv heads do not
 * divide the q heads, or whose rows overlap, must be refused: the check is
 * not vacuous.  What this cannot check (the
 * operation graph needs a handle, hence a device): whether an engine fuses
 * the graph, and the numbers (test_gpu_kernels.c, on a GPU). */
#include <cudnn.h>
#include <stdbool.h>
#include <stdio.h>

#include "rt_attn_cudnn.h"

int main(void) {
    /* b, S, H, Hkv, Dh, ld, full: the plain shapes (ld, full 0), then ring
     * sub-blocks: S rows of [b, ld, ..] buffers, full and causal (the
     * zig-zag halves of a rank's slice, rt_ring_split.c) */
    static const cuda_cudnn_shape ok[] = {
        {1, 256, 8, 2, 64, 0, 0},      {2, 200, 4, 1, 128, 0, 0},
        {1, 384, 16, 4, 128, 0, 0},    {1, 130, 4, 4, 64, 0, 0},
        {2, 64, 8, 1, 64, 0, 0},       {1, 16384, 32, 8, 64, 0, 0},   /* Llama-3.2-1B, 16K */
        {1, 4096, 8, 2, 128, 0, 0},                                   /* 8B, 8-way Ulysses */
        {1, 2048, 32, 8, 64, 4096, 0}, {1, 2048, 32, 8, 64, 4096, 1}, /* 1B, ring of 4 at 16K: causal, full */
        {2, 512, 8, 2, 128, 1024, 1},  {1, 256, 4, 4, 64, 256, 1},    /* b 2; a whole block, full */
    };
    int failures = 0;
    char why[1024];
    printf("cuDNN %zu (headers %d.%d.%d)\n", cuda_cudnn_version(), CUDNN_MAJOR, CUDNN_MINOR, CUDNN_PATCHLEVEL);
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        const cuda_cudnn_shape *s = &ok[i];
        int rc = cuda_cudnn_check_ops(s, why, sizeof why);
        printf("b %lld S %lld H %lld Hkv %lld Dh %lld ld %lld %s: %s  %s\n", (long long)s->b, (long long)s->S,
               (long long)s->H, (long long)s->Hkv, (long long)s->Dh, (long long)s->ld, s->full ? "full" : "causal", why,
               rc == 0 ? "ok" : "FAIL");
        failures += rc != 0;
    }
    /* a full block's graph has no mask: fewer operations than its causal twin */
    int nfull[2] = {0, 0}, ncausal[2] = {0, 0};
    cuda_cudnn_shape full = {1, 256, 4, 4, 64, 512, 1}, causal = {1, 256, 4, 4, 64, 512, 0};
    if (cuda_cudnn_check_ops(&full, why, sizeof why) == 0)
        sscanf(why, "forward %d operations, backward %d", &nfull[0], &nfull[1]);
    if (cuda_cudnn_check_ops(&causal, why, sizeof why) == 0)
        sscanf(why, "forward %d operations, backward %d", &ncausal[0], &ncausal[1]);
    bool fewer = nfull[0] > 0 && nfull[0] < ncausal[0] && nfull[1] < ncausal[1];
    printf("full block without the mask: forward %d / %d, backward %d / %d operations  %s\n", nfull[0], ncausal[0],
           nfull[1], ncausal[1], fewer ? "ok" : "FAIL");
    failures += !fewer;
    static const cuda_cudnn_shape bad[] = {
        {1, 256, 6, 4, 64, 0, 0},   /* 4 kv heads cannot serve 6 q heads */
        {1, 256, 8, 2, 64, 128, 1}, /* ld under S: the rows would overlap */
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        int rc = cuda_cudnn_check_ops(&bad[i], why, sizeof why);
        printf("%s (must be refused): %s  %s\n", i ? "ld 128 under S 256" : "H 6 over Hkv 4", rc ? why : "accepted",
               rc ? "ok" : "FAIL");
        failures += rc == 0;
    }
    printf("%s: %d failure(s)\n", failures ? "FAILED" : "passed", failures);
    return failures != 0;
}
