/* value.c — checks a value against what its key accepts (kind and unit)
 * and stores it in the spec.  Shared by the parser, overrides and the
 * Hugging Face importer so a value means the same whichever way it came. */
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"

/* What the user wrote, in words: "a bandwidth (GB/s)". */
static const char *describe(const fe_value *v, char *buf, size_t n) {
    static const char *const cls[] = {"a number", "a count", "a memory size", "a bandwidth", "a duration"};
    switch (v->kind) {
    case FE_V_NUM:
        if (v->unit == FE_U_NONE) return "a number";
        snprintf(buf, n, "%s (%s)", cls[v->unit], v->unit_text);
        return buf;
    case FE_V_IDENT: snprintf(buf, n, "the name '%s'", v->str); return buf;
    case FE_V_STR: return "a string";
    case FE_V_BOOL: return v->flag ? "'true'" : "'false'";
    case FE_V_GROUPS: return "'groups N'";
    default: return "an invalid value";
    }
}

static const char *wants(fe_key_kind k) {
    switch (k) {
    case FE_K_COUNT: return "a whole number";
    case FE_K_FLOAT: return "a plain number";
    case FE_K_BOOL: return "true or false (on or off)";
    case FE_K_NAME: return "a name";
    case FE_K_BYTES: return "a memory size";
    case FE_K_BW: return "a bandwidth";
    case FE_K_TIME: return "a duration";
    case FE_K_BATCH: return "auto, on, off, dynamic or groups N";
    case FE_K_PLACEMENT: return "consecutive, round_robin or a \"list\" of every rank's node";
    case FE_K_CHUNKS: return "a whole number from 1 to 8, or auto";
    case FE_K_LIST: return "a whole number or a \"list\" of them";
    default: return "a value";
    }
}

static bool mismatch(fe_pctx *ctx, const fe_keydef *kd, const fe_value *v) {
    char buf[96];
    sup_error(v->loc, "'%s' expects %s, not %s", kd->name, wants(kd->kind), describe(v, buf, sizeof buf));
    if (kd->kind == FE_K_FLOAT && v->kind == FE_V_NUM && v->unit == FE_U_COUNT)
        sup_note(v->loc,
                 "count suffixes (binary, 1K = 1024) only apply to counts; "
                 "write the number out, e.g. '%s'",
                 kd->example);
    else if (v->kind == FE_V_NUM && v->unit == FE_U_NONE &&
             (kd->kind == FE_K_BYTES || kd->kind == FE_K_BW || kd->kind == FE_K_TIME))
        sup_note(v->loc, "add a unit, e.g. '%s' (%s)", kd->example, fe_unit_help);
    else
        sup_note(v->loc, "write it like '%s'", kd->example);
    fe_b_error(ctx);
    return false;
}

/* Infinity or NaN (a huge JSON number, an overflowing product of a
 * mantissa and its unit): --print-spec could not write it back, and the
 * runtime would compute with it. */
static bool not_finite(fe_pctx *ctx, const fe_keydef *kd, const fe_value *v) {
    sup_error(v->loc, "'%s' must be a finite number", kd->name);
    sup_note(v->loc, "write it like '%s'", kd->example);
    fe_b_error(ctx);
    return false;
}

/* A count: integer mantissa (exact), or an integral float below 2^53. */
static bool to_int(fe_pctx *ctx, const fe_keydef *kd, const fe_value *v, int64_t *out) {
    if (v->kind != FE_V_NUM || (v->unit != FE_U_NONE && v->unit != FE_U_COUNT)) return mismatch(ctx, kd, v);
    if (!v->is_int && !isfinite(v->num)) return not_finite(ctx, kd, v);
    if (v->is_int) {
        *out = v->inum;
        return true;
    }
    if (v->num == floor(v->num) && fabs(v->num) < 9007199254740992.0) {
        *out = (int64_t)v->num;
        return true;
    }
    char buf[40];
    sup_error(v->loc, "'%s' expects a whole number, not %s", kd->name, sup_fmt_double(v->num, buf, sizeof buf));
    sup_note(v->loc, "write it like '%s'", kd->example);
    fe_b_error(ctx);
    return false;
}

static bool store_batch(fe_pctx *ctx, const fe_keydef *kd, fe_layout *l, const fe_value *v) {
    if (v->kind == FE_V_IDENT) {
        static const char *const modes[] = {"auto", "on", "off", "dynamic"};
        static const fe_batch_aware mode_of[] = {FE_BA_AUTO, FE_BA_ON, FE_BA_OFF, FE_BA_DYNAMIC};
        for (int i = 0; i < 4; i++) {
            if (!strcmp(v->str, modes[i])) {
                l->batch_aware = mode_of[i];
                l->groups = 0;
                return true;
            }
        }
        const char *near = sup_closest(v->str, (const char *const *)modes, 4);
        sup_error(v->loc, "unknown batch_aware mode '%s'", v->str);
        if (near)
            sup_note(v->loc, "did you mean '%s'?", near);
        else
            sup_note(v->loc, "use auto, on, off, dynamic or groups N");
        fe_b_error(ctx);
        return false;
    }
    if (v->kind == FE_V_GROUPS && v->unit != FE_U_NONE) {
        /* `groups 2GB`, `groups 2s`: G is a number of groups, not a size;
         * `groups 4K` (a count suffix) is a count and is taken. */
        if (v->unit != FE_U_COUNT) {
            char buf[96];
            fe_value n = *v;
            n.kind = FE_V_NUM;
            sup_error(v->loc, "'groups' expects a whole number of groups, not %s", describe(&n, buf, sizeof buf));
            sup_note(v->loc, "write it like 'batch_aware groups 2'");
            fe_b_error(ctx);
            return false;
        }
    }
    if ((v->kind == FE_V_GROUPS || v->kind == FE_V_NUM) && !v->is_int &&
        (v->unit == FE_U_NONE || v->unit == FE_U_COUNT)) {
        char buf[40];
        sup_error(v->loc, "'groups' expects a whole number of groups, not %s", sup_fmt_double(v->num, buf, sizeof buf));
        sup_note(v->loc, "write it like 'batch_aware groups 2'");
        fe_b_error(ctx);
        return false;
    }
    if ((v->kind == FE_V_GROUPS && v->is_int) || (v->kind == FE_V_NUM && v->unit == FE_U_NONE && v->is_int)) {
        l->batch_aware = FE_BA_GROUPS;
        l->groups = v->inum;
        return true;
    }
    return mismatch(ctx, kd, v);
}

/* attention_chunks: auto, or 1 .. FE_MAX_ATTENTION_CHUNKS (only the word
 * stores FE_CHUNKS_AUTO). */
static bool store_chunks(fe_pctx *ctx, const fe_keydef *kd, int64_t *dst, const fe_value *v) {
    if (v->kind == FE_V_IDENT && !strcmp(v->str, "auto")) {
        *dst = FE_CHUNKS_AUTO;
        return true;
    }
    int64_t n;
    if (v->kind == FE_V_IDENT) return mismatch(ctx, kd, v);
    if (!to_int(ctx, kd, v, &n)) return false;
    if (n < 1 || n > FE_MAX_ATTENTION_CHUNKS) {
        sup_error(v->loc, "'%s' must be 1 to %d or auto, not %lld", kd->name, FE_MAX_ATTENTION_CHUNKS, (long long)n);
        sup_note(v->loc, "1 runs attention unchunked; more chunks keep less of the attention layer alive at once; "
                         "auto takes the fewest whose step fits");
        fe_b_error(ctx);
        return false;
    }
    *dst = n;
    return true;
}

static bool store_unit(fe_pctx *ctx, const fe_keydef *kd, double *dst, const fe_value *v, fe_unit_class want) {
    if (v->kind != FE_V_NUM || v->unit != want) return mismatch(ctx, kd, v);
    if (!isfinite(v->num)) return not_finite(ctx, kd, v);
    *dst = v->num;
    return true;
}

/* Where the field of `kd` lives: link keys are relative to their link. */
static char *field(fe_spec *spec, const fe_keydef *kd, const char *lockey) {
    if (fe_key_find(FE_B_LINK, kd->name) == kd) {
        int w = !strncmp(lockey, "mesh.intra.", 11) ? 1 : !strncmp(lockey, "mesh.inter.", 11) ? 2 : 3;
        return (char *)fe_mesh_link(spec, w) + kd->off;
    }
    return (char *)spec + kd->off;
}

bool fe_b_store(fe_pctx *ctx, const fe_keydef *kd, const char *lockey, sup_loc key_loc, const fe_value *v) {
    if (v->kind == FE_V_BAD) return false;
    char *p = field(ctx->spec, kd, lockey);
    int64_t i = 0;
    bool ok = false;
    switch (kd->kind) {
    case FE_K_COUNT:
        if (!(ok = to_int(ctx, kd, v, &i))) break;
        if (kd->size == 8) {
            *(int64_t *)p = i;
            break;
        }
        if (i < INT_MIN || i > INT_MAX) {
            sup_error(v->loc, "'%s' out of range", kd->name);
            fe_b_error(ctx);
            return false;
        }
        *(int *)p = (int)i;
        break;
    case FE_K_FLOAT:
        if (v->kind != FE_V_NUM || v->unit != FE_U_NONE) return mismatch(ctx, kd, v);
        if (!isfinite(v->num)) return not_finite(ctx, kd, v);
        *(double *)p = v->num;
        ok = true;
        break;
    case FE_K_BOOL:
        /* on / off read as true / false (`documents on`) */
        if (v->kind == FE_V_IDENT && (!strcmp(v->str, "on") || !strcmp(v->str, "off"))) {
            *(bool *)p = !strcmp(v->str, "on");
            ok = true;
            break;
        }
        if (v->kind != FE_V_BOOL) return mismatch(ctx, kd, v);
        *(bool *)p = v->flag;
        ok = true;
        break;
    case FE_K_NAME:
        if (v->kind != FE_V_IDENT) return mismatch(ctx, kd, v);
        ok = fe_b_copy_name(ctx, p, kd->size, v->str, v->loc);
        break;
    case FE_K_BYTES: ok = store_unit(ctx, kd, (double *)p, v, FE_U_BYTES); break;
    case FE_K_BW: ok = store_unit(ctx, kd, (double *)p, v, FE_U_BW); break;
    case FE_K_TIME: ok = store_unit(ctx, kd, (double *)p, v, FE_U_TIME); break;
    case FE_K_BATCH: ok = store_batch(ctx, kd, &ctx->spec->layout, v); break;
    case FE_K_CHUNKS: ok = store_chunks(ctx, kd, (int64_t *)p, v); break;
    case FE_K_PLACEMENT:
        if (v->kind != FE_V_IDENT && v->kind != FE_V_STR) return mismatch(ctx, kd, v);
        ok = fe_b_copy_name(ctx, p, kd->size, v->str, v->loc);
        break;
    case FE_K_LIST:
        if (v->kind == FE_V_NUM && v->is_int && v->unit == FE_U_NONE && v->inum >= 0) {
            char num[32];
            snprintf(num, sizeof num, "%lld", (long long)v->inum);
            ok = fe_b_copy_name(ctx, p, kd->size, num, v->loc);
        } else if (v->kind == FE_V_STR)
            ok = fe_b_copy_name(ctx, p, kd->size, v->str, v->loc);
        else
            return mismatch(ctx, kd, v);
        break;
    case FE_K_LINK: break;
    }
    if (ok) fe_loc_set(ctx->spec, lockey, key_loc, v->loc);
    return ok;
}
