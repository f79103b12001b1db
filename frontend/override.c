/* override.c — `--set block.key=value`: changes one key of a parsed spec.
 *
 * The assignment is registered as a pseudo source file "<--set>" so its
 * diagnostics carry a caret into the override text, and the value is read
 * by the language's own lexer, so `--set mesh.inter.bandwidth=100Gb/s` means
 * exactly what the same text means in a file.  The key's location becomes
 * the override's, so later diagnostics point at what the user typed last. */
#include <string.h>

#include "ast.h"

/* The registry keeps the first text under a name; give every distinct
 * override its own name so carets always point into the right text. */
static const char *register_text(const char *text) {
    char name[32] = "<--set>";
    for (int i = 2; i < 10000; i++) {
        const char *old = sup_source_text(name);
        if (!old || !strcmp(old, text)) break;
        snprintf(name, sizeof name, "<--set#%d>", i);
    }
    return sup_source_add(name, text, strlen(text));
}

static bool fail(fe_pctx *ctx) {
    fe_b_error(ctx);
    return false;
}

/* Resolves "block", "block.key" or "mesh.intra.key" into a key definition
 * and its location key ("mesh.intra.bandwidth"); `kind` links have no
 * keydef (*kd == NULL, *is_kind). */
static bool resolve(fe_pctx *ctx, const char *path, int plen, const fe_keydef **kd, char *lk, size_t lkn,
                    bool *is_kind) {
    char parts[3][48] = {{0}};
    int starts[3] = {0}, np = 0, beg = 0;
    for (int i = 0; i <= plen; i++) {
        if (i < plen && path[i] != '.') continue;
        if (np == 3) {
            np++;
            break;
        }
        snprintf(parts[np], sizeof parts[np], "%.*s", i - beg, path + beg);
        starts[np++] = beg;
        beg = i + 1;
    }
    sup_loc loc = {ctx->file, 1, 1, plen > 0 ? plen : 1};
    const char *blocks[] = {"model", "mesh", "train", "layout"};
    int b = 0;
    while (b < 4 && strcmp(parts[0], blocks[b])) b++;
    if (b == 4) {
        loc.len = (int)strlen(parts[0]) > 0 ? (int)strlen(parts[0]) : 1;
        const char *near = sup_closest(parts[0], blocks, 4);
        sup_error(loc, "unknown block '%s'", parts[0]);
        if (near)
            sup_note(loc, "did you mean '%s'?", near);
        else
            sup_note(loc, "blocks are model, mesh, train and layout");
        return fail(ctx);
    }
    ctx->block = (fe_block_kind)b;
    snprintf(ctx->block_prefix, sizeof ctx->block_prefix, "%s", blocks[b]);
    int lw = 0;
    for (int i = 1; b == FE_B_MESH && np >= 2 && i <= 3; i++)
        if (!strcmp(parts[1], fe_link_names[i])) lw = i;
    bool link = lw > 0;
    int want = link ? 3 : 2, ki = want - 1;
    if (np != want) {
        sup_error(loc, "expected %s", link ? "mesh.intra.KEY, mesh.inter.KEY or mesh.host.KEY" : "BLOCK.KEY");
        sup_note(loc, "e.g. --set train.micro_batch=4 or --set mesh.inter.bandwidth=100Gb/s");
        return fail(ctx);
    }
    loc.col = starts[ki] + 1;
    loc.len = (int)strlen(parts[ki]) > 0 ? (int)strlen(parts[ki]) : 1;
    fe_block_kind kb = link ? FE_B_LINK : (fe_block_kind)b;
    *kd = fe_key_find(kb, parts[ki]);
    *is_kind = link && !strcmp(parts[ki], "kind");
    if ((!*kd && !*is_kind) || (*kd && (*kd)->kind == FE_K_LINK)) {
        const char *near = *kd ? NULL : fe_key_closest(kb, parts[ki]);
        sup_error(loc, "unknown key '%s' in %s", parts[ki], link ? "a link" : blocks[b]);
        if (near)
            sup_note(loc, "did you mean '%s'?", near);
        else if (b == FE_B_MESH)
            sup_note(loc, "links are set as mesh.intra.KEY / mesh.inter.KEY / mesh.host.KEY (kind, "
                          "bandwidth, latency, efficiency)");
        else
            sup_note(loc, "see frontend/README.md for the keys of a %s block", blocks[b]);
        return fail(ctx);
    }
    if (link)
        snprintf(lk, lkn, "mesh.%.5s%s%.20s", parts[1], *is_kind ? "" : ".", *is_kind ? "" : parts[2]);
    else
        snprintf(lk, lkn, "%s.%.40s", blocks[b], parts[1]);
    ctx->link = lw;
    return true;
}

/* ring_degree belongs to sequence hybrid: an override that sets another
 * sequence strategy (ulysses, ring) replaces the hybrid, its ring_degree
 * with it, so `--set layout.sequence=ulysses` works on a hybrid spec.  A
 * ring_degree set after it is kept (and refused by fe_check); with
 * sequence auto it still narrows the hybrid candidates. */
static void drop_ring_degree(fe_spec *spec, const char *lockey) {
    const char *seq = spec->layout.sequence;
    if (strcmp(lockey, "layout.sequence") || !strcmp(seq, "hybrid") || !strcmp(seq, "auto")) return;
    fe_loc_drop_prefix(spec, "layout.ring_degree");
    spec->layout.ring_degree = 0;
}

bool fe_override(fe_spec *spec, const char *assignment) {
    if (!spec || !assignment) return false;
    fe_pctx ctx = {.spec = spec, .file = register_text(assignment), .line = 1, .col = 1, .is_override = true};
    const char *eq = strchr(assignment, '=');
    if (!eq) {
        sup_loc loc = {ctx.file, 1, 1, strlen(assignment) ? (int)strlen(assignment) : 1};
        sup_error(loc, "expected BLOCK.KEY=VALUE");
        sup_note(loc, "e.g. --set train.micro_batch=4");
        return false;
    }
    int plen = (int)(eq - assignment);
    const fe_keydef *kd = NULL;
    char lk[48];
    bool is_kind = false;
    if (!resolve(&ctx, assignment, plen, &kd, lk, sizeof lk, &is_kind)) return false;
    sup_loc key_loc = {ctx.file, 1, 1, plen > 0 ? plen : 1};
    fe_value v;
    if (!fe_lex_value(&ctx, eq + 1, plen + 2, &v)) {
        fe_value_free(&v);
        return false;
    }
    bool ok;
    if (is_kind) {
        fe_link *l = fe_mesh_link(spec, ctx.link);
        ok = v.kind == FE_V_IDENT && fe_b_copy_name(&ctx, l->kind, sizeof l->kind, v.str, v.loc);
        if (v.kind != FE_V_IDENT) {
            sup_error(v.loc, "a link kind is a name, e.g. nvlink or ib");
            sup_note(v.loc, "e.g. --set mesh.inter.kind=ib");
        }
        if (ok) fe_loc_set(spec, lk, key_loc, v.loc);
    } else {
        ok = fe_b_store(&ctx, kd, lk, key_loc, &v);
    }
    if (ok) drop_ring_degree(spec, lk);
    fe_value_free(&v);
    return ok && ctx.nerrors == 0;
}

/* ---- typed changes (fe_spec_patched) -------------------------------------
 * The planner's candidates are specs with a few keys changed.  Each key is
 * stored by the same path a --set of it takes (resolve, fe_b_store,
 * drop_ring_degree), from a typed value: the spec it gives is the one the
 * same --set would give, with no text to format and read back. */

/* Where the stored keys point: a source of its own, so a diagnostic about
 * a derived spec never carets into the user's text.  Looked up each time
 * (sup_source_add returns the registered one): sup_source_reset may have
 * freed an earlier registration, and nothing here outlives a run. */
static const char *patch_file(void) { return sup_source_add("<derived>", "", 0); }

static bool patch_store(fe_spec *spec, const char *key, fe_value *v) {
    fe_pctx ctx = {.spec = spec, .file = patch_file(), .line = 1, .col = 1, .is_override = true};
    const fe_keydef *kd = NULL;
    char lk[48];
    bool is_kind = false;
    if (!resolve(&ctx, key, (int)strlen(key), &kd, lk, sizeof lk, &is_kind) || !kd) return false;
    sup_loc loc = {ctx.file, 1, 1, 1};
    v->loc = loc;
    bool ok = fe_b_store(&ctx, kd, lk, loc, v);
    if (ok) drop_ring_degree(spec, lk);
    return ok && ctx.nerrors == 0;
}

static bool patch_int(fe_spec *spec, const char *key, int64_t n) {
    fe_value v = {.kind = FE_V_NUM, .num = (double)n, .inum = n, .is_int = true, .unit = FE_U_NONE};
    return patch_store(spec, key, &v);
}

static bool patch_name(fe_spec *spec, const char *key, const char *name) {
    char word[FE_NAME_MAX];
    snprintf(word, sizeof word, "%s", name);
    fe_value v = {.kind = FE_V_IDENT, .str = word};
    return patch_store(spec, key, &v);
}

/* batch_aware: off for one group, groups G for more. */
static bool patch_groups(fe_spec *spec, int groups) {
    if (groups <= 1) return patch_name(spec, "layout.batch_aware", "off");
    fe_value v = {.kind = FE_V_GROUPS, .num = groups, .inum = groups, .is_int = true, .unit = FE_U_NONE};
    return patch_store(spec, "layout.batch_aware", &v);
}

/* In one fixed order: the layout first (sequence before ring_degree,
 * which a non-hybrid sequence drops), then the train and mesh keys. */
static bool patch_apply(fe_spec *c, const fe_spec_patch *p) {
    bool ok = true;
    if (ok && p->sequence) ok = patch_name(c, "layout.sequence", p->sequence);
    if (ok && p->a2a) ok = patch_name(c, "layout.a2a", p->a2a);
    if (ok && p->batch_aware) ok = patch_groups(c, p->batch_aware);
    if (ok && p->ring_degree) ok = patch_int(c, "layout.ring_degree", p->ring_degree);
    if (ok && p->zero) ok = patch_int(c, "train.zero", p->zero);
    if (ok && p->recompute) ok = patch_name(c, "train.recompute", p->recompute);
    if (ok && p->offload) ok = patch_name(c, "train.offload", p->offload);
    if (ok && p->set_mlp_chunk) ok = patch_int(c, "train.mlp_chunk", p->mlp_chunk);
    if (ok && p->attention_chunks) ok = patch_int(c, "train.attention_chunks", p->attention_chunks);
    if (ok && p->nodes) ok = patch_int(c, "mesh.nodes", p->nodes);
    if (ok && p->micro_batch) ok = patch_int(c, "train.micro_batch", p->micro_batch);
    if (ok && p->seq_len) ok = patch_int(c, "train.seq_len", p->seq_len);
    return ok;
}

fe_spec *fe_spec_patched(const fe_spec *spec, const fe_spec_patch *p) {
    fe_spec *c = spec ? fe_spec_copy(spec) : NULL;
    if (c && (!p || patch_apply(c, p)) && fe_check(c)) return c;
    fe_spec_free(c);
    return NULL;
}

static void fmt_key(char *buf, size_t n, size_t *len, const char *key, const char *val) {
    if (*len >= n) return;
    int k = snprintf(buf + *len, n - *len, "%s%s=%s", *len ? " --set " : "", key, val);
    if (k > 0) *len += (size_t)k;
}

static void fmt_int(char *buf, size_t n, size_t *len, const char *key, int64_t v) {
    char num[32];
    snprintf(num, sizeof num, "%lld", (long long)v);
    fmt_key(buf, n, len, key, num);
}

void fe_spec_patch_format(const fe_spec_patch *p, char *buf, size_t n) {
    size_t len = 0;
    char num[32];
    if (n) buf[0] = 0;
    if (p->sequence) fmt_key(buf, n, &len, "layout.sequence", p->sequence);
    if (p->a2a) fmt_key(buf, n, &len, "layout.a2a", p->a2a);
    if (p->batch_aware) {
        snprintf(num, sizeof num, "groups %d", p->batch_aware);
        fmt_key(buf, n, &len, "layout.batch_aware", p->batch_aware <= 1 ? "off" : num);
    }
    if (p->ring_degree) fmt_int(buf, n, &len, "layout.ring_degree", p->ring_degree);
    if (p->zero) fmt_int(buf, n, &len, "train.zero", p->zero);
    if (p->recompute) fmt_key(buf, n, &len, "train.recompute", p->recompute);
    if (p->offload) fmt_key(buf, n, &len, "train.offload", p->offload);
    if (p->set_mlp_chunk) fmt_int(buf, n, &len, "train.mlp_chunk", p->mlp_chunk);
    if (p->attention_chunks) fmt_int(buf, n, &len, "train.attention_chunks", p->attention_chunks);
    if (p->nodes) fmt_int(buf, n, &len, "mesh.nodes", p->nodes);
    if (p->micro_batch) fmt_int(buf, n, &len, "train.micro_batch", p->micro_batch);
    if (p->seq_len) fmt_int(buf, n, &len, "train.seq_len", p->seq_len);
}
