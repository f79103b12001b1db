/* rt_docs.c — packed documents (program->documents): the document table of
 * the data, each step's packing, and the per-token tables the loader,
 * RoPE, attention and the loss read.
 *
 * A document is a run of tokens up to and including an end-of-text token
 * (the tokens after the last one form a final document); a lone end-of-text
 * token teaches nothing and is skipped.  A document longer than seq_len is
 * cut into pieces of seq_len tokens (the last one shorter), each then a
 * document of its own.
 *
 * Step t draws documents with replacement, the j-th from a counter-based
 * hash of (seed, t, j), until the micro-batch's B*S tokens are reached (the
 * last one cut to fit); layout_pack lays them into the B rows (sequential:
 * back to back, cut at row ends; balanced: the same pieces laid out again,
 * longest first, each into the row of least expected cost).  What a row holds does not depend on the layout; with balanced
 * packing the rows are then ordered so that the batch-aware groups (which
 * own consecutive rows) get equal work (layout_pack_groups).  Every rank
 * computes the same whole-step tables from the same (seed, t), so the data
 * is identical on every rank and exact on --resume, and every layout sums
 * the same rows (the single rank in another order); each rank reads the
 * slices it holds.
 *
 * Within a row every document is numbered (0, 1, ...), its tokens have
 * positions 0 .. len-1, and the target of its last token is -1 (not
 * counted: no loss across documents).  The loss is the mean over the
 * counted targets of the step (rt_loss_scale). */
#include <stdlib.h>
#include <string.h>

#include "rt_data.h"

struct rt_docs {
    layout_doc *docs; /* the table: pieces of at most seq_len tokens */
    int64_t ndocs, nsplit, nskipped;
    double linear; /* per-token over per-pair work (layout_doc_cost) */
    /* This step's packing (rt_docs_step), over the whole [B,S] micro-batch
     * in natural order. */
    int64_t step;
    layout_doc *draw;
    layout_slot *slots;
    int nslots;
    int32_t *doc, *tok, *tgt;
    int64_t *pos;
    int64_t counted;
    double imbalance;
};

/* Appends the pieces of document [src, src+len) to the table. */
static void docs_add(rt_docs *d, int64_t *cap, int64_t src, int64_t len, int64_t S) {
    if (len < 2) {
        d->nskipped++;
        return;
    }
    if (len > S) d->nsplit++;
    for (int64_t off = 0; off < len; off += S) {
        if (d->ndocs == *cap) {
            *cap = *cap ? 2 * *cap : 1024;
            layout_doc *grown = RT_MALLOC(sizeof *grown * (size_t)*cap);
            if (d->ndocs) memcpy(grown, d->docs, sizeof *grown * (size_t)d->ndocs);
            free(d->docs);
            d->docs = grown;
        }
        d->docs[d->ndocs++] = (layout_doc){src + off, len - off < S ? len - off : S};
    }
}

bool rt_docs_load(rt_ctx *rt, const char *path, char *err, size_t errlen) {
    const rt_program *p = rt->p;
    rt_docs *d = RT_MALLOC(sizeof *d);
    memset(d, 0, sizeof *d);
    rt->docs = d;
    d->step = -1;
    d->linear = layout_doc_linear(p->hidden, p->heads, p->kv_heads, p->head_dim, p->ffn);
    int64_t cap = 0, start = 0, neot = 0;
    for (int64_t i = 0; i < rt->data->ntokens; i++) {
        if ((i & 0xfffff) == 0xfffff) rt_data_release(rt, i - 0xfffff, i + 1); /* every 1M tokens */
        if (rt_token(rt, i) != p->eot_token) continue;
        neot++;
        docs_add(d, &cap, start, i + 1 - start, p->seq_len);
        start = i + 1;
    }
    if (neot == 0) {
        snprintf(err, errlen,
                 "%s: documents on, but its %lld tokens hold no end-of-text token (eot_token %lld): check the "
                 "token id, or train without 'documents on'",
                 path, (long long)rt->data->ntokens, (long long)p->eot_token);
        return false;
    }
    rt_data_release(rt, 0, rt->data->ntokens);
    if (start < rt->data->ntokens) docs_add(d, &cap, start, rt->data->ntokens - start, p->seq_len);
    if (d->ndocs == 0) {
        snprintf(err, errlen, "%s: documents on, but every document is empty (%lld end-of-text tokens in a row)", path,
                 (long long)neot);
        return false;
    }
    int64_t B = p->micro_batch, S = p->seq_len;
    d->draw = RT_MALLOC(sizeof *d->draw * (size_t)(B * S));
    d->slots = RT_MALLOC(sizeof *d->slots * (size_t)(B * S + B));
    d->doc = RT_MALLOC(sizeof(int32_t) * (size_t)(3 * B * S));
    d->tok = d->doc + B * S;
    d->tgt = d->tok + B * S;
    d->pos = RT_MALLOC(sizeof(int64_t) * (size_t)(B * S));
    return true;
}

void rt_docs_free(rt_docs *d) {
    if (!d) return;
    free(d->docs), free(d->draw), free(d->slots), free(d->doc), free(d->pos);
    free(d);
}

/* Step t's documents, in draw order: exactly B*S tokens. */
static int docs_draw(const rt_ctx *rt, int64_t t) {
    const rt_docs *d = rt->docs;
    int64_t need = rt->p->micro_batch * rt->p->seq_len, total = 0;
    uint64_t h0 = rt_splitmix64(rt_splitmix64((uint64_t)rt->opt.seed ^ 0x646f6373ull) ^ (uint64_t)t);
    int n = 0;
    for (uint64_t j = 0; total < need; j++) {
        layout_doc x = d->docs[rt_splitmix64(h0 ^ j) % (uint64_t)d->ndocs];
        if (x.len > need - total) x.len = need - total;
        d->draw[n++] = x;
        total += x.len;
    }
    return n;
}

/* Fills the per-token tables from the slots. */
static void docs_tables(rt_ctx *rt) {
    rt_docs *d = rt->docs;
    int64_t S = rt->p->seq_len;
    int32_t id = 0;
    d->counted = 0;
    for (int i = 0; i < d->nslots; i++) {
        const layout_slot *s = &d->slots[i];
        if (i == 0 || s->row != d->slots[i - 1].row) id = 0;
        for (int64_t j = 0; j < s->len; j++) {
            int64_t at = s->row * S + s->col + j;
            d->doc[at] = id;
            d->pos[at] = j;
            d->tok[at] = rt_token(rt, s->src + j);
            d->tgt[at] = j + 1 < s->len ? rt_token(rt, s->src + j + 1) : -1;
        }
        d->counted += s->len - 1;
        id++;
    }
}

/* The documents from index *next on, in the table's (the file's) order,
 * until `need` tokens (the last one cut to fit; its rest is not used by the
 * next batch, so that a batch's rows do not depend on the batch before).
 * Writes them to out when it is not NULL; returns the tokens taken (less
 * than need when the table runs out) and moves *next past the documents
 * used whole or cut. */
static int64_t docs_take_in_order(const rt_docs *d, int64_t need, int64_t *next, layout_doc *out, int *n) {
    int64_t total = 0;
    *n = 0;
    while (total < need && *next < d->ndocs) {
        layout_doc x = d->docs[(*next)++];
        if (x.len > need - total) x.len = need - total;
        if (out) out[*n] = x;
        (*n)++;
        total += x.len;
    }
    return total;
}

/* A validation batch from document *next on (rt_docs_val_batches made
 * sure at start-up that the table fills every batch). */
static int docs_draw_in_order(const rt_ctx *rt, int64_t *next) {
    const rt_docs *d = rt->docs;
    int64_t need = rt->p->micro_batch * rt->p->seq_len;
    int n;
    int64_t total = docs_take_in_order(d, need, next, d->draw, &n);
    RT_CHECK(total == need, "validation documents run out after %lld tokens of the batch's %lld", (long long)total,
             (long long)need);
    return n;
}

int64_t rt_docs_val_batches(const rt_docs *d, int64_t need, int64_t *ndocs) {
    int64_t next = 0, full = 0;
    *ndocs = d->ndocs;
    int n;
    while (next < d->ndocs && docs_take_in_order(d, need, &next, NULL, &n) == need) full++;
    return full;
}

static void docs_pack(rt_ctx *rt, int n);

void rt_docs_step(rt_ctx *rt, int64_t t) {
    rt_docs *d = rt->docs;
    if (!d || d->step == t) return;
    docs_pack(rt, docs_draw(rt, t));
    d->step = t;
}

int64_t rt_docs_val_batch(rt_ctx *rt, int64_t next) {
    docs_pack(rt, docs_draw_in_order(rt, &next));
    rt->docs->step = INT64_MAX; /* packed, and no training step's (a table of its own) */
    return next;
}

/* Packs the n drawn documents into the rows and fills the tables. */
static void docs_pack(rt_ctx *rt, int n) {
    rt_docs *d = rt->docs;
    const rt_program *p = rt->p;
    int G = p->batch_groups > 0 ? p->batch_groups : 1;
    layout_packing how = p->packing == RT_PACK_BALANCED ? LAYOUT_PACK_BALANCED : LAYOUT_PACK_SEQUENTIAL;
    d->nslots = layout_pack(d->draw, n, p->micro_batch, p->seq_len, how, d->linear, d->slots);
    RT_CHECK(d->nslots > 0, "packing %d documents into %lld rows of %lld failed", n, (long long)p->micro_batch,
             (long long)p->seq_len);
    if (how == LAYOUT_PACK_BALANCED && G > 1)
        RT_CHECK(layout_pack_groups(d->slots, d->nslots, p->micro_batch, G, d->linear) == 0,
                 "ordering %lld rows for %d groups failed", (long long)p->micro_batch, G);
    d->imbalance = layout_pack_imbalance(d->slots, d->nslots, p->micro_batch, G, d->linear, NULL);
    docs_tables(rt);
}

void rt_doc_slice(const rt_ctx *rt, int64_t row0, int64_t b, int64_t start, int64_t s, int32_t *doc, int64_t *pos) {
    const rt_docs *d = rt->docs;
    RT_CHECK(d && d->step >= 0, "document tables asked for before the step's packing");
    int64_t S = rt->p->seq_len;
    int64_t *nat = RT_MALLOC(sizeof(int64_t) * (size_t)(s > 0 ? s : 1));
    rt_seq_positions(rt, start, s, nat);
    for (int64_t bi = 0; bi < b; bi++)
        for (int64_t i = 0; i < s; i++) {
            int64_t at = (row0 + bi) * S + nat[i];
            if (doc) doc[bi * s + i] = d->doc[at];
            if (pos) pos[bi * s + i] = d->pos[at];
        }
    free(nat);
}

int32_t rt_docs_token(const rt_ctx *rt, int64_t row, int64_t i, int shift) {
    const rt_docs *d = rt->docs;
    int64_t at = row * rt->p->seq_len + i;
    return shift ? d->tgt[at] : d->tok[at];
}

void rt_docs_stats(const rt_ctx *rt, rt_docs_info *out) {
    const rt_docs *d = rt->docs;
    *out = (rt_docs_info){0};
    if (!d) return;
    out->ndocs = d->ndocs, out->nsplit = d->nsplit, out->nskipped = d->nskipped;
    out->step_docs = d->nslots, out->counted = d->counted, out->imbalance = d->imbalance;
}

double rt_loss_scale(rt_ctx *rt) {
    /* The mean over the optimizer step: every micro-step's tokens (counted
     * targets), not the micro-batch's alone; during a validation, its own. */
    if (rt->step_counted > 0 && rt->val_batch < 0) return 1.0 / (double)rt->step_counted;
    if (!rt->docs) return 1.0 / (double)(rt->p->micro_batch * rt->p->seq_len);
    return 1.0 / (double)(rt->docs->counted > 0 ? rt->docs->counted : 1);
}

int64_t rt_docs_step_counted(rt_ctx *rt, int64_t t) {
    int64_t A = rt_accum(rt), total = 0;
    for (int64_t m = 0; m < A; m++) {
        rt_docs_step(rt, t * A + m);
        total += rt->docs->counted;
    }
    return total;
}
