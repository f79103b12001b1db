/* rt_profile.c — the end of a run on rank 0: the report of where the time
 * went (the counters of rt_coll.c, by kernel and collective kind, as shares
 * of the summed step time) and --profile, the same counters as one JSON
 * object for tools that compare measured per-op time with the cost model
 * (bench/calibrate.py). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../core/rt_backend.h"
#include "rt_obs.h"

static int rt_cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double rt_median(double *xs, int64_t n) {
    qsort(xs, (size_t)n, sizeof *xs, rt_cmp_double);
    return n ? xs[n / 2] : 0;
}

/* --profile: rank 0's counters as one JSON object, for tools that compare
 * measured per-op time with the cost model (bench/calibrate.py).  Only
 * kinds that ran are listed.  Returns false when the file cannot be written. */
bool rt_profile_write(const rt_ctx *rt, const char *path, double *secs, double *a2a, int64_t n) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += secs[i];
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "world", rt->world);
    cJSON_AddNumberToObject(o, "steps", (double)n);
    cJSON_AddNumberToObject(o, "total_s", sum);
    cJSON_AddNumberToObject(o, "median_step_ms", rt_median(secs, n) * 1e3);
    cJSON_AddNumberToObject(o, "median_a2a_ms", rt_median(a2a, n) * 1e3);
    /* One slot per buffer by category (rt_arena_report's numbers, in bytes):
     * with --no-memory-plan the arena itself, to compare with baspc --memory
     * --no-memory-plan --json's breakdown. */
    cJSON *cats = cJSON_AddObjectToObject(o, "buffer_bytes_by_category");
    for (int c = 0; c < RT_MEM_NCATS; c++) cJSON_AddNumberToObject(cats, rt_mem_names[c], (double)rt->cat_bytes[c]);
    cJSON *ops = cJSON_AddObjectToObject(o, "ops");
    for (int k = 0; k < CM_K_N; k++) {
        if (!rt->total.kern_calls[k]) continue;
        cJSON *e = cJSON_AddObjectToObject(ops, cm_kernel_names[k]);
        cJSON_AddNumberToObject(e, "calls", (double)rt->total.kern_calls[k]);
        cJSON_AddNumberToObject(e, "seconds", rt->total.kern_sec[k]);
    }
    for (int k = 0; k < RT_C_NKINDS; k++) {
        if (!rt->total.coll_calls[k]) continue;
        cJSON *e = cJSON_AddObjectToObject(ops, rt_coll_names[k]);
        cJSON_AddNumberToObject(e, "calls", (double)rt->total.coll_calls[k]);
        cJSON_AddNumberToObject(e, "seconds", rt->total.coll_sec[k]);
        cJSON_AddNumberToObject(e, "bytes", (double)rt->total.coll_bytes[k]);
        if (rt->opt.split_wait) cJSON_AddNumberToObject(e, "wait_seconds", rt->total.coll_wait_sec[k]);
    }
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    RT_CHECK(text, "out of memory formatting the profile");
    errno = 0;
    FILE *f = fopen(path, "w");
    bool ok = f && fprintf(f, "%s\n", text) >= 0 && fflush(f) == 0;
    int why = ok ? 0 : errno ? errno : EIO;
    if (f && fclose(f) != 0 && ok) ok = false, why = errno ? errno : EIO;
    cJSON_free(text);
    if (!ok) fprintf(stderr, "error: --profile %s: cannot write: %s\n", path, strerror(why));
    return ok;
}

/* Where the time went on rank 0, as shares of the summed step time. */
void rt_profile_report(const rt_ctx *rt, double *secs, int64_t n, double step_tokens) {
    double sum = 0;
    for (int64_t i = 0; i < n; i++) sum += secs[i];
    qsort(secs, (size_t)n, sizeof *secs, rt_cmp_double);
    double med = n ? secs[n / 2] : 0;
    printf("done: %lld step(s) in %.2f s, median step %.1f ms, %.0f tok/s (median)\n", (long long)n, sum, med * 1e3,
           med > 0 ? step_tokens / med : 0.0);
    printf("memory: arena %.2f MiB per rank (%s), high-water %.2f MiB + workspace %.2f MiB, peak resident set "
           "%.2f MiB\n",
           (double)rt->arena_bytes / (1 << 20), rt->planned ? "the compiler's memory plan" : "one slot per value",
           (double)rt->mem_hw / (1 << 20), (double)rt_backend_workspace_bytes(rt) / (1 << 20),
           (double)rt_rss_peak_bytes() / (1 << 20));
    if (rt->host_bytes)
        printf("memory: host arena %.2f MiB per rank, high-water %.2f MiB (offloaded values%s)\n",
               (double)rt->host_bytes / (1 << 20), (double)rt->host_hw / (1 << 20),
               rt->p->opt_on_host ? ", the optimizer state" : "");
    if (sum <= 0) return;
    printf("rank 0 time by kind (%% of step time):\n");
    const char *how = rt_backend_timing_note(rt);
    if (how) printf("  (%s)\n", how);
    for (int k = 0; k < CM_K_N; k++)
        if (rt->total.kern_calls[k])
            printf("  %-16s %7lld calls %10.1f ms %5.1f%%\n", cm_kernel_names[k], (long long)rt->total.kern_calls[k],
                   rt->total.kern_sec[k] * 1e3, 100 * rt->total.kern_sec[k] / sum);
    for (int k = 0; k < RT_C_NKINDS; k++)
        if (rt->total.coll_calls[k])
            printf("  %-16s %7lld calls %10.1f ms %5.1f%%  %.2f MiB sent\n", rt_coll_names[k],
                   (long long)rt->total.coll_calls[k], rt->total.coll_sec[k] * 1e3, 100 * rt->total.coll_sec[k] / sum,
                   (double)rt->total.coll_bytes[k] / (1 << 20));
    fflush(stdout);
}
