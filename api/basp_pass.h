/* basp_pass.h — writing passes and layout strategies outside the compiler's
 * tree, and loading them as plugins.  Installed beside basp.h (PREFIX/
 * include/basp/); docs/writing-a-pass.md is the tutorial.
 *
 * A plugin is a shared object that exports one function:
 *
 *     #include <basp/basp_pass.h>
 *     static bool my_pass(basp_module *m) { ... rewrite m ...; return true; }
 *     static bool my_register(void) {
 *         return basp_register_pass("my-pass", "what it does", my_pass);
 *     }
 *     BASP_PLUGIN_EXPORT basp_plugin_info basp_pass_plugin_info(void) {
 *         return (basp_plugin_info){BASP_PASS_API_VERSION, "my-plugin", "1.0", my_register};
 *     }
 *
 * `baspc --load-pass-plugin=my.so` (and basp-opt, and basp_load_pass_plugin)
 * opens it, checks that it was built against this API version, and calls
 * its register function.  Its passes then run in --passes=, its strategies
 * are legal spec words, appear in --plan with their cost and build training
 * binaries.  The plugin does not link libbasp: the functions below are
 * resolved in the program that loads it (baspc, basp-opt, or a program
 * linked against libbasp.so).
 *
 * The IR is reached through handles, never through the compiler's structs,
 * so that a plugin keeps working across compiler versions with the same
 * API version: values, ops and groups are indices (0..count-1; -1 = none),
 * valid until the module changes shape (ops inserted or removed).  The
 * textual IR's reference is ir/README.md; what a partitioning pass
 * typically does (find ops, add groups, change shardings, insert
 * collectives in one batch) is shown in examples/hpz/, and a sequence
 * strategy built from the helpers the built-in passes share in
 * api/strategies/two_level.c.
 *
 * basp's own strategies are written and registered this way: the three
 * sequence families' rows (api/strategies/sequence.c) and the two-level
 * all-to-all with its pass (api/strategies/two_level.c) each export an
 * entry point like a plugin's, which the library runs when it starts (the
 * first call of this API or of basp.h), before any plugin is loaded. */
#ifndef BASP_PASS_H
#define BASP_PASS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "basp.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Raised when a signature or a struct below changes; a plugin built
 * against another version is refused at load with both numbers. */
#define BASP_PASS_API_VERSION 1

#define BASP_PLUGIN_EXPORT __attribute__((visibility("default")))

/* ---- the plugin's entry point ------------------------------------------------ */
typedef struct basp_plugin_info {
    int api_version;           /* BASP_PASS_API_VERSION, as the plugin was built */
    const char *name;          /* the plugin's name, for messages */
    const char *version;       /* the plugin's own version */
    bool (*register_fn)(void); /* registers its passes and strategies; false: the load fails */
} basp_plugin_info;
/* The symbol every plugin exports (declared here so that a plugin's
 * definition is checked against it; the loader finds it with dlsym). */
#define BASP_PLUGIN_ENTRY "basp_pass_plugin_info"
typedef basp_plugin_info (*basp_plugin_entry_fn)(void);
BASP_PLUGIN_EXPORT basp_plugin_info basp_pass_plugin_info(void);

/* Loads a plugin (also in basp.h's users: baspc, basp-opt).  False, after
 * an error naming the file, when it cannot be opened as a shared object,
 * lacks the entry symbol, was built against another API version, or its
 * registration fails (e.g. a pass or strategy name already taken). */
bool basp_load_pass_plugin(const char *path);

/* ---- registering ----------------------------------------------------------------- */
/* A pass rewrites the module in place; false on failure (after
 * basp_pass_error).  "Not applicable" is not a failure: leave the module
 * unchanged and say why with basp_pass_remark.  The verifier runs after
 * it; an invalid module is reported naming the pass and its plugin.  Every
 * failure of a plugin's pass ends with an error naming the pass and the
 * plugin's file: false (with or without basp_pass_error), and true after
 * an error was reported during it (basp_pass_error, or a bad handle to one
 * of the calls below, whose own message names the pass too), which stops
 * the pipeline as false does. */
typedef bool (*basp_pass_fn)(basp_module *m);
/* name: 1-63 characters, no commas or spaces, not yet registered.
 * summary: one line for --list-passes (NULL: none; a built-in pass keeps
 * the one its row in passes/passes.def gives). */
bool basp_register_pass(const char *name, const char *summary, basp_pass_fn run);

/* The dimensions the layout rules read: world N = nodes * devices per node
 * (dpn), micro-batch B, sequence length S, heads H, kv heads Hk. */
typedef struct basp_layout_dims {
    int64_t N, nodes, dpn, B, S, H, Hk;
} basp_layout_dims;
/* One choice of a strategy: G batch-aware groups of K = N/G ranks, and the
 * ring degree (1 for Ulysses, K for ring, 2 <= R < K for hybrid). */
typedef struct basp_layout_choice {
    int groups, ring_degree;
} basp_layout_choice;

/* A strategy: a variant of one of the sequence families, selected in a spec
 * by `layout { KEY WORD }` (key "a2a"), built by the family's passes and
 * its own.  The module's config then holds KEY = WORD, which its passes
 * check (basp_module_config) to skip other layouts.  With key NULL the row
 * is a family's own (name = family, its own legal and candidates): basp
 * registers the three itself, first (api/strategies/sequence.c), so a
 * plugin's is refused. */
typedef struct basp_strategy {
    const char *name;   /* "ulysses+hpz": the planner's name (at most 47 characters) */
    const char *family; /* "ulysses", "ring" or "hybrid" */
    const char *key;    /* "a2a" */
    const char *word;   /* "hpz" (at most 31 characters; not flat or auto) */
    const char *title;  /* for the training binary's banner; may be NULL */
    /* NULL when c is legal for d, else the broken rule (a string that
     * outlives the call: a literal, or basp_layout_reason's), with a hint
     * in fix (fix may be NULL, nfix 0).
     * The hint buffer's rule: basp zeroes all nfix bytes before the call
     * and sets fix[nfix-1] to NUL after it, so it reads at most nfix-1
     * bytes of hint; a hint that fills the buffer is cut, never read past
     * (snprintf(fix, nfix, ...) is the intended way to write it).
     * The family's rules apply after it (NULL function: those alone).
     * It is also asked about layouts of another family (a spec's `sequence
     * ring` with its word): when it reads the family (basp_layout_family)
     * its reason stands, else basp refuses the layout as one of another
     * family. */
    const char *(*legal)(const basp_layout_dims *d, const basp_layout_choice *c, char *fix, size_t nfix);
    /* The strategy's choices for G groups (legal or not), at most max;
     * returns how many there are.  NULL: the family's (one per G; hybrid:
     * one per ring degree). */
    int (*candidates)(const basp_layout_dims *d, int groups, basp_layout_choice *out, int max);
    /* Comma-separated, after batch-aware: the family's pass first
     * ("ulysses,..." for ulysses, "ring,..." for ring and hybrid), which
     * basp_register_strategy enforces: that pass splits the ranks into the
     * layout's G groups of K (@sp, config sp_size and batch_groups).  The
     * strategy's own passes may rewrite the groups (e.g. strided sets) but
     * must rewrite them together: the verifier refuses groups that no longer
     * give every rank its own block of a value, and after the full pipeline
     * the IR must still hold G groups of K ranks (@dp of K sets of G, @sp of
     * G sets of K, batch_groups = G, sp_size = K), else an error naming the
     * strategy and its plugin. */
    const char *passes;
    const char *after_zero; /* comma-separated, right after zero; NULL: none */
} basp_strategy;
/* Copies the row (the strings must outlive the program: literals).  False,
 * after an error, for a missing field, an unknown family or key, passes
 * that do not start with the family's pass, or a name or word already
 * registered. */
bool basp_register_strategy(const basp_strategy *s);
/* The family's own rules for c (what applies after a strategy's `legal`;
 * for a `legal` that needs their verdict first). */
const char *basp_layout_family_legal(const char *family, const basp_layout_dims *d, const basp_layout_choice *c,
                                     char *fix, size_t nfix);
/* What a `legal` returns: the broken rule formatted into basp's buffer
 * (valid until the next reason), with the hint copied into fix (hint NULL:
 * an empty hint). */
const char *basp_layout_reason(char *fix, size_t nfix, const char *hint, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Inside a `legal`, the family ("ulysses", "ring", "hybrid") of the layout
 * c that basp asks about (c: the pointer legal was given; NULL for any
 * other).  Reading it lets the strategy say itself why a layout of another
 * family does not do (basp_strategy, legal). */
const char *basp_layout_family(const basp_layout_choice *c);
/* True when K ranks split the heads unevenly (ir/README.md, uneven splits):
 * kv heads >= K and not divisible by K, heads a multiple of kv heads. */
bool basp_layout_heads_uneven(const basp_layout_dims *d, int64_t K);

/* ---- diagnostics from a pass -------------------------------------------------- */
void basp_pass_remark(const char *fmt, ...) __attribute__((format(printf, 1, 2))); /* unless quiet */
void basp_pass_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* ---- the module ------------------------------------------------------------------ */
int basp_ir_world(const basp_module *m); /* nodes * devices per node */
int basp_ir_nodes(const basp_module *m);
int basp_ir_devices_per_node(const basp_module *m);
int basp_ir_node_of(const basp_module *m, int rank); /* ranks are numbered node by node */
/* basp_module_config (basp.h) reads a config value; these write and read
 * integers.  Every spec field a pass needs is in the config ("zero",
 * "micro_batch", "heads", "sequence", "a2a", "groups" ...). */
void basp_ir_config_set(basp_module *m, const char *key, const char *value);
int64_t basp_ir_config_int(const basp_module *m, const char *key, int64_t def);
/* The module's layout dimensions and choice, as the layout rules see them. */
basp_layout_dims basp_ir_layout_dims(const basp_module *m);

/* ---- groups: named process groups, each nsets disjoint sets of set_size ranks - */
int basp_ir_group_count(const basp_module *m);
int basp_ir_group_find(const basp_module *m, const char *name); /* -1 if absent */
const char *basp_ir_group_name(const basp_module *m, int g);
int basp_ir_group_sets(const basp_module *m, int g);
int basp_ir_group_set_size(const basp_module *m, int g);
int basp_ir_group_rank(const basp_module *m, int g, int set, int pos);
/* Adds (or replaces) group `name`: ranks holds nsets * set_size ranks, set
 * s at [s*set_size, (s+1)*set_size).  Returns its index. */
int basp_ir_group_add(basp_module *m, const char *name, int nsets, int set_size, const int *ranks);
/* True when every set of `whole`, in position order, is |outer| runs of
 * |inner| ranks, each run a set of inner (ir/README.md, nested groups). */
bool basp_ir_group_nested(const basp_module *m, int whole, int outer, int inner);

/* ---- values: params, inputs, accumulators and op results -------------------------- */
typedef enum { BASP_V_PARAM, BASP_V_INPUT, BASP_V_ACCUM, BASP_V_RESULT } basp_value_kind;
int basp_ir_value_count(const basp_module *m);
int basp_ir_value_find(const basp_module *m, const char *name); /* without the %; -1 if absent */
const char *basp_ir_value_name(const basp_module *m, int v);
basp_value_kind basp_ir_value_kind(const basp_module *m, int v);
int basp_ir_value_def(const basp_module *m, int v);           /* the op defining a result, else -1 */
const char *basp_ir_value_dtype(const basp_module *m, int v); /* "f32", "bf16", "i32" ... */
int basp_ir_value_rank(const basp_module *m, int v);
int64_t basp_ir_value_dim(const basp_module *m, int v, int d); /* global size of dim d */
int basp_ir_value_shard(const basp_module *m, int v, int d);   /* group sharding dim d, -1 = whole */
void basp_ir_value_set_shard(basp_module *m, int v, int d, int group);
/* A new result value named base (or base.1, base.2 ... when taken) with
 * the type of value `like`; returns its index. */
int basp_ir_value_like(basp_module *m, const char *base, int like);
/* The weight-like values by dataflow (parameters, their gradients and
 * every collective or sum of them), one flag per value; free() it. */
bool *basp_ir_weight_flags(const basp_module *m);

/* ---- what the built-in partitioning passes share: heads, batches, sequences ------ */
/* v's type from sequence-sharded [B,S@g,H,Dh] to head-sharded [B,S,H*F@g,Dh]
 * (F = fanout: GQA kv heads sent to the F ranks that share each, 1 for a
 * plain split). */
void basp_ir_value_split_heads(basp_module *m, int v, int group, int64_t fanout);
/* The head-sharded twin of v made by the forward exchanges over group: the
 * output of an all_to_all reading v (split 2), or the input of one making v
 * (split 1); v itself when there is none. */
int basp_ir_heads_twin(const basp_module *m, int group, int v);
/* Recomputes, for every all_to_all over group, the virtual-head sizes and
 * the fanout / fanin attributes for its current set size (after a pass
 * changes the group's size). */
void basp_ir_fix_virtual_heads(basp_module *m, int group);
/* Shards dim 0 (the batch) over dp of every value of rank >= 2 that carries
 * a shard by sp: batch-aware's data partitioning. */
void basp_ir_shard_batch(basp_module *m, int sp, int dp);
/* Shards dim 1 (the sequence) over group of every activation (not
 * weight-like, rank >= 2): the sequence partitioning of Ulysses and ring. */
void basp_ir_shard_sequence(basp_module *m, int group);
/* A new result named after v with suffix (".heads", ".mid"; base.1, base.2
 * ... when taken) with the type of value `like`; returns its index. */
int basp_ir_value_derived(basp_module *m, int v, const char *suffix, int like);
/* NULL when the layout the module's config names (sequence, ring_degree,
 * a2a) is legal with `groups` batch-aware groups on the module's
 * dimensions, else the broken rule (valid until the next): a pass checks
 * its own layout with it, since hand-written IR has no spec. */
const char *basp_ir_layout_illegal(const basp_module *m, int groups);

/* ---- ops ---------------------------------------------------------------------------- */
int basp_ir_op_count(const basp_module *m);
const char *basp_ir_op_name(const basp_module *m, int op); /* "all_gather" */
int basp_ir_op_num_inputs(const basp_module *m, int op);
int basp_ir_op_num_outputs(const basp_module *m, int op);
int basp_ir_op_input(const basp_module *m, int op, int k);
int basp_ir_op_output(const basp_module *m, int op, int k);
void basp_ir_op_set_input(basp_module *m, int op, int k, int value);
bool basp_ir_op_has_attr(const basp_module *m, int op, const char *key);
int64_t basp_ir_op_attr_int(const basp_module *m, int op, const char *key, int64_t def);
int basp_ir_op_group(const basp_module *m, int op);         /* attr group, -1 if none */
int basp_ir_op_layer(const basp_module *m, int op);         /* -1 outside the layers */
const char *basp_ir_op_phase(const basp_module *m, int op); /* "fwd", "bwd", "opt" or "" */
void basp_ir_op_set_attr_int(basp_module *m, int op, const char *key, int64_t v);
void basp_ir_op_set_attr_group(basp_module *m, int op, const char *key, int group);
/* Every use of value `from` by ops [start, count) reads `to` instead. */
void basp_ir_replace_uses(basp_module *m, int from, int to, int start);

/* ---- inserting ops in one batch ------------------------------------------------
 * Ops are recorded against the indices of the schedule as it is, then
 * inserted together by basp_edits_apply (one pass over the module however
 * many there are).  Between original ops i-1 and i come the ops recorded
 * "after i-1", latest first, then those "before i" in recording order. */
typedef struct basp_edits basp_edits;
basp_edits *basp_edits_new(void);
/* Records op `name` (an op of ir/ir_ops.def) reading ins and defining outs,
 * with the layer and phase of op `like` (-1: none).  Returns a handle for
 * the attribute calls below, -1 for an unknown op or too many operands
 * (reported). */
int basp_edits_insert_before(basp_edits *e, int pos, const char *name, const int *ins, int nin, const int *outs,
                             int nout, int like);
int basp_edits_insert_after(basp_edits *e, int pos, const char *name, const int *ins, int nin, const int *outs,
                            int nout, int like);
void basp_edits_attr_int(basp_edits *e, int h, const char *key, int64_t v);
void basp_edits_attr_group(basp_edits *e, int h, const char *key, int group);
/* Records the all_to_all the built-in partitioning passes insert: ins[k]
 * into outs[k] (k < n) over group, from the sequence to the heads (split 2,
 * concat 1, fanout = fan) or back (to_heads false: split 1, concat 2,
 * fanin = fan), the fan written only when above 1; the layer and phase of
 * op `like`.  Returns its handle, -1 after an error. */
int basp_edits_exchange_before(basp_edits *e, int pos, int group, int n, const int *ins, const int *outs, bool to_heads,
                               int64_t fan, int like);
int basp_edits_exchange_after(basp_edits *e, int pos, int group, int n, const int *ins, const int *outs, bool to_heads,
                              int64_t fan, int like);
/* Leaves op `op` out when the edits are applied; the ops recorded around
 * it stay in their places, so that ops recorded before it and its removal
 * replace it.  What it defined must be defined again or no longer read. */
void basp_edits_remove(basp_edits *e, int op);
/* Inserts every recorded op into m and frees e. */
void basp_edits_apply(basp_module *m, basp_edits *e);

#ifdef __cplusplus
}
#endif
#endif
