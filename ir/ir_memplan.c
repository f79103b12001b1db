/* ir_memplan.c — placing every buffer of a step in one arena: the
 * algorithm behind pass memplan (passes/pass_memplan.c), kept in ir/ so that
 * codegen can plan a module for its own target without the pass pipeline.
 *
 * Live ranges, buffer sizes and the whole-step regions come from ir_mem.c
 * (the verifier checks the result with the same definitions).  Placement is
 * greedy by size, the offline interval-packing heuristic of inference and
 * training compilers: whole-step buffers first (they sit at the bottom and
 * never move), then the others from the largest down, each at the
 * best-fitting gap — the smallest hole between the buffers already placed
 * whose lifetimes meet its own — or on top of them when no hole is large
 * enough.  Placing large buffers first keeps small ones from fragmenting the
 * space large ones need; best fit keeps large holes for large buffers.  The
 * lower bound is the largest sum of bytes live at one op; the plan reports
 * both, and on the steps lower produces they are equal or within a few
 * percent.
 *
 * Values in host memory (ir_mem_on_host: what offload writes) are placed
 * the same way in a host arena of their own; the two never share bytes.
 *
 * Also here: the verifier's check of a plan (ir_mem_boxes_disjoint, a sweep
 * of its own, not this placement's index) and the cache of recent plans
 * (the same step is planned several times in one compile). */
#include "ir_internal.h"

#include <stdlib.h>
#include <string.h>

typedef struct mp_item {
    int v; /* value index, -1 optimizer state, -2 collective staging, -3 host staging */
    int64_t bytes, off;
    int start, end; /* live over ops [start, end] */
    int host;       /* 1: in the host arena (ir_mem_on_host) */
} mp_item;

/* The device arena's items, then the host arena's; in each, the order of
 * placement. */
static int mp_order(const void *a, const void *b) {
    const mp_item *x = a, *y = b;
    if (x->host != y->host) return x->host - y->host;
    bool px = x->start < 0, py = y->start < 0;
    if (px != py) return px ? -1 : 1;
    if (x->bytes != y->bytes) return x->bytes > y->bytes ? -1 : 1;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->v < y->v ? -1 : x->v > y->v;
}

/* ---- the placed buffers, indexed by lifetime ---------------------------------
 * A buffer's place depends only on the union of the byte ranges of the
 * placed buffers whose lifetimes meet its own: the holes of that union, and
 * its top.  Collecting those buffers one by one costs as many steps as are
 * live with it, which grows with the layers (the forward's saved activations
 * live until their layer's backward), so planning a step would be quadratic
 * in the layers.  The unions are kept instead, merged, in a segment tree
 * over the op positions: a buffer live over [a, b] is recorded in the
 * O(log ops) nodes that cover [a, b] exactly (`own`), and its bytes are
 * added to the union of every node at or above them (`sub`: everything
 * recorded in the node's subtree).  A buffer meets the time range of node v
 * when it is recorded in v's subtree or at an ancestor of v; so the union
 * for a lifetime [s, e] is that of `sub` of the nodes covering [s, e] and
 * `own` of their ancestors: O(log ops) merged sets, whose ranges are few
 * (the plan packs buffers densely) where the buffers are many. */
typedef struct mp_range {
    int64_t lo, hi; /* bytes [lo, hi) */
} mp_range;

/* Disjoint ranges sorted by offset; ranges that touch are merged. */
typedef struct mp_set {
    mp_range *r;
    int n, cap;
} mp_set;

typedef struct mp_index {
    int size;    /* leaves: a power of two >= op positions -1 .. nops */
    mp_set *own; /* per node: buffers whose lifetime covers the node's range exactly */
    mp_set *sub; /* per node: every buffer recorded at the node or below */
    int *seen;   /* per node: the last walk that visited it */
    int walk;
    mp_range *buf, *tmp; /* a lookup's ranges, gathered; room to merge them */
    int nbuf, capbuf;
    int *runs, nruns; /* where each gathered set starts in buf, then nbuf */
    int caprun;
} mp_index;

/* Adds [lo, hi) to s, merging the ranges it overlaps or touches. */
static void mp_set_add(mp_set *s, int64_t lo, int64_t hi) {
    int a = 0, b = s->n;
    while (a < b) { /* the first range ending at or after lo */
        int mid = a + (b - a) / 2;
        if (s->r[mid].hi < lo)
            a = mid + 1;
        else
            b = mid;
    }
    int z = a;
    while (z < s->n && s->r[z].lo <= hi) {
        lo = s->r[z].lo < lo ? s->r[z].lo : lo;
        hi = s->r[z].hi > hi ? s->r[z].hi : hi;
        z++;
    }
    if (z == a) { /* nothing merged: insert at a */
        if (s->n == s->cap) {
            s->cap = s->cap ? 2 * s->cap : 2;
            s->r = sup_xrealloc(s->r, sizeof *s->r * (size_t)s->cap);
        }
        memmove(s->r + a + 1, s->r + a, sizeof *s->r * (size_t)(s->n - a));
        s->n++;
    } else if (z > a + 1) {
        memmove(s->r + a + 1, s->r + z, sizeof *s->r * (size_t)(s->n - z));
        s->n -= z - a - 1;
    }
    s->r[a] = (mp_range){lo, hi};
}

static void mp_index_init(mp_index *x, int nops) {
    x->size = 1;
    while (x->size < nops + 2) x->size *= 2;
    x->own = sup_xcalloc((size_t)x->size * 2, sizeof *x->own);
    x->sub = sup_xcalloc((size_t)x->size * 2, sizeof *x->sub);
    x->seen = sup_xcalloc((size_t)x->size * 2, sizeof *x->seen);
    x->walk = 0;
    x->buf = x->tmp = NULL;
    x->nbuf = x->capbuf = 0;
    x->caprun = 64;
    x->runs = sup_xmalloc(sizeof *x->runs * (size_t)x->caprun);
    x->nruns = 0;
}

static void mp_index_free(mp_index *x) {
    for (int i = 0; i < 2 * x->size; i++) {
        free(x->own[i].r);
        free(x->sub[i].r);
    }
    free(x->own);
    free(x->sub);
    free(x->seen);
    free(x->buf);
    free(x->tmp);
    free(x->runs);
}

/* Calls visit(x, node, covering) for the nodes that cover the op positions
 * [start, end] exactly (covering = true) and, once each, for their
 * ancestors (false). */
static void mp_index_walk(mp_index *x, int start, int end, void (*visit)(mp_index *, int, bool, const mp_range *),
                          const mp_range *r) {
    int lo = start + 1 + x->size, hi = end + 2 + x->size; /* positions shifted by one, [lo, hi) */
    x->walk++;
    for (int l = lo, h = hi; l < h; l >>= 1, h >>= 1) {
        int cover[2] = {l & 1 ? l++ : 0, h & 1 ? --h : 0};
        for (int k = 0; k < 2; k++) {
            if (!cover[k]) continue;
            visit(x, cover[k], true, r);
            x->seen[cover[k]] = x->walk;
            for (int a = cover[k] >> 1; a >= 1 && x->seen[a] != x->walk; a >>= 1) {
                x->seen[a] = x->walk;
                visit(x, a, false, r);
            }
        }
    }
}

static void mp_record(mp_index *x, int node, bool covering, const mp_range *r) {
    if (covering) mp_set_add(&x->own[node], r->lo, r->hi);
    mp_set_add(&x->sub[node], r->lo, r->hi);
}

static void mp_gather(mp_index *x, int node, bool covering, const mp_range *r) {
    (void)r;
    const mp_set *s = covering ? &x->sub[node] : &x->own[node];
    if (s->n == 0) return;
    if (x->nbuf + s->n > x->capbuf) {
        x->capbuf = 2 * (x->nbuf + s->n);
        x->buf = sup_xrealloc(x->buf, sizeof *x->buf * (size_t)x->capbuf);
        x->tmp = sup_xrealloc(x->tmp, sizeof *x->tmp * (size_t)x->capbuf);
    }
    if (x->nruns + 2 > x->caprun) {
        x->caprun *= 2;
        x->runs = sup_xrealloc(x->runs, sizeof *x->runs * (size_t)x->caprun);
    }
    x->runs[x->nruns++] = x->nbuf;
    memcpy(x->buf + x->nbuf, s->r, sizeof *s->r * (size_t)s->n);
    x->nbuf += s->n;
}

/* Merges the sorted runs a[0..na) and b[0..nb) into out, by offset. */
static void mp_merge2(const mp_range *a, int na, const mp_range *b, int nb, mp_range *out) {
    int i = 0, j = 0, k = 0;
    while (i < na && j < nb) out[k++] = b[j].lo < a[i].lo ? b[j++] : a[i++];
    while (i < na) out[k++] = a[i++];
    while (j < nb) out[k++] = b[j++];
}

/* Sorts a lookup's ranges by offset: they come as one sorted run per set
 * (run r is buf[runs[r] .. runs[r+1])), merged pairwise, log(sets) passes
 * over them.  Returns the sorted array (buf or tmp). */
static mp_range *mp_sort_runs(mp_index *x) {
    mp_range *src = x->buf, *dst = x->tmp;
    int nr = x->nruns;
    while (nr > 1) {
        int w = 0;
        for (int r = 0; r < nr; r += 2) {
            int lo = x->runs[r], mid = x->runs[r + 1], hi = r + 2 <= nr ? x->runs[r + 2] : mid;
            mp_merge2(src + lo, mid - lo, src + mid, hi - mid, dst + lo);
            x->runs[w++] = lo;
        }
        x->runs[w] = x->nbuf;
        nr = w;
        mp_range *t = src;
        src = dst, dst = t;
    }
    return src;
}

/* Places it against the buffers recorded in x: the smallest hole of their
 * union that holds it (the lowest such), else the union's top. */
static void mp_place(mp_index *x, mp_item *it) {
    x->nbuf = x->nruns = 0;
    mp_index_walk(x, it->start, it->end, mp_gather, NULL);
    x->runs[x->nruns] = x->nbuf;
    const mp_range *r = mp_sort_runs(x);
    int64_t best = -1, best_gap = INT64_MAX, at = 0;
    for (int j = 0; j < x->nbuf; j++) {
        if (r[j].lo > at) {
            int64_t gap = r[j].lo - at;
            if (gap >= it->bytes && gap < best_gap) best = at, best_gap = gap;
        }
        if (r[j].hi > at) at = r[j].hi;
    }
    it->off = best >= 0 ? best : at;
    if (it->bytes > 0) mp_index_walk(x, it->start, it->end, mp_record, &(mp_range){it->off, it->off + it->bytes});
}

/* ---- the plan's check ------------------------------------------------------------
 * A sweep over the ops, independent of the placement above: the boxes
 * live at one op are pairwise disjoint while the check holds, so they are
 * ordered by offset, and a box entering clashes with one of them exactly
 * when it clashes with its neighbours in that order (the one below it and
 * the one above).  The live boxes are kept by their rank in offset order
 * in a Fenwick tree of counts, which finds those neighbours in O(log n). */
typedef struct mp_sweep {
    int n;
    int *tree; /* Fenwick tree over ranks 1..n: how many live boxes */
    int *at;   /* rank -> the live box there, plus one (0: none) */
} mp_sweep;

typedef struct mp_key {
    int64_t key;
    int box;
} mp_key;

static int mp_key_cmp(const void *x, const void *y) {
    const mp_key *a = x, *b = y;
    if (a->key != b->key) return a->key < b->key ? -1 : 1;
    return a->box - b->box;
}

/* The boxes' indices ordered by `field` of each (ties by index). */
static int *mp_boxes_by(const ir_mem_box *b, int n, int field) {
    mp_key *k = sup_xmalloc(sizeof *k * (size_t)(n + 1));
    for (int i = 0; i < n; i++) k[i] = (mp_key){field == 0 ? b[i].off : field == 1 ? b[i].start : b[i].end, i};
    qsort(k, (size_t)n, sizeof *k, mp_key_cmp);
    int *order = sup_xmalloc(sizeof *order * (size_t)(n + 1));
    for (int i = 0; i < n; i++) order[i] = k[i].box;
    free(k);
    return order;
}

static void mp_fenwick_add(mp_sweep *w, int r, int d) {
    for (; r <= w->n; r += r & -r) w->tree[r] += d;
}

static int mp_fenwick_prefix(const mp_sweep *w, int r) {
    int c = 0;
    for (; r > 0; r -= r & -r) c += w->tree[r];
    return c;
}

/* The rank of the k-th live box in offset order (k >= 1). */
static int mp_fenwick_kth(const mp_sweep *w, int k) {
    int r = 0, step = 1;
    while (2 * step <= w->n) step *= 2;
    for (; step > 0; step /= 2)
        if (r + step <= w->n && w->tree[r + step] < k) r += step, k -= w->tree[r];
    return r + 1;
}

bool ir_mem_boxes_disjoint(int nops, const ir_mem_box *b, int n) {
    (void)nops;
    mp_sweep w = {n, sup_xcalloc((size_t)n + 1, sizeof(int)), sup_xcalloc((size_t)n + 1, sizeof(int))};
    int *by_off = mp_boxes_by(b, n, 0), *by_start = mp_boxes_by(b, n, 1), *by_end = mp_boxes_by(b, n, 2);
    int *rank = sup_xmalloc(sizeof(int) * (size_t)(n + 1));
    for (int k = 0; k < n; k++) rank[by_off[k]] = k + 1;
    bool ok = true;
    int live = 0;
    for (int k = 0, e = 0; k < n && ok; k++) {
        const ir_mem_box *x = &b[by_start[k]];
        for (; e < n && b[by_end[e]].end < x->start; e++) { /* ended before x starts: started before it too */
            int r = rank[by_end[e]];
            if (w.at[r] != by_end[e] + 1) continue;
            mp_fenwick_add(&w, r, -1);
            w.at[r] = 0;
            live--;
        }
        int r = rank[by_start[k]], below = mp_fenwick_prefix(&w, r - 1);
        if (below > 0) { /* the live box just below x in offset order */
            const ir_mem_box *y = &b[w.at[mp_fenwick_kth(&w, below)] - 1];
            ok = y->off + y->bytes <= x->off;
        }
        if (ok && below < live) { /* and the one just above */
            const ir_mem_box *y = &b[w.at[mp_fenwick_kth(&w, below + 1)] - 1];
            ok = x->off + x->bytes <= y->off;
        }
        mp_fenwick_add(&w, r, 1);
        w.at[r] = by_start[k] + 1;
        live++;
    }
    free(w.tree);
    free(w.at);
    free(rank);
    free(by_off);
    free(by_start);
    free(by_end);
    return ok;
}

/* Live bytes per category at each op; returns the op with the largest sum
 * (-1: before the first op, when there are none). */
static int mp_peak_op(const ir_module *m, const mp_item *items, int n, int64_t *best_sum) {
    int best = -1;
    *best_sum = -1;
    int64_t *delta = sup_xcalloc((size_t)m->nops + 3, sizeof *delta);
    for (int i = 0; i < n; i++) { /* ranges over ops -1..nops, shifted by one */
        delta[items[i].start + 1] += items[i].bytes;
        delta[items[i].end + 2] -= items[i].bytes;
    }
    int64_t live = 0;
    for (int i = -1; i <= m->nops; i++) {
        live += delta[i + 1];
        if (i >= 0 && i < m->nops && live > *best_sum) *best_sum = live, best = i;
    }
    if (best < 0) *best_sum = live;
    free(delta);
    return best;
}

static bool mp_fail_overflow(const char *what) {
    sup_error(sup_noloc(), "memory plan: the size of %s overflows 64 bits; the module cannot be planned", what);
    return false;
}

/* Places items[0..n) (one arena's, in placement order) with best fit;
 * returns the arena's size, -1 on overflow (reported). */
static int64_t mp_place_all(const ir_module *m, mp_item *items, int n, int64_t *naive) {
    int64_t peak = 0;
    *naive = 0;
    mp_index x;
    mp_index_init(&x, m->nops);
    for (int k = 0; k < n && peak >= 0; k++) {
        mp_place(&x, &items[k]);
        if (items[k].off > INT64_MAX - items[k].bytes || *naive > INT64_MAX - items[k].bytes) {
            mp_fail_overflow(items[k].host ? "the host arena" : "the arena");
            peak = -1;
        } else if (items[k].off + items[k].bytes > peak)
            peak = items[k].off + items[k].bytes;
        if (peak >= 0) *naive += items[k].bytes;
    }
    mp_index_free(&x);
    return peak;
}

/* ---- the result, and the plans of modules seen before ------------------------
 * A compile plans the same step several times: recompute auto's trial of
 * `none` and then the memplan pass (offload and overlap often change
 * nothing between them), and the trial builds of mlp_chunk auto and of the
 * layout's candidates before the compile builds the same step again.  A
 * plan is a function of the ops, the values' kinds and types, the groups,
 * the mesh, the target and the config (the planner reads `offload`), so
 * the last few plans are kept under a 128-bit fingerprint of exactly those
 * and a module with the same fingerprint gets the same plan without placing
 * its buffers again: planning 1024 layers costs about 0.15 s, the
 * fingerprint a few ms.  Left out of the fingerprint: value names, source
 * locations and the config keys the plan writes (mem.*) or a trial writes
 * after planning (recompute.chosen), none of which the planner reads. */
typedef struct mp_result {
    int64_t *off; /* per value: its offset, -1 without a buffer */
    int nvalues;
    ir_mem_stats st;
    int64_t opt_off, opt_bytes, comm_off, comm[2], stage_off, stage_bytes;
    bool cuda, has_host;
} mp_result;

typedef struct mp_fp {
    uint64_t a, b;
} mp_fp;

static uint64_t mp_mix(uint64_t x) { /* splitmix64's finaliser */
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

static void mp_fp_word(mp_fp *f, uint64_t x) {
    f->a = (f->a ^ mp_mix(x)) * 0x100000001b3ull;
    f->b = (f->b + mp_mix(x ^ 0x9e3779b97f4a7c15ull)) * 0xff51afd7ed558ccdull;
}

static void mp_fp_str(mp_fp *f, const char *s) {
    uint64_t w = 0;
    int k = 0;
    for (; *s; s++) {
        w = w << 8 | (unsigned char)*s;
        if (++k == 8) mp_fp_word(f, w), w = 0, k = 0;
    }
    mp_fp_word(f, w ^ (uint64_t)k << 56);
}

/* Attribute keys and identifier values are interned (ir_intern), so their
 * pointers stand for their text within the process, as the cache does. */
static mp_fp mp_fingerprint(const ir_module *m, ir_mem_target t) {
    mp_fp f = {0x6a09e667f3bcc908ull, 0xbb67ae8584caa73bull};
    mp_fp_word(&f, (uint64_t)t.cuda << 63 ^ (uint64_t)t.align);
    mp_fp_word(&f, (uint64_t)m->nops << 32 ^ (uint32_t)m->nvalues);
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        mp_fp_word(&f,
                   (uint64_t)op->code << 32 ^ (uint64_t)op->nin << 16 ^ (uint64_t)op->nout << 8 ^ (uint64_t)op->nattrs);
        for (int k = 0; k < op->nin; k++) mp_fp_word(&f, (uint64_t)(uint32_t)op->in[k]);
        for (int k = 0; k < op->nout; k++) mp_fp_word(&f, (uint64_t)(uint32_t)op->out[k] << 32);
        for (int a = 0; a < op->nattrs; a++) {
            const ir_attr *at = &op->attrs[a];
            mp_fp_word(&f, (uint64_t)(uintptr_t)at->key ^ (uint64_t)at->kind << 60);
            mp_fp_word(&f, (uint64_t)at->i); /* the union's bits: i, f or the interned s */
        }
    }
    for (int v = 0; v < m->nvalues; v++) {
        const ir_value *val = &m->values[v];
        mp_fp_word(&f, (uint64_t)val->kind << 40 ^ (uint64_t)val->type.dtype << 32 ^ (uint64_t)val->type.rank);
        mp_fp_word(&f, (uint64_t)(uint32_t)val->def);
        for (int d = 0; d < val->type.rank && d < IR_MAX_RANK; d++) {
            mp_fp_word(&f, (uint64_t)val->type.dims[d]);
            mp_fp_word(&f, (uint64_t)(uint32_t)val->type.shard[d]);
            mp_fp_word(&f, (uint64_t)val->type.unit[d]);
        }
    }
    for (int g = 0; g < m->ngroups; g++) {
        const ir_group *gr = &m->groups[g];
        mp_fp_word(&f, (uint64_t)gr->nsets << 40 ^ (uint64_t)gr->set_size << 20 ^ (uint64_t)gr->block);
        for (int k = 0; k < gr->nsets * gr->set_size; k++) mp_fp_word(&f, (uint64_t)(uint32_t)gr->ranks[k]);
    }
    int world = m->mesh.nodes * m->mesh.devices_per_node;
    mp_fp_word(&f, (uint64_t)m->mesh.nodes << 32 ^ (uint32_t)m->mesh.devices_per_node);
    for (int r = 0; m->mesh.node_of && r < world; r++) mp_fp_word(&f, (uint64_t)(uint32_t)m->mesh.node_of[r]);
    for (int c = 0; c < m->nconfig; c++) {
        const char *k = m->config[c].key;
        if (!strncmp(k, "mem.", 4) || !strcmp(k, "recompute.chosen")) continue;
        mp_fp_str(&f, k);
        mp_fp_str(&f, m->config[c].value);
    }
    return f;
}

/* In the compilation context (ir_context.plans), created on first use. */
enum { MP_CACHED = 4 };
struct ir_plan_cache {
    mp_fp fp[MP_CACHED];
    mp_result r[MP_CACHED];
    int n, next; /* entries held; the one to replace next */
};

static struct ir_plan_cache *mp_cache(void) {
    struct ir_context *x = ir_ctx();
    if (!x->plans) x->plans = sup_xcalloc(1, sizeof *x->plans);
    return x->plans;
}

static const mp_result *mp_cache_find(mp_fp f, const ir_module *m) {
    struct ir_plan_cache *c = mp_cache();
    for (int k = 0; k < c->n; k++)
        if (c->fp[k].a == f.a && c->fp[k].b == f.b && c->r[k].nvalues == m->nvalues) return &c->r[k];
    return NULL;
}

static void mp_cache_put(mp_fp f, const mp_result *r) {
    struct ir_plan_cache *c = mp_cache();
    int k = c->n < MP_CACHED ? c->n++ : c->next;
    c->next = (k + 1) % MP_CACHED;
    free(c->r[k].off);
    c->fp[k] = f;
    c->r[k] = *r;
    c->r[k].off = sup_xmalloc(sizeof *r->off * (size_t)(r->nvalues + 1));
    memcpy(c->r[k].off, r->off, sizeof *r->off * (size_t)r->nvalues);
}

void ir_mem_plan_forget(void) {
    struct ir_plan_cache *c = mp_cache();
    for (int k = 0; k < c->n; k++) free(c->r[k].off);
    memset(c, 0, sizeof *c);
}

/* Writes the plan into m: the values' offsets and the config mem.* keys. */
static void mp_apply(ir_module *m, const mp_result *r) {
    for (int v = 0; v < m->nvalues; v++) m->values[v].mem_off = r->off[v];
    ir_config_set(m, "mem.target", r->cuda ? "cuda" : "cpu");
    ir_config_set_int(m, "mem.peak", r->st.arena);
    ir_config_set_int(m, "mem.peak_op", r->st.peak_op);
    ir_config_set_int(m, "mem.opt_offset", r->opt_off);
    ir_config_set_int(m, "mem.opt_bytes", r->opt_bytes);
    ir_config_set_int(m, "mem.comm_offset", r->comm_off);
    ir_config_set_int(m, "mem.comm_bytes0", r->comm[0]);
    ir_config_set_int(m, "mem.comm_bytes1", r->comm[1]);
    /* The host arena's keys only when something lives there, so that a
     * step without offload prints as it always did. */
    if (r->has_host) {
        ir_config_set_int(m, "mem.host_peak", r->st.host_arena);
        ir_config_set_int(m, "mem.host_peak_op", r->st.host_peak_op);
    } else {
        ir_config_remove(m, "mem.host_peak");
        ir_config_remove(m, "mem.host_peak_op");
    }
    if (r->stage_bytes > 0) {
        ir_config_set_int(m, "mem.host_stage_offset", r->stage_off);
        ir_config_set_int(m, "mem.host_stage_bytes", r->stage_bytes);
    } else {
        ir_config_remove(m, "mem.host_stage_offset");
        ir_config_remove(m, "mem.host_stage_bytes");
    }
}

/* Places every buffer of m; false (reported) when a size overflows. */
static bool mp_compute(const ir_module *m, ir_mem_target t, mp_result *res) {
    int *start = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
    int *end = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
    ir_mem_live(m, start, end);
    mp_item *items = sup_xmalloc(sizeof *items * (size_t)(m->nvalues + 3));
    int n = 0, nhost = 0;
    int64_t comm[2];
    ir_mem_comm_bytes(m, t, comm);
    int64_t opt_bytes = ir_mem_opt_bytes(m, t), stage_bytes = ir_mem_host_stage_bytes(m, t);
    int opt_host = ir_mem_opt_on_host(m);
    bool ok = true;
    if (opt_bytes < 0 || comm[0] < 0 || comm[1] < 0 || comm[0] > INT64_MAX - comm[1])
        ok = mp_fail_overflow(opt_bytes < 0 ? "the optimizer state" : "a collective's staging area");
    for (int v = 0; v < m->nvalues; v++) res->off[v] = -1;
    for (int v = 0; ok && v < m->nvalues; v++) {
        if (start[v] == -2) continue;
        int64_t b = ir_mem_value_bytes(m, v, t);
        if (b < 0) {
            char what[IR_NAME_MAX + 8];
            snprintf(what, sizeof what, "%%%s", m->values[v].name);
            ok = mp_fail_overflow(what);
        }
        items[n++] = (mp_item){v, b, 0, start[v], end[v], ir_mem_on_host(m, v)};
    }
    if (ok) {
        items[n++] = (mp_item){-1, opt_bytes, 0, -1, m->nops, opt_host};
        items[n++] = (mp_item){-2, comm[0] + comm[1], 0, -1, m->nops, 0};
        if (stage_bytes > 0) items[n++] = (mp_item){-3, stage_bytes, 0, -1, m->nops, 1};
    }
    for (int k = 0; k < n; k++) nhost += items[k].host;
    int64_t peak = 0, host_peak = 0, naive = 0, host_naive = 0;
    int ndev = n - nhost;
    if (ok) {
        qsort(items, (size_t)n, sizeof *items, mp_order);
        peak = mp_place_all(m, items, ndev, &naive);
        host_peak = mp_place_all(m, items + ndev, nhost, &host_naive);
        ok = peak >= 0 && host_peak >= 0;
    }
    if (ok) {
        int64_t live_max, host_live_max = 0;
        res->opt_off = res->comm_off = res->stage_off = 0;
        for (int k = 0; k < n; k++) {
            if (items[k].v >= 0)
                res->off[items[k].v] = items[k].off;
            else if (items[k].v == -1)
                res->opt_off = items[k].off;
            else if (items[k].v == -2)
                res->comm_off = items[k].off;
            else
                res->stage_off = items[k].off;
        }
        int pop = mp_peak_op(m, items, ndev, &live_max);
        int host_pop = nhost ? mp_peak_op(m, items + ndev, nhost, &host_live_max) : -1;
        res->st = (ir_mem_stats){peak, live_max, pop, naive, host_peak, host_live_max, host_naive, host_pop};
        res->opt_bytes = opt_bytes;
        res->comm[0] = comm[0], res->comm[1] = comm[1];
        res->stage_bytes = stage_bytes;
        res->cuda = t.cuda;
        res->has_host = nhost > 0;
    }
    free(items);
    free(start);
    free(end);
    return ok;
}

bool ir_mem_plan(ir_module *m, ir_mem_target t, ir_mem_stats *st) {
    mp_fp f = mp_fingerprint(m, t);
    const mp_result *hit = mp_cache_find(f, m);
    mp_result own = {.off = sup_xmalloc(sizeof(int64_t) * (size_t)(m->nvalues + 1)), .nvalues = m->nvalues};
    bool ok = hit || mp_compute(m, t, &own);
    if (ok) {
        if (!hit) mp_cache_put(f, &own);
        mp_apply(m, hit ? hit : &own);
        if (st) *st = (hit ? hit : &own)->st;
    } else {
        for (int v = 0; v < m->nvalues; v++) m->values[v].mem_off = -1;
    }
    free(own.off);
    return ok;
}
