/* rt_read.h — how the runtime opens what it reads, and what a checkpoint
 * records of the way the data is drawn.  (The rest of the runtime's
 * interface is rt_internal.h.)
 *
 * Every input (--data, --val-data, --text, --init-from and the files of its
 * directory, --resume's state.json, `latest` and tensors, best.json) is
 * opened with rt_open_input: O_NONBLOCK, so that a FIFO without a writer
 * (or a device) is refused with a message instead of blocking open() for
 * ever, then fstat, and only a regular file goes on (its descriptor back in
 * blocking mode). */
#ifndef BASP_RT_READ_H
#define BASP_RT_READ_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "rt_internal.h"

/* ---- inputs (rt_data.c) ------------------------------------------------------ */
/* A read-only descriptor of regular file `path` (*st: its status), or -1
 * with the reason in err, prefixed by "OPT PATH" (opt: the command-line
 * option the file comes from, or NULL for the path alone). */
int rt_open_input(const char *opt, const char *path, struct stat *st, char *err, size_t errlen);
/* fmt into err; false (the idiom of every check that explains itself). */
bool rt_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* rt_read_file through rt_open_input: the whole regular file into *out
 * (malloc'ed, NUL after the *len bytes). */
bool rt_read_input(const char *opt, const char *path, unsigned char **out, int64_t *len, char *err, size_t errlen);
/* rt_corpus_open with the option named in its messages ("--val-data"). */
bool rt_corpus_open_as(rt_corpus *c, const char *opt, const char *const *args, int nargs, bool text, int64_t vocab,
                       char *err, size_t errlen);

/* ---- how the data is drawn, in state.json (rt_ckpt_state.c) ------------------ */
struct cJSON;
/* Writer: state.json's "data" object gets the sampler that drew the batches
 * and each program setting that shapes them (documents, eot_token,
 * packing, seq_len; micro_batch and global_batch are written beside). */
void rt_ckpt_state_data(const rt_ctx *rt, struct cJSON *data);
/* Reader (rank 0, --resume): every recorded setting against this run; a
 * warning names each change (the run goes on: see runtime/README.md). */
void rt_ckpt_check_data(const rt_ctx *rt, const struct cJSON *state);

/* ---- `latest` (rt_ckpt.c) ----------------------------------------------------- */
/* The step directory DIR/latest names, up to a newline or '/', into name
 * (n bytes): 1; 0 when there is no `latest`; -1 when it cannot be read
 * (err says why: a FIFO, a directory, an I/O error). */
int rt_ckpt_latest_name(const char *dir, char *name, size_t n, char *err, size_t errlen);

/* ---- config.json against the program (rt_ckpt_config.c) ---------------------- */
/* Rank 0: config.json `root` (read from path) describes the compiled model;
 * else false with every differing field, both values, in err. */
bool rt_ckpt_check_config(const rt_program *p, const char *path, const struct cJSON *root, char *err,
                          size_t errlen);
/* The program ties its output head to the embedding (no lm_head parameter). */
bool rt_ckpt_tied(const rt_program *p);

#endif
