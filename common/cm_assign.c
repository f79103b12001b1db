/* cm_assign.c — the groups of one micro-step under `batch_aware dynamic`.
 *
 * Every micro-step the runtime (on every rank, which must all agree) and
 * the planner (on sampled lengths) ask layout_dyn_assign how to split the
 * world into groups of the allowed sizes and which pieces each group's row
 * holds.  The step waits for the slowest group, so the aim is the least
 * maximum per-rank cost (layout_doc_cost over the group's size, plus the
 * exchange); then few cuts.  The phases:
 *   1. form    the pieces longer than T, longest first, into groups of the
 *              least size that keeps them within a target per-rank cost,
 *              or into the roomiest group (grown if need be) when it stays
 *              within; the target searched for (as_target), since a piece
 *              of l tokens in its least group costs about l T per rank,
 *              far above T m for a rank of short pieces (m: their cost per
 *              token);
 *   2. grow    ranks still free go to the group expected to be slowest,
 *              one allowed size up at a time, while that lowers the max;
 *   3. tile    the free ranks become groups of the smallest allowed size;
 *   4. fill    the other pieces, longest first, each whole into the group of
 *              least projected per-rank cost with room for it, else cut to
 *              fill the group with the most room (the rest goes on);
 *   5. place   the groups on ranks, none of at most node_size ranks across a
 *              node boundary where first-fit decreasing finds such a
 *              placement, numbered by first rank.
 * Deterministic: no randomness, ties go to the lower index, and only
 * exactly rounded arithmetic (+ - * / sqrt ceil fmax: no exp, log or pow,
 * which may round differently on another machine).  No I/O, one scratch
 * allocation.  Heaps keep each phase-1 trial O(n log N) and phase 4
 * O((n + N) log N): an O(n * N) scan takes milliseconds at 1024 pieces on
 * 1024 ranks, and this runs every micro-step. */
#include "common.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A placed part while the groups are still numbered by creation. */
typedef struct as_slot {
    int g;
    int64_t col, src, len;
} as_slot;

typedef struct as_state {
    layout_dyn_shape sh;  /* the caller's: world, sizes, costs (size_comm, or comm * (k - 1) / k) */
    int ng, free;         /* groups so far, ranks in no group yet */
    unsigned char *tiles; /* tiles[r]: r ranks split into allowed sizes */
    int *size;            /* per group (up to world of them) */
    int64_t *fill;
    double *cost;                  /* layout_doc_cost of what the group holds */
    double *key, *rkey;            /* what the heaps order groups by: cost (or its negation), room */
    double *qkey;                  /* what the queue orders pieces by: minus the length */
    layout_doc *q;                 /* the pieces, longest first (ties: lower src) */
    double rest_len, rest_cost, m; /* what is still queued; m: its cost per token */
    as_slot *out;
    int nout;
    /* scratch of world (+1) entries for the heaps and the placement */
    int *heap_a, *heap_b, *heap_q, *first, *ord, *cnt, *nodenext;
    int *home; /* phase 1: each long piece's group (aliases heap_q) */
} as_state;

/* ---- a binary min-heap of indices by a key array ------------------------ */

typedef struct as_heap {
    int *h, n;
    const double *key; /* ties: the lower index first */
} as_heap;

static bool as_before(const as_heap *hp, int a, int b) {
    return hp->key[a] < hp->key[b] || (hp->key[a] == hp->key[b] && a < b);
}

static void as_sift_down(as_heap *hp, int i) {
    for (;;) {
        int c = 2 * i + 1;
        if (c >= hp->n) return;
        if (c + 1 < hp->n && as_before(hp, hp->h[c + 1], hp->h[c])) c++;
        if (!as_before(hp, hp->h[c], hp->h[i])) return;
        int t = hp->h[i];
        hp->h[i] = hp->h[c], hp->h[c] = t, i = c;
    }
}

static void as_push(as_heap *hp, int x) {
    int i = hp->n++;
    hp->h[i] = x;
    while (i > 0 && as_before(hp, hp->h[i], hp->h[(i - 1) / 2])) {
        int p = (i - 1) / 2, t = hp->h[i];
        hp->h[i] = hp->h[p], hp->h[p] = t, i = p;
    }
}

static int as_pop(as_heap *hp) {
    int top = hp->h[0];
    hp->h[0] = hp->h[--hp->n];
    as_sift_down(hp, 0);
    return top;
}

static void as_heapify(as_heap *hp) {
    for (int i = hp->n / 2 - 1; i >= 0; i--) as_sift_down(hp, i);
}

static int64_t as_room(const as_state *st, int g) { return (int64_t)st->size[g] * st->sh.T - st->fill[g]; }

/* Most room first: the key of a room heap. */
static double as_room_key(const as_state *st, int g) { return -(double)as_room(st, g); }

static int as_doc_cmp(const void *a, const void *b) {
    const layout_doc *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? 1 : -1;
    return (x->src > y->src) - (x->src < y->src);
}

/* ---- phases 1 to 3: the group sizes ------------------------------------- */

/* The smallest allowed size s >= kmin above cur whose growth from cur
 * (cur = 0: a new group) leaves a free count the allowed sizes can still
 * tile; 0 when none.  Tiling the rest matters where 1 is not allowed: with
 * sizes {2, 4}, one free rank could never be used. */
static int as_pick_size(const as_state *st, int cur, int64_t kmin) {
    int lo = 0, hi = st->sh.nsizes; /* the first size > cur and >= kmin */
    while (lo < hi) {
        int mid = (lo + hi) / 2, s = st->sh.sizes[mid];
        if (s <= cur || s < kmin)
            lo = mid + 1;
        else
            hi = mid;
    }
    for (int i = lo; i < st->sh.nsizes && st->sh.sizes[i] - cur <= st->free; i++)
        if (st->tiles[st->free - (st->sh.sizes[i] - cur)]) return st->sh.sizes[i];
    return 0;
}

static int as_new_group(as_state *st, int size) {
    int g = st->ng++;
    st->size[g] = size, st->fill[g] = 0, st->cost[g] = 0;
    st->free -= size;
    return g;
}

static void as_put(as_state *st, int g, int64_t src, int64_t len) {
    st->out[st->nout++] = (as_slot){g, st->fill[g], src, len};
    st->fill[g] += len;
    st->cost[g] += layout_doc_cost(len, st->sh.linear);
}

/* The per-rank exchange cost of a group of k ranks (an allowed size):
 * size_comm's, or comm * T * (k - 1) / k. */
static double as_x(const as_state *st, int k) {
    if (!st->sh.size_comm) return st->sh.comm * (double)st->sh.T * (k - 1) / k;
    int i = 0;
    while (i + 1 < st->sh.nsizes && st->sh.sizes[i] < k) i++;
    return st->sh.size_comm[i] * (double)st->sh.T;
}

/* What a group of k ranks holding fill tokens of the given cost is
 * expected to cost per rank: its pieces, its room filled at m per token
 * (the short pieces' cost per token), its exchange. */
static double as_estimate(const as_state *st, int k, int64_t fill, double cost) {
    double room = (double)k * (double)st->sh.T - (double)fill;
    return (cost + room * st->m) / k + as_x(st, k);
}

/* The size of a new group for a long piece of len tokens and cost dc that
 * keeps it within c per rank; 0 when the free ranks allow none.  The estimate is
 * a / k + (T m + comm T) with a = dc - len m - comm T: when a > 0 (the
 * piece outweighs the exchange) it falls with k, so k >= a / (c - T m -
 * comm T); otherwise the smallest size is the cheapest. */
static int as_open_size(const as_state *st, int64_t len, double dc, double c) {
    if (st->sh.size_comm) { /* no closed form: the smallest allowed size within c */
        int k = as_pick_size(st, 0, (len + st->sh.T - 1) / st->sh.T);
        while (k && as_estimate(st, k, len, dc) > c) k = as_pick_size(st, 0, (int64_t)k + 1);
        return k;
    }
    double base = (double)st->sh.T * (st->m + st->sh.comm),
           a = dc - (double)len * st->m - st->sh.comm * (double)st->sh.T;
    int64_t kmin = (len + st->sh.T - 1) / st->sh.T;
    if (a > 0) {
        if (!(c > base)) return 0;
        double kc = ceil(a / (c - base));
        if (kc > st->sh.world) return 0;
        if (kc > kmin) kmin = (int64_t)kc;
    }
    int k = as_pick_size(st, 0, kmin);
    return k && as_estimate(st, k, len, dc) <= c ? k : 0;
}

/* The size group g must have to take len more tokens: its own, or the
 * least allowed one above that the free ranks allow; 0 when none. */
static int as_join_size(const as_state *st, int g, int64_t len) {
    int64_t need = (st->fill[g] + len + st->sh.T - 1) / st->sh.T;
    return need <= st->size[g] ? st->size[g] : as_pick_size(st, st->size[g], need);
}

static void as_take(as_state *st, int g, int k, int64_t len, double dc) {
    st->free -= k - st->size[g];
    st->size[g] = k, st->fill[g] += len, st->cost[g] += dc;
}

/* Phase 1 for a target c of the per-rank cost: the long pieces (> T),
 * longest first, each into the group with the most room, grown to an
 * allowed size that holds it if need be, when the group stays within c
 * and that takes fewer new ranks than a group of its own; else into a new
 * group of the least size within c (as_open_size).  Sharing a group saves
 * what rounding each piece up to whole ranks wastes: with most tokens in
 * long pieces, groups of their own can need more ranks than there are.
 * When nothing stays within c: the same, fewest new ranks first, beyond
 * c; with no ranks and no room left, no group (home -1: the piece waits
 * in the queue, to be cut).  st->home[i] gets piece i's group.  Returns
 * the highest estimate (at least the short pieces' T m), infinite when a
 * piece waits. */
static double as_form(as_state *st, int nlong, double c) {
    as_heap rh = {st->heap_a, 0, st->rkey};
    int s0 = st->sh.sizes[0];
    double worst = (double)st->sh.T * st->m + as_x(st, s0);
    st->ng = 0, st->free = st->sh.world;
    for (int i = 0; i < nlong; i++) {
        layout_doc d = st->q[i];
        double dc = layout_doc_cost(d.len, st->sh.linear);
        int g = rh.n ? rh.h[0] : -1, kj = g >= 0 ? as_join_size(st, g, d.len) : 0;
        int grow = kj ? kj - st->size[g] : 0, ko = as_open_size(st, d.len, dc, c);
        bool join = kj && as_estimate(st, kj, st->fill[g] + d.len, st->cost[g] + dc) <= c && (!ko || grow < ko);
        if (!join && !ko) { /* beyond c */
            ko = as_pick_size(st, 0, (d.len + st->sh.T - 1) / st->sh.T);
            join = kj && (!ko || grow <= ko);
        }
        if (join) {
            as_take(st, g, kj, d.len, dc);
            st->rkey[g] = as_room_key(st, g);
            as_sift_down(&rh, 0); /* g is the top */
        } else if (ko) {
            g = as_new_group(st, 0);
            as_take(st, g, ko, d.len, dc);
            st->rkey[g] = as_room_key(st, g);
            as_push(&rh, g);
        } else {
            g = -1, worst = INFINITY;
        }
        st->home[i] = g;
    }
    for (int g = 0; g < st->ng; g++) worst = fmax(worst, as_estimate(st, st->size[g], st->fill[g], st->cost[g]));
    return worst;
}

/* Phase 1: the target that as_form does best with.  Without a target each
 * long piece gets its least group, a piece of l tokens then costing about
 * l T per rank against T m for a rank of short pieces, and the step waits
 * for the slowest group; lower targets give long pieces more ranks and
 * fewer ranks to the rest.  What a target reaches is not monotone in it
 * (a piece that takes more ranks leaves room that others join), so the
 * targets tried are a geometric grid of 17 from the dearest piece alone in
 * its least group down to half the mean cost per rank (a first piece given
 * more than its share can be what lets the others share its group), then
 * halved steps around the best; ties keep the first tried (no target, then
 * the larger: the smaller groups).  Each is judged by as_form's estimate,
 * not by filling the rows (too slow to do 30 times). */
static void as_target(as_state *st, int n, int nlong) {
    if (nlong == 0) {
        as_form(st, 0, INFINITY);
        return;
    }
    double total = 0, shortlen = 0, shortcost = 0, hi = 0;
    for (int i = 0; i < n; i++) {
        double c = layout_doc_cost(st->q[i].len, st->sh.linear);
        total += c;
        if (i >= nlong) shortlen += (double)st->q[i].len, shortcost += c;
    }
    st->m = shortlen > 0 ? shortcost / shortlen : 0;
    double lo = 0.5 * fmax(total / st->sh.world, (double)st->sh.T * st->m);
    for (int i = 0; i < nlong; i++) {
        int64_t len = st->q[i].len, k = (len + st->sh.T - 1) / st->sh.T;
        hi = fmax(hi, as_estimate(st, (int)k, len, layout_doc_cost(len, st->sh.linear)));
    }
    double r = 1.01, span; /* the grid's ratio: squared until r^16 spans lo .. hi */
    for (;;) {
        span = r * r, span *= span, span *= span, span *= span;
        if (lo * span >= hi) break;
        r *= r;
    }
    double best_c = INFINITY, best = as_form(st, nlong, INFINITY), c = lo * span;
    for (int j = 16; j >= 0; j--, c /= r) {
        double got = as_form(st, nlong, c);
        if (got < best) best = got, best_c = c;
    }
    for (int it = 0; it < 6 && isfinite(best_c); it++) {
        double c0 = best_c;
        r = sqrt(r);
        for (int side = 0; side < 2; side++) {
            double got = as_form(st, nlong, c = side ? c0 / r : c0 * r);
            if (got < best) best = got, best_c = c;
        }
    }
    as_form(st, nlong, best_c);
}

/* The long pieces into their groups (in order, so each group's columns
 * ascend), the rest of them queued with the short ones, still sorted.
 * Returns the queue's length. */
static int as_settle(as_state *st, int n, int nlong) {
    int nq = 0;
    for (int g = 0; g < st->ng; g++) st->fill[g] = 0, st->cost[g] = 0;
    for (int i = 0; i < n; i++) {
        if (i < nlong && st->home[i] >= 0)
            as_put(st, st->home[i], st->q[i].src, st->q[i].len);
        else
            st->q[nq++] = st->q[i];
    }
    st->rest_len = st->rest_cost = 0;
    for (int i = 0; i < nq; i++)
        st->rest_len += (double)st->q[i].len, st->rest_cost += layout_doc_cost(st->q[i].len, st->sh.linear);
    st->m = st->rest_len > 0 ? st->rest_cost / st->rest_len : 0;
    return nq;
}

/* Phase 2: free ranks left after phase 1 go, one allowed size up at a
 * time, to the group expected to be slowest, while that still lowers the
 * maximum.  They would otherwise hold short pieces at T m per rank; the
 * room a group gains holds them at the same rate, so no estimate but the
 * growing group's changes. */
static void as_grow(as_state *st) {
    int s0 = st->sh.sizes[0];
    double base = (double)st->sh.T * st->m + as_x(st, s0);
    as_heap hp = {st->heap_a, 0, st->key}; /* dearest first */
    for (int g = 0; g < st->ng; g++)
        st->key[g] = -as_estimate(st, st->size[g], st->fill[g], st->cost[g]), hp.h[hp.n++] = g;
    as_heapify(&hp);
    while (hp.n > 0 && st->free > 0) {
        int g = hp.h[0];
        if (-st->key[g] <= base) break; /* the short pieces' groups are the slowest */
        int k = as_pick_size(st, st->size[g], 0);
        if (!k) break;
        /* The estimate is monotone in k: when one size up does not help,
         * no larger one does (the exchange outweighs the split).  With
         * per-size exchange costs (size_comm) that holds where they rise
         * with the size, as the cost model's do. */
        double e = as_estimate(st, k, st->fill[g], st->cost[g]);
        if (!(e < -st->key[g])) break;
        st->free -= k - st->size[g];
        st->size[g] = k, st->key[g] = -e;
        as_sift_down(&hp, 0);
    }
}

/* Phase 3: the free ranks become groups of the smallest allowed size that
 * leaves the rest tileable (every phase kept tiles[free]). */
static bool as_tile(as_state *st) {
    while (st->free > 0) {
        int k = as_pick_size(st, 0, 1);
        if (!k) return false;
        as_new_group(st, k);
    }
    return true;
}

/* ---- phase 4: the queue into the groups --------------------------------- */

/* Group g's projected per-rank cost when full, less T * m (the same for
 * every group): its cost so far plus its room at the queue's cost per
 * token, plus its exchange, over its size.  A group that holds a long
 * piece (dear, but with little room left) is not mistaken for a cheap one. */
static double as_projected(const as_state *st, int g) {
    double c = st->cost[g] - (double)st->fill[g] * st->m;
    return c / st->size[g] + as_x(st, st->size[g]);
}

/* The group of least projected cost with room for len tokens, left on top
 * of kh; -1 when none (then every group with room is in rh).  kh's keys
 * are lazy: m only falls as the queue empties (each piece taken is the
 * longest left, so at least average), so a group's projection only rises
 * and a stored key is a lower bound; the top is recomputed until it
 * stands.  Groups too full for len wait in rh (most room first) until the
 * queue's pieces are short enough (they only get shorter). */
static int as_choose(as_state *st, as_heap *kh, as_heap *rh, int64_t len) {
    while (rh->n > 0 && as_room(st, rh->h[0]) >= len) {
        int g = as_pop(rh);
        st->key[g] = as_projected(st, g);
        as_push(kh, g);
    }
    while (kh->n > 0) {
        int g = kh->h[0];
        double now = as_projected(st, g);
        if (now > st->key[g]) {
            st->key[g] = now;
            as_sift_down(kh, 0);
        } else if (as_room(st, g) < len) {
            as_pop(kh);
            st->rkey[g] = as_room_key(st, g);
            as_push(rh, g);
        } else {
            return g;
        }
    }
    return -1;
}

/* Phase 4: longest first, whole into the group of least projected cost
 * with room; when no group has room for all of it, it fills the group with
 * the most room and the rest goes back into the queue.  A cut fills a
 * group, so there are at most as many cuts as groups.  False when the
 * tokens and the room disagree (cannot happen after the checks). */
static bool as_fill(as_state *st, int nq) {
    as_heap qh = {st->heap_q, nq, st->qkey}, kh = {st->heap_a, 0, st->key}, rh = {st->heap_b, 0, st->rkey};
    for (int i = 0; i < nq; i++) qh.h[i] = i, st->qkey[i] = -(double)st->q[i].len; /* sorted already: a heap */
    for (int g = 0; g < st->ng; g++)
        if (as_room(st, g) > 0) st->key[g] = as_projected(st, g), kh.h[kh.n++] = g;
    as_heapify(&kh);
    while (qh.n > 0) {
        int i = qh.h[0];
        layout_doc d = st->q[i];
        int g = as_choose(st, &kh, &rh, d.len);
        bool cut = g < 0;
        if (cut) {
            if (rh.n == 0) return false;
            g = rh.h[0];
        }
        int64_t take = d.len < as_room(st, g) ? d.len : as_room(st, g);
        as_put(st, g, d.src, take);
        st->rest_len -= (double)take;
        st->rest_cost -= layout_doc_cost(d.len, st->sh.linear);
        if (take < d.len) {
            st->q[i] = (layout_doc){d.src + take, d.len - take};
            st->qkey[i] = -(double)(d.len - take);
            st->rest_cost += layout_doc_cost(d.len - take, st->sh.linear);
            as_sift_down(&qh, 0);
        } else {
            as_pop(&qh);
        }
        st->m = st->rest_len > 0 && st->rest_cost > 0 ? st->rest_cost / st->rest_len : 0;
        /* g is the top of its heap; a cut filled it. */
        if (cut)
            as_pop(&rh);
        else if (as_room(st, g) == 0)
            as_pop(&kh);
        else
            st->key[g] = as_projected(st, g), as_sift_down(&kh, 0);
    }
    return true;
}

/* ---- phase 5: the groups on the ranks ----------------------------------- */

/* st->ord gets the groups by size, largest first (ties: lower index). */
static void as_order_by_size(as_state *st) {
    memset(st->cnt, 0, sizeof *st->cnt * (size_t)(st->sh.world + 1));
    for (int g = 0; g < st->ng; g++) st->cnt[st->size[g]]++;
    for (int s = st->sh.world, at = 0; s >= 1; s--) {
        int c = st->cnt[s];
        st->cnt[s] = at, at += c;
    }
    for (int g = 0; g < st->ng; g++) st->ord[st->cnt[st->size[g]]++] = g;
}

/* Groups larger than a node first, back to back from rank 0 (largest
 * first: with sizes and nodes powers of two they start on node
 * boundaries); then first-fit decreasing of the others into what is left
 * of each node.  Where that fails, every group back to back (a legal
 * tiling, some groups across a boundary). */
static void as_place(as_state *st) {
    int ns = st->sh.node_size, nodes = (st->sh.world + ns - 1) / ns, pos = 0, k = 0;
    as_order_by_size(st);
    for (; k < st->ng && st->size[st->ord[k]] > ns; k++) st->first[st->ord[k]] = pos, pos += st->size[st->ord[k]];
    for (int j = 0; j < nodes; j++) st->nodenext[j] = j * ns > pos ? j * ns : pos;
    /* FFD: for one size the first node with room only moves on, so it
     * restarts at node 0 once per size. */
    int j = 0;
    for (int i = k; i < st->ng; i++) {
        int g = st->ord[i], s = st->size[g];
        if (i > k && s != st->size[st->ord[i - 1]]) j = 0;
        while (j < nodes) {
            int end = (j + 1) * ns < st->sh.world ? (j + 1) * ns : st->sh.world;
            if (end - st->nodenext[j] >= s) break;
            j++;
        }
        if (j == nodes) { /* no node has room: back to back */
            pos = 0;
            for (int t = 0; t < st->ng; t++) st->first[st->ord[t]] = pos, pos += st->size[st->ord[t]];
            return;
        }
        st->first[g] = st->nodenext[j], st->nodenext[j] += s;
    }
}

/* The groups numbered by first rank, their slots by (row, col): a slot's
 * parts were made in column order within its group, so a stable counting
 * sort by group is enough. */
static int as_emit(as_state *st, layout_dyn_group *groups, layout_slot *slots) {
    int *byfirst = st->cnt, *idx = st->ord, ng = 0;
    for (int r = 0; r < st->sh.world; r++) byfirst[r] = -1;
    for (int g = 0; g < st->ng; g++) byfirst[st->first[g]] = g;
    for (int r = 0; r < st->sh.world; r++) {
        int g = byfirst[r];
        if (g < 0) continue;
        idx[g] = ng;
        groups[ng++] = (layout_dyn_group){st->first[g], st->size[g], 0, 0, 0};
    }
    for (int i = 0; i < st->nout; i++) groups[idx[st->out[i].g]].nslots++;
    for (int g = 0, at = 0; g < ng; g++) groups[g].slot0 = at, at += groups[g].nslots, byfirst[g] = groups[g].slot0;
    for (int i = 0; i < st->nout; i++) {
        const as_slot *o = &st->out[i];
        int r = idx[o->g];
        slots[byfirst[r]++] = (layout_slot){r, o->col, o->src, o->len};
        groups[r].cost += layout_doc_cost(o->len, st->sh.linear);
    }
    for (int g = 0; g < ng; g++) {
        int K = groups[g].size;
        groups[g].cost = groups[g].cost / K + as_x(st, K);
    }
    return ng;
}

/* ---- the candidates ------------------------------------------------------ */

/* The pieces into st->q, longest first. */
static void as_queue(as_state *st, const layout_doc *pieces, int n) {
    memcpy(st->q, pieces, sizeof *st->q * (size_t)n);
    qsort(st->q, (size_t)n, sizeof *st->q, as_doc_cmp);
    st->nout = 0;
}

/* Phases 1 to 4: the groups sized by the pieces. */
static bool as_heuristic(as_state *st, const layout_doc *pieces, int n) {
    as_queue(st, pieces, n);
    int nlong = 0;
    while (nlong < n && st->q[nlong].len > st->sh.T) nlong++;
    st->home = st->heap_q;
    as_target(st, n, nlong);
    int nq = as_settle(st, n, nlong);
    as_grow(st);
    return as_tile(st) && as_fill(st, nq);
}

/* World / K groups of K ranks, every piece filled in as phase 4 fills:
 * the static batch-aware layout of that size, with its rows balanced. */
static bool as_uniform(as_state *st, const layout_doc *pieces, int n, int K) {
    as_queue(st, pieces, n);
    st->ng = 0, st->free = st->sh.world;
    while (st->free > 0) as_new_group(st, K);
    st->home = st->heap_q;
    for (int i = 0; i < n; i++) st->home[i] = -1;
    int nq = as_settle(st, n, 0);
    return as_fill(st, nq);
}

/* The slowest group's per-rank cost. */
static double as_max_cost(const as_state *st) {
    double mx = 0;
    for (int g = 0; g < st->ng; g++) mx = fmax(mx, st->cost[g] / st->size[g] + as_x(st, st->size[g]));
    return mx;
}

/* The uniform partition (as_uniform) of the least allowed size that
 * divides the world and holds the longest piece, and its slowest group's
 * cost (*best); 0 when there is none.  It is the static batch-aware layout
 * with balanced rows (all groups of one rank when every piece fits one):
 * trying it means the dynamic groups are never predicted slower than
 * that, which the heuristic alone does not promise where the long pieces'
 * groups are better shared evenly (every group inside a node, say). */
static int as_best_uniform(as_state *st, const layout_doc *pieces, int n, double *best) {
    int64_t longest = 0;
    for (int i = 0; i < n; i++) longest = pieces[i].len > longest ? pieces[i].len : longest;
    *best = INFINITY;
    for (int i = 0; i < st->sh.nsizes; i++) {
        int K = st->sh.sizes[i];
        if (st->sh.world % K || (int64_t)K * st->sh.T < longest) continue;
        if (!as_uniform(st, pieces, n, K)) return 0;
        *best = as_max_cost(st);
        return K;
    }
    return 0;
}

/* ---- the entry points ----------------------------------------------------- */

/* The shape and the pieces as layout_dyn_assign requires them. */
static bool as_valid(const layout_dyn_shape *sh, const layout_doc *pieces, int n) {
    if (!sh || n < 0 || (n > 0 && !pieces) || !sh->sizes || sh->nsizes < 1) return false;
    if (sh->world < 1 || sh->node_size < 1 || sh->T < 1 || sh->T > INT64_MAX / sh->world) return false;
    if (!(sh->linear >= 0) || !(sh->comm >= 0) || !isfinite(sh->linear) || !isfinite(sh->comm)) return false;
    for (int i = 0; sh->size_comm && i < sh->nsizes; i++)
        if (!(sh->size_comm[i] >= 0) || !isfinite(sh->size_comm[i])) return false;
    for (int i = 0; i < sh->nsizes; i++)
        if (sh->sizes[i] < 1 || sh->sizes[i] > sh->world || (i > 0 && sh->sizes[i] <= sh->sizes[i - 1])) return false;
    int64_t need = (int64_t)sh->world * sh->T, most = (int64_t)sh->sizes[sh->nsizes - 1] * sh->T, total = 0;
    for (int i = 0; i < n; i++) {
        if (pieces[i].len < 1 || pieces[i].len > most) return false;
        total += pieces[i].len;
        if (total > need) return false;
    }
    return total == need;
}

/* Carves the scratch of st out of one allocation (p NULL: only counts). */
static size_t as_carve(as_state *st, char *p, int n) {
    size_t W = (size_t)st->sh.world, at = 0;
#define AS_TAKE(field, count)                                                                                          \
    do {                                                                                                               \
        if (p) st->field = (void *)(p + at);                                                                           \
        at += (sizeof *st->field * (count) + 15) & ~(size_t)15;                                                        \
    } while (0)
    AS_TAKE(q, (size_t)n + 1);
    AS_TAKE(out, (size_t)n + W);
    AS_TAKE(fill, W);
    AS_TAKE(cost, W);
    AS_TAKE(key, W);
    AS_TAKE(rkey, W);
    AS_TAKE(qkey, (size_t)n + 1);
    AS_TAKE(size, W);
    AS_TAKE(heap_a, W);
    AS_TAKE(heap_b, W);
    AS_TAKE(heap_q, (size_t)n + 1);
    AS_TAKE(first, W);
    AS_TAKE(ord, W);
    AS_TAKE(cnt, W + 1);
    AS_TAKE(nodenext, W);
    AS_TAKE(tiles, W + 1);
#undef AS_TAKE
    return at;
}

int layout_dyn_assign(const layout_dyn_shape *sh, const layout_doc *pieces, int n, layout_dyn_group *groups,
                      layout_slot *slots, int *nslots) {
    if (nslots) *nslots = 0;
    if (!groups || !slots || !nslots || !as_valid(sh, pieces, n)) return -1;
    as_state st = {.sh = *sh, .free = sh->world};
    char *mem = malloc(as_carve(&st, NULL, n));
    if (!mem) return -1;
    as_carve(&st, mem, n);
    /* tiles[r]: r ranks split into allowed sizes (unbounded coin change). */
    st.tiles[0] = 1;
    for (int r = 1; r <= st.sh.world; r++) {
        st.tiles[r] = 0;
        for (int i = 0; i < st.sh.nsizes && st.sh.sizes[i] <= r && !st.tiles[r]; i++)
            st.tiles[r] = st.tiles[r - st.sh.sizes[i]];
    }
    int ng = -1;
    if (st.tiles[st.sh.world]) { /* else the world itself cannot be split: bad sizes */
        double best;
        /* The uniform partition first, then the heuristic; the better of
         * them is built last (again, when the uniform one wins). */
        int K = as_best_uniform(&st, pieces, n, &best);
        bool ok = as_heuristic(&st, pieces, n);
        if (K && (!ok || best < as_max_cost(&st))) ok = as_uniform(&st, pieces, n, K);
        if (ok) {
            as_place(&st);
            ng = as_emit(&st, groups, slots);
            *nslots = st.nout;
        }
    }
    free(mem);
    return ng;
}

double layout_dyn_imbalance(const layout_dyn_group *groups, int ngroups) {
    if (!groups || ngroups < 1) return 0;
    double mx = 0, sum = 0, ranks = 0;
    for (int g = 0; g < ngroups; g++) {
        sum += groups[g].cost * groups[g].size, ranks += groups[g].size;
        if (groups[g].cost > mx) mx = groups[g].cost;
    }
    return sum > 0 ? mx * ranks / sum : 1.0;
}
