/* rt_signal.c — SIGTERM / SIGINT.
 *
 * Before the first step there is nothing to save: the first signal ends
 * the job at once with a message, so that `timeout`, scancel or Ctrl-C
 * stop a job stuck in start-up (reading a large corpus, waiting for a
 * file system).  From the first step on, the first signal asks for a
 * graceful stop: every rank finishes the step, the ranks agree, a
 * checkpoint is written (rt_guard_stop).  A second signal ends the job at
 * once.
 *
 * A graceful stop must not depend on how much the job prints.  When
 * mpirun is signalled it stops reading the ranks' output while it waits
 * to forward the signal; rank 0, printing a line per step, then blocks in
 * write() on a full terminal or pipe, and with SA_RESTART the signal only
 * restarts that write: the checkpoint is never reached.  So the handler
 * makes stdout and stderr non-blocking (a blocked write returns EAGAIN,
 * the line is lost, the loop goes on to the stop), and
 * rt_signal_restore_output puts the original flags back once the
 * checkpoint and the metrics file's stop record are written, so that the
 * final message is not lost to a busy terminal. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "rt_core.h"

static volatile sig_atomic_t rt_sig;     /* the signal asking for a graceful stop, 0 if none */
static volatile sig_atomic_t rt_started; /* the first step has begun */
static volatile sig_atomic_t rt_sig_rank;
static int rt_out_flags[3] = {-1, -1, -1}; /* fd 1 and 2's flags before the handler changed them */

static void rt_say(const char *s) {
    ssize_t w = write(2, s, strlen(s));
    (void)w;
}

/* Async-signal-safe: fcntl only. */
static void rt_output_nonblocking(void) {
    for (int fd = 1; fd <= 2; fd++) {
        int f = fcntl(fd, F_GETFL);
        if (f < 0 || (f & O_NONBLOCK)) continue;
        if (fcntl(fd, F_SETFL, f | O_NONBLOCK) == 0) rt_out_flags[fd] = f;
    }
}

void rt_signal_restore_output(void) {
    for (int fd = 1; fd <= 2; fd++)
        if (rt_out_flags[fd] >= 0) {
            fcntl(fd, F_SETFL, rt_out_flags[fd]);
            rt_out_flags[fd] = -1;
        }
    clearerr(stdout); /* a line lost to EAGAIN must not fail the later ones */
    clearerr(stderr);
}

static void rt_on_signal(int sig) {
    int saved = errno;
    const char *name = sig == SIGTERM ? "SIGTERM" : "SIGINT";
    if (!rt_started) {
        if (rt_sig_rank == 0) {
            /* One write: mpirun ends the other ranks as soon as one exits,
             * and a line written in pieces was cut after "received ". */
            static const char tail[] = " during start-up, before the first step: stopping, nothing was trained\n";
            char line[128] = "received ";
            size_t n = strlen(line);
            memcpy(line + n, name, strlen(name));
            n += strlen(name);
            memcpy(line + n, tail, sizeof tail - 1);
            n += sizeof tail - 1;
            ssize_t w = write(2, line, n);
            (void)w;
        } else {
            /* The other ranks got the same signal (a terminal's, srun's):
             * leave rank 0 a moment to say why before mpirun, seeing a
             * rank gone, ends the job (nanosleep is async-signal-safe). */
            struct timespec ts = {0, 300 * 1000 * 1000};
            nanosleep(&ts, NULL);
        }
        _exit(128 + sig);
    }
    if (rt_sig) { /* the second signal: stop at once */
        rt_say("received a second signal: stopping at once, no checkpoint\n");
        _exit(128 + sig);
    }
    rt_sig = sig;
    rt_output_nonblocking();
    errno = saved;
}

int rt_stop_signal(void) { return (int)rt_sig; }

void rt_signal_install(int rank) {
    rt_sig_rank = rank;
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = rt_on_signal;
    sigemptyset(&sa.sa_mask);
    sa.sa_flags = SA_RESTART;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

void rt_signal_training_started(void) { rt_started = 1; }

/* BASP_TEST_STARTUP_DELAY_MS=MS: start-up takes MS longer (before the data
 * is read), so that a test can signal a job that has not begun training. */
void rt_signal_test_startup_delay(void) {
    const char *e = getenv("BASP_TEST_STARTUP_DELAY_MS");
    long ms = e ? atol(e) : 0;
    struct timespec ts = {ms / 1000, (ms % 1000) * 1000000L};
    while (ms > 0 && nanosleep(&ts, &ts) != 0 && errno == EINTR) {}
}
