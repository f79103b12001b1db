/* mpi.h — a one-process MPI for machines that have no MPI (kit/README.md).
 *
 * The subset of MPI-3 that basp's runtime calls, for a world of exactly one
 * process: collectives copy their input to their output, a send is matched
 * by a receive from the same process, and a receive with no matching send
 * is an error (it would wait forever).  It lets a one-GPU machine with no
 * MPI run the CUDA backend's binaries unchanged; several processes need a
 * real MPI.  Handles are small integers; the ABI is this header's own, so
 * everything that calls MPI must be compiled against it. */
#ifndef BASP_MPI1_H
#define BASP_MPI1_H

#ifdef __cplusplus
extern "C" {
#endif

typedef int MPI_Comm;
typedef int MPI_Group;    /* 0: the one process's group */
typedef int MPI_Datatype; /* the element size in bytes, times 16, plus a kind */
typedef int MPI_Op;
typedef int MPI_Info;
typedef int MPI_Request; /* index into the pending-message table, or MPI_REQUEST_NULL */
typedef struct MPI_Status {
    int MPI_SOURCE, MPI_TAG, MPI_ERROR;
    int count_bytes;
} MPI_Status;

#define MPI_SUCCESS          0
#define MPI_ERR_OTHER        15
#define MPI_MAX_ERROR_STRING 256

#define MPI_COMM_NULL        (-1)
#define MPI_COMM_WORLD       0
#define MPI_COMM_SELF        1
#define MPI_COMM_TYPE_SHARED 1
#define MPI_INFO_NULL        0
#define MPI_REQUEST_NULL     (-1)
#define MPI_STATUS_IGNORE    ((MPI_Status *)0)
#define MPI_STATUSES_IGNORE  ((MPI_Status *)0)
#define MPI_IN_PLACE         ((void *)1)
#define MPI_ANY_SOURCE       (-2)
#define MPI_ANY_TAG          (-1)
#define MPI_UNDEFINED        (-32766)

#define MPI_BYTE      ((1 << 4) | 0)
#define MPI_CHAR      ((1 << 4) | 1)
#define MPI_INT       ((4 << 4) | 2)
#define MPI_INT32_T   ((4 << 4) | 3)
#define MPI_FLOAT     ((4 << 4) | 4)
#define MPI_INT64_T   ((8 << 4) | 5)
#define MPI_LONG_LONG ((8 << 4) | 6)
#define MPI_DOUBLE    ((8 << 4) | 7)
#define MPI_UINT64_T  ((8 << 4) | 8)

#define MPI_SUM  1
#define MPI_MIN  2
#define MPI_MAX  3
#define MPI_LOR  4
#define MPI_LAND 5

/* Thread levels: one process, one thread or many, all the same here. */
enum { MPI_THREAD_SINGLE, MPI_THREAD_FUNNELED, MPI_THREAD_SERIALIZED, MPI_THREAD_MULTIPLE };
int MPI_Init(int *argc, char ***argv);
int MPI_Init_thread(int *argc, char ***argv, int required, int *provided);
int MPI_Initialized(int *flag);
int MPI_Finalize(void);
int MPI_Finalized(int *flag);
int MPI_Abort(MPI_Comm comm, int code);
int MPI_Error_string(int code, char *s, int *len);
double MPI_Wtime(void);

int MPI_Comm_rank(MPI_Comm comm, int *rank);
int MPI_Comm_size(MPI_Comm comm, int *size);
int MPI_Comm_split(MPI_Comm comm, int color, int key, MPI_Comm *out);
int MPI_Comm_split_type(MPI_Comm comm, int type, int key, MPI_Info info, MPI_Comm *out);
int MPI_Comm_free(MPI_Comm *comm);
/* Groups of the one process (batch_aware dynamic binds its groups with them). */
int MPI_Comm_group(MPI_Comm comm, MPI_Group *group);
int MPI_Group_incl(MPI_Group group, int n, const int ranks[], MPI_Group *out);
int MPI_Group_free(MPI_Group *group);
int MPI_Comm_create_group(MPI_Comm comm, MPI_Group group, int tag, MPI_Comm *out);

int MPI_Barrier(MPI_Comm comm);
int MPI_Bcast(void *buf, int count, MPI_Datatype t, int root, MPI_Comm comm);
int MPI_Allreduce(const void *in, void *out, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm);
int MPI_Reduce_scatter_block(const void *in, void *out, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm);
int MPI_Allgather(const void *in, int incount, MPI_Datatype it, void *out, int outcount, MPI_Datatype ot,
                  MPI_Comm comm);
int MPI_Ireduce_scatter_block(const void *in, void *out, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm,
                              MPI_Request *req);
int MPI_Iallreduce(const void *in, void *out, int count, MPI_Datatype t, MPI_Op op, MPI_Comm comm, MPI_Request *req);
int MPI_Iallgather(const void *in, int incount, MPI_Datatype it, void *out, int outcount, MPI_Datatype ot,
                   MPI_Comm comm, MPI_Request *req);
int MPI_Gather(const void *in, int incount, MPI_Datatype it, void *out, int outcount, MPI_Datatype ot, int root,
               MPI_Comm comm);
int MPI_Gatherv(const void *in, int incount, MPI_Datatype it, void *out, const int *outcounts, const int *displs,
                MPI_Datatype ot, int root, MPI_Comm comm);
int MPI_Scatter(const void *in, int incount, MPI_Datatype it, void *out, int outcount, MPI_Datatype ot, int root,
                MPI_Comm comm);
int MPI_Alltoall(const void *in, int incount, MPI_Datatype it, void *out, int outcount, MPI_Datatype ot, MPI_Comm comm);
int MPI_Alltoallv(const void *in, const int *incounts, const int *indispls, MPI_Datatype it, void *out,
                  const int *outcounts, const int *outdispls, MPI_Datatype ot, MPI_Comm comm);
int MPI_Ialltoall(const void *in, int incount, MPI_Datatype it, void *out, int outcount, MPI_Datatype ot, MPI_Comm comm,
                  MPI_Request *req);
int MPI_Ialltoallv(const void *in, const int *incounts, const int *indispls, MPI_Datatype it, void *out,
                   const int *outcounts, const int *outdispls, MPI_Datatype ot, MPI_Comm comm, MPI_Request *req);

int MPI_Isend(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm, MPI_Request *req);
int MPI_Irecv(void *buf, int count, MPI_Datatype t, int source, int tag, MPI_Comm comm, MPI_Request *req);
int MPI_Send(const void *buf, int count, MPI_Datatype t, int dest, int tag, MPI_Comm comm);
int MPI_Recv(void *buf, int count, MPI_Datatype t, int source, int tag, MPI_Comm comm, MPI_Status *st);
int MPI_Wait(MPI_Request *req, MPI_Status *st);
int MPI_Test(MPI_Request *req, int *flag, MPI_Status *st);
int MPI_Iprobe(int source, int tag, MPI_Comm comm, int *flag, MPI_Status *st);
int MPI_Waitall(int n, MPI_Request *reqs, MPI_Status *sts);

#ifdef __cplusplus
}
#endif
#endif
