/* MPI hello for the emulated-cluster test: every rank reports its host name
 * (its emulated node) and exchanges data with every other rank, so a run
 * proves both the launch across nodes and the transports between them. */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world, len;
    char host[MPI_MAX_PROCESSOR_NAME];
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    MPI_Get_processor_name(host, &len);
    /* 64 KiB to every peer: large enough for the transports' rendezvous path */
    enum { N = 16384 };
    int *out = malloc(sizeof(int) * N * (size_t)world), *in = malloc(sizeof(int) * N * (size_t)world);
    for (int p = 0; p < world; p++)
        for (int i = 0; i < N; i++) out[p * N + i] = rank * 1000003 + p * 7 + i;
    MPI_Alltoall(out, N, MPI_INT, in, N, MPI_INT, MPI_COMM_WORLD);
    int bad = 0;
    for (int p = 0; p < world; p++)
        for (int i = 0; i < N; i++) bad += in[p * N + i] != p * 1000003 + rank * 7 + i;
    int total;
    MPI_Allreduce(&bad, &total, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    printf("hello from rank %d of %d on %s\n", rank, world, host);
    fflush(stdout);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) printf("all-to-all %s\n", total ? "CORRUPT" : "ok");
    free(out);
    free(in);
    MPI_Finalize();
    return total != 0;
}
