/* cm_pack.c — documents packed into the rows of a micro-batch.
 *
 * The runtime draws a step's documents and asks layout_pack where each
 * goes; the planner packs sampled lengths the same way to predict a step.
 * One copy of the rules, no I/O, no allocation beyond a scratch array. */
#include "common.h"

#include <stdlib.h>
#include <string.h>

const char *layout_packing_name(layout_packing p) { return p == LAYOUT_PACK_BALANCED ? "balanced" : "sequential"; }

bool layout_packing_parse(const char *name, layout_packing *out) {
    if (!strcmp(name, "sequential"))
        *out = LAYOUT_PACK_SEQUENTIAL;
    else if (!strcmp(name, "balanced"))
        *out = LAYOUT_PACK_BALANCED;
    else
        return false;
    return true;
}

double layout_doc_linear(int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t ffn) {
    double D = (double)hidden, H = (double)heads, Hk = (double)kv_heads, Dh = (double)head_dim, F = (double)ffn;
    double w = D * (H + 2 * Hk) * Dh + H * Dh * D + 3 * D * F; /* q, k, v, o and the SwiGLU MLP */
    return H * Dh > 0 ? w / (H * Dh) : 0;
}

double layout_doc_cost(int64_t len, double linear) { return (double)len * (double)len + linear * (double)len; }

/* Sequential: the documents in draw order, back to back; one that crosses a
 * row end is cut there and its rest starts the next row (each piece then
 * counts as a document of its own). */
static int pack_sequential(const layout_doc *docs, int n, int64_t B, int64_t S, layout_slot *out) {
    int ns = 0;
    int64_t row = 0, col = 0;
    for (int i = 0; i < n && row < B; i++) {
        int64_t src = docs[i].src, len = docs[i].len;
        while (len > 0 && row < B) {
            int64_t take = len < S - col ? len : S - col;
            out[ns++] = (layout_slot){row, col, src, take};
            src += take, len -= take, col += take;
            if (col == S) row++, col = 0;
        }
    }
    return ns;
}

/* Longest first; equal lengths keep their draw order (deterministic). */
static int pack_cmp(const void *a, const void *b) {
    const layout_doc *x = a, *y = b;
    if (x->len != y->len) return x->len < y->len ? 1 : -1;
    return (x->src > y->src) - (x->src < y->src);
}

/* The balanced packer's state: the fill and cost of every row, and the
 * tokens and cost still in the queue. */
typedef struct pack_state {
    int64_t B, S;
    double linear;
    int64_t *fill;
    double *cost;
    double rest_len, rest_cost;
} pack_state;

/* What row r is expected to cost when full: its cost so far plus its room
 * times the queue's cost per token.  Comparing these, a row that holds a
 * long document (dear, but filled early) is not mistaken for a cheap one:
 * the cost of its room still to come is counted. */
static double pack_projected(const pack_state *st, int64_t r) {
    double m = st->rest_len > 0 ? st->rest_cost / st->rest_len : 0;
    return st->cost[r] + (double)(st->S - st->fill[r]) * m;
}

/* The row a document of len tokens goes to: the one of least projected
 * cost with room for all of it; -1 when none has room. */
static int64_t pack_fit(const pack_state *st, int64_t len) {
    int64_t best = -1;
    double bp = 0;
    for (int64_t r = 0; r < st->B; r++) {
        if (st->S - st->fill[r] < len) continue;
        double pr = pack_projected(st, r);
        if (best < 0 || pr < bp) best = r, bp = pr;
    }
    return best;
}

/* The row with the most room left (-1: all full). */
static int64_t pack_roomiest(const pack_state *st) {
    int64_t best = -1;
    for (int64_t r = 0; r < st->B; r++)
        if (st->fill[r] < st->S && (best < 0 || st->fill[r] < st->fill[best])) best = r;
    return best;
}

/* Places take tokens of d at the end of row r. */
static layout_slot pack_place(pack_state *st, int64_t r, layout_doc d, int64_t take) {
    layout_slot s = {r, st->fill[r], d.src, take};
    st->fill[r] += take;
    st->cost[r] += layout_doc_cost(take, st->linear);
    st->rest_len -= (double)take;
    st->rest_cost -= layout_doc_cost(d.len, st->linear);
    if (take < d.len) st->rest_cost += layout_doc_cost(d.len - take, st->linear); /* the rest stays queued */
    return s;
}

/* Balanced: longest first, each piece whole into the row of least
 * projected cost that has room for it; when no row has room, it fills the
 * row with the most room and the rest goes back into the queue (in its
 * sorted place).  Deterministic: ties go to the lowest row. */
static int pack_balanced(const layout_doc *docs, int n, int64_t B, int64_t S, double linear, layout_slot *out) {
    pack_state st = {B, S, linear, calloc((size_t)B, sizeof(int64_t)), calloc((size_t)B, sizeof(double)), 0, 0};
    layout_doc *q = malloc(sizeof *q * (size_t)(n > 0 ? n : 1));
    int ns = -1;
    if (!q || !st.fill || !st.cost) goto done;
    memcpy(q, docs, sizeof *q * (size_t)n);
    qsort(q, (size_t)n, sizeof *q, pack_cmp);
    for (int i = 0; i < n; i++) st.rest_len += (double)q[i].len, st.rest_cost += layout_doc_cost(q[i].len, linear);
    ns = 0;
    for (int head = 0; head < n;) {
        layout_doc d = q[head];
        int64_t r = pack_fit(&st, d.len);
        if (r < 0) r = pack_roomiest(&st);
        if (r < 0) break; /* every row is full */
        int64_t take = d.len < S - st.fill[r] ? d.len : S - st.fill[r];
        out[ns++] = pack_place(&st, r, d, take);
        if (take == d.len) {
            head++;
            continue;
        }
        /* The rest replaces d and sinks to its place among the shorter ones. */
        int i = head;
        q[i] = (layout_doc){d.src + take, d.len - take};
        for (; i + 1 < n && pack_cmp(&q[i], &q[i + 1]) > 0; i++) {
            layout_doc t = q[i];
            q[i] = q[i + 1], q[i + 1] = t;
        }
    }
done:
    free(q), free(st.fill), free(st.cost);
    return ns;
}

static int pack_slot_cmp(const void *a, const void *b) {
    const layout_slot *x = a, *y = b;
    if (x->row != y->row) return (x->row > y->row) - (x->row < y->row);
    return (x->col > y->col) - (x->col < y->col);
}

int layout_pack(const layout_doc *docs, int n, int64_t B, int64_t S, layout_packing how, double linear,
                layout_slot *out) {
    if (B <= 0 || S <= 0 || n < 0) return -1;
    int64_t total = 0;
    for (int i = 0; i < n; i++) {
        if (docs[i].len <= 0 || docs[i].len > S) return -1;
        total += docs[i].len;
    }
    if (total < B * S) return -1;
    int ns = pack_sequential(docs, n, B, S, out);
    if (how == LAYOUT_PACK_BALANCED && ns > 0) {
        /* The same pieces (the documents cut where concat-and-chunk cuts
         * them), laid out again for balance: balancing whole documents
         * would add work (l^2 grows with every cut it saves). */
        layout_doc *pieces = malloc(sizeof *pieces * (size_t)ns);
        if (!pieces) return -1;
        for (int i = 0; i < ns; i++) pieces[i] = (layout_doc){out[i].src, out[i].len};
        ns = pack_balanced(pieces, ns, B, S, linear, out);
        free(pieces);
    }
    if (ns > 0) qsort(out, (size_t)ns, sizeof *out, pack_slot_cmp);
    return ns;
}

/* Row costs descending (ties: lower row first). */
typedef struct pack_rowcost {
    double cost;
    int64_t row;
} pack_rowcost;
static int pack_rowcost_cmp(const void *a, const void *b) {
    const pack_rowcost *x = a, *y = b;
    if (x->cost != y->cost) return x->cost < y->cost ? 1 : -1;
    return (x->row > y->row) - (x->row < y->row);
}

int layout_pack_groups(layout_slot *slots, int ns, int64_t B, int groups, double linear) {
    if (groups < 1 || B % groups) return -1;
    pack_rowcost *rc = calloc((size_t)B, sizeof *rc);
    int64_t *to = malloc(sizeof *to * (size_t)B), per = B / groups;
    if (!rc || !to) {
        free(rc), free(to);
        return -1;
    }
    for (int64_t r = 0; r < B; r++) rc[r].row = r;
    for (int i = 0; i < ns; i++) rc[slots[i].row].cost += layout_doc_cost(slots[i].len, linear);
    qsort(rc, (size_t)B, sizeof *rc, pack_rowcost_cmp);
    /* Dealt in snake order: groups 0..G-1, then G-1..0, ...; group g's k-th
     * row becomes row g*per + k. */
    int64_t *taken = calloc((size_t)groups, sizeof *taken);
    if (!taken) {
        free(rc), free(to);
        return -1;
    }
    for (int64_t i = 0; i < B; i++) {
        int64_t lap = i / groups, j = i % groups, g = lap % 2 ? groups - 1 - j : j;
        to[rc[i].row] = g * per + taken[g]++;
    }
    for (int i = 0; i < ns; i++) slots[i].row = to[slots[i].row];
    qsort(slots, (size_t)ns, sizeof *slots, pack_slot_cmp);
    free(rc), free(to), free(taken);
    return 0;
}

double layout_pack_imbalance(const layout_slot *slots, int ns, int64_t B, int groups, double linear,
                             double *group_cost) {
    if (groups < 1 || B % groups) return 0;
    double *c = group_cost ? group_cost : malloc(sizeof *c * (size_t)groups);
    if (!c) return 0;
    for (int g = 0; g < groups; g++) c[g] = 0;
    int64_t per = B / groups;
    for (int i = 0; i < ns; i++) c[slots[i].row / per] += layout_doc_cost(slots[i].len, linear);
    double mx = 0, sum = 0;
    for (int g = 0; g < groups; g++) {
        sum += c[g];
        if (c[g] > mx) mx = c[g];
    }
    if (c != group_cost) free(c);
    return sum > 0 ? mx * groups / sum : 1.0;
}
