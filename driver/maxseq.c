/* maxseq.c — the longest seq_len that fits the device, per layout and
 * recompute setting (`baspc SPEC --max-seq-len`).
 *
 * The rows are plain Ulysses over all N ranks, batch-aware Ulysses for
 * every G dividing N and the micro-batch, and, when the spec names another
 * strategy (sequence ring or hybrid, a2a two_level), that strategy with the
 * same groups.  Each row is the layout it names: its candidates are the
 * spec with that layout written out (layout.sequence, layout.a2a,
 * layout.batch_aware, layout.ring_degree), train.recompute and
 * train.seq_len changed (a typed fe_spec_patch), built the way the
 * compiler builds it (drv_build: the default pipeline, ending with the
 * memory plan) and
 * judged by its plan's peak (pass_memory_report).  Its legality is the
 * layout's own rules (layout_illegal on that choice).  Sequence lengths are
 * multiples of a step q: 1024 tokens rounded up to a multiple of what the
 * layout cuts a sequence into (Ulysses: K ranks; ring: 2K zig-zag chunks;
 * hybrid: K ranks and 2R chunks), so every multiple is legal when q is.
 * When the spec offloads (train.offload), every recompute setting has a
 * row without offload and one with it; a candidate fits only when its
 * host arena, times the node's ranks, fits the mesh's host_memory too.
 *
 * The search leans on the plan's shape: every activation, gradient and
 * staging buffer grows linearly with the sequence (attention is tiled, the
 * LM head and the MLP run in chunks of fixed size), so the peak is an affine
 * function of seq_len up to alignment, and a secant through two builds
 * lands next to the answer.  The search still ends on a length that fits
 * next to one that does not (step q), so the answer is exact for the plan
 * whatever the line says; a bent line costs builds, not correctness. */
#include "driver.h"

#include <cjson/cJSON.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* Longest sequences tried: 2^24 tokens. */
enum { MS_MAX_STEPS = 1 << 14 };

typedef struct ms_ctx {
    const fe_spec *spec;
    bool cuda;
    fe_spec_patch patch; /* the row's layout, recompute and offload; seq_len per build */
    int64_t q;           /* tokens per step */
    int builds;
} ms_ctx;

/* The plan's peak at m steps of q tokens; -1 when the spec is illegal
 * there.  It fits when the device and the host (offload) both hold it;
 * *host is the host arena per rank. */
static int64_t ms_peak(ms_ctx *c, int64_t m, bool *fits, int64_t *host) {
    c->patch.seq_len = m * c->q;
    ir_module *mod = drv_build(c->spec, &c->patch, c->cuda);
    c->builds++;
    pass_mem_report r;
    int64_t peak = -1;
    *fits = false;
    if (mod && pass_memory_report(mod, &r)) {
        peak = r.peak_bytes;
        *fits = r.fits && r.host_fits;
        *host = r.host_bytes;
    }
    ir_module_free(mod);
    return peak;
}

/* The largest m <= MS_MAX_STEPS whose plan fits (0: not even one step).
 * A bracket lo (fits) < hi (does not) shrinks by secant steps through the
 * last two builds, with a bisection whenever the secant step would not
 * halve the bracket twice in a row, so it ends in O(log) builds even where
 * the peak bends (the MLP starts tiling, an auto setting flips). */
static int64_t ms_search(ms_ctx *c, int64_t *peak_at, int64_t *host_at) {
    bool fits;
    int64_t host = 0;
    int64_t p1 = ms_peak(c, 1, &fits, &host);
    *peak_at = p1, *host_at = host;
    if (p1 < 0 || !fits) return 0;
    double cap = c->spec->mesh.device_mem;
    int64_t lo = 1, hi = MS_MAX_STEPS + 1; /* hi: unknown until a build does not fit */
    int64_t ma = 1, pa = p1, mb = 16, slow = 0;
    int64_t pb = ms_peak(c, mb, &fits, &host);
    if (fits)
        lo = mb, *peak_at = pb, *host_at = host;
    else
        hi = mb;
    if (pb < 0) return lo;
    while (hi - lo > 1) {
        int64_t m = lo + (hi - lo) / 2; /* bisection, or doubling while hi is unknown */
        if (hi > MS_MAX_STEPS) m = lo * 2 > MS_MAX_STEPS ? MS_MAX_STEPS : lo * 2;
        if (slow < 2 && pb != pa && cap > 0) {
            double x = (double)mb + (cap - (double)pb) * (double)(mb - ma) / (double)(pb - pa);
            int64_t t = x < (double)lo + 1 ? lo + 1 : x > (double)hi - 1 ? hi - 1 : (int64_t)x;
            if (t == lo + 1 || t == hi - 1 || (t > lo && t < hi)) m = t;
        }
        if (m > MS_MAX_STEPS) m = MS_MAX_STEPS;
        if (m <= lo) m = lo + 1;
        int64_t width = hi - lo, p = ms_peak(c, m, &fits, &host);
        if (p < 0) { /* illegal there (should not happen for multiples of q): stop at what is known */
            break;
        }
        if (fits)
            lo = m, *peak_at = p, *host_at = host;
        else
            hi = m;
        if (lo == MS_MAX_STEPS) break;
        slow = 2 * (hi - lo) > width && hi <= MS_MAX_STEPS ? slow + 1 : 0;
        ma = mb, pa = pb, mb = m, pb = p;
    }
    return lo;
}

/* The change that makes the spec layout c (a hybrid's ring_degree only
 * with it: setting another sequence drops the spec's, as --set does). */
static void ms_layout_patch(const layout_choice *c, fe_spec_patch *p) {
    p->sequence = layout_seq_name(c->seq);
    p->a2a = c->variant ? c->variant->word : "flat";
    p->batch_aware = c->groups <= 1 ? 1 : c->groups;
    if (c->seq == LAYOUT_HYBRID) p->ring_degree = c->ring_degree;
}

/* What every legal seq_len of c is a multiple of: K ranks (Ulysses), the 2K
 * chunks of the causal zig-zag order (ring), K and 2R (hybrid). */
static int64_t ms_unit(int64_t K, const layout_choice *c) {
    if (c->seq == LAYOUT_RING) return 2 * K;
    if (c->seq != LAYOUT_HYBRID) return K;
    int64_t a = K, b = 2 * (int64_t)c->ring_degree;
    while (b) {
        int64_t t = a % b;
        a = b, b = t;
    }
    return K / a * 2 * c->ring_degree;
}

static void ms_row(pass_maxseq_result *r, const fe_spec *spec, bool cuda, const layout_choice *lc,
                   const char *recompute, const char *offload) {
    if (r->n == PASS_MAXSEQ_ROWS) return;
    pass_maxseq_row *row = &r->rows[r->n++];
    memset(row, 0, sizeof *row);
    row->choice = *lc;
    layout_choice_name(lc, row->layout, sizeof row->layout);
    snprintf(row->recompute, sizeof row->recompute, "%s", recompute);
    snprintf(row->offload, sizeof row->offload, "%s", offload);
    ms_ctx c = {.spec = spec, .cuda = cuda};
    ms_layout_patch(lc, &c.patch);
    c.patch.recompute = recompute;
    c.patch.offload = offload;
    int64_t K = r->world / (lc->groups > 0 ? lc->groups : 1), unit = ms_unit(K, lc);
    c.q = (1024 + unit - 1) / unit * unit;
    row->step = c.q;
    /* The rules at the first length: the sequence rules hold at every
     * multiple of q, so what is left are the layout's own. */
    layout_dims d = fe_layout_dims(spec);
    d.S = c.q;
    const char *why = layout_illegal(&d, lc, NULL, 0);
    if (why) {
        snprintf(row->illegal, sizeof row->illegal, "%s", why);
        return;
    }
    int64_t peak = -1, host = 0, m = ms_search(&c, &peak, &host);
    row->builds = c.builds;
    row->seq_len = m * c.q;
    row->peak_bytes = m > 0 ? peak : -1;
    row->host_bytes = m > 0 ? host : 0;
    row->tokens_per_rank = spec->train.micro_batch * row->seq_len / (r->world > 0 ? r->world : 1);
    row->at_cap = m == MS_MAX_STEPS;
}

/* The rows of one strategy (`like`: seq, a2a, ring_degree): G = 1, then
 * every G > 1 dividing the world and the micro-batch, each with the three
 * recompute settings, each (when the spec offloads) without and with its
 * offload.  A ring's degree is its group size. */
static void ms_strategy(pass_maxseq_result *r, const fe_spec *spec, bool cuda, layout_choice like) {
    static const char *const modes[] = {"none", "selective", "full"};
    for (int G = 1; G <= r->world; G++) {
        if (G > 1 && (r->world % G || spec->train.micro_batch % G)) continue;
        layout_choice c = like;
        c.groups = G;
        if (c.seq == LAYOUT_RING) c.ring_degree = r->world / G;
        for (int k = 0; k < 3; k++) {
            ms_row(r, spec, cuda, &c, modes[k], "none");
            if (r->offload) ms_row(r, spec, cuda, &c, modes[k], spec->train.offload);
        }
    }
}

/* The spec's own strategy when it names one other than flat Ulysses. */
static bool ms_spec_strategy(const fe_spec *spec, layout_choice *out) {
    const fe_layout *l = &spec->layout;
    layout_choice c = layout_ulysses(1);
    if (!layout_seq_parse(l->sequence, &c.seq) || !strcmp(l->a2a, "auto"))
        return false; /* auto: no strategy of its own */
    c.variant = layout_variant_find("a2a", l->a2a);
    if (c.seq == LAYOUT_HYBRID) {
        if (l->ring_degree < 1) return false;
        c.ring_degree = (int)l->ring_degree;
    }
    *out = c;
    return c.seq != LAYOUT_ULYSSES || c.variant;
}

bool pass_max_seq_len(const fe_spec *spec, bool cuda, pass_maxseq_result *r) {
    memset(r, 0, sizeof *r);
    snprintf(r->model, sizeof r->model, "%s", spec->model.name);
    r->world = (int)fe_world(spec);
    r->micro_batch = spec->train.micro_batch;
    r->attention_chunks = spec->train.attention_chunks > 1 ? spec->train.attention_chunks : 1;
    r->device_mem = spec->mesh.device_mem;
    r->cuda = cuda;
    r->offload = strcmp(spec->train.offload, "none") != 0;
    r->host_mem = spec->mesh.host_mem;
    snprintf(r->device, sizeof r->device, "%s", spec->mesh.device);
    sup_diag_saved saved = sup_diag_silence();
    ms_strategy(r, spec, cuda, layout_ulysses(1));
    layout_choice own;
    if (ms_spec_strategy(spec, &own)) ms_strategy(r, spec, cuda, own);
    sup_diag_restore(saved);
    return true;
}

void pass_maxseq_print(const pass_maxseq_result *r, FILE *out) {
    char cap[32];
    fprintf(out, "longest seq_len that fits: %s on %d rank(s) of %s (%s, %s target), micro_batch %" PRId64 "\n",
            r->model, r->world, r->device, sup_fmt_bytes(r->device_mem, cap, sizeof cap), r->cuda ? "cuda" : "cpu",
            r->micro_batch);
    if (r->attention_chunks > 1)
        fprintf(out, "attention in %" PRId64 " head chunks (train.attention_chunks) in every row\n",
                r->attention_chunks);
    int lw = 18; /* the layout column: wider for "batch-aware G=2 hybrid R=2" */
    for (int i = 0; i < r->n; i++)
        lw = (int)strlen(r->rows[i].layout) + 1 > lw ? (int)strlen(r->rows[i].layout) + 1 : lw;
    if (r->offload)
        fprintf(out, "host memory %s per node; offload = the spec's train.offload, host = its host arena per rank\n",
                sup_fmt_bytes(r->host_mem, cap, sizeof cap));
    fprintf(out, "%-*s %-10s %12s %14s %12s", lw, "layout", "recompute", "seq_len", "tokens/rank", "peak");
    fprintf(out, r->offload ? " %-12s %10s\n" : "\n", "offload", "host");
    for (int i = 0; i < r->n; i++) {
        const pass_maxseq_row *w = &r->rows[i];
        char pk[32] = "-", hb[32] = "-", tail[64] = "";
        if (w->peak_bytes >= 0) sup_fmt_bytes((double)w->peak_bytes, pk, sizeof pk);
        if (w->host_bytes > 0) sup_fmt_bytes((double)w->host_bytes, hb, sizeof hb);
        if (r->offload) snprintf(tail, sizeof tail, " %-12s %10s", w->offload, hb);
        if (w->illegal[0])
            fprintf(out, "%-*s %-10s %12s %14s %12s%s  illegal: %s\n", lw, w->layout, w->recompute, "-", "-", "-", tail,
                    w->illegal);
        else if (w->seq_len == 0)
            fprintf(out, "%-*s %-10s %12s %14s %12s%s  does not fit even at %" PRId64 " tokens\n", lw, w->layout,
                    w->recompute, "-", "-", "-", tail, w->step);
        else
            fprintf(out, "%-*s %-10s %12" PRId64 " %14" PRId64 " %12s%s%s\n", lw, w->layout, w->recompute, w->seq_len,
                    w->tokens_per_rank, pk, tail, w->at_cap ? "  (the longest tried)" : "");
    }
    fprintf(out, "seq_len in steps of 1024 tokens, rounded up to a multiple of what the layout cuts a sequence "
                 "into (K ranks; ring: 2K chunks; hybrid: K and 2R); peak = the memory plan's per rank "
                 "(baspc --memory)\n");
}

void pass_maxseq_json(const pass_maxseq_result *r, FILE *out) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddNumberToObject(o, "world", r->world);
    cJSON_AddStringToObject(o, "device", r->device);
    cJSON_AddNumberToObject(o, "device_mem", r->device_mem);
    cJSON_AddStringToObject(o, "target", r->cuda ? "cuda" : "cpu");
    cJSON_AddNumberToObject(o, "micro_batch", (double)r->micro_batch);
    cJSON_AddNumberToObject(o, "attention_chunks", (double)r->attention_chunks);
    cJSON_AddNumberToObject(o, "host_mem", r->host_mem);
    cJSON *rows = cJSON_AddArrayToObject(o, "rows");
    for (int i = 0; i < r->n; i++) {
        const pass_maxseq_row *w = &r->rows[i];
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "layout", w->layout);
        cJSON_AddStringToObject(e, "sequence", layout_seq_name(w->choice.seq));
        cJSON_AddStringToObject(e, "a2a", w->choice.variant ? w->choice.variant->word : "flat");
        cJSON_AddNumberToObject(e, "groups", w->choice.groups);
        if (w->choice.seq == LAYOUT_ULYSSES)
            cJSON_AddNullToObject(e, "ring_degree");
        else
            cJSON_AddNumberToObject(e, "ring_degree", w->choice.ring_degree);
        cJSON_AddStringToObject(e, "recompute", w->recompute);
        cJSON_AddStringToObject(e, "offload", w->offload);
        cJSON_AddNumberToObject(e, "host_bytes_per_rank", (double)w->host_bytes);
        cJSON_AddNumberToObject(e, "max_seq_len", (double)w->seq_len);
        cJSON_AddNumberToObject(e, "tokens_per_rank", (double)w->tokens_per_rank);
        if (w->peak_bytes >= 0)
            cJSON_AddNumberToObject(e, "peak_bytes_per_rank", (double)w->peak_bytes);
        else
            cJSON_AddNullToObject(e, "peak_bytes_per_rank");
        cJSON_AddNumberToObject(e, "step", (double)w->step);
        cJSON_AddNumberToObject(e, "builds", w->builds);
        cJSON_AddBoolToObject(e, "at_cap", w->at_cap);
        if (w->illegal[0])
            cJSON_AddStringToObject(e, "illegal", w->illegal);
        else
            cJSON_AddNullToObject(e, "illegal");
        cJSON_AddItemToArray(rows, e);
    }
    char *s = cJSON_Print(o);
    fprintf(out, "%s\n", s ? s : "{}");
    cJSON_free(s);
    cJSON_Delete(o);
}

/* ---- what would make it fit ------------------------------------------------ */
/* Here, with the search, not in memreport.c: each suggestion is a spec
 * built again through the pipeline, which is a driver's work; the report
 * itself only reads a module. */
/* Records a change: the typed patch to build, its text to show. */
static void ms_suggest_add(pass_mem_report *r, fe_spec_patch *patches, const fe_spec_patch *p) {
    if (r->nsuggest == PASS_MEM_SUGGEST) return;
    char set[96];
    fe_spec_patch_format(p, set, sizeof set);
    patches[r->nsuggest] = *p;
    snprintf(r->suggest[r->nsuggest++].change, sizeof r->suggest[0].change, "--set %s", set);
}

/* The changes in the order of cost to the user: a ZeRO stage,
 * recomputation (compute, no ranks), offload to host memory (host-link
 * time, no ranks), more ranks, a shorter sequence, a smaller micro-batch
 * (which changes the global batch). */
static void ms_suggest_changes(const fe_spec *spec, pass_mem_report *r, fe_spec_patch *patches) {
    if (spec->train.zero < 3) ms_suggest_add(r, patches, &(fe_spec_patch){.zero = 3});
    bool full = !strcmp(spec->train.recompute, "full");
    if (!full && strcmp(spec->train.recompute, "selective") != 0)
        ms_suggest_add(r, patches, &(fe_spec_patch){.recompute = "selective"});
    if (!full) ms_suggest_add(r, patches, &(fe_spec_patch){.recompute = "full"});
    if (strcmp(spec->train.offload, "all") != 0 && strcmp(spec->mesh.host.kind, "none") != 0)
        ms_suggest_add(r, patches, &(fe_spec_patch){.offload = "all"});
    ms_suggest_add(r, patches, &(fe_spec_patch){.nodes = spec->mesh.nodes * 2});
    if (spec->train.seq_len >= 2 && spec->train.seq_len % 2 == 0)
        ms_suggest_add(r, patches, &(fe_spec_patch){.seq_len = spec->train.seq_len / 2});
    if (spec->train.micro_batch >= 2)
        ms_suggest_add(r, patches, &(fe_spec_patch){.micro_batch = spec->train.micro_batch / 2});
}

void pass_memory_suggest(const fe_spec *spec, pass_mem_report *r) {
    r->nsuggest = 0;
    if (!spec || r->fits) return;
    pass_mem_suggestion *sg = r->suggest;
    fe_spec_patch patches[PASS_MEM_SUGGEST] = {0};
    bool cuda[PASS_MEM_SUGGEST] = {0};
    int first = 0;
    /* Without the memory plan: the planned program of the same step (its
     * numbers are in r already, nothing to build). */
    if (r->no_reuse) {
        snprintf(sg[0].change, sizeof sg[0].change, "the memory plan (drop --no-memory-plan)");
        sg[0].peak_bytes = r->planned_arena_bytes + r->work_bytes;
        sg[0].fits = r->device_mem <= 0 || (double)sg[0].peak_bytes <= r->device_mem;
        first = r->nsuggest = 1;
    }
    /* A bf16 spec for a GPU planned for the cpu backend (4-byte elements):
     * the CUDA backend's buffers are what the device would hold (the spec
     * itself, built for the other target). */
    if (!r->cuda && !strcmp(spec->train.precision, "bf16") && strncmp(spec->mesh.device, "cpu", 3) != 0) {
        snprintf(sg[r->nsuggest].change, sizeof sg[0].change, "--target=cuda");
        cuda[r->nsuggest++] = true;
    }
    ms_suggest_changes(spec, r, patches);
    sup_diag_saved saved = sup_diag_silence();
    for (int i = first; i < r->nsuggest; i++) {
        pass_mem_suggestion *s = &sg[i];
        ir_module *m = drv_build(spec, &patches[i], cuda[i] || r->cuda);
        pass_mem_report t;
        s->peak_bytes = -1;
        if (m && pass_memory_report(m, &t)) {
            s->peak_bytes = t.peak_bytes;
            s->fits = t.fits && t.host_fits;
        }
        ir_module_free(m);
    }
    sup_diag_restore(saved);
}
