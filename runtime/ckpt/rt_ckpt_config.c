/* rt_ckpt_config.c — a checkpoint's or Hugging Face model's config.json
 * against the compiled program (--resume, --init-from DIR): every field
 * that gives a shape or changes the math, read with transformers' defaults
 * of its model_type, all differing fields listed in one message. */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../data/rt_data.h"
#include "rt_ckpt.h"

bool rt_ckpt_tied(const rt_program *p) {
    for (int v = 0; v < p->nvalues; v++)
        if (p->values[v].kind == RT_PARAM && !strcmp(p->values[v].name, "lm_head")) return false;
    return true;
}

/* An integer field of config.json, or `dflt` when absent (dflt < 0: required). */
static bool ck_cfg_int(const cJSON *c, const char *key, int64_t dflt, int64_t *out) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(c, key);
    if (!j || cJSON_IsNull(j)) {
        *out = dflt;
        return dflt >= 0;
    }
    /* Range first: converting a double outside int64 is undefined. */
    if (!cJSON_IsNumber(j) || !(fabs(j->valuedouble) < 9.2e18) || j->valuedouble != floor(j->valuedouble)) return false;
    *out = (int64_t)j->valuedouble;
    return true;
}

/* The differing fields of a config.json, as "name value (program value)". */
typedef struct ck_diffs {
    char text[768];
    int n;
} ck_diffs;

static void ck_diff(ck_diffs *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void ck_diff(ck_diffs *d, const char *fmt, ...) {
    size_t k = strlen(d->text);
    if (d->n++ && k + 2 < sizeof d->text) k += (size_t)snprintf(d->text + k, sizeof d->text - k, ", ");
    if (k >= sizeof d->text) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(d->text + k, sizeof d->text - k, fmt, ap);
    va_end(ap);
}

/* v as %g with the fewest digits (at least 6) that read back as v: 1e-05,
 * 500000, 0.1, 1.0000001. */
static const char *ck_num(double v, char *out, size_t n) {
    for (int prec = 6; prec <= 17; prec++) {
        snprintf(out, n, "%.*g", prec, v);
        if (strtod(out, NULL) == v) break;
    }
    return out;
}

/* Numbers written as text: equal to a relative 1e-9. */
static bool ck_same(double a, double b) { return a == b || fabs(a - b) <= 1e-9 * fmax(fabs(a), fabs(b)); }

/* A number field compared with the program's value (dflt when absent). */
static bool ck_cmp_num(ck_diffs *d, const cJSON *c, const char *pfx, const char *key, double dflt, double have,
                       const char *path, char *err, size_t errlen) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(c, key);
    double v = dflt;
    if (j && !cJSON_IsNull(j)) {
        if (!cJSON_IsNumber(j)) return rt_fail(err, errlen, "%s: field %s%s is not a number", path, pfx, key);
        v = j->valuedouble;
    }
    char a[32], b[32];
    if (!ck_same(v, have))
        ck_diff(d, "%s%s %s (program %s)", pfx, key, ck_num(v, a, sizeof a), ck_num(have, b, sizeof b));
    return true;
}

/* A boolean field, false when absent. */
static bool ck_cfg_bool(const cJSON *c, const char *key, bool *out, const char *path, char *err, size_t errlen) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(c, key);
    *out = false;
    if (!j || cJSON_IsNull(j)) return true;
    if (!cJSON_IsBool(j)) return rt_fail(err, errlen, "%s: field %s is not true or false", path, key);
    *out = cJSON_IsTrue(j);
    return true;
}

/* RoPE as transformers 5 reads it: a non-empty legacy rope_scaling wins over
 * rope_parameters; rope_theta from that object, else the top-level field,
 * else 10000; rope_type (or the older "type"), else "default". */
static bool ck_cmp_rope(ck_diffs *d, const rt_program *p, const cJSON *c, const char *path, char *err, size_t errlen) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(c, "rope_scaling");
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(c, "rope_parameters");
    if (rs && !cJSON_IsNull(rs) && !cJSON_IsObject(rs))
        return rt_fail(err, errlen, "%s: field rope_scaling is not an object or null", path);
    if (rp && !cJSON_IsNull(rp) && !cJSON_IsObject(rp))
        return rt_fail(err, errlen, "%s: field rope_parameters is not an object or null", path);
    const cJSON *r = cJSON_IsObject(rs) && rs->child ? rs : cJSON_IsObject(rp) ? rp : NULL;
    char pfx[32] = "";
    if (r) snprintf(pfx, sizeof pfx, "%s.", r == rs ? "rope_scaling" : "rope_parameters");
    const cJSON *th = r ? cJSON_GetObjectItemCaseSensitive(r, "rope_theta") : NULL;
    bool ok = th && !cJSON_IsNull(th) ? ck_cmp_num(d, r, pfx, "rope_theta", 10000, p->rope_theta, path, err, errlen)
                                      : ck_cmp_num(d, c, "", "rope_theta", 10000, p->rope_theta, path, err, errlen);
    if (!ok) return false;
    const cJSON *t = r ? cJSON_GetObjectItemCaseSensitive(r, "rope_type") : NULL;
    if (r && !t) t = cJSON_GetObjectItemCaseSensitive(r, "type");
    if (t && !cJSON_IsString(t)) return rt_fail(err, errlen, "%s: field %srope_type is not a string", path, pfx);
    const char *type = t ? t->valuestring : "default";
    const char *have = p->rope_scaling == RT_ROPE_LLAMA3 ? "llama3" : "default";
    if (strcmp(type, have)) {
        ck_diff(d, "%s%s %s (program %s)", pfx, t ? t->string : "rope_type", type, have);
    } else if (p->rope_scaling == RT_ROPE_LLAMA3) {
        static const char *const keys[] = {"factor", "low_freq_factor", "high_freq_factor",
                                           "original_max_position_embeddings"};
        const double want[] = {p->rope_factor, p->rope_low_freq_factor, p->rope_high_freq_factor,
                               (double)p->rope_original_max_pos};
        for (int i = 0; i < 4; i++) {
            char b[32];
            if (!cJSON_GetObjectItemCaseSensitive(r, keys[i]))
                ck_diff(d, "%s%s missing (program %s)", pfx, keys[i], ck_num(want[i], b, sizeof b));
            else if (!ck_cmp_num(d, r, pfx, keys[i], 0, want[i], path, err, errlen))
                return false;
        }
    }
    const cJSON *prf = r ? cJSON_GetObjectItemCaseSensitive(r, "partial_rotary_factor") : NULL;
    return prf && !cJSON_IsNull(prf) ? ck_cmp_num(d, r, pfx, "partial_rotary_factor", 1, 1, path, err, errlen)
                                     : ck_cmp_num(d, c, "", "partial_rotary_factor", 1, 1, path, err, errlen);
}

/* config.json against the compiled model: every field that gives a shape or
 * changes the math, read with transformers' defaults of its model_type
 * (llama, qwen2, qwen3); a multimodal config's text_config is the model.
 * All differing fields are listed. */
bool rt_ckpt_check_config(const rt_program *p, const char *path, const cJSON *root, char *err, size_t errlen) {
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    const cJSON *c = !cJSON_GetObjectItemCaseSensitive(root, "hidden_size") && cJSON_IsObject(tc) ? tc : root;
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(c, "model_type");
    if (!cJSON_IsString(mt))
        return rt_fail(err, errlen, "%s: no model_type (basp reads llama, qwen2 and qwen3 configs)", path);
    bool qwen2 = !strcmp(mt->valuestring, "qwen2"), qwen3 = !strcmp(mt->valuestring, "qwen3");
    if (!qwen2 && !qwen3 && strcmp(mt->valuestring, "llama"))
        return rt_fail(err, errlen, "%s: model_type %s is not supported (basp reads llama, qwen2 and qwen3)", path,
                       mt->valuestring);
    int64_t heads = p->heads, hidden = p->hidden;
    ck_cfg_int(c, "num_attention_heads", p->heads, &heads);
    ck_cfg_int(c, "hidden_size", p->hidden, &hidden);
    /* transformers' class defaults when a field is absent: Qwen2/Qwen3Config
     * num_key_value_heads 32, Qwen3Config head_dim 128 */
    const cJSON *kvj = cJSON_GetObjectItemCaseSensitive(c, "num_key_value_heads");
    const cJSON *hdj = cJSON_GetObjectItemCaseSensitive(c, "head_dim");
    const struct {
        const char *key;
        int64_t have, dflt;
    } f[] = {
        {"hidden_size", p->hidden, -1},
        {"num_hidden_layers", p->layers, -1},
        {"num_attention_heads", p->heads, -1},
        {"num_key_value_heads", p->kv_heads, !kvj && (qwen2 || qwen3) ? 32 : heads},
        {"head_dim", p->head_dim,
         !hdj && qwen3 ? 128
         : heads > 0   ? hidden / heads
                       : -1},
        {"intermediate_size", p->ffn, -1},
        {"vocab_size", p->vocab, -1},
    };
    ck_diffs d = {.n = 0};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) {
        int64_t v;
        if (!ck_cfg_int(c, f[i].key, f[i].dflt, &v))
            return rt_fail(err, errlen, "%s: field %s is missing or not an integer", path, f[i].key);
        if (v != f[i].have) ck_diff(&d, "%s %lld (program %lld)", f[i].key, (long long)v, (long long)f[i].have);
    }
    if (!ck_cmp_rope(&d, p, c, path, err, errlen) ||
        !ck_cmp_num(&d, c, "", "rms_norm_eps", 1e-6, p->norm_eps, path, err, errlen) ||
        !ck_cmp_num(&d, c, "", "attention_dropout", 0, 0, path, err, errlen))
        return false;
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(c, "hidden_act");
    if (act && !cJSON_IsNull(act) &&
        (!cJSON_IsString(act) || (strcmp(act->valuestring, "silu") && strcmp(act->valuestring, "swish"))))
        ck_diff(&d, "hidden_act %s (program silu)", cJSON_IsString(act) ? act->valuestring : "(not a string)");
    bool tie, bias, mlp_bias = false, swa = false;
    if (!ck_cfg_bool(c, "tie_word_embeddings", &tie, path, err, errlen) ||
        !ck_cfg_bool(c, "attention_bias", &bias, path, err, errlen) ||
        (!qwen2 && !qwen3 && !ck_cfg_bool(c, "mlp_bias", &mlp_bias, path, err, errlen)) ||
        ((qwen2 || qwen3) && !ck_cfg_bool(c, "use_sliding_window", &swa, path, err, errlen)))
        return false;
    if (tie != rt_ckpt_tied(p))
        ck_diff(&d, "tie_word_embeddings %s (program %s)", tie ? "true" : "false", tie ? "false" : "true");
    /* Qwen2 biases q, k and v always (it has no attention_bias); Llama's and
     * Qwen3's attention_bias also biases o_proj, whose tensor the program
     * then lacks (refused as a tensor it does not have). */
    bool qkv = qwen2 || bias;
    if (qkv != (p->qkv_bias != 0))
        ck_diff(&d, "qkv_bias %s (model_type %s%s; program %s)", qkv ? "true" : "false", mt->valuestring,
                bias && !qwen2 ? ", attention_bias true" : "", p->qkv_bias ? "true" : "false");
    if (qwen3 != (p->qk_norm != 0))
        ck_diff(&d, "qk_norm %s (model_type %s; program %s)", qwen3 ? "true" : "false", mt->valuestring,
                p->qk_norm ? "true" : "false");
    if (mlp_bias) ck_diff(&d, "mlp_bias true (program false)");
    if (swa) { /* in use from layer max_window_layers on, when sliding_window is set */
        int64_t from = 28;
        const cJSON *sw = cJSON_GetObjectItemCaseSensitive(c, "sliding_window");
        swa = sw && !cJSON_IsNull(sw) && ck_cfg_int(c, "max_window_layers", 28, &from) && from < p->layers;
        if (swa) ck_diff(&d, "use_sliding_window true (program false)");
    }
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(c, "layer_types");
    for (const cJSON *e = cJSON_IsArray(lt) ? lt->child : NULL; e && !swa; e = e->next)
        if (cJSON_IsString(e) && strcmp(e->valuestring, "full_attention")) {
            ck_diff(&d, "layer_types %s (program full_attention)", e->valuestring);
            break;
        }
    if (d.n)
        return rt_fail(err, errlen, "%s differs from this program (compiled from %s) in %d field(s): %s", path,
                       p->spec ? p->spec : "its spec", d.n, d.text);
    return true;
}
