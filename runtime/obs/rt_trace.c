/* rt_trace.c — `--trace-run FILE`: the measured timeline of one step as a
 * Chrome trace, in the form of the compiler's predicted one (`baspc
 * --trace`): one process per rank, compute on thread 0 and collectives on
 * thread 1, each runtime call a complete event ("ph": "X") named by its
 * kernel or collective kind, times in microseconds from the step's start.
 * Open the two side by side in Perfetto (ui.perfetto.dev).
 *
 * Every rank records its calls of the traced step (the counters' own
 * timing points: rt_kern_count, rt_coll_count in core/rt_coll.c), the
 * step's start being a barrier that all ranks leave together, so the ranks'
 * clocks line up to within the barrier's exit skew.  After the step rank 0 gathers the
 * events and writes FILE (FILE.tmp, then renamed).  On the CUDA backend the
 * kernel times are the host's around each call, and the collectives are
 * timed by events read later: only the CPU backend's collectives appear. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "../core/rt_backend.h"
#include "rt_obs.h"

/* One event as the gather sends it: kind (kernel, or CM_K_N + the
 * collective kind), start and end (seconds from the step's start), bytes. */
enum { RT_TRACE_FIELDS = 4 };

static void rt_trace_push(rt_ctx *rt, double kind, double t0, double t1, double bytes) {
    if (rt->trace_n == rt->trace_cap) {
        rt->trace_cap = rt->trace_cap ? 2 * rt->trace_cap : 1024;
        rt->trace_ev = realloc(rt->trace_ev, sizeof(double) * RT_TRACE_FIELDS * (size_t)rt->trace_cap);
        RT_CHECK(rt->trace_ev, "--trace-run: out of memory for %lld events", (long long)rt->trace_cap);
    }
    double *e = rt->trace_ev + RT_TRACE_FIELDS * rt->trace_n++;
    e[0] = kind, e[1] = t0 - rt->trace_origin, e[2] = t1 - rt->trace_origin, e[3] = bytes;
}

void rt_trace_kern(rt_ctx *rt, cm_kernel_kind k, double t0, double t1) {
    if (rt->tracing) rt_trace_push(rt, (double)k, t0, t1, 0);
}

void rt_trace_coll(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double sec) {
    if (!rt->tracing || sec <= 0) return; /* a CUDA collective is timed later, by its events */
    double t1 = rt_now();
    rt_trace_push(rt, (double)(CM_K_N + k), t1 - sec, t1, (double)bytes);
}

void rt_trace_span(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double t0, double t1) {
    if (rt->tracing && t1 > t0) rt_trace_push(rt, (double)(CM_K_N + k), t0, t1, (double)bytes);
}

/* The traced step: --trace-step N (1-based), else the last. */
static int64_t rt_trace_step(const rt_ctx *rt) {
    return rt->opt.trace_step > 0 ? rt->opt.trace_step - 1 : rt->opt.steps - 1;
}

void rt_trace_begin(rt_ctx *rt, int64_t t) {
    if (!rt->opt.trace_run || t != rt_trace_step(rt)) return;
    RT_MPI(MPI_Barrier(MPI_COMM_WORLD));
    rt->trace_origin = rt_now();
    rt->trace_n = 0;
    rt->tracing = true;
}

/* One metadata event: a process's or a thread's name. */
static void rt_trace_meta(cJSON *evs, const char *what, int pid, int tid, const char *name) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", what);
    cJSON_AddStringToObject(e, "ph", "M");
    cJSON_AddNumberToObject(e, "pid", pid);
    if (tid >= 0) cJSON_AddNumberToObject(e, "tid", tid);
    cJSON_AddStringToObject(cJSON_AddObjectToObject(e, "args"), "name", name);
    cJSON_AddItemToArray(evs, e);
}

/* The trace as text (malloc'd): every rank's events from the gather. */
/* impl: the implementation of attention [0] and of ring blocks [1] (rank 0's). */
static char *rt_trace_text(const rt_ctx *rt, const double *ev, const int *counts, int64_t t, const char *const *impl) {
    cJSON *root = cJSON_CreateObject(), *evs;
    cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
    cJSON *other = cJSON_AddObjectToObject(root, "otherData");
    cJSON_AddStringToObject(other, "source", "measured");
    cJSON_AddNumberToObject(other, "step", (double)(t + 1));
    cJSON_AddStringToObject(other, "model", rt->p->model);
    evs = cJSON_AddArrayToObject(root, "traceEvents");
    for (int r = 0; r < rt->world; r++) {
        char pname[32];
        snprintf(pname, sizeof pname, "rank %d", r);
        rt_trace_meta(evs, "process_name", r, -1, pname);
        rt_trace_meta(evs, "thread_name", r, 0, "compute");
        rt_trace_meta(evs, "thread_name", r, 1, "communication");
        for (int i = 0; i < counts[r]; i++, ev += RT_TRACE_FIELDS) {
            int kind = (int)ev[0];
            bool comm = kind >= CM_K_N;
            cJSON *e = cJSON_CreateObject();
            cJSON_AddStringToObject(e, "name", comm ? rt_coll_names[kind - CM_K_N] : cm_kernel_names[kind]);
            cJSON_AddStringToObject(e, "ph", "X");
            cJSON_AddNumberToObject(e, "ts", ev[1] * 1e6);
            cJSON_AddNumberToObject(e, "dur", (ev[2] - ev[1]) * 1e6);
            cJSON_AddNumberToObject(e, "pid", r);
            cJSON_AddNumberToObject(e, "tid", comm ? 1 : 0);
            if (comm) cJSON_AddNumberToObject(cJSON_AddObjectToObject(e, "args"), "bytes_sent", ev[3]);
            bool ring = kind == CM_K_RING_ATTENTION || kind == CM_K_RING_ATTENTION_BWD;
            if (ring || kind == CM_K_ATTENTION || kind == CM_K_ATTENTION_BWD)
                cJSON_AddStringToObject(cJSON_AddObjectToObject(e, "args"), "impl", impl[ring]);
            cJSON_AddItemToArray(evs, e);
        }
    }
    char *text = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    RT_CHECK(text, "--trace-run: out of memory writing the trace");
    return text;
}

/* Gathers every rank's events to rank 0, which writes the file.  False
 * (on every rank) when it could not be written. */
bool rt_trace_end(rt_ctx *rt, int64_t t) {
    if (!rt->tracing) return true;
    rt->tracing = false;
    int n = (int)rt->trace_n, *counts = NULL, *displs = NULL;
    double *all = NULL;
    if (rt->rank == 0) counts = RT_MALLOC(sizeof(int) * (size_t)rt->world);
    RT_MPI(MPI_Gather(&n, 1, MPI_INT, counts, 1, MPI_INT, 0, MPI_COMM_WORLD));
    if (rt->rank == 0) {
        displs = RT_MALLOC(sizeof(int) * (size_t)rt->world);
        int64_t total = 0;
        for (int r = 0; r < rt->world; r++) {
            RT_CHECK(total * RT_TRACE_FIELDS <= INT32_MAX, "--trace-run: too many events to gather");
            displs[r] = (int)(total * RT_TRACE_FIELDS);
            total += counts[r];
        }
        all = RT_MALLOC(sizeof(double) * RT_TRACE_FIELDS * (size_t)(total > 0 ? total : 1));
        for (int r = 0; r < rt->world; r++) counts[r] *= RT_TRACE_FIELDS;
    }
    RT_MPI(
        MPI_Gatherv(rt->trace_ev, n * RT_TRACE_FIELDS, MPI_DOUBLE, all, counts, displs, MPI_DOUBLE, 0, MPI_COMM_WORLD));
    int ok = 1;
    if (rt->rank == 0) {
        for (int r = 0; r < rt->world; r++) counts[r] /= RT_TRACE_FIELDS;
        char tmp[4096];
        snprintf(tmp, sizeof tmp, "%s.tmp", rt->opt.trace_run);
        const char *impl[2] = {cm_attn_impl_names[rt_backend_attention_impl(rt, false)],
                               cm_attn_impl_names[rt_backend_attention_impl(rt, true)]};
        char *text = rt_trace_text(rt, all, counts, t, impl);
        FILE *f = fopen(tmp, "w");
        if (f) {
            ok = fputs(text, f) >= 0 && fputc('\n', f) != EOF;
            ok = fclose(f) == 0 && ok && rename(tmp, rt->opt.trace_run) == 0;
        } else {
            ok = 0;
        }
        free(text);
        if (!ok) {
            fprintf(stderr, "error: --trace-run %s: cannot write: %s\n", rt->opt.trace_run, strerror(errno));
            remove(tmp);
        } else if (!rt->opt.quiet) {
            printf("trace of step %lld written to %s (Chrome trace: chrome://tracing or ui.perfetto.dev)\n",
                   (long long)t + 1, rt->opt.trace_run);
        }
    }
    RT_MPI(MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD));
    rt->trace_written = ok;
    free(counts), free(displs), free(all);
    free(rt->trace_ev);
    rt->trace_ev = NULL, rt->trace_n = rt->trace_cap = 0;
    return ok;
}
