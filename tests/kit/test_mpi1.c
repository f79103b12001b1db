/* test_mpi1.c — the one-process MPI (kit/mpi1): messages to oneself in
 * either order, collectives as copies (with displacements and in place),
 * communicators, and the errors a real MPI would turn into hangs or
 * undefined behaviour (a receive nothing can match, a second rank, a
 * truncated message). */
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "../unit/check.h"

static void test_messages(void) {
    float a[4] = {1, 2, 3, 4}, b[4] = {0}, c[4] = {0};
    MPI_Request r[2];
    /* send first: buffered, so the sender's buffer may change afterwards */
    CHECK(MPI_Isend(a, 4, MPI_FLOAT, 0, 7, MPI_COMM_WORLD, &r[0]) == MPI_SUCCESS);
    a[0] = 99;
    CHECK(MPI_Irecv(b, 4, MPI_FLOAT, 0, 7, MPI_COMM_WORLD, &r[1]) == MPI_SUCCESS);
    CHECK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE) == MPI_SUCCESS);
    CHECK(b[0] == 1 && b[3] == 4);
    /* receive first, matched by tag: tag 2's data lands in c, tag 1's in b */
    CHECK(MPI_Irecv(b, 4, MPI_FLOAT, 0, 1, MPI_COMM_WORLD, &r[0]) == MPI_SUCCESS);
    CHECK(MPI_Irecv(c, 4, MPI_FLOAT, 0, 2, MPI_COMM_WORLD, &r[1]) == MPI_SUCCESS);
    float x[4] = {5, 6, 7, 8}, y[4] = {9, 10, 11, 12};
    MPI_Request s;
    CHECK(MPI_Isend(y, 4, MPI_FLOAT, 0, 2, MPI_COMM_WORLD, &s) == MPI_SUCCESS);
    CHECK(MPI_Isend(x, 4, MPI_FLOAT, 0, 1, MPI_COMM_WORLD, &s) == MPI_SUCCESS);
    CHECK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE) == MPI_SUCCESS);
    CHECK(b[0] == 5 && c[0] == 9 && c[3] == 12);
    /* another communicator does not match */
    MPI_Comm sub;
    CHECK(MPI_Comm_split(MPI_COMM_WORLD, 3, 0, &sub) == MPI_SUCCESS);
    CHECK(MPI_Isend(x, 4, MPI_FLOAT, 0, 5, sub, &s) == MPI_SUCCESS);
    CHECK(MPI_Irecv(b, 4, MPI_FLOAT, 0, 5, MPI_COMM_WORLD, &r[0]) == MPI_SUCCESS);
    fprintf(stderr, "(an expected error follows)\n");
    CHECK(MPI_Wait(&r[0], MPI_STATUS_IGNORE) != MPI_SUCCESS); /* would hang */
    CHECK(MPI_Recv(c, 4, MPI_FLOAT, 0, 5, sub, MPI_STATUS_IGNORE) == MPI_SUCCESS);
    CHECK(c[0] == 5);
    CHECK(MPI_Comm_free(&sub) == MPI_SUCCESS && sub == MPI_COMM_NULL);
}

static void test_collectives(void) {
    int rank = -1, size = -1;
    CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank) == MPI_SUCCESS && rank == 0);
    CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size) == MPI_SUCCESS && size == 1);
    float in[6] = {1, 2, 3, 4, 5, 6}, out[6] = {0};
    CHECK(MPI_Allreduce(in, out, 6, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(memcmp(in, out, sizeof in) == 0);
    CHECK(MPI_Allreduce(MPI_IN_PLACE, out, 6, MPI_FLOAT, MPI_MAX, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(out[5] == 6);
    int ic[1] = {2}, id[1] = {3}, oc[1] = {2}, od[1] = {1};
    float o2[4] = {0};
    CHECK(MPI_Alltoallv(in, ic, id, MPI_FLOAT, o2, oc, od, MPI_FLOAT, MPI_COMM_WORLD) == MPI_SUCCESS);
    CHECK(o2[0] == 0 && o2[1] == 4 && o2[2] == 5 && o2[3] == 0);
    int32_t iv[3] = {7, 8, 9}, ov[3] = {0};
    CHECK(MPI_Gather(iv, 3, MPI_INT32_T, ov, 3, MPI_INT32_T, 0, MPI_COMM_WORLD) == MPI_SUCCESS && ov[2] == 9);
    fprintf(stderr, "(expected errors follow)\n");
    CHECK(MPI_Allgather(iv, 3, MPI_INT32_T, ov, 2, MPI_INT32_T, MPI_COMM_WORLD) != MPI_SUCCESS);
    CHECK(MPI_Bcast(iv, 3, MPI_INT, 1, MPI_COMM_WORLD) != MPI_SUCCESS); /* no rank 1 */
    CHECK(MPI_Isend(iv, 3, MPI_INT, 1, 0, MPI_COMM_WORLD, &(MPI_Request){0}) != MPI_SUCCESS);
    CHECK(MPI_Barrier(42) != MPI_SUCCESS); /* no such comm */
    float big[8] = {0};
    MPI_Request r;
    CHECK(MPI_Isend(big, 8, MPI_FLOAT, 0, 9, MPI_COMM_WORLD, &r) == MPI_SUCCESS);
    CHECK(MPI_Recv(out, 4, MPI_FLOAT, 0, 9, MPI_COMM_WORLD, MPI_STATUS_IGNORE) != MPI_SUCCESS); /* truncated */
}

int main(int argc, char **argv) {
    CHECK(MPI_Init(&argc, &argv) == MPI_SUCCESS);
    test_messages();
    test_collectives();
    CHECK(MPI_Finalize() == MPI_SUCCESS);
    if (failures)
        fprintf(stderr, "test_mpi1: %d check(s) failed\n", failures);
    else
        printf("test_mpi1: all checks passed\n");
    return failures != 0;
}
