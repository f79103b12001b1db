/* rt_safetensors.h — the pure (MPI-free, file-system-free) readers and
 * writers behind checkpoints and Hugging Face import: the safetensors
 * format, the llm.c token file, the mapping between this project's
 * parameter names and Hugging Face's, and a 64-bit checksum.  Everything
 * here works on memory buffers, so the fuzz targets and unit tests link
 * these files alone (rt_safetensors.c, rt_hf.c, common/cm_tokens.c). */
#ifndef BASP_RT_SAFETENSORS_H
#define BASP_RT_SAFETENSORS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- safetensors (rt_safetensors.c) ---------------------------------------------
 * File: uint64 little-endian N, N bytes of a JSON object (the header), then
 * the data section.  The header maps each tensor name to
 *   {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}
 * with offsets relative to the data section, and may hold "__metadata__",
 * an object of strings.  Data is little-endian and row-major. */
enum { RT_ST_MAX_DIMS = 8 };
/* The header may not be larger than this (the reference implementation's
 * limit), so a damaged length never sizes a huge allocation. */
#define RT_ST_MAX_HEADER (100u << 20)

typedef enum { RT_ST_F32, RT_ST_F16, RT_ST_BF16, RT_ST_F64, RT_ST_OTHER } rt_st_dtype;

typedef struct rt_st_tensor {
    char *name;          /* malloc'ed */
    char dtype_name[12]; /* as written: "F32", "BF16", "I8" ... */
    rt_st_dtype dtype;
    int elem_size; /* bytes per element */
    int nd;
    int64_t shape[RT_ST_MAX_DIMS];
    int64_t elems;
    uint64_t begin, end; /* byte range inside the data section */
} rt_st_tensor;

typedef struct rt_st_file {
    int n;
    rt_st_tensor *t;             /* in header order */
    uint64_t data_off, data_len; /* the data section inside the buffer */
} rt_st_file;

/* Parses and checks a whole safetensors file held in buf: the header length,
 * the JSON, every entry (known dtype, shape of non-negative integers, offsets
 * matching shape × element size), no duplicate names, and a data section
 * that the tensors cover exactly (no overlap, no hole, no trailing bytes).
 * On failure err says what is wrong, prefixed by `path`, and *out is empty. */
bool rt_st_parse(const uint8_t *buf, size_t len, const char *path, rt_st_file *out, char *err, size_t errlen);
void rt_st_free(rt_st_file *f);
/* The tensor called name, or NULL. */
const rt_st_tensor *rt_st_find(const rt_st_file *f, const char *name);
/* Converts t's elements (at data, little-endian, any alignment) to fp32;
 * false for a dtype other than F32, F16, BF16 and F64. */
bool rt_st_to_f32(const rt_st_tensor *t, const uint8_t *data, float *out);
/* "[64,4,16]" into out. */
void rt_st_fmt_shape(char *out, size_t n, const int64_t *shape, int nd);

/* Writer: the 8-byte length and the JSON header of a file of n F32 tensors
 * laid out in the given order, padded with spaces to a multiple of 8 bytes
 * so that the data section is aligned.  metadata: NULL or a JSON object
 * text.  Returns a malloc'ed buffer of *len bytes (NULL if names are too
 * long to describe). */
uint8_t *rt_st_header_f32(int n, const char *const *names, const int *nd, const int64_t (*shape)[RT_ST_MAX_DIMS],
                          const char *metadata, size_t *len);

/* FNV-1a, 64 bit, continued from h (start with RT_FNV64_INIT). */
#define RT_FNV64_INIT 0xcbf29ce484222325ULL
uint64_t rt_fnv64(uint64_t h, const void *p, size_t n);

/* ---- Hugging Face names (rt_hf.c) ----------------------------------------------
 * This project's parameters and Hugging Face's Llama/Qwen tensors:
 *   embed → model.embed_tokens.weight      lN.attn_norm → model.layers.N.input_layernorm.weight
 *   lN.wq/wk/wv → ….self_attn.{q,k,v}_proj.weight   lN.wo → ….self_attn.o_proj.weight
 *   lN.mlp_norm → ….post_attention_layernorm.weight
 *   lN.w_gate/w_up/w_down → ….mlp.{gate,up,down}_proj.weight
 *   final_norm → model.norm.weight         lm_head → lm_head.weight
 *   lN.bq/bk/bv → ….self_attn.{q,k,v}_proj.bias (qkv_bias)
 *   lN.q_norm/k_norm → ….self_attn.{q,k}_norm.weight (qk_norm)
 * Linear weights are stored [in, out] here (y = x @ w) and [out, in] by
 * Hugging Face: `split` is how many leading dims of ours form "in" (wq
 * [D,H,Dh]: 1; wo [H,Dh,D]: 2), 0 for tensors stored alike, -1 for the
 * same elements flattened to one dim (bq [H,Dh] is q_proj.bias [H*Dh]).  A
 * name outside the table keeps its own name under "basp." and its shape. */
typedef struct rt_hf_map {
    char name[160];
    int split;
} rt_hf_map;
rt_hf_map rt_hf_name(const char *ours);
/* The Hugging Face shape of a tensor of ours (dims, nd) under map m. */
int rt_hf_shape(const rt_hf_map *m, const int64_t *dims, int nd, int64_t out[RT_ST_MAX_DIMS]);
/* ours (dims, nd) → Hugging Face layout, and back; dst and src differ. */
/* Whether rt_hf_export transposes value dims as a matrix; if so the Hugging
 * Face tensor is [hf_rows, hf_cols] (out, in) of ours [in, out]. */
bool rt_hf_export_dims(const rt_hf_map *m, const int64_t *dims, int nd, int64_t *hf_rows, int64_t *hf_cols);
void rt_hf_export(const rt_hf_map *m, const int64_t *dims, int nd, const float *src, float *dst);
void rt_hf_import(const rt_hf_map *m, const int64_t *dims, int nd, const float *src, float *dst);

/* llm.c token files (rt_tokens_parse) and the JSON rule the header reader
 * applies: common/common.h, shared with the compiler. */
#include "../../common/common.h"

#endif
