/* hfjson.c — `model NAME from "config.json"`: reads the model shape from a
 * Hugging Face transformers config.json (Llama/Qwen/Mistral layout).
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

typedef enum { HF_INT, HF_FLOAT, HF_BOOL } hf_kind;

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
    {"num_key_value_heads", "kv_heads", HF_INT, false}, /* default: heads */
    {"head_dim", "head_dim", HF_INT, false},            /* default: hidden/heads */
    {"vocab_size", "vocab", HF_INT, true},
    {"rope_theta", "rope_theta", HF_FLOAT, false},
    {"rms_norm_eps", "norm_eps", HF_FLOAT, false},
    {"tie_word_embeddings", "tie_embeddings", HF_BOOL, false},
};
enum { NFIELDS = sizeof fields / sizeof fields[0] };

static const char *json_type(const cJSON *j) {
    if (cJSON_IsString(j)) return "a string";
    if (cJSON_IsNumber(j)) return "a number";
    if (cJSON_IsBool(j)) return "a boolean";
    if (cJSON_IsArray(j)) return "an array";
    if (cJSON_IsObject(j)) return "an object";
    return "null";
}

/* Line and column of byte `off` in text, for malformed-json messages. */
static void line_col(const char *text, size_t off, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < off && text[i]; i++) {
        if (text[i] == '\n') { (*line)++; *col = 1; }
        else (*col)++;
    }
}

static bool hf_error(fe_pctx *ctx, sup_loc loc, const char *path, const char *field,
                     const char *want, const cJSON *got) {
    sup_error(loc, "'%s': field '%s' must be %s, not %s", path, field, want, json_type(got));
    sup_note(loc, "fix the json, or give the value in a { ... } body after the file name");
    fe_b_error(ctx);
    return false;
}

/* Stores one json field into the model, with the location of the string. */
static bool load_field(fe_pctx *ctx, int i, const cJSON *j, const char *path, const char *pfx,
                       sup_loc loc) {
    const fe_keydef *kd = fe_key_find(FE_B_MODEL, fields[i].key);
    char *p = (char *)ctx->spec + kd->off;
    char name[64];
    snprintf(name, sizeof name, "%s%s", pfx, fields[i].json);
    if (fields[i].kind == HF_BOOL) {
        if (!cJSON_IsBool(j)) return hf_error(ctx, loc, path, name, "true or false", j);
        *(bool *)p = cJSON_IsTrue(j);
    } else if (fields[i].kind == HF_FLOAT) {
        if (!cJSON_IsNumber(j)) return hf_error(ctx, loc, path, name, "a number", j);
        *(double *)p = j->valuedouble;
    } else {
        double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
        if (!(v == floor(v) && fabs(v) < 9007199254740992.0))
            return hf_error(ctx, loc, path, name, "an integer", j);
        *(int64_t *)p = (int64_t)v;
    }
    char lk[48];
    snprintf(lk, sizeof lk, "model.%s", fields[i].key);
    fe_loc_set(ctx->spec, lk, loc, loc);
    return true;
}

/* One number of the rope_scaling object into a model key; every field is
 * required, as in transformers, which raises a KeyError without it. */
static bool rope_number(fe_pctx *ctx, const cJSON *rs, const char *field, const char *key, bool integer,
                        const char *path, const char *pfx, sup_loc loc) {
    const cJSON *j = cJSON_GetObjectItemCaseSensitive(rs, field);
    char name[96];
    snprintf(name, sizeof name, "%srope_scaling.%s", pfx, field);
    const fe_keydef *kd = fe_key_find(FE_B_MODEL, key);
    if (!j || cJSON_IsNull(j)) {
        sup_error(loc, "'%s' has no field '%s' (the model's %s)", path, name, key);
        sup_note(loc, "llama3 scaling needs factor, low_freq_factor, high_freq_factor and "
                      "original_max_position_embeddings; add it to the json");
        fe_b_error(ctx);
        return false;
    }
    double v = cJSON_IsNumber(j) ? j->valuedouble : NAN;
    if (integer && !(v == floor(v) && fabs(v) < 9007199254740992.0))
        return hf_error(ctx, loc, path, name, "an integer", j);
    if (!integer && !cJSON_IsNumber(j)) return hf_error(ctx, loc, path, name, "a number", j);
    char *p = (char *)ctx->spec + kd->off;
    if (integer) *(int64_t *)p = (int64_t)v;
    else *(double *)p = v;
    char lk[48];
    snprintf(lk, sizeof lk, "model.%s", key);
    fe_loc_set(ctx->spec, lk, loc, loc);
    return true;
}

/* "rope_scaling": null (or absent, or rope_type "default") leaves the
 * model unscaled; {"rope_type": "llama3", ...} (older files spell it
 * "type") sets the llama3 keys.  Any other scheme (linear, dynamic, yarn,
 * longrope ...) changes the frequencies in a way the kernels do not
 * implement, so it is an error rather than silently ignored. */
static bool load_rope_scaling(fe_pctx *ctx, const cJSON *obj, const char *path, const char *pfx,
                              sup_loc loc) {
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(obj, "rope_scaling");
    char name[96];
    snprintf(name, sizeof name, "%srope_scaling", pfx);
    if (!rs || cJSON_IsNull(rs)) return true;
    if (!cJSON_IsObject(rs)) return hf_error(ctx, loc, path, name, "an object or null", rs);
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(rs, "rope_type");
    if (!t) t = cJSON_GetObjectItemCaseSensitive(rs, "type");
    snprintf(name, sizeof name, "%srope_scaling.rope_type", pfx);
    if (!cJSON_IsString(t)) return hf_error(ctx, loc, path, name, "a string", t);
    if (!strcmp(t->valuestring, "default")) return true;
    if (strcmp(t->valuestring, "llama3")) {
        sup_error(loc, "'%s': rope_scaling type '%s' is not supported", path, t->valuestring);
        sup_note(loc, "supported rope_scaling types: llama3, and default (no scaling)");
        fe_b_error(ctx);
        return false;
    }
    snprintf(ctx->spec->model.rope_scaling, sizeof ctx->spec->model.rope_scaling, "llama3");
    fe_loc_set(ctx->spec, "model.rope_scaling", loc, loc);
    bool ok = rope_number(ctx, rs, "factor", "rope_factor", false, path, pfx, loc);
    ok &= rope_number(ctx, rs, "low_freq_factor", "rope_low_freq_factor", false, path, pfx, loc);
    ok &= rope_number(ctx, rs, "high_freq_factor", "rope_high_freq_factor", false, path, pfx, loc);
    ok &= rope_number(ctx, rs, "original_max_position_embeddings", "rope_original_max_pos", true, path, pfx,
                      loc);
    return ok;
}

static cJSON *parse_json(fe_pctx *ctx, const char *path, sup_loc loc) {
    size_t len;
    char *text = sup_read_file(path, &len);
    if (!text) {
        sup_error(loc, "cannot read '%s': %s", path, strerror(errno));
        sup_note(loc, "the path is relative to the directory of the spec file");
        fe_b_error(ctx);
        return NULL;
    }
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(text, len, &end, false);
    if (!root) {
        int line, col;
        line_col(text, end ? (size_t)(end - text) : 0, &line, &col);
        sup_error(loc, "malformed JSON in '%s' at line %d, column %d", path, line, col);
        sup_note(loc, "fix the file, or export it again with transformers' save_pretrained()");
        fe_b_error(ctx);
    } else if (!cJSON_IsObject(root)) {
        sup_error(loc, "'%s': expected a JSON object at the top level, not %s", path,
                  json_type(root));
        sup_note(loc, "point 'from' at the model's config.json");
        fe_b_error(ctx);
        cJSON_Delete(root);
        root = NULL;
    }
    free(text);
    return root;
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
    bool ok = true;
    ctx->hf_missing = 0;
    for (int i = 0; i < NFIELDS; i++) {
        const cJSON *j = cJSON_GetObjectItemCaseSensitive(obj, fields[i].json);
        if (!j || cJSON_IsNull(j)) {
            if (fields[i].required) ctx->hf_missing |= 1u << i;
            continue;
        }
        ok &= load_field(ctx, i, j, path, pfx, loc);
    }
    ok &= load_rope_scaling(ctx, obj, path, pfx, loc);
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
        sup_error(ctx->hf_loc, "'%s' has no field '%s' (the model's %s)", ctx->hf_path,
                  fields[i].json, fields[i].key);
        sup_note(ctx->hf_loc, "add it to the json, or write '%s' in a { ... } body after the "
                 "file name", fe_key_find(FE_B_MODEL, fields[i].key)->example);
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
    for (size_t i = 0; i < len && j + 1 < n; i++)
        out[j++] = isalnum((unsigned char)base[i]) ? base[i] : '_';
    out[j < n ? j : n - 1] = '\0';
    static const char *const kw[] = {"model", "mesh",  "train",  "layout", "import",
                                     "from",  "link",  "groups", "true",   "false"};
    for (size_t i = 0; i < sizeof kw / sizeof kw[0]; i++)
        if (!strcmp(out, kw[i]) && strlen(out) + 7 < n) strcat(out, "_model");
}
