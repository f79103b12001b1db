/* frontend.h — the layout language: lexer, parser, semantic analysis.
 * The only header of frontend/.
 *
 *   text ──fe_parse──▶ fe_spec (checked, defaults filled) ──lower (driver/)──▶ IR
 *
 * The language (full grammar in frontend/README.md):
 *
 *   import "common.basp"                 # shared model/mesh definitions
 *   model llama_3_2_1b { hidden 2048 layers 16 heads 32 kv_heads 8 head_dim 64
 *                        ffn 8192 vocab 128256 rope_theta 500000 norm_eps 1e-5
 *                        tie_embeddings true }
 *   model qwen from "config.json"        # Hugging Face config.json
 *   mesh a100x8 { nodes 2 devices_per_node 4 device a100_40gb
 *                 link intra nvlink bandwidth 300GB/s latency 2us
 *                 link inter ib     bandwidth 400Gb/s latency 5us }
 *   train  { micro_batch 2 seq_len 16K precision bf16 zero 3 optimizer adamw lr 3e-4 }
 *   layout { sequence ulysses batch_aware auto }   # auto | on | off | groups <G>
 *   layout { sequence hybrid ring_degree 2 a2a flat batch_aware groups 2 }
 *
 * When a file defines (or imports) several models or meshes, the last one
 * defined wins: an import expands in place, so a block written after
 * `import` replaces the imported one; `use model NAME` is not needed. */
#ifndef BASP_FRONTEND_H
#define BASP_FRONTEND_H

#include <stdbool.h>
#include <stdint.h>

#include "../layout/layout.h"
#include "../support/support.h"

enum { FE_NAME_MAX = 64 };
/* mesh.placement's text: a word, or a list of every rank's node. */
enum { FE_PLACEMENT_MAX = 4096 };
/* Upper bound on model.layers (lowering takes about a second at this depth). */
enum { FE_MAX_LAYERS = 1024, FE_MAX_ATTENTION_CHUNKS = 8 };
/* train.attention_chunks auto: chosen when the step is built (driver/settle.c
 * drv_chunks_settled). */
#define FE_CHUNKS_AUTO ((int64_t)-1)

typedef enum {
    FE_BA_AUTO,    /* any legal G: the planner's choice (driver/settle.c) */
    FE_BA_ON,      /* like auto among G > 1; an error when none is legal */
    FE_BA_OFF,     /* plain Ulysses over all N ranks */
    FE_BA_GROUPS,  /* exactly `groups` groups */
    FE_BA_DYNAMIC, /* groups chosen per micro-step by the documents' lengths (frontend/dynamic.c) */
} fe_batch_aware;

typedef struct fe_model {
    char name[FE_NAME_MAX];
    int64_t hidden, layers, heads, kv_heads, head_dim, ffn, vocab;
    double rope_theta, norm_eps;
    bool tie_embeddings;
    /* Qwen's attention features: biases on the q, k and v projections
     * (Qwen1.5/2/2.5), RMSNorm over head_dim on q and k before RoPE with
     * weights of their own (Qwen3).  Default false. */
    bool qkv_bias, qk_norm;
    /* RoPE frequency scaling: "none" (default) or "llama3", whose
     * parameters default to Llama 3.1's (factor 8, low 1, high 4, original
     * context 8192) and only apply with "llama3". */
    char rope_scaling[16];
    double rope_factor, rope_low_freq_factor, rope_high_freq_factor;
    int64_t rope_original_max_pos;
} fe_model;

/* A link: kind (nvlink, ib, pcie, ethernet, shm, tcp ...), bandwidth in
 * bytes per second (Gb/s are converted), latency in seconds, efficiency
 * (achievable fraction of bandwidth, default 1).  The type is layout/'s, so
 * that presets and specs share it. */
typedef layout_link fe_link;

typedef struct fe_mesh {
    char name[FE_NAME_MAX];
    int64_t nodes, devices_per_node;
    /* Network interfaces per node that the inter link describes; the
     * devices of a node share them.  Default devices_per_node: one per
     * device, as in DGX-class nodes. */
    int64_t nics_per_node;
    /* CPU cores per node that its ranks run on (CPU target), when fewer
     * than the ranks: they share them, and the cost model stretches their
     * work by devices_per_node / cores_per_node.  0 (default): a core or
     * more per rank. */
    int64_t cores_per_node;
    /* Where the launcher puts ranks: "consecutive" (default: rank r on
     * node r / devices_per_node, as `mpirun --map-by slot` and `srun
     * --distribution=block` place them), "round_robin" (node r % nodes:
     * `--map-by node`, `--distribution=cyclic`) or a list of every rank's
     * node ("0 1 0 1 ...").  fe_placement_nodes reads it. */
    char placement[FE_PLACEMENT_MAX];
    char device[FE_NAME_MAX]; /* preset name, e.g. a100_40gb, cpu */
    double device_mem;        /* bytes, from the preset unless given (`memory 40GB`) */
    fe_link intra, inter;
    /* Host memory: bytes per node that offloaded values may use
     * (`host_memory 2TB`), and the link between each device and it
     * (`link host pcie5`; kind `none`: no host link, nothing can be
     * offloaded).  Both from the device preset unless given. */
    double host_mem;
    fe_link host;
} fe_mesh;

typedef struct fe_train {
    int64_t micro_batch, seq_len;
    /* Sequences per optimizer step: a multiple of micro_batch (default
     * micro_batch); global_batch / micro_batch micro-steps are accumulated
     * into each update (passes/pass_zero.c). */
    int64_t global_batch;
    char precision[16]; /* bf16 | fp32 ; default bf16 */
    int zero;           /* 0..3 ; default 0 */
    char optimizer[16]; /* adamw ; default adamw */
    double lr;          /* the base (peak) rate; default 3e-4 */
    /* The learning-rate schedule (runtime/core/rt_sched.c has the formulas):
     * constant (default) | cosine | linear | wsd, after `warmup` steps of
     * linear warmup from 0 (default 0); the decay ends at min_lr (default
     * 0); wsd decays over the last wsd_decay (default 0.2) of the
     * post-warmup steps. */
    char schedule[16];
    int64_t warmup;
    double min_lr, wsd_decay;
    /* AdamW: decoupled weight decay on matrices (default 0.1), betas (0.9,
     * 0.95), eps (1e-8); grad_clip, the global-norm limit (default 1.0,
     * 0 = off). */
    double weight_decay, beta1, beta2, eps, grad_clip;
    int64_t steps; /* default 10 */
    int64_t seed;  /* default 1234 */
    /* Tokens per chunk of the fused, tiled MLP (0: the unfused MLP, whose
     * [tokens, ffn] intermediates live until the backward); default
     * FE_MLP_AUTO: chosen when the step is built (driver/settle.c
     * pass_mlp_chunk_auto), unfused when the step fits with it, else
     * fe_mlp_chunk_alst. */
    int64_t mlp_chunk;
    /* Head-chunked attention (passes/pass_ulysses.c): the attention layer
     * runs its exchanges and kernels over this many chunks of the heads,
     * one after another, so that only one chunk's full-sequence tensors
     * are alive at a time; 1 (default): unchunked.  Divides heads and
     * kv_heads (Ulysses, ring and hybrid).  FE_CHUNKS_AUTO: the fewest chunks
     * whose step fits, chosen when the step is built. */
    int64_t attention_chunks;
    char recompute[16]; /* none | selective | full | auto ; default none */
    /* What lives in host memory between its forward and its backward
     * (passes/pass_offload.c): none | activations | optimizer | all | auto;
     * default none. */
    char offload[16];
    /* Packed documents: the data is split at eot_token (the end-of-text
     * token id, required with documents on) and the documents packed into
     * the rows; attention and positions stay within each document.
     * packing: sequential | balanced (default). */
    bool documents;
    /* Start ZeRO's weight gathers early so that compute hides them
     * (passes/pass_overlap.c); default off. */
    bool overlap;
    /* The LM head's loss and its gradient in one op, the logits formed once
     * (passes/pass_fuse_loss.c); default on. */
    bool fuse_loss;
    /* Each residual add and the norm next to it in one op, forward and
     * backward (passes/pass_fuse_elem.c); default on. */
    bool fuse_elem;
    /* Each RoPE rotation done by the sequence exchange next to it, while it
     * packs q and k (backward: while it unpacks their gradients)
     * (passes/pass_fuse_rope.c); default on. */
    bool fuse_rope;
    /* Each attention forward's softmax statistics a value of the step that
     * its backward reads, placed by the memory plan and movable by offload
     * (passes/pass_attention_lse.c); default on.  Off: the backends keep
     * them per output address outside the arena. */
    bool attention_lse;
    int64_t eot_token;
    char packing[16];
} fe_train;

typedef struct fe_layout {
    char sequence[16]; /* ulysses (default) | ring | hybrid | auto */
    fe_batch_aware batch_aware;
    int64_t groups;      /* for FE_BA_GROUPS */
    int64_t ring_degree; /* R, sequence hybrid only; 0 when not given */
    char a2a[32];        /* flat (default) | auto | a registered variant's word (two_level) */
    /* batch_aware dynamic: the group sizes its variants are built for, as
     * written ("1 2 4" or "1,2,4"); empty = every legal size (fe_dynamic_sizes). */
    char group_sizes[128];
} fe_layout;

/* Where each key was written, for diagnostics raised after parsing (passes
 * look keys up by "block.key", e.g. "layout.batch_aware"). */
typedef struct fe_keyloc {
    char key[48];
    sup_loc loc;     /* the value (what diagnostics point at) */
    sup_loc key_loc; /* the key itself ("previous definition here") */
} fe_keyloc;

typedef struct fe_spec {
    const char *file; /* main file name as registered with support */
    fe_model model;
    fe_mesh mesh;
    fe_train train;
    fe_layout layout;
    fe_keyloc *locs;
    int nlocs, caplocs;
} fe_spec;

/* Parses and checks a spec from a file / from text (`name` is used in
 * diagnostics and to resolve relative imports).  Diagnostics go to the
 * support sink.  Returns NULL when there was any error. */
fe_spec *fe_parse_file(const char *path);
fe_spec *fe_parse_string(const char *name, const char *text);

/* Parse only, no semantic check; used before overrides are applied.  Then
 * fe_override() any number of times, then fe_check().  fe_parse_* above is
 * fe_parse_*_unchecked + fe_check. */
fe_spec *fe_parse_file_unchecked(const char *path);
fe_spec *fe_parse_string_unchecked(const char *name, const char *text);

/* Applies "block.key=value" (e.g. "train.micro_batch=4",
 * "layout.batch_aware=groups 2", "mesh.inter.bandwidth=100Gb/s").  Values are
 * read with the language's own lexer, so units work.  Errors name the
 * override (file "<--set>") with a caret and a "did you mean".  Returns false
 * on error. */
bool fe_override(fe_spec *spec, const char *assignment);

/* A typed change to a checked spec: the keys the planner, --max-seq-len
 * and the memory suggestions vary.  Each candidate they weigh is the spec
 * with one applied (fe_spec_patched), so no value goes through text.  A
 * field at its zero value (NULL, 0, false) keeps the spec's. */
typedef struct fe_spec_patch {
    const char *sequence;  /* layout.sequence (ring_degree goes with a hybrid, as with --set) */
    const char *a2a;       /* layout.a2a */
    int batch_aware;       /* layout.batch_aware: 1 off, G >= 2 groups G */
    int64_t ring_degree;   /* layout.ring_degree */
    int zero;              /* train.zero (a change only ever raises it) */
    const char *recompute; /* train.recompute */
    const char *offload;   /* train.offload */
    bool set_mlp_chunk;    /* train.mlp_chunk = mlp_chunk (0 is a value: unfused) */
    int64_t mlp_chunk;
    int64_t attention_chunks; /* train.attention_chunks (>= 1) */
    int64_t nodes;            /* mesh.nodes */
    int64_t micro_batch;      /* train.micro_batch */
    int64_t seq_len;          /* train.seq_len */
} fe_spec_patch;
/* A copy of spec with p applied (NULL: none), each key stored as the same
 * key given with --set would be (so fe_check counts it as given), then
 * checked again; NULL, after diagnostics, when the result is not legal. */
fe_spec *fe_spec_patched(const fe_spec *spec, const fe_spec_patch *p);
/* The patch as the user would ask for it: "train.zero=3", several joined
 * by " --set " ("" for an empty patch). */
void fe_spec_patch_format(const fe_spec_patch *p, char *buf, size_t n);

/* ---- batch_aware dynamic (dynamic.c) ----
 * Every micro-step splits the N ranks into groups of sizes K_i, each one row
 * of K_i * T tokens of whole documents (T = micro_batch * seq_len / N, the
 * tokens each rank holds), the longest documents on the largest groups.  The
 * step is a family of variants, one per group size K, each the layout of one
 * block of K ranks (Ulysses over K, or a ring of K) with ZeRO over all N. */
enum { FE_DYN_MAX_SIZES = 16 };
/* The tokens each rank holds in every variant. */
int64_t fe_dynamic_tokens(const fe_spec *spec);
/* The group sizes of a checked dynamic spec, ascending; their count. */
int fe_dynamic_sizes(const fe_spec *spec, int *sizes);
/* Variant K's layout: one group (G = 1) over a block of K ranks, the
 * spec's family (ring: a ring of K; K = 1: no exchange), and its dimensions
 * for the layout rules (N = K, one row of K * T tokens). */
layout_choice fe_dynamic_choice(const fe_spec *spec, int K);
layout_dims fe_dynamic_dims(const fe_spec *spec, int K);

/* Fills defaults and checks every rule; returns false (with diagnostics) when
 * the spec is not legal. */
bool fe_check(fe_spec *spec);

/* Reads a device file (devfile.c: {"devices": [{"name": ..., "like": ...,
 * figures}]}) and adds its devices to the presets a spec can name
 * (layout_device_add).  False, after located errors, when the file cannot
 * be read, is not that JSON, has an unknown field or a bad figure, or names
 * a device already defined; the devices before the first error are added. */
bool fe_device_file_load(const char *path);
/* The same for text already in memory, registered as source `name`
 * (fuzz_devfile). */
bool fe_device_text_load(const char *name, const char *text, size_t len);
/* The location of byte `off` of text (line and column, 1-based), `len`
 * bytes long, in source `file`: for the JSON readers (hfjson.c,
 * devfile.c), whose parser keeps no positions. */
sup_loc fe_text_loc(const char *file, const char *text, size_t off, int len);

/* Where "block.key" was written, or the location of the block, or noloc. */
sup_loc fe_spec_loc(const fe_spec *spec, const char *key);

/* The layout rules live in layout/ (layout_illegal, layout_candidates); the
 * spec's dimensions for them: */
layout_dims fe_layout_dims(const fe_spec *spec);
/* True when `c` is one of the layouts the spec's layout block allows:
 * batch_aware off (G = 1), groups G, on (G > 1), auto (any G); sequence
 * and a2a as written, or any for auto; hybrid with the given ring_degree. */
bool fe_layout_allows(const fe_spec *spec, const layout_choice *c);
/* The spec's own layout when it names one exactly (no auto anywhere);
 * false when the planner must choose (driver/settle.c). */
bool fe_layout_concrete(const fe_spec *spec, layout_choice *out);

/* Called with the path of every file the frontend reads (the spec, each
 * import, each Hugging Face config.json), before it is read; NULL = none.
 * baspc uses it to refuse an output file that is one of its inputs.  It is
 * kept in the compilation context (sup_context.input_hook). */
typedef sup_input_fn fe_input_fn;
void fe_set_input_hook(fe_input_fn fn, void *ud);
void fe_note_input(const char *path); /* calls the hook */

int64_t fe_world(const fe_spec *spec); /* nodes * devices_per_node */
/* The node of every world rank under m->placement, into node_of (nodes *
 * devices_per_node entries); false, with the reason in why, when the text
 * is neither word nor a list naming a node for each rank with exactly
 * devices_per_node ranks on every node. */
bool fe_placement_nodes(const fe_mesh *m, int *node_of, char *why, size_t nwhy);
/* True when the placement puts rank r on node r / devices_per_node (the
 * default, and any list or word that amounts to it). */
bool fe_placement_consecutive(const fe_mesh *m);
/* train.mlp_chunk not given: chosen when the step is built. */
#define FE_MLP_AUTO (-1)
/* DeepSpeed ALST's tiling: hidden tokens per chunk once a rank holds more
 * than hidden tokens, else 0 (unfused). */
int64_t fe_mlp_chunk_alst(const fe_spec *spec);
void fe_spec_free(fe_spec *spec);
/* A deep copy (fe_override appends to the key locations, which must not be
 * shared); NULL when out of memory. */
fe_spec *fe_spec_copy(const fe_spec *spec);

/* Prints the checked spec back in the language (canonical form); the output
 * parses back to the same spec. */
void fe_spec_print(const fe_spec *spec, FILE *out);

/* Device and link presets: layout/presets.c (layout_device_lookup,
 * layout_link_lookup). */
typedef layout_device_preset fe_device_preset;

#endif
