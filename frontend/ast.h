/* ast.h — private to frontend/: the values the lexer produces, the parse
 * context shared by lexer, parser and builder, and the key tables.
 *
 * There is no separate syntax tree: the parser's actions hand every entry
 * straight to the builder (build.c), which type-checks the value against the
 * key table and stores it in the fe_spec together with its location.  The
 * spec plus its location table *is* the tree; fe_check (sema.c) then works on
 * it.  Overrides (override.c) and the Hugging Face importer (hfjson.c) feed
 * the same builder entry points, so a value means the same thing whichever
 * way it arrived. */
#ifndef BASP_FE_AST_H
#define BASP_FE_AST_H

#include <stddef.h>

#include "frontend.h"

/* What kind of quantity a number's unit suffix makes it. */
typedef enum {
    FE_U_NONE,  /* plain number */
    FE_U_COUNT, /* K M G: binary multiples, 16K = 16384 */
    FE_U_BYTES, /* B KB MB GB TB (decimal), KiB MiB GiB TiB (binary) */
    FE_U_BW,    /* bytes per second: B/s .. TB/s, or bits: Kb/s .. Tb/s */
    FE_U_TIME,  /* seconds: s ms us ns */
} fe_unit_class;

typedef enum {
    FE_V_BAD,    /* already diagnosed by the lexer; stay quiet about it */
    FE_V_NUM,    /* number, maybe with a unit */
    FE_V_IDENT,  /* bare word */
    FE_V_STR,    /* "string" */
    FE_V_BOOL,   /* true | false */
    FE_V_GROUPS, /* groups N (batch_aware only) */
} fe_value_kind;

typedef struct fe_value {
    fe_value_kind kind;
    double num;   /* FE_V_NUM: value in base units (bytes, B/s, s) */
    int64_t inum; /* FE_V_NUM / FE_V_GROUPS: exact integer value */
    bool is_int;  /* inum is exact (integer mantissa, no overflow) */
    fe_unit_class unit;
    char unit_text[8]; /* the suffix as written, for messages */
    bool flag;         /* FE_V_BOOL */
    char *str;         /* FE_V_IDENT / FE_V_STR, malloc'd */
    sup_loc loc;       /* the whole value (for `groups N`: both tokens) */
} fe_value;

/* What a key accepts. */
typedef enum {
    FE_K_COUNT,     /* integer, K/M/G allowed */
    FE_K_FLOAT,     /* plain number */
    FE_K_BOOL,      /* true | false */
    FE_K_NAME,      /* identifier, stored into a char[] */
    FE_K_BYTES,     /* memory size */
    FE_K_BW,        /* bandwidth */
    FE_K_TIME,      /* duration */
    FE_K_BATCH,     /* auto | on | off | groups N | N */
    FE_K_LINK,      /* link intra|inter KIND (mesh only, special syntax) */
    FE_K_PLACEMENT, /* a name, or a "string" listing every rank's node */
    FE_K_CHUNKS,    /* a whole number from 1 to FE_MAX_ATTENTION_CHUNKS, or auto (FE_CHUNKS_AUTO) */
    FE_K_LIST,      /* a whole number or a "string" of them, stored as text into a char[] */
} fe_key_kind;

typedef struct fe_keydef {
    const char *name;
    fe_key_kind kind;
    size_t off;          /* offset of the field inside fe_spec */
    size_t size;         /* FE_K_NAME: size of the char[]; FE_K_COUNT: 4 or 8 */
    const char *example; /* a value that reads well in a "write it like" note */
} fe_keydef;

typedef enum { FE_B_MODEL, FE_B_MESH, FE_B_TRAIN, FE_B_LAYOUT, FE_B_LINK, FE_B_UNKNOWN } fe_block_kind;

extern const char *const fe_block_names[]; /* "model", "mesh", "train", "layout", "link" */
/* Keys of one block kind (FE_B_LINK: bandwidth, latency, efficiency). */
const fe_keydef *fe_block_keys(fe_block_kind b, int *n);
const fe_keydef *fe_key_find(fe_block_kind b, const char *name);
/* "did you mean" over the keys of a block, or NULL. */
const char *fe_key_closest(fe_block_kind b, const char *name);

/* Parsing stops after this many errors (the support library's default
 * limit is 20; one more lets its "too many errors" line appear). */
enum { FE_MAX_ERRORS = 21 };

enum { FE_LINK_BAD = 4 }; /* a diagnosed link: swallow its attributes */
/* The links of a mesh block: fe_link_names[w] for w = 1 (intra), 2 (inter),
 * 3 (host); fe_mesh_link(spec, w) is the spec's link. */
extern const char *const fe_link_names[4];
fe_link *fe_mesh_link(fe_spec *spec, int w);

/* One file being parsed.  Imports nest: `parent` is the importing file, so
 * the chain is the import stack used for cycle detection. */
typedef struct fe_pctx {
    fe_spec *spec;
    const char *file; /* registered name */
    char *real;       /* realpath, for cycle detection (NULL for strings) */
    struct fe_pctx *parent;
    int depth;
    int nerrors;
    /* lexer position */
    int line, col;
    sup_loc brace; /* last unmatched '{', for the end-of-file note */
    int brace_depth;
    /* builder state */
    fe_block_kind block;
    sup_loc block_loc;
    char block_prefix[16]; /* "model", "mesh" ... for location keys */
    bool skip_block;       /* unknown block or syntax error: ignore entries */
    int body_start;        /* first loc index of this block's body (duplicates) */
    int link;              /* 0 none, 1 intra, 2 inter, 3 host, FE_LINK_BAD: where link attrs go */
    bool bad_string;       /* the last string was unterminated: do not open it */
    bool is_override;      /* entries replace locations instead of duplicating */
    /* `model from "x.json" { ... }`: required json fields that were missing,
     * reported at the end of the block unless the body supplied them. */
    unsigned hf_missing;
    sup_loc hf_loc;
    char *hf_path;
    /* Root context only: realpaths of the files imported so far.  Each file
     * is parsed once per spec; a second import of it does nothing (like
     * `#pragma once`), so an import DAG costs one parse per file. */
    char **imported;
    int nimported, capimported;
} fe_pctx;

/* ---- lexer (lexer.l) ---------------------------------------------------- */
/* Runs the lexer+parser over `text` (len bytes, NULs allowed). */
int fe_run_parser(fe_pctx *ctx, const char *text, size_t len);
/* Lexes one override value (`groups 2`, `300GB/s` ...) starting at column
 * `col` of line 1 of `file`.  Returns false (diagnosed) on a lexing error or
 * when the text is not exactly one value. */
bool fe_lex_value(fe_pctx *ctx, const char *text, int col, fe_value *out);
/* Unit suffix → class and factor (value = mantissa * mul / div).  False when
 * the suffix is unknown. */
bool fe_unit_lookup(const char *suffix, fe_unit_class *cls, double *mul, double *div);
/* The text listing every unit, for notes. */
extern const char fe_unit_help[];

/* ---- builder (build.c) -------------------------------------------------- */
void fe_value_free(fe_value *v);
void fe_b_begin(fe_pctx *ctx, fe_block_kind kind, const char *kw, sup_loc kw_loc, const char *name, sup_loc name_loc);
void fe_b_body(fe_pctx *ctx);
void fe_b_entry(fe_pctx *ctx, const char *key, sup_loc key_loc, fe_value *val);
void fe_b_link(fe_pctx *ctx, sup_loc link_loc, const char *which, sup_loc which_loc, const char *kind,
               sup_loc kind_loc);
void fe_b_import(fe_pctx *ctx, const char *path, sup_loc loc);
void fe_b_model_from(fe_pctx *ctx, const char *path, sup_loc loc, bool named);
/* Counts an error of this file (every diagnostic path calls it). */
void fe_b_error(fe_pctx *ctx);
/* Stores a typed value into the spec (used by the builder and overrides);
 * `lockey` is "model.hidden" etc.  Returns false on a diagnosed error. */
bool fe_b_store(fe_pctx *ctx, const fe_keydef *kd, const char *lockey, sup_loc key_loc, const fe_value *val);
/* Copies a name, diagnosing one that does not fit FE_NAME_MAX. */
bool fe_b_copy_name(fe_pctx *ctx, char *dst, size_t size, const char *src, sup_loc loc);
/* Resolves `path` relative to the directory of `from` (malloc'd). */
char *fe_path_join(const char *from, const char *path);
/* `import` / `from` may name only a file whose name (and resolved name)
 * ends in ext; false: reported at loc (build.c). */
bool fe_source_kind_ok(fe_pctx *ctx, const char *full, const char *ext, const char *what, sup_loc loc);

/* ---- locations (build.c) ------------------------------------------------ */
/* Exact lookup: the entry for "model.hidden", or NULL when never written. */
fe_keyloc *fe_loc_find(const fe_spec *spec, const char *key);
void fe_loc_set(fe_spec *spec, const char *key, sup_loc key_loc, sup_loc loc);
void fe_loc_drop_prefix(fe_spec *spec, const char *prefix);
static inline bool fe_given(const fe_spec *spec, const char *key) { return fe_loc_find(spec, key) != NULL; }

/* ---- Hugging Face config.json (hfjson.c) -------------------------------- */
/* Loads the model shape from `path` (already resolved); every diagnostic is
 * located at `loc` (the string naming the file). */
bool fe_hf_load(fe_pctx *ctx, const char *path, sup_loc loc);
/* Reports the required fields fe_hf_load did not find and the body did not
 * give either; clears ctx->hf_*. */
void fe_hf_finish(fe_pctx *ctx);
/* The model name a json file implies: its stem, or the directory's name for
 * "…/config.json"; made into an identifier. */
void fe_hf_name(const char *path, char *out, size_t n);

/* ---- cross-block rules (groups.c) --------------------------------------- */
/* The sequence-parallel layout rules; adds to *nerr and returns false when
 * the layout is illegal. */
bool fe_check_layout(const fe_spec *spec, int *nerr);
/* batch_aware dynamic's own rules (dynamic.c); called by fe_check_layout. */
bool fe_check_dynamic(const fe_spec *spec);

/* ---- printing (print.c) ------------------------------------------------- */
/* Formats v in the largest unit of `cls` that reads back exactly. */
const char *fe_fmt_unit(double v, fe_unit_class cls, char *buf, size_t n);

#endif
