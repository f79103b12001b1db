/* docplan.c — the planner with packed documents (baspc --plan
 * --doc-lengths FILE): the step time of each layout when the rows are
 * packed from documents of a given length distribution, for sequential
 * and balanced packing.
 *
 * With a document mask, a row's attention work is about sum_i l_i^2 over
 * its documents instead of S^2 (causal: both halve), and everything else is
 * per token, the same in every row.  A batch-aware group processes its
 * B/G rows; the step waits for the slowest group.  So, for a layout whose
 * dense step is T (attention ops Ta of it):
 *
 *   step = (T - Ta) + Ta * E[ max_g f_g ],   f_g = the attention tiles
 *          group g's rows visit over (B/G) dense causal rows' (about the
 *          sum over its documents of l^2 / ((B/G) * S^2))
 *
 * the expectation over PLAN_STEPS sampled steps, drawn and packed as the
 * runtime does: documents longer than S cut into pieces of S, drawn with
 * replacement so that every piece is equally likely (the runtime draws
 * pieces one by one, here a document brings all its pieces at once), the
 * last one cut so that a step holds B*S tokens; then layout_pack, and
 * layout_pack_groups for balanced packing.
 * The attention work is counted by the kernels that run it: at the
 * masked kernels' 64 x 64 tile granularity (a tile on a document boundary
 * costs a whole tile), not as sum l^2; on the cuda target without a ring,
 * where cuDNN runs the documents in zero-padded batches, as sum L^2 of
 * the padded lengths (drv_doc_attn_share).  Not modelled: the balance of a
 * ring's blocks, whose zig-zag order balances the causal mask but not
 * documents. */
#include "driver.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/common.h"

enum { PLAN_STEPS = DRV_PLAN_STEPS };

/* ---- reading the lengths ------------------------------------------------------ */

static bool read_all(const char *path, unsigned char **buf, size_t *len) {
    /* O_NONBLOCK: a FIFO without a writer is refused, not waited on. */
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    struct stat st = {0};
    int fl = -1;
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (fl = fcntl(fd, F_GETFL)) < 0 ||
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        if (fd >= 0) close(fd);
        bool dir = S_ISDIR(st.st_mode), special = fd >= 0 && !S_ISREG(st.st_mode) && !dir;
        sup_error(sup_noloc(), "--doc-lengths %s: cannot %s: %s", path, fd < 0 ? "open" : "read",
                  dir       ? "is a directory"
                  : special ? "not a regular file (a FIFO, device or socket)"
                            : strerror(e));
        return false;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) {
        close(fd);
        sup_error(sup_noloc(), "--doc-lengths %s: cannot open: %s", path, strerror(errno));
        return false;
    }
    size_t cap = 1 << 16, n = 0;
    unsigned char *b = malloc(cap);
    for (size_t got; b && (got = fread(b + n, 1, cap - n, f)) > 0;) {
        n += got;
        if (n == cap) {
            unsigned char *g = realloc(b, cap *= 2);
            if (!g) free(b);
            b = g;
        }
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    if (!b || bad) {
        free(b);
        sup_error(sup_noloc(), "--doc-lengths %s: cannot read", path);
        return false;
    }
    *buf = b;
    *len = n;
    return true;
}

static void add_len(pass_doc_lengths *d, int *cap, int64_t l) {
    if (d->n == *cap) {
        *cap = *cap ? 2 * *cap : 1024;
        d->len = realloc(d->len, sizeof *d->len * (size_t)*cap);
        if (!d->len) {
            fprintf(stderr, "basp: out of memory reading document lengths\n");
            abort();
        }
    }
    d->len[d->n++] = l;
}

/* An llm.c token file: documents end at eot (as the runtime splits them). */
static bool lengths_of_tokens(const char *path, const unsigned char *b, size_t n, const fe_spec *spec,
                              pass_doc_lengths *d) {
    int32_t *tok;
    int64_t nt;
    char err[512];
    if (!rt_tokens_parse(b, n, path, spec->model.vocab, &tok, &nt, err, sizeof err)) {
        sup_error(sup_noloc(), "--doc-lengths %s", err);
        return false;
    }
    int cap = 0;
    int64_t start = 0;
    for (int64_t i = 0; i < nt; i++)
        if (tok[i] == spec->train.eot_token) {
            if (i + 1 - start >= 2) add_len(d, &cap, i + 1 - start);
            start = i + 1;
        }
    if (nt - start >= 2) add_len(d, &cap, nt - start);
    free(tok);
    return true;
}

/* Text: lengths separated by white space; '#' starts a comment. */
static bool lengths_of_text(const char *path, const unsigned char *b, size_t n, pass_doc_lengths *d) {
    int cap = 0, line = 1;
    for (size_t i = 0; i < n;) {
        if (b[i] == '#') {
            while (i < n && b[i] != '\n') i++;
        } else if (b[i] == ' ' || b[i] == '\t' || b[i] == '\r' || b[i] == '\n') {
            line += b[i++] == '\n';
        } else {
            int64_t v = 0;
            size_t j = i;
            while (j < n && b[j] >= '0' && b[j] <= '9' && v < ((int64_t)1 << 40)) v = 10 * v + (b[j++] - '0');
            bool big = j < n && b[j] >= '0' && b[j] <= '9'; /* stopped at the bound, digits left */
            bool sep = j == n || b[j] == ' ' || b[j] == '\t' || b[j] == '\r' || b[j] == '\n' || b[j] == '#';
            if (big || v > ((int64_t)1 << 40)) {
                size_t e = j;
                while (e < n && b[e] >= '0' && b[e] <= '9') e++;
                sup_error(sup_noloc(),
                          "--doc-lengths %s:%d: document length %.*s%s is too large (at most 2^40 = "
                          "1099511627776 tokens)",
                          path, line, (int)(e - i < 40 ? e - i : 40), (const char *)b + i, e - i > 40 ? "..." : "");
                return false;
            }
            if (j == i || !sep || v < 1) {
                sup_error(sup_noloc(), "--doc-lengths %s:%d: expected a document length (a positive integer)", path,
                          line);
                return false;
            }
            add_len(d, &cap, v);
            i = j;
        }
    }
    return true;
}

bool pass_doc_lengths_read(const char *path, const fe_spec *spec, pass_doc_lengths *out) {
    memset(out, 0, sizeof *out);
    /* Not sup_read_file: that caps sources at 64 MiB, training data is larger. */
    unsigned char *b;
    size_t n;
    if (!read_all(path, &b, &n)) return false;
    bool ok = pass_doc_lengths_parse(path, b, n, spec, out);
    free(b);
    return ok;
}

bool pass_doc_lengths_parse(const char *path, const unsigned char *b, size_t n, const fe_spec *spec,
                            pass_doc_lengths *out) {
    memset(out, 0, sizeof *out);
    snprintf(out->source, sizeof out->source, "%s", path);
    bool tokens = n >= 4 && b[0] == 0x88 && b[1] == 0xd8 && b[2] == 0x34 && b[3] == 0x01; /* 20240520 */
    if (tokens && !spec->train.documents) {
        sup_error(sup_noloc(),
                  "--doc-lengths %s is a token file: the spec needs 'documents on' and eot_token to "
                  "split it",
                  path);
        return false;
    }
    bool ok = tokens ? lengths_of_tokens(path, b, n, spec, out) : lengths_of_text(path, b, n, out);
    if (ok && out->n == 0) {
        sup_error(sup_noloc(), "--doc-lengths %s holds no document of 2 tokens or more", path);
        ok = false;
    }
    if (!ok) pass_doc_lengths_free(out);
    return ok;
}

void pass_doc_lengths_free(pass_doc_lengths *d) {
    free(d->len);
    d->len = NULL;
    d->n = 0;
}

/* ---- sampled steps ------------------------------------------------------------- */

static uint64_t mix(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Step t's documents: lengths drawn with replacement, each cut into pieces
 * of at most S (so every piece is equally likely, as in the runtime's
 * table of pieces), the last one cut so that the step holds B*S tokens. */
int pass_doc_draw(const pass_doc_lengths *d, int t, int64_t B, int64_t S, layout_doc *out) {
    int n = 0;
    int64_t need = B * S, total = 0;
    for (uint64_t j = 0; total < need; j++) {
        int64_t l = d->len[mix(mix((uint64_t)t) ^ j) % (uint64_t)d->n];
        for (int64_t off = 0; off < l && total < need; off += S) {
            int64_t piece = l - off < S ? l - off : S;
            if (piece > need - total) piece = need - total;
            out[n++] = (layout_doc){total, piece};
            total += piece;
        }
    }
    return n;
}

/* The masked kernels' work at their tile granularity.  The document
 * kernels (runtime/host/kern_docattn.c; the CUDA ones' tiles are no larger)
 * work in 64 x 64 (query, key) tiles and skip a tile only when none of its
 * keys is visible to any of its queries, so a tile on a document boundary
 * costs a whole tile.  Query tile i's first visible key is the start of the
 * document of its first query (documents lie back to back, so every key
 * tile from there to the diagonal holds a key of that document): it visits
 * tiles start / 64 .. i.  A row's tiles over the dense causal row's
 * T (T + 1) / 2 are its share of the dense attention work: bench_docattn
 * measured forward + backward at 0.132 and 0.259 of dense where this share
 * was 0.136 and 0.246 and sum l^2 / S^2 only 0.114 and 0.208
 * (bench/README.md, "docattn_bench.c"). */
enum { PLAN_TILE = 64 };

double drv_doc_tile_share(const layout_slot *s, int ns, int64_t S) {
    if (S <= 0) return 1;
    int64_t *start = sup_xmalloc(sizeof *start * (size_t)S), T = (S + PLAN_TILE - 1) / PLAN_TILE;
    for (int64_t c = 0; c < S; c++) start[c] = c; /* a column no slot covers: a document of its own */
    for (int i = 0; i < ns; i++)
        for (int64_t c = s[i].col; c < s[i].col + s[i].len && c < S; c++) start[c] = s[i].col;
    double tiles = 0;
    for (int64_t t = 0; t < T; t++) tiles += (double)(t - start[t * PLAN_TILE] / PLAN_TILE + 1);
    free(start);
    return tiles / ((double)T * (double)(T + 1) / 2);
}

/* With padded (cudnn-docs: the cuda target without a ring) the same for
 * cuDNN on padded batches (runtime/cuda/rt_doc_split.c): each document costs the
 * causal attention of its padded length, sum L'^2 over S^2, less the
 * allowance the cost model's rate already takes for the padding
 * (LAYOUT_DOCS_PADDING).  cuDNN's rate is taken at the row's length, not
 * each batch's (shorter runs slower: not modelled). */
double drv_doc_attn_share(const layout_slot *s, int ns, int64_t S, bool padded) {
    if (!padded) return drv_doc_tile_share(s, ns, S);
    if (S <= 0) return 1;
    double w = 0;
    for (int i = 0; i < ns; i++) {
        double L = (double)cm_docs_padded(s[i].len);
        w += L * L;
    }
    return LAYOUT_DOCS_PADDING * w / ((double)S * (double)S);
}

/* The attention work of the slowest group over the dense causal rows':
 * the mean over its B/G rows of their shares (padded: cuDNN's batches,
 * else the masked kernels' tiles). */
static double worst_group(const layout_slot *s, int ns, int64_t B, int64_t S, int G, bool padded) {
    layout_slot *row = sup_xmalloc(sizeof *row * (size_t)(ns > 0 ? ns : 1));
    double mx = 0;
    for (int g = 0; g < G; g++) {
        double c = 0;
        for (int64_t r = g * (B / G); r < (g + 1) * (B / G); r++) {
            int n = 0;
            for (int i = 0; i < ns; i++)
                if (s[i].row == r) row[n++] = s[i];
            c += drv_doc_attn_share(row, n, S, padded);
        }
        mx = fmax(mx, c / (double)(B / G));
    }
    free(row);
    return mx;
}

/* E[max_g f_g] and the mean imbalance (max over mean of l^2 + linear*l)
 * for G groups and one packing, over the sampled steps. */
static void sample(const pass_doc_lengths *d, int64_t B, int64_t S, int G, layout_packing how, double linear,
                   bool padded, double *work, double *imbalance) {
    layout_doc *docs = malloc(sizeof *docs * (size_t)(B * S));
    layout_slot *slots = malloc(sizeof *slots * (size_t)(B * S + B));
    double w = 0, im = 0;
    int steps = 0;
    for (int t = 0; docs && slots && t < PLAN_STEPS; t++) {
        int n = pass_doc_draw(d, t, B, S, docs);
        int ns = layout_pack(docs, n, B, S, how, linear, slots);
        if (ns <= 0) continue;
        if (how == LAYOUT_PACK_BALANCED && G > 1) layout_pack_groups(slots, ns, B, G, linear);
        w += worst_group(slots, ns, B, S, G, padded);
        im += layout_pack_imbalance(slots, ns, B, G, linear, NULL);
        steps++;
    }
    free(docs), free(slots);
    *work = steps ? w / steps : 1;
    *imbalance = steps ? im / steps : 1;
}

void pass_plan_apply_docs(pass_plan_result *r, const fe_spec *spec, const pass_doc_lengths *d) {
    pass_plan_docs_summary *sum = &r->docs;
    sum->on = true;
    sum->n = d->n;
    sum->steps = PLAN_STEPS;
    snprintf(sum->source, sizeof sum->source, "%s", d->source);
    layout_packing want = LAYOUT_PACK_BALANCED;
    if (!layout_packing_parse(spec->train.packing, &want)) want = LAYOUT_PACK_BALANCED;
    sum->packing = want;
    double total = 0;
    for (int i = 0; i < d->n; i++) total += (double)d->len[i], sum->max_len = fmax(sum->max_len, (double)d->len[i]);
    sum->mean_len = total / d->n;
    const fe_model *md = &spec->model;
    double linear = layout_doc_linear(md->hidden, md->heads, md->kv_heads, md->head_dim, md->ffn);
    int64_t B = r->micro_batch, S = r->seq_len;
    for (int i = 0; i < r->n; i++) {
        pass_plan_candidate *c = &r->cand[i];
        c->dense_step_ms = c->step_ms;
        c->docs_ms[0] = c->docs_ms[1] = c->imbalance[0] = c->imbalance[1] = NAN;
        if (!c->legal || !isfinite(c->step_ms) || !c->keeps_batch || c->groups < 1 || B % c->groups) continue;
        for (int k = 0; k < 2; k++) {
            double w, im;
            sample(d, B, S, c->groups, (layout_packing)k, linear, r->cuda && c->choice.seq == LAYOUT_ULYSSES, &w, &im);
            c->docs_ms[k] = c->step_ms - c->attn_ms + c->attn_ms * w;
            c->imbalance[k] = im;
        }
        c->step_ms = c->docs_ms[want];
    }
}
