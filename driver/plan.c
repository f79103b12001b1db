/* plan.c — the layout planner behind `baspc --plan` (the choice of a
 * layout for a spec that leaves one open, pass_layout_resolve, is in
 * settle.c).
 *
 * The candidates are layout/'s typed choices (layout_candidates: every G
 * dividing N and B, times every registered strategy: flat Ulysses and its
 * variants such as two-level, ring, hybrid R, and any a plugin registers);
 * each is built the way the compiler builds it (pass_lower_with the choice,
 * then its strategy's pipeline, which ends with memplan) and costed
 * with the cost model (memory per rank: the candidate's memory plan, for
 * the cpu or cuda target).  The table also lists
 *
 *   ulysses / batch-aware G=g   for every G dividing N that is illegal, with
 *                    layout_illegal's reason (flat Ulysses only)
 *   ulysses-sp=N/B   Ulysses over N/B ranks, B replicas each holding the whole
 *                    micro-batch: B*B sequences per step, B*B*S/N tokens per
 *                    rank.  It changes the global batch, so it is shown for
 *                    comparison and only chosen when nothing else fits.
 *
 * A strategy whose passes are not registered (a plugin's strategy whose
 * pass was not registered with it; pass_layout_available) is listed as
 * not available.
 *
 * The choice: the legal candidate that fits in memory with the lowest
 * predicted step time among those keeping the global batch.  When none
 * fits, the planner re-plans the spec with one change at a time (a larger
 * ZeRO stage, recomputation, host offload where the mesh has a host link,
 * twice the nodes, a smaller micro-batch; in that order of cost to the
 * user) and suggests the first that fits.
 *
 * With train.offload in the spec every candidate is built with it (auto
 * choosing per candidate), and the table shows what each chose and its
 * copies' time over the host link, which the step time includes (for the
 * cuda target under the kernels, as the CUDA backend runs them). */
#include "driver.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define GIB 1073741824.0

typedef struct plan_ctx {
    const fe_spec *spec;
    bool cuda;                    /* plan memory for the cuda target (bf16 buffers) */
    const pass_doc_lengths *docs; /* packed documents' lengths, or NULL */
    pass_plan_result *r;
    int cap;
} plan_ctx;

/* ---- the table ----------------------------------------------------------------- */
/* Distinct peers a rank exchanges with: K-1 for Ulysses' all-to-all; a
 * ring's two neighbours; hybrid's U-1 Ulysses peers plus its ring
 * neighbours. */
static int layout_peers(const layout_choice *c, int K) {
    int R = c->ring_degree > 0 ? c->ring_degree : 1;
    int ring = R >= 3 ? 2 : R - 1;
    switch (c->seq) {
    case LAYOUT_RING: return ring;
    case LAYOUT_HYBRID: return K / R - 1 + ring;
    default: return K - 1;
    }
}

pass_plan_candidate *drv_plan_add(pass_plan_result *r, int *cap, const layout_choice *choice) {
    if (r->n == *cap) {
        *cap = *cap ? 2 * *cap : 8;
        r->cand = sup_xrealloc(r->cand, sizeof *r->cand * (size_t)*cap);
    }
    pass_plan_candidate *c = &r->cand[r->n++];
    memset(c, 0, sizeof *c);
    c->choice = *choice;
    layout_choice_name(choice, c->name, sizeof c->name);
    c->groups = choice->groups;
    c->group_size = choice->groups > 0 ? r->world / choice->groups : 0;
    c->peers = layout_peers(choice, c->group_size);
    c->micro_batch = r->micro_batch;
    c->tokens_per_rank = (double)r->micro_batch * (double)r->seq_len / r->world;
    c->keeps_batch = true;
    c->available = pass_layout_available(choice);
    c->step_ms = INFINITY;
    return c;
}

static pass_plan_candidate *add(plan_ctx *x, const layout_choice *choice) {
    return drv_plan_add(x->r, &x->cap, choice);
}

/* Fills the measured columns of c from a module after the pipeline. */
static void measure(plan_ctx *x, pass_plan_candidate *c, const ir_module *m) {
    int N = ir_world(m);
    pass_cost_params p = pass_cost_default_params(m);
    pass_cost_report rep = pass_cost_estimate(m, &p);
    c->micro_batch = ir_config_int(m, "micro_batch", x->r->micro_batch);
    c->tokens_per_rank = (double)c->micro_batch * (double)x->r->seq_len / N;
    c->a2a_ms = rep.a2a_s * 1e3;
    c->step_ms = rep.step_s * 1e3;
    c->attn_ms = rep.attn_s * 1e3;
    c->comm_ms = rep.comm_s * 1e3;
    c->host_ms = rep.host_s * 1e3;
    const char *off = ir_config_get(m, "offload");
    snprintf(c->offload, sizeof c->offload, "%s", off ? off : "none");
    c->a2a_fraction = rep.a2a_fraction;
    c->mem_bytes_per_rank = rep.mem_peak;
    c->fits = rep.fits;
    c->legal = true;
    if (!c->fits)
        snprintf(c->reason, sizeof c->reason, "does not fit: %.1f GiB per rank, the device has %.1f GiB",
                 rep.mem_peak / GIB, rep.device_mem / GIB);
}

/* Builds the candidate and measures it. */
static void evaluate(plan_ctx *x, const fe_spec *s, pass_plan_candidate *c) {
    ir_module *m = drv_build_choice(s, &c->choice, x->cuda, NULL);
    if (m)
        measure(x, c, m);
    else
        snprintf(c->reason, sizeof c->reason, "the compiler rejects this layout");
    ir_module_free(m);
}

/* A legal layout whose passes are not all registered: listed, not built. */
static void not_available(plan_ctx *x, pass_plan_candidate *c) {
    (void)x;
    const layout_strategy *st = layout_strategy_of(&c->choice);
    c->legal = true;
    snprintf(c->reason, sizeof c->reason, "not available: a pass of '%s' (%s%s%s) is not registered",
             st ? st->name : "?", st ? st->passes : "", st && st->after_zero ? "," : "",
             st && st->after_zero ? st->after_zero : "");
}

static void plan_choice(plan_ctx *x, const layout_choice *choice) {
    pass_plan_candidate *c = add(x, choice);
    if (c->available)
        evaluate(x, x->spec, c);
    else
        not_available(x, c);
}

/* B replicas of Ulysses over N/B ranks, each with the whole micro-batch:
 * the spec copy's micro-batch is B*B (checked again: the MLP tiling
 * default follows the tokens per rank), lowered with G = B. */
static void plan_ulysses_sp(plan_ctx *x) {
    int N = x->r->world;
    int64_t B = x->r->micro_batch;
    if (B < 2 || N % B) return; /* B = 1 is plain Ulysses; B not dividing N has no such layout */
    layout_choice g = layout_ulysses((int)B);
    pass_plan_candidate *c = add(x, &g);
    snprintf(c->name, sizeof c->name, "ulysses-sp=%d", (int)(N / B));
    c->keeps_batch = false;
    c->micro_batch = B * B;
    c->tokens_per_rank *= (double)B;
    layout_dims d = fe_layout_dims(x->spec);
    d.B = B * B;
    const char *bad = layout_illegal(&d, &g, NULL, 0);
    if (bad) {
        snprintf(c->reason, sizeof c->reason, "illegal: %s", bad);
        return;
    }
    fe_spec *s = fe_spec_copy(x->spec);
    s->train.micro_batch = B * B;
    s->train.global_batch *= B; /* as many micro-steps, each B times larger */
    if (fe_check(s))
        evaluate(x, s, c);
    else
        snprintf(c->reason, sizeof c->reason, "the compiler rejects this layout");
    fe_spec_free(s);
}

/* Every G dividing N: flat Ulysses (illegal ones with the reason), then
 * the other legal layouts of that G; ulysses-sp after G = 1. */
static void plan_layouts(plan_ctx *x) {
    layout_dims d = fe_layout_dims(x->spec);
    layout_choice *all = malloc(sizeof *all * 4096);
    int n = layout_candidates(&d, all, 4096), k = 0;
    for (int G = 1; G <= x->r->world; G++) {
        if (x->r->world % G) continue;
        layout_choice u = layout_ulysses(G);
        const char *bad = layout_illegal(&d, &u, NULL, 0);
        if (bad) {
            pass_plan_candidate *c = add(x, &u);
            snprintf(c->reason, sizeof c->reason, "illegal: %s", bad);
        }
        for (; k < n && k < 4096 && all[k].groups == G; k++) plan_choice(x, &all[k]);
        if (G == 1) plan_ulysses_sp(x);
    }
    free(all);
}

static bool usable(const pass_plan_candidate *c) { return c->legal && c->fits && isfinite(c->step_ms); }

/* The usable candidate keeping the global batch that drv_prefer() takes (the
 * same rule as `auto` lowering, pass_layout_resolve), or with err 0 the
 * fastest; failing that, the same of any batch (a layout that runs beats
 * none). */
static int choose(const pass_plan_result *r, bool any_batch, double err) {
    layout_choice *c = malloc(sizeof *c * (size_t)(r->n + 1));
    double *t = malloc(sizeof *t * (size_t)(r->n + 1));
    for (int i = 0; i < r->n; i++) {
        const pass_plan_candidate *x = &r->cand[i];
        c[i] = x->choice;
        t[i] = usable(x) && (any_batch || x->keeps_batch) ? x->step_ms : INFINITY;
    }
    int pick = drv_prefer(c, t, r->n, err);
    free(c);
    free(t);
    return pick;
}

/* A candidate predicted within the model's error of the chosen one: the
 * model cannot tell them apart, so say where they differ most, which is
 * what a measurement of both would settle. */
static void within_reason(const pass_plan_result *r, pass_plan_candidate *c, const pass_plan_candidate *w) {
    const char *part[] = {"all-to-all", "attention", "other communication", "other compute"};
    double dc[] = {c->a2a_ms, c->attn_ms, c->comm_ms - c->a2a_ms, c->step_ms - c->attn_ms - c->comm_ms};
    double dw[] = {w->a2a_ms, w->attn_ms, w->comm_ms - w->a2a_ms, w->step_ms - w->attn_ms - w->comm_ms};
    int k = 0;
    for (int i = 1; i < 4; i++)
        if (fabs(dc[i] - dw[i]) > fabs(dc[k] - dw[k])) k = i;
    snprintf(c->reason, sizeof c->reason,
             "within the model's %.0f%% error of %s: %.1f ms/step, %+.1f%%; differs most in %s (%+.1f ms): "
             "measure both to decide",
             100 * r->model_error, w->name, c->step_ms, 100.0 * (c->step_ms / w->step_ms - 1.0), part[k],
             dc[k] - dw[k]);
}

/* Says why every other usable candidate lost, and why the chosen one won;
 * f is the fastest, which the chosen one is unless a simpler layout was
 * predicted within the model's error of it. */
static void explain(pass_plan_result *r, int f) {
    int b = r->chosen, usable_n = 0;
    if (b < 0) return;
    const pass_plan_candidate *w = &r->cand[b], *fast = &r->cand[f >= 0 ? f : b];
    for (int i = 0; i < r->n; i++) {
        pass_plan_candidate *c = &r->cand[i];
        if (!usable(c)) continue;
        usable_n += c->keeps_batch;
        if (i == b) continue;
        if (!c->keeps_batch && w->keeps_batch)
            snprintf(c->reason, sizeof c->reason,
                     "changes the global batch: %lld sequences per step instead of %lld (%.0f tokens per rank)",
                     (long long)(c->micro_batch * r->accum), (long long)(r->micro_batch * r->accum),
                     c->tokens_per_rank);
        else if ((c->within_error = c->step_ms <= fast->step_ms * (1 + r->model_error)))
            within_reason(r, c, w);
        else
            snprintf(c->reason, sizeof c->reason, "slower: %.1f ms/step, +%.1f%% over %s", c->step_ms,
                     100.0 * (c->step_ms / w->step_ms - 1.0), w->name);
    }
    if (!w->keeps_batch)
        snprintf(r->why, sizeof r->why, "nothing keeping the global batch fits; this one runs %lld sequences per step",
                 (long long)w->micro_batch);
    else if (fast != w)
        snprintf(r->why, sizeof r->why,
                 "the simplest of the layouts predicted within the model's %.0f%% error of the fastest (%s, %.1f "
                 "ms/step): %.1f ms/step, %.0f%% in all-to-all",
                 100 * r->model_error, fast->name, fast->step_ms, w->step_ms, 100.0 * w->a2a_fraction);
    else
        snprintf(r->why, sizeof r->why,
                 "lowest predicted step time of %d layout(s) that fit and keep the global batch: %.1f ms/step, %.0f%% "
                 "in all-to-all",
                 usable_n, w->step_ms, 100.0 * w->a2a_fraction);
    int close = 0;
    for (int i = 0; i < r->n; i++) close += r->cand[i].within_error;
    size_t len = strlen(r->why);
    if (close && len < sizeof r->why)
        snprintf(r->why + len, sizeof r->why - len, "; %d other(s) within the model's %.0f%% error ('~')", close,
                 100 * r->model_error);
}

static void plan_candidates(plan_ctx *x) {
    plan_layouts(x);
    if (x->docs) pass_plan_apply_docs(x->r, x->spec, x->docs);
    bool any = false;
    x->r->chosen = choose(x->r, false, x->r->model_error);
    if (x->r->chosen < 0) x->r->chosen = choose(x->r, any = true, x->r->model_error);
    explain(x->r, choose(x->r, any, 0));
    drv_plan_dynamic(x->spec, x->cuda, x->docs, x->r, &x->cap);
}

static void header(pass_plan_result *r, const fe_spec *spec) {
    memset(r, 0, sizeof *r);
    snprintf(r->model, sizeof r->model, "%s", spec->model.name);
    r->world = (int)fe_world(spec);
    r->nodes = (int)spec->mesh.nodes;
    r->devices_per_node = (int)spec->mesh.devices_per_node;
    r->micro_batch = spec->train.micro_batch;
    r->accum = spec->train.micro_batch > 0 && spec->train.global_batch > spec->train.micro_batch
                   ? spec->train.global_batch / spec->train.micro_batch
                   : 1;
    r->seq_len = spec->train.seq_len;
    r->device_mem = spec->mesh.device_mem;
    r->model_error = drv_model_error(spec);
    r->offload = strcmp(spec->train.offload, "none") != 0;
    r->docs.spec_documents = spec->train.documents;
    r->chosen = -1;
}

/* Plans without suggestions (the suggestion search calls this). */
static void plan_run(const fe_spec *spec, bool cuda, const pass_doc_lengths *docs, pass_plan_result *r) {
    plan_ctx x = {.spec = spec, .cuda = cuda, .docs = docs, .r = r};
    header(r, spec);
    r->cuda = cuda;
    plan_candidates(&x);
}

/* Re-plans with one change; true when something then fits, with what
 * in `what` (the change as the user would ask for it). */
static bool try_change(const fe_spec *spec, const fe_spec_patch *p, bool cuda, char *what, size_t n) {
    fe_spec *s = fe_spec_patched(spec, p);
    if (!s) return false;
    pass_plan_result r;
    plan_run(s, cuda, NULL, &r);
    bool ok = r.chosen >= 0;
    if (ok) {
        char set[96];
        fe_spec_patch_format(p, set, sizeof set);
        const pass_plan_candidate *c = &r.cand[r.chosen];
        snprintf(what, n, "--set %s: %s then fits (%.1f GiB per rank, %.1f ms/step)", set, c->name,
                 c->mem_bytes_per_rank / GIB, c->step_ms);
    }
    pass_plan_free(&r);
    fe_spec_free(s);
    return ok;
}

/* The changes to try, cheapest to the user first: a larger ZeRO stage,
 * recomputation (compute, not ranks; selective before full), offload
 * (host-link time, not ranks; the cheapest setting first), more nodes, a
 * smaller micro-batch.  Returns how many were written. */
static int suggest_changes(const fe_spec *spec, fe_spec_patch *out, int cap) {
    int n = 0;
    for (int z = spec->train.zero + 1; z <= 3 && n < cap; z++) out[n++] = (fe_spec_patch){.zero = z};
    static const char *const modes[] = {"selective", "full"};
    for (int k = 0; k < 2 && n < cap; k++)
        if (strcmp(spec->train.recompute, modes[k]) != 0 && strcmp(spec->train.recompute, "full") != 0)
            out[n++] = (fe_spec_patch){.recompute = modes[k]};
    static const char *const offloads[] = {"activations", "optimizer", "all"};
    for (int k = 0; k < 3 && n < cap && !strcmp(spec->train.offload, "none") && spec->mesh.host.bandwidth > 0; k++)
        out[n++] = (fe_spec_patch){.offload = offloads[k]};
    for (int64_t k = 2; k <= 8 && n < cap; k *= 2) out[n++] = (fe_spec_patch){.nodes = spec->mesh.nodes * k};
    for (int64_t b = spec->train.micro_batch / 2; b >= 1 && n < cap; b /= 2)
        out[n++] = (fe_spec_patch){.micro_batch = b};
    return n;
}

/* The first change that makes a layout fit. */
static void suggest(const fe_spec *spec, bool cuda, pass_plan_result *r) {
    fe_spec_patch changes[96];
    char what[300];
    int n = suggest_changes(spec, changes, 96);
    for (int i = 0; i < n; i++) {
        if (try_change(spec, &changes[i], cuda, what, sizeof what)) {
            snprintf(r->suggestion, sizeof r->suggestion, "%s", what);
            return;
        }
    }
    snprintf(r->suggestion, sizeof r->suggestion,
             "no single change fits: not ZeRO 3, recompute full, offload all, 8x the nodes or micro_batch 1");
}

bool pass_plan(const fe_spec *spec, pass_plan_result *out) { return pass_plan_target(spec, false, out); }

bool pass_plan_target(const fe_spec *spec, bool cuda, pass_plan_result *out) {
    return pass_plan_docs(spec, cuda, NULL, out);
}

bool pass_plan_docs(const fe_spec *spec, bool cuda, const pass_doc_lengths *docs, pass_plan_result *out) {
    /* Candidates that turn out illegal are results, not the user's errors. */
    sup_diag_saved saved = sup_diag_silence();
    pass_plan_result *r = out;
    plan_run(spec, cuda, docs, r);
    bool any_built = false;
    for (int i = 0; i < r->n; i++) any_built |= r->cand[i].legal;
    if (r->chosen < 0 && any_built) suggest(spec, cuda, r);
    sup_diag_restore(saved);
    return r->chosen >= 0;
}

void pass_plan_free(pass_plan_result *r) {
    free(r->cand);
    r->cand = NULL;
    r->n = 0;
}

/* Fixed-width number or "-" for a candidate that was not built. */
static const char *num(char *buf, size_t n, const pass_plan_candidate *c, double v, const char *fmt) {
    if (!c->legal || !isfinite(v))
        snprintf(buf, n, "-");
    else
        snprintf(buf, n, fmt, v);
    return buf;
}

/* The packed-document columns: dense step, then each packing's step and
 * mean group imbalance. */
static void print_docs_cols(const pass_plan_candidate *c, FILE *out) {
    char d[32], s[32], b[32], is[32], ib[32];
    fprintf(out, " %9s %9s %5s %9s %5s", num(d, sizeof d, c, c->dense_step_ms, "%.1f"),
            num(s, sizeof s, c, c->docs_ms[0], "%.1f"), num(is, sizeof is, c, c->imbalance[0], "%.2f"),
            num(b, sizeof b, c, c->docs_ms[1], "%.1f"), num(ib, sizeof ib, c, c->imbalance[1], "%.2f"));
}

static void print_row(const pass_plan_result *r, const pass_plan_candidate *c, bool chosen, int width, FILE *out) {
    char a[32], f[32], s[32], m[32];
    fprintf(out, "%c %-*s %3d %3d %11.0f %5d %9s %6s %10s",
            chosen            ? '*'
            : c->within_error ? '~'
                              : ' ',
            width, c->name, c->groups, c->group_size, c->tokens_per_rank, c->peers,
            num(a, sizeof a, c, c->a2a_ms, "%.1f"), num(f, sizeof f, c, 100.0 * c->a2a_fraction, "%.0f%%"),
            num(s, sizeof s, c, c->step_ms, "%.1f"));
    if (r->docs.on) print_docs_cols(c, out);
    if (r->offload) {
        char h[32];
        fprintf(out, " %-11s %8s", c->legal && c->offload[0] ? c->offload : "-",
                num(h, sizeof h, c, c->host_ms, "%.1f"));
    }
    fprintf(out, " %8s  %-4s %-5s %s\n", num(m, sizeof m, c, c->mem_bytes_per_rank / GIB, "%.1f"),
            c->legal && isfinite(c->step_ms) ? (c->fits ? "yes" : "no") : "-", c->legal ? "yes" : "no", c->reason);
}

void pass_plan_print(const pass_plan_result *r, FILE *out) {
    fprintf(out, "plan: %s on %d ranks (%d node(s) x %d), micro_batch %lld x %lld tokens", r->model, r->world, r->nodes,
            r->devices_per_node, (long long)r->micro_batch, (long long)r->seq_len);
    if (r->accum > 1) fprintf(out, ", %lld micro-steps per step ('step ms' counts all)", (long long)r->accum);
    if (r->device_mem > 0) fprintf(out, ", %.1f GiB per device", r->device_mem / GIB);
    fprintf(out, ", %s target\n", r->cuda ? "cuda" : "cpu");
    if (r->docs.spec_documents && !r->docs.on)
        fprintf(out, "packed documents: attention is costed dense (S^2 per row), an upper bound; "
                     "--doc-lengths DATA predicts it from the documents' lengths\n");
    if (r->docs.on)
        fprintf(out,
                "packed documents: %d lengths from %s (mean %.0f, longest %.0f tokens), %d sampled steps; "
                "'step ms' is the %s packing's\n",
                r->docs.n, r->docs.source, r->docs.mean_len, r->docs.max_len, r->docs.steps,
                layout_packing_name(r->docs.packing));
    /* 28 columns hold the built-in layouts' names; a plugin's may be longer */
    int width = 28;
    for (int i = 0; i < r->n; i++) width = (int)strlen(r->cand[i].name) > width ? (int)strlen(r->cand[i].name) : width;
    fprintf(out, "\n  %-*s %3s %3s %11s %5s %9s %6s %10s", width, "layout", "G", "K", "tokens/rank", "peers", "a2a ms",
            "a2a", "step ms");
    if (r->docs.on) fprintf(out, " %9s %9s %5s %9s %5s", "dense ms", "seq ms", "imb", "bal ms", "imb");
    if (r->offload) fprintf(out, " %-11s %8s", "offload", "host ms");
    fprintf(out, " %8s  %-4s %-5s %s\n", "mem GiB", "fits", "legal", "why not chosen");
    for (int i = 0; i < r->n; i++) print_row(r, &r->cand[i], i == r->chosen, width, out);
    fputc('\n', out);
    if (r->chosen >= 0)
        fprintf(out, "chosen: %s (%s)\n", r->cand[r->chosen].name, r->why);
    else
        fprintf(out, "chosen: none: no legal layout fits in memory\n");
    if (r->suggestion[0]) fprintf(out, "suggestion: %s\n", r->suggestion);
}

static cJSON *candidate_json(const pass_plan_candidate *c) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "name", c->name);
    cJSON_AddNumberToObject(o, "groups", c->groups);
    cJSON_AddNumberToObject(o, "group_size", c->group_size);
    cJSON_AddNumberToObject(o, "micro_batch", (double)c->micro_batch);
    cJSON_AddNumberToObject(o, "tokens_per_rank", c->tokens_per_rank);
    cJSON_AddNumberToObject(o, "peers", c->peers);
    /* Unbuilt candidates have no numbers: null rather than a made-up 0. */
    const char *keys[] = {"a2a_ms", "step_ms", "a2a_fraction", "mem_bytes_per_rank", "attention_ms", "comm_ms"};
    double vals[] = {c->a2a_ms, c->step_ms, c->a2a_fraction, c->mem_bytes_per_rank, c->attn_ms, c->comm_ms};
    for (int k = 0; k < 6; k++) {
        if (c->legal && isfinite(vals[k]))
            cJSON_AddNumberToObject(o, keys[k], vals[k]);
        else
            cJSON_AddNullToObject(o, keys[k]);
    }
    cJSON_AddBoolToObject(o, "fits", c->legal && c->fits);
    cJSON_AddBoolToObject(o, "legal", c->legal);
    cJSON_AddBoolToObject(o, "keeps_batch", c->keeps_batch);
    cJSON_AddBoolToObject(o, "available", c->available);
    cJSON_AddBoolToObject(o, "within_error", c->within_error);
    cJSON_AddStringToObject(o, "reason", c->reason);
    /* the settings that build this candidate (ulysses-sp also changes the batch) */
    char sets[8][LAYOUT_SET_MAX];
    int nsets = c->dynamic ? 0 : layout_choice_sets(&c->choice, sets, 7);
    if (c->dynamic) { /* the sizes are the name's tail */
        cJSON_AddBoolToObject(o, "dynamic", true);
        snprintf(sets[nsets++], LAYOUT_SET_MAX, "layout.batch_aware=dynamic");
        snprintf(sets[nsets++], LAYOUT_SET_MAX, "layout.group_sizes=\"%.40s\"",
                 c->name + strlen("batch-aware dynamic "));
    }
    if (!c->keeps_batch) snprintf(sets[nsets++], LAYOUT_SET_MAX, "train.micro_batch=%lld", (long long)c->micro_batch);
    cJSON *set = cJSON_AddArrayToObject(o, "set");
    for (int k = 0; k < nsets; k++) cJSON_AddItemToArray(set, cJSON_CreateString(sets[k]));
    if (c->legal && c->offload[0] && strcmp(c->offload, "none") != 0) {
        cJSON_AddStringToObject(o, "offload", c->offload);
        cJSON_AddNumberToObject(o, "host_copy_ms", c->host_ms);
    }
    if (!isnan(c->dense_step_ms) && c->dense_step_ms > 0) {
        const char *dk[] = {"dense_step_ms", "step_ms_sequential", "imbalance_sequential", "step_ms_balanced",
                            "imbalance_balanced"};
        double dv[] = {c->dense_step_ms, c->docs_ms[0], c->imbalance[0], c->docs_ms[1], c->imbalance[1]};
        for (int k = 0; k < 5; k++) {
            if (c->legal && isfinite(dv[k]))
                cJSON_AddNumberToObject(o, dk[k], dv[k]);
            else
                cJSON_AddNullToObject(o, dk[k]);
        }
    }
    return o;
}

void pass_plan_json(const pass_plan_result *r, FILE *out) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "model", r->model);
    cJSON_AddNumberToObject(o, "world", r->world);
    cJSON_AddNumberToObject(o, "micro_batch", (double)r->micro_batch);
    cJSON_AddNumberToObject(o, "seq_len", (double)r->seq_len);
    cJSON_AddNumberToObject(o, "device_mem", r->device_mem);
    cJSON_AddStringToObject(o, "target", r->cuda ? "cuda" : "cpu");
    cJSON_AddNumberToObject(o, "model_error", r->model_error);
    if (r->docs.on) {
        cJSON *d = cJSON_AddObjectToObject(o, "documents");
        cJSON_AddStringToObject(d, "source", r->docs.source);
        cJSON_AddNumberToObject(d, "count", r->docs.n);
        cJSON_AddNumberToObject(d, "mean_len", r->docs.mean_len);
        cJSON_AddNumberToObject(d, "max_len", r->docs.max_len);
        cJSON_AddNumberToObject(d, "sampled_steps", r->docs.steps);
        cJSON_AddStringToObject(d, "packing", layout_packing_name(r->docs.packing));
    }
    cJSON *arr = cJSON_AddArrayToObject(o, "candidates");
    for (int i = 0; i < r->n; i++) cJSON_AddItemToArray(arr, candidate_json(&r->cand[i]));
    if (r->chosen >= 0) {
        cJSON_AddStringToObject(o, "chosen", r->cand[r->chosen].name);
        cJSON_AddStringToObject(o, "why", r->why);
    } else {
        cJSON_AddNullToObject(o, "chosen");
    }
    if (r->suggestion[0]) cJSON_AddStringToObject(o, "suggestion", r->suggestion);
    char *text = cJSON_Print(o);
    fprintf(out, "%s\n", text);
    free(text);
    cJSON_Delete(o);
}
