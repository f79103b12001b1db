/* support.c — source registry, located diagnostics with carets, utilities. */
#define _DEFAULT_SOURCE /* mkstemps */
#include "support.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

/* Specs, IR files and configs are small; anything bigger is a mistake (or
 * /dev/zero), and reading it whole would exhaust memory. */
enum { SUP_MAX_FILE = 64 << 20 };

/* ---- source registry ------------------------------------------------------ */
typedef struct sup_source {
    char *name;
    char *text;
    size_t len;
    struct sup_source *next;
} sup_source;

/* The one context of the process (support.h): the context-free public API
 * and sup_error's callers in every folder reach it through sup_ctx. */
static sup_context context;

sup_context *sup_ctx(void) {
    if (!context.ready) {
        context.ready = true;
        context.target = SUP_TARGET_CPU;
        context.memory_plan = true;
        context.verbosity = 1;
        context.diag.max_errors = 20;
    }
    return &context;
}

const char *sup_source_add(const char *name, const char *text, size_t len) {
    sup_context *ctx = sup_ctx();
    for (sup_source *s = ctx->sources; s; s = s->next)
        if (strcmp(s->name, name) == 0) return s->name;
    sup_source *s = sup_xcalloc(1, sizeof *s);
    s->name = sup_xstrdup(name);
    s->text = sup_xmalloc(len + 1);
    memcpy(s->text, text, len);
    s->text[len] = '\0';
    s->len = len;
    s->next = ctx->sources;
    ctx->sources = s;
    return s->name;
}

static const sup_source *source_find(const char *name) {
    for (sup_source *s = sup_ctx()->sources; s; s = s->next)
        if (s->name == name || strcmp(s->name, name) == 0) return s;
    return NULL;
}

const char *sup_source_text(const char *name) {
    const sup_source *s = name ? source_find(name) : NULL;
    return s ? s->text : NULL;
}

void sup_source_reset(void) {
    sup_context *ctx = sup_ctx();
    while (ctx->sources) {
        sup_source *n = ctx->sources->next;
        free(ctx->sources->name);
        free(ctx->sources->text);
        free(ctx->sources);
        ctx->sources = n;
    }
}

const char *sup_read_why(int e) {
    const char *why = sup_ctx()->read_why;
    return why[0] ? why : strerror(e);
}

/* Opens path for reading: O_NONBLOCK, so that a FIFO without a writer is
 * refused here instead of blocking open() for ever; only a regular file
 * goes on (blocking again). */
static FILE *open_regular(const char *path) {
    int fd = open(path, O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) return NULL;
    struct stat st = {0};
    int fl;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || (fl = fcntl(fd, F_GETFL)) < 0 ||
        fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
        int e = errno;
        close(fd);
        mode_t m = st.st_mode;
        char *why = sup_ctx()->read_why;
        size_t n = sizeof sup_ctx()->read_why;
        if (S_ISDIR(m))
            snprintf(why, n, "is a directory");
        else if (S_ISFIFO(m))
            snprintf(why, n, "a FIFO (named pipe), not a regular file");
        else if (S_ISCHR(m) || S_ISBLK(m))
            snprintf(why, n, "a device, not a regular file");
        else if (S_ISSOCK(m))
            snprintf(why, n, "a socket, not a regular file");
        errno = S_ISDIR(m) ? EISDIR : e ? e : EINVAL;
        return NULL;
    }
    FILE *f = fdopen(fd, "rb");
    if (!f) close(fd);
    return f;
}

/* Length of the UTF-8 sequence at p (of n bytes), 0 when it is not one:
 * overlong forms, surrogates and code points past U+10FFFF are refused. */
static size_t utf8_len(const unsigned char *p, size_t n) {
    unsigned c = p[0];
    size_t k = c >= 0xf0 && c <= 0xf4 ? 4 : c >= 0xe0 ? 3 : c >= 0xc2 && c < 0xe0 ? 2 : 0;
    if (c >= 0xf5 || k == 0 || k > n) return 0;
    for (size_t i = 1; i < k; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    if ((c == 0xe0 && p[1] < 0xa0) || (c == 0xed && p[1] >= 0xa0) || (c == 0xf0 && p[1] < 0x90) ||
        (c == 0xf4 && p[1] >= 0x90))
        return 0;
    return k;
}

bool sup_is_text(const char *text, size_t len, size_t *bad) {
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < len;) {
        unsigned c = p[i];
        size_t k = c < 0x80 ? ((c >= 0x20 && c != 0x7f) || (c >= '\t' && c <= '\r') ? 1 : 0) : utf8_len(p + i, len - i);
        if (!k) {
            if (bad) *bad = i;
            return false;
        }
        i += k;
    }
    return true;
}

/* Every file read here is shown back in diagnostics (the caret lines, the
 * names a message quotes), so a file that is not text (a binary, or
 * /proc/self/environ with its NUL-separated variables) is refused whole:
 * its bytes are never printed, only where the first bad one is. */
static bool refuse_binary(const char *buf, size_t len) {
    size_t bad;
    if (sup_is_text(buf, len, &bad)) return true;
    int line = 1, col = 1;
    for (size_t i = 0; i < bad; i++, col++)
        if (buf[i] == '\n') line++, col = 0;
    snprintf(sup_ctx()->read_why, sizeof sup_ctx()->read_why,
             "not a text file (byte 0x%02x at line %d, column %d is not UTF-8 text)", (unsigned char)buf[bad], line,
             col);
    return false;
}

char *sup_read_file(const char *path, size_t *len_out) {
    sup_ctx()->read_why[0] = 0;
    FILE *f = strcmp(path, "-") == 0 ? stdin : open_regular(path);
    if (!f) return NULL;
    size_t cap = 4096, len = 0;
    char *buf = sup_xmalloc(cap);
    for (;;) {
        if (len + 1 >= cap) buf = sup_xrealloc(buf, cap *= 2);
        size_t n = fread(buf + len, 1, cap - len - 1, f);
        len += n;
        if (n == 0) break;
        if (len > SUP_MAX_FILE) {
            if (f != stdin) fclose(f);
            free(buf);
            errno = EFBIG;
            return NULL;
        }
    }
    int err = ferror(f);
    if (f != stdin) fclose(f);
    if (err) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    buf[len] = '\0';
    if (!refuse_binary(buf, len)) {
        free(buf);
        errno = EILSEQ;
        return NULL;
    }
    if (len_out) *len_out = len;
    return buf;
}

/* ---- diagnostics ---------------------------------------------------------- */
void sup_diag_set_sink(FILE *sink) { sup_ctx()->diag.sink = sink; }
void sup_diag_set_quiet(bool q) { sup_ctx()->diag.quiet = q; }
void sup_diag_set_max_errors(int n) { sup_ctx()->diag.max_errors = n; }
int sup_error_count(void) { return sup_ctx()->diag.errors; }
void sup_diag_reset(void) {
    struct sup_diag_state *d = &sup_ctx()->diag;
    d->errors = 0;
    d->dropping = false;
}

sup_diag_saved sup_diag_silence(void) {
    struct sup_diag_state *d = &sup_ctx()->diag;
    sup_diag_saved saved = {d->silent, d->errors, d->dropping};
    d->silent++;
    return saved;
}

void sup_diag_restore(sup_diag_saved saved) {
    struct sup_diag_state *d = &sup_ctx()->diag;
    d->silent = saved.silent;
    d->errors = saved.errors;
    d->dropping = saved.dropping;
}

static const char *sev_name(sup_severity sev) {
    switch (sev) {
    case SUP_ERROR: return "error";
    case SUP_WARNING: return "warning";
    case SUP_NOTE: return "note";
    case SUP_REMARK: return "remark";
    }
    return "error";
}

/* Prints the source line of `loc` and a caret with ~ under the token.  Tabs
 * are kept in the caret line so the caret stays aligned with the text. */
static void print_caret(FILE *out, sup_loc loc) {
    const sup_source *s = source_find(loc.file);
    if (!s || loc.line < 1) return;
    const char *p = s->text, *end = s->text + s->len;
    for (int l = 1; l < loc.line && p < end; p++)
        if (*p == '\n') l++;
    if (p >= end && loc.line > 1) return;
    const char *eol = p;
    while (eol < end && *eol != '\n') eol++;
    int width = (int)(eol - p);
    if (width > 300) width = 300; /* keep absurd lines readable */
    fprintf(out, "  ");
    /* Control bytes (a NUL, an escape sequence in a corrupt file) would garble
     * the terminal; one '?' each keeps the caret aligned. */
    for (int i = 0; i < width; i++) {
        unsigned char c = (unsigned char)p[i];
        fputc(c == '\t' || (c >= 0x20 && c != 0x7f) ? c : '?', out);
    }
    fprintf(out, "\n  ");
    int col = loc.col < 1 ? 1 : loc.col;
    for (int i = 0; i < col - 1 && i < width; i++) fputc(p[i] == '\t' ? '\t' : ' ', out);
    fputc('^', out);
    for (int i = 1; i < loc.len && col - 1 + i < width; i++) fputc('~', out);
    fputc('\n', out);
}

void sup_vdiag(sup_severity sev, sup_loc loc, const char *fmt, va_list ap) {
    struct sup_diag_state *d = &sup_ctx()->diag;
    FILE *out = d->sink ? d->sink : stderr;
    if (d->silent) { /* counted, so that code comparing counts still works; restore resets */
        if (sev == SUP_ERROR) d->errors++;
        return;
    }
    if (sev == SUP_ERROR) {
        d->errors++;
        d->dropping = d->max_errors > 0 && d->errors > d->max_errors;
        if (d->dropping) {
            if (d->errors == d->max_errors + 1) fprintf(out, "error: too many errors emitted, stopping now\n");
            return;
        }
    } else if (d->quiet || (sev == SUP_NOTE && d->dropping)) {
        return;
    }
    if (loc.file && loc.line > 0)
        fprintf(out, "%s:%d:%d: ", loc.file, loc.line, loc.col < 1 ? 1 : loc.col);
    else if (loc.file)
        fprintf(out, "%s: ", loc.file);
    fprintf(out, "%s: ", sev_name(sev));
    vfprintf(out, fmt, ap);
    fputc('\n', out);
    if (loc.file) print_caret(out, loc);
    fflush(out);
}

void sup_diag(sup_severity sev, sup_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sup_vdiag(sev, loc, fmt, ap);
    va_end(ap);
}

/* ---- outputs against inputs ---------------------------------------------- */
/* The directory holding `path` (it need not exist) and its last name. */
static bool parent_of(const char *path, struct stat *dir, const char **base) {
    const char *slash = strrchr(path, '/');
    *base = slash ? slash + 1 : path;
    size_t n = slash ? (slash == path ? 1 : (size_t)(slash - path)) : 1;
    char *d = sup_xmalloc(n + 1);
    memcpy(d, slash ? path : ".", n);
    d[n] = '\0';
    bool ok = stat(d, dir) == 0;
    free(d);
    return ok;
}

bool sup_same_file(const char *a, const char *b) {
    struct stat sa, sb, pa, pb;
    bool ea = stat(a, &sa) == 0, eb = stat(b, &sb) == 0;
    /* When only one exists they cannot be one: the other's name would
     * resolve to it. */
    if (ea || eb) return ea && eb && sa.st_dev == sb.st_dev && sa.st_ino == sb.st_ino;
    const char *na, *nb;
    return parent_of(a, &pa, &na) && parent_of(b, &pb, &nb) && pa.st_dev == pb.st_dev && pa.st_ino == pb.st_ino &&
           !strcmp(na, nb);
}

static void io_add(sup_iofile **v, int *n, int *cap, const char *what, const char *path) {
    SUP_GROW(*v, *n, *cap);
    (*v)[(*n)++] = (sup_iofile){sup_xstrdup(what), sup_xstrdup(path)};
}

static bool io_clash(sup_io *io, const sup_iofile *w, const sup_iofile *r, bool both_out) {
    sup_error(sup_noloc(), "%s %s is the file of %s %s: %s; pass another path (nothing was written)", w->what, w->path,
              r->what, r->path,
              both_out ? "one output would overwrite the other" : "writing it would destroy the input");
    io->clashed = true;
    return false;
}

bool sup_io_output(sup_io *io, const char *what, const char *path) {
    if (!path) return true;
    sup_iofile w = {(char *)what, (char *)path};
    for (int i = 0; i < io->nin; i++)
        if (sup_same_file(path, io->in[i].path)) return io_clash(io, &w, &io->in[i], false);
    for (int i = 0; i < io->nout; i++)
        if (sup_same_file(path, io->out[i].path)) return io_clash(io, &w, &io->out[i], true);
    io_add(&io->out, &io->nout, &io->capout, what, path);
    return true;
}

bool sup_io_input(sup_io *io, const char *what, const char *path) {
    if (!path || !strcmp(path, "-")) return true;
    for (int i = 0; i < io->nin; i++)
        if (!strcmp(io->in[i].path, path)) return true; /* an import read twice */
    sup_iofile r = {(char *)what, (char *)path};
    for (int i = 0; i < io->nout; i++)
        if (sup_same_file(io->out[i].path, path)) {
            io_add(&io->in, &io->nin, &io->capin, what, path);
            return io_clash(io, &io->out[i], &r, false);
        }
    io_add(&io->in, &io->nin, &io->capin, what, path);
    return true;
}

bool sup_io_recheck(sup_io *io) {
    if (io->clashed) return false; /* reported when found */
    for (int i = 0; i < io->nout; i++)
        for (int j = 0; j < io->nin; j++)
            if (sup_same_file(io->out[i].path, io->in[j].path)) return io_clash(io, &io->out[i], &io->in[j], false);
    return !io->clashed;
}

void sup_io_free(sup_io *io) {
    for (int i = 0; i < io->nin; i++) free(io->in[i].what), free(io->in[i].path);
    for (int i = 0; i < io->nout; i++) free(io->out[i].what), free(io->out[i].path);
    free(io->in);
    free(io->out);
    *io = (sup_io){0};
}

/* ---- utilities ------------------------------------------------------------ */
int sup_edit_distance(const char *a, const char *b) {
    size_t la = strlen(a), lb = strlen(b);
    if (la > 64 || lb > 64) return 1000; /* names are short; avoid big tables */
    int row[65];
    for (size_t j = 0; j <= lb; j++) row[j] = (int)j;
    for (size_t i = 1; i <= la; i++) {
        int diag = row[0];
        row[0] = (int)i;
        for (size_t j = 1; j <= lb; j++) {
            int up = row[j];
            int cost = a[i - 1] == b[j - 1] ? 0 : 1;
            int best = diag + cost;
            if (row[j] + 1 < best) best = row[j] + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[lb];
}

const char *sup_closest(const char *word, const char *const *cands, int n) {
    int limit = (int)strlen(word) / 3;
    if (limit < 2) limit = 2;
    const char *best = NULL;
    int best_d = limit + 1;
    for (int i = 0; i < n; i++) {
        int d = sup_edit_distance(word, cands[i]);
        if (d < best_d) {
            best_d = d;
            best = cands[i];
        }
    }
    return best;
}

static void oom(const char *file, int line) {
    fprintf(stderr, "%s:%d: fatal: out of memory\n", file, line);
    abort();
}

void *sup_xmalloc_at(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) oom(file, line);
    return p;
}

void *sup_xcalloc_at(size_t n, size_t sz, const char *file, int line) {
    void *p = calloc(n ? n : 1, sz ? sz : 1);
    if (!p) oom(file, line);
    return p;
}

void *sup_xrealloc_at(void *p, size_t n, const char *file, int line) {
    void *q = realloc(p, n ? n : 1);
    if (!q) oom(file, line);
    return q;
}

char *sup_xstrdup_at(const char *s, const char *file, int line) {
    size_t n = strlen(s) + 1;
    char *p = sup_xmalloc_at(n, file, line);
    memcpy(p, s, n);
    return p;
}

static void buf_vprintf(sup_buf *b, const char *fmt, va_list ap) {
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0) return;
    if (b->len + (size_t)n + 1 > b->cap) {
        b->cap = (b->len + (size_t)n + 1) * 2;
        b->data = sup_xrealloc(b->data, b->cap);
    }
    vsnprintf(b->data + b->len, b->cap - b->len, fmt, ap);
    b->len += (size_t)n;
}

void sup_buf_printf(sup_buf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    buf_vprintf(b, fmt, ap);
    va_end(ap);
}

void sup_buf_puts(sup_buf *b, const char *s) { sup_buf_printf(b, "%s", s); }

void sup_buf_free(sup_buf *b) {
    free(b->data);
    *b = (sup_buf){0};
}

const char *sup_fmt_bytes(double bytes, char *buf, size_t n) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;
    double v = bytes;
    while ((v >= 1024.0 || v <= -1024.0) && u < 5) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, n, "%.0f B", v);
    else
        snprintf(buf, n, "%.1f %s", v, units[u]);
    return buf;
}

const char *sup_fmt_double(double v, char *buf, size_t n) {
    /* The shortest %.Ng that reads back as the same double. */
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, v);
        if (strtod(buf, NULL) == v) return buf;
    }
    snprintf(buf, n, "%.17g", v);
    return buf;
}

/* ---- outputs written whole or not at all -------------------------------- */
int sup_out_open(sup_outfile *o, const char *path, const char *prog) {
    o->path = path;
    o->prog = prog;
    o->tmp = NULL;
    struct stat st;
    if (stat(path, &st) == 0 && !S_ISREG(st.st_mode)) {
        if (!(o->f = fopen(path, "w"))) {
            fprintf(stderr, "%s: error: cannot write %s: %s\n", prog, path, strerror(errno));
            return 0;
        }
        return 1;
    }
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dn = (size_t)(base - path), n = strlen(path) + strlen(prog) + 16;
    o->tmp = sup_xmalloc(n);
    snprintf(o->tmp, n, "%.*s.%s-XXXXXX-%s", (int)dn, path, prog, base);
    int fd = mkstemps(o->tmp, (int)strlen(base) + 1);
    if (fd < 0) {
        fprintf(stderr, "%s: error: cannot create a temporary file next to %s: %s\n", prog, path, strerror(errno));
        free(o->tmp);
        o->tmp = NULL;
        return 0;
    }
    /* mkstemps creates 0600; the output gets what fopen would have given. */
    mode_t mask = umask(0);
    umask(mask);
    fchmod(fd, 0666 & ~mask);
    if (!(o->f = fdopen(fd, "w"))) {
        fprintf(stderr, "%s: error: cannot write %s: %s\n", prog, o->tmp, strerror(errno));
        close(fd);
        remove(o->tmp);
        free(o->tmp);
        o->tmp = NULL;
        return 0;
    }
    return 1;
}

int sup_out_close(sup_outfile *o, int keep) {
    int ok = fclose(o->f) == 0;
    if (!ok) fprintf(stderr, "%s: error: cannot write %s: %s\n", o->prog, o->path, strerror(errno));
    if (o->tmp) {
        if (keep && ok && rename(o->tmp, o->path) != 0) {
            fprintf(stderr, "%s: error: cannot rename %s to %s: %s\n", o->prog, o->tmp, o->path, strerror(errno));
            ok = 0;
        }
        if (!keep || !ok) remove(o->tmp);
        free(o->tmp);
        o->tmp = NULL;
    }
    return ok;
}

bool sup_context_set_target(sup_context *ctx, const char *name) {
    if (!strcmp(name, "cpu"))
        ctx->target = SUP_TARGET_CPU;
    else if (!strcmp(name, "cuda"))
        ctx->target = SUP_TARGET_CUDA;
    else
        return false;
    ctx->target_explicit = true;
    return true;
}
