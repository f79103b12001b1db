/* mpi1.c — the one-process MPI of mpi.h beside it (kit/README.md).
 *
 * World size 1: every collective is a copy from the input to the output
 * buffer (none when the input is MPI_IN_PLACE), and point-to-point
 * messages go from the process to itself.  A send is buffered at once (a
 * copy), so it completes locally; a receive takes the oldest buffered send
 * of its communicator and tag, or waits posted until one arrives.  Waiting
 * on a receive that no send can match would block forever in a real MPI;
 * here it is an error with a message.  Errors print one line naming the
 * call and return MPI_ERR_OTHER, which the runtime's RT_MPI check reports
 * with its file and line. */
#define _POSIX_C_SOURCE 200809L
#include "mpi.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int mpi1_inited, mpi1_finalized, mpi1_next_comm = 2;

static int mpi1_fail(const char *call, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "mpi1: %s: ", call);
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    return MPI_ERR_OTHER;
}

static size_t mpi1_size(MPI_Datatype t) { return (size_t)(t >> 4); }

static int mpi1_check_type(const char *call, MPI_Datatype t) {
    int kind = t & 15, size = t >> 4;
    if (kind > 8 || (size != 1 && size != 4 && size != 8)) return mpi1_fail(call, "unknown datatype %d", t);
    return MPI_SUCCESS;
}

/* Valid communicators are MPI_COMM_WORLD, MPI_COMM_SELF and those split
 * from them (numbered from 2 up; a freed one is not reused). */
static int mpi1_check_comm(const char *call, MPI_Comm c) {
    if (c < 0 || c >= mpi1_next_comm) return mpi1_fail(call, "invalid communicator %d", c);
    return MPI_SUCCESS;
}

static int mpi1_check_rank(const char *call, int rank, int any) {
    if (rank == 0 || (any && rank == MPI_ANY_SOURCE)) return MPI_SUCCESS;
    return mpi1_fail(call,
                     "rank %d does not exist: this MPI runs one process (kit/README.md); "
                     "several ranks need a real MPI",
                     rank);
}

/* in -> out for a collective of one process: same byte count both sides. */
static int mpi1_copy(const char *call, const void *in, size_t inbytes, void *out, size_t outbytes) {
    if (in == MPI_IN_PLACE) return MPI_SUCCESS;
    if (inbytes != outbytes)
        return mpi1_fail(call, "sends %zu bytes but receives %zu (a one-process collective moves the same bytes)",
                         inbytes, outbytes);
    if (inbytes && in != out) memmove(out, in, inbytes);
    return MPI_SUCCESS;
}

#define MPI1_CHECK(x)                                                                                                  \
    do {                                                                                                               \
        int rc_ = (x);                                                                                                 \
        if (rc_ != MPI_SUCCESS) return rc_;                                                                            \
    } while (0)

/* ---- environment -------------------------------------------------------------- */
int MPI_Init(int *argc, char ***argv) {
    (void)argc, (void)argv;
    if (mpi1_inited) return mpi1_fail("MPI_Init", "called twice");
    mpi1_inited = 1;
    return MPI_SUCCESS;
}
/* The kit serves one thread (the CUDA backend's host code): it grants
 * MPI_THREAD_SINGLE, so the CPU backend's progress thread never starts. */
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided) {
    (void)required;
    *provided = MPI_THREAD_SINGLE;
    return MPI_Init(argc, argv);
}
int MPI_Initialized(int *flag) {
    *flag = mpi1_inited;
    return MPI_SUCCESS;
}
int MPI_Finalized(int *flag) {
    *flag = mpi1_finalized;
    return MPI_SUCCESS;
}
int MPI_Finalize(void) {
    mpi1_finalized = 1;
    return MPI_SUCCESS;
}
int MPI_Abort(MPI_Comm comm, int code) {
    (void)comm;
    fflush(NULL);
    exit(code ? code : 1);
}
int MPI_Error_string(int code, char *s, int *len) {
    const char *m = code == MPI_SUCCESS ? "no error" : "error in the one-process MPI (its message is printed above)";
    *len = snprintf(s, MPI_MAX_ERROR_STRING, "%s", m);
    return MPI_SUCCESS;
}
double MPI_Wtime(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- communicators --------------------------------------------------------------- */
int MPI_Comm_rank(MPI_Comm c, int *rank) {
    MPI1_CHECK(mpi1_check_comm("MPI_Comm_rank", c));
    *rank = 0;
    return MPI_SUCCESS;
}
int MPI_Comm_size(MPI_Comm c, int *size) {
    MPI1_CHECK(mpi1_check_comm("MPI_Comm_size", c));
    *size = 1;
    return MPI_SUCCESS;
}
int MPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm *out) {
    (void)key;
    MPI1_CHECK(mpi1_check_comm("MPI_Comm_split", c));
    *out = color == MPI_UNDEFINED ? MPI_COMM_NULL : mpi1_next_comm++;
    return MPI_SUCCESS;
}
int MPI_Comm_split_type(MPI_Comm c, int type, int key, MPI_Info info, MPI_Comm *out) {
    (void)info;
    return MPI_Comm_split(c, type == MPI_UNDEFINED ? MPI_UNDEFINED : 0, key, out);
}
int MPI_Comm_free(MPI_Comm *c) {
    MPI1_CHECK(mpi1_check_comm("MPI_Comm_free", *c));
    if (*c < 2) return mpi1_fail("MPI_Comm_free", "cannot free a predefined communicator");
    *c = MPI_COMM_NULL;
    return MPI_SUCCESS;
}

int MPI_Comm_group(MPI_Comm c, MPI_Group *g) {
    MPI1_CHECK(mpi1_check_comm("MPI_Comm_group", c));
    *g = 0;
    return MPI_SUCCESS;
}
int MPI_Group_incl(MPI_Group g, int n, const int ranks[], MPI_Group *out) {
    (void)g;
    if (n != 1 || ranks[0] != 0) return mpi1_fail("MPI_Group_incl", "one process: only the group of rank 0");
    *out = 0;
    return MPI_SUCCESS;
}
int MPI_Group_free(MPI_Group *g) {
    *g = -1;
    return MPI_SUCCESS;
}
int MPI_Comm_create_group(MPI_Comm c, MPI_Group g, int tag, MPI_Comm *out) {
    (void)g, (void)tag;
    return MPI_Comm_split(c, 0, 0, out);
}

/* ---- collectives ------------------------------------------------------------------- */
int MPI_Barrier(MPI_Comm c) { return mpi1_check_comm("MPI_Barrier", c); }

int MPI_Bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm c) {
    (void)buf, (void)count;
    MPI1_CHECK(mpi1_check_comm("MPI_Bcast", c));
    MPI1_CHECK(mpi1_check_type("MPI_Bcast", t));
    return mpi1_check_rank("MPI_Bcast", root, 0);
}

/* A reduction over one process is its input, whatever the operation. */
static int mpi1_reduce(const char *call, const void *in, void *out, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    MPI1_CHECK(mpi1_check_comm(call, c));
    MPI1_CHECK(mpi1_check_type(call, t));
    if (op < MPI_SUM || op > MPI_LAND) return mpi1_fail(call, "unknown operation %d", op);
    size_t n = (size_t)count * mpi1_size(t);
    return mpi1_copy(call, in, n, out, n);
}
int MPI_Allreduce(const void *in, void *out, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    return mpi1_reduce("MPI_Allreduce", in, out, count, t, op, c);
}
int MPI_Reduce_scatter_block(const void *in, void *out, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    return mpi1_reduce("MPI_Reduce_scatter_block", in, out, count, t, op, c);
}

/* The nonblocking forms complete at once in one process: null requests. */
int MPI_Iallreduce(const void *in, void *out, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c, MPI_Request *req) {
    *req = MPI_REQUEST_NULL;
    return mpi1_reduce("MPI_Iallreduce", in, out, count, t, op, c);
}
int MPI_Ireduce_scatter_block(const void *in, void *out, int count, MPI_Datatype t, MPI_Op op, MPI_Comm c,
                              MPI_Request *req) {
    *req = MPI_REQUEST_NULL;
    return mpi1_reduce("MPI_Ireduce_scatter_block", in, out, count, t, op, c);
}

/* Gathers, scatters and all-to-alls of one process: one block, copied. */
static int mpi1_block(const char *call, const void *in, int incount, MPI_Datatype it, void *out, int outcount,
                      MPI_Datatype ot, int root, MPI_Comm c) {
    MPI1_CHECK(mpi1_check_comm(call, c));
    MPI1_CHECK(mpi1_check_type(call, it));
    MPI1_CHECK(mpi1_check_type(call, ot));
    MPI1_CHECK(mpi1_check_rank(call, root, 0));
    return mpi1_copy(call, in, (size_t)incount * mpi1_size(it), out, (size_t)outcount * mpi1_size(ot));
}
int MPI_Allgather(const void *in, int ic, MPI_Datatype it, void *out, int oc, MPI_Datatype ot, MPI_Comm c) {
    return mpi1_block("MPI_Allgather", in, ic, it, out, oc, ot, 0, c);
}
int MPI_Iallgather(const void *in, int ic, MPI_Datatype it, void *out, int oc, MPI_Datatype ot, MPI_Comm c,
                   MPI_Request *req) {
    *req = MPI_REQUEST_NULL;
    return mpi1_block("MPI_Iallgather", in, ic, it, out, oc, ot, 0, c);
}
int MPI_Gather(const void *in, int ic, MPI_Datatype it, void *out, int oc, MPI_Datatype ot, int root, MPI_Comm c) {
    return mpi1_block("MPI_Gather", in, ic, it, out, oc, ot, root, c);
}
int MPI_Gatherv(const void *in, int ic, MPI_Datatype it, void *out, const int *oc, const int *od, MPI_Datatype ot,
                int root, MPI_Comm c) {
    return mpi1_block("MPI_Gatherv", in, ic, it, (char *)out + (size_t)od[0] * mpi1_size(ot), oc[0], ot, root, c);
}
int MPI_Scatter(const void *in, int ic, MPI_Datatype it, void *out, int oc, MPI_Datatype ot, int root, MPI_Comm c) {
    /* The root's input is the whole buffer; MPI_IN_PLACE is on the output side. */
    if (out == MPI_IN_PLACE) return mpi1_block("MPI_Scatter", MPI_IN_PLACE, 0, it, NULL, 0, ot, root, c);
    return mpi1_block("MPI_Scatter", in, ic, it, out, oc, ot, root, c);
}
int MPI_Alltoall(const void *in, int ic, MPI_Datatype it, void *out, int oc, MPI_Datatype ot, MPI_Comm c) {
    return mpi1_block("MPI_Alltoall", in, ic, it, out, oc, ot, 0, c);
}
int MPI_Alltoallv(const void *in, const int *ic, const int *id, MPI_Datatype it, void *out, const int *oc,
                  const int *od, MPI_Datatype ot, MPI_Comm c) {
    const char *src = in == MPI_IN_PLACE ? in : (const char *)in + (size_t)id[0] * mpi1_size(it);
    return mpi1_block("MPI_Alltoallv", src, in == MPI_IN_PLACE ? 0 : ic[0], it,
                      (char *)out + (size_t)od[0] * mpi1_size(ot), in == MPI_IN_PLACE ? 0 : oc[0], ot, 0, c);
}
/* One process: the nonblocking forms complete at once. */
int MPI_Ialltoall(const void *in, int ic, MPI_Datatype it, void *out, int oc, MPI_Datatype ot, MPI_Comm c,
                  MPI_Request *req) {
    *req = MPI_REQUEST_NULL;
    return MPI_Alltoall(in, ic, it, out, oc, ot, c);
}
int MPI_Ialltoallv(const void *in, const int *ic, const int *id, MPI_Datatype it, void *out, const int *oc,
                   const int *od, MPI_Datatype ot, MPI_Comm c, MPI_Request *req) {
    *req = MPI_REQUEST_NULL;
    return MPI_Alltoallv(in, ic, id, it, out, oc, od, ot, c);
}

/* ---- messages to oneself ---------------------------------------------------------------- */
typedef struct mpi1_msg {
    int used, comm, tag;
    int is_recv, done; /* a posted receive, and whether a send has filled it */
    void *buf;         /* send: a copy owned here; receive: the user's buffer */
    size_t bytes;
} mpi1_msg;

static mpi1_msg *mpi1_q;
static int mpi1_nq;

static int mpi1_slot(void) {
    for (int i = 0; i < mpi1_nq; i++)
        if (!mpi1_q[i].used) return i;
    mpi1_msg *q = realloc(mpi1_q, sizeof *q * (size_t)(mpi1_nq + 16));
    if (!q) return -1;
    memset(q + mpi1_nq, 0, sizeof *q * 16);
    mpi1_q = q;
    mpi1_nq += 16;
    return mpi1_nq - 16;
}

/* The oldest pending entry of the other kind that matches (comm, tag). */
static int mpi1_match(int is_recv, int comm, int tag) {
    for (int i = 0; i < mpi1_nq; i++) {
        mpi1_msg *m = &mpi1_q[i];
        if (!m->used || m->is_recv == is_recv || m->done || m->comm != comm) continue;
        if (m->tag == tag || tag == MPI_ANY_TAG || (m->is_recv && m->tag == MPI_ANY_TAG)) return i;
    }
    return -1;
}

static int mpi1_deliver(const char *call, void *dst, size_t cap, const void *src, size_t bytes) {
    if (bytes > cap) return mpi1_fail(call, "message of %zu bytes into a receive of %zu (truncated)", bytes, cap);
    if (bytes) memcpy(dst, src, bytes);
    return MPI_SUCCESS;
}

int MPI_Isend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c, MPI_Request *req) {
    MPI1_CHECK(mpi1_check_comm("MPI_Isend", c));
    MPI1_CHECK(mpi1_check_type("MPI_Isend", t));
    MPI1_CHECK(mpi1_check_rank("MPI_Isend", dest, 0));
    size_t bytes = (size_t)count * mpi1_size(t);
    *req = MPI_REQUEST_NULL; /* buffered: complete at once */
    int r = mpi1_match(0, c, tag);
    if (r >= 0) {
        mpi1_q[r].done = 1;
        int rc = mpi1_deliver("MPI_Isend", mpi1_q[r].buf, mpi1_q[r].bytes, buf, bytes);
        mpi1_q[r].bytes = bytes;
        return rc;
    }
    int s = mpi1_slot();
    void *copy = malloc(bytes ? bytes : 1);
    if (s < 0 || !copy) {
        free(copy);
        return mpi1_fail("MPI_Isend", "out of memory buffering %zu bytes", bytes);
    }
    if (bytes) memcpy(copy, buf, bytes);
    mpi1_q[s] = (mpi1_msg){.used = 1, .comm = c, .tag = tag, .buf = copy, .bytes = bytes};
    return MPI_SUCCESS;
}

int MPI_Send(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm c) {
    MPI_Request r;
    return MPI_Isend(buf, count, t, dest, tag, c, &r);
}

int MPI_Irecv(void *buf, int count, MPI_Datatype t, int source, int tag, MPI_Comm c, MPI_Request *req) {
    MPI1_CHECK(mpi1_check_comm("MPI_Irecv", c));
    MPI1_CHECK(mpi1_check_type("MPI_Irecv", t));
    MPI1_CHECK(mpi1_check_rank("MPI_Irecv", source, 1));
    size_t cap = (size_t)count * mpi1_size(t);
    int s = mpi1_match(1, c, tag);
    if (s >= 0) {
        *req = MPI_REQUEST_NULL;
        int rc = mpi1_deliver("MPI_Irecv", buf, cap, mpi1_q[s].buf, mpi1_q[s].bytes);
        free(mpi1_q[s].buf);
        mpi1_q[s] = (mpi1_msg){0};
        return rc;
    }
    int r = mpi1_slot();
    if (r < 0) return mpi1_fail("MPI_Irecv", "out of memory");
    mpi1_q[r] = (mpi1_msg){.used = 1, .comm = c, .tag = tag, .is_recv = 1, .buf = buf, .bytes = cap};
    *req = r;
    return MPI_SUCCESS;
}

int MPI_Wait(MPI_Request *req, MPI_Status *st) {
    if (st) *st = (MPI_Status){0};
    if (*req == MPI_REQUEST_NULL) return MPI_SUCCESS;
    if (*req < 0 || *req >= mpi1_nq || !mpi1_q[*req].used || !mpi1_q[*req].is_recv)
        return mpi1_fail("MPI_Wait", "invalid request %d", *req);
    mpi1_msg *m = &mpi1_q[*req];
    if (!m->done)
        return mpi1_fail("MPI_Wait", "a receive (tag %d) that no send of this process matches would wait forever",
                         m->tag);
    if (st) st->count_bytes = (int)m->bytes;
    *m = (mpi1_msg){0};
    *req = MPI_REQUEST_NULL;
    return MPI_SUCCESS;
}

/* No message is ever pending for a probe: sends of one process are matched
 * by its receives at once. */
int MPI_Iprobe(int source, int tag, MPI_Comm c, int *flag, MPI_Status *st) {
    (void)source, (void)tag;
    MPI1_CHECK(mpi1_check_comm("MPI_Iprobe", c));
    *flag = 0;
    if (st) *st = (MPI_Status){0};
    return MPI_SUCCESS;
}

int MPI_Test(MPI_Request *req, int *flag, MPI_Status *st) {
    *flag = *req == MPI_REQUEST_NULL || *req < 0 || *req >= mpi1_nq || !mpi1_q[*req].used || mpi1_q[*req].done;
    return *flag ? MPI_Wait(req, st) : MPI_SUCCESS; /* MPI_Wait reports a bad request */
}

int MPI_Waitall(int n, MPI_Request *reqs, MPI_Status *sts) {
    for (int i = 0; i < n; i++) MPI1_CHECK(MPI_Wait(&reqs[i], sts ? &sts[i] : MPI_STATUS_IGNORE));
    return MPI_SUCCESS;
}

int MPI_Recv(void *buf, int count, MPI_Datatype t, int source, int tag, MPI_Comm c, MPI_Status *st) {
    MPI_Request r;
    MPI1_CHECK(MPI_Irecv(buf, count, t, source, tag, c, &r));
    return MPI_Wait(&r, st);
}
