/* bench_a2a — global N-way all-to-all against G groups of K-way all-to-alls.
 *
 *   mpirun -np N bench_a2a [--groups G1,G2,...] [--repeats R] [--warmup W]
 *                          [--csv FILE] SIZE...
 *
 * SIZE is the bytes one rank holds for one exchange (its whole send buffer),
 * optionally labelled: `llama3_2_1b.qkv=25165824`, or with a unit suffix
 * (K, M, G = 2^10, 2^20, 2^30): `4M`.  For every size and every layout —
 * G = 1 (Ulysses: one N-way all-to-all over all ranks) and each G of
 * --groups (batch-aware: G disjoint groups of K = N/G contiguous ranks, each
 * running its own K-way all-to-all at the same time) — each rank sends
 * SIZE/K bytes to every member of its group, itself included, which is what
 * rt_all_to_all does with a tensor of SIZE bytes split K ways.  A rank holds
 * the same SIZE in every layout (same tokens per rank), so the layouts
 * differ only in the number of peers and in which links they cross.
 *
 * One sample: MPI_Barrier over the world, MPI_Alltoall on the group
 * communicator, the slowest rank's elapsed time (MPI_Allreduce MAX).  The
 * layouts take turns within each repeat, so load from other processes hits
 * them alike; the table gives the median over repeats.  Nodes are told
 * apart by MPI_Get_processor_name (on bench/cluster every emulated node has
 * its own hostname), which gives the bytes each rank sends across nodes.
 *
 * Output (rank 0): a markdown table on stdout, and with --csv one line per
 * (size, layout) with every sample.
 */
#include <mpi.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES   64
#define MAX_LAYOUTS 8
#define MAX_REPEATS 1000

typedef struct {
    char label[64];
    int64_t bytes;
} a2a_size;

static int rank, world;

static void die(const char *msg) {
    if (rank == 0) fprintf(stderr, "bench_a2a: error: %s\n", msg);
    MPI_Finalize();
    exit(2);
}

/* "label=123M" or "123M" -> bytes; false on a malformed number. */
static bool parse_size(const char *arg, a2a_size *s) {
    const char *eq = strrchr(arg, '=');
    const char *num = eq ? eq + 1 : arg;
    snprintf(s->label, sizeof s->label, "%.*s", eq ? (int)(eq - arg) : (int)strlen(arg), arg);
    char *end;
    long long v = strtoll(num, &end, 10);
    int64_t mult = 1;
    if (*end == 'K')
        mult = 1 << 10, end++;
    else if (*end == 'M')
        mult = 1 << 20, end++;
    else if (*end == 'G')
        mult = 1 << 30, end++;
    if (end == num || *end || v <= 0) return false;
    s->bytes = (int64_t)v * mult;
    return true;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *xs, int n) {
    double tmp[MAX_REPEATS];
    memcpy(tmp, xs, sizeof(double) * (size_t)n);
    qsort(tmp, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

static void human(double b, char *out, size_t n) {
    if (b >= 1 << 20)
        snprintf(out, n, "%.2f MiB", b / (1 << 20));
    else if (b >= 1 << 10)
        snprintf(out, n, "%.1f KiB", b / (1 << 10));
    else
        snprintf(out, n, "%.0f B", b);
}

/* The command line. */
typedef struct {
    int groups[MAX_LAYOUTS], nlayouts, repeats, warmup;
    a2a_size sizes[MAX_SIZES];
    int nsizes;
    const char *csv;
} a2a_args;

static double samples[MAX_SIZES][MAX_LAYOUTS][MAX_REPEATS];

/* Returns false after --help. */
static bool parse_args(int argc, char **argv, a2a_args *a) {
    *a = (a2a_args){.groups = {1}, .nlayouts = 1, .repeats = 7, .warmup = 1};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--help")) {
            if (rank == 0)
                printf("usage: mpirun -np N bench_a2a [--groups G1,G2,...] [--repeats R] [--warmup W] "
                       "[--csv FILE] [LABEL=]BYTES[K|M|G]...\n");
            return false;
        } else if (!strcmp(argv[i], "--groups") && i + 1 < argc) {
            a->nlayouts = 1;
            for (char *tok = strtok(argv[++i], ","); tok; tok = strtok(NULL, ",")) {
                int g = atoi(tok);
                if (g < 2 || world % g) die("--groups: every G must be >= 2 and divide the number of ranks");
                if (a->nlayouts == MAX_LAYOUTS) die("--groups: too many");
                a->groups[a->nlayouts++] = g;
            }
        } else if (!strcmp(argv[i], "--repeats") && i + 1 < argc) {
            a->repeats = atoi(argv[++i]);
            if (a->repeats < 1 || a->repeats > MAX_REPEATS) die("--repeats must be 1..1000");
        } else if (!strcmp(argv[i], "--warmup") && i + 1 < argc) {
            a->warmup = atoi(argv[++i]);
            if (a->warmup < 0) die("--warmup must be >= 0");
        } else if (!strcmp(argv[i], "--csv") && i + 1 < argc) {
            a->csv = argv[++i];
        } else if (argv[i][0] == '-') {
            die("unknown option (see --help)");
        } else {
            if (a->nsizes == MAX_SIZES) die("too many sizes");
            if (!parse_size(argv[i], &a->sizes[a->nsizes])) die("a size must be [LABEL=]BYTES[K|M|G], e.g. qkv=24M");
            a->nsizes++;
        }
    }
    if (!a->nsizes) die("no sizes given (see --help)");
    if (a->nlayouts == 1 && world % 2 == 0 && world > 2) a->groups[a->nlayouts++] = 2;
    return true;
}

/* Node index of every rank, from the processor (host) names; returns the
 * number of nodes. */
static int node_ids(int *node) {
    char name[MPI_MAX_PROCESSOR_NAME] = {0};
    int len, nnodes = 0;
    MPI_Get_processor_name(name, &len);
    char *names = malloc((size_t)world * MPI_MAX_PROCESSOR_NAME);
    if (!names) die("out of memory");
    MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
    for (int r = 0; r < world; r++) {
        node[r] = -1;
        for (int q = 0; q < r && node[r] < 0; q++)
            if (!strcmp(names + (size_t)r * MPI_MAX_PROCESSOR_NAME, names + (size_t)q * MPI_MAX_PROCESSOR_NAME))
                node[r] = node[q];
        if (node[r] < 0) node[r] = nnodes++;
    }
    free(names);
    return nnodes;
}

/* Fills samples[][][]: per size and repeat, every layout once, in an order
 * that alternates between repeats. */
static void measure(const a2a_args *a, MPI_Comm *comm) {
    int64_t maxb = 0;
    for (int s = 0; s < a->nsizes; s++) maxb = a->sizes[s].bytes > maxb ? a->sizes[s].bytes : maxb;
    char *sbuf = malloc((size_t)maxb), *rbuf = malloc((size_t)maxb);
    if (!sbuf || !rbuf) die("out of memory");
    for (int64_t i = 0; i < maxb; i++) sbuf[i] = (char)(i * 31 + rank), rbuf[i] = 0;
    for (int s = 0; s < a->nsizes; s++) {
        for (int rep = -a->warmup; rep < a->repeats; rep++) {
            for (int li = 0; li < a->nlayouts; li++) {
                int l = (rep & 1) ? a->nlayouts - 1 - li : li; /* alternate which layout goes first */
                int k = world / a->groups[l];
                int chunk = (int)(a->sizes[s].bytes / k);
                MPI_Barrier(MPI_COMM_WORLD);
                double t0 = MPI_Wtime();
                MPI_Alltoall(sbuf, chunk, MPI_BYTE, rbuf, chunk, MPI_BYTE, comm[l]);
                double dt = MPI_Wtime() - t0, worst;
                MPI_Allreduce(&dt, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
                if (rep >= 0) samples[s][l][rep] = worst;
            }
        }
    }
    free(sbuf);
    free(rbuf);
}

/* One table row (and CSV line) of size s, layout l. */
static void report_row(const a2a_args *a, int s, int l, const int *node, int nnodes, FILE *f) {
    int k = world / a->groups[l], n = a->repeats;
    int64_t chunk = a->sizes[s].bytes / k, inter = 0;
    for (int q = 0; q < k; q++) inter += node[q] != node[0] ? chunk : 0; /* rank 0's group: ranks 0..k-1 */
    double sent = (double)chunk * (k - 1), med = median(samples[s][l], n), lo = 1e300, hi = 0;
    for (int r = 0; r < n; r++) {
        lo = samples[s][l][r] < lo ? samples[s][l][r] : lo;
        hi = samples[s][l][r] > hi ? samples[s][l][r] : hi;
    }
    char hb[32], hs[32], hi_[32], lay[32];
    human((double)a->sizes[s].bytes, hb, sizeof hb);
    human(sent, hs, sizeof hs);
    human((double)inter, hi_, sizeof hi_);
    if (a->groups[l] == 1)
        snprintf(lay, sizeof lay, "G=1 × K=%d (global)", k);
    else
        snprintf(lay, sizeof lay, "G=%d × K=%d", a->groups[l], k);
    printf("| %s | %s | %s | %d | %s | %s | %.2f | %.2f–%.2f | %.2f× | %.2f |\n", a->sizes[s].label, hb, lay, k - 1, hs,
           hi_, med * 1e3, lo * 1e3, hi * 1e3, median(samples[s][0], n) / med, sent / med / 1e9);
    if (!f) return;
    fprintf(f, "%s,%lld,%d,%d,%d,%.0f,%lld,%.4f,", a->sizes[s].label, (long long)a->sizes[s].bytes, a->groups[l], k,
            nnodes, sent, (long long)inter, med * 1e3);
    for (int r = 0; r < n; r++) fprintf(f, "%s%.4f", r ? ";" : "", samples[s][l][r] * 1e3);
    fprintf(f, "\n");
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    a2a_args a;
    if (!parse_args(argc, argv, &a)) {
        MPI_Finalize();
        return 0;
    }
    int *node = malloc(sizeof(int) * (size_t)world);
    if (!node) die("out of memory");
    int nnodes = node_ids(node);
    MPI_Comm comm[MAX_LAYOUTS];
    for (int l = 0; l < a.nlayouts; l++) {
        int k = world / a.groups[l];
        MPI_Comm_split(MPI_COMM_WORLD, rank / k, rank % k, &comm[l]);
    }
    measure(&a, comm);
    if (rank == 0) {
        printf("%d ranks on %d node(s) (by host name), %d repeats after %d warm-up, median of the slowest rank\n\n",
               world, nnodes, a.repeats, a.warmup);
        printf("| exchange | bytes/rank | layout | peers | sent/rank | across nodes/rank | ms (median) | "
               "min–max ms | vs G=1 | GB/s sent per rank |\n");
        printf("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|\n");
        FILE *f = a.csv ? fopen(a.csv, "w") : NULL;
        if (a.csv && !f) fprintf(stderr, "bench_a2a: cannot write %s\n", a.csv);
        if (f)
            fprintf(f, "label,bytes_per_rank,groups,group_size,nodes,sent_per_rank,inter_node_per_rank,median_ms,"
                       "samples_ms\n");
        for (int s = 0; s < a.nsizes; s++)
            for (int l = 0; l < a.nlayouts; l++) report_row(&a, s, l, node, nnodes, f);
        if (f) fclose(f);
    }
    for (int l = 0; l < a.nlayouts; l++) MPI_Comm_free(&comm[l]);
    free(node);
    MPI_Finalize();
    return 0;
}
