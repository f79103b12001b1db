/* rt_placement.c — where the ranks really run, against where the compiler
 * assumed they would (the spec's mesh.placement, rt_program.node_of).
 *
 * The compiler keeps a group's all-to-alls inside a node by choosing its
 * ranks from one node.  A launcher that places ranks otherwise (`mpirun
 * --map-by node`, `srun --distribution=cyclic`) silently sends every one of
 * those exchanges across the network: the run is right but several times
 * slower than planned.  So at start-up every rank says its host name, and a
 * set of a group that the compiler kept on one node but whose ranks run on
 * different hosts stops the run before step 1, with the launcher option or
 * the spec setting that fixes it (--allow-placement-mismatch goes on). */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "rt_core.h"

/* The node's name as the launcher sees it (gethostname, which Open MPI's
 * MPI_Get_processor_name returns too), at most this long. */
enum { RT_HOST_MAX = 256 };

/* The node the compiler put world rank r on. */
static int rt_compiled_node(const rt_program *p, int r) {
    return p->node_of ? p->node_of[r] : r / (p->devices_per_node > 0 ? p->devices_per_node : 1);
}

/* The first set of a group that the compiler kept on one node and whose
 * ranks run on more than one host: its group (and *set), else -1. */
static int rt_split_set(const rt_program *p, const char *hosts, int *set) {
    for (int g = 0; g < p->ngroups; g++) {
        const rt_group_desc *gd = &p->groups[g];
        for (int s = 0; s < gd->nsets && gd->block == 0; s++) { /* a block group is placed per micro-step */
            const int *r = &gd->ranks[s * gd->set_size];
            bool one_node = true, one_host = true;
            for (int j = 1; j < gd->set_size; j++) {
                one_node &= rt_compiled_node(p, r[j]) == rt_compiled_node(p, r[0]);
                one_host &= !strcmp(&hosts[(size_t)r[j] * RT_HOST_MAX], &hosts[(size_t)r[0] * RT_HOST_MAX]);
            }
            if (one_node && !one_host) {
                *set = s;
                return g;
            }
        }
    }
    return -1;
}

/* Whether the hosts group ranks as `round_robin` would: rank r shares a
 * host exactly with the ranks r' where r' % nodes == r % nodes. */
static bool rt_hosts_round_robin(const rt_program *p, const char *hosts) {
    for (int a = 0; a < p->world; a++)
        for (int b = a + 1; b < p->world; b++) {
            bool same = !strcmp(&hosts[(size_t)a * RT_HOST_MAX], &hosts[(size_t)b * RT_HOST_MAX]);
            if (same != (a % p->nodes == b % p->nodes)) return false;
        }
    return true;
}

/* "bc-x-n0 (0,2), bc-x-n1 (1,3)" for the ranks r[0..n). */
static void rt_describe_hosts(const char *hosts, const int *r, int n, char *out, size_t cap) {
    size_t len = 0;
    out[0] = '\0';
    for (int j = 0; j < n && len + 1 < cap; j++) {
        const char *h = &hosts[(size_t)r[j] * RT_HOST_MAX];
        bool seen = false;
        for (int k = 0; k < j; k++) seen |= !strcmp(&hosts[(size_t)r[k] * RT_HOST_MAX], h);
        if (seen) continue;
        int count = 0;
        for (int k = j; k < n; k++) count += !strcmp(&hosts[(size_t)r[k] * RT_HOST_MAX], h);
        len += (size_t)snprintf(out + len, cap - len, "%s%s (rank%s", len ? ", " : "", h, count > 1 ? "s" : "");
        for (int k = j; k < n && len + 1 < cap; k++)
            if (!strcmp(&hosts[(size_t)r[k] * RT_HOST_MAX], h))
                len += (size_t)snprintf(out + len, cap - len, " %d", r[k]);
        if (len + 1 < cap) len += (size_t)snprintf(out + len, cap - len, ")");
    }
}

static void rt_placement_report(const rt_program *p, const char *hosts, int g, int s, bool allow, const char *prog) {
    const rt_group_desc *gd = &p->groups[g];
    char where[1024];
    rt_describe_hosts(hosts, &gd->ranks[s * gd->set_size], gd->set_size, where, sizeof where);
    fprintf(stderr,
            "%s: %s: the ranks do not run where %s was compiled for: the compiler kept set %d of group @%s on "
            "node %d, but its ranks run on %s, so its exchanges cross nodes\n",
            prog, allow ? "warning" : "error", p->spec ? p->spec : "this program", s, gd->name,
            rt_compiled_node(p, gd->ranks[s * gd->set_size]), where);
    bool rr = p->node_of != NULL;
    for (int r = 0; rr && r < p->world; r++) rr = p->node_of[r] == r % p->nodes;
    if (!p->node_of)
        fprintf(stderr,
                "  compiled placement: consecutive (rank r on node r / %d)\n"
                "  fix: launch consecutive ranks on one node (mpirun --map-by slot, Open MPI's default; "
                "srun --distribution=block)\n",
                p->devices_per_node);
    else if (rr)
        fprintf(stderr,
                "  compiled placement: round_robin (rank r on node r %% %d)\n"
                "  fix: launch ranks round-robin over the nodes (mpirun --map-by node; "
                "srun --distribution=cyclic)\n",
                p->nodes);
    else
        fprintf(stderr, "  compiled placement: the spec's mesh.placement list (rank r on node node_of[r])\n"
                        "  fix: a host file or rank file that puts every rank on its listed node\n");
    if (rt_hosts_round_robin(p, hosts))
        fprintf(stderr, "  or: recompile for this launch with --set mesh.placement=round_robin\n");
    if (!allow) fprintf(stderr, "  (--allow-placement-mismatch runs it anyway; nothing was trained)\n");
}

bool rt_placement_check(const rt_program *p, int rank, bool allow, const char *prog) {
    char *hosts = RT_MALLOC((size_t)p->world * RT_HOST_MAX);
    char mine[RT_HOST_MAX] = "";
    if (gethostname(mine, sizeof mine - 1) != 0) snprintf(mine, sizeof mine, "?");
    RT_MPI(MPI_Allgather(mine, RT_HOST_MAX, MPI_CHAR, hosts, RT_HOST_MAX, MPI_CHAR, MPI_COMM_WORLD));
    for (int r = 0; r < p->world; r++) hosts[(size_t)r * RT_HOST_MAX + RT_HOST_MAX - 1] = '\0';
    int set = 0, g = rt_split_set(p, hosts, &set);
    if (g >= 0 && rank == 0) rt_placement_report(p, hosts, g, set, allow, prog);
    free(hosts);
    return g < 0 || allow;
}
