/* registry.c — the named passes, and running them.
 *
 * Adding a pass is one file (passes/pass_NAME.c defining pass_NAME, declared
 * in passes.h) plus one line in the table below.  The default pipeline is an
 * explicit, ordered list: each pass states what it expects of its input in
 * passes/README.md, and the verifier runs between passes. */
#include "pass_util.h"

#include <string.h>

static const pass_info registry[] = {
    {"ulysses", "shard the sequence over @sp; all-to-all seq<->heads around each attention", pass_ulysses},
    {"batch-aware", "split @sp into G groups of K ranks, shard the batch over @dp", pass_batch_aware},
    {"place", "check node alignment of every group; record place.<group>", pass_place},
    {"zero", "ZeRO 0-3 over @world: parameter all-gathers, gradient reductions", pass_zero},
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

const char *pass_default_pipeline(void) { return "ulysses,batch-aware,place,zero"; }

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

static void unknown_pass(const char *name)
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
        sup_error(sup_noloc(), "unknown pass '%s'; did you mean '%s'? (available: %s)", name, close, avail);
    else
        sup_error(sup_noloc(), "unknown pass '%s' (available: %s)", name, avail);
}

bool pass_run(ir_module *m, const char *name, const pass_options *opt)
{
    pass_options def = pass_default_options();
    if (!opt)
        opt = &def;
    const pass_info *p = pass_lookup(name);
    if (!p) {
        unknown_pass(name);
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

bool pass_run_pipeline(ir_module *m, const char *names, const pass_options *opt)
{
    /* Check every name first, so a typo late in the list fails before any
     * pass has changed the module. */
    bool ok = true;
    char item[64];
    for (const char *p = names; p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), p);
        if (len && !pass_lookup(item)) {
            unknown_pass(item);
            ok = false;
        }
        p = e ? e + 1 : NULL;
    }
    for (const char *p = names; ok && p && *p;) {
        const char *e = strchr(p, ',');
        size_t len = e ? (size_t)(e - p) : strlen(p);
        snprintf(item, sizeof item, "%.*s", (int)(len < sizeof item ? len : sizeof item - 1), p);
        if (len)
            ok = pass_run(m, item, opt);
        p = e ? e + 1 : NULL;
    }
    return ok;
}
