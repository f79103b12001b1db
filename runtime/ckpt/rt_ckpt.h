/* rt_ckpt.h — the checkpoint room of the runtime: what a run saves and
 * loads.  --save-weights / --save-grads (rt_save.c) and --init-from FILE
 * (rt_load.c); checkpoints in safetensors + JSON, written atomically
 * (rt_ckpt.c), --resume and --init-from DIR, a Hugging Face model
 * (rt_ckpt_load.c); what state.json records of the data (rt_ckpt_state.c);
 * a config.json against the program (rt_ckpt_config.c); whose checkpoints
 * a --checkpoint-dir holds (rt_ckpt_dir.c).  Private to the room: the pure
 * readers and writers on memory buffers (rt_safetensors.h: safetensors,
 * rt_safetensors.c; Hugging Face names, rt_hf.c) and the chunking of whole
 * tensors (rt_chunk.h).
 *
 * Ckpt uses core (rt_core.h), the backend interface for host access to the
 * buffers (rt_backend.h), data (how inputs are opened) and obs (the
 * watchdog's beats); nothing of a backend's internals. */
#ifndef BASP_RT_CKPT_H
#define BASP_RT_CKPT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/rt_core.h"

/* ---- saving and loading (rt_save.c, rt_load.c) --------------------------------------- */
/* The tensor file's magic ("BSPT" little-endian) and format version. */
/* A gradients file (--save-grads) has its own magic ("BSPG"), so that it
 * cannot be loaded as weights by mistake. */
enum { RT_SAVE_MAGIC = 0x54505342, RT_GRADS_MAGIC = 0x47505342, RT_SAVE_VERSION = 1 };
/* Collective: rank 0 writes every parameter (grads = false) or the gradient
 * of every opt pair (grads = true) as full fp32 tensors, after step `step`
 * (the watchdog's label).  Every rank returns false after a failed write
 * (rank 0's message names the file and the reason). */
bool rt_save_tensors(rt_ctx *rt, const char *path, bool grads, int64_t step);
/* Collective: rank 0 reads and checks a --save-weights file against the
 * program's parameters, then every rank receives the slice of each parameter
 * it holds.  Returns the same verdict on every rank; on false, err (on every
 * rank) says why and no parameter has been touched. */
bool rt_load_params(rt_ctx *rt, const char *path, char *err, size_t errlen);
/* Shared by the checkpoint files: gathers value v's layout of `mine` (this
 * rank's local elements) into the full tensor on rank 0 / scatters rank 0's
 * full tensor into every rank's `mine`. */
void rt_gather_local(rt_ctx *rt, int v, const float *mine, float *full);
void rt_scatter_local(rt_ctx *rt, int v, const float *full, float *mine);

/* ---- checkpoints and Hugging Face import (rt_ckpt.c, rt_ckpt_load.c) --------------- */
/* state.json's format version. */
enum { RT_CKPT_VERSION = 1 };
/* FNV-1a-64 of the loaded token array (cached), recorded in state.json. */
uint64_t rt_ckpt_data_fnv(const rt_ctx *rt);
/* Collective: writes checkpoint `step` (the number of completed steps) into
 * --checkpoint-dir atomically and moves `latest` to it.  On failure every
 * rank gets false, err says why, and the previous checkpoint is untouched. */
bool rt_ckpt_save(rt_ctx *rt, int64_t step, char *err, size_t errlen);
/* Collective: --resume: restores parameters, optimizer moments, step and
 * seed from a checkpoint, re-sharding for this layout.  Same verdict on
 * every rank; nothing is touched on false. */
bool rt_ckpt_resume(rt_ctx *rt, const char *arg, char *err, size_t errlen);
/* Collective: --init-from DIR, a Hugging Face model directory (config.json,
 * model.safetensors or model.safetensors.index.json and its shards). */
bool rt_hf_load_dir(rt_ctx *rt, const char *dir, char *err, size_t errlen);
/* The step directory DIR/latest names, up to a newline or '/', into name
 * (n bytes): 1; 0 when there is no `latest`; -1 when it cannot be read
 * (err says why: a FIFO, a directory, an I/O error). */
int rt_ckpt_latest_name(const char *dir, char *name, size_t n, char *err, size_t errlen);

/* ---- whose checkpoints a --checkpoint-dir holds (rt_ckpt_dir.c; rank 0) ------------ */
/* The step of an entry named exactly step-NNNNNNNN, else -1. */
long long rt_ckpt_step_of(const char *name);
/* This run's lineage (32 hex digits), drawn on first use unless inherited. */
const char *rt_ckpt_lineage(void);
/* A run starting from step 0: dir holds no step-* checkpoint, else false
 * with a message naming what is there and what to pass. */
bool rt_ckpt_dir_fresh(const char *dir, char *err, size_t errlen);
/* A run resumed from checkpoint `from`: inherits its lineage; ckdir (NULL:
 * none) holds no checkpoint of another lineage, else false with a message. */
bool rt_ckpt_dir_adopt(const char *ckdir, const char *from, char *err, size_t errlen);
/* --keep-checkpoints: removes this run's checkpoints beyond the one just
 * saved and the keep-1 newest others, except the one best.json names. */
void rt_ckpt_prune(const char *dir, int64_t keep, int64_t just_saved);
/* Removes a checkpoint directory's files and itself; a link only unlinked. */
void rt_ckpt_remove_tree(const char *dir);

/* ---- how the data is drawn, in state.json (rt_ckpt_state.c) ------------------ */
struct cJSON;
/* Writer: state.json's "data" object gets the sampler that drew the batches
 * and each program setting that shapes them (documents, eot_token,
 * packing, seq_len; micro_batch and global_batch are written beside). */
void rt_ckpt_state_data(const rt_ctx *rt, struct cJSON *data);
/* Reader (rank 0, --resume): every recorded setting against this run; a
 * warning names each change (the run goes on: see runtime/README.md). */
void rt_ckpt_check_data(const rt_ctx *rt, const struct cJSON *state);

/* ---- config.json against the program (rt_ckpt_config.c) ---------------------- */
/* Rank 0: config.json `root` (read from path) describes the compiled model;
 * else false with every differing field, both values, in err. */
bool rt_ckpt_check_config(const rt_program *p, const char *path, const struct cJSON *root, char *err, size_t errlen);
/* The program ties its output head to the embedding (no lm_head parameter). */
bool rt_ckpt_tied(const rt_program *p);

#endif
