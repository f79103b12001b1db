/* ir.c — the module API: op table, types, config, groups, values, ops and
 * attributes.  Printing, parsing and verification live in their own files. */
#include "ir_internal.h"

#include <stdlib.h>
#include <string.h>

/* Builder misuse (too many operands, attributes ...) is a bug in the caller,
 * not bad input: stop loudly instead of silently dropping data. */
static void ir_bug(const char *what) {
    fprintf(stderr, "basp: internal error in the IR builder: %s\n", what);
    abort();
}

/* FNV-1a over n bytes (the name index, the intern table). */
static uint32_t ir_hash_n(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t k = 0; k < n; k++) h = (h ^ (unsigned char)s[k]) * 16777619u;
    return h;
}

static uint32_t ir_hash(const char *s) { return ir_hash_n(s, strlen(s)); }
static const char *ir_value_name_of(const void *m, int v) { return ((const ir_module *)m)->values[v].name; }

/* src cut to cap - 1 characters (as snprintf would, without its cost: a
 * build copies a name per value). */
static void ir_copy_name(char *dst, size_t cap, const char *src) {
    size_t n = src ? strnlen(src, cap - 1) : 0;
    if (n) memcpy(dst, src, n);
    dst[n] = '\0';
}

/* ---- types -------------------------------------------------------------- */
static const char *const ir_dtype_names[] = {"f32", "bf16", "f16", "i32"};
static const int ir_dtype_sizes[] = {4, 2, 2, 4};
enum { IR_NUM_DTYPES = 4 };

const char *ir_dtype_name(ir_dtype t) { return (int)t >= 0 && (int)t < IR_NUM_DTYPES ? ir_dtype_names[t] : "?"; }

int ir_dtype_size(ir_dtype t) { return (int)t >= 0 && (int)t < IR_NUM_DTYPES ? ir_dtype_sizes[t] : 0; }

int ir_dtype_lookup(const char *name) {
    for (int i = 0; i < IR_NUM_DTYPES; i++)
        if (strcmp(ir_dtype_names[i], name) == 0) return i;
    return -1;
}

const char *const *ir_dtype_all(int *n) {
    *n = IR_NUM_DTYPES;
    return ir_dtype_names;
}

int64_t ir_split_len(int64_t n, int64_t u, int K, int p) {
    if (u < 1 || K < 1) return K >= 1 ? n / K : n;
    int64_t m = n / u;
    return u * (m / K + (p < m % K));
}

int64_t ir_split_start(int64_t n, int64_t u, int K, int p) {
    if (u < 1 || K < 1) return K >= 1 ? (int64_t)p * (n / K) : 0;
    int64_t m = n / u, r = m % K;
    return u * ((int64_t)p * (m / K) + (p < r ? p : r));
}

int64_t ir_type_local_dim(const ir_module *m, const ir_type *t, int d, int p) {
    int g = t->shard[d];
    if (g < 0 || g >= m->ngroups || m->groups[g].set_size < 1) return t->dims[d];
    return ir_split_len(t->dims[d], t->unit[d], m->groups[g].set_size, p);
}

int64_t ir_type_max_local_dim(const ir_module *m, const ir_type *t, int d) {
    return ir_type_local_dim(m, t, d, 0); /* position 0 always holds the most */
}

bool ir_type_uneven(const ir_module *m, const ir_type *t) {
    for (int i = 0; i < t->rank; i++) {
        int g = t->shard[i];
        if (t->unit[i] > 0 && g >= 0 && g < m->ngroups && m->groups[g].set_size >= 1 &&
            ir_type_local_dim(m, t, i, 0) != ir_type_local_dim(m, t, i, m->groups[g].set_size - 1))
            return true;
    }
    return false;
}

int64_t ir_type_local_elems(const ir_module *m, const ir_type *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= ir_type_max_local_dim(m, t, i);
    return n;
}

int64_t ir_type_global_elems(const ir_type *t) {
    int64_t n = 1;
    for (int i = 0; i < t->rank; i++) n *= t->dims[i];
    return n;
}

bool ir_type_equal(const ir_type *a, const ir_type *b) {
    if (a->dtype != b->dtype || a->rank != b->rank) return false;
    for (int i = 0; i < a->rank && i < IR_MAX_RANK; i++)
        if (a->dims[i] != b->dims[i] || a->shard[i] != b->shard[i] || a->unit[i] != b->unit[i]) return false;
    return true;
}

ir_type ir_type_make(ir_dtype dtype, int rank, const int64_t *dims) {
    ir_type t;
    memset(&t, 0, sizeof t);
    t.dtype = dtype;
    t.rank = rank < 0 ? 0 : rank > IR_MAX_RANK ? IR_MAX_RANK : rank;
    for (int i = 0; i < IR_MAX_RANK; i++) {
        t.dims[i] = i < t.rank ? dims[i] : 0;
        t.shard[i] = -1;
    }
    return t;
}

/* ---- module ------------------------------------------------------------- */
ir_module *ir_module_new(const char *name) {
    ir_module *m = sup_xcalloc(1, sizeof *m);
    ir_copy_name(m->name, sizeof m->name, name && *name ? name : "module");
    m->mesh.nodes = 1;
    m->mesh.devices_per_node = 1;
    ir_copy_name(m->mesh.intra.kind, sizeof m->mesh.intra.kind, "none");
    ir_copy_name(m->mesh.inter.kind, sizeof m->mesh.inter.kind, "none");
    m->mesh.intra.efficiency = 1;
    m->mesh.inter.efficiency = 1;
    return m;
}

void ir_module_free(ir_module *m) {
    if (!m) return;
    for (int g = 0; g < m->ngroups; g++) free(m->groups[g].ranks);
    free(m->config);
    free(m->mesh.node_of);
    free(m->groups);
    free(m->values);
    free(m->ops);
    ir_name_index_free(&m->vnames);
    free(m);
}

/* Copies `n` items of size `sz`; capacity = n (at least 1 so SUP_GROW works). */
static void *ir_dup_array(const void *src, int n, size_t sz, int *cap) {
    *cap = n > 0 ? n : 0;
    if (n <= 0) return NULL;
    void *p = sup_xmalloc((size_t)n * sz);
    memcpy(p, src, (size_t)n * sz);
    return p;
}

ir_module *ir_module_clone(const ir_module *m) {
    ir_module *c = sup_xmalloc(sizeof *c);
    *c = *m;
    c->config = ir_dup_array(m->config, m->nconfig, sizeof *m->config, &c->capconfig);
    c->groups = ir_dup_array(m->groups, m->ngroups, sizeof *m->groups, &c->capgroups);
    c->values = ir_dup_array(m->values, m->nvalues, sizeof *m->values, &c->capvalues);
    c->ops = ir_dup_array(m->ops, m->nops, sizeof *m->ops, &c->capops);
    for (int g = 0; g < c->ngroups; g++) {
        int n = m->groups[g].nsets * m->groups[g].set_size;
        int cap;
        c->groups[g].ranks = ir_dup_array(m->groups[g].ranks, n, sizeof(int), &cap);
    }
    int cap;
    c->vnames.slots = ir_dup_array(m->vnames.slots, m->vnames.cap, sizeof(int), &cap);
    c->mesh.node_of = m->mesh.node_of ? ir_dup_array(m->mesh.node_of, ir_world(m), sizeof(int), &cap) : NULL;
    return c;
}

int ir_world(const ir_module *m) { return m->mesh.nodes * m->mesh.devices_per_node; }

int ir_seq_world(const ir_module *m) {
    int64_t k = ir_config_int(m, "dyn_block", 0);
    return k > 0 && k <= ir_world(m) ? (int)k : ir_world(m);
}

int ir_local_of(const ir_module *m, int r) {
    int dpn = m->mesh.devices_per_node > 0 ? m->mesh.devices_per_node : 1;
    if (!m->mesh.node_of || r < 0 || r >= ir_world(m)) return r % dpn;
    int k = 0;
    for (int q = 0; q < r; q++) k += m->mesh.node_of[q] == m->mesh.node_of[r];
    return k;
}

void ir_mesh_set_placement(ir_module *m, const int *node_of) {
    free(m->mesh.node_of);
    m->mesh.node_of = NULL;
    int world = ir_world(m), dpn = m->mesh.devices_per_node;
    bool consecutive = true;
    for (int r = 0; node_of && r < world && consecutive; r++) consecutive = node_of[r] == r / dpn;
    if (!node_of || consecutive || world <= 0) return;
    m->mesh.node_of = sup_xmalloc(sizeof(int) * (size_t)world);
    memcpy(m->mesh.node_of, node_of, sizeof(int) * (size_t)world);
}

/* ---- config ------------------------------------------------------------- */
void ir_config_set(ir_module *m, const char *key, const char *value) {
    for (int i = 0; i < m->nconfig; i++) {
        if (strcmp(m->config[i].key, key) == 0) {
            ir_copy_name(m->config[i].value, sizeof m->config[i].value, value);
            return;
        }
    }
    SUP_GROW(m->config, m->nconfig, m->capconfig);
    ir_config_entry *e = &m->config[m->nconfig++];
    ir_copy_name(e->key, sizeof e->key, key);
    ir_copy_name(e->value, sizeof e->value, value);
}

void ir_config_remove(ir_module *m, const char *key) {
    for (int i = 0; i < m->nconfig; i++)
        if (strcmp(m->config[i].key, key) == 0) {
            memmove(&m->config[i], &m->config[i + 1], sizeof *m->config * (size_t)(m->nconfig - i - 1));
            m->nconfig--;
            return;
        }
}

void ir_config_set_int(ir_module *m, const char *key, int64_t v) {
    char buf[32];
    snprintf(buf, sizeof buf, "%lld", (long long)v);
    ir_config_set(m, key, buf);
}

const char *ir_config_get(const ir_module *m, const char *key) {
    /* The cost model asks per op; the first character settles most keys. */
    for (int i = 0; i < m->nconfig; i++)
        if (m->config[i].key[0] == key[0] && strcmp(m->config[i].key, key) == 0) return m->config[i].value;
    return NULL;
}

int64_t ir_config_int(const ir_module *m, const char *key, int64_t def) {
    const char *s = ir_config_get(m, key);
    if (!s || !*s) return def;
    char *end;
    long long v = strtoll(s, &end, 10);
    return *end ? def : (int64_t)v;
}

/* A batch_aware dynamic variant's op (attr variant = K) reads the keys
 * that differ between variants as vK.key (driver/dynamic.c); any other op,
 * or a key the variants share, reads key itself. */
int64_t ir_op_config_int(const ir_module *m, const ir_op *op, const char *key, int64_t def) {
    int64_t K = op ? ir_attr_int(op, "variant", 0) : 0;
    if (K > 0) {
        char vk[80];
        snprintf(vk, sizeof vk, "v%lld.%s", (long long)K, key);
        if (ir_config_get(m, vk)) return ir_config_int(m, vk, def);
    }
    return ir_config_int(m, key, def);
}

/* ---- groups ------------------------------------------------------------- */
int ir_group_add(ir_module *m, const char *name, int nsets, int set_size, const int *ranks) {
    int g = ir_group_find(m, name);
    if (g < 0) {
        SUP_GROW(m->groups, m->ngroups, m->capgroups);
        g = m->ngroups++;
        memset(&m->groups[g], 0, sizeof m->groups[g]);
        ir_copy_name(m->groups[g].name, sizeof m->groups[g].name, name);
    }
    ir_group *gr = &m->groups[g];
    free(gr->ranks);
    int64_t block = ir_config_int(m, "dyn_block", 0);
    gr->block = block > 0 && strcmp(name, "world") != 0 ? (int)block : 0;
    gr->nsets = nsets < 0 ? 0 : nsets;
    gr->set_size = set_size < 0 ? 0 : set_size;
    size_t n = (size_t)gr->nsets * (size_t)gr->set_size;
    gr->ranks = n ? sup_xmalloc(n * sizeof(int)) : NULL;
    if (n) memcpy(gr->ranks, ranks, n * sizeof(int));
    return g;
}

int ir_group_find(const ir_module *m, const char *name) {
    for (int g = 0; g < m->ngroups; g++)
        if (strcmp(m->groups[g].name, name) == 0) return g;
    return -1;
}

int ir_group_add_contiguous(ir_module *m, const char *name, int nsets) {
    int world = strcmp(name, "world") ? ir_seq_world(m) : ir_world(m);
    if (nsets < 1 || world < 1 || world % nsets) return -1;
    int *r = sup_xmalloc((size_t)world * sizeof(int));
    for (int i = 0; i < world; i++) r[i] = i;
    int g = ir_group_add(m, name, nsets, world / nsets, r);
    free(r);
    return g;
}

int ir_group_add_strided(ir_module *m, const char *name, int stride) {
    int world = strcmp(name, "world") ? ir_seq_world(m) : ir_world(m);
    if (stride < 1 || world < 1 || world % stride) return -1;
    int size = world / stride;
    int *r = sup_xmalloc((size_t)world * sizeof(int));
    for (int s = 0; s < stride; s++)
        for (int j = 0; j < size; j++) r[s * size + j] = s + j * stride;
    int g = ir_group_add(m, name, stride, size, r);
    free(r);
    return g;
}

int ir_group_set_of(const ir_module *m, int g, int rank, int *pos) {
    if (pos) *pos = -1;
    if (g < 0 || g >= m->ngroups) return -1;
    const ir_group *gr = &m->groups[g];
    for (int i = 0; i < gr->nsets * gr->set_size; i++) {
        if (gr->ranks[i] == rank) {
            if (pos) *pos = i % gr->set_size;
            return i / gr->set_size;
        }
    }
    return -1;
}

/* Per rank: its set and position in group g (-1 when absent); O(world). */
static void ir_group_index(const ir_module *m, int g, int world, int *set, int *pos) {
    for (int r = 0; r < world; r++) set[r] = pos[r] = -1;
    const ir_group *gr = &m->groups[g];
    for (int i = 0; i < gr->nsets * gr->set_size; i++) {
        int r = gr->ranks[i];
        if (r >= 0 && r < world) set[r] = i / gr->set_size, pos[r] = i % gr->set_size;
    }
}

/* Checks the product set by set, with tables of each rank's set and
 * position built once: O(world) instead of a scan per rank. */
bool ir_group_nested(const ir_module *m, int whole, int outer, int inner) {
    if (whole < 0 || whole >= m->ngroups || inner < 0 || inner >= m->ngroups || outer >= m->ngroups) return false;
    const ir_group *w = &m->groups[whole], *gi = &m->groups[inner];
    const ir_group *go = outer >= 0 ? &m->groups[outer] : NULL;
    int ni = gi->set_size, no = go ? go->set_size : 1, world = 0;
    if (w->set_size != ni * no) return false;
    for (int k = 0; k < m->ngroups; k++)
        for (int i = 0; i < m->groups[k].nsets * m->groups[k].set_size; i++)
            if (m->groups[k].ranks[i] + 1 > world) world = m->groups[k].ranks[i] + 1;
    int *t = sup_xmalloc(sizeof(int) * 4 * (size_t)(world > 0 ? world : 1));
    int *iset = t, *ipos = t + world, *oset = t + 2 * world, *opos = t + 3 * world;
    ir_group_index(m, inner, world, iset, ipos);
    if (go) ir_group_index(m, outer, world, oset, opos);
    bool ok = true;
    for (int i = 0; ok && i < w->nsets * w->set_size; i++) {
        int x = w->ranks[i], p = i % w->set_size, base = i - p;
        if (x < 0 || x >= world || iset[x] < 0 || ipos[x] != p % ni) {
            ok = false;
            break;
        }
        /* x's inner set is the run of whole holding x; its outer set the
         * ranks at x's offset in every run */
        const int *run = &gi->ranks[iset[x] * ni];
        for (int j = 0; ok && j < ni; j++) ok = run[j] == w->ranks[base + (p / ni) * ni + j];
        if (!go || !ok) continue;
        if (oset[x] < 0 || opos[x] != p / ni) {
            ok = false;
            break;
        }
        const int *col = &go->ranks[oset[x] * no];
        for (int j = 0; ok && j < no; j++) ok = col[j] == w->ranks[base + j * ni + p % ni];
    }
    free(t);
    return ok;
}

/* Maps an old group index to its index after removing group `g`.  Dangling
 * references become IR_GROUP_REMOVED, which the verifier reports. */
static int ir_group_shift(int idx, int g) {
    if (idx == g) return IR_GROUP_REMOVED;
    return idx > g ? idx - 1 : idx;
}

void ir_group_remove(ir_module *m, int g) {
    if (g < 0 || g >= m->ngroups) return;
    free(m->groups[g].ranks);
    memmove(&m->groups[g], &m->groups[g + 1], (size_t)(m->ngroups - g - 1) * sizeof *m->groups);
    m->ngroups--;
    for (int v = 0; v < m->nvalues; v++) {
        ir_type *t = &m->values[v].type;
        for (int d = 0; d < t->rank && d < IR_MAX_RANK; d++)
            if (t->shard[d] >= 0) t->shard[d] = ir_group_shift(t->shard[d], g);
    }
    for (int i = 0; i < m->nops; i++) {
        ir_op *op = &m->ops[i];
        for (int a = 0; a < op->nattrs; a++)
            if (op->attrs[a].kind == IR_A_GROUP && op->attrs[a].i >= 0)
                op->attrs[a].i = ir_group_shift((int)op->attrs[a].i, g);
    }
}

/* ---- values ------------------------------------------------------------- */
static int ir_value_push(ir_module *m, const char *name, ir_value_kind kind, ir_type type, bool absent);

int ir_value_add(ir_module *m, const char *name, ir_value_kind kind, ir_type type) {
    if (!name || !*name || strlen(name) >= IR_NAME_MAX || ir_value_find(m, name) >= 0) return -1;
    return ir_value_push(m, name, kind, type, true);
}

int ir_value_append(ir_module *m, const char *name, ir_value_kind kind, ir_type type) {
    return ir_value_push(m, name, kind, type, false);
}

/* Appends a value; `absent`: the caller has looked its name up and it is
 * not there (a build adds 10^5 values at depth: one lookup each, not two). */
static int ir_value_push(ir_module *m, const char *name, ir_value_kind kind, ir_type type, bool absent) {
    SUP_GROW(m->values, m->nvalues, m->capvalues);
    ir_value *v = &m->values[m->nvalues];
    memset(v, 0, sizeof *v);
    ir_copy_name(v->name, sizeof v->name, name);
    v->kind = kind;
    v->type = type;
    v->def = -1;
    v->mem_off = -1;
    int i = m->nvalues++;
    /* A duplicate (only the parser makes one, for the verifier to report)
     * stays out of the index: find returns the first value of a name. */
    if (absent || ir_value_find(m, v->name) < 0) ir_name_index_add(&m->vnames, i, ir_value_name_of, m);
    return i;
}

int ir_value_find(const ir_module *m, const char *name) {
    return ir_name_index_find(&m->vnames, name, ir_value_name_of, m);
}

/* The index slot holding value v, or NULL. */
static int *ir_value_slot(ir_module *m, int v) {
    ir_name_index *ix = &m->vnames;
    if (!ix->cap) return NULL;
    for (uint32_t h = ir_hash(m->values[v].name) & (uint32_t)(ix->cap - 1);; h = (h + 1) & (uint32_t)(ix->cap - 1)) {
        if (ix->slots[h] < 0) return NULL;
        if (ix->slots[h] == v) return &ix->slots[h];
    }
}

void ir_value_swap_names(ir_module *m, int a, int b) {
    if (a == b || a < 0 || b < 0 || a >= m->nvalues || b >= m->nvalues) return;
    int *sa = ir_value_slot(m, a), *sb = ir_value_slot(m, b);
    char tmp[IR_NAME_MAX];
    memcpy(tmp, m->values[a].name, IR_NAME_MAX);
    memcpy(m->values[a].name, m->values[b].name, IR_NAME_MAX);
    memcpy(m->values[b].name, tmp, IR_NAME_MAX);
    if (sa && sb) { /* each name keeps its slot, which now holds the other value */
        *sa = b;
        *sb = a;
        return;
    }
    /* A duplicate name is involved (not indexed): rebuild the index. */
    ir_name_index_free(&m->vnames);
    for (int v = 0; v < m->nvalues; v++)
        if (ir_value_find(m, m->values[v].name) < 0) ir_name_index_add(&m->vnames, v, ir_value_name_of, m);
}

void ir_value_fresh_name(const ir_module *m, const char *base, char out[IR_NAME_MAX]) {
    /* Leave room for a ".NNNNNN" suffix when the base is long. */
    char b[IR_NAME_MAX - 12];
    ir_copy_name(b, sizeof b, base && *base ? base : "t");
    if (ir_value_find(m, b) < 0) {
        ir_copy_name(out, IR_NAME_MAX, b);
        return;
    }
    for (int i = 1;; i++) {
        snprintf(out, IR_NAME_MAX, "%s.%d", b, i);
        if (ir_value_find(m, out) < 0) return;
    }
}

int ir_value_add_fresh(ir_module *m, const char *base, ir_type type) {
    char name[IR_NAME_MAX];
    ir_value_fresh_name(m, base, name);
    return ir_value_push(m, name, IR_V_RESULT, type, true);
}

void ir_op_tag(ir_op *op, int layer, const char *phase) {
    ir_attr_set_int(op, "layer", layer);
    ir_attr_set_ident(op, "phase", phase);
}

/* ---- ops ---------------------------------------------------------------- */
int ir_op_insert(ir_module *m, int pos, const ir_op *op) {
    if (pos < 0 || pos > m->nops) ir_bug("ir_op_insert position out of range");
    SUP_GROW(m->ops, m->nops, m->capops);
    memmove(&m->ops[pos + 1], &m->ops[pos], (size_t)(m->nops - pos) * sizeof *m->ops);
    m->ops[pos] = *op;
    m->nops++;
    /* Appending shifts nothing; skipping the scan keeps building O(n). */
    for (int v = 0; v < m->nvalues && pos < m->nops - 1; v++)
        if (m->values[v].kind == IR_V_RESULT && m->values[v].def >= pos) m->values[v].def++;
    for (int o = 0; o < op->nout; o++)
        if (op->out[o] >= 0 && op->out[o] < m->nvalues) m->values[op->out[o]].def = pos;
    return pos;
}

int ir_op_append(ir_module *m, const ir_op *op) { return ir_op_insert(m, m->nops, op); }

void ir_op_remove(ir_module *m, int pos) {
    if (pos < 0 || pos >= m->nops) return;
    memmove(&m->ops[pos], &m->ops[pos + 1], (size_t)(m->nops - pos - 1) * sizeof *m->ops);
    m->nops--;
    for (int v = 0; v < m->nvalues; v++) {
        ir_value *val = &m->values[v];
        if (val->kind != IR_V_RESULT) continue;
        if (val->def == pos)
            val->def = -1; /* its results are now undefined */
        else if (val->def > pos)
            val->def--;
    }
}

ir_op ir_op_make(ir_opcode code) {
    ir_op op;
    memset(&op, 0, sizeof op);
    op.code = code;
    op.loc = sup_noloc();
    return op;
}

void ir_op_add_input(ir_op *op, int value) {
    if (op->nin >= IR_MAX_IN) ir_bug("too many op inputs");
    op->in[op->nin++] = value;
}

void ir_op_add_output(ir_op *op, int value) {
    if (op->nout >= IR_MAX_OUT) ir_bug("too many op outputs");
    op->out[op->nout++] = value;
}

/* ---- attributes --------------------------------------------------------- */
struct ir_context *ir_ctx(void) {
    sup_context *ctx = sup_ctx();
    if (!ctx->ir) ctx->ir = sup_xcalloc(1, sizeof *ctx->ir);
    return ctx->ir;
}

/* The intern table (ir_context): open addressing over the texts' hashes. */
static void ir_intern_grow(struct ir_context *x) {
    size_t cap = x->cap ? 2 * x->cap : 256;
    const char **slots = sup_xcalloc(cap, sizeof *slots);
    for (size_t k = 0; k < x->cap; k++) {
        const char *t = x->interned[k];
        if (!t) continue;
        size_t h = ir_hash_n(t, strlen(t)) & (cap - 1);
        while (slots[h]) h = (h + 1) & (cap - 1);
        slots[h] = t;
    }
    free(x->interned);
    x->interned = slots;
    x->cap = cap;
}

const char *ir_intern(const char *s, size_t cap) {
    struct ir_context *x = ir_ctx();
    if (!s) s = "";
    size_t n = strnlen(s, cap > 0 ? cap - 1 : 0);
    if (2 * (x->n + 1) > x->cap) ir_intern_grow(x);
    size_t h = ir_hash_n(s, n) & (x->cap - 1);
    for (const char *t; (t = x->interned[h]); h = (h + 1) & (x->cap - 1))
        if (strncmp(t, s, n) == 0 && t[n] == '\0') return t;
    /* One byte before the text says whether it is an identifier: the
     * verifier asks for every attribute of every op after every pass. */
    char *copy = sup_xmalloc(n + 2);
    memcpy(copy + 1, s, n);
    copy[n + 1] = '\0';
    copy[0] = (char)ir_is_ident(copy + 1);
    x->interned[h] = copy + 1;
    x->n++;
    return copy + 1;
}

bool ir_interned_is_ident(const char *s) { return s[-1] != 0; }

/* Keys are interned, so the same key is usually the same pointer; the first
 * character settles most other comparisons. */
static bool ir_key_is(const char *key, const char *want) {
    return key == want || (key[0] == want[0] && strcmp(key, want) == 0);
}

/* Finds `key` or appends a fresh attribute for it. */
static ir_attr *ir_attr_slot(ir_op *op, const char *key) {
    for (int a = 0; a < op->nattrs; a++)
        if (ir_key_is(op->attrs[a].key, key)) return &op->attrs[a];
    if (op->nattrs >= IR_MAX_ATTRS) ir_bug("too many op attributes");
    ir_attr *at = &op->attrs[op->nattrs++];
    memset(at, 0, sizeof *at);
    at->key = ir_intern(key, IR_ATTR_KEY_MAX);
    return at;
}

void ir_attr_set_int(ir_op *op, const char *key, int64_t v) {
    ir_attr *a = ir_attr_slot(op, key);
    a->kind = IR_A_INT;
    a->i = v;
}

void ir_attr_set_float(ir_op *op, const char *key, double v) {
    ir_attr *a = ir_attr_slot(op, key);
    a->kind = IR_A_FLOAT;
    a->f = v;
}

void ir_attr_set_ident(ir_op *op, const char *key, const char *s) {
    ir_attr *a = ir_attr_slot(op, key);
    a->kind = IR_A_IDENT;
    a->s = ir_intern(s, IR_NAME_MAX);
}

void ir_attr_set_group(ir_op *op, const char *key, int group) {
    ir_attr *a = ir_attr_slot(op, key);
    a->kind = IR_A_GROUP;
    a->i = group;
}

const ir_attr *ir_attr_get(const ir_op *op, const char *key) {
    for (int a = 0; a < op->nattrs; a++)
        if (ir_key_is(op->attrs[a].key, key)) return &op->attrs[a];
    return NULL;
}

void ir_attr_remove(ir_op *op, const char *key) {
    for (int a = 0; a < op->nattrs; a++) {
        if (ir_key_is(op->attrs[a].key, key)) {
            memmove(&op->attrs[a], &op->attrs[a + 1], (size_t)(op->nattrs - a - 1) * sizeof *op->attrs);
            op->nattrs--;
            return;
        }
    }
}

int64_t ir_attr_int(const ir_op *op, const char *key, int64_t def) {
    const ir_attr *a = ir_attr_get(op, key);
    return a && a->kind == IR_A_INT ? a->i : def;
}

int ir_op_group(const ir_op *op) {
    const ir_attr *a = ir_attr_get(op, "group");
    return a && a->kind == IR_A_GROUP ? (int)a->i : -1;
}

int ir_op_layer(const ir_op *op) { return (int)ir_attr_int(op, "layer", -1); }

const char *ir_op_phase(const ir_op *op) {
    const ir_attr *a = ir_attr_get(op, "phase");
    return a && a->kind == IR_A_IDENT ? a->s : "";
}

bool ir_op_async(const ir_op *op) { return ir_attr_int(op, "async", 0) == 1; }

/* ---- uses --------------------------------------------------------------- */
void ir_replace_uses(ir_module *m, int from, int to, int start) {
    for (int i = start < 0 ? 0 : start; i < m->nops; i++)
        for (int k = 0; k < m->ops[i].nin; k++)
            if (m->ops[i].in[k] == from) m->ops[i].in[k] = to;
}

int ir_count_uses(const ir_module *m, int v, int start) {
    int n = 0;
    for (int i = start < 0 ? 0 : start; i < m->nops; i++) {
        for (int k = 0; k < m->ops[i].nin; k++) {
            if (m->ops[i].in[k] == v) {
                n++;
                break;
            }
        }
    }
    return n;
}

void ir_renumber(ir_module *m) {
    for (int v = 0; v < m->nvalues; v++) m->values[v].def = -1;
    for (int i = 0; i < m->nops; i++)
        for (int o = 0; o < m->ops[i].nout; o++)
            if (m->ops[i].out[o] >= 0 && m->ops[i].out[o] < m->nvalues) m->values[m->ops[i].out[o]].def = i;
}

/* ---- name index (values; the parser) ------------------------------------------------ */
int ir_name_index_find(const ir_name_index *ix, const char *name, ir_name_of names, const void *ctx) {
    if (!ix->cap) return -1;
    for (uint32_t h = ir_hash(name) & (uint32_t)(ix->cap - 1);; h = (h + 1) & (uint32_t)(ix->cap - 1)) {
        int i = ix->slots[h];
        if (i < 0 || strcmp(names(ctx, i), name) == 0) return i;
    }
}

static void ir_name_index_put(ir_name_index *ix, int i, const char *name) {
    uint32_t h = ir_hash(name) & (uint32_t)(ix->cap - 1);
    while (ix->slots[h] >= 0) h = (h + 1) & (uint32_t)(ix->cap - 1);
    ix->slots[h] = i;
    ix->count++;
}

void ir_name_index_add(ir_name_index *ix, int i, ir_name_of names, const void *ctx) {
    if (2 * (ix->count + 1) > ix->cap) { /* keep the load under 1/2 */
        ir_name_index old = *ix;
        ix->cap = old.cap ? 2 * old.cap : 64;
        ix->slots = sup_xmalloc((size_t)ix->cap * sizeof *ix->slots);
        memset(ix->slots, 0xff, (size_t)ix->cap * sizeof *ix->slots);
        ix->count = 0;
        for (int k = 0; k < old.cap; k++)
            if (old.slots[k] >= 0) ir_name_index_put(ix, old.slots[k], names(ctx, old.slots[k]));
        free(old.slots);
    }
    ir_name_index_put(ix, i, names(ctx, i));
}

void ir_name_index_free(ir_name_index *ix) {
    free(ix->slots);
    memset(ix, 0, sizeof *ix);
}

const char *ir_value_kind_name(ir_value_kind k) {
    static const char *const names[] = {"param", "input", "accum", "result"};
    return (int)k >= 0 && k <= IR_V_RESULT ? names[k] : "?";
}
