/* rt_async.c — started collectives on the CPU backend (IR `async = 1` and
 * `wait`, ir/README.md "Asynchronous collectives"): the requests in flight,
 * progress, and the wait.
 *
 * A start (rt_all_gather_start, cpu/rt_comm.c) posts MPI's nonblocking
 * form of the collective (MPI_Iallgather), records it here and returns; the step goes on computing while the data move, and the
 * wait completes the request.  MPI implementations move a nonblocking
 * collective only inside MPI calls (Open MPI's libnbc schedules its rounds
 * from the progress engine), so the runtime lends it the CPU between
 * kernels: after every kernel call (rt_kern_count) one MPI_Test per request
 * in flight.  A kernel runs uninterrupted; what overlaps it is whatever
 * the network and the peers do without this rank's help (eager messages,
 * shared-memory copies by the peer), and each boundary advances the rest.
 *
 * The gather moves bytes and does no arithmetic, so a started schedule's
 * results are bit-for-bit those of the blocking one.  The data land in the
 * result's own buffer (codegen admits only gathers whose blocks need no
 * interleaving: every dim before the gathered one has one entry), and the
 * operand and result stay live until the wait (the memory plan extends
 * them to it, ir_mem_live), so a start needs no staging of its own. */
#include <stdlib.h>

#include "rt_internal.h"

struct rt_async {
    MPI_Request req;
    int out;          /* the result value: what a wait names */
    rt_coll_kind kind;
    int64_t bytes;    /* sent by this rank */
    double t_start;   /* the start call's entry */
    double exposed;   /* seconds spent in the start and wait calls */
    double t_done;    /* when a test or the wait saw it complete, 0 before */
};

static struct rt_async *rt_async_push(rt_ctx *rt) {
    if (rt->nasync == rt->cap_async) {
        rt->cap_async = rt->cap_async ? 2 * rt->cap_async : 16;
        rt->async = realloc(rt->async, sizeof(struct rt_async) * (size_t)rt->cap_async);
        RT_CHECK(rt->async, "out of memory");
    }
    return &rt->async[rt->nasync++];
}

void rt_async_add(rt_ctx *rt, MPI_Request req, int out, rt_coll_kind kind, int64_t bytes, double t_start) {
    for (int i = 0; i < rt->nasync; i++)
        RT_CHECK(rt->async[i].out != out, "%s: started again before its wait", rt_coll_val(rt, out)->name);
    struct rt_async *a = rt_async_push(rt);
    *a = (struct rt_async){.req = req, .out = out, .kind = kind, .bytes = bytes, .t_start = t_start,
                           .exposed = rt_now() - t_start};
}

void rt_comm_progress(rt_ctx *rt) {
    for (int i = 0; i < rt->nasync; i++) {
        struct rt_async *a = &rt->async[i];
        if (a->t_done > 0) continue;
        int done = 1;
        if (a->req != MPI_REQUEST_NULL) RT_MPI(MPI_Test(&a->req, &done, MPI_STATUS_IGNORE));
        if (done) a->t_done = rt_now();
    }
}

void rt_wait(rt_ctx *rt, int n, const int *vals) {
    for (int k = 0; k < n; k++) {
        int i = 0;
        while (i < rt->nasync && rt->async[i].out != vals[k]) i++;
        RT_CHECK(i < rt->nasync, "wait %s: no started collective in flight defines it",
                 rt_coll_val(rt, vals[k])->name);
        struct rt_async a = rt->async[i];
        double t0 = rt_now();
        if (a.req != MPI_REQUEST_NULL) RT_MPI(MPI_Wait(&a.req, MPI_STATUS_IGNORE));
        double t1 = rt_now();
        if (a.t_done <= 0) a.t_done = t1;
        rt_coll_count_async(rt, a.kind, a.bytes, a.exposed + (t1 - t0), a.t_start, a.t_done);
        rt->async[i] = rt->async[--rt->nasync];
    }
}

void rt_async_finish_step(rt_ctx *rt) {
    RT_CHECK(rt->nasync == 0, "%d started collective(s) still in flight at the end of the step (the first: %s): the "
             "program must wait for each", rt->nasync, rt_coll_val(rt, rt->async[0].out)->name);
}
