/* registry.c — the named passes, the pipeline a strategy derives, and
 * running them.
 *
 * Passes are registered at run time into the compilation context: the
 * built-in ones from passes.def (one row each; a PASS_API row's function
 * comes with its basp_register_pass), a plugin's through api/basp_pass.h.
 * The pipeline is one explicit skeleton, its slots filled from passes.def,
 * with the chosen strategy's passes in it (pass_pipeline); each pass
 * states what it expects of its input in passes/README.md, and the
 * verifier runs between passes. */
#include "pass_util.h"

#include <string.h>

/* The built-in passes, in pipeline order: registered so, hence listed so
 * by --list-passes and in the "available:" list of an unknown name. */
#define PASS(n, f, sl, ef, req, sum)                                                                                   \
    {.name = n, .summary = sum, .run = f, .slot = PASS_SLOT_##sl, .effect = PASS_EFFECT_##ef, .require = req},
#define PASS_API(n, sl, ef, req, sum)                                                                                  \
    {.name = n, .summary = sum, .slot = PASS_SLOT_##sl, .effect = PASS_EFFECT_##ef, .require = req},
static const pass_info builtin_passes[] = {
#include "passes.def"
};
#undef PASS
#undef PASS_API
enum { NBUILTIN = sizeof builtin_passes / sizeof builtin_passes[0] };

/* The registry, in the compilation context (support.h). */
struct pass_registry {
    pass_info rows[PASS_MAX];
    int n;
    bool ready;                  /* passes.def's rows are in */
    const pass_options *running; /* pass_run's options, for passes without a parameter for them */
    const pass_info *current;    /* the pass pass_run is running */
    char pipeline[512];          /* pass_default_pipeline's */
};

static struct pass_registry *registry(void) {
    sup_context *ctx = sup_ctx();
    if (!ctx->passes) ctx->passes = sup_xcalloc(1, sizeof *ctx->passes);
    return ctx->passes;
}

const pass_options *pass_current_options(void) { return registry()->running; }

const pass_info *pass_current(void) { return registry()->current; }

/* A PASS_API row before its basp_register_pass: its place is held, it
 * cannot run yet. */
static bool declared_only(const pass_info *p) { return !p->run && !p->run_module; }

/* The function of a PASS_API row, from its registration (built in: no
 * owner); its summary stays passes.def's unless the registration gives one. */
static void provide(pass_info *row, const pass_info *p) {
    row->run = p->run;
    row->run_module = p->run_module;
    if (p->summary) row->summary = p->summary;
}

bool pass_register(const pass_info *p, char *err, size_t nerr) {
    pass_init(); /* the built-in rows first, whoever registers */
    struct pass_registry *r = registry();
    char tmp[8];
    if (!err) err = tmp, nerr = sizeof tmp;
    if (!p || !p->name || (!p->run && !p->run_module)) {
        snprintf(err, nerr, "a pass needs a name and a function");
        return false;
    }
    if (!*p->name || strlen(p->name) >= 64 || strpbrk(p->name, ", \t\n")) {
        snprintf(err, nerr, "pass name '%s': 1 to 63 characters, no commas or spaces", p->name);
        return false;
    }
    for (int i = 0; i < r->n; i++)
        if (!strcmp(r->rows[i].name, p->name)) {
            if (declared_only(&r->rows[i]) && !p->owner) {
                provide(&r->rows[i], p);
                return true;
            }
            snprintf(err, nerr, "a pass named '%s' is already registered (%s)", p->name,
                     r->rows[i].owner ? r->rows[i].owner : "built in");
            return false;
        }
    if (r->n >= PASS_MAX) {
        snprintf(err, nerr, "pass '%s': the registry is full (%d passes)", p->name, PASS_MAX);
        return false;
    }
    r->rows[r->n] = *p;
    if (!r->rows[r->n].summary) r->rows[r->n].summary = "";
    r->n++;
    return true;
}

void pass_init(void) {
    struct pass_registry *r = registry();
    if (r->ready) return;
    r->ready = true;
    for (int i = 0; i < NBUILTIN && r->n < PASS_MAX; i++) r->rows[r->n++] = builtin_passes[i];
}

const pass_info *pass_registry(int *n) {
    pass_init();
    if (n) *n = registry()->n;
    return registry()->rows;
}

const pass_info *pass_lookup(const char *name) {
    pass_init();
    struct pass_registry *r = registry();
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->rows[i].name, name) == 0) return declared_only(&r->rows[i]) ? NULL : &r->rows[i];
    return NULL;
}

/* True when `name` is one item of the comma-separated `list`. */
static bool in_list(const char *list, const char *name) {
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0) return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

/* Item `i` of a comma-separated list into item[64]; returns the pointer
 * past it (NULL at the end) and its length in *len. */
static const char *list_item(const char *p, char item[64], size_t *len) {
    const char *e = strchr(p, ',');
    *len = e ? (size_t)(e - p) : strlen(p);
    snprintf(item, 64, "%.*s", (int)(*len < 64 ? *len : 63), p);
    return e ? e + 1 : NULL;
}

/* Appends the items of `list` not yet in buf (comma-separated). */
static void append_new(char *buf, size_t n, const char *list) {
    char item[64];
    size_t len;
    for (const char *p = list; p && *p;) {
        p = list_item(p, item, &len);
        if (*item && !in_list(buf, item)) {
            size_t used = strlen(buf);
            snprintf(buf + used, n - used, "%s%s", used ? "," : "", item);
        }
    }
}

/* Appends the built-in passes of one slot, in passes.def's order; without
 * `memory`, only those whose effect is the step's time. */
static void append_slot(char *buf, size_t n, pass_slot slot, bool memory) {
    for (int i = 0; i < NBUILTIN; i++)
        if (builtin_passes[i].slot == slot && (memory || builtin_passes[i].effect == PASS_EFFECT_TIME))
            append_new(buf, n, builtin_passes[i].name);
}

/* The pipeline is one skeleton with the strategy's passes in it:
 *   FIRST, <passes>, SHARD, <after_zero>, FINISH
 * = batch-aware, <passes>, place, zero, <after_zero>, recompute, offload, overlap, memplan
 * (the slots are passes.def's).  batch-aware first: it partitions the
 * batch (@dp); the strategy's passes shard each group's sequence; place
 * checks the groups against the nodes; zero partitions the weights;
 * recompute, offload, overlap and memplan come last because they read the
 * finished step (offload moves what recompute keeps).  `memory` false
 * leaves out the passes whose effect is memory only (recompute, offload,
 * memplan: what the cost model times, since they change memory, not which
 * layout is faster); overlap stays, since it changes the time.  A NULL
 * strategy: every registered one's passes, in registration order (each
 * skips, with a remark, a layout not its own). */
void pass_pipeline(const layout_strategy *s, bool memory, char *buf, size_t n) {
    pass_init();
    buf[0] = '\0';
    append_slot(buf, n, PASS_SLOT_FIRST, memory);
    int ns;
    const layout_strategy *all = layout_strategies(&ns);
    for (int i = 0; i < ns; i++)
        if (!s || &all[i] == s) append_new(buf, n, all[i].passes);
    append_slot(buf, n, PASS_SLOT_SHARD, memory);
    for (int i = 0; i < ns; i++)
        if ((!s || &all[i] == s) && all[i].after_zero) append_new(buf, n, all[i].after_zero);
    append_slot(buf, n, PASS_SLOT_FINISH, memory);
}

const char *pass_default_pipeline(void) {
    struct pass_registry *r = registry();
    pass_pipeline(NULL, true, r->pipeline, sizeof r->pipeline);
    return r->pipeline;
}

bool pass_pipeline_of(const ir_module *m, char *buf, size_t n) {
    const layout_strategy *s = NULL;
    if (!pass_layout_strategy(m, &s)) return false;
    pass_pipeline(s, true, buf, n);
    return true;
}

/* Every pass of the layout's strategy pipeline is registered (a layout
 * strategy whose pass is missing is listed by the planner as not
 * available). */
bool pass_layout_available(const layout_choice *c) {
    const layout_strategy *s = layout_strategy_of(c);
    if (!s) return false;
    char item[64];
    size_t len;
    for (int k = 0; k < 2; k++)
        for (const char *p = k ? s->after_zero : s->passes; p && *p;) {
            p = list_item(p, item, &len);
            if (!pass_lookup(item)) return false;
        }
    return true;
}

pass_options pass_default_options(void) {
    return (pass_options){
        .print_after_all = false, .print_after = NULL, .verify = true, .print_out = NULL, .quiet = false};
}

/* `what`: the option the name came from, or NULL for the pass list. */
static void unknown_pass(const char *name, const char *what) {
    const struct pass_registry *r = registry();
    const char *cands[PASS_MAX];
    char avail[1024] = "";
    for (int i = 0; i < r->n; i++) {
        cands[i] = r->rows[i].name;
        if (i) strncat(avail, ", ", sizeof avail - strlen(avail) - 1);
        strncat(avail, r->rows[i].name, sizeof avail - strlen(avail) - 1);
    }
    const char *close = sup_closest(name, cands, r->n);
    if (close)
        sup_error(sup_noloc(), "%s%sunknown pass '%s'; did you mean '%s'? (available: %s)", what ? what : "",
                  what ? ": " : "", name, close, avail);
    else
        sup_error(sup_noloc(), "%s%sunknown pass '%s' (available: %s)", what ? what : "", what ? ": " : "", name,
                  avail);
}

/* "pass 'hpz' (from plugin hpz (/p/libbasp_hpz.so))": how errors about a
 * pass name it and, for a registered one, the file it came from. */
static void pass_label(const pass_info *p, char *buf, size_t n) {
    if (p->owner)
        snprintf(buf, n, "pass '%s' (from %s)", p->name, p->owner);
    else
        snprintf(buf, n, "pass '%s'", p->name);
}

/* A pass's own verdict, checked against what it reported: false without an
 * error is a failure nobody would see, and a registered pass that reported
 * errors (through basp_pass_error or a bad handle) and went on has left
 * the module in a state it did not mean.  Both fail naming the pass. */
static bool pass_verdict(const pass_info *p, bool ok, int errors) {
    char who[384];
    pass_label(p, who, sizeof who);
    if (!ok && errors == 0)
        sup_error(sup_noloc(),
                  "%s failed without saying why (a pass reports its failure with basp_pass_error "
                  "before returning false)",
                  who);
    else if (!ok && p->owner)
        sup_error(sup_noloc(), "%s failed", who);
    else if (ok && p->owner && errors > 0)
        sup_error(sup_noloc(), "%s reported %d error(s) but returned true; stopping", who, errors);
    return ok && !(p->owner && errors > 0);
}

bool pass_run(ir_module *m, const char *name, const pass_options *opt) {
    pass_options def = pass_default_options();
    if (!opt) opt = &def;
    const pass_info *p = pass_lookup(name);
    if (!p) {
        unknown_pass(name, NULL);
        return false;
    }
    struct pass_registry *r = registry();
    const pass_options *outer = r->running;
    const pass_info *outer_pass = r->current;
    r->running = opt;
    r->current = p;
    int errors = sup_error_count();
    bool ok = p->run ? p->run(m, opt) : p->run_module(m);
    r->running = outer;
    r->current = outer_pass;
    if (!pass_verdict(p, ok, sup_error_count() - errors)) return false;
    if (opt->verify) {
        char who[384], ctx[400];
        pass_label(p, who, sizeof who);
        snprintf(ctx, sizeof ctx, "after %s", who); /* "after pass 'NAME' (from OWNER)" */
        if (!ir_verify(m, ctx)) return false;
    }
    if (opt->print_after_all || (opt->print_after && in_list(opt->print_after, name))) {
        FILE *out = opt->print_out ? opt->print_out : stdout;
        fprintf(out, "// -----// IR Dump After %s //----- //\n", name);
        ir_print(m, out);
        fflush(out);
    }
    return true;
}

/* Every item of a non-empty comma-separated list names a registered pass;
 * reports each one that does not (`what` says which option it came from). */
static bool check_names(const char *list, const char *what) {
    bool ok = true;
    char item[64];
    size_t len;
    if (!list || !*list) return true;
    for (const char *p = list; p;) {
        p = list_item(p, item, &len);
        if (len == 0) {
            sup_error(sup_noloc(), "%s: empty pass name in '%s'", what ? what : "--passes", list);
            ok = false;
        } else if (len >= sizeof item || !pass_lookup(item)) {
            unknown_pass(item, what);
            ok = false;
        }
    }
    return ok;
}

/* Every item of `list` (NULL: none) is in `names`. */
static bool all_in(const char *list, const char *names) {
    char item[64];
    size_t len;
    for (const char *p = list; p && *p;) {
        p = list_item(p, item, &len);
        if (*item && !in_list(names, item)) return false;
    }
    return true;
}

/* What the IR holds against the layout its config names (G groups of K
 * ranks): "" when they agree, else the first difference into why. */
static void layout_diff(const ir_module *m, int G, int K, char *why, size_t n) {
    int dp = ir_group_find(m, "dp"), sp = ir_group_find(m, "sp");
    long long bg = ir_config_int(m, "batch_groups", 1), spk = ir_config_int(m, "sp_size", -1);
    why[0] = '\0';
    if (bg != G)
        snprintf(why, n, "config batch_groups = %lld, not %d (the banner and the loss scale read it)", bg, G);
    else if (G > 1 && (dp < 0 || m->groups[dp].nsets != K || m->groups[dp].set_size != G))
        snprintf(why, n, "no group @dp of %d sets of %d ranks (the batch is not split over the groups)", K, G);
    else if (spk >= 0 && spk != K)
        snprintf(why, n, "config sp_size = %lld, not %d", spk, K);
    else if (sp >= 0 && (m->groups[sp].nsets != G || m->groups[sp].set_size != K))
        snprintf(why, n, "group @sp has %d sets of %d ranks, not %d of %d", m->groups[sp].nsets, m->groups[sp].set_size,
                 G, K);
    else if (G > 1 && (sp < 0 || spk < 0))
        snprintf(why, n, "no group @sp and config sp_size (the sequence is not sharded inside the groups)");
}

/* After a pipeline that ran every pass of the module's strategy, the IR
 * must hold the layout the config names: a strategy whose passes skip or
 * undo the family's partitioning would otherwise compile a step that
 * trains, with the wrong loss scale or the wrong blocks, under the name of
 * the layout asked for.  False after an error naming the strategy. */
static bool layout_built(const ir_module *m, const char *names) {
    layout_choice c = pass_layout_of(m);
    const char *word = ir_config_get(m, "a2a");
    if (!c.variant && word && strcmp(word, "flat")) return true; /* an unregistered word: pass_pipeline_of says so */
    const layout_strategy *s = layout_strategy_of(&c);
    int N = ir_seq_world(m), G = c.groups < 1 ? 1 : c.groups;
    if (!s || !in_list(names, "batch-aware") || !all_in(s->passes, names) || !all_in(s->after_zero, names) || N % G)
        return true;
    char why[256], name[96];
    layout_diff(m, G, N / G, why, sizeof why);
    if (!why[0]) return true;
    layout_choice_name(&c, name, sizeof name);
    bool builtin = !s->owner || !strcmp(s->owner, "built in");
    sup_error(sup_noloc(),
              "strategy '%s' (%s%s): the pipeline '%s' did not build layout '%s' (%d group(s) of %d "
              "ranks): %s",
              s->name, builtin ? "built in" : "from ", builtin ? "" : s->owner, names, name, G, N / G, why);
    sup_note(sup_noloc(), "a strategy's passes start with its family's pass, which partitions the groups; its own "
                          "passes may rewrite them but must keep G groups of K ranks (docs/writing-a-pass.md)");
    return false;
}

bool pass_run_pipeline(ir_module *m, const char *names, const pass_options *opt) {
    /* Check every name first, so a typo late in the list fails before any
     * pass has changed the module; the same for the passes to print after. */
    bool ok = check_names(names, NULL);
    if (opt && !check_names(opt->print_after, "--print-ir-after")) ok = false;
    if (opt && opt->print_after && *opt->print_after && !opt->print_after_all) {
        char item[64];
        size_t len;
        for (const char *p = opt->print_after; ok && p;) {
            p = list_item(p, item, &len);
            if (!in_list(names, item))
                sup_warning(sup_noloc(),
                            "--print-ir-after=%s: the pipeline '%s' does not include that pass, so "
                            "nothing is printed for it",
                            item, names ? names : "");
        }
    }
    char item[64];
    size_t len;
    for (const char *p = names; ok && p && *p;) {
        p = list_item(p, item, &len);
        ok = pass_run(m, item, opt);
    }
    return ok && layout_built(m, names ? names : "");
}
