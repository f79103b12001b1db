/* rt_obs.h — the observation room of the runtime: what a run tells about
 * itself.  The --trace-run timeline (rt_trace.c), the --metrics file
 * (rt_metrics.c), the end-of-run report and --profile (rt_profile.c) and
 * the --timeout watchdog (rt_watchdog.c).  It reads the counters core keeps
 * (rt_core.h: rt_kern_count, rt_coll_count feed it) and never changes what
 * a run computes.
 *
 * Obs uses core (rt_core.h) and, for the report's workspace and timing
 * notes, the backend interface (rt_backend.h); nothing of data/, ckpt/ or a
 * backend's internals. */
#ifndef BASP_RT_OBS_H
#define BASP_RT_OBS_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../core/rt_core.h"

/* ---- --trace-run (rt_trace.c) ----------------------------------------------------- */
/* Around step t (0-based): start recording when it is the traced step
 * (a barrier of all ranks is its time origin); write the trace after it
 * (rank 0; false on every rank when the file could not be written). */
void rt_trace_begin(rt_ctx *rt, int64_t t);
bool rt_trace_end(rt_ctx *rt, int64_t t);
/* While recording: a kernel of kind k from t0 to t1; a collective of sec
 * seconds ending now; a started collective from its start to when the rank
 * saw it complete. */
void rt_trace_kern(rt_ctx *rt, cm_kernel_kind k, double t0, double t1);
void rt_trace_coll(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double sec);
void rt_trace_span(rt_ctx *rt, rt_coll_kind k, int64_t bytes, double t0, double t1);

/* ---- --metrics (rt_metrics.c) -------------------------------------------------------- */
/* Rank 0: opens --metrics for the run.  After --resume onto an existing
 * file, first drops the records past the resumed step (rewritten to
 * PATH.tmp and renamed over it); NULL with a message on failure. */
FILE *rt_metrics_open(const rt_ctx *rt);
/* Rank 0: after a failed metrics write (said at once on stderr), the step of
 * the first record lost; -1 when every write succeeded. */
int64_t rt_metrics_lost_from(void);
/* One record of the metrics file (a cJSON object, consumed): printed on
 * one line and flushed. */
struct cJSON;
void rt_metrics_write(FILE *f, struct cJSON *o);

/* ---- the end-of-run report and --profile (rt_profile.c; rank 0) ------------------------
 * secs and a2a: each step's time and all-to-all time (n steps; sorted in
 * place).  rt_profile_report prints the totals, the memory lines and where
 * the time went by kind (step_tokens: the tokens of one step);
 * rt_profile_write writes the counters as one JSON object to path, false
 * (with a message) when it cannot. */
void rt_profile_report(const rt_ctx *rt, double *secs, int64_t n, double step_tokens);
bool rt_profile_write(const rt_ctx *rt, const char *path, double *secs, double *a2a, int64_t n);

/* ---- the watchdog (rt_watchdog.c) ------------------------------------------------------
 * --timeout starts a thread that ends the process (exit status
 * RT_WATCHDOG_STATUS, a message naming the rank and what it was doing) when
 * no heartbeat came for that long.  rt_watchdog_beat records progress. */
enum { RT_WATCHDOG_STATUS = 3 };
void rt_watchdog_start(rt_ctx *rt, double seconds);
void rt_watchdog_beat(const char *what, int64_t step);
/* A beat whose activity names a file or option too ("writing --save-weights"
 * and its path); object must outlive the run (NULL: none). */
void rt_watchdog_beat_on(const char *what, const char *object, int64_t step);
/* Progress within the activity the last beat named: for the long loops of
 * helpers shared by several activities (reading a file, hashing the data). */
void rt_watchdog_pulse(void);
/* On: this rank waits for rank 0 to write (rank 0 beats meanwhile, and its
 * watchdog notices any rank that hangs), so its own verdict is suspended;
 * off: the wait is over and counts as progress. */
void rt_watchdog_hold(bool on);
void rt_watchdog_stop(void);

#endif
