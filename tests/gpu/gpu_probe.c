/* gpu_probe.c — exit status 0 when a CUDA device is visible, 77 (CTest:
 * skipped) with a message when not; GPU test scripts call it first. */
#include <cuda_runtime_api.h>
#include <stdio.h>

int main(void) {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        printf("no CUDA device visible (%s): skipped\n", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return 77;
    }
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, 0) == cudaSuccess)
        printf("%d CUDA device(s); device 0: %s, sm_%d%d, %.1f GiB\n", n, p.name, p.major, p.minor,
               (double)p.totalGlobalMem / (1 << 30));
    return 0;
}
