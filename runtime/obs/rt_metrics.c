/* rt_metrics.c — the --metrics file (rank 0): one JSON object per line.
 *
 * A resumed run (--resume) continues the file of the interrupted one: the
 * records past the checkpoint's step (the interrupted run trained them, the
 * resumed one trains them again) are dropped first, so that the file holds
 * one record per step.  Validation results are part of their step's record
 * and go with it; a stop record (SIGTERM / SIGINT) names the step of its
 * checkpoint and stays when that is the resumed step or earlier.  A line
 * that is not JSON (the last one, cut short by a crash) is dropped too.  The
 * kept records are written to PATH.tmp, synced and renamed over PATH: a
 * crash meanwhile leaves the old file, which the next resume trims again.
 *
 * A write that fails (a full disk) is said at once, with the reason; the
 * run goes on training without metrics (its checkpoints matter more than
 * its log) and exits with status 1 at the end (rt_loop.c). */
#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_obs.h"

static const char *mx_path; /* --metrics */
static int mx_err;          /* errno of the first failed write, 0 if none */
static long long mx_lost;   /* the step of the first record not written */

int64_t rt_metrics_lost_from(void) { return mx_err ? mx_lost : -1; }

void rt_metrics_write(FILE *f, cJSON *o) {
    const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step");
    long long step = cJSON_IsNumber(st) ? (long long)st->valuedouble : -1;
    char *line = mx_err ? NULL : cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (mx_err) return; /* said once; the run goes on without metrics */
    RT_CHECK(line, "out of memory formatting metrics");
    errno = 0;
    if (fprintf(f, "%s\n", line) < 0 || fflush(f) != 0) {
        mx_err = errno ? errno : EIO;
        mx_lost = step;
        fprintf(stderr,
                "error: --metrics %s: cannot write the record of step %lld: %s; training goes on without "
                "metrics, the run will exit with status 1\n",
                mx_path ? mx_path : "?", step, strerror(mx_err));
        fflush(stderr);
    }
    cJSON_free(line);
}

/* The record's step, or -1 when it has none; -2 when the line is not a JSON object. */
static long long mx_step_of(const char *line) {
    cJSON *j = cJSON_Parse(line);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return -2;
    }
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(j, "step");
    long long step = cJSON_IsNumber(s) ? (long long)s->valuedouble : -1;
    cJSON_Delete(j);
    return step;
}

/* Rewrites path without the records past step `upto`: kept lines into
 * path.tmp, synced, renamed over path.  False with a message. */
static bool mx_trim(const char *path, FILE *in, long long upto) {
    size_t tlen = strlen(path) + 8;
    char *tmp = RT_MALLOC(tlen);
    snprintf(tmp, tlen, "%s.tmp", path);
    errno = 0;
    FILE *out = fopen(tmp, "w");
    char *line = NULL;
    size_t cap = 0;
    long long dropped = 0, kept = 0;
    ssize_t n;
    bool ok = out != NULL;
    while (ok && (n = getline(&line, &cap, in)) > 0) {
        bool whole = line[n - 1] == '\n';
        long long s = whole ? mx_step_of(line) : -2;
        if (s == -2 || s > upto) {
            dropped++;
            continue;
        }
        kept++;
        ok = fputs(line, out) >= 0;
    }
    ok = ok && !ferror(in) && fflush(out) == 0 && fsync(fileno(out)) == 0;
    int why = ok ? 0 : errno ? errno : EIO;
    if (out && fclose(out) != 0 && ok) ok = false, why = errno ? errno : EIO;
    if (ok && rename(tmp, path) != 0) ok = false, why = errno;
    if (!ok) {
        fprintf(stderr, "error: --metrics %s: cannot drop the records past step %lld (via %s): %s\n", path, upto, tmp,
                strerror(why));
        remove(tmp);
    } else if (dropped) {
        printf("metrics: %s: kept %lld record(s) up to step %lld, dropped %lld written after it (trained again "
               "now)\n",
               path, kept, upto, dropped);
    }
    free(line);
    free(tmp);
    return ok;
}

FILE *rt_metrics_open(const rt_ctx *rt) {
    const char *path = mx_path = rt->opt.metrics;
    if (rt->start_step > 0) {
        FILE *in = fopen(path, "r");
        bool ok = !in || mx_trim(path, in, (long long)rt->start_step);
        if (in) fclose(in);
        if (!ok) return NULL;
    }
    errno = 0;
    FILE *f = fopen(path, rt->start_step > 0 ? "a" : "w"); /* a resumed run continues the file */
    if (!f) fprintf(stderr, "error: --metrics %s: cannot open: %s\n", path, strerror(errno));
    return f;
}
