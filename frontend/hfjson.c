/* hfjson.c — `model NAME from "config.json"`: reads the model from a
 * Hugging Face transformers config.json of a Llama, Qwen2 (Qwen1.5, 2, 2.5)
 * or Qwen3 model, as transformers reads it today: its defaults per
 * model_type for absent fields, transformers 5's rope_parameters and the
 * older rope_theta / rope_scaling.  A field that changes the math in a way
 * basp does not implement (another activation, sliding-window attention,
 * o_proj or MLP biases, dropout, another RoPE scheme) is an error naming
 * it, never silently ignored.
 *
 * Every diagnostic is located at the string naming the file and names the
 * json field, since the json text itself is not basp source.  Keys written
 * in an optional `{ ... }` body after the file name override json values,
 * and can supply fields the json lacks, so missing required fields are only
 * reported at the end of the block (fe_hf_finish). */
#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "ast.h"
#include "common/common.h" /* the repeated-key rule every JSON reader applies */

typedef enum { HF_INT, HF_FLOAT, HF_BOOL } hf_kind;

/* The shape fields and the simple numbers; rope_theta, the biases, q/k
 * norms and the refused fields are read below. */
static const struct {
    const char *json; /* field in config.json */
    const char *key;  /* key in the model block */
    hf_kind kind;
    bool required;
} fields[] = {
    {"hidden_size", "hidden", HF_INT, true},
    {"intermediate_size", "ffn", HF_INT, true},
    {"num_hidden_layers", "layers", HF_INT, true},
    {"num_attention_heads", "heads", HF_INT, true},
    {"num_key_value_heads", "kv_heads", HF_INT, false}, /* default below */
    {"head_dim", "head_dim", HF_INT, false},            /* default below */
    {"vocab_size", "vocab", HF_INT, true},
    {"rms_norm_eps", "norm_eps", HF_FLOAT, false},
    {"tie_word_embeddings", "tie_embeddings", HF_BOOL, false},
};
enum { NFIELDS = sizeof fields / sizeof fields[0] };

/* The model types read, and transformers' defaults of their config classes
 * (LlamaConfig, Qwen2Config, Qwen3Config) for absent fields: kv_heads 0 and
 * head_dim 0 mean "as basp's defaults" (heads, hidden/heads). */
typedef enum { HF_LLAMA, HF_QWEN2, HF_QWEN3 } hf_type;
static const struct {
    const char *name;
    int64_t kv_heads, head_dim;
} types[] = {
    [HF_LLAMA] = {"llama", 0, 0},
    [HF_QWEN2] = {"qwen2", 32, 0},
    [HF_QWEN3] = {"qwen3", 32, 128},
};
static const double hf_default_theta = 10000; /* PreTrainedConfig.default_theta */

static const char *json_type(const cJSON *j) {
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    return "null";
}

static bool absent(const cJSON *j) { return !j || cJSON_IsNull(j); }

sup_loc fe_text_loc(const char *file, const char *text, size_t off, int len) {
    sup_loc l = {file, 1, 1, len};
    for (size_t i = 0; i < off && text[i]; i++) {
        if (text[i] == '\n') {
            l.line++;
            l.col = 1;
        } else
            l.col++;
    }
    return l;
}

static bool hf_error(fe_pctx *ctx, sup_loc loc, const char *path, const char *field, const char *want,
                     const cJSON *got) {
    sup_error(loc, "'%s': field '%s' must be %s, not %s", path, field, want, json_type(got));
    sup_note(loc, "fix the json, or give the value in a { ... } body after the file name");
    fe_b_error(ctx);
    return false;
}

/* A field basp does not implement: error naming it, and a note. */
static bool hf_refuse(fe_pctx *ctx, sup_loc loc, const char *path, const char *what, const char *note) {
    sup_error(loc, "'%s': %s is not supported", path, what);
    sup_note(loc, "%s", note);
    fe_b_error(ctx);
    return false;
}

/* Stores a value into model key `key`, located at the string. */
static void put(fe_pctx *ctx, const char *key, const void *val, size_t size, sup_loc loc) {
    const fe_keydef *kd = fe_key_find(FE_B_MODEL, key);
    memcpy((char *)ctx->spec + kd->off, val, size);
    char lk[48];
    snprintf(lk, sizeof lk, "model.%s", key);
    fe_loc_set(ctx->spec, lk, loc, loc);
}
static void put_i64(fe_pctx *ctx, const char *key, int64_t v, sup_loc loc) { put(ctx, key, &v, sizeof v, loc); }
static void put_f64(fe_pctx *ctx, const char *key, double v, sup_loc loc) { put(ctx, key, &v, sizeof v, loc); }
static void put_bool(fe_pctx *ctx, const char *key, bool v, sup_loc loc) { put(ctx, key, &v, sizeof v, loc); }

static bool is_int(const cJSON *j) {
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    return v == floor(v) && fabs(v) < 9007199254740992.0;
}

/* Stores one json field into the model, with the location of the string. */
static bool load_field(fe_pctx *ctx, int i, const cJSON *j, const char *path, const char *pfx, sup_loc loc) {
    char name[64];
    snprintf(name, sizeof name, "%s%s", pfx, fields[i].json);
    if (fields[i].kind == HF_BOOL) {
        if (!cJSON_IsBool(j)) return hf_error(ctx, loc, path, name, "true or false", j);
        put_bool(ctx, fields[i].key, cJSON_IsTrue(j), loc);
    } else if (fields[i].kind == HF_FLOAT) {
        if (!cJSON_IsNumber(j)) return hf_error(ctx, loc, path, name, "a number", j);
        if (!isfinite(j->valuedouble)) return hf_error(ctx, loc, path, name, "a finite number", j);
        put_f64(ctx, fields[i].key, j->valuedouble, loc);
    } else {
        if (!is_int(j)) return hf_error(ctx, loc, path, name, "an integer", j);
        put_i64(ctx, fields[i].key, (int64_t)j->valuedouble, loc);
    }
    return true;
}

/* One number of the llama3 RoPE object into a model key; every field is
 * required, as in transformers, which raises a KeyError without it. */
static bool rope_number(fe_pctx *ctx, const cJSON *rs, const char *obj, const char *field, const char *key,
                        bool integer, const char *path, sup_loc loc) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(rs, field);
    char name[128];
    snprintf(name, sizeof name, "%s.%s", obj, field);
    if (absent(j)) {
        sup_error(loc, "'%s' has no field '%s' (the model's %s)", path, name, key);
        sup_note(loc, "llama3 scaling needs factor, low_freq_factor, high_freq_factor and "
                      "original_max_position_embeddings; add it to the json");
        fe_b_error(ctx);
        return false;
    }
    if (integer && !is_int(j)) return hf_error(ctx, loc, path, name, "an integer", j);
    if (!integer && !cJSON_IsNumber(j)) return hf_error(ctx, loc, path, name, "a number", j);
    if (integer)
        put_i64(ctx, key, (int64_t)j->valuedouble, loc);
    else
        put_f64(ctx, key, j->valuedouble, loc);
    return true;
}

/* RoPE as transformers 5 reads it (PreTrainedConfig.convert_rope_params_to_dict):
 * a non-empty legacy "rope_scaling" object wins over "rope_parameters"; its
 * rope_theta, else the top-level "rope_theta", else 10000; its "rope_type"
 * (older files: "type"), else "default".  "default" is unscaled and
 * "llama3" sets the llama3 keys; any other scheme (linear, dynamic, yarn,
 * longrope ...) changes the frequencies in a way the kernels do not
 * implement, so it is an error rather than silently ignored, as is a
 * partial_rotary_factor other than 1. */
/* A RoPE field read from the rope object r when it has it, else from the
 * config's top level; `name` gets its path for messages. */
static const cJSON *rope_field(const cJSON *obj, const cJSON *r, const char *field, const char *pfx, const char *rn,
                               char *name, size_t n) {
    const cJSON *v = r ? cJSON_GetObjectItemCaseSensitive(r, field) : NULL;
    if (!absent(v)) {
        snprintf(name, n, "%s.%s", rn, field);
        return v;
    }
    snprintf(name, n, "%s%s", pfx, field);
    return cJSON_GetObjectItemCaseSensitive(obj, field);
}

static bool load_rope(fe_pctx *ctx, const cJSON *obj, const char *path, const char *pfx, sup_loc loc) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(obj, "rope_scaling");
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(obj, "rope_parameters");
    char rsn[64], rpn[64], name[128];
    snprintf(rsn, sizeof rsn, "%srope_scaling", pfx);
    snprintf(rpn, sizeof rpn, "%srope_parameters", pfx);
    if (!absent(rs) && !cJSON_IsObject(rs)) return hf_error(ctx, loc, path, rsn, "an object or null", rs);
    if (!absent(rp) && !cJSON_IsObject(rp)) return hf_error(ctx, loc, path, rpn, "an object or null", rp);
    const cJSON *r = cJSON_IsObject(rs) && rs->child ? rs : cJSON_IsObject(rp) ? rp : NULL;
    const char *rn = r == rs ? rsn : rpn;
    /* rope_theta */
    const cJSON *th = rope_field(obj, r, "rope_theta", pfx, rn, name, sizeof name);
    if (!absent(th) && !cJSON_IsNumber(th)) return hf_error(ctx, loc, path, name, "a number", th);
    put_f64(ctx, "rope_theta", absent(th) ? hf_default_theta : th->valuedouble, loc);
    /* partial_rotary_factor: in the object, else at the top level */
    const cJSON *prf = rope_field(obj, r, "partial_rotary_factor", pfx, rn, name, sizeof name);
    if (!absent(prf) && !(cJSON_IsNumber(prf) && prf->valuedouble == 1)) {
        char what[160], v[32];
        snprintf(what, sizeof what, "%s %s", name,
                 cJSON_IsNumber(prf) ? sup_fmt_double(prf->valuedouble, v, sizeof v) : json_type(prf));
        return hf_refuse(ctx, loc, path, what, "basp rotates every dimension of a head (partial_rotary_factor 1)");
    }
    if (!r) return true;
    /* rope_type */
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(r, "rope_type");
    snprintf(name, sizeof name, "%s.rope_type", rn);
    if (absent(t) && !absent(cJSON_GetObjectItemCaseSensitive(r, "type"))) {
        t = cJSON_GetObjectItemCaseSensitive(r, "type");
        snprintf(name, sizeof name, "%s.type", rn);
    }
    if (!absent(t) && !cJSON_IsString(t)) return hf_error(ctx, loc, path, name, "a string", t);
    if (absent(t) || !strcmp(t->valuestring, "default")) return true;
    if (strcmp(t->valuestring, "llama3")) {
        char what[160];
        snprintf(what, sizeof what, "%s '%s'", name, t->valuestring);
        return hf_refuse(ctx, loc, path, what, "supported rope types: llama3, and default (no scaling)");
    }
    snprintf(ctx->spec->model.rope_scaling, sizeof ctx->spec->model.rope_scaling, "llama3");
    fe_loc_set(ctx->spec, "model.rope_scaling", loc, loc);
    bool ok = rope_number(ctx, r, rn, "factor", "rope_factor", false, path, loc);
    ok &= rope_number(ctx, r, rn, "low_freq_factor", "rope_low_freq_factor", false, path, loc);
    ok &= rope_number(ctx, r, rn, "high_freq_factor", "rope_high_freq_factor", false, path, loc);
    ok &= rope_number(ctx, r, rn, "original_max_position_embeddings", "rope_original_max_pos", true, path, loc);
    return ok;
}

/* A boolean field (false when absent); *v out. */
static bool get_bool(fe_pctx *ctx, const cJSON *obj, const char *field, bool *v, const char *path, const char *pfx,
                     sup_loc loc) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, field);
    *v = false;
    if (absent(j)) return true;
    char name[96];
    snprintf(name, sizeof name, "%s%s", pfx, field);
    if (!cJSON_IsBool(j)) return hf_error(ctx, loc, path, name, "true or false", j);
    *v = cJSON_IsTrue(j);
    return true;
}

/* Sliding-window attention (Qwen2Config, Qwen3Config): "layer_types" when
 * given, else use_sliding_window with a sliding_window, from layer
 * max_window_layers (default 28) on, as transformers computes layer_types.
 * A config whose window reaches no layer trains with full attention. */
static bool check_sliding(fe_pctx *ctx, const cJSON *obj, const char *path, const char *pfx, sup_loc loc) {
    static const char note[] = "basp's attention is causal over the whole sequence in every layer (full_attention)";
    char what[160];
    const cJSON *lt = cJSON_GetObjectItemCaseSensitive(obj, "layer_types");
    if (!absent(lt)) {
        int i = 0;
        for (const cJSON *e = cJSON_IsArray(lt) ? lt->child : NULL; e; e = e->next, i++)
            if (!cJSON_IsString(e) || strcmp(e->valuestring, "full_attention")) {
                snprintf(what, sizeof what, "%slayer_types[%d] '%s'", pfx, i,
                         cJSON_IsString(e) ? e->valuestring : json_type(e));
                return hf_refuse(ctx, loc, path, what, note);
            }
        if (cJSON_IsArray(lt)) return true;
        char name[64];
        snprintf(name, sizeof name, "%slayer_types", pfx);
        return hf_error(ctx, loc, path, name, "an array", lt);
    }
    bool use;
    if (!get_bool(ctx, obj, "use_sliding_window", &use, path, pfx, loc)) return false;
    const cJSON *sw = cJSON_GetObjectItemCaseSensitive(obj, "sliding_window");
    const cJSON *mw = cJSON_GetObjectItemCaseSensitive(obj, "max_window_layers");
    const cJSON *nl = cJSON_GetObjectItemCaseSensitive(obj, "num_hidden_layers");
    double from = is_int(mw) ? mw->valuedouble : 28, layers = is_int(nl) ? nl->valuedouble : 0;
    if (!use || absent(sw) || from >= layers) return true;
    char v[32], n[200];
    snprintf(what, sizeof what, "%suse_sliding_window true", pfx);
    snprintf(n, sizeof n, "layers %.0f to %.0f would attend to the last %s tokens only (sliding_window); %s", from,
             layers - 1, cJSON_IsNumber(sw) ? sup_fmt_double(sw->valuedouble, v, sizeof v) : "?", note);
    return hf_refuse(ctx, loc, path, what, n);
}

/* The fields that change the math: activation (transformers' "swish" is
 * SiLU too), biases, dropout, q/k norms, sliding windows; qkv_bias and
 * qk_norm come from the model type. */
static bool load_arch(fe_pctx *ctx, const cJSON *obj, hf_type type, const char *path, const char *pfx, sup_loc loc) {
    bool ok = true;
    char name[96], what[160], v[32];
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(obj, "hidden_act");
    snprintf(name, sizeof name, "%shidden_act", pfx);
    if (!absent(act) && !cJSON_IsString(act))
        ok = hf_error(ctx, loc, path, name, "a string", act);
    else if (!absent(act) && strcmp(act->valuestring, "silu") && strcmp(act->valuestring, "swish")) {
        snprintf(what, sizeof what, "%s '%s'", name, act->valuestring);
        ok = hf_refuse(ctx, loc, path, what, "basp's MLP is SwiGLU: silu(x W_gate) * (x W_up), hidden_act \"silu\"");
    }
    const cJSON *drop = cJSON_GetObjectItemCaseSensitive(obj, "attention_dropout");
    snprintf(name, sizeof name, "%sattention_dropout", pfx);
    if (!absent(drop) && !cJSON_IsNumber(drop))
        ok = hf_error(ctx, loc, path, name, "a number", drop);
    else if (!absent(drop) && drop->valuedouble != 0) {
        snprintf(what, sizeof what, "%s %s", name, sup_fmt_double(drop->valuedouble, v, sizeof v));
        ok = hf_refuse(ctx, loc, path, what, "basp trains without dropout (attention_dropout 0)");
    }
    /* Qwen2 biases q, k and v always (Qwen2Config has no attention_bias);
     * Llama's and Qwen3's attention_bias biases o_proj as well. */
    bool bias = false, mlp_bias = false;
    if (type != HF_QWEN2) ok &= get_bool(ctx, obj, "attention_bias", &bias, path, pfx, loc);
    if (bias) {
        snprintf(what, sizeof what, "%sattention_bias true", pfx);
        char note[200];
        snprintf(note, sizeof note,
                 "in transformers' %s it adds biases to q_proj, k_proj, v_proj and o_proj; basp "
                 "has q/k/v biases (qkv_bias) but none on o_proj",
                 types[type].name);
        ok = hf_refuse(ctx, loc, path, what, note);
    }
    if (type == HF_LLAMA) ok &= get_bool(ctx, obj, "mlp_bias", &mlp_bias, path, pfx, loc);
    if (mlp_bias) {
        snprintf(what, sizeof what, "%smlp_bias true", pfx);
        ok = hf_refuse(ctx, loc, path, what, "basp's MLP projections (gate_proj, up_proj, down_proj) have no biases");
    }
    if (type != HF_LLAMA) ok &= check_sliding(ctx, obj, path, pfx, loc);
    put_bool(ctx, "qkv_bias", type == HF_QWEN2, loc);
    put_bool(ctx, "qk_norm", type == HF_QWEN3, loc);
    return ok;
}

/* An absent field whose transformers default (`v`, of the model type's
 * config class) is not basp's (`ours`): taken, with a warning when they
 * differ, since the model then differs from what the numbers suggest. */
static void class_default(fe_pctx *ctx, const char *field, const char *key, int64_t v, int64_t ours, int type,
                          const char *path, const char *pfx, sup_loc loc) {
    static const char *const cls[] = {"LlamaConfig", "Qwen2Config", "Qwen3Config"};
    put_i64(ctx, key, v, loc);
    if (v != ours)
        sup_warning(loc, "'%s' has no field '%s%s': %s's default, %lld, is taken", path, pfx, field, cls[type],
                    (long long)v);
}

static cJSON *parse_json(fe_pctx *ctx, const char *path, sup_loc loc) {
    size_t len;
    fe_note_input(path);
    if (!fe_source_kind_ok(ctx, path, ".json", "read", loc)) return NULL;
    char *text = sup_read_file(path, &len);
    if (!text) {
        int e = errno;
        sup_error(loc, "cannot read '%s': %s", path, sup_read_why(e));
        if (e == ENOENT) sup_note(loc, "the path is relative to the directory of the spec file");
        fe_b_error(ctx);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!root) {
        sup_loc at = fe_text_loc(NULL, text, end ? (size_t)(end - text) : 0, 1);
        sup_error(loc, "malformed JSON in '%s' at line %d, column %d", path, at.line, at.col);
        sup_note(loc, "fix the file, or export it again with transformers' save_pretrained()");
        fe_b_error(ctx);
    } else if (!cJSON_IsObject(root)) {
        sup_error(loc, "'%s': expected a JSON object at the top level, not %s", path, json_type(root));
        sup_note(loc, "point 'from' at the model's config.json");
        fe_b_error(ctx);
        cJSON_Delete(root);
        root = NULL;
    } else {
        rt_json_dup dup;
        if (rt_json_find_dup(root, &dup)) {
            char why[768];
            rt_json_dup_text(&dup, why, sizeof why);
            sup_error(loc, "'%s': %s", path, why);
            fe_b_error(ctx);
            cJSON_Delete(root);
            root = NULL;
        }
    }
    free(text);
    return root;
}

/* model_type: llama, qwen2 or qwen3 (-1: diagnosed). */
static int load_type(fe_pctx *ctx, const cJSON *obj, const char *path, const char *pfx, sup_loc loc) {
    static const char note[] = "basp reads the configs of transformers' llama, qwen2 (Qwen1.5, Qwen2, Qwen2.5) "
                               "and qwen3 models";
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(obj, "model_type");
    char name[64];
    snprintf(name, sizeof name, "%smodel_type", pfx);
    if (absent(mt)) {
        sup_error(loc, "'%s' has no field '%s'", path, name);
        sup_note(loc, "%s", note);
        fe_b_error(ctx);
        return -1;
    }
    if (!cJSON_IsString(mt)) return hf_error(ctx, loc, path, name, "a string", mt), -1;
    for (int t = 0; t < (int)(sizeof types / sizeof types[0]); t++)
        if (!strcmp(mt->valuestring, types[t].name)) return t;
    char what[160];
    snprintf(what, sizeof what, "%s '%s'", name, mt->valuestring);
    hf_refuse(ctx, loc, path, what, note);
    return -1;
}

bool fe_hf_load(fe_pctx *ctx, const char *path, sup_loc loc) {
    cJSON *root = parse_json(ctx, path, loc);
    if (!root) return false;
    /* Multimodal configs nest the language model under text_config. */
    const cJSON *obj = root;
    const char *pfx = "";
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(root, "text_config");
    if (!cJSON_GetObjectItemCaseSensitive(root, "hidden_size") && cJSON_IsObject(tc)) {
        obj = tc;
        pfx = "text_config.";
    }
    ctx->hf_missing = 0;
    int type = load_type(ctx, obj, path, pfx, loc);
    if (type < 0) {
        cJSON_Delete(root);
        return false;
    }
    bool ok = true;
    for (int i = 0; i < NFIELDS; i++) {
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, fields[i].json);
        if (!absent(j))
            ok &= load_field(ctx, i, j, path, pfx, loc);
        else if (fields[i].required)
            ctx->hf_missing |= 1u << i;
    }
    /* transformers' defaults where basp's differ: rms_norm_eps 1e-6; Qwen's
     * num_key_value_heads 32 and Qwen3's head_dim 128 when the field is
     * absent (null: as basp, heads and hidden/heads) */
    if (absent(cJSON_GetObjectItemCaseSensitive(obj, "rms_norm_eps"))) put_f64(ctx, "norm_eps", 1e-6, loc);
    if (absent(cJSON_GetObjectItemCaseSensitive(obj, "tie_word_embeddings")))
        put_bool(ctx, "tie_embeddings", false, loc);
    const cJSON *hj = cJSON_GetObjectItemCaseSensitive(obj, "hidden_size");
    const cJSON *nj = cJSON_GetObjectItemCaseSensitive(obj, "num_attention_heads");
    int64_t heads = is_int(nj) ? (int64_t)nj->valuedouble : 0, hidden = is_int(hj) ? (int64_t)hj->valuedouble : 0;
    if (!cJSON_GetObjectItemCaseSensitive(obj, "num_key_value_heads") && types[type].kv_heads)
        class_default(ctx, "num_key_value_heads", "kv_heads", types[type].kv_heads, heads, type, path, pfx, loc);
    if (!cJSON_GetObjectItemCaseSensitive(obj, "head_dim") && types[type].head_dim)
        class_default(ctx, "head_dim", "head_dim", types[type].head_dim, heads > 0 ? hidden / heads : 0, type, path,
                      pfx, loc);
    ok &= load_rope(ctx, obj, path, pfx, loc);
    ok &= load_arch(ctx, obj, (hf_type)type, path, pfx, loc);
    cJSON_Delete(root);
    free(ctx->hf_path);
    ctx->hf_path = sup_xstrdup(path);
    ctx->hf_loc = loc;
    return ok;
}

void fe_hf_finish(fe_pctx *ctx) {
    for (int i = 0; i < NFIELDS && ctx->hf_path; i++) {
        char lk[48];
        snprintf(lk, sizeof lk, "model.%s", fields[i].key);
        if (!(ctx->hf_missing & (1u << i)) || fe_given(ctx->spec, lk)) continue;
        sup_error(ctx->hf_loc, "'%s' has no field '%s' (the model's %s)", ctx->hf_path, fields[i].json, fields[i].key);
        sup_note(ctx->hf_loc,
                 "add it to the json, or write '%s' in a { ... } body after the "
                 "file name",
                 fe_key_find(FE_B_MODEL, fields[i].key)->example);
        fe_b_error(ctx);
    }
    ctx->hf_missing = 0;
    free(ctx->hf_path);
    ctx->hf_path = NULL;
}

/* "models/Qwen2.5-3B/config.json" → "Qwen2_5_3B"; "llama.json" → "llama". */
void fe_hf_name(const char *path, char *out, size_t n) {
    const char *base = strrchr(path, '/');
    base = base ? base + 1 : path;
    size_t len = strlen(base);
    if (len > 5 && !strcmp(base + len - 5, ".json")) len -= 5;
    if (len == 6 && !strncmp(base, "config", 6) && base != path) {
        const char *dir_end = base - 1, *dir = dir_end;
        while (dir > path && dir[-1] != '/') dir--;
        if (dir_end > dir && strncmp(dir, ".", (size_t)(dir_end - dir))) {
            base = dir;
            len = (size_t)(dir_end - dir);
        }
    }
    size_t j = 0;
    if (len == 0 || isdigit((unsigned char)base[0])) j = (size_t)snprintf(out, n, "m_");
    for (size_t i = 0; i < len && j + 1 < n; i++) out[j++] = isalnum((unsigned char)base[i]) ? base[i] : '_';
    out[j < n ? j : n - 1] = '\0';
    static const char *const kw[] = {"model", "mesh", "train",  "layout", "import",
                                     "from",  "link", "groups", "true",   "false"};
    for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++)
        if (!strcmp(out, kw[i]) && strlen(out) + 7 < n) strcat(out, "_model");
}
