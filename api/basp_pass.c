/* basp_pass.c — the pass-writer API (basp_pass.h) over the compiler's own
 * registries and IR, the plugin loader, and the library's start.
 *
 * There is one way in for passes and strategies: basp_register_pass and
 * basp_register_strategy, which basp's own strategies (api/strategies/)
 * call at the library's start exactly as a plugin's register function
 * does when the plugin is loaded.  Every strategy row is a basp_strategy,
 * kept here; layout/'s row points at it and asks it through
 * strategy_legal and strategy_candidates.  A plugin's rows carry its path
 * as their owner, so that the verifier's errors after its pass and the
 * planner's rows name it; basp's own carry none ("built in").  The IR
 * calls are thin: a handle is the index the compiler uses itself. */
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
#include "basp_context.h"
#include "strategies/strategies.h"

/* The `legal` call in progress: its choice, the family basp asks about,
 * and whether legal read it (basp_layout_family). */
typedef struct basp_checking {
    const basp_layout_choice *choice;
    const char *family;
    bool asked;
} basp_checking;

/* What this file keeps, in the compilation context (support.h). */
struct basp_registry {
    bool started;                              /* basp's own strategies are registered */
    bool builtin;                              /* registering them now: rows without an owner */
    const char *loading;                       /* the plugin registering now ("plugin NAME (PATH)"), else NULL */
    basp_strategy rows[LAYOUT_MAX_STRATEGIES]; /* every strategy row; layout/'s point at them (user) */
    int nrows;
    void **handles; /* the plugins loaded, open for good: their functions are in the registries */
    int nhandles;
    char reason[224]; /* basp_layout_reason's */
    basp_checking checking;
};

static struct basp_registry *registry(void) {
    sup_context *ctx = sup_ctx();
    if (!ctx->api) ctx->api = sup_xcalloc(1, sizeof *ctx->api);
    return ctx->api;
}

/* Runs a register function with its rows owned by `owner` (NULL: basp's own). */
static bool run_register(const basp_plugin_info *info, const char *owner) {
    struct basp_registry *r = registry();
    const char *outer = r->loading;
    bool outer_builtin = r->builtin;
    r->loading = owner;
    r->builtin = !owner;
    bool ok = info->register_fn && info->register_fn();
    r->loading = outer;
    r->builtin = outer_builtin;
    return ok;
}

sup_context *basp_ctx(void) {
    struct basp_registry *r = registry();
    if (!r->started) {
        r->started = true;
        pass_init();
        /* the families' rows first: every variant builds on one */
        basp_plugin_entry_fn const own[] = {basp_strategies_sequence, basp_strategies_two_level};
        for (size_t i = 0; i < sizeof own / sizeof own[0]; i++) {
            basp_plugin_info info = own[i]();
            if (info.api_version != BASP_PASS_API_VERSION || !run_register(&info, NULL))
                sup_error(sup_noloc(), "basp: its own strategies '%s' failed to register", info.name);
        }
    }
    return sup_ctx();
}

/* ---- registering ---------------------------------------------------------------- */
/* The owner of what registers now: NULL for basp's own, else the plugin
 * being loaded or the embedding program. */
static const char *owner_now(void) {
    const struct basp_registry *r = registry();
    return r->builtin ? NULL : r->loading ? r->loading : "the embedding program";
}

/* Who registers now, for messages. */
static const char *who(void) { return owner_now() ? owner_now() : "built in"; }

bool basp_register_pass(const char *name, const char *summary, basp_pass_fn run) {
    basp_ctx();
    pass_info p = {.name = name, .summary = summary, .run_module = run, .owner = owner_now()};
    char err[256];
    if (!run) {
        sup_error(sup_noloc(), "%s: pass '%s' has no function", who(), name ? name : "");
        return false;
    }
    if (!pass_register(&p, err, sizeof err)) {
        sup_error(sup_noloc(), "%s: %s", who(), err);
        return false;
    }
    return true;
}

static basp_layout_dims to_dims(const layout_dims *d) {
    return (basp_layout_dims){
        .N = d->N, .nodes = d->nodes, .dpn = d->dpn, .B = d->B, .S = d->S, .H = d->H, .Hk = d->Hk};
}

static layout_dims from_dims(const basp_layout_dims *d) {
    return (layout_dims){.N = d->N, .nodes = d->nodes, .dpn = d->dpn, .B = d->B, .S = d->S, .H = d->H, .Hk = d->Hk};
}

/* Asks a row's own `legal` about c, under the hint buffer's rule of
 * basp_pass.h; the verdict goes into layout/'s buffer (the strategy's
 * string may not outlive the next call).  *asked: whether it read the
 * family. */
static const char *ask_legal(const basp_strategy *s, const layout_dims *d, const layout_choice *c, char *fix,
                             size_t nfix, bool *asked) {
    struct basp_registry *r = registry();
    basp_layout_dims pd = to_dims(d);
    basp_layout_choice pc = {.groups = c->groups, .ring_degree = c->ring_degree};
    basp_checking outer = r->checking;
    r->checking = (basp_checking){.choice = &pc, .family = layout_seq_name(c->seq), .asked = false};
    /* zeroed before the call, its last byte NUL after it, so that a fill of
     * all nfix bytes is cut to nfix - 1 instead of read past */
    if (fix && nfix) memset(fix, 0, nfix);
    const char *why = s->legal(&pd, &pc, fix, nfix);
    if (fix && nfix) fix[nfix - 1] = '\0';
    if (asked) *asked = r->checking.asked;
    r->checking = outer;
    if (!why) return NULL;
    char copy[sizeof r->reason]; /* why may be layout/'s own buffer (basp_layout_family_legal) */
    snprintf(copy, sizeof copy, "%s", why);
    return layout_reason(NULL, 0, NULL, "%s", copy);
}

/* The rules of a row, as layout/ asks them: a family's are its own; a
 * variant's are its own, then its family's; a layout of another family is
 * refused, in the variant's words when it names the family itself. */
static const char *strategy_legal(const layout_strategy *self, const layout_dims *d, const layout_choice *c, char *fix,
                                  size_t nfix) {
    const basp_strategy *s = self->user;
    if (self->key && self->seq != c->seq) {
        bool asked = false;
        const char *why = s->legal ? ask_legal(s, d, c, fix, nfix, &asked) : NULL;
        if (why && asked) return why;
        return layout_reason(fix, nfix, NULL, "strategy '%s' builds on sequence %s, not %s", self->name,
                             layout_seq_name(self->seq), layout_seq_name(c->seq));
    }
    const char *why = s->legal ? ask_legal(s, d, c, fix, nfix, NULL) : NULL;
    if (why || !self->key) return why;
    return layout_family_legal(d, c, fix, nfix);
}

/* A row's choices for G groups; a variant without its own: its family's,
 * made the variant's. */
static int strategy_candidates(const layout_strategy *self, const layout_dims *d, int G, layout_choice *out, int max) {
    const basp_strategy *s = self->user;
    if (!s->candidates) {
        const layout_strategy *family = layout_strategies(NULL) + self->seq;
        int n = family->candidates(family, d, G, out, max);
        for (int i = 0; i < n && i < max; i++) out[i].variant = self;
        return n;
    }
    basp_layout_dims pd = to_dims(d);
    basp_layout_choice pc[LAYOUT_MAX_CHOICES];
    int n = s->candidates(&pd, G, pc, LAYOUT_MAX_CHOICES);
    for (int i = 0; i < n && i < max && i < LAYOUT_MAX_CHOICES; i++)
        out[i] = (layout_choice){.seq = self->seq,
                                 .ring_degree = pc[i].ring_degree,
                                 .variant = self->key ? self : NULL,
                                 .groups = pc[i].groups};
    return n < LAYOUT_MAX_CHOICES ? n : LAYOUT_MAX_CHOICES;
}

/* The header's promise: a variant's passes start with its family's pass.
 * That pass partitions the ranks into the G groups (@sp, config sp_size and
 * batch_groups); without it the step trains on one group with the loss
 * scaled for G, under the layout's name.  (Without the family's row,
 * layout_strategy_register refuses the variant.) */
static bool family_pass_first(const basp_strategy *s, layout_seq seq) {
    const layout_strategy *family = layout_strategy_of(&(layout_choice){.seq = seq});
    if (!family) return true;
    const char *want = family->passes; /* "ulysses", "ring" */
    size_t n = strlen(want);
    const char *got = s->passes ? s->passes : "";
    if (!strncmp(got, want, n) && (got[n] == '\0' || got[n] == ',')) return true;
    sup_error(sup_noloc(),
              "%s: strategy '%s': its passes '%s' must start with its family's pass '%s' (family %s): "
              "that pass splits the ranks into the layout's groups, which the strategy's own passes then rewrite",
              who(), s->name ? s->name : "", got, want, s->family);
    return false;
}

bool basp_register_strategy(const basp_strategy *s) {
    basp_ctx();
    struct basp_registry *r = registry();
    layout_seq seq;
    if (!s || !s->family || !layout_seq_parse(s->family, &seq)) {
        sup_error(sup_noloc(), "%s: strategy '%s': family must be ulysses, ring or hybrid, not '%s'", who(),
                  s && s->name ? s->name : "", s && s->family ? s->family : "");
        return false;
    }
    if (!s->key && (!s->legal || !s->candidates)) {
        sup_error(sup_noloc(), "%s: strategy '%s': a family's own row (no key) needs its legal and candidates", who(),
                  s->name ? s->name : "");
        return false;
    }
    if (s->key && !family_pass_first(s, seq)) return false;
    if (r->nrows >= LAYOUT_MAX_STRATEGIES) {
        sup_error(sup_noloc(), "%s: strategy '%s': too many strategies", who(), s->name ? s->name : "");
        return false;
    }
    r->rows[r->nrows] = *s;
    layout_strategy row = {.name = s->name,
                           .seq = seq,
                           .key = s->key,
                           .word = s->word,
                           .title = s->title,
                           .legal = strategy_legal,
                           .candidates = strategy_candidates,
                           .passes = s->passes,
                           .after_zero = s->after_zero,
                           .owner = owner_now(),
                           .user = &r->rows[r->nrows]};
    char err[256];
    if (!layout_strategy_register(&row, err, sizeof err)) {
        sup_error(sup_noloc(), "%s: %s", who(), err);
        return false;
    }
    r->nrows++;
    return true;
}

const char *basp_layout_family_legal(const char *family, const basp_layout_dims *d, const basp_layout_choice *c,
                                     char *fix, size_t nfix) {
    basp_ctx();
    layout_choice lc = {.ring_degree = c->ring_degree, .groups = c->groups};
    if (!layout_seq_parse(family, &lc.seq))
        return layout_reason(fix, nfix, NULL, "no sequence family '%s'", family ? family : "");
    layout_dims ld = from_dims(d);
    return layout_family_legal(&ld, &lc, fix, nfix);
}

const char *basp_layout_reason(char *fix, size_t nfix, const char *hint, const char *fmt, ...) {
    struct basp_registry *r = registry();
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->reason, sizeof r->reason, fmt, ap);
    va_end(ap);
    if (fix && nfix) snprintf(fix, nfix, "%s", hint ? hint : "");
    return r->reason;
}

const char *basp_layout_family(const basp_layout_choice *c) {
    struct basp_registry *r = registry();
    if (!c || c != r->checking.choice) return NULL;
    r->checking.asked = true;
    return r->checking.family;
}

bool basp_layout_heads_uneven(const basp_layout_dims *d, int64_t K) {
    layout_dims ld = from_dims(d);
    return layout_heads_uneven(&ld, K);
}

/* ---- diagnostics ----------------------------------------------------------------- */
void basp_pass_remark(const char *fmt, ...) {
    const pass_options *o = pass_current_options();
    if (o && o->quiet) return;
    va_list ap;
    va_start(ap, fmt);
    sup_vdiag(SUP_REMARK, sup_noloc(), fmt, ap);
    va_end(ap);
}

void basp_pass_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sup_vdiag(SUP_ERROR, sup_noloc(), fmt, ap);
    va_end(ap);
}

/* ---- loading plugins ---------------------------------------------------------------- */
/* A readable regular file that starts with the ELF magic; else an error. */
static bool looks_like_elf(const char *path) {
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
    if (!regular || n != 4 ||
        memcmp(magic,
               "\x7f"
               "ELF",
               4)) {
        sup_error(sup_noloc(), "--load-pass-plugin %s: %s", path,
                  !regular ? "not a regular file" : "not a shared object (no ELF header)");
        return false;
    }
    return true;
}

/* The plugin's entry point; NULL (reported, closed) when it has none. */
static basp_plugin_entry_fn plugin_entry(void *h, const char *path) {
    basp_plugin_entry_fn entry;
    *(void **)&entry = dlsym(h, BASP_PLUGIN_ENTRY);
    if (!entry) {
        sup_error(sup_noloc(),
                  "--load-pass-plugin %s: no entry point '%s': a basp pass plugin exports "
                  "`basp_plugin_info %s(void)` (api/basp_pass.h)",
                  path, BASP_PLUGIN_ENTRY, BASP_PLUGIN_ENTRY);
        dlclose(h);
    }
    return entry;
}

bool basp_load_pass_plugin(const char *path) {
    basp_ctx();
    struct basp_registry *r = registry();
    if (!path || !*path) {
        sup_error(sup_noloc(), "--load-pass-plugin: empty path: pass a plugin's .so file");
        return false;
    }
    if (!looks_like_elf(path)) return false;
    /* a name without a slash would be searched for in the library path */
    char full[4096];
    snprintf(full, sizeof full, "%s%s", strchr(path, '/') ? "" : "./", path);
    void *h = dlopen(full, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        sup_error(sup_noloc(), "--load-pass-plugin %s: %s", path, dlerror());
        return false;
    }
    for (int i = 0; i < r->nhandles; i++)
        if (r->handles[i] == h) {
            dlclose(h); /* loaded before: its passes are registered */
            return true;
        }
    basp_plugin_entry_fn entry = plugin_entry(h, path);
    if (!entry) return false;
    basp_plugin_info info = entry();
    if (info.api_version != BASP_PASS_API_VERSION) {
        sup_error(sup_noloc(),
                  "--load-pass-plugin %s: plugin '%s' was built against basp pass API version %d; "
                  "this compiler has version %d: rebuild it against this basp's headers",
                  path, info.name ? info.name : "?", info.api_version, BASP_PASS_API_VERSION);
        dlclose(h);
        return false;
    }
    /* kept open for good: its functions are in the registry now */
    r->handles = sup_xrealloc(r->handles, sizeof *r->handles * (size_t)(r->nhandles + 1));
    r->handles[r->nhandles++] = h;
    /* the rows it registers name it for good (the registry is never emptied) */
    char owner[1024];
    snprintf(owner, sizeof owner, "plugin %s (%s)", info.name ? info.name : "?", path);
    bool ok = run_register(&info, sup_xstrdup(owner));
    if (!ok)
        sup_error(sup_noloc(), "--load-pass-plugin %s: plugin '%s' failed to register %s", path,
                  info.name ? info.name : "?", info.register_fn ? "(see above)" : "(no register function)");
    return ok;
}
