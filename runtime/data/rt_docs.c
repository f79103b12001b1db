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
 * counted targets of the step (rt_loss_scale).
 *
 * batch_aware dynamic (program->nvariants > 0): the same draw, but the
 * pieces go to groups of the variants' sizes (layout_dyn_assign: whole
 * where the groups allow, the longest on the largest groups), each group
 * one row of size * dyn_tokens tokens; this rank keeps the tables of its
 * own group's row only (row 0, as its variant's step sees it).
 *
 * --pieces FILE replays the documents another run's --assignments logged:
 * micro-step j takes that line's pieces, in its groups' order, instead of
 * drawing (a static single-rank run then trains on exactly the documents a
 * dynamic run cut and placed). */
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

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
    /* batch_aware dynamic: this micro-step's groups, the variants' sizes,
     * and the group holding this rank. */
    layout_dyn_group *groups;
    int ngroups, mine, sizes[64];
    double comm[64];
    /* --pieces: every replayed micro-step's pieces (piece_at[j] .. piece_at[j+1]). */
    layout_doc *replay;
    int64_t *replay_at, nreplay;
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

/* One --pieces line's documents appended to the replay table; false with
 * the reason. */
static bool docs_replay_line(rt_docs *d, const cJSON *o, int64_t *cap, int64_t ntokens, char *why, size_t n) {
    const cJSON *groups = cJSON_GetObjectItemCaseSensitive(o, "groups");
    if (!cJSON_IsArray(groups)) return rt_fail(why, n, "no \"groups\" array");
    const cJSON *g, *pc;
    cJSON_ArrayForEach(g, groups) {
        const cJSON *pieces = cJSON_GetObjectItemCaseSensitive(g, "pieces");
        if (!cJSON_IsArray(pieces)) return rt_fail(why, n, "a group without a \"pieces\" array");
        cJSON_ArrayForEach(pc, pieces) {
            const cJSON *a = cJSON_GetArrayItem(pc, 0), *b = cJSON_GetArrayItem(pc, 1);
            if (!cJSON_IsNumber(a) || !cJSON_IsNumber(b) || a->valuedouble < 0 || b->valuedouble < 1 ||
                a->valuedouble + b->valuedouble > (double)ntokens)
                return rt_fail(why, n, "a piece that is not [src, len] inside the data's %lld tokens",
                               (long long)ntokens);
            if (d->replay_at[d->nreplay + 1] == *cap) {
                *cap *= 2;
                layout_doc *grown = RT_MALLOC(sizeof *grown * (size_t)*cap);
                memcpy(grown, d->replay, sizeof *grown * (size_t)d->replay_at[d->nreplay + 1]);
                free(d->replay);
                d->replay = grown;
            }
            d->replay[d->replay_at[d->nreplay + 1]++] = (layout_doc){(int64_t)a->valuedouble, (int64_t)b->valuedouble};
        }
    }
    return true;
}

/* --pieces FILE: every line one micro-step, in order (step 1 micro 0, ...). */
static bool docs_replay_load(rt_ctx *rt, const char *path, char *err, size_t errlen) {
    rt_docs *d = rt->docs;
    unsigned char *text;
    int64_t len, cap = 1024, lines = 0, A = rt_accum(rt);
    if (!rt_read_input("--pieces", path, &text, &len, err, errlen)) return false;
    for (int64_t i = 0; i < len; i++) lines += text[i] == '\n';
    d->replay = RT_MALLOC(sizeof *d->replay * (size_t)cap);
    d->replay_at = RT_MALLOC(sizeof *d->replay_at * (size_t)(lines + 2));
    d->replay_at[0] = 0;
    bool ok = true;
    char why[160];
    int64_t line = 0;
    for (char *s = (char *)text, *nl; ok && s < (char *)text + len; s = nl + 1) {
        nl = strchr(s, '\n');
        if (!nl) nl = (char *)text + len;
        *nl = '\0';
        line++;
        if (!*s) continue;
        cJSON *o = cJSON_Parse(s);
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(o, "step"),
                    *mi = cJSON_GetObjectItemCaseSensitive(o, "micro");
        d->replay_at[d->nreplay + 1] = d->replay_at[d->nreplay];
        if (!o || !cJSON_IsNumber(st) || !cJSON_IsNumber(mi))
            ok = rt_fail(why, sizeof why, "not a JSON object with \"step\" and \"micro\"");
        else if ((int64_t)st->valuedouble - 1 != d->nreplay / A || (int64_t)mi->valuedouble != d->nreplay % A)
            ok = rt_fail(why, sizeof why,
                         "step %g micro %g where step %lld micro %lld comes next (%lld micro-step(s) "
                         "per step)",
                         st->valuedouble, mi->valuedouble, (long long)(d->nreplay / A + 1), (long long)(d->nreplay % A),
                         (long long)A);
        else
            ok = docs_replay_line(d, o, &cap, rt->data->ntokens, why, sizeof why);
        cJSON_Delete(o);
        if (ok) d->nreplay++;
    }
    free(text);
    if (!ok)
        snprintf(err, errlen, "--pieces %s:%lld: %s", path, (long long)line, why);
    else if (d->nreplay == 0)
        snprintf(err, errlen, "--pieces %s: no micro-step in it", path), ok = false;
    return ok;
}

bool rt_docs_load(rt_ctx *rt, const char *path, char *err, size_t errlen) {
    const rt_program *p = rt->p;
    rt_docs *d = RT_MALLOC(sizeof *d);
    memset(d, 0, sizeof *d);
    rt->docs = d;
    d->step = -1;
    d->linear = layout_doc_linear(p->hidden, p->heads, p->kv_heads, p->head_dim, p->ffn);
    /* Documents are cut at seq_len; a dynamic program's validation rows are
     * one row of micro_batch * seq_len (rt_dyn_eval_begin), its documents
     * cut at that, as one rank with such rows cuts them. */
    int64_t cut = p->nvariants > 0 && rt->data == &rt->val ? p->micro_batch * p->seq_len : p->seq_len;
    int64_t cap = 0, start = 0, neot = 0;
    for (int64_t i = 0; i < rt->data->ntokens; i++) {
        if ((i & 0xfffff) == 0xfffff) rt_data_release(rt, i - 0xfffff, i + 1); /* every 1M tokens */
        if (rt_token(rt, i) != p->eot_token) continue;
        neot++;
        docs_add(d, &cap, start, i + 1 - start, cut);
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
    if (start < rt->data->ntokens) docs_add(d, &cap, start, rt->data->ntokens - start, cut);
    if (d->ndocs == 0) {
        snprintf(err, errlen, "%s: documents on, but every document is empty (%lld end-of-text tokens in a row)", path,
                 (long long)neot);
        return false;
    }
    int64_t B = p->micro_batch, S = p->seq_len;
    d->draw = RT_MALLOC(sizeof *d->draw * (size_t)(B * S));
    d->slots = RT_MALLOC(sizeof *d->slots * (size_t)(B * S + B + p->world));
    if (p->nvariants > 0) {
        d->groups = RT_MALLOC(sizeof *d->groups * (size_t)p->world);
        for (int k = 0; k < p->nvariants && k < 64; k++)
            d->sizes[k] = p->variants[k].size, d->comm[k] = p->variants[k].comm;
    }
    if (rt->opt.pieces && !docs_replay_load(rt, rt->opt.pieces, err, errlen)) return false;
    d->doc = RT_MALLOC(sizeof(int32_t) * (size_t)(3 * B * S));
    d->tok = d->doc + B * S;
    d->tgt = d->tok + B * S;
    d->pos = RT_MALLOC(sizeof(int64_t) * (size_t)(B * S));
    return true;
}

void rt_docs_free(rt_docs *d) {
    if (!d) return;
    free(d->docs), free(d->draw), free(d->slots), free(d->doc), free(d->pos);
    free(d->groups), free(d->replay), free(d->replay_at);
    free(d);
}

/* Step t's documents, in draw order: exactly B*S tokens (--pieces: the
 * logged ones). */
static int docs_draw(const rt_ctx *rt, int64_t t) {
    const rt_docs *d = rt->docs;
    int64_t need = rt->base->micro_batch * rt->base->seq_len, total = 0;
    if (d->replay) {
        RT_CHECK(t < d->nreplay, "--pieces %s lists %lld micro-step(s); micro-step %lld (step %lld) is not among them",
                 rt->opt.pieces, (long long)d->nreplay, (long long)t + 1, (long long)(t / rt_accum(rt)) + 1);
        int n = 0;
        for (int64_t i = d->replay_at[t]; i < d->replay_at[t + 1]; i++)
            d->draw[n++] = d->replay[i], total += d->replay[i].len;
        RT_CHECK(total == need, "--pieces %s: micro-step %lld holds %lld tokens, the micro-batch %lld", rt->opt.pieces,
                 (long long)t + 1, (long long)total, (long long)need);
        return n;
    }
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

/* Fills the per-token tables from the slots (rows of S tokens); with
 * only >= 0, row `only` alone, as row 0 (batch_aware dynamic: this rank's
 * group's).  The counted targets are every row's. */
static void docs_tables(rt_ctx *rt, int64_t S, int64_t only) {
    rt_docs *d = rt->docs;
    int32_t id = 0;
    d->counted = 0;
    for (int i = 0; i < d->nslots; i++) {
        const layout_slot *s = &d->slots[i];
        if (i == 0 || s->row != d->slots[i - 1].row) id = 0;
        d->counted += s->len - 1;
        if (only >= 0 && s->row != only) continue;
        for (int64_t j = 0; j < s->len; j++) {
            int64_t at = (only >= 0 ? 0 : s->row * S) + s->col + j;
            d->doc[at] = id;
            d->pos[at] = j;
            d->tok[at] = rt_token(rt, s->src + j);
            d->tgt[at] = j + 1 < s->len ? rt_token(rt, s->src + j + 1) : -1;
        }
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

/* batch_aware dynamic: the n drawn pieces into the micro-step's groups;
 * the tables hold this rank's group's row (row 0, size * dyn_tokens). */
static void docs_pack_dynamic(rt_ctx *rt, int n) {
    rt_docs *d = rt->docs;
    const rt_program *p = rt->base;
    layout_dyn_shape sh = {.world = p->world,
                           .node_size = p->devices_per_node,
                           .T = p->dyn_tokens,
                           .sizes = d->sizes,
                           .nsizes = p->nvariants,
                           .linear = p->dyn_linear,
                           .size_comm = d->comm};
    d->ngroups = layout_dyn_assign(&sh, d->draw, n, d->groups, d->slots, &d->nslots);
    RT_CHECK(d->ngroups > 0, "assigning %d documents to groups of %d ranks failed", n, p->world);
    d->imbalance = layout_dyn_imbalance(d->groups, d->ngroups);
    d->mine = -1;
    for (int g = 0; g < d->ngroups; g++)
        if (rt->rank >= d->groups[g].first && rt->rank < d->groups[g].first + d->groups[g].size) d->mine = g;
    RT_CHECK(d->mine >= 0, "rank %d is in no group of the assignment", rt->rank);
    docs_tables(rt, 0, d->mine);
}

const layout_dyn_group *rt_docs_groups(const rt_ctx *rt, int *ngroups, int *mine, const layout_slot **slots,
                                       int *nslots) {
    const rt_docs *d = rt->docs;
    *ngroups = d->ngroups, *mine = d->mine, *slots = d->slots, *nslots = d->nslots;
    return d->groups;
}

/* Packs the n drawn documents into the rows and fills the tables. */
static void docs_pack(rt_ctx *rt, int n) {
    rt_docs *d = rt->docs;
    const rt_program *p = rt->base;
    if (p->nvariants > 0 && rt->val_batch < 0) {
        docs_pack_dynamic(rt, n);
        return;
    }
    int G = p->batch_groups > 0 ? p->batch_groups : 1;
    /* A dynamic program validates with its variant of all N ranks: one row
     * of B*S tokens per batch (rt_dyn_eval_begin). */
    int64_t B = p->nvariants > 0 ? 1 : p->micro_batch, S = p->nvariants > 0 ? p->micro_batch * p->seq_len : p->seq_len;
    layout_packing how = p->packing == RT_PACK_BALANCED ? LAYOUT_PACK_BALANCED : LAYOUT_PACK_SEQUENTIAL;
    d->nslots = layout_pack(d->draw, n, B, S, how, d->linear, d->slots);
    RT_CHECK(d->nslots > 0, "packing %d documents into %lld rows of %lld failed", n, (long long)B, (long long)S);
    if (how == LAYOUT_PACK_BALANCED && G > 1)
        RT_CHECK(layout_pack_groups(d->slots, d->nslots, B, G, d->linear) == 0,
                 "ordering %lld rows for %d groups failed", (long long)B, G);
    d->imbalance = layout_pack_imbalance(d->slots, d->nslots, B, G, d->linear, NULL);
    docs_tables(rt, S, -1);
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

void rt_rope_positions(const rt_ctx *rt, int64_t row0, int64_t b, int64_t start, int64_t s, int64_t *pos) {
    if (rt->docs) {
        rt_doc_slice(rt, row0, b, start, s, NULL, pos);
        return;
    }
    rt_seq_positions(rt, start, s, pos);
    for (int64_t bi = 1; bi < b; bi++) memcpy(pos + bi * s, pos, sizeof(int64_t) * (size_t)s);
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

/* BASP_TEST_DYN_BUG=weight plants the bug a dynamic layout invites: the
 * groups of more than one rank weighting their loss twice, so that the
 * step's gradient is no longer the token-weighted mean over everything it
 * saw.  The dynamic equivalence test must then fail
 * (train.dyn.planted_weight). */
static bool docs_planted_weight(const rt_ctx *rt) {
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("BASP_TEST_DYN_BUG");
        on = e && !strcmp(e, "weight");
    }
    return on && rt->base->nvariants > 0 && rt->p->sp_size > 1;
}

double rt_loss_scale(rt_ctx *rt) {
    /* The mean over the optimizer step: every micro-step's tokens (counted
     * targets), not the micro-batch's alone; during a validation, its own. */
    if (rt->step_counted > 0 && rt->val_batch < 0 && docs_planted_weight(rt)) return 2.0 / (double)rt->step_counted;
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
