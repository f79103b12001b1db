/* ir_parse.c — recursive-descent parser of textual IR (grammar in
 * ir/README.md; each parse function carries its rule).
 *
 * The parser checks what the text alone can tell: syntax, names defined
 * before use, no duplicate names, known ops/types/groups and operand and
 * result counts against the op table.  Everything semantic (shapes,
 * layouts, group partitions) is the verifier's job, so hand-written invalid
 * IR can be loaded and verified.  It stops at the first error. */
#include "ir_internal.h"
#include "ir_lex.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

typedef struct ir_parser {
    ir_lexer lx;
    ir_module *m;
    sup_loc *cloc; /* definition of each config key, for "previous definition" */
    int capcloc;
    sup_loc mesh_loc, link_loc[2];
} ir_parser;

#define CUR (&p->lx.cur)

static bool p_ok(const ir_parser *p) { return !p->lx.failed; }

static sup_loc p_loc(const ir_parser *p) { return ir_tok_loc(&p->lx, CUR); }

/* "expected X, found Y" at the current token. */
static bool p_expected(ir_parser *p, const char *what) {
    char found[64];
    ir_tok_describe(CUR, found, sizeof found);
    ir_lex_error(&p->lx, CUR, "expected %s, found %s", what, found);
    return false;
}

static bool p_accept_punct(ir_parser *p, char c) {
    char s[2] = {c, 0};
    if (!ir_tok_is(CUR, T_PUNCT, s)) return false;
    ir_lex_next(&p->lx);
    return true;
}

static bool p_expect_punct(ir_parser *p, char c) {
    char what[8] = {'\'', c, '\'', 0};
    return p_accept_punct(p, c) || p_expected(p, what);
}

/* key '=' — the fixed keys of mesh and link lines. */
static bool p_expect_key(ir_parser *p, const char *key) {
    if (!ir_tok_is(CUR, T_IDENT, key)) {
        char what[48];
        snprintf(what, sizeof what, "'%s'", key);
        return p_expected(p, what);
    }
    ir_lex_next(&p->lx);
    return p_expect_punct(p, '=');
}

static bool p_int(ir_parser *p, int64_t lo, int64_t hi, const char *what, int64_t *out) {
    if (CUR->kind != T_INT) return p_expected(p, what);
    if (CUR->ival < lo || CUR->ival > hi) {
        ir_lex_error(&p->lx, CUR, "%s must be between %lld and %lld, found %lld", what, (long long)lo, (long long)hi,
                     (long long)CUR->ival);
        return false;
    }
    *out = CUR->ival;
    ir_lex_next(&p->lx);
    return true;
}

static bool p_number(ir_parser *p, const char *what, double *out) {
    if (CUR->kind != T_INT && CUR->kind != T_FLOAT) return p_expected(p, what);
    *out = CUR->fval;
    ir_lex_next(&p->lx);
    return true;
}

/* Every statement ends the line. */
static bool p_expect_eol(ir_parser *p, const char *after) {
    if (CUR->kind == T_EOF) return true;
    if (CUR->kind == T_NL) {
        ir_lex_next(&p->lx);
        return true;
    }
    char what[96];
    snprintf(what, sizeof what, "end of line after %s", after);
    return p_expected(p, what);
}

static void p_note_previous(sup_loc loc) {
    if (loc.file) sup_note(loc, "previous definition is here");
}

/* Stores loc at index i of a growable loc array. */
static void p_set_loc(sup_loc **arr, int *cap, int i, sup_loc loc) {
    while (i >= *cap) {
        int old = *cap;
        *cap = *cap ? 2 * *cap : 64;
        *arr = sup_xrealloc(*arr, (size_t)*cap * sizeof **arr);
        memset(*arr + old, 0, (size_t)(*cap - old) * sizeof **arr);
    }
    (*arr)[i] = loc;
}

/* ---- names ---------------------------------------------------------------- */
static int p_find_value(const ir_parser *p, const char *name) {
    return ir_value_find(p->m, name); /* the module's name index: O(1) */
}

/* Suggests the closest existing value name for an undefined one. */
static void p_undefined_value(ir_parser *p, const char *name) {
    const ir_module *m = p->m;
    const char **names = sup_xmalloc((size_t)(m->nvalues + 1) * sizeof *names);
    for (int v = 0; v < m->nvalues; v++) names[v] = m->values[v].name;
    const char *best = sup_closest(name, names, m->nvalues);
    if (best)
        ir_lex_error(&p->lx, CUR, "use of undefined value '%%%s'; did you mean '%%%s'?", name, best);
    else
        ir_lex_error(&p->lx, CUR, "use of undefined value '%%%s'", name);
    free(names);
}

/* VAL naming an existing value; returns its index or -1 (reported). */
static int p_value_ref(ir_parser *p) {
    char name[IR_NAME_MAX];
    if (CUR->kind != T_VAL) {
        p_expected(p, "a value name ('%name')");
        return -1;
    }
    ir_tok_name(CUR, name, sizeof name);
    int v = p_find_value(p, name);
    if (v < 0) {
        p_undefined_value(p, name);
        return -1;
    }
    ir_lex_next(&p->lx);
    return v;
}

/* GROUP naming an existing group; returns its index or -1 (reported). */
static int p_group_ref(ir_parser *p) {
    char name[IR_NAME_MAX];
    if (CUR->kind != T_GROUP) return p_expected(p, "a group name ('@name')"), -1;
    ir_tok_name(CUR, name, sizeof name);
    int g = ir_group_find(p->m, name);
    if (g < 0) {
        ir_lex_error(&p->lx, CUR, "unknown group '@%s' (groups are declared with 'group @%s = {...}' before use)", name,
                     name);
        return -1;
    }
    ir_lex_next(&p->lx);
    return g;
}

/* A new value named by the current VAL token; -1 (reported) if it exists. */
static int p_define_value(ir_parser *p, const ir_tok *t, ir_value_kind kind, ir_type type) {
    char name[IR_NAME_MAX];
    ir_tok_name(t, name, sizeof name);
    int old = p_find_value(p, name);
    if (old >= 0) {
        ir_lex_error(&p->lx, t, "redefinition of value '%%%s'", name);
        p_note_previous(p->m->values[old].loc);
        return -1;
    }
    int v = ir_value_append(p->m, name, kind, type);
    p->m->values[v].loc = ir_tok_loc(&p->lx, t);
    return v;
}

/* ---- types ---------------------------------------------------------------- */

/* dtype := IDENT  (f32 | bf16 | f16 | i32) */
static bool p_dtype(ir_parser *p, ir_dtype *out) {
    char name[IR_NAME_MAX];
    if (CUR->kind != T_IDENT || !ir_tok_name(CUR, name, sizeof name))
        return p_expected(p, "a type (f32, bf16, f16 or i32)");
    int d = ir_dtype_lookup(name);
    if (d < 0) {
        int n;
        const char *const *all = ir_dtype_all(&n);
        const char *best = sup_closest(name, all, n);
        if (best)
            ir_lex_error(&p->lx, CUR, "unknown element type '%s'; did you mean '%s'?", name, best);
        else
            ir_lex_error(&p->lx, CUR, "unknown element type '%s' (expected f32, bf16, f16 or i32)", name);
        return false;
    }
    *out = (ir_dtype)d;
    ir_lex_next(&p->lx);
    return true;
}

/* type := dtype '[' (dim (',' dim)*)? ']'
 * dim  := INT GROUP? (':' INT)?               e.g. 16384@sp, 6@sp:1 (uneven, unit 1) */
static bool p_type(ir_parser *p, ir_type *t) {
    memset(t, 0, sizeof *t);
    for (int i = 0; i < IR_MAX_RANK; i++) t->shard[i] = -1;
    if (!p_dtype(p, &t->dtype) || !p_expect_punct(p, '[')) return false;
    if (p_accept_punct(p, ']')) return true;
    do {
        if (t->rank == IR_MAX_RANK) {
            ir_lex_error(&p->lx, CUR, "too many dimensions (a type has at most %d)", IR_MAX_RANK);
            return false;
        }
        int64_t d;
        if (CUR->kind == T_INT && CUR->ival < 1) {
            ir_lex_error(&p->lx, CUR, "dimension size must be positive, found %lld", (long long)CUR->ival);
            return false;
        }
        if (!p_int(p, 1, INT64_MAX, "a dimension size", &d)) return false;
        t->dims[t->rank] = d;
        if (CUR->kind == T_GROUP) {
            int g = p_group_ref(p);
            if (g < 0) return false;
            t->shard[t->rank] = g;
        }
        if (p_accept_punct(p, ':')) {
            int64_t u;
            if (CUR->kind == T_INT && CUR->ival < 1) {
                ir_lex_error(&p->lx, CUR, "split unit must be positive, found %lld", (long long)CUR->ival);
                return false;
            }
            if (!p_int(p, 1, INT64_MAX, "a split unit", &u)) return false;
            t->unit[t->rank] = u;
        }
        t->rank++;
    } while (p_accept_punct(p, ','));
    return p_expect_punct(p, ']');
}

/* placement := ('at' INT)?      the arena offset of a memory plan (pass memplan) */
static bool p_placement(ir_parser *p, int64_t *off) {
    *off = -1;
    char name[8];
    if (CUR->kind != T_IDENT || !ir_tok_name(CUR, name, sizeof name) || strcmp(name, "at") != 0) return true;
    ir_lex_next(&p->lx);
    return p_int(p, 0, INT64_MAX, "an arena offset", off);
}

/* ---- header statements ----------------------------------------------------- */

/* config := 'config' IDENT '=' (WORD | STRING) NL */
static bool p_config(ir_parser *p) {
    char key[sizeof p->m->config->key], value[sizeof p->m->config->value];
    ir_lex_next(&p->lx);
    if (CUR->kind != T_IDENT) return p_expected(p, "a config key");
    if (!ir_tok_name(CUR, key, sizeof key)) {
        ir_lex_error(&p->lx, CUR, "config key is longer than %zu characters", sizeof key - 1);
        return false;
    }
    ir_tok key_tok = *CUR;
    if (ir_config_get(p->m, key)) {
        ir_lex_error(&p->lx, CUR, "duplicate config key '%s'", key);
        for (int i = 0; i < p->m->nconfig; i++)
            if (strcmp(p->m->config[i].key, key) == 0 && i < p->capcloc) p_note_previous(p->cloc[i]);
        return false;
    }
    ir_lex_next(&p->lx);
    if (!ir_tok_is(CUR, T_PUNCT, "=")) return p_expected(p, "'='");
    if (!ir_lex_config_value(&p->lx, value, sizeof value)) return false;
    ir_config_set(p->m, key, value);
    p_set_loc(&p->cloc, &p->capcloc, p->m->nconfig - 1, ir_tok_loc(&p->lx, &key_tok));
    return p_expect_eol(p, "the config value");
}

/* node_of := 'node_of' '=' '[' INT (',' INT)* ']'   the node of every rank,
 * devices_per_node ranks on each node (absent: rank r on node r / dpn) */
static bool p_node_of(ir_parser *p) {
    ir_mesh *mesh = &p->m->mesh;
    int world = mesh->nodes * mesh->devices_per_node;
    if (!p_expect_key(p, "node_of") || !p_expect_punct(p, '[')) return false;
    int *node_of = sup_xmalloc(sizeof(int) * (size_t)(world > 0 ? world : 1));
    int *count = calloc((size_t)(mesh->nodes > 0 ? mesh->nodes : 1), sizeof(int));
    int n = 0;
    bool ok = count != NULL;
    do {
        sup_loc at = p_loc(p);
        int64_t v;
        if (!(ok = ok && p_int(p, 0, mesh->nodes - 1, "a node of the mesh", &v))) break;
        if ((ok = n < world && count[v] < mesh->devices_per_node)) {
            node_of[n++] = (int)v;
            count[v]++;
        } else {
            if (n < world)
                sup_error(at, "node %lld already holds devices_per_node = %d ranks", (long long)v,
                          mesh->devices_per_node);
            else
                sup_error(at, "node_of places more ranks than the mesh's %d", world);
        }
    } while (ok && p_accept_punct(p, ','));
    if (ok && n != world) {
        ir_lex_error(&p->lx, CUR, "node_of places %d ranks; the mesh has %d", n, world);
        ok = false;
    }
    ok = ok && p_expect_punct(p, ']');
    if (ok) ir_mesh_set_placement(p->m, node_of);
    free(node_of);
    free(count);
    return ok;
}

/* mesh := 'mesh' 'nodes' '=' INT ',' 'devices_per_node' '=' INT (',' node_of)? NL */
static bool p_mesh(ir_parser *p) {
    if (p->mesh_loc.file) {
        ir_lex_error(&p->lx, CUR, "duplicate mesh line");
        p_note_previous(p->mesh_loc);
        return false;
    }
    p->mesh_loc = p_loc(p);
    ir_lex_next(&p->lx);
    int64_t nodes, dpn;
    if (!p_expect_key(p, "nodes") || !p_int(p, 0, INT_MAX, "a node count", &nodes) || !p_expect_punct(p, ',') ||
        !p_expect_key(p, "devices_per_node") || !p_int(p, 0, INT_MAX, "a device count", &dpn))
        return false;
    if (nodes * dpn > INT_MAX) {
        ir_lex_error(&p->lx, CUR, "mesh of %lld x %lld devices is too large", (long long)nodes, (long long)dpn);
        return false;
    }
    p->m->mesh.nodes = (int)nodes;
    p->m->mesh.devices_per_node = (int)dpn;
    if (p_accept_punct(p, ',') && !p_node_of(p)) return false;
    return p_expect_eol(p, "the mesh");
}

/* link := 'link' ('intra' | 'inter') 'kind' '=' IDENT ',' 'bandwidth' '=' NUM
 *         ',' 'latency' '=' NUM ',' 'efficiency' '=' NUM NL
 * NUM  := INT | FLOAT */
static bool p_link(ir_parser *p) {
    ir_lex_next(&p->lx);
    int which = ir_tok_is(CUR, T_IDENT, "intra") ? 0 : ir_tok_is(CUR, T_IDENT, "inter") ? 1 : -1;
    if (which < 0) return p_expected(p, "'intra' or 'inter'");
    if (p->link_loc[which].file) {
        ir_lex_error(&p->lx, CUR, "duplicate 'link %s' line", which ? "inter" : "intra");
        p_note_previous(p->link_loc[which]);
        return false;
    }
    p->link_loc[which] = p_loc(p);
    ir_link *l = which ? &p->m->mesh.inter : &p->m->mesh.intra;
    ir_lex_next(&p->lx);
    if (!p_expect_key(p, "kind")) return false;
    if (CUR->kind != T_IDENT || !ir_tok_name(CUR, l->kind, sizeof l->kind))
        return p_expected(p, "a link kind (an identifier such as nvlink)");
    ir_lex_next(&p->lx);
    return p_expect_punct(p, ',') && p_expect_key(p, "bandwidth") && p_number(p, "a bandwidth", &l->bandwidth) &&
           p_expect_punct(p, ',') && p_expect_key(p, "latency") && p_number(p, "a latency", &l->latency) &&
           p_expect_punct(p, ',') && p_expect_key(p, "efficiency") && p_number(p, "an efficiency", &l->efficiency) &&
           p_expect_eol(p, "the link");
}

/* set := '[' INT (',' INT)* ']'   — appends to ranks, returns the set's size */
static int p_rank_set(ir_parser *p, int **ranks, int *n, int *cap) {
    int size = 0;
    if (!p_expect_punct(p, '[')) return -1;
    do {
        int64_t r;
        if (!p_int(p, 0, INT_MAX, "a rank", &r)) return -1;
        if (*n >= (1 << 24)) {
            ir_lex_error(&p->lx, CUR, "too many ranks in one group");
            return -1;
        }
        SUP_GROW(*ranks, *n, *cap);
        (*ranks)[(*n)++] = (int)r;
        size++;
    } while (p_accept_punct(p, ','));
    return p_expect_punct(p, ']') ? size : -1;
}

/* group := 'group' GROUP '=' ('block' INT)? '{' set (',' set)* '}' NL */
static bool p_group(ir_parser *p) {
    char name[IR_NAME_MAX];
    ir_lex_next(&p->lx);
    if (CUR->kind != T_GROUP) return p_expected(p, "a group name ('@name')");
    ir_tok name_tok = *CUR;
    ir_tok_name(CUR, name, sizeof name);
    int old = ir_group_find(p->m, name);
    if (old >= 0) {
        ir_lex_error(&p->lx, CUR, "redefinition of group '@%s'", name);
        p_note_previous(p->m->groups[old].loc);
        return false;
    }
    ir_lex_next(&p->lx);
    if (!p_expect_punct(p, '=')) return false;
    int64_t block = 0;
    if (ir_tok_is(CUR, T_IDENT, "block")) {
        ir_lex_next(&p->lx);
        if (!p_int(p, 1, 1 << 24, "a block size", &block)) return false;
    }
    if (!p_expect_punct(p, '{')) return false;
    int *ranks = NULL, n = 0, cap = 0, nsets = 0, set_size = 0;
    do {
        ir_tok set_tok = *CUR;
        int size = p_rank_set(p, &ranks, &n, &cap);
        if (size < 0) break;
        if (nsets > 0 && size != set_size) {
            ir_lex_error(&p->lx, &set_tok,
                         "set %d of group '@%s' has %d ranks, but set 0 has %d (the sets of a group are equal-sized)",
                         nsets, name, size, set_size);
            break;
        }
        set_size = size;
        nsets++;
    } while (p_accept_punct(p, ','));
    bool ok = p_ok(p) && p_expect_punct(p, '}');
    if (ok) {
        int g = ir_group_add(p->m, name, nsets, set_size, ranks);
        p->m->groups[g].loc = ir_tok_loc(&p->lx, &name_tok);
        p->m->groups[g].block = (int)block;
        ok = p_expect_eol(p, "the group");
    }
    free(ranks);
    return ok;
}

/* decl := ('param' | 'input' | 'accum') VAL ':' type placement NL */
static bool p_decl(ir_parser *p, ir_value_kind kind) {
    ir_lex_next(&p->lx);
    if (CUR->kind != T_VAL) return p_expected(p, "a value name ('%name')");
    ir_tok name_tok = *CUR;
    ir_lex_next(&p->lx);
    ir_type t;
    int64_t off;
    if (!p_expect_punct(p, ':') || !p_type(p, &t) || !p_placement(p, &off)) return false;
    int v = p_define_value(p, &name_tok, kind, t);
    if (v >= 0) p->m->values[v].mem_off = off;
    return v >= 0 && p_expect_eol(p, "the type");
}

/* ---- ops ------------------------------------------------------------------- */

/* attr := IDENT '=' (INT | FLOAT | IDENT | GROUP) */
static bool p_attr(ir_parser *p, ir_op *op) {
    char key[IR_ATTR_KEY_MAX];
    if (CUR->kind != T_IDENT) return p_expected(p, "an attribute name");
    if (!ir_tok_name(CUR, key, sizeof key)) {
        ir_lex_error(&p->lx, CUR, "attribute name is longer than %zu characters", sizeof key - 1);
        return false;
    }
    if (ir_attr_get(op, key)) {
        ir_lex_error(&p->lx, CUR, "duplicate attribute '%s'", key);
        return false;
    }
    if (op->nattrs == IR_MAX_ATTRS) {
        ir_lex_error(&p->lx, CUR, "too many attributes (an op has at most %d)", IR_MAX_ATTRS);
        return false;
    }
    ir_lex_next(&p->lx);
    if (!p_expect_punct(p, '=')) return false;
    char s[IR_NAME_MAX];
    switch (CUR->kind) {
    case T_INT: ir_attr_set_int(op, key, CUR->ival); break;
    case T_FLOAT: ir_attr_set_float(op, key, CUR->fval); break;
    case T_IDENT:
        if (!ir_tok_name(CUR, s, sizeof s)) return p_expected(p, "an identifier shorter than 64 characters");
        ir_attr_set_ident(op, key, s);
        break;
    case T_GROUP: {
        int g = p_group_ref(p);
        if (g < 0) return false;
        ir_attr_set_group(op, key, g);
        return true; /* p_group_ref consumed the token */
    }
    default: return p_expected(p, "an attribute value (integer, float, identifier or @group)");
    }
    ir_lex_next(&p->lx);
    return true;
}

/* attrs := '{' (attr (',' attr)*)? '}' */
static bool p_attrs(ir_parser *p, ir_op *op) {
    if (!p_accept_punct(p, '{')) return true;
    if (p_accept_punct(p, '}')) return true;
    do {
        if (!p_attr(p, op)) return false;
    } while (p_accept_punct(p, ','));
    return p_expect_punct(p, '}');
}

/* "1 operand", "2 to 4 results", "no results" */
static const char *p_count_str(int lo, int hi, const char *noun, char *buf, size_t n) {
    if (hi == 0)
        snprintf(buf, n, "no %ss", noun);
    else if (lo == hi)
        snprintf(buf, n, "%d %s%s", lo, noun, lo == 1 ? "" : "s");
    else
        snprintf(buf, n, "%d to %d %ss", lo, hi, noun);
    return buf;
}

/* results := VAL (',' VAL)* '='   — collects the result name tokens */
static int p_results(ir_parser *p, ir_tok *res) {
    int n = 0;
    if (CUR->kind != T_VAL) return 0;
    do {
        if (CUR->kind != T_VAL) return p_expected(p, "a result name ('%name')"), -1;
        if (n == IR_MAX_OUT) {
            ir_lex_error(&p->lx, CUR, "too many results (an op has at most %d)", IR_MAX_OUT);
            return -1;
        }
        res[n++] = *CUR;
        ir_lex_next(&p->lx);
    } while (p_accept_punct(p, ','));
    return p_expect_punct(p, '=') ? n : -1;
}

/* The op name, checked against the table ("did you mean" when unknown). */
static int p_opcode(ir_parser *p) {
    char name[IR_NAME_MAX];
    if (CUR->kind != T_IDENT || !ir_tok_name(CUR, name, sizeof name)) return p_expected(p, "an op name"), -1;
    int code = ir_opcode_lookup(name);
    if (code >= 0) return code;
    const char *names[IR_NUM_OPS];
    for (int i = 0; i < IR_NUM_OPS; i++) names[i] = ir_op_desc_of((ir_opcode)i)->name;
    const char *best = sup_closest(name, names, IR_NUM_OPS);
    if (best)
        ir_lex_error(&p->lx, CUR, "unknown op '%s'; did you mean '%s'?", name, best);
    else
        ir_lex_error(&p->lx, CUR, "unknown op '%s'", name);
    return -1;
}

/* operands := VAL (',' VAL)*   (bounded by the op table) */
static bool p_operands(ir_parser *p, ir_op *op, const ir_op_desc *info) {
    if (CUR->kind != T_VAL) return true;
    do {
        if (op->nin == info->max_in) {
            char c[48];
            ir_lex_error(&p->lx, CUR, "'%s' takes %s; this one is extra", info->name,
                         p_count_str(info->min_in, info->max_in, "operand", c, sizeof c));
            return false;
        }
        int v = p_value_ref(p);
        if (v < 0) return false;
        ir_op_add_input(op, v);
    } while (p_accept_punct(p, ','));
    return true;
}

/* types := ':' type placement (',' type placement)*   — exactly one per result */
static bool p_result_types(ir_parser *p, const ir_op_desc *info, int nres, ir_type *types, int64_t *offs) {
    if (nres == 0) {
        if (ir_tok_is(CUR, T_PUNCT, ":")) {
            ir_lex_error(&p->lx, CUR, "'%s' has no results, so it takes no result types", info->name);
            return false;
        }
        return true;
    }
    if (!ir_tok_is(CUR, T_PUNCT, ":")) return p_expected(p, "':' and the result types");
    for (int i = 0; i < nres; i++) {
        ir_lex_next(&p->lx); /* ':' or ',' */
        if (!p_type(p, &types[i]) || !p_placement(p, &offs[i])) return false;
        if (i + 1 < nres && !ir_tok_is(CUR, T_PUNCT, ","))
            return p_expected(p, "',' and another result type (one per result)");
    }
    if (ir_tok_is(CUR, T_PUNCT, ",")) {
        ir_lex_error(&p->lx, CUR, "more result types than results (%d)", nres);
        return false;
    }
    return true;
}

/* op := results? IDENT operands? attrs? types? NL */
static bool p_op(ir_parser *p) {
    ir_tok res[IR_MAX_OUT];
    int nres = p_results(p, res);
    if (nres < 0) return false;
    ir_tok op_tok = *CUR;
    int code = p_opcode(p);
    if (code < 0) return false;
    const ir_op_desc *info = ir_op_desc_of((ir_opcode)code);
    char c[48];
    if (nres < info->min_out || nres > info->max_out) {
        ir_lex_error(&p->lx, CUR, "'%s' produces %s, found %d", info->name,
                     p_count_str(info->min_out, info->max_out, "result", c, sizeof c), nres);
        return false;
    }
    ir_lex_next(&p->lx);
    ir_op op = ir_op_make((ir_opcode)code);
    op.loc = ir_tok_loc(&p->lx, &op_tok);
    if (!p_operands(p, &op, info)) return false;
    if (op.nin < info->min_in) {
        ir_lex_error(&p->lx, &op_tok, "'%s' takes %s, found %d", info->name,
                     p_count_str(info->min_in, info->max_in, "operand", c, sizeof c), op.nin);
        return false;
    }
    ir_type types[IR_MAX_OUT];
    int64_t offs[IR_MAX_OUT];
    if (!p_attrs(p, &op) || !p_result_types(p, info, nres, types, offs)) return false;
    for (int i = 0; i < nres; i++) {
        int v = p_define_value(p, &res[i], IR_V_RESULT, types[i]);
        if (v < 0) return false;
        p->m->values[v].mem_off = offs[i];
        ir_op_add_output(&op, v);
    }
    ir_op_append(p->m, &op);
    return p_expect_eol(p, "the op");
}

/* ---- module ----------------------------------------------------------------- */

/* stmt := config | mesh | link | group | decl | op */
static bool p_stmt(ir_parser *p) {
    if (ir_tok_is(CUR, T_IDENT, "config")) return p_config(p);
    if (ir_tok_is(CUR, T_IDENT, "mesh")) return p_mesh(p);
    if (ir_tok_is(CUR, T_IDENT, "link")) return p_link(p);
    if (ir_tok_is(CUR, T_IDENT, "group")) return p_group(p);
    if (ir_tok_is(CUR, T_IDENT, "param")) return p_decl(p, IR_V_PARAM);
    if (ir_tok_is(CUR, T_IDENT, "input")) return p_decl(p, IR_V_INPUT);
    if (ir_tok_is(CUR, T_IDENT, "accum")) return p_decl(p, IR_V_ACCUM);
    if (ir_tok_is(CUR, T_IDENT, "module")) {
        ir_lex_error(&p->lx, CUR, "a file holds one module; found a second 'module' line");
        return false;
    }
    if (CUR->kind == T_VAL || CUR->kind == T_IDENT) return p_op(p);
    return p_expected(p, "a statement (config, mesh, link, group, param, input, accum or an op)");
}

static void p_skip_blank_lines(ir_parser *p) {
    while (CUR->kind == T_NL) ir_lex_next(&p->lx);
}

/* module := NL* 'module' GROUP NL (NL | stmt)* EOF */
static bool p_module(ir_parser *p) {
    p_skip_blank_lines(p);
    if (!ir_tok_is(CUR, T_IDENT, "module")) return p_expected(p, "'module @name' at the start of the IR");
    ir_lex_next(&p->lx);
    char name[IR_NAME_MAX];
    if (CUR->kind != T_GROUP) return p_expected(p, "a module name ('@name')");
    ir_tok_name(CUR, name, sizeof name);
    p->m = ir_module_new(name);
    ir_lex_next(&p->lx);
    if (!p_expect_eol(p, "the module name")) return false;
    for (;;) {
        p_skip_blank_lines(p);
        if (CUR->kind == T_EOF) return true;
        if (!p_stmt(p)) return false;
    }
}

static ir_module *ir_parse_buf(const char *name, const char *text, size_t len) {
    ir_parser p;
    memset(&p, 0, sizeof p);
    const char *file = sup_source_add(name, text, len);
    ir_lex_init(&p.lx, file, text, len);
    bool ok = p_module(&p) && p_ok(&p);
    free(p.cloc);
    if (!ok) {
        ir_module_free(p.m);
        return NULL;
    }
    return p.m;
}

ir_module *ir_parse_string(const char *name, const char *text) {
    return ir_parse_buf(name ? name : "<string>", text, strlen(text));
}

/* Reads all of stdin ("-" as a path). */
static char *ir_read_stdin(size_t *len) {
    size_t cap = 1 << 16, n = 0;
    char *buf = sup_xmalloc(cap);
    size_t got;
    while ((got = fread(buf + n, 1, cap - n - 1, stdin)) > 0) {
        n += got;
        if (cap - n - 1 == 0) {
            cap *= 2;
            buf = sup_xrealloc(buf, cap);
        }
    }
    buf[n] = '\0';
    *len = n;
    return buf;
}

ir_module *ir_parse_file(const char *path) {
    size_t len = 0;
    bool is_stdin = strcmp(path, "-") == 0;
    char *text = is_stdin ? ir_read_stdin(&len) : sup_read_file(path, &len);
    if (!text) {
        sup_error(sup_noloc(), "cannot read '%s': %s", path, sup_read_why(errno));
        return NULL;
    }
    ir_module *m = ir_parse_buf(is_stdin ? "<stdin>" : path, text, len);
    free(text);
    return m;
}
