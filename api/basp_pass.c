/* basp_pass.c — the pass-writer API (basp_pass.h) over the compiler's own
 * registry and IR, and the plugin loader.
 *
 * Registration goes through the same functions the built-in passes and
 * strategies use (pass_register, layout_strategy_register); a plugin's rows
 * carry its path as their owner, so that the verifier's errors after its
 * pass and the planner's rows name it.  The IR calls are thin: a handle is
 * the index the compiler uses itself. */
#include "basp_pass.h"

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "../ir/ir.h"
#include "../passes/passes.h"

/* The plugin being registered now (its path), NULL for calls made by the
 * embedding program itself. */
static const char *loading;

/* ---- registering ---------------------------------------------------------------- */
static const char *owner_now(void) { return loading ? loading : "the embedding program"; }

bool basp_register_pass(const char *name, const char *summary, basp_pass_fn run)
{
    pass_init();
    pass_info p = {.name = name, .summary = summary, .run_module = run, .owner = owner_now()};
    char err[256];
    if (!run) {
        sup_error(sup_noloc(), "%s: pass '%s' has no function", owner_now(), name ? name : "");
        return false;
    }
    if (!pass_register(&p, err, sizeof err)) {
        sup_error(sup_noloc(), "%s: %s", owner_now(), err);
        return false;
    }
    return true;
}

/* A plugin's strategy rows, copied: layout/'s rows point at them (user). */
static basp_strategy rows[LAYOUT_MAX_STRATEGIES];
static int nrows;

static basp_layout_dims to_dims(const layout_dims *d)
{
    return (basp_layout_dims){.N = d->N, .nodes = d->nodes, .dpn = d->dpn, .B = d->B, .S = d->S, .H = d->H,
                              .Hk = d->Hk};
}

static layout_dims from_dims(const basp_layout_dims *d)
{
    return (layout_dims){.N = d->N, .nodes = d->nodes, .dpn = d->dpn, .B = d->B, .S = d->S, .H = d->H,
                         .Hk = d->Hk};
}

/* The family it builds on, then the plugin's rules, then the family's. */
static const char *plugin_legal(const layout_dims *d, const layout_choice *c, char *fix, size_t nfix)
{
    const basp_strategy *s = c->variant ? c->variant->user : NULL;
    if (c->variant && c->variant->seq != c->seq)
        return layout_reason(fix, nfix, NULL, "strategy '%s' builds on sequence %s, not %s", c->variant->name,
                             layout_seq_name(c->variant->seq), layout_seq_name(c->seq));
    if (s && s->legal) {
        basp_layout_dims pd = to_dims(d);
        basp_layout_choice pc = {.groups = c->groups, .ring_degree = c->ring_degree};
        /* The hint's termination rule (basp_pass.h): zeroed before the call,
         * its last byte NUL after it, so that a fill of all nfix bytes is
         * cut to nfix - 1 instead of read past. */
        if (fix && nfix)
            memset(fix, 0, nfix);
        const char *why = s->legal(&pd, &pc, fix, nfix);
        if (fix && nfix)
            fix[nfix - 1] = '\0';
        if (why) /* into layout/'s buffer: the plugin's string may not outlive the next call */
            return layout_reason(NULL, 0, NULL, "%s", why);
    }
    return layout_family_legal(d, c, fix, nfix);
}

static int plugin_candidates(const layout_strategy *self, const layout_dims *d, int G, layout_choice *out, int max)
{
    const basp_strategy *s = self->user;
    if (!s->candidates) {
        /* the family's choices, made this strategy's */
        const layout_strategy *family = layout_strategies(NULL) + self->seq;
        int n = family->candidates(family, d, G, out, max);
        for (int i = 0; i < n && i < max; i++)
            out[i].variant = self;
        return n;
    }
    basp_layout_dims pd = to_dims(d);
    basp_layout_choice pc[256];
    int n = s->candidates(&pd, G, pc, 256);
    for (int i = 0; i < n && i < max && i < 256; i++)
        out[i] = (layout_choice){.seq = self->seq, .ring_degree = pc[i].ring_degree, .variant = self,
                                 .groups = pc[i].groups};
    return n < 256 ? n : 256;
}

/* The header's promise: a strategy's passes start with its family's pass.
 * That pass partitions the ranks into the G groups (@sp, config sp_size and
 * batch_groups); without it the step trains on one group with the loss
 * scaled for G, under the layout's name. */
static bool family_pass_first(const basp_strategy *s, layout_seq seq)
{
    const char *want = layout_strategies(NULL)[seq].passes; /* "ulysses", "ring" */
    size_t n = strlen(want);
    const char *got = s->passes ? s->passes : "";
    if (!strncmp(got, want, n) && (got[n] == '\0' || got[n] == ','))
        return true;
    sup_error(sup_noloc(), "%s: strategy '%s': its passes '%s' must start with its family's pass '%s' (family %s): "
              "that pass splits the ranks into the layout's groups, which the strategy's own passes then rewrite",
              owner_now(), s->name ? s->name : "", got, want, s->family);
    return false;
}

bool basp_register_strategy(const basp_strategy *s)
{
    pass_init();
    layout_seq seq;
    if (!s || !s->family || !layout_seq_parse(s->family, &seq)) {
        sup_error(sup_noloc(), "%s: strategy '%s': family must be ulysses, ring or hybrid, not '%s'", owner_now(),
                  s && s->name ? s->name : "", s && s->family ? s->family : "");
        return false;
    }
    if (!family_pass_first(s, seq))
        return false;
    if (nrows >= LAYOUT_MAX_STRATEGIES) {
        sup_error(sup_noloc(), "%s: strategy '%s': too many strategies", owner_now(), s->name ? s->name : "");
        return false;
    }
    rows[nrows] = *s;
    layout_strategy row = {.name = s->name, .seq = seq, .key = s->key, .word = s->word, .title = s->title,
                           .legal = plugin_legal, .candidates = plugin_candidates, .passes = s->passes,
                           .after_zero = s->after_zero, .owner = owner_now(), .user = &rows[nrows]};
    char err[256];
    if (!layout_strategy_register(&row, err, sizeof err)) {
        sup_error(sup_noloc(), "%s: %s", owner_now(), err);
        return false;
    }
    nrows++;
    return true;
}

const char *basp_layout_family_legal(const char *family, const basp_layout_dims *d, const basp_layout_choice *c,
                                     char *fix, size_t nfix)
{
    layout_choice lc = {.ring_degree = c->ring_degree, .groups = c->groups};
    if (!layout_seq_parse(family, &lc.seq))
        return layout_reason(fix, nfix, NULL, "no sequence family '%s'", family ? family : "");
    layout_dims ld = from_dims(d);
    return layout_family_legal(&ld, &lc, fix, nfix);
}

/* ---- diagnostics ----------------------------------------------------------------- */
void basp_pass_remark(const char *fmt, ...)
{
    const pass_options *o = pass_current_options();
    if (o && o->quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    sup_vdiag(SUP_REMARK, sup_noloc(), fmt, ap);
    va_end(ap);
}

void basp_pass_error(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    sup_vdiag(SUP_ERROR, sup_noloc(), fmt, ap);
    va_end(ap);
}

/* ---- loading plugins ---------------------------------------------------------------- */
static void **handles;
static int nhandles;

/* A readable regular file that starts with the ELF magic; else an error. */
static bool looks_like_elf(const char *path)
{
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
        sup_error(sup_noloc(), "--load-pass-plugin %s: cannot open it: %s", path, strerror(errno));
        return false;
    }
    struct stat st;
    unsigned char magic[4] = {0};
    bool regular = fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
    ssize_t n = regular ? read(fd, magic, 4) : 0;
    close(fd);
    if (!regular || n != 4 || memcmp(magic, "\x7f" "ELF", 4)) {
        sup_error(sup_noloc(), "--load-pass-plugin %s: %s", path,
                  !regular ? "not a regular file" : "not a shared object (no ELF header)");
        return false;
    }
    return true;
}

bool basp_load_pass_plugin(const char *path)
{
    pass_init();
    if (!path || !*path) {
        sup_error(sup_noloc(), "--load-pass-plugin: empty path: pass a plugin's .so file");
        return false;
    }
    if (!looks_like_elf(path))
        return false;
    /* a name without a slash would be searched for in the library path */
    char full[4096];
    snprintf(full, sizeof full, "%s%s", strchr(path, '/') ? "" : "./", path);
    void *h = dlopen(full, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        sup_error(sup_noloc(), "--load-pass-plugin %s: %s", path, dlerror());
        return false;
    }
    for (int i = 0; i < nhandles; i++)
        if (handles[i] == h) {
            dlclose(h); /* loaded before: its passes are registered */
            return true;
        }
    basp_plugin_entry_fn entry;
    *(void **)&entry = dlsym(h, BASP_PLUGIN_ENTRY);
    if (!entry) {
        sup_error(sup_noloc(), "--load-pass-plugin %s: no entry point '%s': a basp pass plugin exports "
                  "`basp_plugin_info %s(void)` (api/basp_pass.h)", path, BASP_PLUGIN_ENTRY, BASP_PLUGIN_ENTRY);
        dlclose(h);
        return false;
    }
    basp_plugin_info info = entry();
    if (info.api_version != BASP_PASS_API_VERSION) {
        sup_error(sup_noloc(), "--load-pass-plugin %s: plugin '%s' was built against basp pass API version %d; "
                  "this compiler has version %d: rebuild it against this basp's headers", path,
                  info.name ? info.name : "?", info.api_version, BASP_PASS_API_VERSION);
        dlclose(h);
        return false;
    }
    /* kept open for good: its functions are in the registry now */
    handles = realloc(handles, sizeof *handles * (size_t)(nhandles + 1));
    handles[nhandles++] = h;
    /* the rows it registers name it for good (the registry is never emptied) */
    char owner[1024];
    snprintf(owner, sizeof owner, "plugin %s (%s)", info.name ? info.name : "?", path);
    loading = sup_xstrdup(owner);
    bool ok = info.register_fn && info.register_fn();
    if (!ok)
        sup_error(sup_noloc(), "--load-pass-plugin %s: plugin '%s' failed to register %s", path,
                  info.name ? info.name : "?", info.register_fn ? "(see above)" : "(no register function)");
    loading = NULL;
    return ok;
}
