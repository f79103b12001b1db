/* blas_dl.c — CBLAS for machines where no BLAS is installed but a Python
 * package carries one (kit/README.md): the calls of cblas.h beside it,
 * forwarded to a library opened at the first call.
 *
 * BASP_BLAS_LIB names the library: an OpenBLAS (its own cblas_sgemm) or
 * NumPy's bundled copy (numpy.libs/libscipy_openblas64_*.so), whose symbols
 * carry a scipy_ prefix and a 64_ suffix and take 64-bit integers.  kit/env.sh
 * sets it.  Without it, or when the library lacks sgemm, the first call
 * stops the program with a message: a BLAS that silently did nothing would
 * train on garbage. */
#define _GNU_SOURCE
#include "cblas.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

typedef void (*blas_sgemm32)(int, int, int, int, int, int, float, const float *, int, const float *, int, float,
                             float *, int);
typedef void (*blas_sgemm64)(int, int, int, int64_t, int64_t, int64_t, float, const float *, int64_t, const float *,
                             int64_t, float, float *, int64_t);
typedef void (*blas_threads)(int);
typedef char *(*blas_str)(void);

static struct {
    blas_sgemm32 sgemm32;
    blas_sgemm64 sgemm64;
    blas_threads threads;
    blas_str config, corename;
} blas;
static pthread_once_t blas_once = PTHREAD_ONCE_INIT;

static void *blas_sym(void *h, const char *const *names) {
    for (int i = 0; names[i]; i++) {
        void *p = dlsym(h, names[i]);
        if (p) return p;
    }
    return NULL;
}

static void blas_open(void) {
    const char *path = getenv("BASP_BLAS_LIB");
    if (!path || !*path) {
        fprintf(stderr, "blas_dl: error: BASP_BLAS_LIB is not set: it must name a CBLAS library (an OpenBLAS, "
                        "or numpy.libs/libscipy_openblas64_*.so); source kit/env.sh to find one\n");
        exit(1);
    }
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "blas_dl: error: cannot open BASP_BLAS_LIB=%s: %s\n", path, dlerror());
        exit(1);
    }
    blas.sgemm32 = (blas_sgemm32)blas_sym(h, (const char *const[]){"cblas_sgemm", NULL});
    blas.sgemm64 = (blas_sgemm64)blas_sym(h, (const char *const[]){"scipy_cblas_sgemm64_", "cblas_sgemm64_", NULL});
    blas.threads = (blas_threads)blas_sym(
        h, (const char *const[]){"openblas_set_num_threads", "scipy_openblas_set_num_threads64_", NULL});
    blas.config =
        (blas_str)blas_sym(h, (const char *const[]){"openblas_get_config", "scipy_openblas_get_config64_", NULL});
    blas.corename =
        (blas_str)blas_sym(h, (const char *const[]){"openblas_get_corename", "scipy_openblas_get_corename64_", NULL});
    if (!blas.sgemm32 && !blas.sgemm64) {
        fprintf(stderr, "blas_dl: error: %s has no cblas_sgemm (nor scipy_cblas_sgemm64_, cblas_sgemm64_)\n", path);
        exit(1);
    }
}

void cblas_sgemm(enum CBLAS_ORDER order, enum CBLAS_TRANSPOSE ta, enum CBLAS_TRANSPOSE tb, int M, int N, int K,
                 float alpha, const float *A, int lda, const float *B, int ldb, float beta, float *C, int ldc) {
    pthread_once(&blas_once, blas_open);
    if (blas.sgemm32)
        blas.sgemm32(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
    else
        blas.sgemm64(order, ta, tb, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

void openblas_set_num_threads(int n) {
    pthread_once(&blas_once, blas_open);
    if (blas.threads) blas.threads(n);
}

char *openblas_get_config(void) {
    pthread_once(&blas_once, blas_open);
    return blas.config ? blas.config() : (char *)"unknown (BASP_BLAS_LIB)";
}

char *openblas_get_corename(void) {
    pthread_once(&blas_once, blas_open);
    return blas.corename ? blas.corename() : (char *)"unknown";
}
