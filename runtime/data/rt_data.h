/* rt_data.h — the data room of the runtime: what a run reads and how it is
 * drawn.  Every input opened through rt_open_input (rt_data.c), token
 * corpora mapped read-only (rt_corpus.c), the samplers and each step's
 * inputs (rt_data.c), packed documents (rt_docs.c) and validation with the
 * forward program (rt_val.c).
 *
 * Data uses core (rt_core.h: the context, checks, shapes), obs for the
 * watchdog's beats and the backend interface (rt_backend.h) for host access
 * to the input buffers; nothing of ckpt/ or of a backend's internals. */
#ifndef BASP_RT_DATA_H
#define BASP_RT_DATA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "../core/rt_core.h"

/* ---- inputs (rt_data.c) ------------------------------------------------------
 * Every input (--data, --val-data, --text, --init-from and the files of its
 * directory, --resume's state.json, `latest` and tensors, best.json) is
 * opened with rt_open_input: O_NONBLOCK, so that a FIFO without a writer
 * (or a device) is refused with a message instead of blocking open() for
 * ever, then fstat, and only a regular file goes on (its descriptor back in
 * blocking mode). */
struct stat;
/* A read-only descriptor of regular file `path` (*st: its status), or -1
 * with the reason in err, prefixed by "OPT PATH" (opt: the command-line
 * option the file comes from, or NULL for the path alone). */
int rt_open_input(const char *opt, const char *path, struct stat *st, char *err, size_t errlen);
/* The open file fd is a regular file (*st: its status); else false with the
 * reason (a directory, a device, a failed fstat) naming path. */
bool rt_regular_file(int fd, const char *path, struct stat *st, char *err, size_t errlen);
/* fmt into err; false (the idiom of every check that explains itself). */
bool rt_fail(char *err, size_t errlen, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Reads a whole file into *out (malloc'ed, caller frees); false with a
 * message naming the file and the reason on failure. */
bool rt_read_file(const char *path, unsigned char **out, int64_t *len, char *err, size_t errlen);
/* rt_read_file through rt_open_input: the whole regular file into *out
 * (malloc'ed, NUL after the *len bytes). */
bool rt_read_input(const char *opt, const char *path, unsigned char **out, int64_t *len, char *err, size_t errlen);

/* ---- token corpora (rt_corpus.c) ----------------------------------------------
 * args: files, directories (their *.bin, by name) or glob patterns, in
 * order; text: one raw-text file, byte-level tokens.  Every shard mapped and
 * checked (header, size, token size, ids < vocab); false with the reason,
 * naming the file.  rt_corpus_open_as names the option in its messages
 * ("--val-data"). */
bool rt_corpus_open(rt_corpus *c, const char *const *args, int nargs, bool text, int64_t vocab, char *err,
                    size_t errlen);
bool rt_corpus_open_as(rt_corpus *c, const char *opt, const char *const *args, int nargs, bool text, int64_t vocab,
                       char *err, size_t errlen);
void rt_corpus_free(rt_corpus *c);
void rt_corpus_release(const rt_corpus *c, int64_t from, int64_t to);
const rt_shard *rt_corpus_shard_of(const rt_corpus *c, int64_t i);

/* ---- data (rt_data.c) ----------------------------------------------------------- */
/* The magic of an llm.c token file's header. */
enum { RT_DATA_MAGIC = 20240520 };
/* Maps the data file and checks it (header, size, every id against the
 * vocabulary); errors are reported on rank 0 and return false on every rank
 * (every rank reads the same file and reaches the same verdict). */
bool rt_data_load(rt_ctx *rt, const rt_options *o, char *err, size_t errlen);
void rt_data_unmap(rt_ctx *rt);
/* Token i of corpus c (0 <= i < c->ntokens); rt_token: of the corpus being
 * read (rt->data). */
static inline int32_t rt_corpus_token(const rt_corpus *c, int64_t i) {
    const rt_shard *s = c->nshards == 1 ? c->shard : rt_corpus_shard_of(c, i);
    const uint8_t *b = s->base + (i - s->first) * c->width;
    if (c->width == 1) return b[0];
    if (c->width == 2) return (int32_t)(b[0] | b[1] << 8);
    return (int32_t)((uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24);
}
static inline int32_t rt_token(const rt_ctx *rt, int64_t i) { return rt_corpus_token(rt->data, i); }
/* After a pass over tokens [from, to): hands their pages back to the page
 * cache (madvise), so that scanning a large corpus leaves the resident set
 * as it was. */
static inline void rt_data_release(const rt_ctx *rt, int64_t from, int64_t to) {
    rt_corpus_release(rt->data, from, to);
}
/* The module's sequence order: the original positions of the n tokens at
 * indices start .. start+n-1 of a sequence (identity, or with
 * p->seq_ring = R > 1 the ring's zig-zag order, kern_zigzag_pos). */
void rt_seq_positions(const rt_ctx *rt, int64_t start, int64_t n, int64_t *pos);
/* Start of sequence b of step t in a corpus of ntokens tokens (--sampler
 * random: drawn with replacement). */
int64_t rt_data_position(uint64_t seed, int64_t t, int64_t b, int64_t ntokens, int64_t seq_len);
/* --sampler epoch: the corpus is cut into nwin = (ntokens - 1) / seq_len
 * windows of seq_len inputs and their targets; sequence number i = t * B + b
 * of the run reads window rt_epoch_window(seed, i, nwin): epoch i / nwin
 * visits every window exactly once, in an order shuffled from (seed,
 * epoch) by a keyed bijection (no table, so a resume needs only the step). */
int64_t rt_epoch_window(uint64_t seed, int64_t i, int64_t nwin);
/* Fills this rank's slice of the tokens/targets inputs for step t,
 * micro-step rt->micro: the micro-batch's sequences are the step's
 * sequences rt->micro·B .. rt->micro·B + B-1 (so A micro-steps of B equal
 * one step of A·B sequences on any layout). */
void rt_data_fill(rt_ctx *rt, int64_t t);

/* ---- validation (rt_val.c) ------------------------------------------------------ */
/* Maps the --val-data corpus and fixes the batches (after rt_data_load);
 * false with the reason. */
bool rt_val_load(rt_ctx *rt, char *err, size_t errlen);
/* Whether a validation runs after step t (0-based) of a run of steps. */
bool rt_val_due(const rt_ctx *rt, int64_t t, int64_t steps);
/* The validation loss (the mean over its counted targets) with the forward
 * program; leaves the training state as it was.  *ms: its wall time. */
double rt_validate(rt_ctx *rt, double *ms);
/* Says the result after step t and keeps the best (rank 0). */
void rt_val_record(rt_ctx *rt, int64_t t, double loss, double ms);
/* After a checkpoint may have been saved: when it is of the last validated
 * step and that validation beats the best saved one, DIR/best.json names it
 * (rank 0).  best.json names only checkpoints that exist. */
void rt_val_saved(rt_ctx *rt);
/* The banner's note on which steps best.json can name (rank 0). */
void rt_val_note(const rt_ctx *rt);
/* The end-of-run line: the best validation and best.json's step (rank 0). */
void rt_val_summary(const rt_ctx *rt);

/* ---- packed documents (rt_docs.c) ----------------------------------------------- */
/* Builds the document table of rt->tokens (split at p->eot_token); false
 * with a message when the data holds no end-of-text token. */
bool rt_docs_load(rt_ctx *rt, const char *path, char *err, size_t errlen);
void rt_docs_free(rt_docs *d);
/* Draws and packs step t's documents (once per step; every rank the same). */
void rt_docs_step(rt_ctx *rt, int64_t t);
/* Packs validation batch from document index next on (file order) into
 * rt->docs (the validation table while a validation runs); returns where
 * the next batch starts. */
int64_t rt_docs_val_batch(rt_ctx *rt, int64_t next);
/* How many whole validation batches of `need` tokens table d fills in file
 * order (each batch's cut document is not continued by the next); *ndocs:
 * the table's documents. */
int64_t rt_docs_val_batches(const rt_docs *d, int64_t need, int64_t *ndocs);
/* The counted targets of all micro-steps of step t (packs each once; the
 * loss scale needs them before the first backward). */
int64_t rt_docs_step_counted(rt_ctx *rt, int64_t t);
/* For rows row0 .. row0+b-1 and the module-order sequence indices start ..
 * start+s-1: doc [b,s] the document number within the row, pos [b,s] the
 * position within the document (either may be NULL). */
void rt_doc_slice(const rt_ctx *rt, int64_t row0, int64_t b, int64_t start, int64_t s, int32_t *doc, int64_t *pos);
/* RoPE's position of every token of the slice rows row0 .. row0+b-1, module-
 * order sequence indices start .. start+s-1 (pos [b,s]): with packed
 * documents its position within its document, otherwise its position in
 * the sequence (rt_seq_positions: the ring's zig-zag order). */
void rt_rope_positions(const rt_ctx *rt, int64_t row0, int64_t b, int64_t start, int64_t s, int64_t *pos);
/* The token (shift 0) or target (shift 1; -1 = not counted) at natural
 * position i of row `row` of this step. */
int32_t rt_docs_token(const rt_ctx *rt, int64_t row, int64_t i, int shift);
/* batch_aware dynamic: the packed micro-step's groups (number by first
 * rank), the one holding this rank, and the placed pieces (row = group). */
const layout_dyn_group *rt_docs_groups(const rt_ctx *rt, int *ngroups, int *mine, const layout_slot **slots,
                                       int *nslots);
typedef struct rt_docs_info {
    int64_t ndocs, nsplit, nskipped; /* the table: pieces, documents cut, lone end-of-text tokens */
    int64_t step_docs, counted;      /* this step: documents (pieces) placed, targets counted */
    double imbalance;                /* this step: max over mean cost of the batch-aware groups */
} rt_docs_info;
void rt_docs_stats(const rt_ctx *rt, rt_docs_info *out);

#endif
