/* bench_allreduce — MPI_Allreduce over all ranks, with and without an idle
 * gap before each call.
 *
 *   mpirun -np N bench_allreduce [--repeats R] [--warmup W] [--gap-ms G] SIZE...
 *
 * SIZE is the bytes of fp32 each rank reduces (K, M suffixes = 2^10, 2^20).
 * One sample: MPI_Barrier, sleep G ms (every rank), MPI_Allreduce, the
 * slowest rank's elapsed time.  The gap stands for the compute between a
 * training step's gradient reductions: on the emulated cluster's links (tc
 * token-bucket shapers, bench/cluster) an idle link refills its bucket, and
 * the next transfer's first bucketful passes at once, so a reduction after
 * a gap is faster than one right after another.  The cost model charges
 * that burst for ring collectives on `tcp` links (passes/cost.c); this
 * measures it.  Rank 0 prints one line per size: the median and the least
 * sample in ms.
 */
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* "4M" -> 4194304; 0 on a malformed size. */
static long parse_size(const char *s) {
    char *end;
    long v = strtol(s, &end, 10);
    long unit = !strcmp(end, "K") ? 1L << 10 : !strcmp(end, "M") ? 1L << 20 : !*end ? 1 : 0;
    return v > 0 ? v * unit : 0;
}

static double sample(float *a, float *b, long n, double gap_ms) {
    MPI_Barrier(MPI_COMM_WORLD);
    if (gap_ms > 0) {
        struct timespec ts = {(time_t)(gap_ms / 1e3), (long)(1e6 * (gap_ms - 1e3 * (time_t)(gap_ms / 1e3)))};
        nanosleep(&ts, NULL);
    }
    double t0 = MPI_Wtime();
    MPI_Allreduce(a, b, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    double dt = MPI_Wtime() - t0, slowest;
    MPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, world, repeats = 15, warmup = 3;
    double gap_ms = 20;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    int first = 1;
    for (; first < argc && !strncmp(argv[first], "--", 2) && first + 1 < argc; first += 2) {
        if (!strcmp(argv[first], "--repeats"))
            repeats = atoi(argv[first + 1]);
        else if (!strcmp(argv[first], "--warmup"))
            warmup = atoi(argv[first + 1]);
        else if (!strcmp(argv[first], "--gap-ms"))
            gap_ms = atof(argv[first + 1]);
        else
            break;
    }
    if (first >= argc || repeats < 1 || warmup < 0 || gap_ms < 0) {
        if (!rank)
            fprintf(stderr, "usage: mpirun -np N bench_allreduce [--repeats R] [--warmup W] [--gap-ms G] SIZE...\n");
        MPI_Finalize();
        return 2;
    }
    double *t = malloc(sizeof *t * (size_t)repeats);
    for (int i = first; i < argc; i++) {
        long bytes = parse_size(argv[i]), n = bytes / 4;
        if (n <= 0) {
            if (!rank) fprintf(stderr, "bench_allreduce: '%s' is not a size (bytes, or with K or M)\n", argv[i]);
            MPI_Finalize();
            return 2;
        }
        float *a = calloc((size_t)n, sizeof *a), *b = calloc((size_t)n, sizeof *b);
        for (int k = 0; k < warmup; k++) sample(a, b, n, gap_ms);
        for (int k = 0; k < repeats; k++) t[k] = sample(a, b, n, gap_ms);
        qsort(t, (size_t)repeats, sizeof *t, cmp_double);
        if (!rank)
            printf("allreduce %ld B on %d ranks, gap %g ms: median %.3f ms, least %.3f ms\n", bytes, world, gap_ms,
                   1e3 * t[repeats / 2], 1e3 * t[0]);
        free(a);
        free(b);
    }
    free(t);
    MPI_Finalize();
    return 0;
}
