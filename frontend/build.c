/* build.c — turns parsed entries into an fe_spec: the key tables, value
 * type checking, the location table, imports, and the fe_parse_* entry
 * points.  Range and cross-key rules live in sema.c. */
#define _XOPEN_SOURCE 700 /* realpath */
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"

const char *const fe_block_names[] = {"model", "mesh", "train", "layout", "link"};

#define F(field)    offsetof(fe_spec, field)
#define NAME(field) F(field), sizeof(((fe_spec *)0)->field)
#define I64(field)  F(field), 8
#define I32(field)  F(field), 4

static const fe_keydef model_keys[] = {
    {"hidden", FE_K_COUNT, I64(model.hidden), "hidden 2048"},
    {"layers", FE_K_COUNT, I64(model.layers), "layers 16"},
    {"heads", FE_K_COUNT, I64(model.heads), "heads 32"},
    {"kv_heads", FE_K_COUNT, I64(model.kv_heads), "kv_heads 8"},
    {"head_dim", FE_K_COUNT, I64(model.head_dim), "head_dim 64"},
    {"ffn", FE_K_COUNT, I64(model.ffn), "ffn 8192"},
    {"vocab", FE_K_COUNT, I64(model.vocab), "vocab 128256"},
    {"rope_theta", FE_K_FLOAT, F(model.rope_theta), 0, "rope_theta 500000"},
    {"rope_scaling", FE_K_NAME, NAME(model.rope_scaling), "rope_scaling llama3"},
    {"rope_factor", FE_K_FLOAT, F(model.rope_factor), 0, "rope_factor 8"},
    {"rope_low_freq_factor", FE_K_FLOAT, F(model.rope_low_freq_factor), 0, "rope_low_freq_factor 1"},
    {"rope_high_freq_factor", FE_K_FLOAT, F(model.rope_high_freq_factor), 0, "rope_high_freq_factor 4"},
    {"rope_original_max_pos", FE_K_COUNT, I64(model.rope_original_max_pos), "rope_original_max_pos 8192"},
    {"norm_eps", FE_K_FLOAT, F(model.norm_eps), 0, "norm_eps 1e-5"},
    {"tie_embeddings", FE_K_BOOL, F(model.tie_embeddings), 0, "tie_embeddings true"},
    {"qkv_bias", FE_K_BOOL, F(model.qkv_bias), 0, "qkv_bias true"},
    {"qk_norm", FE_K_BOOL, F(model.qk_norm), 0, "qk_norm true"},
};
static const fe_keydef mesh_keys[] = {
    {"nodes", FE_K_COUNT, I64(mesh.nodes), "nodes 2"},
    {"devices_per_node", FE_K_COUNT, I64(mesh.devices_per_node), "devices_per_node 4"},
    {"nics_per_node", FE_K_COUNT, I64(mesh.nics_per_node), "nics_per_node 1"},
    {"cores_per_node", FE_K_COUNT, I64(mesh.cores_per_node), "cores_per_node 4"},
    {"placement", FE_K_PLACEMENT, NAME(mesh.placement), "placement round_robin"},
    {"device", FE_K_NAME, NAME(mesh.device), "device a100_80gb"},
    {"memory", FE_K_BYTES, F(mesh.device_mem), 0, "memory 80GB"},
    {"host_memory", FE_K_BYTES, F(mesh.host_mem), 0, "host_memory 2TB"},
    {"link", FE_K_LINK, 0, 0, "link intra nvlink bandwidth 300GB/s latency 2us"},
};
static const fe_keydef train_keys[] = {
    {"micro_batch", FE_K_COUNT, I64(train.micro_batch), "micro_batch 2"},
    {"seq_len", FE_K_COUNT, I64(train.seq_len), "seq_len 16K"},
    {"global_batch", FE_K_COUNT, I64(train.global_batch), "global_batch 64"},
    {"precision", FE_K_NAME, NAME(train.precision), "precision bf16"},
    {"zero", FE_K_COUNT, I32(train.zero), "zero 1"},
    {"optimizer", FE_K_NAME, NAME(train.optimizer), "optimizer adamw"},
    {"lr", FE_K_FLOAT, F(train.lr), 0, "lr 3e-4"},
    {"schedule", FE_K_NAME, NAME(train.schedule), "schedule cosine"},
    {"warmup", FE_K_COUNT, I64(train.warmup), "warmup 2000"},
    {"min_lr", FE_K_FLOAT, F(train.min_lr), 0, "min_lr 3e-5"},
    {"wsd_decay", FE_K_FLOAT, F(train.wsd_decay), 0, "wsd_decay 0.2"},
    {"weight_decay", FE_K_FLOAT, F(train.weight_decay), 0, "weight_decay 0.1"},
    {"beta1", FE_K_FLOAT, F(train.beta1), 0, "beta1 0.9"},
    {"beta2", FE_K_FLOAT, F(train.beta2), 0, "beta2 0.95"},
    {"eps", FE_K_FLOAT, F(train.eps), 0, "eps 1e-8"},
    {"grad_clip", FE_K_FLOAT, F(train.grad_clip), 0, "grad_clip 1.0"},
    {"steps", FE_K_COUNT, I64(train.steps), "steps 100"},
    {"seed", FE_K_COUNT, I64(train.seed), "seed 1234"},
    {"mlp_chunk", FE_K_COUNT, I64(train.mlp_chunk), "mlp_chunk 4096"},
    {"attention_chunks", FE_K_CHUNKS, I64(train.attention_chunks), "attention_chunks 4"},
    {"recompute", FE_K_NAME, NAME(train.recompute), "recompute selective"},
    {"offload", FE_K_NAME, NAME(train.offload), "offload activations"},
    {"documents", FE_K_BOOL, F(train.documents), 0, "documents on"},
    {"overlap", FE_K_BOOL, F(train.overlap), 0, "overlap on"},
    {"fuse_loss", FE_K_BOOL, F(train.fuse_loss), 0, "fuse_loss off"},
    {"fuse_elem", FE_K_BOOL, F(train.fuse_elem), 0, "fuse_elem off"},
    {"fuse_rope", FE_K_BOOL, F(train.fuse_rope), 0, "fuse_rope off"},
    {"attention_lse", FE_K_BOOL, F(train.attention_lse), 0, "attention_lse off"},
    {"eot_token", FE_K_COUNT, I64(train.eot_token), "eot_token 50256"},
    {"packing", FE_K_NAME, NAME(train.packing), "packing balanced"},
};
static const fe_keydef layout_keys[] = {
    {"sequence", FE_K_NAME, NAME(layout.sequence), "sequence ulysses"},
    {"batch_aware", FE_K_BATCH, F(layout.batch_aware), 0, "batch_aware auto"},
    {"ring_degree", FE_K_COUNT, I64(layout.ring_degree), "ring_degree 2"},
    {"a2a", FE_K_NAME, NAME(layout.a2a), "a2a flat"},
    {"group_sizes", FE_K_LIST, NAME(layout.group_sizes), "group_sizes \"1 2 4\""},
};
/* Offsets relative to the fe_link; build.c adds the link's own offset. */
static const fe_keydef link_keys[] = {
    {"bandwidth", FE_K_BW, offsetof(fe_link, bandwidth), 0, "bandwidth 300GB/s"},
    {"latency", FE_K_TIME, offsetof(fe_link, latency), 0, "latency 2us"},
    {"efficiency", FE_K_FLOAT, offsetof(fe_link, efficiency), 0, "efficiency 0.8"},
};

const fe_keydef *fe_block_keys(fe_block_kind b, int *n) {
    static const struct {
        const fe_keydef *keys;
        int n;
    } tab[] = {
        {model_keys, sizeof model_keys / sizeof model_keys[0]},
        {mesh_keys, sizeof mesh_keys / sizeof mesh_keys[0]},
        {train_keys, sizeof train_keys / sizeof train_keys[0]},
        {layout_keys, sizeof layout_keys / sizeof layout_keys[0]},
        {link_keys, sizeof link_keys / sizeof link_keys[0]},
    };
    if (b > FE_B_LINK) {
        *n = 0;
        return NULL;
    }
    *n = tab[b].n;
    return tab[b].keys;
}

const fe_keydef *fe_key_find(fe_block_kind b, const char *name) {
    int n;
    const fe_keydef *k = fe_block_keys(b, &n);
    for (int i = 0; i < n; i++)
        if (!strcmp(k[i].name, name)) return &k[i];
    return NULL;
}

const char *fe_key_closest(fe_block_kind b, const char *name) {
    int n;
    const fe_keydef *k = fe_block_keys(b, &n);
    enum { MAXC = 32 };
    const char *cands[MAXC];
    if (n > MAXC - 3) n = MAXC - 3;
    for (int i = 0; i < n; i++) cands[i] = k[i].name;
    /* A link attribute written outside a link is still worth suggesting. */
    if (b == FE_B_MESH)
        for (int i = 0; i < 3; i++) cands[n++] = link_keys[i].name;
    return sup_closest(name, cands, n);
}

/* ---- locations ------------------------------------------------------------ */

fe_keyloc *fe_loc_find(const fe_spec *spec, const char *key) {
    for (int i = 0; i < spec->nlocs; i++)
        if (!strcmp(spec->locs[i].key, key)) return &spec->locs[i];
    return NULL;
}

void fe_loc_set(fe_spec *spec, const char *key, sup_loc key_loc, sup_loc loc) {
    fe_keyloc *kl = fe_loc_find(spec, key);
    if (!kl) {
        SUP_GROW(spec->locs, spec->nlocs, spec->caplocs);
        kl = &spec->locs[spec->nlocs++];
        snprintf(kl->key, sizeof kl->key, "%s", key);
    }
    kl->loc = loc;
    kl->key_loc = key_loc;
}

/* Drops "mesh" and "mesh.*" when a new mesh block replaces the old one. */
void fe_loc_drop_prefix(fe_spec *spec, const char *prefix) {
    size_t n = strlen(prefix);
    int out = 0;
    for (int i = 0; i < spec->nlocs; i++) {
        const char *k = spec->locs[i].key;
        if (!strncmp(k, prefix, n) && (k[n] == '\0' || k[n] == '.')) continue;
        spec->locs[out++] = spec->locs[i];
    }
    spec->nlocs = out;
}

sup_loc fe_spec_loc(const fe_spec *spec, const char *key) {
    if (!spec || !key) return sup_noloc();
    const fe_keyloc *kl = fe_loc_find(spec, key);
    if (kl) return kl->loc;
    /* "mesh.inter.bandwidth" → "mesh.inter" → "mesh" */
    char buf[48];
    snprintf(buf, sizeof buf, "%s", key);
    for (char *dot; (dot = strrchr(buf, '.')) != NULL;) {
        *dot = '\0';
        if ((kl = fe_loc_find(spec, buf)) != NULL) return kl->loc;
    }
    return sup_noloc();
}

/* ---- builder ------------------------------------------------------------ */

void fe_b_error(fe_pctx *ctx) { ctx->nerrors++; }

void fe_value_free(fe_value *v) {
    free(v->str);
    v->str = NULL;
}

bool fe_b_copy_name(fe_pctx *ctx, char *dst, size_t size, const char *src, sup_loc loc) {
    size_t n = strlen(src);
    snprintf(dst, size, "%s", src);
    if (n < size) return true;
    sup_error(loc, "name too long (%zu characters, at most %zu)", n, size - 1);
    fe_b_error(ctx);
    return false;
}

static void reset_block(fe_spec *spec, fe_block_kind kind) {
    switch (kind) {
    case FE_B_MODEL: memset(&spec->model, 0, sizeof spec->model); break;
    case FE_B_MESH: memset(&spec->mesh, 0, sizeof spec->mesh); break;
    case FE_B_TRAIN: memset(&spec->train, 0, sizeof spec->train); break;
    case FE_B_LAYOUT: memset(&spec->layout, 0, sizeof spec->layout); break;
    default: break;
    }
}

/* A block replaces any earlier block of its kind (imports expand in place,
 * so "last one wins" is textual order). */
void fe_b_begin(fe_pctx *ctx, fe_block_kind kind, const char *kw, sup_loc kw_loc, const char *name, sup_loc name_loc) {
    ctx->block = kind;
    ctx->block_loc = kw_loc;
    ctx->link = 0;
    ctx->skip_block = false;
    ctx->body_start = ctx->spec->nlocs;
    ctx->hf_missing = 0; /* a `from` block cut short by a syntax error */
    free(ctx->hf_path);
    ctx->hf_path = NULL;
    if (kind == FE_B_UNKNOWN) {
        const char *cands[] = {"model", "mesh", "train", "layout", "import"};
        const char *near = sup_closest(kw, cands, 5);
        sup_error(kw_loc, "unknown block '%s'", kw);
        if (near)
            sup_note(kw_loc, "did you mean '%s'?", near);
        else
            sup_note(kw_loc, "blocks are model, mesh, train and layout");
        fe_b_error(ctx);
        ctx->skip_block = true;
        return;
    }
    snprintf(ctx->block_prefix, sizeof ctx->block_prefix, "%s", kw);
    reset_block(ctx->spec, kind);
    fe_loc_drop_prefix(ctx->spec, kw);
    fe_loc_set(ctx->spec, kw, kw_loc, kw_loc);
    char *dst = kind == FE_B_MODEL ? ctx->spec->model.name : kind == FE_B_MESH ? ctx->spec->mesh.name : NULL;
    if (dst) fe_b_copy_name(ctx, dst, FE_NAME_MAX, name ? name : "default", name_loc);
}

void fe_b_body(fe_pctx *ctx) { ctx->body_start = ctx->spec->nlocs; }

const char *const fe_link_names[4] = {"", "intra", "inter", "host"};

fe_link *fe_mesh_link(fe_spec *spec, int w) {
    return w == 1 ? &spec->mesh.intra : w == 2 ? &spec->mesh.inter : &spec->mesh.host;
}

/* "model.hidden", "mesh.intra.latency" */
static void lockey(char *buf, size_t n, const fe_pctx *ctx, const char *key) {
    if (ctx->block == FE_B_MESH && ctx->link && ctx->link != FE_LINK_BAD)
        snprintf(buf, n, "mesh.%s.%s", fe_link_names[ctx->link], key);
    else
        snprintf(buf, n, "%s.%s", ctx->block_prefix, key);
}

static bool duplicate(fe_pctx *ctx, const char *key, sup_loc key_loc) {
    for (int i = ctx->body_start; i < ctx->spec->nlocs; i++) {
        if (strcmp(ctx->spec->locs[i].key, key)) continue;
        const char *shortkey = strchr(key, '.') + 1;
        sup_error(key_loc, "duplicate key '%s'", shortkey);
        sup_note(ctx->spec->locs[i].key_loc, "previous definition here; remove one of them");
        fe_b_error(ctx);
        return true;
    }
    return false;
}

static void unknown_key(fe_pctx *ctx, const char *key, sup_loc loc) {
    const char *blk = fe_block_names[ctx->block];
    const fe_keydef *lk = fe_key_find(FE_B_LINK, key);
    if (ctx->block == FE_B_MESH && lk) {
        sup_error(loc, "'%s' belongs to a link but no link precedes it", key);
        sup_note(loc,
                 "write it after 'link intra KIND' or 'link inter KIND', e.g. "
                 "'link intra nvlink %s'",
                 lk->example);
    } else {
        const char *near = fe_key_closest(ctx->block, key);
        sup_error(loc, "unknown key '%s' in %s block", key, blk);
        if (near)
            sup_note(loc, "did you mean '%s'?", near);
        else
            sup_note(loc, "see frontend/README.md for the keys of a %s block", blk);
    }
    fe_b_error(ctx);
}

/* entry = IDENT value */
void fe_b_entry(fe_pctx *ctx, const char *key, sup_loc key_loc, fe_value *val) {
    if (ctx->skip_block) return;
    const fe_keydef *kd = NULL;
    if (ctx->block == FE_B_MESH && ctx->link) kd = fe_key_find(FE_B_LINK, key);
    if (kd && ctx->link == FE_LINK_BAD) return; /* attributes of a link already diagnosed */
    if (!kd) {
        ctx->link = 0; /* a non-link key ends the link's attributes */
        kd = fe_key_find(ctx->block, key);
    }
    if (!kd) {
        unknown_key(ctx, key, key_loc);
        return;
    }
    if (kd->kind == FE_K_LINK) {
        sup_error(key_loc, "'link' takes a direction and a kind");
        sup_note(key_loc, "write it like '%s'", kd->example);
        fe_b_error(ctx);
        return;
    }
    char lk[48];
    lockey(lk, sizeof lk, ctx, key);
    if (duplicate(ctx, lk, key_loc)) return;
    fe_b_store(ctx, kd, lk, key_loc, val);
}

/* entry = "link" IDENT IDENT */
void fe_b_link(fe_pctx *ctx, sup_loc link_loc, const char *which, sup_loc which_loc, const char *kind,
               sup_loc kind_loc) {
    if (ctx->skip_block) return;
    ctx->link = FE_LINK_BAD; /* until the link proves good */
    if (ctx->block != FE_B_MESH) {
        sup_error(link_loc, "'link' is only allowed in a mesh block");
        sup_note(link_loc, "move it into the mesh block");
        fe_b_error(ctx);
        return;
    }
    int w = 0;
    for (int i = 1; i <= 3; i++)
        if (!strcmp(which, fe_link_names[i])) w = i;
    if (!w) {
        const char *near = sup_closest(which, fe_link_names + 1, 3);
        sup_error(which_loc, "unknown link '%s'", which);
        sup_note(which_loc, "%s%s%s",
                 near ? "did you mean '"
                      : "links are 'intra' (inside a node), "
                        "'inter' (between nodes) and 'host' (a device to its node's memory)",
                 near ? near : "", near ? "'?" : "");
        fe_b_error(ctx);
        return;
    }
    if (fe_key_find(FE_B_LINK, kind)) {
        sup_error(kind_loc, "missing link kind before '%s'", kind);
        sup_note(kind_loc, "name the interconnect, e.g. 'link %s nvlink %s ...'", which, kind);
        fe_b_error(ctx);
        return;
    }
    char lk[48];
    snprintf(lk, sizeof lk, "mesh.%s", which);
    if (duplicate(ctx, lk, link_loc)) return;
    fe_link *l = fe_mesh_link(ctx->spec, w);
    fe_b_copy_name(ctx, l->kind, sizeof l->kind, kind, kind_loc);
    fe_loc_set(ctx->spec, lk, link_loc, kind_loc);
    ctx->link = w;
}

/* ---- imports and json models ------------------------------------------- */

enum { FE_IMPORT_DEPTH_MAX = 16 };

char *fe_path_join(const char *from, const char *path) {
    const char *slash = from ? strrchr(from, '/') : NULL;
    if (path[0] == '/' || !slash) return sup_xstrdup(path);
    size_t dn = (size_t)(slash - from) + 1, pn = strlen(path);
    char *out = sup_xmalloc(dn + pn + 1);
    memcpy(out, from, dn);
    memcpy(out + dn, path, pn + 1);
    return out;
}

/* Reports "import cycle: a.basp → b.basp → a.basp" when `real` is already
 * being parsed somewhere up the import chain. */
static bool import_cycle(fe_pctx *ctx, const char *real, const char *name, sup_loc loc) {
    const fe_pctx *start = NULL;
    for (const fe_pctx *p = ctx; p; p = p->parent)
        if (p->real && !strcmp(p->real, real)) start = p;
    if (!start) return false;
    sup_buf chain = {0};
    const fe_pctx *stack[FE_IMPORT_DEPTH_MAX + 2];
    int n = 0;
    for (const fe_pctx *p = ctx; p && n < FE_IMPORT_DEPTH_MAX + 1; p = p->parent) {
        stack[n++] = p;
        if (p == start) break;
    }
    while (n > 0) sup_buf_printf(&chain, "%s -> ", stack[--n]->file);
    sup_buf_puts(&chain, name);
    sup_error(loc, "import cycle: %s", chain.data);
    sup_note(loc, "remove this import or move the shared blocks into a third file");
    sup_buf_free(&chain);
    fe_b_error(ctx);
    return true;
}

/* The hook is the compilation context's (support.h), set by the embedding
 * program (basp_set_input_hook). */
void fe_set_input_hook(fe_input_fn fn, void *ud) {
    sup_context *ctx = sup_ctx();
    ctx->input_hook = fn;
    ctx->input_ud = ud;
}

void fe_note_input(const char *path) {
    const sup_context *ctx = sup_ctx();
    if (ctx->input_hook && path) ctx->input_hook(path, ctx->input_ud);
}

/* A file that `import` or `from` may name: its name, and the name it
 * resolves to through symbolic links, end in `ext` (".basp", ".json").
 * Both are checked before the file is opened, so that a spec cannot make
 * the compiler read, and show in its diagnostics, a file of another kind
 * (/proc/self/environ, a key file); sup_read_file then refuses anything
 * that is not a regular text file.  False: reported at loc. */
bool fe_source_kind_ok(fe_pctx *ctx, const char *full, const char *ext, const char *what, sup_loc loc) {
    size_t n = strlen(full), e = strlen(ext);
    char *real = realpath(full, NULL);
    size_t rn = real ? strlen(real) : 0;
    bool named = n > e && !strcmp(full + n - e, ext) && full[n - e - 1] != '/';
    bool resolved = !real || (rn > e && !strcmp(real + rn - e, ext));
    if (!named || !resolved) {
        if (!named)
            sup_error(loc, "cannot %s '%s': not a %s file", what, full, ext);
        else
            sup_error(loc, "cannot %s '%s': it resolves to '%s', not a %s file", what, full, real, ext);
        sup_note(loc, "%s",
                 !strcmp(ext, ".basp") ? "an import names a layout spec: a regular text file whose name "
                                         "ends in .basp"
                                       : "'from' names a Hugging Face config: a regular text file whose "
                                         "name ends in .json");
        fe_b_error(ctx);
    }
    free(real);
    return named && resolved;
}

/* item = "import" STRING — parsed in place with a nested parser. */
void fe_b_import(fe_pctx *ctx, const char *path, sup_loc loc) {
    if (ctx->bad_string) {
        ctx->bad_string = false;
        return;
    }
    if (ctx->depth >= FE_IMPORT_DEPTH_MAX) {
        sup_error(loc, "imports nested too deeply (more than %d levels)", FE_IMPORT_DEPTH_MAX);
        sup_note(loc, "flatten the import chain");
        fe_b_error(ctx);
        return;
    }
    char *full = fe_path_join(ctx->file, path);
    fe_note_input(full);
    if (!fe_source_kind_ok(ctx, full, ".basp", "import", loc)) {
        free(full);
        return;
    }
    size_t len;
    char *text = sup_read_file(full, &len);
    if (!text) {
        int e = errno;
        sup_error(loc, "cannot import '%s': %s", full, sup_read_why(e));
        if (e == ENOENT) sup_note(loc, "imports are relative to the directory of the importing file");
        fe_b_error(ctx);
        free(full);
        return;
    }
    char *real = realpath(full, NULL);
    if (!real) real = sup_xstrdup(full);
    fe_pctx *root = ctx;
    while (root->parent) root = root->parent;
    bool seen = false;
    for (int i = 0; i < root->nimported && !seen; i++) seen = !strcmp(root->imported[i], real);
    if (!import_cycle(ctx, real, full, loc) && !seen) {
        if (root->nimported == root->capimported) {
            root->capimported = root->capimported ? 2 * root->capimported : 8;
            root->imported = sup_xrealloc(root->imported, (size_t)root->capimported * sizeof *root->imported);
        }
        root->imported[root->nimported++] = sup_xstrdup(real);
        /* The child counts on from our errors so the error cap is global. */
        fe_pctx child = {.spec = ctx->spec,
                         .parent = ctx,
                         .depth = ctx->depth + 1,
                         .real = real,
                         .line = 1,
                         .col = 1,
                         .nerrors = ctx->nerrors};
        child.file = sup_source_add(full, text, len);
        if (fe_run_parser(&child, text, len) && child.nerrors == ctx->nerrors) child.nerrors++;
        free(child.hf_path);
        ctx->nerrors = child.nerrors;
    }
    free(real);
    free(text);
    free(full);
}

/* model-from = "model" NAME? "from" STRING */
void fe_b_model_from(fe_pctx *ctx, const char *path, sup_loc loc, bool named) {
    if (ctx->bad_string) {
        ctx->bad_string = false;
        return;
    }
    char *full = fe_path_join(ctx->file, path);
    if (!named) {
        char name[FE_NAME_MAX];
        fe_hf_name(full, name, sizeof name);
        snprintf(ctx->spec->model.name, FE_NAME_MAX, "%s", name);
    }
    fe_hf_load(ctx, full, loc);
    free(full);
}

/* ---- entry points ----------------------------------------------------- */

static fe_spec *parse_text(const char *name, const char *text, size_t len, const char *real) {
    fe_spec *spec = sup_xcalloc(1, sizeof *spec);
    spec->file = sup_source_add(name, text, len);
    fe_pctx ctx = {.spec = spec, .file = spec->file, .line = 1, .col = 1};
    ctx.real = real ? sup_xstrdup(real) : NULL;
    int rc = fe_run_parser(&ctx, text, len);
    for (int i = 0; i < ctx.nimported; i++) free(ctx.imported[i]);
    free(ctx.imported);
    free(ctx.real);
    free(ctx.hf_path);
    if (rc != 0 || ctx.nerrors > 0) {
        fe_spec_free(spec);
        return NULL;
    }
    return spec;
}

fe_spec *fe_parse_string_unchecked(const char *name, const char *text) {
    if (!text) return NULL;
    return parse_text(name ? name : "<string>", text, strlen(text), NULL);
}

fe_spec *fe_parse_file_unchecked(const char *path) {
    fe_note_input(path);
    size_t len;
    char *text = sup_read_file(path, &len);
    if (!text) {
        sup_error(sup_noloc(), "cannot read '%s': %s", path, sup_read_why(errno));
        return NULL;
    }
    char *real = realpath(path, NULL);
    fe_spec *spec = parse_text(path, text, len, real);
    free(real);
    free(text);
    return spec;
}

static fe_spec *checked(fe_spec *spec) {
    if (spec && !fe_check(spec)) {
        fe_spec_free(spec);
        return NULL;
    }
    return spec;
}

fe_spec *fe_parse_file(const char *path) { return checked(fe_parse_file_unchecked(path)); }

fe_spec *fe_parse_string(const char *name, const char *text) { return checked(fe_parse_string_unchecked(name, text)); }

void fe_spec_free(fe_spec *spec) {
    if (!spec) return;
    free(spec->locs);
    free(spec);
}

fe_spec *fe_spec_copy(const fe_spec *s) {
    fe_spec *c = malloc(sizeof *c);
    if (!c) return NULL;
    *c = *s;
    int cap = s->caplocs > s->nlocs ? s->caplocs : s->nlocs;
    c->caplocs = cap > 0 ? cap : 1;
    c->locs = malloc(sizeof *c->locs * (size_t)c->caplocs);
    if (!c->locs) {
        free(c);
        return NULL;
    }
    if (s->nlocs) memcpy(c->locs, s->locs, sizeof *c->locs * (size_t)s->nlocs);
    return c;
}

int64_t fe_world(const fe_spec *spec) { return spec->mesh.nodes * spec->mesh.devices_per_node; }
