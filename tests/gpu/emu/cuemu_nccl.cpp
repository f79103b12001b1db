// cuemu_nccl.cpp — the NCCL calls the backend makes, carried out over MPI
// in the stream they are issued on: each communicator is an MPI
// communicator of its own; bf16 sums are done in fp32.  Group calls
// (ncclGroupStart/End) post their sends and receives together, so a
// grouped exchange cannot deadlock, as in NCCL.
//
// Streams run lazily (cuemu_stream.cpp), so before any blocking MPI call of
// the program itself every stream is run first: on a GPU the queued
// collectives would make progress on their own while the host waits.  The
// MPI profiling interface makes that possible: the MPI_ functions below
// flush and then call the library's PMPI_ ones.
// The C API only: no MPI C++ bindings (a library of their own).
#define OMPI_SKIP_MPICXX 1
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#include <nccl.h>
#include <cuda_bf16.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vector>

#include "cuemu_internal.h"

struct ncclComm {
    MPI_Comm mpi;
    int rank, size;
};

namespace {

struct P2p {
    bool send;
    void *buf;
    size_t bytes;
    int peer;
    ncclComm_t comm;
};

int group_depth = 0;
cudaStream_t group_stream = nullptr;
std::vector<P2p> group_p2p;
std::vector<std::function<void()>> group_coll;

size_t esize(ncclDataType_t t) {
    switch (t) {
    case ncclInt8: case ncclUint8: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    default: return 8;
    }
}

bool type_ok(ncclDataType_t t) { return t == ncclInt32 || t == ncclFloat32 || t == ncclBfloat16; }

void die_mpi(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return;
    cuemu_warn("%s failed (MPI error %d)", what, rc);
    abort();
}

// Sum of n values of type t over comm into out (in may equal out).
void allreduce(const void *in, void *out, size_t n, ncclDataType_t t, MPI_Comm comm) {
    if (t == ncclBfloat16) {
        std::vector<float> f(n);
        for (size_t i = 0; i < n; i++) f[i] = __bfloat162float(((const __nv_bfloat16 *)in)[i]);
        die_mpi(PMPI_Allreduce(MPI_IN_PLACE, f.data(), (int)n, MPI_FLOAT, MPI_SUM, comm), "ncclAllReduce");
        for (size_t i = 0; i < n; i++) ((__nv_bfloat16 *)out)[i] = __float2bfloat16(f[i]);
        return;
    }
    if (in != out) memcpy(out, in, n * esize(t));
    die_mpi(PMPI_Allreduce(MPI_IN_PLACE, out, (int)n, t == ncclInt32 ? MPI_INT : MPI_FLOAT, MPI_SUM, comm),
            "ncclAllReduce");
}

void p2p_all(const std::vector<P2p> &ops) {
    std::vector<MPI_Request> req(ops.size());
    for (size_t i = 0; i < ops.size(); i++) {
        const P2p &o = ops[i];
        int rc = o.send ? PMPI_Isend(o.buf, (int)o.bytes, MPI_BYTE, o.peer, 0, o.comm->mpi, &req[i])
                        : PMPI_Irecv(o.buf, (int)o.bytes, MPI_BYTE, o.peer, 0, o.comm->mpi, &req[i]);
        die_mpi(rc, o.send ? "ncclSend" : "ncclRecv");
    }
    die_mpi(PMPI_Waitall((int)req.size(), req.data(), MPI_STATUSES_IGNORE), "ncclGroupEnd");
}

ncclResult_t check(ncclComm_t comm, const void *buf, size_t bytes, ncclDataType_t t, const char *what) {
    if (!comm) {
        cuemu_warn("%s: no communicator", what);
        return ncclInvalidArgument;
    }
    if (!type_ok(t)) {
        cuemu_warn("%s: data type %d is not emulated", what, (int)t);
        return ncclInvalidArgument;
    }
    if (bytes && !cuemu_is_device(buf, bytes)) {
        cuemu_warn("%s: %zu bytes at %p are not inside one device allocation", what, bytes, buf);
        return ncclInvalidArgument;
    }
    if (bytes / esize(t) > 0x7fffffff) {
        cuemu_warn("%s: over 2^31 elements", what);
        return ncclInvalidArgument;
    }
    return ncclSuccess;
}

// Collectives inside a group run at ncclGroupEnd, in order.
void issue(cudaStream_t st, std::function<void()> op) {
    if (group_depth) {
        group_stream = st;
        group_coll.push_back(std::move(op));
    } else {
        cuemu_enqueue(st, std::move(op));
    }
}

} // namespace

extern "C" {

const char *ncclGetErrorString(ncclResult_t r) {
    switch (r) {
    case ncclSuccess: return "no error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclSystemError: return "system error";
    default: return "cuemu: unlisted NCCL error";
    }
}

ncclResult_t ncclGetUniqueId(ncclUniqueId *id) {
    if (!id) return ncclInvalidArgument;
    memset(id, 0, sizeof *id);
    snprintf(id->internal, sizeof id->internal, "cuemu");
    return ncclSuccess;
}

// The emulator builds communicators over MPI_COMM_WORLD only: nranks must
// be the world's size and rank the MPI rank.
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId id, int rank) {
    (void)id;
    int wr, ws;
    PMPI_Comm_rank(MPI_COMM_WORLD, &wr);
    PMPI_Comm_size(MPI_COMM_WORLD, &ws);
    if (!comm || nranks != ws || rank != wr) {
        cuemu_warn("ncclCommInitRank(nranks %d, rank %d): the emulator needs the MPI world (%d ranks, rank %d)",
                   nranks, rank, ws, wr);
        return ncclInvalidUsage;
    }
    cuemu_flush_all();
    ncclComm_t c = new ncclComm();
    die_mpi(PMPI_Comm_dup(MPI_COMM_WORLD, &c->mpi), "ncclCommInitRank");
    c->rank = rank;
    c->size = nranks;
    *comm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm, ncclConfig_t *config) {
    (void)config;
    if (!comm || !newcomm) return ncclInvalidArgument;
    cuemu_flush_all();
    MPI_Comm m;
    die_mpi(PMPI_Comm_split(comm->mpi, color == NCCL_SPLIT_NOCOLOR ? MPI_UNDEFINED : color, key, &m),
            "ncclCommSplit");
    if (m == MPI_COMM_NULL) {
        *newcomm = nullptr;
        return ncclSuccess;
    }
    ncclComm_t c = new ncclComm();
    c->mpi = m;
    PMPI_Comm_rank(m, &c->rank);
    PMPI_Comm_size(m, &c->size);
    *newcomm = c;
    return ncclSuccess;
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) {
    if (!comm) return ncclSuccess;
    cuemu_flush_all();
    PMPI_Comm_free(&comm->mpi);
    delete comm;
    return ncclSuccess;
}

ncclResult_t ncclGroupStart(void) {
    group_depth++;
    return ncclSuccess;
}

ncclResult_t ncclGroupEnd(void) {
    if (group_depth <= 0) {
        cuemu_warn("ncclGroupEnd without ncclGroupStart");
        return ncclInvalidUsage;
    }
    if (--group_depth) return ncclSuccess;
    std::vector<P2p> p2p;
    std::vector<std::function<void()>> coll;
    p2p.swap(group_p2p);
    coll.swap(group_coll);
    if (p2p.empty() && coll.empty()) return ncclSuccess;
    cuemu_enqueue(group_stream, [p2p, coll]() {
        for (const auto &op : coll) op();
        if (!p2p.empty()) p2p_all(p2p);
    });
    return ncclSuccess;
}

static ncclResult_t p2p(bool send, void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm,
                        cudaStream_t st) {
    const char *what = send ? "ncclSend" : "ncclRecv";
    ncclResult_t r = check(comm, buf, count * esize(t), t, what);
    if (r != ncclSuccess) return r;
    if (peer < 0 || peer >= comm->size) {
        cuemu_warn("%s: peer %d outside the communicator's %d ranks", what, peer, comm->size);
        return ncclInvalidArgument;
    }
    P2p op = {send, buf, count * esize(t), peer, comm};
    if (group_depth) {
        group_stream = st;
        group_p2p.push_back(op);
    } else {
        cuemu_enqueue(st, [op]() { p2p_all({op}); });
    }
    return ncclSuccess;
}

ncclResult_t ncclSend(const void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st) {
    return p2p(true, (void *)buf, count, t, peer, comm, st);
}

ncclResult_t ncclRecv(void *buf, size_t count, ncclDataType_t t, int peer, ncclComm_t comm, cudaStream_t st) {
    return p2p(false, buf, count, t, peer, comm, st);
}

ncclResult_t ncclAllReduce(const void *in, void *out, size_t count, ncclDataType_t t, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t st) {
    ncclResult_t r = check(comm, in, count * esize(t), t, "ncclAllReduce");
    if (r == ncclSuccess) r = check(comm, out, count * esize(t), t, "ncclAllReduce");
    if (r != ncclSuccess) return r;
    if (op != ncclSum) return ncclInvalidArgument;
    MPI_Comm m = comm->mpi;
    issue(st, [=]() { allreduce(in, out, count, t, m); });
    return ncclSuccess;
}

// out [size * count] = every rank's in [count], in rank order.
ncclResult_t ncclAllGather(const void *in, void *out, size_t count, ncclDataType_t t, ncclComm_t comm,
                           cudaStream_t st) {
    size_t b = count * esize(t);
    ncclResult_t r = check(comm, in, b, t, "ncclAllGather");
    if (r == ncclSuccess) r = check(comm, out, b * (size_t)comm->size, t, "ncclAllGather");
    if (r != ncclSuccess) return r;
    MPI_Comm m = comm->mpi;
    issue(st, [=]() {
        std::vector<char> mine((const char *)in, (const char *)in + b); // in may lie inside out
        die_mpi(PMPI_Allgather(mine.data(), (int)b, MPI_BYTE, out, (int)b, MPI_BYTE, m), "ncclAllGather");
    });
    return ncclSuccess;
}

// out [count] = this rank's slice of the sum of every rank's in [size * count].
ncclResult_t ncclReduceScatter(const void *in, void *out, size_t count, ncclDataType_t t, ncclRedOp_t op,
                               ncclComm_t comm, cudaStream_t st) {
    ncclResult_t r = check(comm, in, count * esize(t) * (size_t)comm->size, t, "ncclReduceScatter");
    if (r == ncclSuccess) r = check(comm, out, count * esize(t), t, "ncclReduceScatter");
    if (r != ncclSuccess) return r;
    if (op != ncclSum) return ncclInvalidArgument;
    MPI_Comm m = comm->mpi;
    int size = comm->size, rank = comm->rank;
    issue(st, [=]() {
        std::vector<char> sum(count * esize(t) * (size_t)size);
        allreduce(in, sum.data(), count * (size_t)size, t, m);
        memcpy(out, sum.data() + (size_t)rank * count * esize(t), count * esize(t));
    });
    return ncclSuccess;
}

// ---- the program's own blocking MPI calls: run the streams first ----------------------
int MPI_Barrier(MPI_Comm c) {
    cuemu_capture_host_call("MPI_Barrier");
    cuemu_flush_all();
    return PMPI_Barrier(c);
}
int MPI_Bcast(void *b, int n, MPI_Datatype t, int root, MPI_Comm c) {
    cuemu_capture_host_call("MPI_Bcast");
    cuemu_flush_all();
    return PMPI_Bcast(b, n, t, root, c);
}
int MPI_Allreduce(const void *s, void *r, int n, MPI_Datatype t, MPI_Op op, MPI_Comm c) {
    cuemu_capture_host_call("MPI_Allreduce");
    cuemu_flush_all();
    return PMPI_Allreduce(s, r, n, t, op, c);
}
int MPI_Allgather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, MPI_Comm c) {
    cuemu_capture_host_call("MPI_Allgather");
    cuemu_flush_all();
    return PMPI_Allgather(s, sn, st, r, rn, rt, c);
}
int MPI_Gather(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, int root, MPI_Comm c) {
    cuemu_capture_host_call("MPI_Gather");
    cuemu_flush_all();
    return PMPI_Gather(s, sn, st, r, rn, rt, root, c);
}
int MPI_Scatter(const void *s, int sn, MPI_Datatype st, void *r, int rn, MPI_Datatype rt, int root, MPI_Comm c) {
    cuemu_capture_host_call("MPI_Scatter");
    cuemu_flush_all();
    return PMPI_Scatter(s, sn, st, r, rn, rt, root, c);
}
int MPI_Recv(void *b, int n, MPI_Datatype t, int src, int tag, MPI_Comm c, MPI_Status *s) {
    cuemu_capture_host_call("MPI_Recv");
    cuemu_flush_all();
    return PMPI_Recv(b, n, t, src, tag, c, s);
}
int MPI_Wait(MPI_Request *r, MPI_Status *s) {
    cuemu_capture_host_call("MPI_Wait");
    cuemu_flush_all();
    return PMPI_Wait(r, s);
}
int MPI_Comm_split(MPI_Comm c, int color, int key, MPI_Comm *out) {
    cuemu_capture_host_call("MPI_Comm_split");
    cuemu_flush_all();
    return PMPI_Comm_split(c, color, key, out);
}
int MPI_Finalize(void) {
    cuemu_capture_host_call("MPI_Finalize");
    cuemu_flush_all();
    return PMPI_Finalize();
}

} // extern "C"
