/* ir.h — the basp intermediate representation.  The only header of ir/.
 *
 * A module is one training step of one model on one mesh:
 *   - a config (ordered key = value list copied from the spec),
 *   - the mesh (nodes × devices per node, intra/inter links),
 *   - process groups: each a partition of the world into equal, disjoint
 *     rank sets (a collective on group G runs independently in every set),
 *   - values: parameters, inputs and op results, each with a dtype, a global
 *     shape and per dimension the group that shards it (or none),
 *   - ops in schedule order (the order codegen emits them).
 *
 * Textual form (printer ir_print.c, parser ir_parse.c; they round-trip
 * exactly, see ir/README.md):
 *
 *   module @tiny
 *   config hidden = 64
 *   config precision = bf16
 *   mesh nodes = 2, devices_per_node = 4
 *   link intra kind = shm, bandwidth = 1e+10, latency = 1e-06, efficiency = 1
 *   link inter kind = tcp, bandwidth = 2.5e+08, latency = 5e-05, efficiency = 1
 *   group @world = {[0,1,2,3,4,5,6,7]}
 *   group @sp = {[0,1,2,3],[4,5,6,7]}
 *   group @dp = {[0,4],[1,5],[2,6],[3,7]}
 *   param %l0.wq : f32[64,4,16]
 *   input %tokens : i32[2@dp,64@sp]
 *   %l0.q = linear %l0.h, %l0.wq {contract = 1, layer = 0, phase = fwd} : bf16[2@dp,64@sp,4,16]
 *   %l0.qa, %l0.ka = all_to_all %l0.q, %l0.k {group = @sp, split = 2, concat = 1} : bf16[...], bf16[...]
 *   adamw %l0.wq, %d.l0.wq {phase = opt}
 *
 * A dimension written `64@sp` has global size 64 and is split evenly over
 * the ranks of each set of group @sp (each holds 64/K).  Values are named,
 * and names are unique in a module; there are no anonymous temporaries. */
#ifndef BASP_IR_H
#define BASP_IR_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "../common/common.h"
#include "../support/support.h"

enum { IR_NAME_MAX = 64, IR_MAX_RANK = CM_MAX_RANK, IR_MAX_IN = 8, IR_MAX_OUT = 4, IR_MAX_ATTRS = 12 };

struct ir_module;

/* ---- op table ----------------------------------------------------------- */
typedef enum { IR_K_COMPUTE, IR_K_COLL, IR_K_P2P, IR_K_MEM, IR_K_OPT } ir_op_kind;

typedef enum {
#define IR_OP(e, d) IR_##e,
#include "ir_ops.def"
#undef IR_OP
    IR_NUM_OPS
} ir_opcode;

typedef struct ir_op_desc ir_op_desc; /* one per op: see "op descriptors" below */

/* How the cost model times an op (passes/cost.c): on the device alone, or
 * over the links of its group. */
typedef enum {
    IR_COMM_NONE,         /* a kernel (or bookkeeping: kind IR_K_MEM): the roofline of its work */
    IR_COMM_ALL_TO_ALL,   /* every rank of a set sends to every other: achieved a2a bandwidth */
    IR_COMM_RING,         /* a ring collective: ir_op_desc.ring_latencies x (P-1) latencies */
    IR_COMM_SEND,         /* point-to-point, counted once on the send */
    IR_COMM_RECV,         /* ... the receive waits for it: no time of its own */
    IR_COMM_RING_OVERLAP, /* compute in R blocks, each overlapped with a hop around the group's ring */
    IR_COMM_HOST,         /* a copy between the device and host memory over the host link (offload, fetch) */
} ir_comm_class;

/* What one rank of an op does, as pure functions of the local shapes and
 * attributes (ir_op_work_of); the cost model turns it into seconds. */
typedef struct ir_op_work {
    double flops; /* floating-point operations */
    double bytes; /* bytes moved through device memory */
    double exps;  /* exponentials (softmax, sigmoid): costly on a CPU */
    /* IR_COMM_RING_OVERLAP: bytes passed one hop per ring step while the
     * next block computes, and (tail_hops) bytes handed on after each of the
     * R blocks, which the next block waits for. */
    double hop_bytes, tail_bytes;
    bool tail_hops;
} ir_op_work;
/* The descriptor of an opcode; NULL when out of range. */
const ir_op_desc *ir_op_desc_of(ir_opcode op);
int ir_opcode_lookup(const char *name); /* -1 if unknown */

/* ---- types -------------------------------------------------------------- */
typedef enum { IR_F32, IR_BF16, IR_F16, IR_I32 } ir_dtype;
const char *ir_dtype_name(ir_dtype t);
int ir_dtype_size(ir_dtype t);
int ir_dtype_lookup(const char *name); /* -1 if unknown */

typedef struct ir_type {
    ir_dtype dtype;
    int rank;                  /* 0 = scalar */
    int64_t dims[IR_MAX_RANK]; /* global sizes */
    int shard[IR_MAX_RANK];    /* group index sharding the dim, -1 = whole */
    /* 0: the sharded dim splits evenly (dims % set_size == 0).  u >= 1: an
     * uneven ("balanced") split in whole units of u (printed `6@sp:1`): with
     * m = dims/u units over K ranks, position p holds m/K + (p < m%K) units
     * starting at unit p*(m/K) + min(p, m%K).  Only on dim 2 (heads) of the
     * attention exchange values; the verifier checks where it may appear. */
    int64_t unit[IR_MAX_RANK];
} ir_type;

/* Balanced split of n = u*m entries (units of u, u >= 1) over K ranks:
 * the entry count and first entry of position p (see ir_type.unit). */
int64_t ir_split_len(int64_t n, int64_t u, int K, int p);
int64_t ir_split_start(int64_t n, int64_t u, int K, int p);
/* Local size of dim d of t at position p of its sharding set (the dim's
 * global size when whole); ir_type_max_local_dim is the largest over p. */
int64_t ir_type_local_dim(const struct ir_module *m, const ir_type *t, int d, int p);
int64_t ir_type_max_local_dim(const struct ir_module *m, const ir_type *t, int d);
/* True when some dim of t is split unevenly (unit > 0 and the sizes differ by rank). */
bool ir_type_uneven(const struct ir_module *m, const ir_type *t);

/* Elements one rank holds (global dims divided by the sharding groups' set
 * sizes); for an uneven dim, the largest rank's share (the max over ranks). */
int64_t ir_type_local_elems(const struct ir_module *m, const ir_type *t);
int64_t ir_type_global_elems(const ir_type *t);
bool ir_type_equal(const ir_type *a, const ir_type *b);
/* A type with every dim unsharded (shard[] = -1); rank is clamped to 0..IR_MAX_RANK. */
ir_type ir_type_make(ir_dtype dtype, int rank, const int64_t *dims);
/* Formats a type as printed ("bf16[2@dp,64@sp,4,16]") into buf; returns buf.
 * IR_TYPE_STR_MAX bytes are always enough. */
enum { IR_TYPE_STR_MAX = 768 };
const char *ir_type_str(const struct ir_module *m, const ir_type *t, char *buf, size_t n);
/* The dtype names, for "did you mean". */
const char *const *ir_dtype_all(int *n);

/* ---- values -------------------------------------------------------------- */
/* param: a weight; input: the step's tokens/targets; accum: a gradient
 * accumulator that lives across the micro-steps of an optimizer step
 * (written by `accumulate`, read by the step's apply phase, zero at the
 * start of every step); result: an op's output. */
typedef enum { IR_V_PARAM, IR_V_INPUT, IR_V_ACCUM, IR_V_RESULT } ir_value_kind;
/* "param", "input", "accum", "result". */
const char *ir_value_kind_name(ir_value_kind k);

typedef struct ir_value {
    char name[IR_NAME_MAX]; /* without the % */
    ir_value_kind kind;
    ir_type type;
    int def;     /* index of defining op for IR_V_RESULT, else -1 (kept by ir_renumber) */
    sup_loc loc; /* where it was defined (textual IR), else noloc */
    /* Byte offset of the value's buffer in the step's arena (pass memplan,
     * printed `: f32[64] at 4096`), -1 when the module has no memory plan. */
    int64_t mem_off;
} ir_value;

/* ---- attributes ---------------------------------------------------------- */
typedef enum { IR_A_INT, IR_A_FLOAT, IR_A_IDENT, IR_A_GROUP } ir_attr_kind;

/* Keys and identifier values are interned (ir_intern): one copy of each
 * distinct string in the compilation context, so an op stays small (passes copy and
 * insert into op arrays of 10^5 ops at depth) and a key compares by
 * pointer first.  Keys keep at most IR_ATTR_KEY_MAX - 1 characters and
 * identifier values IR_NAME_MAX - 1, as the textual form allows. */
enum { IR_ATTR_KEY_MAX = 24 };
typedef struct ir_attr {
    const char *key; /* interned */
    ir_attr_kind kind;
    union {
        int64_t i;     /* IR_A_INT; group index for IR_A_GROUP */
        double f;      /* IR_A_FLOAT */
        const char *s; /* IR_A_IDENT, interned */
    };
} ir_attr;

/* ---- ops ------------------------------------------------------------------ */
typedef struct ir_op {
    ir_opcode code;
    int nin, nout;
    int in[IR_MAX_IN];   /* value indices */
    int out[IR_MAX_OUT]; /* value indices */
    int nattrs;
    ir_attr attrs[IR_MAX_ATTRS]; /* printed in this order */
    sup_loc loc;                 /* where the op was read (textual IR), else noloc */
} ir_op;

/* ---- op descriptors -------------------------------------------------------
 * Everything the compiler knows about one op, in one entry (its family file
 * ir_op_*.c; ir_ops.def lists them): the verifier, the memory plan, the cost
 * model and codegen read an op's rules from here and never switch on the
 * opcode themselves.  Plain data first, then what is computed. */
struct ir_vctx; /* the verifier's context (ir_verify.h, private to ir/) */
struct ir_emit; /* the runtime-call emitter (below; codegen implements it) */
struct ir_op_desc {
    const char *name; /* the opcode as written in the textual form */
    ir_op_kind kind;
    int min_in, max_in, min_out, max_out; /* operand and result counts */
    /* The type and layout rules (ir/README.md, rule 5), reported through
     * the context; NULL: none (send, recv, free).  Operand and result
     * indices are known to be valid. */
    void (*verify)(struct ir_vctx *c, const ir_op *op);

    /* Result 0 is the rank's partial loss sum, which the loss's all_reduce
     * reads (lm_head_loss, lm_head_loss_grad; ir_is_partial_loss). */
    bool partial_loss;

    /* ---- memory (ir_mem.c) ---- */
    /* Outputs that are weight gradients, bit k for output k: the ops that
     * turn activations into a parameter-shaped result (ir_weight_flags). */
    unsigned wgrad_outs;
    /* Results are weight-like when the first operand is: sums and
     * reductions of weights stay weights (add, the collectives). */
    bool keeps_weight;
    /* Outputs every backend keeps in fp32, bit k for output k, even where
     * activations are bf16 (ir_mem_keeps_f32). */
    unsigned f32_outs;
    /* Outputs that live in host memory, bit k for output k (offload): the
     * memory plan places them in the host arena, and only ops that declare
     * reads_host may read them (ir_mem_on_host). */
    unsigned host_outs;
    bool reads_host; /* the operands live in host memory (fetch) */
    /* Elements the CPU runtime asks of its staging area (cpu_scratch):
     * e[0] the send / gather side, e[1] the receive side; NULL: none. */
    void (*staging)(const struct ir_module *m, const ir_op *op, int64_t e[2]);
    /* Kernel workspace outside the arena per target: raises each of the
     * target's workspace slots the op uses (ir_op.h, bytes) to what it
     * needs; NULL: none (ir_mem_work_bytes). */
    void (*ws_cpu)(const struct ir_module *m, const ir_op *op, int64_t *slot);
    void (*ws_cuda)(const struct ir_module *m, const ir_op *op, int64_t *slot);

    /* ---- cost (passes/cost.c) ---- */
    ir_comm_class comm;
    double ring_latencies; /* IR_COMM_RING: latencies per step of the ring (all_reduce: 2) */
    /* IR_COMM_RING: bytes one rank sends for an operand of in_bytes over a
     * set of P ranks (the schedule report's and the cost model's traffic,
     * passes/schedule.c pass_op_traffic). */
    double (*ring_sent)(double in_bytes, int P);
    /* Attention kernels run at their own fraction of peak (config
     * cost.attention_fraction) and count as attention time. */
    bool attention;
    /* The op's work; NULL: no FLOPs or exps, and every operand read and
     * every result written once (ir_op_work_of). */
    ir_op_work (*work)(const struct ir_module *m, const ir_op *op);

    /* ---- codegen (codegen/cg_ops.c) ---- */
    const char *rt_fn; /* the runtime function the op lowers to */
    /* The collective may be started asynchronously (attr `async = 1`): it
     * lowers to rt_fn_start, issued with the same arguments, and a later
     * `wait` on its results (rt_wait) completes it (ir/README.md
     * "Asynchronous collectives"). */
    const char *rt_start_fn;
    /* Writes the op's call of rt_fn with its arguments, or reports (fail)
     * a shape the call cannot express. */
    void (*emit)(struct ir_emit *e);
};

/* ---- runtime-call emission ------------------------------------------------
 * An op's descriptor writes the op's runtime call (its emit) through this
 * small interface, which codegen implements: ir/ knows each call's
 * arguments, their order and how the local sizes follow from the shapes;
 * codegen knows the C syntax, the names of values and groups, and the
 * config defaults.  Value and group arguments are indices. */
typedef struct ir_emit ir_emit;
struct ir_emit {
    const struct ir_module *m;
    const ir_op *op;
    void *ctx;                                /* the backend's own state */
    void (*call)(ir_emit *e, const char *fn); /* opens the call of runtime function fn */
    void (*end)(ir_emit *e);                  /* closes it */
    void (*i64)(ir_emit *e, int64_t v);
    void (*f64)(ir_emit *e, double v);
    /* Value v's buffer, read as int32 (want_int) or as float; reports a
     * value whose dtype does not match. */
    void (*buf)(ir_emit *e, int v, bool want_int);
    void (*value)(ir_emit *e, int v);                /* v itself (collectives, optimizer, free) */
    void (*values)(ir_emit *e, const int *v, int n); /* a list of values */
    void (*group)(ir_emit *e, int g);
    void (*group_pos)(ir_emit *e, int g, int64_t stride); /* this rank's position in g, times stride */
    void (*local_dim)(ir_emit *e, int v, int d);          /* v's dim d as this rank holds it, at run time */
    /* The gradient scale of the mean loss: 1/n, or with n = 0 the
     * runtime's count of the step's targets (packed documents). */
    void (*loss_scale)(ir_emit *e, int64_t n);
    /* Config values with the layout language's defaults. */
    double (*config_double)(ir_emit *e, const char *key);
    int64_t (*config_int)(ir_emit *e, const char *key);
    /* Reports that the op cannot be emitted (the first report per op counts). */
    void (*fail)(ir_emit *e, const char *msg);
    /* The forward-only program (validation, ir_forward_program): an op
     * fused with its backward emits its forward alone. */
    bool forward_only;
};

/* The work of op on one rank (its descriptor's work, else the default). */
ir_op_work ir_op_work_of(const struct ir_module *m, const ir_op *op);

/* ---- groups and mesh ----------------------------------------------------- */
typedef struct ir_group {
    char name[IR_NAME_MAX]; /* without the @ */
    int nsets, set_size;
    int *ranks; /* nsets * set_size ranks, set s = ranks[s*set_size .. +set_size) */
    /* 0: the sets partition the world's ranks.  K > 0: a block group of a
     * dynamic variant (batch_aware dynamic): the sets partition the
     * positions 0..K-1 of a block of K consecutive ranks that the runtime
     * chooses every micro-step; position i is rank first + i. */
    int block;
    sup_loc loc; /* where it was defined (textual IR), else noloc */
} ir_group;

typedef struct ir_link {
    char kind[IR_NAME_MAX];
    double bandwidth, latency, efficiency; /* bytes/s, s, fraction */
} ir_link;

typedef struct ir_mesh {
    int nodes, devices_per_node;
    /* Where ranks run: NULL when rank r is on node r / devices_per_node
     * (consecutive, the launchers' default), else the node of every world
     * rank (the spec's mesh.placement; textual IR `node_of = [...]`).
     * Owned by the module; set with ir_mesh_set_placement. */
    int *node_of;
    ir_link intra, inter;
} ir_mesh;

typedef struct ir_config_entry {
    char key[48];
    char value[96]; /* textual, as printed: 2048, 1e-05, bf16, true */
} ir_config_entry;

/* An open-addressing index from names to indices (private to ir/; the module
 * keeps one for its values so that ir_value_find is O(1)). */
typedef struct ir_name_index {
    int *slots; /* -1 = empty */
    int cap;    /* power of two */
    int count;
} ir_name_index;

typedef struct ir_module {
    char name[IR_NAME_MAX];
    ir_mesh mesh;
    ir_config_entry *config;
    int nconfig, capconfig;
    ir_group *groups;
    int ngroups, capgroups;
    ir_value *values;
    int nvalues, capvalues;
    ir_op *ops;
    int nops, capops;
    ir_name_index vnames; /* value names -> indices; change a value's name
                                only through ir_value_swap_names */
} ir_module;

/* ---- module API ---------------------------------------------------------- */
ir_module *ir_module_new(const char *name);
void ir_module_free(ir_module *m);
ir_module *ir_module_clone(const ir_module *m);
int ir_world(const ir_module *m); /* nodes * devices_per_node */
/* The ranks the sequence layout spans: config dyn_block = K (one variant of
 * batch_aware dynamic: a block of K ranks; every group but @world that the
 * module adds is then a block group) or, without it, the world. */
int ir_seq_world(const ir_module *m);
/* The node holding world rank r: the mesh's placement, else (consecutive
 * placement, or a rank outside the mesh in hand-written IR) r /
 * devices_per_node.  The one definition of the mesh geometry that the cost
 * model, the schedule report and placement share. */
static inline int ir_node_of(const ir_module *m, int r) /* inline: the cost model calls it per rank */
{
    if (m->mesh.node_of && r >= 0 && r < m->mesh.nodes * m->mesh.devices_per_node) return m->mesh.node_of[r];
    return r / (m->mesh.devices_per_node > 0 ? m->mesh.devices_per_node : 1);
}
/* The position of rank r among the ranks of its node (r % devices_per_node
 * under consecutive placement). */
int ir_local_of(const ir_module *m, int r);
/* Sets the placement from node_of (world entries; copied), or consecutive
 * when node_of is NULL or amounts to it, so that a consecutive module prints
 * and compares the same however it was built. */
void ir_mesh_set_placement(ir_module *m, const int *node_of);

/* Config: set replaces an existing key in place (order kept), else appends;
 * remove drops a key if present. */
void ir_config_set(ir_module *m, const char *key, const char *value);
void ir_config_remove(ir_module *m, const char *key);
void ir_config_set_int(ir_module *m, const char *key, int64_t v);
const char *ir_config_get(const ir_module *m, const char *key); /* NULL if absent */
/* Integer config value; `def` when absent or not an integer. */
int64_t ir_config_int(const ir_module *m, const char *key, int64_t def);
/* ir_config_int as op sees it: a batch_aware dynamic variant's op (attr
 * variant = K) reads vK.key where the variants differ (seq_len, seq_ring). */
int64_t ir_op_config_int(const ir_module *m, const ir_op *op, const char *key, int64_t def);

/* Groups.  ir_group_add copies `ranks`; replaces the sets if the name exists.
 * Returns the group index. */
int ir_group_add(ir_module *m, const char *name, int nsets, int set_size, const int *ranks);
int ir_group_find(const ir_module *m, const char *name); /* -1 if absent */
/* Contiguous groups: nsets sets of world/nsets consecutive ranks. */
int ir_group_add_contiguous(ir_module *m, const char *name, int nsets);
/* Strided groups: set i = {i, i+stride, i+2*stride, ...}; stride*set_size = world. */
int ir_group_add_strided(ir_module *m, const char *name, int stride);
/* Set index of `rank` in group g, and position inside that set; -1 if absent. */
int ir_group_set_of(const ir_module *m, int g, int rank, int *pos);
/* True when group `whole` is the product `outer` x `inner`: each set of
 * whole, in position order, is |outer| runs of |inner| ranks, run r being a
 * set of inner and the j-th ranks of the runs a set of outer, so position
 * p = pos_outer * |inner| + pos_inner.  outer = -1 (no group): whole and
 * inner have the same sets in the same order.  This is what lets an
 * all_to_all over `inner` gather a dim sharded by whole into one sharded by
 * outer (ir/README.md, nested all_to_all). */
bool ir_group_nested(const ir_module *m, int whole, int outer, int inner);
/* Removes a group; references to it must be gone (the verifier checks). Shifts
 * indices above it, and fixes every shard[] and group attr accordingly. */
void ir_group_remove(ir_module *m, int g);
/* What ir_group_remove leaves in a shard[] or group attr that still named the
 * removed group: never a valid index, so the verifier reports it. */
enum { IR_GROUP_REMOVED = -2 };

/* Values.  Adding a name that exists is a bug: returns -1 (the parser reports
 * it).  ir_value_find returns -1 if absent. */
int ir_value_add(ir_module *m, const char *name, ir_value_kind kind, ir_type type);
int ir_value_find(const ir_module *m, const char *name);
/* Exchanges the names of values a and b (keeps the name index current;
 * never write values[].name directly). */
void ir_value_swap_names(ir_module *m, int a, int b);
/* A fresh name "base", "base.1", "base.2" ... not yet used. */
void ir_value_fresh_name(const ir_module *m, const char *base, char out[IR_NAME_MAX]);
/* Adds a result value under a fresh name from `base` (the lowering and
 * every pass that creates values name them this way); returns its index. */
int ir_value_add_fresh(ir_module *m, const char *base, ir_type type);

/* Ops.  ir_op_insert places `op` at index `pos` (0..nops) and fixes every
 * value's def index; returns pos.  ir_op_append = insert at the end. */
int ir_op_insert(ir_module *m, int pos, const ir_op *op);
int ir_op_append(ir_module *m, const ir_op *op);
void ir_op_remove(ir_module *m, int pos);
/* Builder helpers: a zeroed op with the opcode set. */
ir_op ir_op_make(ir_opcode code);
void ir_op_add_input(ir_op *op, int value);
void ir_op_add_output(ir_op *op, int value);

/* Attributes on an op (set replaces a key of the same name). */
void ir_attr_set_int(ir_op *op, const char *key, int64_t v);
void ir_attr_set_float(ir_op *op, const char *key, double v);
void ir_attr_set_ident(ir_op *op, const char *key, const char *s);
/* Sets the layer and phase attributes every op carries (after the
 * op-specific ones, so that they print last). */
void ir_op_tag(ir_op *op, int layer, const char *phase);
void ir_attr_set_group(ir_op *op, const char *key, int group);
const ir_attr *ir_attr_get(const ir_op *op, const char *key);
int64_t ir_attr_int(const ir_op *op, const char *key, int64_t def);
/* Group index of attr `group`, -1 if absent. */
int ir_op_group(const ir_op *op);
/* Removes attribute `key` if present (order of the others kept). */
void ir_attr_remove(ir_op *op, const char *key);
/* Describes op i for messages: "op 12 'all_to_all' (%l0.qa)" (the first
 * result, else the first operand).  Returns buf. */
const char *ir_op_str(const ir_module *m, int i, char *buf, size_t n);
/* "layer" attr (-1 if absent) and "phase" attr ("" if absent). */
int ir_op_layer(const ir_op *op);
const char *ir_op_phase(const ir_op *op);
/* True for a started collective (attr async = 1): its results may be read
 * only after the `wait` on them, and its operands stay live until then. */
bool ir_op_async(const ir_op *op);

/* Replaces every use of value `from` by `to` in ops [start, nops). */
void ir_replace_uses(ir_module *m, int from, int to, int start);
/* Number of ops in [start, nops) that read value v. */
int ir_count_uses(const ir_module *m, int v, int start);
/* Recomputes every value's def from the op list. */
void ir_renumber(ir_module *m);

/* ---- text ----------------------------------------------------------------- */
void ir_print(const ir_module *m, FILE *out);
char *ir_print_to_string(const ir_module *m); /* malloc'd */
/* Parses textual IR; diagnostics (file:line:col with caret) go to the
 * support sink; returns NULL on any error.  `name` is used in diagnostics.
 * ir_parse_file("-") reads stdin.  The text is registered with
 * sup_source_add, and op/value/group locs point into that registry: do not
 * call sup_source_reset while a parsed module is still in use. */
ir_module *ir_parse_string(const char *name, const char *text);
ir_module *ir_parse_file(const char *path);

/* ---- verifier ------------------------------------------------------------- */
/* Checks every structural and type rule (ir/README.md lists them).  Reports
 * each violation as an error naming the op (and its location when read from
 * text), prefixed by `context` (e.g. "after pass 'ulysses'").  Returns true
 * when the module is valid. */
bool ir_verify(const ir_module *m, const char *context);

/* ---- memory plan (ir_mem.c; ir/README.md "Memory plan") ------------------------
 * One training step's memory on one rank: every buffer the runtime allocates
 * lives in one arena.  A value's buffer is live from the op defining it to
 * the last op reading it; params, inputs, the loss and the gradients adamw
 * reads (which the runtime reads after the step) live the whole step.
 * Buffer sizes follow the target: cpu stores every element in 4 bytes
 * (64-byte alignment); cuda stores floating tensors in 2 (bf16), scalars
 * and i32 in 4 (256-byte alignment).  The optimizer state (cpu: AdamW m, v;
 * cuda: fp32 master weights, m, v) and the collectives' two staging areas
 * are regions of the arena live the whole step.  Config keys: mem.target,
 * mem.peak (the arena's bytes), mem.opt_offset, mem.opt_bytes,
 * mem.comm_offset, mem.comm_bytes0, mem.comm_bytes1, mem.peak_op.
 *
 * Host memory is a second space (offload, ir_mem_on_host): its buffers are
 * planned the same way in a host arena of their own (mem.host_peak bytes,
 * mem.host_peak_op), sized like device buffers of the target, and never
 * share bytes with the device arena.  With the optimizer offloaded
 * (ir_mem_opt_on_host) the optimizer region and the host staging area
 * (mem.host_stage_offset, mem.host_stage_bytes) are regions of the host
 * arena, live the whole step. */
typedef enum {
    IR_MEM_PARAMS,
    IR_MEM_GRADS,
    IR_MEM_OPTIM,
    IR_MEM_ACTS,
    IR_MEM_COMM,
    IR_MEM_WORK,
    IR_MEM_NCATS
} ir_mem_cat;
/* "params", "grads", "optimizer", "activations", "comm", "workspace" */
const char *ir_mem_cat_name(ir_mem_cat c);

typedef struct ir_mem_target {
    bool cuda;
    int64_t align;
} ir_mem_target;
/* The target named by config mem.target; when absent, cuda for a bf16 step
 * on a GPU device (config precision and device, ir_mem_default_cuda), else
 * cpu.  False for an unknown name. */
bool ir_mem_target_of(const ir_module *m, ir_mem_target *t);
bool ir_mem_default_cuda(const char *device, const char *precision);
ir_mem_target ir_mem_target_named(bool cuda);
/* True when the runtime allocates a buffer for value v (params, inputs,
 * results some op defines). */
bool ir_mem_has_buffer(const ir_module *m, int v);
/* True when v's buffer lives in host memory rather than on the device: a
 * result its defining op's descriptor marks host_outs (offload), or a
 * parameter when the parameters are offloaded (ir_mem_params_on_host).
 * The plan places such buffers in a second arena (config mem.host_peak). */
bool ir_mem_on_host(const ir_module *m, int v);
/* True when the parameters live in host memory (config offload.params = 1,
 * which pass offload sets under ZeRO-3 with `offload all`): each gather
 * reads a fetched device copy of its shard, and AdamW updates them on the
 * host, so the optimizer must be offloaded too (the verifier checks). */
bool ir_mem_params_on_host(const ir_module *m);
/* Aligned bytes of v's buffer on target t (0 without a buffer); -1 when the
 * size overflows int64. */
int64_t ir_mem_value_bytes(const ir_module *m, int v, ir_mem_target t);
/* Values every backend keeps in fp32 even where activations are bf16: the
 * log-sum-exp of ring_attention, which its backward exponentiates against. */
bool ir_mem_keeps_f32(const ir_module *m, int v);
/* The one rule of what is a weight and what an activation, by dataflow
 * (names play no part): parameters, gradient accumulators, the weight
 * gradient output of each backward op (linear_bwd's dW, rmsnorm_bwd's dg,
 * embedding_bwd, bias_add_bwd, lm_head_loss_bwd's dW, mlp_bwd's three),
 * and every add or collective whose first input is weight-like (sums of
 * tied gradients, ZeRO's gathers and reductions).  A calloc'ed flag per
 * value; the partitioning passes shard what is not weight-like. */
bool *ir_weight_flags(const ir_module *m);
/* Every value's memory category from those flags, computed once (the
 * caller frees it): parameters and their gathered ZeRO copies are params,
 * other weight-like values grads, everything else activations.  baspc
 * --memory and the runtime's arena report (through codegen) both count by
 * it. */
ir_mem_cat *ir_mem_value_cats(const ir_module *m);
/* Bytes of the optimizer state of every adamw pair (aligned per tensor). */
int64_t ir_mem_opt_bytes(const ir_module *m, ir_mem_target t);
/* True when the optimizer state lives in host memory and AdamW runs on the
 * host (config offload optimizer or all, ZeRO-Offload's placement): the
 * plan puts the optimizer region in the host arena. */
bool ir_mem_opt_on_host(const ir_module *m);
/* The host staging area such an update needs, per rank: the CUDA backend
 * copies one gradient down (bf16, widened to fp32 in place) and one
 * updated parameter up through it, so the largest adamw parameter's
 * local elements x 4 bytes (aligned); 0 otherwise (the CPU backend updates
 * its host arena in place). */
int64_t ir_mem_host_stage_bytes(const ir_module *m, ir_mem_target t);
/* The largest staging areas a collective (or ZeRO-1's adamw slice) needs:
 * out[0] the send / gather side, out[1] the receive side (aligned). */
/* True when op uses the CPU runtime's collective staging areas (its
 * descriptor's staging asks for some): a started one holds them until its
 * wait (ir_verify_async.c). */
bool ir_op_stages(const ir_module *m, const ir_op *op);
void ir_mem_comm_bytes(const ir_module *m, ir_mem_target t, int64_t out[2]);
/* Kernel workspace outside the arena (the LM head's logits chunk, the RoPE
 * table): the shared region of ir_mem_work_slots (CUDA) plus the bytes of
 * every slot outside it. */
int64_t ir_mem_work_bytes(const ir_module *m, ir_mem_target t);
/* The same workspace by slot: one entry per row of the target's rows in
 * common/common.h (CM_WS_CPU_SLOTS then CM_WS_CPU_SUMS, or the CUDA ones),
 * in their order.  A slot is the largest request of any op; a SUMS row
 * (statistics the attention forwards keep for their backwards) the sum of
 * its ops' requests.  On CUDA the slots that hold nothing from one op to
 * the next share one region where no two in use at once overlap
 * (ir_mem_work.c): `off` is a slot's place in it, -1 for an allocation of
 * its own (every CPU slot, the CUDA slots that keep their contents, the
 * SUMS rows). */
enum { IR_MEM_WORK_MAX = (int)CM_WS_CPU_N > (int)CM_WS_CUDA_N ? (int)CM_WS_CPU_N : (int)CM_WS_CUDA_N };
typedef struct ir_mem_work_slot {
    const char *name; /* the row's name: "F32", "LOGITS" */
    const char *what; /* what it holds: the row's description */
    int64_t bytes;    /* the slot's size (a SUMS row: the sum) */
    bool sum;         /* a SUMS row */
    /* A slot: the first op whose request is `bytes`; a SUMS row: the first
     * op adding to it; -1 when no op asks for it. */
    int op;
    int nops;    /* a SUMS row: the ops adding to it (0 for a slot) */
    int64_t off; /* in the shared region, or -1 (see above) */
} ir_mem_work_slot;
/* Fills slot[0 .. n) (IR_MEM_WORK_MAX entries at most) and returns n. */
int ir_mem_work_slots(const ir_module *m, ir_mem_target t, ir_mem_work_slot *slot);
/* The shared region's bytes: the end of its last slot (0: none shared). */
int64_t ir_mem_work_region(const ir_mem_work_slot *slot, int n);
/* The loss the runtime reads after the step: the value named `loss`, else
 * the all_reduce of a partial loss sum (ir_is_partial_loss); -1 if none. */
int ir_mem_loss_value(const ir_module *m);
/* Value v is the rank's partial loss sum: result 0 of an op whose
 * descriptor says partial_loss (lm_head_loss, lm_head_loss_grad). */
bool ir_is_partial_loss(const ir_module *m, int v);
/* The result of the first all_reduce of a partial loss sum; -1 if none. */
int ir_loss_all_reduce(const ir_module *m);
/* Live ranges: value v is live over ops [start[v], end[v]] (closed: an
 * op's operands and results are live together).  Whole-step values get
 * start = -1 and end = nops; values without a buffer get start = end = -2. */
void ir_mem_live(const ir_module *m, int *start, int *end);
/* The forward-only program (validation): keep[i] for the step's forward
 * ops but the offloads (ir_forward.c).  False, with why, when a forward op reads a value
 * the forward does not compute or the loss value is not among them. */
bool ir_forward_program(const ir_module *m, int loss, bool *keep, char *why, size_t whylen);
/* Places every buffer (ir/ir_memplan.c): sets each value's mem_off and the
 * mem.* config keys for target t, replacing any earlier plan.  Returns false
 * (after reporting) when a size overflows. */
typedef struct ir_mem_stats {
    int64_t arena;    /* mem.peak */
    int64_t live_max; /* the largest sum of bytes live at one op (a lower bound) */
    int peak_op;      /* where that sum is reached (-1: no ops) */
    int64_t no_reuse; /* every buffer in its own slot */
    /* The host arena (values ir_mem_on_host names; config mem.host_peak,
     * mem.host_peak_op, set only when there are any): the same three. */
    int64_t host_arena, host_live_max, host_no_reuse;
    int host_peak_op;
} ir_mem_stats;
bool ir_mem_plan(ir_module *m, ir_mem_target t, ir_mem_stats *st);
/* True when the module carries a memory plan (config mem.peak). */
bool ir_mem_planned(const ir_module *m);

/* True when `s` is a valid value/group name: [A-Za-z0-9_.-]+, shorter than
 * IR_NAME_MAX.  Identifiers (attr keys and values, config keys, link kinds)
 * are names that start with a letter or '_' (ir_is_ident). */
bool ir_is_name(const char *s);
bool ir_is_ident(const char *s);

/* The one copy of `s` cut to cap - 1 characters (attribute keys and
 * identifier values) in the compilation context: equal strings give the
 * same pointer, which lives as long as the context (the process). */
const char *ir_intern(const char *s, size_t cap);
/* ir_is_ident of a string ir_intern returned, without reading it again. */
bool ir_interned_is_ident(const char *s);

#endif
