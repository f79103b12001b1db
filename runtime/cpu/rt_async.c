/* rt_async.c — started collectives on the CPU backend (IR `async = 1` and
 * `wait`, ir/README.md "Asynchronous collectives"): the requests in flight,
 * progress, and the wait.
 *
 * A start (rt_*_start, cpu/rt_comm.c) posts MPI's nonblocking form of the
 * collective (MPI_Iallgather, MPI_Ireduce_scatter_block, MPI_Iallreduce,
 * MPI_Ialltoall(v)), records it here and returns; the step goes on computing while the data
 * move, and the wait completes the request.  MPI implementations move a nonblocking
 * collective only inside MPI calls (Open MPI's libnbc runs its rounds,
 * and the TCP transport its fragments, from the progress engine), so the
 * runtime drives it two ways:
 *   - a progress thread: while any request is in flight it calls
 *     MPI_Iprobe on MPI_COMM_SELF (which no one sends on: it only runs the
 *     progress engine) every PROGRESS_US microseconds, so the transfer moves
 *     while a kernel computes.  It needs MPI_THREAD_MULTIPLE, which the
 *     runtime asks for when the program starts collectives (rt_main); it
 *     never touches a request, so the main thread owns them all.  Idle, it
 *     sleeps IDLE_US between looks at the in-flight count.
 *   - between kernels (rt_kern_count), one MPI_Test per request, which also
 *     records when each completed (--trace-run), and is all there is when
 *     the MPI library grants less than MPI_THREAD_MULTIPLE.
 *
 * A gather or an exchange moves bytes and does no arithmetic, and a
 * reduction's blocking form is its nonblocking one waited at once
 * (cpu/rt_comm.c), so a started schedule's results are bit for bit those of
 * the blocking one.  A gather's or reduction's data land in the result's
 * own buffer (codegen admits only collectives whose blocks need no
 * interleaving: every dim before the gathered or scattered one has one
 * entry), and the operands and results stay live until the wait (the
 * memory plan extends them to it, ir_mem_live).  An exchange packs into the
 * staging areas at its start and unpacks at its wait (the record's finish);
 * no other staged collective may run in between (the verifier's rule). */
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT */
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rt_cpu.h"

enum { PROGRESS_US = 20, IDLE_US = 200 };

static void cpu_sleep_us(long us) {
    struct timespec ts = {0, us * 1000};
    nanosleep(&ts, NULL);
}

static void *cpu_progress_main(void *arg) {
    rt_cpu_state *cs = arg;
    while (!__atomic_load_n(&cs->progress_stop, __ATOMIC_ACQUIRE)) {
        if (__atomic_load_n(&cs->progress_want, __ATOMIC_ACQUIRE)) {
            int flag;
            MPI_Iprobe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_SELF, &flag, MPI_STATUS_IGNORE);
            cpu_sleep_us(PROGRESS_US);
        } else {
            cpu_sleep_us(IDLE_US);
        }
    }
    return NULL;
}

/* The thread polls: it pays when each rank has a core of its own, and
 * costs compute when ranks share cores (measured, bench/overlap_study.py:
 * 8 ranks on 2 cores ran 5-15% slower with it, 2 ranks on 2 cores not).
 * So it runs only when MPI grants MPI_THREAD_MULTIPLE and this node's ranks
 * have at least a CPU each. */
void cpu_async_init(rt_ctx *rt) {
    rt_cpu_state *cs = cpu_state(rt);
    /* The CPUs any rank of this node may run on (the union of their
     * affinities: mpirun may bind each rank to a core of its own) against
     * the node's ranks. */
    MPI_Comm node;
    int local = 1, cpus = 0;
    RT_MPI(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rt->rank, MPI_INFO_NULL, &node));
    RT_MPI(MPI_Comm_size(node, &local));
    cpu_set_t set;
    int *mine = RT_MALLOC(sizeof(int) * 2 * CPU_SETSIZE), *all = mine + CPU_SETSIZE;
    bool known = sched_getaffinity(0, sizeof set, &set) == 0;
    for (int c = 0; c < CPU_SETSIZE; c++) mine[c] = known ? CPU_ISSET(c, &set) != 0 : c == 0;
    RT_MPI(MPI_Allreduce(mine, all, CPU_SETSIZE, MPI_INT, MPI_MAX, node));
    for (int c = 0; c < CPU_SETSIZE; c++) cpus += all[c];
    free(mine);
    MPI_Comm_free(&node);
    cs->progress_ok = rt_mpi_threads == MPI_THREAD_MULTIPLE && local <= cpus;
    if (cs->progress_ok)
        snprintf(rt->progress_note, sizeof rt->progress_note, "MPI progress thread on (%d rank(s) on %d CPU(s))", local,
                 cpus);
    else if (rt_mpi_threads != MPI_THREAD_MULTIPLE)
        snprintf(rt->progress_note, sizeof rt->progress_note,
                 "MPI progress between kernels only (MPI grants no "
                 "MPI_THREAD_MULTIPLE)");
    else
        snprintf(rt->progress_note, sizeof rt->progress_note,
                 "MPI progress between kernels only (%d ranks share "
                 "%d CPU(s): a polling thread would cost compute)",
                 local, cpus);
}

/* Starts the progress thread the first time a collective is started, when
 * cpu_async_init allowed it. */
static void cpu_progress_start(rt_cpu_state *cs) {
    if (cs->progress_running || !cs->progress_ok) return;
    cs->progress_stop = cs->progress_want = 0;
    int rc = pthread_create(&cs->progress, NULL, cpu_progress_main, cs);
    RT_CHECK(rc == 0, "cannot start the MPI progress thread: %s", strerror(rc));
    cs->progress_running = true;
}

static void cpu_progress_want(rt_cpu_state *cs) {
    __atomic_store_n(&cs->progress_want, cs->nasync > 0, __ATOMIC_RELEASE);
}

void cpu_async_shutdown(rt_ctx *rt) {
    rt_cpu_state *cs = cpu_state(rt);
    if (!cs->progress_running) return;
    __atomic_store_n(&cs->progress_stop, 1, __ATOMIC_RELEASE);
    pthread_join(cs->progress, NULL);
    cs->progress_running = false;
}

struct cpu_async {
    MPI_Request req;
    int nouts, outs[RT_A2A_MAX]; /* the results: what a wait names */
    rt_coll_kind kind;
    int64_t bytes;              /* sent by this rank */
    double t_start;             /* the start call's entry */
    double exposed;             /* seconds spent in the start and wait calls */
    double t_done;              /* when a test or the wait saw it complete, 0 before */
    cpu_async_finish_fn finish; /* at the wait, after the request (an exchange's unpack) */
    void *arg;
};

static struct cpu_async *cpu_async_push(rt_cpu_state *cs) {
    if (cs->nasync == cs->cap_async) {
        cs->cap_async = cs->cap_async ? 2 * cs->cap_async : 16;
        cs->async = realloc(cs->async, sizeof(struct cpu_async) * (size_t)cs->cap_async);
        RT_CHECK(cs->async, "out of memory");
    }
    return &cs->async[cs->nasync++];
}

/* The in-flight collective with result v, or -1. */
static int cpu_async_find(const rt_cpu_state *cs, int v) {
    for (int i = 0; i < cs->nasync; i++)
        for (int k = 0; k < cs->async[i].nouts; k++)
            if (cs->async[i].outs[k] == v) return i;
    return -1;
}

void cpu_async_add(rt_ctx *rt, MPI_Request req, int nouts, const int *outs, rt_coll_kind kind, int64_t bytes,
                   double t_start, cpu_async_finish_fn finish, void *arg) {
    rt_cpu_state *cs = cpu_state(rt);
    RT_CHECK(nouts >= 1 && nouts <= RT_A2A_MAX, "a started collective with %d results", nouts);
    for (int k = 0; k < nouts; k++)
        RT_CHECK(cpu_async_find(cs, outs[k]) < 0, "%s: started again before its wait", rt_coll_val(rt, outs[k])->name);
    struct cpu_async *a = cpu_async_push(cs);
    *a = (struct cpu_async){.req = req,
                            .nouts = nouts,
                            .kind = kind,
                            .bytes = bytes,
                            .t_start = t_start,
                            .exposed = rt_now() - t_start,
                            .finish = finish,
                            .arg = arg};
    memcpy(a->outs, outs, sizeof(int) * (size_t)nouts);
    cpu_progress_start(cs);
    cpu_progress_want(cs);
}

void rt_comm_progress(rt_ctx *rt) {
    rt_cpu_state *cs = cpu_state(rt);
    for (int i = 0; i < cs->nasync; i++) {
        struct cpu_async *a = &cs->async[i];
        if (a->t_done > 0) continue;
        int done = 1;
        if (a->req != MPI_REQUEST_NULL) RT_MPI(MPI_Test(&a->req, &done, MPI_STATUS_IGNORE));
        if (done) a->t_done = rt_now();
    }
}

/* Completes collective i: its request, then its finish (the unpack of an
 * exchange, whose time counts as the wait's). */
static void cpu_async_complete(rt_ctx *rt, int i) {
    rt_cpu_state *cs = cpu_state(rt);
    struct cpu_async a = cs->async[i];
    double t0 = rt_now();
    if (a.req != MPI_REQUEST_NULL) RT_MPI(MPI_Wait(&a.req, MPI_STATUS_IGNORE));
    if (a.t_done <= 0) a.t_done = rt_now();
    if (a.finish) a.finish(rt, a.arg);
    double t1 = rt_now();
    rt_coll_count_async(rt, a.kind, a.bytes, a.exposed + (t1 - t0), a.t_start, a.t_done);
    cs->async[i] = cs->async[--cs->nasync];
    cpu_progress_want(cs);
}

/* A wait names every result of the collectives it completes (the IR's
 * rule): a name whose collective this call has already completed is one
 * of those, and needs nothing more. */
void rt_wait(rt_ctx *rt, int n, const int *vals) {
    rt_cpu_state *cs = cpu_state(rt);
    /* The results completed so far; a wait names a few values, so they
     * fit on the stack but for unusually long waits (no malloc per wait). */
    int small[64], ndone = 0;
    size_t need = (size_t)n * RT_A2A_MAX;
    int *done = need <= sizeof small / sizeof small[0] ? small : RT_MALLOC(sizeof(int) * need);
    for (int k = 0; k < n; k++) {
        int i = cpu_async_find(cs, vals[k]);
        if (i >= 0) {
            for (int j = 0; j < cs->async[i].nouts; j++) done[ndone++] = cs->async[i].outs[j];
            cpu_async_complete(rt, i);
            continue;
        }
        bool here = false;
        for (int j = 0; j < ndone && !here; j++) here = done[j] == vals[k];
        RT_CHECK(here, "wait %s: no started collective in flight defines it", rt_coll_val(rt, vals[k])->name);
    }
    if (done != small) free(done);
}

void cpu_async_finish_step(rt_ctx *rt) {
    rt_cpu_state *cs = cpu_state(rt);
    RT_CHECK(cs->nasync == 0,
             "%d started collective(s) still in flight at the end of the step (the first: %s): the "
             "program must wait for each",
             cs->nasync, rt_coll_val(rt, cs->async[0].outs[0])->name);
}
