/* support.h — diagnostics, source buffers and small utilities shared by every
 * stage of the basp compiler.  This is the only header of support/.
 *
 * Diagnostics look like a compiler's:
 *     file:line:col: error: message
 *       source line
 *           ^~~~~
 *     file:line:col: note: how to fix it
 * Source text is registered once (sup_source_add) so that any stage holding a
 * sup_loc can print the line and caret, even after parsing has finished. */
#ifndef BASP_SUPPORT_H
#define BASP_SUPPORT_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* A location in a registered source; file == NULL means "no location". */
typedef struct sup_loc {
    const char *file; /* points into the source registry, lives as long as it */
    int line;         /* 1-based */
    int col;          /* 1-based, in bytes */
    int len;          /* length of the token for the ~~~ underline, >= 1 */
} sup_loc;

typedef enum { SUP_ERROR, SUP_WARNING, SUP_NOTE, SUP_REMARK } sup_severity;

/* ---- source registry ---------------------------------------------------- */
/* Registers a copy of `text` under `name` and returns the stable name pointer
 * to use in sup_loc.file.  Registering the same name twice replaces nothing:
 * it returns the first copy. */
const char *sup_source_add(const char *name, const char *text, size_t len);
/* Returns the registered text of `name`, or NULL. */
const char *sup_source_text(const char *name);
/* Reads a whole regular file (at most 64 MiB; "-" = stdin) into a malloc'd
 * NUL-terminated buffer; NULL + errno (EISDIR for non-regular, EFBIG). */
char *sup_read_file(const char *path, size_t *len_out);
/* Why the last sup_read_file failed, given its errno e: strerror(e), or
 * what kind of file it was ("a FIFO (named pipe), not a regular file"), in
 * the context's buffer until the next sup_read_file. */
const char *sup_read_why(int e);
/* True when text[0..len) is UTF-8 text: no NUL or other control byte but
 * tab, newline, \v, \f and \r, no malformed sequence.  Otherwise *bad (when
 * not NULL) is the offset of the first byte that is not.  sup_read_file
 * refuses files that are not (errno EILSEQ; sup_read_why says where). */
bool sup_is_text(const char *text, size_t len, size_t *bad);
/* Frees every registered source (tests and fuzzers call this between runs).
 * The registry is the context's (sup_ctx). */
void sup_source_reset(void);

/* ---- diagnostics -------------------------------------------------------- */
/* Every diagnostic goes to the context's sink (stderr by default).  Errors
 * are counted so that a driver can exit non-zero. */
void sup_diag(sup_severity sev, sup_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
void sup_vdiag(sup_severity sev, sup_loc loc, const char *fmt, va_list ap);
#define sup_error(loc, ...)   sup_diag(SUP_ERROR, (loc), __VA_ARGS__)
#define sup_warning(loc, ...) sup_diag(SUP_WARNING, (loc), __VA_ARGS__)
#define sup_note(loc, ...)    sup_diag(SUP_NOTE, (loc), __VA_ARGS__)
#define sup_remark(loc, ...)  sup_diag(SUP_REMARK, (loc), __VA_ARGS__)

int sup_error_count(void);
void sup_diag_reset(void);           /* error count back to 0 */
void sup_diag_set_sink(FILE *sink);  /* NULL = stderr */
void sup_diag_set_quiet(bool quiet); /* drop everything but errors */
/* Stop after this many errors (0 = unlimited, default 20). */
void sup_diag_set_max_errors(int n);
/* Silences every diagnostic (errors included) until sup_diag_restore, which
 * also puts the error count back: for trial work, such as a planner checking
 * candidate layouts that may be illegal, whose failures are results rather
 * than the user's errors.  Nests. */
typedef struct sup_diag_saved {
    int silent, errors;
    bool dropping;
} sup_diag_saved;
sup_diag_saved sup_diag_silence(void);
void sup_diag_restore(sup_diag_saved saved);
static inline sup_loc sup_noloc(void) { return (sup_loc){0}; }

/* ---- outputs against inputs -------------------------------------------- */
/* Two paths name one file: both exist with one device and inode (hard and
 * symbolic links included), or neither exists and their parent directories
 * resolve to one device and inode and the last names agree.  The training
 * binary's rule (runtime/core/rt_paths.c), for the compiler's tools. */
bool sup_same_file(const char *a, const char *b);

/* What a tool reads and writes, each path with what names it ("-o",
 * "--load-pass-plugin", "the spec", "import").  Adding an output that is an
 * input or another output, or an input that is an output, is an error
 * (reported, naming both) and returns false; io.clashed stays set. */
typedef struct sup_iofile {
    char *what, *path;
} sup_iofile;
typedef struct sup_io {
    sup_iofile *in, *out;
    int nin, nout, capin, capout;
    bool clashed;
} sup_io;
bool sup_io_output(sup_io *io, const char *what, const char *path); /* path NULL: nothing */
bool sup_io_input(sup_io *io, const char *what, const char *path);  /* NULL or "-": nothing */
/* Every output against every input again (a file may have appeared since it
 * was added); false when any clash was found, now or before. */
bool sup_io_recheck(sup_io *io);
void sup_io_free(sup_io *io);

/* ---- outputs written whole or not at all -------------------------------- */
/* An output file (-o, --trace ...) is written to a temporary file next to
 * its name (PATH's directory, ".PROG-XXXXXX-NAME", created by mkstemps so
 * never an existing file) and renamed over it by sup_out_close: a failed
 * run never truncates or deletes a file it did not create.  A path that
 * exists and is not a regular file (a device, a FIFO) is written directly
 * and never removed.  Both report their errors as "PROG: error: ...". */
typedef struct sup_outfile {
    const char *path, *prog;
    char *tmp; /* NULL: written directly */
    FILE *f;
} sup_outfile;
int sup_out_open(sup_outfile *o, const char *path, const char *prog); /* 0 on failure (reported) */
/* Closes it; keep: rename over its name, else remove the temporary only.
 * 0 when the write or the rename failed (reported). */
int sup_out_close(sup_outfile *o, int keep);

/* ---- utilities ---------------------------------------------------------- */
/* Levenshtein distance, for "did you mean". */
int sup_edit_distance(const char *a, const char *b);
/* Closest candidate within distance max(2, strlen(word)/3), else NULL. */
const char *sup_closest(const char *word, const char *const *cands, int n);

/* malloc/realloc/strdup that abort with file:line on out-of-memory. */
void *sup_xmalloc_at(size_t n, const char *file, int line);
void *sup_xcalloc_at(size_t n, size_t sz, const char *file, int line);
void *sup_xrealloc_at(void *p, size_t n, const char *file, int line);
char *sup_xstrdup_at(const char *s, const char *file, int line);
#define sup_xmalloc(n)     sup_xmalloc_at((n), __FILE__, __LINE__)
#define sup_xcalloc(n, s)  sup_xcalloc_at((n), (s), __FILE__, __LINE__)
#define sup_xrealloc(p, n) sup_xrealloc_at((p), (n), __FILE__, __LINE__)
#define sup_xstrdup(s)     sup_xstrdup_at((s), __FILE__, __LINE__)

/* Grows a dynamic array (*items, *cap) so that index `need-1` is valid. */
#define SUP_GROW(items, count, cap)                                                                                    \
    do {                                                                                                               \
        if ((count) >= (cap)) {                                                                                        \
            (cap) = (cap) ? 2 * (cap) : 16;                                                                            \
            (items) = sup_xrealloc((items), (size_t)(cap) * sizeof *(items));                                          \
        }                                                                                                              \
    } while (0)

/* A growable string buffer for printers. */
typedef struct sup_buf {
    char *data;
    size_t len, cap;
} sup_buf;
void sup_buf_printf(sup_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void sup_buf_puts(sup_buf *b, const char *s);
void sup_buf_free(sup_buf *b);

/* Formats a byte count as "12.0 MiB" into buf (>= 16 bytes). */
const char *sup_fmt_bytes(double bytes, char *buf, size_t n);
/* Shortest text that reads back as exactly the same double ("%.17g" trimmed). */
const char *sup_fmt_double(double v, char *buf, size_t n);

/* ---- the compilation context ----------------------------------------------
 * Everything one compilation keeps between calls: its settings, the
 * diagnostics state, the registered sources, and the registries of the
 * folders above (passes, strategies, plugins), as MLIR keeps its dialects
 * and diagnostics in an MLIRContext.  It lives here, the lowest folder,
 * because every folder reaches it: each upper folder's part is a struct of
 * its own, declared here by name only and created by that folder on first
 * use, so support/ knows none of their types.
 *
 * There is one context per process (sup_ctx): the public API (api/basp.h,
 * api/basp_pass.h) and sup_error and its kin take no context argument, so
 * they reach it there (docs/ARCHITECTURE.md, Invariants). */
typedef enum { SUP_TARGET_CPU, SUP_TARGET_CUDA } sup_target;
/* Called with every file the frontend reads (basp_set_input_hook). */
typedef void (*sup_input_fn)(const char *path, void *ud);

struct sup_source;      /* support.c: one registered source */
struct layout_registry; /* layout/layout.c: the strategy rows */
struct pass_registry;   /* passes/registry.c: the pass rows, the pass running now */
struct basp_registry;   /* api/basp_pass.c: plugin rows and handles, the registration in progress */

typedef struct sup_context {
    bool ready; /* the defaults below are set (sup_ctx) */
    /* settings, made through the public API */
    sup_target target;       /* the backend programs are generated and linked for */
    bool target_explicit;    /* chosen (--target): memory plans follow it, else the spec */
    bool memory_plan;        /* false: no plan in programs, no reuse in memory reports */
    int verbosity;           /* cg_build's stderr: 0 errors only, 1 progress, 2 commands */
    sup_input_fn input_hook; /* NULL: none */
    void *input_ud;
    /* diagnostics (sup_diag) */
    struct sup_diag_state {
        FILE *sink;     /* NULL: stderr */
        int errors;     /* errors reported so far */
        bool quiet;     /* drop everything but errors */
        int max_errors; /* stop printing after this many (0: no limit) */
        bool dropping;  /* past the limit: notes of dropped errors go too */
        int silent;     /* > 0: inside sup_diag_silence */
    } diag;
    struct sup_source *sources; /* sup_source_add's */
    char read_why[160];         /* why the last sup_read_file failed, when errno cannot say */
    /* the registries of the folders above: NULL until first used */
    struct ir_context *ir; /* ir/: interned attribute texts, recent memory plans */
    struct layout_registry *layouts;
    struct pass_registry *passes;
    struct basp_registry *api;
} sup_context;
/* The process's context, set to the defaults on first use: CPU (not
 * explicit), memory plan on, verbosity 1, stderr, at most 20 errors. */
sup_context *sup_ctx(void);
/* Sets ctx->target from "cpu" or "cuda"; false (unchanged) for anything else. */
bool sup_context_set_target(sup_context *ctx, const char *name);

#endif
