/* placement.c — mesh.placement: which node each rank runs on.
 *
 * The launcher decides where ranks run; the compiler must assume the same to
 * keep a group's all-to-alls inside a node.  Three forms:
 *
 *   placement consecutive        rank r on node r / devices_per_node
 *   placement round_robin        rank r on node r % nodes
 *   placement "0 1 0 1 ..."      node of rank 0, 1, ... (spaces or commas)
 *
 * Every node must hold exactly devices_per_node ranks, as the mesh says. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"

static bool fail(char *why, size_t n, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, n, fmt, ap);
    va_end(ap);
    return false;
}

/* The explicit list: one node per rank, nothing else. */
static bool parse_list(const fe_mesh *m, int *node_of, int64_t world, char *why, size_t nwhy) {
    const char *s = m->placement;
    int64_t r = 0;
    while (*s) {
        if (*s == ' ' || *s == ',' || *s == '\t') {
            s++;
            continue;
        }
        if (*s < '0' || *s > '9')
            return fail(why, nwhy, "entry %lld of the list is not a node number", (long long)r + 1);
        char *end;
        long long v = strtoll(s, &end, 10);
        if (r >= world) return fail(why, nwhy, "the list places more ranks than the mesh's %lld", (long long)world);
        if (v >= m->nodes)
            return fail(why, nwhy, "rank %lld is placed on node %lld, but the mesh has nodes 0 .. %lld", (long long)r,
                        v, (long long)m->nodes - 1);
        node_of[r++] = (int)v;
        s = end;
    }
    if (r != world)
        return fail(why, nwhy, "the list places %lld ranks; the mesh has %lld", (long long)r, (long long)world);
    return true;
}

bool fe_placement_nodes(const fe_mesh *m, int *node_of, char *why, size_t nwhy) {
    int64_t dpn = m->devices_per_node, world = m->nodes * dpn;
    if (world <= 0) return fail(why, nwhy, "the mesh has no ranks");
    const char *p = m->placement;
    if (!*p || !strcmp(p, "consecutive")) {
        for (int64_t r = 0; r < world; r++) node_of[r] = (int)(r / dpn);
        return true;
    }
    if (!strcmp(p, "round_robin")) {
        for (int64_t r = 0; r < world; r++) node_of[r] = (int)(r % m->nodes);
        return true;
    }
    bool list = false;
    for (const char *c = p; *c; c++) list |= (*c >= '0' && *c <= '9');
    if (!list)
        return fail(why, nwhy,
                    "unknown placement '%s'; expected consecutive, round_robin or a list of every "
                    "rank's node",
                    p);
    if (!parse_list(m, node_of, world, why, nwhy)) return false;
    int *count = calloc((size_t)m->nodes, sizeof(int));
    if (!count) return fail(why, nwhy, "out of memory");
    for (int64_t r = 0; r < world; r++) count[node_of[r]]++;
    for (int64_t n = 0; n < m->nodes; n++) {
        if (count[n] != dpn) {
            long long got = count[n];
            free(count);
            return fail(why, nwhy, "node %lld holds %lld ranks; every node holds devices_per_node = %lld", (long long)n,
                        got, (long long)dpn);
        }
    }
    free(count);
    return true;
}

bool fe_placement_consecutive(const fe_mesh *m) {
    int64_t world = m->nodes * m->devices_per_node;
    if (!m->placement[0] || !strcmp(m->placement, "consecutive")) return true;
    if (world <= 0 || world > (1 << 24)) return true;
    int *n = malloc(sizeof(int) * (size_t)world);
    char why[256];
    bool same = n && fe_placement_nodes(m, n, why, sizeof why);
    for (int64_t r = 0; same && r < world; r++) same = n[r] == r / m->devices_per_node;
    free(n);
    return same;
}
