/* registry.c — the named passes, and running them.
 *
 * Adding a pass is one file (passes/pass_NAME.c defining pass_NAME, declared
 * in passes.h) plus one line in the table below.  The default pipeline is an
 * explicit, ordered list: each pass states what it expects of its input in
 * passes/README.md, and the verifier runs between passes. */
#include "pass_util.h"

#include <string.h>

static const pass_info registry[] = {
    {"batch-aware", "config groups G: K strided sets @dp of G ranks, shard the batch over @dp", pass_batch_aware},
    {"ulysses", "shard the sequence over @sp (G groups of K); all-to-all seq<->heads around each attention",
     pass_ulysses},
    {"ring", "Ulysses x Ring (sequence ring/hybrid): ring attention over @ring, Ulysses inside @ul", pass_ring},
    {"two-level", "split each Ulysses all-to-all spanning nodes into @inter then @node (a2a two_level)",
     pass_two_level},
    {"place", "check node alignment of every group; record place.<group>", pass_place},
    {"zero", "ZeRO 0-3 over @world: parameter all-gathers, gradient reductions", pass_zero},
    {"recompute", "activation recomputation (config recompute): re-run a layer's forward in its backward", pass_recompute},
    {"memplan", "place every buffer in one arena per rank; buffers never live together share bytes", pass_memplan},
    {"cost", "predict per-op time and memory per rank; annotate cost_us, set cost.* config", pass_cost},
};
enum { NPASSES = sizeof registry / sizeof registry[0] };

const pass_info *pass_registry(int *n)
{
    if (n)
        *n = NPASSES;
    return registry;
}

const pass_info *pass_lookup(const char *name)
{
    for (int i = 0; i < NPASSES; i++)
        if (strcmp(registry[i].name, name) == 0)
            return &registry[i];
    return NULL;
}

/* batch-aware first: it partitions the batch (@dp); the sequence pass of
 * the layout (ulysses, or ring for ring/hybrid; the others skip with a
 * remark) shards each group's sequence over @sp; two-level then splits
 * Ulysses' exchanges when config a2a says so. */
const char *pass_default_pipeline(void)
{
    return "batch-aware,ulysses,ring,two-level,place,zero,recompute,memplan";
}

/* Every pass of the layout's strategy pipeline is registered (a layout
 * strategy whose pass is missing is listed by the planner as not
 * available). */
bool pass_layout_available(const layout_choice *c)
{
    const layout_strategy *s = layout_strategy_of(c);
    if (!s)
        return false;
    char item[64];
    for (const char *p = s->pipeline; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        snprintf(item, sizeof item, "%.*s", (int)(len < 63 ? len : 63), p);
        if (!pass_lookup(item))
            return false;
        p = e ? e + 1 : NULL;
    }
    return true;
}

pass_options pass_default_options(void)
{
    return (pass_options){.print_after_all = false, .print_after = NULL, .verify = true,
                          .print_out = NULL, .quiet = false};
}

/* True when `name` is one item of the comma-separated `list`. */
static bool in_list(const char *list, const char *name)
{
    size_t n = strlen(name);
    for (const char *p = list; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        if (len == n && strncmp(p, name, n) == 0)
            return true;
        p = e ? e + 1 : NULL;
    }
    return false;
}

/* `what`: the option the name came from, or NULL for the pass list. */
static void unknown_pass(const char *name, const char *what)
{
    const char *cands[NPASSES];
    char avail[256] = "";
    for (int i = 0; i < NPASSES; i++) {
        cands[i] = registry[i].name;
        if (i)
            strncat(avail, ", ", sizeof avail - strlen(avail) - 1);
        strncat(avail, registry[i].name, sizeof avail - strlen(avail) - 1);
    }
    const char *close = sup_closest(name, cands, NPASSES);
    if (close)
        sup_error(sup_noloc(), "%s%sunknown pass '%s'; did you mean '%s'? (available: %s)", what ? what : "",
                  what ? ": " : "", name, close, avail);
    else
        sup_error(sup_noloc(), "%s%sunknown pass '%s' (available: %s)", what ? what : "", what ? ": " : "", name,
                  avail);
}

bool pass_run(ir_module *m, const char *name, const pass_options *opt)
{
    pass_options def = pass_default_options();
    if (!opt)
        opt = &def;
    const pass_info *p = pass_lookup(name);
    if (!p) {
        unknown_pass(name, NULL);
        return false;
    }
    if (!p->run(m, opt))
        return false;
    if (opt->verify) {
        char ctx[96];
        snprintf(ctx, sizeof ctx, "after pass '%s'", name);
        if (!ir_verify(m, ctx))
            return false;
    }
    if (opt->print_after_all || (opt->print_after && in_list(opt->print_after, name))) {
        FILE *out = opt->print_out ? opt->print_out : stdout;
        fprintf(out, "// -----// IR Dump After %s //----- //\n", name);
        ir_print(m, out);
        fflush(out);
    }
    return true;
}

/* Item `i` of a comma-separated list into item[64]; returns the pointer
 * past it (NULL at the end) and its length in *len. */
static const char *list_item(const char *p, char item[64], size_t *len)
{
    const char *e = strchr(p, ',');
    *len = e ? (size_t)(e - p) : strlen(p);
    snprintf(item, 64, "%.*s", (int)(*len < 64 ? *len : 63), p);
    return e ? e + 1 : NULL;
}

/* Every item of a non-empty comma-separated list names a registered pass;
 * reports each one that does not (`what` says which option it came from). */
static bool check_names(const char *list, const char *what)
{
    bool ok = true;
    char item[64];
    size_t len;
    if (!list || !*list)
        return true;
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

bool pass_run_pipeline(ir_module *m, const char *names, const pass_options *opt)
{
    /* Check every name first, so a typo late in the list fails before any
     * pass has changed the module; the same for the passes to print after. */
    bool ok = check_names(names, NULL);
    if (opt && !check_names(opt->print_after, "--print-ir-after"))
        ok = false;
    if (opt && opt->print_after && *opt->print_after && !opt->print_after_all) {
        char item[64];
        size_t len;
        for (const char *p = opt->print_after; ok && p;) {
            p = list_item(p, item, &len);
            if (!in_list(names, item))
                sup_warning(sup_noloc(), "--print-ir-after=%s: the pipeline '%s' does not include that pass, so "
                                         "nothing is printed for it", item, names ? names : "");
        }
    }
    char item[64];
    size_t len;
    for (const char *p = names; ok && p && *p;) {
        p = list_item(p, item, &len);
        ok = pass_run(m, item, opt);
    }
    return ok;
}
