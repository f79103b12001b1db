/* rt_threads.c — host work split over the rank's threads (rt->host_threads:
 * its CPUs over its node's ranks, or BASP_HOST_THREADS): drawing the
 * initial weights and, with the optimizer offloaded on the CUDA backend,
 * the host update.  Each thread gets one contiguous range; a caller whose
 * result must not depend on the split (a sum) hands out fixed chunks as
 * the items instead. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "rt_core.h"

bool rt_host_threads_env(int *n, char *err, size_t errlen) {
    const char *e = getenv("BASP_HOST_THREADS");
    *n = 0;
    if (!e || !*e) return true;
    char *end;
    errno = 0;
    long v = strtol(e, &end, 10);
    if (*end || errno || v < 1 || v > RT_MAX_HOST_THREADS) {
        snprintf(err, errlen,
                 "BASP_HOST_THREADS=%s: want a whole number from 1 to %d (the host threads of each "
                 "rank; unset, each rank uses its share of its node's CPUs)",
                 e, RT_MAX_HOST_THREADS);
        return false;
    }
    *n = (int)v;
    return true;
}

typedef struct {
    rt_range_fn fn;
    void *ctx;
    int64_t a, b;
} rt_range_job;

static void *rt_range_run(void *arg) {
    const rt_range_job *j = arg;
    j->fn(j->ctx, j->a, j->b);
    return NULL;
}

void rt_parallel_for(const rt_ctx *rt, int64_t n, int64_t min_per_thread, rt_range_fn fn, void *ctx) {
    if (n <= 0) return;
    int64_t most = min_per_thread > 0 ? n / min_per_thread : n;
    int nt = rt->host_threads;
    if (nt > RT_MAX_HOST_THREADS) nt = RT_MAX_HOST_THREADS;
    if (nt > most) nt = (int)most;
    if (nt <= 1) {
        fn(ctx, 0, n);
        return;
    }
    rt_range_job jobs[RT_MAX_HOST_THREADS];
    pthread_t tid[RT_MAX_HOST_THREADS];
    for (int t = 0; t < nt; t++) jobs[t] = (rt_range_job){fn, ctx, n * t / nt, n * (t + 1) / nt};
    for (int t = 1; t < nt; t++)
        RT_CHECK(pthread_create(&tid[t], NULL, rt_range_run, &jobs[t]) == 0, "cannot start a host thread");
    rt_range_run(&jobs[0]);
    for (int t = 1; t < nt; t++) pthread_join(tid[t], NULL);
}
