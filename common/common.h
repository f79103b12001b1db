/* common.h — what the compiler and the runtime both use, and the only
 * header of common/ (prefix cm_).
 *
 * The compiler predicts what the runtime will do (workspace bytes per
 * kernel, the packing of documents, the reading of token files) and both
 * read the same files (config.json, safetensors headers, token files).
 * Each such list or rule has its home here, below both: ir/ and the two
 * backends index the same workspace slots, codegen sizes its tables with
 * the same maximum rank, and the planner packs documents with the very
 * function the runtime runs every step.
 *
 * Names kept from before the move (rt_json_*, rt_tokens_*, layout_pack*):
 * their callers span the frontend, the passes, the runtime and the tests,
 * and a rename would touch every one of them for no change in meaning.
 * New names carry cm_ / CM_.
 *
 * Plain C17, no MPI, no CUDA, no file system, no allocation beyond scratch
 * arrays; cJSON only by name (struct cJSON), so this header needs no other
 * header of the tree or of a library. */
#ifndef BASP_COMMON_H
#define BASP_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Dims of a value at most: the IR's types and the runtime's value tables
 * (basp_rt.h RT_MAX_RANK, checked equal in runtime/core/rt_coll.c). */
enum { CM_MAX_RANK = 6 };

/* ---- kernel workspace slots ----------------------------------------------
 * Each slot is one grow-only buffer of a backend: it grows to the largest
 * request of any op and the slots are separate allocations, so an op's
 * workspace descriptor (ir/ir_op_*.c ws_cpu, ws_cuda) raises the slots its
 * kernel takes and the compiler's workspace (ir_mem_work_bytes) is their
 * sum.  One row per slot, used by ir/ and by the backend alike, so that a
 * slot cannot exist on one side only.  The SUMS rows come after the slots:
 * they are no buffer of the runtime but statistics the attention forwards
 * keep for their backwards, which add up over the forwards instead. */

/* CPU (runtime/host/kern_basic.c kern_scratch; ROPE is the table
 * kern_rope_table keeps itself, outside kern_scratch).  Each row is
 * X(name, what): what the slot holds, in the words `baspc --memory` prints. */
/* clang-format off */
#define CM_WS_CPU_SLOTS(X)                                                                                          \
    X(LOGITS,  "LM head: one chunk of rows' logits and row statistics") /* kern_lmhead.c */                         \
    X(ROPE,    "the RoPE table and positions") /* kern_basic.c */                                                   \
    X(MLP,     "tiled MLP: g, u and s of one chunk of rows") /* kern_mlp.c */                                       \
    X(DSTATS,  "attention: row statistics (backward: one head's lse, D)") /* kern_docattn.c, kern_attention.c */    \
    X(DPOS,    "packed documents: the positions 0 .. S-1 (int64)") /* kern_docattn.c */
#define CM_WS_CPU_SUMS(X) \
    X(LSE, "attention: each forward's row log-sum-exp, kept for its backward") /* ir_op_attn.c */
/* clang-format on */

/* The CPU LM head (kern_lmhead.c): chunks of CM_LM_HEAD_ROWS rows, blocks
 * of at most CM_LM_HEAD_COLS vocabulary columns (a multiple of 16); its
 * LOGITS workspace in floats, which the memory plan (ir/ir_op_vocab.c)
 * counts: one chunk's logits padded to 16 columns, and per row three
 * doubles and four floats of statistics. */
#define CM_LM_HEAD_ROWS 256
#define CM_LM_HEAD_COLS 256
static inline int64_t cm_lm_head_ws_floats(int64_t V) { return (int64_t)CM_LM_HEAD_ROWS * ((V + 15) / 16 * 16 + 10); }

/* CUDA (runtime/cuda/rt_cuda.h cuda_ws): the device workspaces, which also
 * hold the collectives' staging; compute and communication run
 * concurrently, so they never share one. */
/* clang-format off */
#define CM_WS_CUDA_SLOTS(X)                                                                                         \
    X(SEND,   "all-to-all: send staging")                                                                           \
    X(RECV,   "all-to-all: receive staging")                                                                        \
    X(COMM,   "all-gather / reduce-scatter staging")                                                                \
    X(F32,    "fp32 sums: embedding [V,D] and norm [D] gradients, the LM head's dx and dw")                         \
    X(LOGITS, "LM head: fp32 logits of one chunk")                                                                  \
    X(DL,     "LM head backward: bf16 dlogits of one chunk")                                                        \
    X(ROWS,   "LM head: per-row losses")                                                                            \
    X(ATTN,   "attention (basp kernels): fp32 row statistics and running state")                                    \
    X(SLICE,  "ZeRO-1: gradient slice")                                                                             \
    X(ROPE,   "the RoPE rotation table")                                                                            \
    X(MLP,    "tiled MLP: g, u and s of one chunk of rows")                                                         \
    X(RING,   "ring attention: kv blocks, fp32 running state")                                                      \
    X(POS,    "the sequence order's positions (int64 [seq_len])")                                                   \
    X(DOC,    "packed documents: this call's ids and positions")                                                    \
    X(CUDNN,  "cuDNN attention: dQ accumulator and plan workspace")                                                 \
    X(DOCS,   "packed documents on cuDNN: one padded batch's q, k, v, o (dO, dq, dk, dv), statistics, offsets")        \
    X(LSE,    "LM head: the forward's row log-sum-exp, kept for the backward")
#define CM_WS_CUDA_SUMS(X) \
    X(CUDNN_STATS, "cuDNN attention: each forward's softmax statistics, kept for its backward") /* ir_op_attn.c */
/* clang-format on */

#define CM_WS_CPU_ENUM_(name, what)  CM_WS_CPU_##name,
#define CM_WS_CUDA_ENUM_(name, what) CM_WS_CUDA_##name,
typedef enum { CM_WS_CPU_SLOTS(CM_WS_CPU_ENUM_) CM_WS_CPU_NSLOTS } cm_ws_cpu_slot;
/* The sums continue the numbering: an array of CM_WS_CPU_N entries holds
 * every row, the runtime's arrays only the first CM_WS_CPU_NSLOTS. */
enum { CM_WS_CPU_SUMS_FROM_ = CM_WS_CPU_NSLOTS - 1, CM_WS_CPU_SUMS(CM_WS_CPU_ENUM_) CM_WS_CPU_N };
typedef enum { CM_WS_CUDA_SLOTS(CM_WS_CUDA_ENUM_) CM_WS_CUDA_NSLOTS } cm_ws_cuda_slot;
enum { CM_WS_CUDA_SUMS_FROM_ = CM_WS_CUDA_NSLOTS - 1, CM_WS_CUDA_SUMS(CM_WS_CUDA_ENUM_) CM_WS_CUDA_N };
/* Each row's name and what it holds (cm_tables.c): baspc --memory's words
 * and the runtime's. */
extern const char *const cm_ws_cpu_names[CM_WS_CPU_N], *const cm_ws_cpu_what[CM_WS_CPU_N];
extern const char *const cm_ws_cuda_names[CM_WS_CUDA_N], *const cm_ws_cuda_what[CM_WS_CUDA_N];
#undef CM_WS_CPU_ENUM_
#undef CM_WS_CUDA_ENUM_

/* ---- kernel kinds ----------------------------------------------------------
 * The kernel calls both runtimes time and count (rt_kernel_tally, the
 * --trace events, the op profile of the summary): one row each, its
 * counter name the IR op it runs. */
/* clang-format off */
#define CM_KERNEL_KINDS(X)                                                                                          \
    X(EMBEDDING, embedding) X(EMBEDDING_BWD, embedding_bwd) X(RMSNORM, rmsnorm) X(RMSNORM_BWD, rmsnorm_bwd)        \
    X(LINEAR, linear) X(LINEAR_BWD, linear_bwd) X(ROPE, rope) X(ROPE_BWD, rope_bwd) X(ATTENTION, attention)        \
    X(ATTENTION_BWD, attention_bwd) X(SWIGLU, swiglu) X(SWIGLU_BWD, swiglu_bwd) X(ADD, add)                        \
    X(LM_HEAD_LOSS, lm_head_loss) X(LM_HEAD_LOSS_BWD, lm_head_loss_bwd) X(ADAMW, adamw) X(MLP, mlp)                \
    X(MLP_BWD, mlp_bwd) X(BIAS_ADD, bias_add) X(BIAS_ADD_BWD, bias_add_bwd) X(RING_ATTENTION, ring_attention)     \
    X(RING_ATTENTION_BWD, ring_attention_bwd) X(HEAD_SLICE, head_slice) X(HEAD_CONCAT, head_concat)     \
    X(LM_HEAD_LOSS_GRAD, lm_head_loss_grad) X(ADD_RMSNORM, add_rmsnorm) X(ADD_RMSNORM_BWD, add_rmsnorm_bwd)
/* clang-format on */
#define CM_K_ENUM_(kind, name) CM_K_##kind,
typedef enum { CM_KERNEL_KINDS(CM_K_ENUM_) CM_K_N } cm_kernel_kind;
#undef CM_K_ENUM_
/* The counter name of each kind (cm_tables.c). */
extern const char *const cm_kernel_names[CM_K_N];

/* ---- attention implementations ---------------------------------------------
 * Which kernel runs an attention op.  The runtime decides (runtime/cuda's
 * attention dispatch, runtime/cpu's kernels) and the cost model prices
 * the op at the measured rate of the kernel that will run it
 * (layout_attention_fraction), so both ask cm_attention_impl. */
/* clang-format off */
#define CM_ATTN_IMPLS(X)                                                                                           \
    X(CPU, "cpu")             /* basp's CPU kernels (fused or blocked) */                                         \
    X(CUDNN, "cudnn")         /* cuDNN's fused attention (plain causal attention) */                              \
    X(CUDNN_RING, "cudnn-ring") /* ring blocks as cuDNN sub-blocks merged by basp's kernels */                    \
    X(CUDNN_DOCS, "cudnn-docs") /* packed documents as cuDNN calls on padded batches of one length */            \
    X(CUDA_BASP, "cuda-basp") /* basp's CUDA kernels: document masks, no cuDNN */
/* clang-format on */
#define CM_ATTN_ENUM_(impl, name) CM_ATTN_##impl,
typedef enum { CM_ATTN_IMPLS(CM_ATTN_ENUM_) CM_ATTN_N } cm_attn_impl;
#undef CM_ATTN_ENUM_
extern const char *const cm_attn_impl_names[CM_ATTN_N];
/* The implementation of one attention op: on the CUDA target (cuda)
 * everything runs basp's kernels when cuDNN cannot be used (cudnn false:
 * built without it, its set-up failed, or BASP_ATTENTION=own), and so do
 * ring blocks over packed documents (ring and documents); otherwise plain
 * causal attention runs cuDNN, a ring block (ring: ring_attention, its
 * backward) cuDNN on its full and causal sub-blocks
 * (runtime/cuda/rt_ring_split.c), attention over packed documents cuDNN on
 * padded batches of documents (rt_doc_split.c).  CPU: the CPU kernels. */
cm_attn_impl cm_attention_impl(bool cuda, bool ring, bool documents, bool cudnn);
/* The padded length of a document of len tokens in cudnn-docs' batches
 * (runtime/cuda/rt_doc_split.c): the power of two at or above len, at
 * least 128 (cuDNN's tiles; releases up to 9.15 take only multiples of
 * 128).  The memory plan (ir/ir_op_attn.c) and the planner
 * (driver/docplan.c) pad the same. */
int64_t cm_docs_padded(int64_t len);

/* ---- JSON: no repeated keys (cm_json.c) -------------------------------------
 * The one rule every JSON reader of basp applies after parsing: no object
 * may repeat a key, at any depth.  cJSON keeps a repeated key as a second
 * sibling and its lookups return the first; Python's json (so
 * transformers, and the safetensors reference implementation) keeps the
 * last.  A config.json with "hidden_size" twice would then describe one
 * model to basp and another to transformers, with no word from either:
 * such a file is refused instead, naming the key's path
 * (rope_scaling.factor, weight_map["x"]) and both values.  Readers: the
 * compiler (frontend/hfjson.c), the runtime (rt_ckpt_load.c, rt_val.c) and
 * the safetensors reader (rt_safetensors.c). */
struct cJSON;
/* A repeated key: its path from the root and both values, as compact JSON
 * (cut with "..." when long). */
typedef struct rt_json_dup {
    char path[256];
    char first[96], second[96];
} rt_json_dup;
/* A repeated key anywhere in root: depth first, in each object the one of
 * the smallest name, its two values in file order. */
bool rt_json_find_dup(const struct cJSON *root, rt_json_dup *out);
/* The message every reader gives (after its file name); n >= 768 holds
 * it whole. */
void rt_json_dup_text(const rt_json_dup *d, char *out, size_t n);

/* ---- llm.c token files (cm_tokens.c) ----------------------------------------
 * 256 int32 header (magic 20240520, version 1 = uint16 / 2 = uint32
 * tokens, token count), then the tokens.  Checks the header, the count
 * against the length and every id against vocab; *tokens is malloc'ed.
 * No MPI, no file system: the loader (--data) and the planner
 * (baspc --plan --doc-lengths) read token files with it. */
bool rt_tokens_parse(const uint8_t *buf, size_t len, const char *path, int64_t vocab, int32_t **tokens,
                     int64_t *ntokens, char *err, size_t errlen);
/* The header and size checks alone, on a file of len bytes whose first
 * bytes are buf (at least the 1024-byte header when len allows): the token
 * width (2 or 4 bytes) and count. */
bool rt_tokens_header(const uint8_t *buf, size_t len, const char *path, int *width, int64_t *ntokens, char *err,
                      size_t errlen);
/* Every one of the n little-endian tokens of `width` bytes (1, 2 or 4) at
 * b, tokens first .. first+n-1 of file `path`, is below vocab; else false
 * with the first one outside named in err. */
bool rt_tokens_check_ids(const uint8_t *b, int width, int64_t n, int64_t first, int64_t vocab, const char *path,
                         char *err, size_t errlen);

/* ---- packed documents (cm_pack.c) ------------------------------------------ */
/* How a step's documents are laid into its B rows of S tokens:
 *   sequential  back to back in draw order, a document crossing a row end
 *               cut there (concat-and-chunk);
 *   balanced    the same pieces (cut where sequential cuts), laid out
 *               again longest first, each to the row of least expected cost
 *               with room (longest-processing-time-first; a piece that fits
 *               no row whole is cut once more), so that the rows, and the
 *               batch-aware groups that own them, get equal work for the
 *               same total work. */
typedef enum { LAYOUT_PACK_SEQUENTIAL = 0, LAYOUT_PACK_BALANCED = 1 } layout_packing;
const char *layout_packing_name(layout_packing p);
bool layout_packing_parse(const char *name, layout_packing *out);

/* A document (or a piece of one): tokens [src, src + len) of the stream. */
typedef struct layout_doc {
    int64_t src, len;
} layout_doc;
/* A document placed in row `row` at columns [col, col + len). */
typedef struct layout_slot {
    int64_t row, col, src, len;
} layout_slot;

/* The work of a document of len tokens, in units of heads * head_dim
 * multiply-adds: len^2 for its causal attention (len^2 / 2 score pairs,
 * each a q.k and a p.v of heads * head_dim) plus linear * len for what is
 * per token (projections, MLP); forward and backward scale alike. */
double layout_doc_cost(int64_t len, double linear);
/* `linear` for a model: the weights of one layer (q, k, v, o projections
 * and the SwiGLU MLP: multiply-adds per token) over heads * head_dim. */
double layout_doc_linear(int64_t hidden, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t ffn);

/* Packs docs (draw order, each 1..S tokens, together at least B*S) into B
 * rows of S tokens: out (room for n + B slots) gets the placed documents
 * sorted by (row, col), the rows exactly full.  A document is cut where it
 * does not fit whole (each piece a document of its own); what does not fit
 * is left out.  Balanced packing balances the rows, so what each row holds
 * does not depend on how a layout groups them.  Returns the number of
 * slots, -1 on bad arguments (a document longer than S, too few tokens) or
 * out of memory. */
int layout_pack(const layout_doc *docs, int n, int64_t B, int64_t S, layout_packing how, double linear,
                layout_slot *out);

/* Orders the packed rows for `groups` batch-aware groups (group g owns rows
 * [g*B/G, (g+1)*B/G)): rows by cost, dealt to the groups in snake order, so
 * that the groups' costs are balanced.  Only the row numbers of the slots
 * change.  0, or -1 when groups does not divide B (or out of memory). */
int layout_pack_groups(layout_slot *slots, int ns, int64_t B, int groups, double linear);

/* Max over mean of the cost per batch-aware group (group g owns rows
 * [g*B/G, (g+1)*B/G)): 1 is perfect balance.  group_cost (optional, G
 * entries) receives each group's cost.  0 when G does not divide B (or
 * out of memory). */
double layout_pack_imbalance(const layout_slot *slots, int ns, int64_t B, int groups, double linear,
                             double *group_cost);

/* ---- dynamic batch-aware groups (cm_assign.c) -----------------------------------
 * With `batch_aware dynamic` every micro-step splits the N ranks into groups
 * of sizes K_i (sum K_i = N; not necessarily equal, not necessarily dividing
 * N), each group one row of K_i * T tokens sharded over its K_i ranks, and
 * assigns the micro-step's pieces (documents of 1 .. seq_len tokens,
 * together exactly N * T tokens) to the rows.  The runtime runs it every
 * micro-step on every rank (the same answer everywhere: no randomness, ties
 * broken by index), the planner on sampled lengths. */
typedef struct layout_dyn_shape {
    int world;        /* N ranks */
    int node_size;    /* ranks per node (rank r on node r / node_size) */
    int64_t T;        /* tokens per rank: a group of K ranks holds K * T */
    const int *sizes; /* the sizes a group may have: ascending, distinct, in 1 .. world, some sum of them world */
    int nsizes;
    double linear; /* layout_doc_linear of the model */
    /* Per-rank cost of a group's exchange per token it holds, times
     * (K - 1) / K, in layout_doc_cost's units; 0 = not modelled. */
    double comm;
    /* Or, when not NULL, per allowed size (indexed like sizes): a group's
     * per-rank exchange cost per token each rank holds, in the same units
     * (the cost model's, size by size: a group that crosses nodes pays its
     * slower link); comm is then unused. */
    const double *size_comm;
} layout_dyn_shape;

typedef struct layout_dyn_group {
    int first, size;   /* ranks [first, first + size) */
    int slot0, nslots; /* its pieces: slots[slot0 .. slot0 + nslots), by column; their row is the group's index */
    double cost;       /* predicted per rank: its pieces' layout_doc_cost over size, plus the exchange */
} layout_dyn_group;

/* One micro-step's groups: pieces (each 1 .. the largest size * T tokens,
 * together exactly world * T) into groups whose rows are exactly full.
 * The groups tile the ranks (group i holds ranks [first, first + size),
 * numbered by first rank, each size one of sh->sizes); the slots are
 * sorted by (row, col), row the group's index and col the offset in its
 * row of size * T tokens.  Every token of every piece is placed once.  The
 * aim is the least maximum of the groups' per-rank cost (the step waits
 * for the slowest), then few cuts: a piece is kept whole where the groups
 * allow it and cut (into consecutive parts [src, src + a), [src + a, ..),
 * each a document of its own) only where no row has room for all of it,
 * at most one cut per group.  Long pieces' groups grow past the least
 * size that holds them (up to the whole world) where that evens out the
 * cost: with comm = 0 a larger group costs nothing more, and the exchange
 * term saturates at comm * T per rank (a dearer exchange across nodes is
 * not modelled).  A group of at most node_size ranks never straddles a
 * node boundary when first-fit decreasing finds such a placement (always
 * when the sizes and node_size are powers of two).  Deterministic: the
 * same answer on every rank, whatever the pieces' order.  groups: room
 * for world entries; slots: room for n + world entries.  Returns the
 * number of groups, -1 on bad arguments (NULL pointers, n < 0, world, T
 * or node_size < 1, linear or comm negative or not finite, sizes not
 * ascending in 1 .. world or with no sum equal to world, a piece of no
 * tokens or longer than the largest size * T, the tokens not world * T)
 * or out of memory; *nslots receives the slot count (0 on failure). */
int layout_dyn_assign(const layout_dyn_shape *sh, const layout_doc *pieces, int n, layout_dyn_group *groups,
                      layout_slot *slots, int *nslots);
/* Max over mean of the groups' per-rank cost, each group weighted by its
 * ranks: 1 is perfect balance (0 for no groups). */
double layout_dyn_imbalance(const layout_dyn_group *groups, int ngroups);

#ifdef __cplusplus
}
#endif

#endif
