/* gpu_test.h — what the GPU kernel test's files share (test_gpu_kernels.c:
 * the main and the element-wise, GEMM and exchange kernels;
 * gpu_attn_cases.c: attention, ring blocks, cuDNN): random bf16-rounded
 * inputs, device copies and the comparisons that count failures (gt_failures). */
#ifndef BASP_GPU_TEST_H
#define BASP_GPU_TEST_H
#include <stdbool.h>
#include <stdint.h>

#include "kcu.h"

extern int gt_failures;
/* uniform in [-1, 1) */
float gt_frand(void);
/* n random values of scale s, rounded to bf16 so both sides see them */
float *gt_rnd(int64_t n, float s);
/* device bf16 copies of x; zeros; zeroed bytes; host fp32 of device bf16 */
kcu_bf16 *gt_up(const float *x, int64_t n);
kcu_bf16 *gt_dzeros(int64_t n);
void *gt_dalloc(size_t bytes);
float *gt_down(const kcu_bf16 *d, int64_t n);
/* max |got - ref| <= tol max |ref| (NaN fails), printed and counted */
void gt_check(const char *name, const float *got, const float *ref, int64_t n, double tol);
void gt_check_gpu(const char *name, const kcu_bf16 *d, const float *ref, int64_t n, double tol);
/* two device tensors equal bit for bit */
void gt_check_same(const char *name, const kcu_bf16 *a, const kcu_bf16 *b, int64_t n);

/* gpu_attn_cases.c: attention (both forwards), the ring's merge kernels,
 * and with cuDNN its plain graphs and the ring's sub-blocks. */
void gpu_attn_cases(void);
#endif
