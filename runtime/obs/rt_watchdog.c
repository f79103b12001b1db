/* rt_watchdog.c — --timeout SEC: a rank that waits too long ends the job.
 *
 * A rank that dies is noticed by the MPI launcher (mpirun ends the job and
 * names it); a rank that hangs — stopped, deadlocked, stuck on a file
 * system — leaves the others blocked in their next collective forever.
 * Each rank runs a thread that looks at the time of the last heartbeat
 * (rt_watchdog_beat: each step, each validation batch, each tensor and
 * each piece of a file written) and, when none came for SEC seconds,
 * prints which rank gave up, on which step and what it was doing, then
 * _exit(RT_WATCHDOG_STATUS = 3)s: the launcher then ends the remaining
 * ranks.
 *
 * A write is rank 0's alone (the other ranks gather to it, then wait for it
 * to finish the file), so rt_watchdog_hold suspends the verdict of the
 * waiting ranks: rank 0 keeps beating while it writes, and any rank that
 * hangs meanwhile leaves rank 0 waiting in a collective without beats, so
 * rank 0's own watchdog still ends the job.
 * The thread never calls MPI (the library is initialised single-threaded),
 * only clock_gettime, write and _exit. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rt_obs.h"

static struct {
    pthread_t thread;
    bool running;
    atomic_bool stop;
    int rank;
    double seconds;
    atomic_llong last_ns; /* CLOCK_MONOTONIC of the last beat */
    atomic_bool held;     /* rt_watchdog_hold: rank 0 answers for this rank */
    /* What is running: odd `seq` while the main thread changes the three
     * fields, so the watchdog thread never prints one activity's name with
     * another's file or step. */
    atomic_uint seq;
    atomic_llong step;
    _Atomic(const char *) what;
    _Atomic(const char *) object;
} wd;

static long long wd_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void rt_watchdog_beat_on(const char *what, const char *object, int64_t step) {
    atomic_fetch_add(&wd.seq, 1);
    atomic_store(&wd.what, what);
    atomic_store(&wd.object, object);
    atomic_store(&wd.step, (long long)step);
    atomic_fetch_add(&wd.seq, 1);
    atomic_store(&wd.last_ns, wd_now_ns());
}

void rt_watchdog_beat(const char *what, int64_t step) { rt_watchdog_beat_on(what, NULL, step); }

void rt_watchdog_pulse(void) { atomic_store(&wd.last_ns, wd_now_ns()); }

void rt_watchdog_hold(bool on) {
    if (!on) atomic_store(&wd.last_ns, wd_now_ns()); /* the wait does not count once it is over */
    atomic_store(&wd.held, on);
}

/* The activity as one consistent triple (a beat may come meanwhile). */
static void wd_activity(const char **what, const char **object, long long *step) {
    for (;;) {
        unsigned s = atomic_load(&wd.seq);
        if (s & 1) continue;
        *what = atomic_load(&wd.what);
        *object = atomic_load(&wd.object);
        *step = atomic_load(&wd.step);
        if (atomic_load(&wd.seq) == s) return;
    }
}

static void *wd_main(void *arg) {
    (void)arg;
    while (!atomic_load(&wd.stop)) {
        struct timespec nap = {0, 100 * 1000000L};
        nanosleep(&nap, NULL);
        /* held first: rt_watchdog_hold(false) stores last_ns, then clears
         * held, so a cleared held guarantees the fresh last_ns is seen. */
        if (atomic_load(&wd.held)) continue;
        double idle = (double)(wd_now_ns() - atomic_load(&wd.last_ns)) * 1e-9;
        if (idle < wd.seconds) continue;
        const char *what, *object;
        long long step;
        wd_activity(&what, &object, &step);
        char msg[4608];
        int n = snprintf(msg, sizeof msg,
                         "rank %d: error: watchdog: no progress for %.0f s while %s%s%s (step %lld): another rank "
                         "has died or hangs, or this takes longer than --timeout %g; ending the job\n",
                         wd.rank, idle, what, object ? " " : "", object ? object : "", step, wd.seconds);
        if (n > 0 && write(2, msg, (size_t)(n < (int)sizeof msg ? n : (int)sizeof msg - 1)) < 0) n = 0;
        _exit(RT_WATCHDOG_STATUS);
    }
    return NULL;
}

void rt_watchdog_start(rt_ctx *rt, double seconds) {
    if (seconds <= 0 || wd.running) return;
    wd.rank = rt->rank;
    wd.seconds = seconds;
    atomic_store(&wd.stop, false);
    atomic_store(&wd.held, false);
    rt_watchdog_beat("starting", 0);
    RT_CHECK(pthread_create(&wd.thread, NULL, wd_main, NULL) == 0, "cannot start the watchdog thread");
    wd.running = true;
}

void rt_watchdog_stop(void) {
    if (!wd.running) return;
    atomic_store(&wd.stop, true);
    pthread_join(wd.thread, NULL);
    wd.running = false;
}
