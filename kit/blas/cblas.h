/* cblas.h — the part of the CBLAS interface that basp's CPU kernels call,
 * for machines with no BLAS headers (kit/README.md).  The declarations are
 * the standard ones (enum values from the reference CBLAS), so objects
 * compiled against this header link against any CBLAS, and against
 * blas_dl.c beside it, which finds one at run time. */
#ifndef BASP_KIT_CBLAS_H
#define BASP_KIT_CBLAS_H

#ifdef __cplusplus
extern "C" {
#endif

enum CBLAS_ORDER { CblasRowMajor = 101, CblasColMajor = 102 };
enum CBLAS_TRANSPOSE { CblasNoTrans = 111, CblasTrans = 112, CblasConjTrans = 113 };
typedef enum CBLAS_ORDER CBLAS_ORDER;
typedef enum CBLAS_TRANSPOSE CBLAS_TRANSPOSE;

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                 float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc);
void openblas_set_num_threads(int n);
char *openblas_get_config(void);
char *openblas_get_corename(void);

#ifdef __cplusplus
}
#endif
#endif
