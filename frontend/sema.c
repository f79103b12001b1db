/* sema.c — fe_check: fills defaults and checks every rule of a spec.
 *
 * Every diagnostic is located at the value that breaks the rule (or at the
 * block, for a missing key) and followed by a note that names the fix.
 * Rules that combine blocks run only when each block is sound on its own,
 * so one mistake does not fan out into a page of follow-on errors. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"

typedef struct checker {
    fe_spec *s;
    int nerr;
} checker;

static void err(checker *c, sup_loc loc, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void err(checker *c, sup_loc loc, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    sup_vdiag(SUP_ERROR, loc, fmt, ap);
    va_end(ap);
    c->nerr++;
}

static sup_loc at(const checker *c, const char *key) { return fe_spec_loc(c->s, key); }

/* ---- presence and ranges --------------------------------------------- */

static bool block_present(checker *c, const char *blk, const char *how) {
    if (fe_given(c->s, blk)) return true;
    err(c, sup_noloc(), "%s: no %s block", c->s->file, blk);
    sup_note(sup_noloc(), "add one, e.g. '%s'", how);
    return false;
}

static void require(checker *c, fe_block_kind b, const char *const *keys, int n) {
    const char *blk = fe_block_names[b];
    for (int i = 0; i < n; i++) {
        char lk[48];
        snprintf(lk, sizeof lk, "%s.%s", blk, keys[i]);
        if (fe_given(c->s, lk)) continue;
        const char *name = b == FE_B_MODEL ? c->s->model.name : b == FE_B_MESH ? c->s->mesh.name : "";
        if (*name)
            err(c, at(c, blk), "%s '%s' is missing required key '%s'", blk, name, keys[i]);
        else
            err(c, at(c, blk), "%s block is missing required key '%s'", blk, keys[i]);
        sup_note(at(c, blk), "add it, e.g. '%s'", fe_key_find(b, keys[i])->example);
    }
}

/* The range of every number a spec may hold, in base units (bytes, bytes
 * per second, seconds); frontend/README.md, "Ranges", lists them.  A key
 * without a row here must be positive.  Bounds keep every value a real
 * machine or run could have, so that what the compiler derives from them
 * (step times, transfer times, products of sizes) stays finite and
 * readable: a latency of 1e308 s would make every layout's predicted step
 * infinite.  `lo_open`/`hi_open`: the bound itself is excluded. */
typedef struct fe_range {
    const char *key; /* "train.lr"; "link.latency" for both links */
    double lo, hi;
    bool lo_open, hi_open;
    const char *want; /* "in (0, 1]" */
    const char *why;  /* a note before the example, or NULL */
    const char *low;  /* what to say under the lower bound ("positive"), NULL: want */
} fe_range;

#define FE_INF HUGE_VAL
static const fe_range fe_ranges[] = {
    /* key, lo, hi, lo_open, hi_open, want, why, low */
    {"mesh.memory", 1 << 20, 1125899906842624.0, false, false, "in [1MiB, 1024TiB]",
     "the memory of one device; today's accelerators hold 16-192 GB", NULL},
    {"mesh.host_memory", 1 << 20, 1125899906842624.0, false, false, "in [1MiB, 1024TiB]",
     "the host memory of one node that offloaded values may use; GPU servers hold 0.5-4 TB", NULL},
    {"mesh.nics_per_node", 1, 1 << 20, false, false, "in [1, 1048576]", NULL, "positive"},
    {"mesh.cores_per_node", 1, 1 << 20, false, false, "in [1, 1048576]", NULL, "positive"},
    {"link.bandwidth", 1e6, 1e15, false, false, "in [1MB/s, 1000TB/s]",
     "per direction; links run from about 1GB/s (ethernet) to 900GB/s (NVLink)", NULL},
    {"link.latency", 0, 1, false, false, "in [0s, 1s]",
     "a link's latency is microseconds (NVLink, InfiniBand) to milliseconds (a wide-area network)", NULL},
    {"link.efficiency", 0, 1, true, false, "in (0, 1]", NULL, NULL},
    {"train.zero", 0, 3, false, false, "0, 1, 2 or 3", NULL, NULL},
    {"train.global_batch", 1, 1 << 24, false, false, "in [1, 16777216]",
     "sequences per optimizer step; large LLM runs use a few thousand", "positive"},
    {"train.lr", 0, 1, true, false, "in (0, 1]", "AdamW's rates are about 1e-5 to 1e-2", NULL},
    {"train.warmup", 0, FE_INF, false, false, "zero or positive", NULL, NULL},
    {"train.min_lr", 0, FE_INF, false, false, "zero or positive", NULL, NULL},
    {"train.wsd_decay", 0, 1, true, false, "in (0, 1] (a fraction)", NULL, NULL},
    {"train.weight_decay", 0, 10, false, false, "in [0, 10]",
     "each step scales a matrix by 1 - lr * weight_decay; common values are 0 to 0.1", NULL},
    {"train.beta1", 0, 1, false, true, "in [0, 1)", NULL, NULL},
    {"train.beta2", 0, 1, false, true, "in [0, 1)", NULL, NULL},
    {"train.eps", 0, 1, true, false, "in (0, 1]", "AdamW's epsilon is about 1e-8", NULL},
    {"train.grad_clip", 0, FE_INF, false, false, "zero (no clipping) or positive", NULL, NULL},
    {"train.steps", 1, 1e9, false, false, "in [1, 1000000000]", "the training binary runs at most 1e9 steps",
     "positive"},
    {"train.seed", 0, FE_INF, false, false, "zero or positive", NULL, NULL},
    {"train.mlp_chunk", 0, FE_INF, false, false, "zero (off) or positive (tokens)", NULL, NULL},
    {"train.eot_token", 0, FE_INF, false, false, "a token id (zero or positive)", NULL, NULL},
};

/* The row of `prefix.name` ("mesh.intra" links share "link.*"), or NULL. */
static const fe_range *range_of(const char *prefix, const char *name) {
    char key[48];
    snprintf(key, sizeof key, "%s.%s", strncmp(prefix, "mesh.", 5) ? prefix : "link", name);
    for (size_t i = 0; i < sizeof fe_ranges / sizeof *fe_ranges; i++)
        if (!strcmp(fe_ranges[i].key, key)) return &fe_ranges[i];
    return NULL;
}

static bool in_range(const fe_range *r, double v) {
    if (!r) return v > 0;
    return (r->lo_open ? v > r->lo : v >= r->lo) && (r->hi_open ? v < r->hi : v <= r->hi);
}

/* The value as written back: with its unit for sizes, bandwidths and times. */
static const char *value_text(const fe_keydef *k, double v, char *buf, size_t n) {
    char num[32];
    if (v == floor(v) && fabs(v) < 1e15)
        snprintf(num, sizeof num, "%.0f", v); /* 100000000, not 1e+08 */
    else
        sup_fmt_double(v, num, sizeof num);
    const char *unit = k->kind == FE_K_BYTES ? "B" : k->kind == FE_K_BW ? "B/s" : k->kind == FE_K_TIME ? "s" : "";
    snprintf(buf, n, "%s%s", num, unit);
    return buf;
}

/* Every number given in one block against its range (fe_ranges). */
static void check_range(checker *c, fe_block_kind b, const char *prefix, const char *base) {
    int n;
    const fe_keydef *k = fe_block_keys(b, &n);
    for (int i = 0; i < n; i++) {
        char lk[48];
        snprintf(lk, sizeof lk, "%s.%s", prefix, k[i].name);
        if (!fe_given(c->s, lk)) continue;
        if (k[i].kind != FE_K_COUNT && k[i].kind != FE_K_FLOAT && k[i].kind != FE_K_BYTES && k[i].kind != FE_K_BW &&
            k[i].kind != FE_K_TIME)
            continue;
        const char *p = base + k[i].off;
        sup_loc loc = at(c, lk);
        double v = k[i].kind == FE_K_COUNT ? (k[i].size == 8 ? (double)*(const int64_t *)p : *(const int *)p)
                                           : *(const double *)p;
        const fe_range *r = range_of(prefix, k[i].name);
        bool finite = isfinite(v);
        if (finite && in_range(r, v)) continue;
        char num[48];
        const char *want = !finite ? "a finite number" : !r ? "positive" : r->low && v < r->lo ? r->low : r->want;
        err(c, loc, "'%s' must be %s, not %s", k[i].name, want, value_text(&k[i], v, num, sizeof num));
        if (!strcmp(k[i].name, "zero"))
            sup_note(loc, "ZeRO stages: 0 off, 1 optimizer state, 2 +gradients, 3 +parameters");
        else if (finite && r && r->why)
            sup_note(loc, "%s; write it like '%s'", r->why, k[i].example);
        else
            sup_note(loc, "write it like '%s'", k[i].example);
    }
}

/* A name from a fixed set, with "did you mean". */
static void one_of(checker *c, const char *key, const char *val, const char *const *set, int n) {
    for (int i = 0; i < n; i++)
        if (!strcmp(val, set[i])) return;
    sup_loc loc = at(c, key);
    const char *near = sup_closest(val, set, n);
    err(c, loc, "unknown %s '%s'", strchr(key, '.') + 1, val);
    if (near) {
        sup_note(loc, "did you mean '%s'?", near);
        return;
    }
    sup_buf b = {0};
    for (int i = 0; i < n; i++) sup_buf_printf(&b, "%s%s", i ? ", " : "", set[i]);
    sup_note(loc, "use one of: %s", b.data);
    sup_buf_free(&b);
}

/* ---- defaults ---------------------------------------------------------- */

static void model_defaults(checker *c) {
    fe_model *m = &c->s->model;
    if (!fe_given(c->s, "model.kv_heads")) m->kv_heads = m->heads;
    if (!fe_given(c->s, "model.rope_theta")) m->rope_theta = 10000;
    if (!fe_given(c->s, "model.norm_eps")) m->norm_eps = 1e-5;
    if (!fe_given(c->s, "model.rope_scaling")) snprintf(m->rope_scaling, sizeof m->rope_scaling, "none");
    if (!fe_given(c->s, "model.rope_factor")) m->rope_factor = 8;
    if (!fe_given(c->s, "model.rope_low_freq_factor")) m->rope_low_freq_factor = 1;
    if (!fe_given(c->s, "model.rope_high_freq_factor")) m->rope_high_freq_factor = 4;
    if (!fe_given(c->s, "model.rope_original_max_pos")) m->rope_original_max_pos = 8192;
    if (fe_given(c->s, "model.head_dim")) return;
    if (m->hidden % m->heads == 0) {
        m->head_dim = m->hidden / m->heads;
        return;
    }
    sup_loc loc = at(c, "model.heads");
    err(c, loc,
        "hidden (%" PRId64 ") is not divisible by heads (%" PRId64 "), so head_dim "
        "cannot be derived",
        m->hidden, m->heads);
    sup_note(loc, "give head_dim explicitly, e.g. 'head_dim 64'");
}

static void train_defaults(fe_spec *s) {
    fe_train *t = &s->train;
    if (!fe_given(s, "train.precision")) snprintf(t->precision, sizeof t->precision, "bf16");
    if (!fe_given(s, "train.optimizer")) snprintf(t->optimizer, sizeof t->optimizer, "adamw");
    if (!fe_given(s, "train.lr")) t->lr = 3e-4;
    if (!fe_given(s, "train.schedule")) snprintf(t->schedule, sizeof t->schedule, "constant");
    if (!fe_given(s, "train.warmup")) t->warmup = 0;
    if (!fe_given(s, "train.global_batch")) t->global_batch = t->micro_batch;
    if (!fe_given(s, "train.min_lr")) t->min_lr = 0;
    if (!fe_given(s, "train.wsd_decay")) t->wsd_decay = 0.2;
    if (!fe_given(s, "train.weight_decay")) t->weight_decay = 0.1;
    if (!fe_given(s, "train.beta1")) t->beta1 = 0.9;
    if (!fe_given(s, "train.beta2")) t->beta2 = 0.95;
    if (!fe_given(s, "train.eps")) t->eps = 1e-8;
    if (!fe_given(s, "train.grad_clip")) t->grad_clip = 1.0;
    if (!fe_given(s, "train.steps")) t->steps = 10;
    if (!fe_given(s, "train.seed")) t->seed = 1234;
    if (!fe_given(s, "train.attention_chunks")) t->attention_chunks = 1;
    if (!fe_given(s, "train.recompute")) snprintf(t->recompute, sizeof t->recompute, "none");
    if (!fe_given(s, "train.offload")) snprintf(t->offload, sizeof t->offload, "none");
    if (!fe_given(s, "train.fuse_loss")) t->fuse_loss = true;
    if (!fe_given(s, "train.fuse_elem")) t->fuse_elem = true;
    if (!fe_given(s, "train.fuse_rope")) t->fuse_rope = true;
    if (!fe_given(s, "train.attention_lse")) t->attention_lse = true;
    if (!fe_given(s, "train.packing")) snprintf(t->packing, sizeof t->packing, "balanced");
    if (!fe_given(s, "layout.sequence")) snprintf(s->layout.sequence, sizeof s->layout.sequence, "ulysses");
    if (!fe_given(s, "layout.batch_aware")) {
        s->layout.batch_aware = FE_BA_AUTO;
        s->layout.groups = 0;
    }
    if (!fe_given(s, "layout.a2a")) snprintf(s->layout.a2a, sizeof s->layout.a2a, "flat");
    if (!fe_given(s, "layout.ring_degree")) s->layout.ring_degree = 0;
}

/* DeepSpeed ALST tiles the MLP into ceil(tokens / hidden) chunks: tiled
 * once a rank holds more than `hidden` tokens, `hidden` tokens per chunk.
 * Needs the mesh's defaults (the world size). */
int64_t fe_mlp_chunk_alst(const fe_spec *s) {
    double world = (double)fe_world(s), hidden = (double)s->model.hidden;
    double per_rank = (double)s->train.micro_batch * (double)s->train.seq_len / (world > 0 ? world : 1);
    return hidden > 0 && per_rank > hidden ? s->model.hidden : 0;
}

/* Not given: FE_MLP_AUTO when ALST would tile (the builder then tiles only
 * if the unfused MLP does not fit), else 0, where nothing is to choose. */
static void mlp_chunk_default(fe_spec *s) {
    if (fe_given(s, "train.mlp_chunk")) return;
    s->train.mlp_chunk = fe_mlp_chunk_alst(s) > 0 ? FE_MLP_AUTO : 0;
}

/* A link whose kind names a link preset (ib_ndr) takes that preset's
 * numbers; any other kind takes the device preset's link numbers with
 * efficiency 1.  Numbers written in the spec win either way. */
static void link_defaults(fe_spec *s, fe_link *l, const fe_link *device, const char *which) {
    char lk[48];
    snprintf(lk, sizeof lk, "mesh.%s", which);
    if (!fe_given(s, lk)) snprintf(l->kind, sizeof l->kind, "%s", device->kind);
    const fe_link *named = layout_link_lookup(l->kind);
    const fe_link *preset = named ? named : device;
    snprintf(lk, sizeof lk, "mesh.%s.bandwidth", which);
    if (!fe_given(s, lk)) l->bandwidth = preset->bandwidth;
    snprintf(lk, sizeof lk, "mesh.%s.latency", which);
    if (!fe_given(s, lk)) l->latency = preset->latency;
    snprintf(lk, sizeof lk, "mesh.%s.efficiency", which);
    if (!fe_given(s, lk)) l->efficiency = named ? named->efficiency : 1.0;
}

/* mesh.placement names a node for every rank, devices_per_node per node. */
static void placement_rules(checker *c) {
    fe_mesh *m = &c->s->mesh;
    if (!fe_given(c->s, "mesh.placement")) snprintf(m->placement, sizeof m->placement, "consecutive");
    if (m->nodes <= 0 || m->devices_per_node <= 0) return;
    int *node_of = malloc(sizeof(int) * (size_t)(m->nodes * m->devices_per_node));
    char why[256];
    if (node_of && !fe_placement_nodes(m, node_of, why, sizeof why)) {
        sup_loc loc = at(c, "mesh.placement");
        err(c, loc, "placement: %s", why);
        sup_note(loc, "write 'placement consecutive' (mpirun --map-by slot, srun --distribution=block), "
                      "'placement round_robin' (--map-by node, --distribution=cyclic) or "
                      "'placement \"0 0 1 1 ...\"' (the node of every rank)");
    }
    free(node_of);
}

static void mesh_defaults(checker *c) {
    fe_mesh *m = &c->s->mesh;
    if (!fe_given(c->s, "mesh.device")) snprintf(m->device, sizeof m->device, "cpu");
    if (!fe_given(c->s, "mesh.nics_per_node")) m->nics_per_node = m->devices_per_node;
    const fe_device_preset *p = layout_device_lookup(m->device);
    if (!p) {
        int n, na, k = 0;
        const fe_device_preset *all = layout_device_presets(&n), *added = layout_devices_added(&na);
        const char *names[16 + LAYOUT_MAX_DEVICES];
        for (int i = 0; i < n && k < 16; i++) names[k++] = all[i].name;
        for (int i = 0; i < na; i++) names[k++] = added[i].name;
        one_of(c, "mesh.device", m->device, names, k);
        return;
    }
    if (!fe_given(c->s, "mesh.memory")) m->device_mem = p->mem_bytes;
    if (!fe_given(c->s, "mesh.host_memory")) m->host_mem = p->host_mem_bytes;
    link_defaults(c->s, &m->intra, &p->intra, "intra");
    link_defaults(c->s, &m->inter, &p->inter, "inter");
    link_defaults(c->s, &m->host, &p->host, "host");
    /* Keep N and the products built from it far from int64 overflow. */
    if (m->nodes > (1 << 20) || m->devices_per_node > (1 << 20) || m->nodes * m->devices_per_node > (1 << 24)) {
        sup_loc loc = at(c, m->nodes > m->devices_per_node ? "mesh.nodes" : "mesh.devices_per_node");
        err(c, loc, "world size nodes*devices_per_node is too large (at most %d ranks)", 1 << 24);
        sup_note(loc, "describe the mesh that one training job runs on");
        return;
    }
    placement_rules(c);
}

/* Offload moves values over the host link: a mesh without one (`link host
 * none`) cannot. */
static void offload_rules(checker *c) {
    const fe_spec *s = c->s;
    static const char *const modes[] = {"activations", "optimizer", "all"};
    bool known = false;
    for (int i = 0; i < 3; i++) known |= !strcmp(s->train.offload, modes[i]);
    if (!known || strcmp(s->mesh.host.kind, "none")) return;
    sup_loc loc = at(c, "train.offload");
    err(c, loc, "offload %s needs a host link, but the mesh has none", s->train.offload);
    if (fe_given(s, "mesh.host")) sup_note(at(c, "mesh.host"), "the mesh's host link is 'none' here");
    sup_note(loc, "give the mesh a host link ('link host pcie5') or write 'offload none'");
}

/* Head chunks hold whole kv groups: C divides kv_heads (and so heads). */
static void chunk_rules(checker *c) {
    const fe_spec *s = c->s;
    int64_t C = s->train.attention_chunks, Hk = s->model.kv_heads > 0 ? s->model.kv_heads : s->model.heads;
    if (C <= 1) return; /* 1, or auto: the builder takes only chunk counts that split */
    sup_loc loc = at(c, "train.attention_chunks");
    if (Hk % C || s->model.heads % C) {
        err(c, loc, "attention_chunks %" PRId64 " does not divide kv_heads (%" PRId64 ") and heads (%" PRId64 ")", C,
            Hk, s->model.heads);
        sup_buf b = {0};
        for (int64_t d = 1; d <= Hk && d <= FE_MAX_ATTENTION_CHUNKS; d++)
            if (Hk % d == 0 && s->model.heads % d == 0) sup_buf_printf(&b, "%s%" PRId64, b.len ? ", " : "", d);
        sup_note(loc, "each chunk holds whole kv groups: use one of %s", b.data);
        sup_buf_free(&b);
        return;
    }
}

static void model_rules(checker *c) {
    const fe_model *m = &c->s->model;
    if (m->layers > FE_MAX_LAYERS) {
        sup_loc loc = at(c, "model.layers");
        err(c, loc, "layers %" PRId64 " is too many (at most %d)", m->layers, FE_MAX_LAYERS);
        sup_note(loc, "the step is lowered op by op, so its size grows with layers; the deepest "
                      "published decoders have under 200");
    }
    if (m->kv_heads <= 0 || m->heads % m->kv_heads == 0) return;
    sup_loc loc = at(c, "model.kv_heads");
    err(c, loc, "heads (%" PRId64 ") is not divisible by kv_heads (%" PRId64 ")", m->heads, m->kv_heads);
    sup_buf b = {0};
    for (int64_t d = 1; d <= m->heads && b.len < 120; d++)
        if (m->heads % d == 0) sup_buf_printf(&b, "%s%" PRId64, b.len ? ", " : "", d);
    sup_note(loc, "kv_heads must divide heads: use one of %s", b.data);
    sup_buf_free(&b);
}

/* RoPE scaling.  The llama3 parameters only mean something with
 * `rope_scaling llama3`: written without any rope_scaling they are almost
 * certainly a forgotten line, and training would silently use unscaled
 * frequencies.  An explicit `rope_scaling none` (say, an override that turns
 * an imported model's scaling off) keeps them quietly. */
static void rope_rules(checker *c) {
    static const char *const kinds[] = {"none", "llama3"};
    static const char *const params[] = {"rope_factor", "rope_low_freq_factor", "rope_high_freq_factor",
                                         "rope_original_max_pos"};
    const fe_model *m = &c->s->model;
    one_of(c, "model.rope_scaling", m->rope_scaling, kinds, 2);
    if (!strcmp(m->rope_scaling, "llama3")) {
        if (m->rope_high_freq_factor > m->rope_low_freq_factor) return;
        const char *key = fe_given(c->s, "model.rope_high_freq_factor") ? "model.rope_high_freq_factor"
                                                                        : "model.rope_low_freq_factor";
        char hi[32], lo[32];
        err(c, at(c, key), "rope_high_freq_factor (%s) must be greater than rope_low_freq_factor (%s)",
            sup_fmt_double(m->rope_high_freq_factor, hi, sizeof hi),
            sup_fmt_double(m->rope_low_freq_factor, lo, sizeof lo));
        sup_note(at(c, key), "the wavelengths between the two are interpolated, so the band must not be "
                             "empty; Llama 3 uses rope_low_freq_factor 1, rope_high_freq_factor 4");
        return;
    }
    if (fe_given(c->s, "model.rope_scaling")) return;
    for (int i = 0; i < 4; i++) {
        char lk[48];
        snprintf(lk, sizeof lk, "model.%s", params[i]);
        if (!fe_given(c->s, lk)) continue;
        err(c, at(c, lk), "'%s' only applies with 'rope_scaling llama3'", params[i]);
        sup_note(at(c, lk),
                 "add 'rope_scaling llama3' to the model block (the default, none, ignores "
                 "%s), or remove the key",
                 params[i]);
    }
}

/* ---- sizes ------------------------------------------------------------ */

/* Bytes one tensor may hold: 2^46 (64 TiB), counted at 4 bytes per element;
 * the IR verifier (ir/ir_verify.c) has the same limit, so that the sums the
 * memory plan and the generated program form over every tensor fit in 64
 * bits.  A product that passes here cannot wrap anywhere downstream. */
#define FE_MAX_TENSOR_BYTES ((int64_t)1 << 46)

typedef struct fe_factor {
    const char *key; /* "model.vocab" */
    int64_t v;
} fe_factor;

/* The product of n factors times 4 bytes; an error at the largest factor's
 * key when it overflows the per-tensor limit.  Returns false then. */
static bool size_ok(checker *c, const char *what, const fe_factor *f, int n) {
    int64_t p = 4;
    bool over = false;
    for (int i = 0; i < n; i++) {
        if (f[i].v <= 0) return true; /* range errors are reported elsewhere */
        if (__builtin_mul_overflow(p, f[i].v, &p)) over = true;
    }
    if (!over && p <= FE_MAX_TENSOR_BYTES) return true;
    int big = 0;
    for (int i = 1; i < n; i++)
        if (f[i].v > f[big].v) big = i;
    sup_buf b = {0};
    for (int i = 0; i < n; i++) sup_buf_printf(&b, "%s%s %" PRId64, i ? " x " : "", strchr(f[i].key, '.') + 1, f[i].v);
    sup_loc loc = at(c, f[big].key);
    err(c, loc, "size of %s overflows: %s x 4 bytes exceeds 2^46 bytes", what, b.data);
    sup_note(loc,
             "one tensor may hold at most 64 TiB, so that the sums of all sizes fit in 64 bits; "
             "'%s' is far larger than any model or run uses",
             strchr(f[big].key, '.') + 1);
    sup_buf_free(&b);
    return false;
}

/* Every global tensor shape the lowering builds from the spec: weights,
 * activations, logits.  One error per spec (the first product that fails). */
static void size_rules(checker *c) {
    const fe_model *m = &c->s->model;
    const fe_train *t = &c->s->train;
    fe_factor hid = {"model.hidden", m->hidden}, voc = {"model.vocab", m->vocab}, ffn = {"model.ffn", m->ffn};
    fe_factor hd = {"model.head_dim", m->head_dim}, nh = {"model.heads", m->heads};
    fe_factor nkv = {"model.kv_heads", m->kv_heads}, mb = {"train.micro_batch", t->micro_batch};
    fe_factor sl = {"train.seq_len", t->seq_len}, ly = {"model.layers", m->layers};
    fe_factor gb = {"train.global_batch", t->global_batch};
    const struct {
        const char *what;
        fe_factor f[4];
        int n;
    } shapes[] = {
        {"the embedding (vocab x hidden)", {voc, hid}, 2},
        {"a projection weight (hidden x heads x head_dim)", {hid, nh, hd}, 3},
        {"a projection weight (hidden x kv_heads x head_dim)", {hid, nkv, hd}, 3},
        {"an MLP weight (hidden x ffn)", {hid, ffn}, 2},
        {"the parameters of all layers (layers x hidden x ffn)", {ly, hid, ffn}, 3},
        {"an activation (micro_batch x seq_len x hidden)", {mb, sl, hid}, 3},
        {"the queries (micro_batch x seq_len x heads x head_dim)", {mb, sl, nh, hd}, 4},
        {"the MLP activation (micro_batch x seq_len x ffn)", {mb, sl, ffn}, 3},
        {"the logits (micro_batch x seq_len x vocab)", {mb, sl, voc}, 3},
        {"the activations of all layers (layers x micro_batch x seq_len x hidden)", {ly, mb, sl, hid}, 4},
        {"the token ids of one optimizer step (global_batch x seq_len)", {gb, sl}, 2},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        if (!size_ok(c, shapes[i].what, shapes[i].f, shapes[i].n)) return;
}

/* Packed documents: the end-of-text token is required and must be a token
 * of the vocabulary; packing and eot_token mean nothing without documents. */
static void document_rules(checker *c) {
    const fe_train *t = &c->s->train;
    if (!t->documents) {
        const char *k = fe_given(c->s, "train.eot_token") ? "train.eot_token"
                        : fe_given(c->s, "train.packing") ? "train.packing"
                                                          : NULL;
        if (!k) return;
        err(c, at(c, k), "'%s' has no effect without 'documents on'", strchr(k, '.') + 1);
        sup_note(at(c, k), "add 'documents on' to the train block to pack documents");
        return;
    }
    if (!fe_given(c->s, "train.eot_token")) {
        err(c, at(c, "train.documents"), "'documents on' needs the end-of-text token that separates documents");
        sup_note(at(c, "train.documents"), "add it, e.g. 'eot_token 50256' (GPT-2) or 'eot_token 128001' (Llama 3)");
        return;
    }
    if (t->eot_token >= c->s->model.vocab) {
        err(c, at(c, "train.eot_token"), "eot_token %" PRId64 " is outside the vocabulary of %" PRId64 " tokens",
            t->eot_token, c->s->model.vocab);
        sup_note(at(c, "model.vocab"), "token ids run from 0 to %" PRId64, c->s->model.vocab - 1);
    }
}

/* The schedule against the run: the floor under the peak, the warmup
 * inside the run's steps (the binary checks --steps / --warmup again), and
 * settings that mean nothing for the schedule chosen. */
static void schedule_rules(checker *c) {
    const fe_train *t = &c->s->train;
    char a[32], b[32];
    if (t->min_lr > t->lr) {
        sup_loc loc = at(c, "train.min_lr");
        err(c, loc, "min_lr %s is above lr %s: the decay would raise the rate", sup_fmt_double(t->min_lr, a, sizeof a),
            sup_fmt_double(t->lr, b, sizeof b));
        sup_note(fe_given(c->s, "train.lr") ? at(c, "train.lr") : loc, "min_lr is the rate the decay ends at, "
                                                                       "at most lr (often lr / 10)");
    }
    if (t->warmup > t->steps) {
        sup_loc loc = at(c, "train.warmup");
        err(c, loc, "warmup %" PRId64 " steps is longer than the run (steps %" PRId64 ")", t->warmup, t->steps);
        sup_note(loc,
                 "use at most %" PRId64 " warmup steps, or more steps (the binary's --steps can "
                 "change both)",
                 t->steps);
    }
    bool decays = strcmp(t->schedule, "constant") != 0;
    if (!decays && fe_given(c->s, "train.min_lr"))
        sup_warning(at(c, "train.min_lr"), "min_lr has no effect with schedule constant");
    if (strcmp(t->schedule, "wsd") && fe_given(c->s, "train.wsd_decay"))
        sup_warning(at(c, "train.wsd_decay"), "wsd_decay has no effect without schedule wsd");
}

/* Gradient accumulation: global_batch sequences per optimizer step, whole
 * micro-steps of micro_batch each. */
static void accumulation_rules(checker *c) {
    const fe_train *t = &c->s->train;
    if (t->global_batch % t->micro_batch == 0) return;
    sup_loc loc = at(c, "train.global_batch");
    err(c, loc,
        "global_batch %" PRId64 " is not a multiple of micro_batch %" PRId64
        ": an optimizer step accumulates whole micro-steps",
        t->global_batch, t->micro_batch);
    int64_t lo = t->global_batch / t->micro_batch * t->micro_batch;
    if (lo > 0)
        sup_note(loc,
                 "legal values near it: %" PRId64 " (%" PRId64 " micro-steps) or %" PRId64 " (%" PRId64
                 "); any multiple of %" PRId64,
                 lo, lo / t->micro_batch, lo + t->micro_batch, lo / t->micro_batch + 1, t->micro_batch);
    else
        sup_note(loc, "legal values: %" PRId64 ", %" PRId64 ", %" PRId64 ", ... (multiples of micro_batch)",
                 t->micro_batch, 2 * t->micro_batch, 3 * t->micro_batch);
}

/* What codegen refuses, caught here at the key: RoPE rotates the pairs
 * (i, i + head_dim/2), so head_dim must be even. */
static void codegen_rules(checker *c) {
    const fe_model *m = &c->s->model;
    if (m->head_dim <= 0 || m->head_dim % 2 == 0) return;
    const char *key = fe_given(c->s, "model.head_dim") ? "model.head_dim" : "model.heads";
    sup_loc loc = at(c, key);
    err(c, loc, "head_dim %" PRId64 " is odd; RoPE rotates pairs of dims (i, i + head_dim/2)", m->head_dim);
    sup_note(loc, fe_given(c->s, "model.head_dim") ? "use an even head_dim, e.g. 'head_dim 64'"
                                                   : "head_dim = hidden / heads is odd: give an even head_dim "
                                                     "explicitly, e.g. 'head_dim 64'");
}

bool fe_check(fe_spec *spec) {
    if (!spec) return false;
    checker c = {.s = spec};
    static const char *const model_req[] = {"hidden", "layers", "heads", "vocab", "ffn"};
    static const char *const mesh_req[] = {"nodes", "devices_per_node"};
    static const char *const train_req[] = {"micro_batch", "seq_len"};
    bool has_model = block_present(&c, "model",
                                   "model NAME { hidden 2048 layers 16 heads 32 "
                                   "ffn 8192 vocab 128256 }");
    bool has_mesh = block_present(&c, "mesh", "mesh NAME { nodes 1 devices_per_node 8 }");
    bool has_train = block_present(&c, "train", "train { micro_batch 1 seq_len 16K }");
    if (has_model) require(&c, FE_B_MODEL, model_req, 5);
    if (has_mesh) require(&c, FE_B_MESH, mesh_req, 2);
    if (has_train) require(&c, FE_B_TRAIN, train_req, 2);
    check_range(&c, FE_B_MODEL, "model", (const char *)spec);
    check_range(&c, FE_B_MESH, "mesh", (const char *)spec);
    check_range(&c, FE_B_LINK, "mesh.intra", (const char *)&spec->mesh.intra);
    check_range(&c, FE_B_LINK, "mesh.inter", (const char *)&spec->mesh.inter);
    check_range(&c, FE_B_LINK, "mesh.host", (const char *)&spec->mesh.host);
    check_range(&c, FE_B_TRAIN, "train", (const char *)spec);
    if (c.nerr) return false;

    model_defaults(&c);
    model_rules(&c);
    rope_rules(&c);
    train_defaults(spec);
    mesh_defaults(&c);
    mlp_chunk_default(spec);
    static const char *const precisions[] = {"bf16", "fp32"};
    static const char *const optimizers[] = {"adamw"};
    static const char *const sequences[] = {"ulysses", "ring", "hybrid", "auto"};
    /* a2a: flat, auto, and the word of every registered variant (layout/) */
    const char *a2as[LAYOUT_MAX_STRATEGIES + 2] = {"flat"};
    int na2a = 1, nstrat;
    const layout_strategy *strat = layout_strategies(&nstrat);
    for (int i = 0; i < nstrat; i++)
        if (strat[i].key && !strcmp(strat[i].key, "a2a")) a2as[na2a++] = strat[i].word;
    a2as[na2a++] = "auto";
    one_of(&c, "train.precision", spec->train.precision, precisions, 2);
    one_of(&c, "train.optimizer", spec->train.optimizer, optimizers, 1);
    one_of(&c, "layout.sequence", spec->layout.sequence, sequences, 4);
    one_of(&c, "layout.a2a", spec->layout.a2a, a2as, na2a);
    static const char *const recomputes[] = {"none", "selective", "full", "auto"};
    one_of(&c, "train.recompute", spec->train.recompute, recomputes, 4);
    static const char *const offloads[] = {"none", "activations", "optimizer", "all", "auto"};
    one_of(&c, "train.offload", spec->train.offload, offloads, 5);
    offload_rules(&c);
    chunk_rules(&c);
    static const char *const packings[] = {"sequential", "balanced"};
    one_of(&c, "train.packing", spec->train.packing, packings, 2);
    static const char *const schedules[] = {"constant", "cosine", "linear", "wsd"};
    one_of(&c, "train.schedule", spec->train.schedule, schedules, 4);
    if (c.nerr) return false;
    document_rules(&c);
    schedule_rules(&c);
    accumulation_rules(&c);
    codegen_rules(&c);
    size_rules(&c);
    if (c.nerr) return false;
    if (!fe_check_layout(spec, &c.nerr)) return false;
    /* Whether the layout fits the device is the memory plan's call, after
     * the pipeline (api/basp.c: basp_compile, basp_memory). */
    return c.nerr == 0;
}
