/* rt_hf.c — this project's parameter names and layouts against Hugging
 * Face's Llama/Qwen checkpoints (the table is in rt_safetensors.h).  Pure
 * functions, shared by the checkpoint writer, the resume and --init-from
 * readers and the unit tests. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rt_safetensors.h"

/* Per-layer parameters: our suffix, the Hugging Face one, leading dims
 * forming the "in" side of a linear weight (0: stored alike; -1: the same
 * elements in the same order, flattened to one dim: Qwen's q/k/v biases,
 * ours [H, Dh] or [Hkv, Dh], theirs [H*Dh]). */
static const struct {
    const char *ours, *hf;
    int split;
} hf_layer[] = {
    {"attn_norm", "input_layernorm.weight", 0}, {"wq", "self_attn.q_proj.weight", 1},
    {"wk", "self_attn.k_proj.weight", 1},       {"wv", "self_attn.v_proj.weight", 1},
    {"wo", "self_attn.o_proj.weight", 2},       {"mlp_norm", "post_attention_layernorm.weight", 0},
    {"w_gate", "mlp.gate_proj.weight", 1},      {"w_up", "mlp.up_proj.weight", 1},
    {"w_down", "mlp.down_proj.weight", 1},      {"bq", "self_attn.q_proj.bias", -1}, /* qkv_bias (Qwen1.5/2/2.5) */
    {"bk", "self_attn.k_proj.bias", -1},        {"bv", "self_attn.v_proj.bias", -1},
    {"q_norm", "self_attn.q_norm.weight", 0}, /* qk_norm (Qwen3): [Dh] */
    {"k_norm", "self_attn.k_norm.weight", 0},
};

rt_hf_map rt_hf_name(const char *ours) {
    rt_hf_map m = {.split = 0};
    if (!strcmp(ours, "embed"))
        snprintf(m.name, sizeof m.name, "model.embed_tokens.weight");
    else if (!strcmp(ours, "final_norm"))
        snprintf(m.name, sizeof m.name, "model.norm.weight");
    else if (!strcmp(ours, "lm_head"))
        snprintf(m.name, sizeof m.name, "lm_head.weight");
    if (m.name[0]) return m;
    /* lN.suffix with N a decimal layer index */
    char *end;
    if (ours[0] == 'l' && ours[1] >= '0' && ours[1] <= '9') {
        long layer = strtol(ours + 1, &end, 10);
        for (size_t i = 0; *end == '.' && i < sizeof hf_layer / sizeof *hf_layer; i++)
            if (!strcmp(end + 1, hf_layer[i].ours)) {
                snprintf(m.name, sizeof m.name, "model.layers.%ld.%s", layer, hf_layer[i].hf);
                m.split = hf_layer[i].split;
                return m;
            }
    }
    snprintf(m.name, sizeof m.name, "basp.%s", ours);
    return m;
}

/* Our tensor seen as a matrix [rows = in, cols = out]. */
static void hf_matrix(const rt_hf_map *m, const int64_t *dims, int nd, int64_t *rows, int64_t *cols) {
    *rows = 1, *cols = 1;
    for (int i = 0; i < nd; i++) *(i < m->split ? rows : cols) *= dims[i];
}

int rt_hf_shape(const rt_hf_map *m, const int64_t *dims, int nd, int64_t out[RT_ST_MAX_DIMS]) {
    if (m->split < 0) { /* flattened */
        out[0] = 1;
        for (int i = 0; i < nd; i++) out[0] *= dims[i];
        return 1;
    }
    if (m->split == 0 || m->split >= nd) {
        for (int i = 0; i < nd; i++) out[i] = dims[i];
        return nd;
    }
    hf_matrix(m, dims, nd, &out[1], &out[0]); /* [out, in] */
    return 2;
}

static void hf_transpose(const float *src, float *dst, int64_t rows, int64_t cols) {
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++) dst[c * rows + r] = src[r * cols + c];
}

bool rt_hf_export_dims(const rt_hf_map *m, const int64_t *dims, int nd, int64_t *hf_rows, int64_t *hf_cols) {
    int64_t rows, cols;
    hf_matrix(m, dims, nd, &rows, &cols);
    *hf_rows = cols, *hf_cols = rows;
    return !(m->split <= 0 || m->split >= nd);
}

void rt_hf_export(const rt_hf_map *m, const int64_t *dims, int nd, const float *src, float *dst) {
    int64_t rows, cols;
    hf_matrix(m, dims, nd, &rows, &cols);
    if (m->split <= 0 || m->split >= nd)
        memcpy(dst, src, (size_t)(rows * cols) * 4);
    else
        hf_transpose(src, dst, rows, cols);
}

void rt_hf_import(const rt_hf_map *m, const int64_t *dims, int nd, const float *src, float *dst) {
    int64_t rows, cols;
    hf_matrix(m, dims, nd, &rows, &cols);
    if (m->split <= 0 || m->split >= nd)
        memcpy(dst, src, (size_t)(rows * cols) * 4);
    else
        hf_transpose(src, dst, cols, rows); /* src is [cols = out, rows = in] */
}
