/* rt_guard.c — what the training loop does between steps to lose nothing:
 * NaN/Inf detection (stop naming the step and the tensor, or skip the
 * step with --skip-nonfinite), the periodic and final checkpoints, and the
 * test hook that makes a step non-finite on purpose. */
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cjson/cJSON.h>

#include "../ckpt/rt_ckpt.h"
#include "../obs/rt_obs.h"
#include "rt_backend.h"
#include "rt_core.h"

int rt_first_nonfinite_grad(rt_ctx *rt) {
    const rt_program *p = rt->p;
    int first = p->nopt;
    for (int i = 0; i < p->nopt && first == p->nopt; i++) {
        int g = p->opt[i].grad;
        int64_t n = p->values[g].local_elems;
        float *buf = RT_MALLOC((size_t)n * 4);
        rt_host_read(rt, g, buf);
        for (int64_t k = 0; k < n; k++)
            if (!isfinite(buf[k])) {
                first = i;
                break;
            }
        free(buf);
    }
    RT_MPI(MPI_Allreduce(MPI_IN_PLACE, &first, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
    return first < p->nopt ? first : -1;
}

/* printf's "-nan" depends on the sign bit, which means nothing here. */
static const char *rt_guard_num(double x, char *buf, size_t n) {
    if (isnan(x)) return "nan";
    snprintf(buf, n, "%g", x);
    return buf;
}

/* " The last good checkpoint is DIR/step-N (resume with --resume)." */
static void rt_guard_last(const rt_ctx *rt, char *out, size_t n) {
    if (rt->opt.ckpt_dir && rt->saved_step > 0)
        snprintf(out, n, " The last good checkpoint is %s/step-%08lld (continue with --resume).", rt->opt.ckpt_dir,
                 (long long)rt->saved_step);
    else if (rt->opt.ckpt_dir)
        snprintf(out, n, " No checkpoint was saved yet.");
    else
        snprintf(out, n, " (--checkpoint-dir DIR --save-every N keeps checkpoints to go back to.)");
}

/* A non-finite loss or gradient norm at step t.  The optimizer made no
 * update when the norm is non-finite (rt_adamw skips on every rank), so
 * that step can be skipped; a non-finite loss with finite gradients was
 * applied and always stops the run.  Returns 0 to go on, 1 to stop. */
static int rt_guard_nonfinite(rt_ctx *rt, int64_t t, double loss, double gnorm) {
    int pair = rt_first_nonfinite_grad(rt); /* collective */
    char where[256] = "", last[512];
    if (pair >= 0)
        snprintf(where, sizeof where, "; first non-finite gradient: %s (of parameter %s)",
                 rt->p->values[rt->p->opt[pair].grad].name, rt->p->values[rt->p->opt[pair].param].name);
    bool skip = rt->opt.skip_nonfinite && !isfinite(gnorm);
    char a[32], b[32];
    const char *ls = rt_guard_num(loss, a, sizeof a), *gs = rt_guard_num(gnorm, b, sizeof b);
    if (rt->rank == 0 && skip)
        fprintf(stderr,
                "warning: step %lld: loss %s, gradient norm %s%s; step skipped (no update), "
                "--skip-nonfinite\n",
                (long long)t + 1, ls, gs, where);
    if (rt->rank == 0 && !skip) {
        rt_guard_last(rt, last, sizeof last);
        fprintf(stderr,
                "error: step %lld: loss %s, gradient norm %s%s; stopping (try a lower --lr, or "
                "--skip-nonfinite to skip such steps).%s\n",
                (long long)t + 1, ls, gs, where, last);
    }
    return skip ? 0 : 1;
}

static int rt_guard_save(rt_ctx *rt, int64_t step) {
    char err[1536];
    if (rt_ckpt_save(rt, step, err, sizeof err)) return 0;
    if (rt->rank == 0) fprintf(stderr, "error: step %lld: checkpoint not saved: %s; stopping\n", (long long)step, err);
    return 1;
}

int rt_guard_after_step(rt_ctx *rt, int64_t t, double loss, double gnorm) {
    if ((!isfinite(loss) || !isfinite(gnorm)) && rt_guard_nonfinite(rt, t, loss, gnorm)) return 1;
    if (rt->opt.ckpt_dir && rt->opt.save_every > 0 && (t + 1) % rt->opt.save_every == 0)
        return rt_guard_save(rt, t + 1);
    return 0;
}

int rt_guard_after_run(rt_ctx *rt, int64_t steps) {
    if (!rt->opt.ckpt_dir || steps <= rt->start_step || rt->saved_step == steps) return 0;
    return rt_guard_save(rt, steps);
}

/* BASP_TEST_POISON=N: before step N (1-based) one element of the first
 * rank-1 parameter (a norm weight, which every token passes) becomes NaN,
 * so the step's loss and every gradient are NaN; after the step the value
 * is restored.  With the optimizer's skip that is exactly a step whose
 * gradients came out non-finite. */
void rt_guard_test_poison(rt_ctx *rt, int64_t t, bool before) {
    static float *saved;
    static int sv = -1;
    const char *e = getenv("BASP_TEST_POISON");
    if (!e || atoll(e) != t + 1) return;
    if (before) {
        for (int v = 0; v < rt->p->nvalues && sv < 0; v++)
            if (rt->p->values[v].kind == RT_PARAM && rt->p->values[v].rank == 1) sv = v;
        RT_CHECK(sv >= 0, "BASP_TEST_POISON: no rank-1 parameter");
        int64_t n = rt->p->values[sv].local_elems;
        saved = RT_MALLOC((size_t)n * 4);
        rt_host_read(rt, sv, saved);
        float *bad = RT_MALLOC((size_t)n * 4);
        memcpy(bad, saved, (size_t)n * 4);
        bad[0] = NAN;
        rt_host_write(rt, sv, bad);
        free(bad);
    } else if (saved) {
        rt_host_write(rt, sv, saved);
        free(saved);
        saved = NULL;
    }
}

int64_t rt_first_nonfinite(const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i])) return i;
    return -1;
}

/* SIGTERM / SIGINT (rt_main.c's handler sets a flag): every rank finishes
 * the step, then the ranks agree (MAX of the signal numbers) once per step,
 * so all stop after the same step; a checkpoint of that step is written when
 * --checkpoint-dir is set.  BASP_TEST_STEP_DELAY_MS=MS sleeps MS after each
 * step, so that a test can signal a run in the middle.  The stop is also a
 * record in the metrics file (rank 0 writes it directly): when mpirun itself
 * was signalled it is tearing the job down and may drop the ranks' last
 * lines of output, the file keeps why and where the run ended.  The
 * message comes last: until rt_signal_restore_output a line that the
 * terminal does not take is dropped (rt_signal.c), after it a write may
 * block, and by then nothing is left to lose. */
int rt_guard_stop(rt_ctx *rt, int64_t t, FILE *metrics) {
    const char *e = getenv("BASP_TEST_STEP_DELAY_MS");
    long ms = e ? atol(e) : 0;
    if (ms > 0) {
        struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
        while (nanosleep(&ts, &ts) != 0 && errno == EINTR) { /* a signal does not cut the step short */
        }
    }
    int sig = rt_stop_signal();
    RT_MPI(MPI_Allreduce(MPI_IN_PLACE, &sig, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD));
    if (!sig) return 0;
    const char *name = sig == SIGTERM ? "SIGTERM" : sig == SIGINT ? "SIGINT" : "a signal";
    char what[1200];
    if (rt->opt.ckpt_dir) {
        if (rt->saved_step != t + 1 && rt_guard_save(rt, t + 1)) return 128 + sig; /* error already said */
        snprintf(what, sizeof what, "checkpoint written to %s/step-%08lld (continue with --resume)", rt->opt.ckpt_dir,
                 (long long)t + 1);
    } else {
        snprintf(what, sizeof what, "no checkpoint written (no --checkpoint-dir)");
    }
    if (metrics) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "event", "stop");
        cJSON_AddStringToObject(o, "signal", name);
        cJSON_AddNumberToObject(o, "step", (double)(t + 1));
        char ck[32];
        snprintf(ck, sizeof ck, "step-%08lld", (long long)t + 1);
        if (rt->opt.ckpt_dir)
            cJSON_AddStringToObject(o, "checkpoint", ck);
        else
            cJSON_AddNullToObject(o, "checkpoint");
        cJSON_AddNumberToObject(o, "exit_status", 128 + sig);
        rt_metrics_write(metrics, o);
    }
    rt_signal_restore_output(); /* the checkpoint and the record are safe: now say so */
    if (rt->rank == 0) {
        fflush(stdout);
        fprintf(stderr, "received %s: step %lld finished, %s; stopping (exit status %d)\n", name, (long long)t + 1,
                what, 128 + sig);
        fflush(stderr);
    }
    return 128 + sig;
}
