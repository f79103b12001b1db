/* cg_emit.c — the generated C program around `step`: the header comment,
 * the value and group enums, the tables the runtime reads (basp_rt.h:
 * rt_group_desc, rt_value_desc, rt_opt_pair), the rt_program and main.
 * The program owns nothing but the schedule; everything that executes is
 * the runtime's. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "codegen.h"
#include "../layout/layout.h"

/* The tables below are basp_rt.h's structs, whose per-dim arrays hold
 * CM_MAX_RANK entries (the runtime checks its RT_MAX_RANK against it). */
_Static_assert((int)IR_MAX_RANK <= (int)CM_MAX_RANK, "an IR value must fit rt_value_desc");

/* ---- names -------------------------------------------------------------------- */

/* "V_" + the IR name with every character that C does not allow in an
 * identifier replaced by '_'; a clash (%a.b vs %a_b) gets "_2", "_3"... */
static void cg_ident(char *out, size_t n, const char *prefix, const char *name, char (*taken)[CG_IDENT_MAX],
                     int ntaken) {
    char base[CG_IDENT_MAX];
    size_t len = (size_t)snprintf(base, sizeof base, "%s%s", prefix, name);
    for (size_t i = strlen(prefix); i < len; i++)
        if (!(base[i] == '_' || (base[i] >= 'a' && base[i] <= 'z') || (base[i] >= 'A' && base[i] <= 'Z') ||
              (base[i] >= '0' && base[i] <= '9')))
            base[i] = '_';
    snprintf(out, n, "%s", base);
    for (int k = 2;; k++) {
        bool clash = false;
        for (int j = 0; j < ntaken && !clash; j++) clash = !strcmp(taken[j], out);
        if (!clash) return;
        /* base is at most IR_NAME_MAX + 1 characters: the suffix always fits. */
        snprintf(out, n, "%.*s_%d", IR_NAME_MAX + 1, base, k % 100000);
    }
}

void cg_names_init(cg_names *n, const ir_module *m) {
    n->m = m;
    n->value = sup_xcalloc((size_t)m->nvalues + 1, sizeof *n->value);
    n->group = sup_xcalloc((size_t)m->ngroups + 1, sizeof *n->group);
    /* Results no op defines are leftovers of a pass: not printed, not emitted. */
    bool *live = sup_xcalloc((size_t)m->nvalues + 1, sizeof *live);
    for (int v = 0; v < m->nvalues; v++) live[v] = m->values[v].kind != IR_V_RESULT;
    for (int i = 0; i < m->nops; i++)
        for (int o = 0; o < m->ops[i].nout; o++)
            if (m->ops[i].out[o] >= 0 && m->ops[i].out[o] < m->nvalues) live[m->ops[i].out[o]] = true;
    for (int v = 0; v < m->nvalues; v++)
        if (live[v]) cg_ident(n->value[v], sizeof n->value[v], "V_", m->values[v].name, n->value, v);
    for (int g = 0; g < m->ngroups; g++)
        cg_ident(n->group[g], sizeof n->group[g], "G_", m->groups[g].name, n->group, g);
    free(live);
}

void cg_names_free(cg_names *n) {
    free(n->value);
    free(n->group);
    n->value = NULL;
    n->group = NULL;
}

/* ---- numbers and config --------------------------------------------------------- */

const char *cg_fmt_double(double v, char *buf, size_t n) {
    sup_fmt_double(v, buf, n);
    /* "10000" would be an int literal; keep it visibly a double. */
    if (!strpbrk(buf, ".eEin") && strlen(buf) + 3 <= n) strcat(buf, ".0");
    return buf;
}

int64_t cg_local_dim(const ir_module *m, const ir_type *t, int d) {
    return ir_type_max_local_dim(m, t, d); /* an uneven dim: the largest share */
}

static const struct {
    const char *key;
    double def;
} cg_double_defaults[] = {
    {"rope_theta", 10000},
    {"norm_eps", 1e-5},
    {"lr", 3e-4},
    {"rope_factor", 8},
    {"rope_low_freq_factor", 1},
    {"rope_high_freq_factor", 4},
    {"wsd_decay", 0.2},
    {"weight_decay", 0.1},
    {"beta1", 0.9},
    {"beta2", 0.95},
    {"eps", 1e-8},
    {"grad_clip", 1.0},
};

double cg_config_double(const ir_module *m, const char *key) {
    double def = 0;
    for (size_t i = 0; i < sizeof cg_double_defaults / sizeof *cg_double_defaults; i++)
        if (!strcmp(cg_double_defaults[i].key, key)) def = cg_double_defaults[i].def;
    const char *s = ir_config_get(m, key);
    if (!s) return def;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno || !isfinite(v)) {
        sup_error(sup_noloc(), "codegen: config %s = '%s' is not a finite number", key, s);
        return def;
    }
    return v;
}

/* The default of an integer key absent from the config. */
static int64_t cg_int_default(const ir_module *m, const char *key) {
    static const struct {
        const char *key;
        int64_t def;
    } fixed[] = {
        {"steps", 10}, {"seed", 1234}, {"zero", 0}, {"batch_groups", 1}, {"rope_original_max_pos", 8192},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof *fixed; i++)
        if (!strcmp(fixed[i].key, key)) return fixed[i].def;
    if (!strcmp(key, "sp_size")) return ir_world(m);
    int tok = ir_value_find(m, "tokens");
    const ir_type *t = tok >= 0 ? &m->values[tok].type : NULL;
    if (t && t->rank == 2 && !strcmp(key, "micro_batch")) return t->dims[0];
    if (t && t->rank == 2 && !strcmp(key, "seq_len")) return t->dims[1];
    return 0;
}

int64_t cg_config_int(const ir_module *m, const char *key) {
    const char *s = ir_config_get(m, key);
    if (!s) return cg_int_default(m, key);
    char *end;
    errno = 0;
    long long v = strtoll(s, &end, 10);
    if (end == s || *end || errno) {
        sup_error(sup_noloc(), "codegen: config %s = '%s' is not an integer", key, s);
        return cg_int_default(m, key);
    }
    return v;
}

/* ---- pieces of the file ------------------------------------------------------------ */

/* A C string literal. */
static void cg_cstr(sup_buf *b, const char *s) {
    sup_buf_puts(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            sup_buf_printf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7f)
            sup_buf_printf(b, "\\%03o", c);
        else
            sup_buf_printf(b, "%c", c);
    }
    sup_buf_puts(b, "\"");
}

/* Text inside a comment: no "*" "/" pair. */
static void cg_ctext(sup_buf *b, const char *s) {
    for (; *s; s++) {
        sup_buf_printf(b, "%c", *s);
        if (*s == '*' && s[1] == '/') sup_buf_puts(b, " ");
    }
}

static void cg_header(sup_buf *b, const cg_names *n, const char *spec) {
    const ir_module *m = n->m;
    int nvalues = 0;
    for (int v = 0; v < m->nvalues; v++) nvalues += n->value[v][0] != '\0';
    int64_t G = cg_config_int(m, "batch_groups"), K = cg_config_int(m, "sp_size");
    int world = ir_world(m);
    sup_buf_puts(b, "/* Training program for module ");
    cg_ctext(b, m->name);
    sup_buf_puts(b, ", generated by baspc from ");
    cg_ctext(b, spec);
    sup_buf_printf(b,
                   ".\n *\n"
                   " *   world   %d ranks = %d node(s) x %d device(s) per node\n"
                   " *   layout  G x K = %" PRId64 " x %" PRId64 ": %" PRId64 " group(s) of %" PRId64
                   " rank(s), the micro-batch split over the groups,\n"
                   " *           the sequence over the ranks of each group\n"
                   " *   step    %d ops on %d values, %d process groups\n *\n",
                   world, m->mesh.nodes, m->mesh.devices_per_node, G, K, G, K, m->nops, nvalues, m->ngroups);
    if (n->ctx->target == SUP_TARGET_CUDA)
        sup_buf_puts(b, " *   target  cuda: one GPU per rank, bf16 values with fp32 master weights,\n"
                        " *           NCCL collectives, cuBLAS GEMMs (linked against basp_rt_cuda);\n"
                        " *           rt_f32/rt_i32 return device pointers, passed on untouched\n *\n");
    sup_buf_printf(b,
                   " * Run:  mpirun -np %d ./train --data FILE    (./train --help lists the options)\n"
                   " *\n"
                   " * The program is the schedule and nothing else: the tables describe the\n"
                   " * process groups and every IR value, step() calls the runtime once per IR op\n"
                   " * in schedule order (the op's IR line above each call), and rt_main\n"
                   " * (basp_rt.h) runs everything else. */\n"
                   "#include <basp_rt.h>\n\n",
                   world);
    /* Angle brackets: the header comes from the runtime's -I directory only.
     * Quotes would look beside the C file first, and --keep-c compiles it in
     * the output's directory, where any basp_rt.h would replace the runtime's
     * declarations. */
}

static void cg_value_enum(sup_buf *b, const cg_names *n) {
    const ir_module *m = n->m;
    size_t w = 0;
    for (int v = 0; v < m->nvalues; v++) w = strlen(n->value[v]) > w ? strlen(n->value[v]) : w;
    sup_buf_puts(b, "/* IR values: the index of each in values[]. */\nenum {\n");
    for (int v = 0; v < m->nvalues; v++) {
        if (!n->value[v][0]) continue;
        const ir_value *val = &m->values[v];
        char ty[IR_TYPE_STR_MAX];
        const char *kind = val->kind == IR_V_PARAM   ? "param "
                           : val->kind == IR_V_INPUT ? "input "
                           : val->kind == IR_V_ACCUM ? "accum "
                                                     : "";
        sup_buf_printf(b, "    %s,%*s /* %s%%%s : %s */\n", n->value[v], (int)(w - strlen(n->value[v])), "", kind,
                       val->name, ir_type_str(m, &val->type, ty, sizeof ty));
    }
    sup_buf_puts(b, "    NVALUES\n};\n\n");
}

/* Group rank lists, 16 ranks a line, then the descriptor table. */
static void cg_groups(sup_buf *b, const cg_names *n) {
    const ir_module *m = n->m;
    sup_buf_puts(b, "/* Process groups: nsets disjoint sets of set_size ranks each. */\nenum {");
    for (int g = 0; g < m->ngroups; g++) sup_buf_printf(b, " %s,", n->group[g]);
    sup_buf_puts(b, " NGROUPS };\n");
    for (int g = 0; g < m->ngroups; g++) {
        const ir_group *gr = &m->groups[g];
        int total = gr->nsets * gr->set_size;
        sup_buf_printf(b, "static const int ranks_%s[] = {", n->group[g] + 2);
        if (gr->nsets == 1 && total <= 16) {
            for (int r = 0; r < total; r++) sup_buf_printf(b, "%s%d", r ? ", " : "", gr->ranks[r]);
            sup_buf_puts(b, "};\n");
            continue;
        }
        /* One set a line (wrapped at 16 ranks), so the sets stay visible. */
        for (int r = 0; r < total; r++) {
            bool brk = r % gr->set_size == 0 || (r % gr->set_size) % 16 == 0;
            sup_buf_printf(b, "%s%d,", brk ? "\n    " : " ", gr->ranks[r]);
        }
        sup_buf_puts(b, "\n};\n");
    }
    if (!m->ngroups) return;
    sup_buf_puts(b, "static const rt_group_desc groups[NGROUPS] = {\n");
    for (int g = 0; g < m->ngroups; g++) {
        sup_buf_printf(b, "    [%s] = {", n->group[g]);
        cg_cstr(b, m->groups[g].name);
        sup_buf_printf(b, ", %d, %d, ranks_%s", m->groups[g].nsets, m->groups[g].set_size, n->group[g] + 2);
        if (m->groups[g].block) /* positions of a block bound per micro-step (batch_aware dynamic) */
            sup_buf_printf(b, ", .block = %d", m->groups[g].block);
        sup_buf_puts(b, "},\n");
    }
    sup_buf_puts(b, "};\n\n");
}

static void cg_value_row(sup_buf *b, const cg_names *n, int v, ir_mem_cat cat) {
    const ir_module *m = n->m;
    const ir_value *val = &m->values[v];
    const char *kind = val->kind == IR_V_PARAM   ? "RT_PARAM"
                       : val->kind == IR_V_INPUT ? "RT_INPUT"
                       : val->kind == IR_V_ACCUM ? "RT_ACCUM"
                                                 : "RT_ACT";
    sup_buf_printf(b, "    [%s] = {", n->value[v]);
    cg_cstr(b, val->name);
    sup_buf_printf(b, ", %s, %s, %d, {", kind, val->type.dtype == IR_I32 ? "RT_I32" : "RT_F32", val->type.rank);
    for (int d = 0; d < val->type.rank; d++) sup_buf_printf(b, "%s%" PRId64, d ? ", " : "", val->type.dims[d]);
    sup_buf_puts(b, val->type.rank ? "}, {" : "0}, {");
    for (int d = 0; d < CM_MAX_RANK; d++) {
        int g = d < val->type.rank ? val->type.shard[d] : -1;
        sup_buf_printf(b, "%s%s", d ? ", " : "", g >= 0 && g < m->ngroups ? n->group[g] : "-1");
    }
    sup_buf_printf(b, "}, %" PRId64, ir_type_local_elems(m, &val->type));
    bool unit = false;
    for (int d = 0; d < val->type.rank; d++) unit |= val->type.unit[d] != 0;
    if (unit) { /* uneven split units per dim (0 = even); omitted when all even */
        sup_buf_puts(b, ", {");
        for (int d = 0; d < CM_MAX_RANK; d++)
            sup_buf_printf(b, "%s%" PRId64, d ? ", " : "", d < val->type.rank ? val->type.unit[d] : 0);
        sup_buf_puts(b, "}");
    }
    if (val->mem_off >= 0 && n->ctx->memory_plan) sup_buf_printf(b, ", .offset = %" PRId64, val->mem_off);
    if (ir_mem_keeps_f32(m, v)) sup_buf_puts(b, ", .keep_f32 = 1");
    if (ir_mem_on_host(m, v)) sup_buf_puts(b, ", .on_host = 1");
    /* The category baspc --memory counts it in, for the runtime's report. */
    sup_buf_printf(b, ", .mem_cat = %s",
                   cat == IR_MEM_PARAMS      ? "RT_VCAT_PARAMS"
                   : cat == IR_MEM_GRADS     ? "RT_VCAT_GRADS"
                   : val->kind == IR_V_INPUT ? "RT_VCAT_INPUTS"
                                             : "RT_VCAT_ACTS");
    sup_buf_puts(b, "},\n");
}

static void cg_values(sup_buf *b, const cg_names *n) {
    sup_buf_puts(b, "/* name, kind, dtype, rank, global dims, sharding group per dim (-1 = whole),\n"
                    " * local elements (the largest rank's), uneven split unit per dim if any,\n"
                    " * byte offset of the buffer in the arena (the memory plan), memory category. */\n"
                    "static const rt_value_desc values[NVALUES] = {\n");
    ir_mem_cat *cat = ir_mem_value_cats(n->m);
    for (int v = 0; v < n->m->nvalues; v++)
        if (n->value[v][0]) cg_value_row(b, n, v, cat[v]);
    free(cat);
    sup_buf_puts(b, "};\n\n");
}

/* One pair per adamw op, in schedule order; returns how many. */
static int cg_opt(sup_buf *b, const cg_names *n) {
    const ir_module *m = n->m;
    int count = 0;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        if (op->code != IR_ADAMW) continue;
        if (!count++)
            sup_buf_puts(b, "/* Parameter and gradient of every adamw op, in schedule order. */\n"
                            "static const rt_opt_pair opt[] = {\n");
        sup_buf_printf(b, "    {%s, %s},\n", n->value[op->in[0]], n->value[op->in[1]]);
    }
    if (count) sup_buf_puts(b, "};\n\n");
    return count;
}

/* ---- special values and the program ------------------------------------------------- */

/* The value named `name`, or -1; an error when it exists with another type. */
static int cg_special(const cg_names *n, const char *name, ir_dtype dtype, int rank) {
    int v = ir_value_find(n->m, name);
    if (v < 0 || !n->value[v][0]) return -1;
    const ir_type *t = &n->m->values[v].type;
    if (t->dtype != dtype || t->rank != rank) {
        char ty[IR_TYPE_STR_MAX];
        sup_error(n->m->values[v].loc, "codegen: %%%s is %s; the runtime expects %s with rank %d", name,
                  ir_type_str(n->m, t, ty, sizeof ty), ir_dtype_name(dtype), rank);
    }
    return v;
}

/* The loss: the value named `loss`, else the all_reduce of a partial loss
 * sum (ir_is_partial_loss: what lower and the fuse-loss pass produce). */
static int cg_loss(const cg_names *n) {
    int v = cg_special(n, "loss", IR_F32, 0);
    return v >= 0 ? v : ir_loss_all_reduce(n->m);
}

static void cg_index_field(sup_buf *b, const cg_names *n, const char *field, int v) {
    if (v >= 0)
        sup_buf_printf(b, "    .%s = %s,\n", field, n->value[v]);
    else
        sup_buf_printf(b, "    .%s = -1, /* the module has none */\n", field);
}

static void cg_config_fields(sup_buf *b, const ir_module *m) {
    static const char *const ints[] = {"micro_batch", "seq_len",  "vocab",    "hidden", "layers",
                                       "heads",       "kv_heads", "head_dim", "ffn"};
    static const char *const dbls[] = {"rope_theta", "norm_eps", "lr"};
    static const char *const tail[] = {"steps", "seed", "zero", "batch_groups", "sp_size"};
    char num[48];
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        sup_buf_printf(b, "%s.%s = %" PRId64 ",",
                       i % 5 ? " "
                       : i   ? "\n    "
                             : "    ",
                       ints[i], cg_config_int(m, ints[i]));
    sup_buf_puts(b, "\n   ");
    for (size_t i = 0; i < sizeof dbls / sizeof *dbls; i++)
        sup_buf_printf(b, " .%s = %s,", dbls[i], cg_fmt_double(cg_config_double(m, dbls[i]), num, sizeof num));
    sup_buf_puts(b, "\n   ");
    for (size_t i = 0; i < sizeof tail / sizeof *tail; i++)
        sup_buf_printf(b, " .%s = %" PRId64 ",", tail[i], cg_config_int(m, tail[i]));
    sup_buf_puts(b, "\n");
}

/* Packed documents (config documents = 1): the end-of-text token and the
 * packing, checked here for hand-written IR. */
static void cg_document_fields(sup_buf *b, const ir_module *m) {
    if (!cg_config_int(m, "documents")) return;
    int64_t eot = cg_config_int(m, "eot_token"), V = cg_config_int(m, "vocab");
    const char *pk = ir_config_get(m, "packing");
    if (!ir_config_get(m, "eot_token"))
        sup_error(sup_noloc(), "codegen: config documents = 1 needs config eot_token (the end-of-text token id)");
    else if (eot < 0 || (V > 0 && eot >= V))
        sup_error(sup_noloc(), "codegen: config eot_token = %" PRId64 " is outside the vocabulary of %" PRId64, eot, V);
    if (pk && strcmp(pk, "sequential") && strcmp(pk, "balanced"))
        sup_error(sup_noloc(), "codegen: config packing = '%s': use sequential or balanced", pk);
    sup_buf_printf(b, "    .documents = 1, .eot_token = %" PRId64 ", .packing = %s,\n", eot,
                   pk && !strcmp(pk, "sequential") ? "RT_PACK_SEQUENTIAL" : "RT_PACK_BALANCED");
}

/* AdamW and the learning-rate schedule (config schedule, warmup, min_lr,
 * ...; absent keys take the runtime's defaults).  The ranges are checked
 * by the binary at start-up (rt_optim_check), where --set and the command
 * line meet; a schedule name that is none is refused here. */
static void cg_optim_field(sup_buf *b, const ir_module *m) {
    static const char *const kinds[] = {"constant", "cosine", "linear", "wsd"};
    static const char *const enums[] = {"RT_SCHED_CONSTANT", "RT_SCHED_COSINE", "RT_SCHED_LINEAR", "RT_SCHED_WSD"};
    const char *kind = ir_config_get(m, "schedule");
    int k = 0;
    for (int i = 0; kind && i < 4; i++)
        if (!strcmp(kind, kinds[i])) k = i;
    if (kind && strcmp(kind, kinds[k]))
        sup_error(sup_noloc(), "codegen: config schedule = '%s' is not one of constant, cosine, linear, wsd", kind);
    static const char *const dbls[] = {"min_lr", "wsd_decay", "weight_decay", "beta1", "beta2", "eps", "grad_clip"};
    char num[48];
    sup_buf_printf(b, "    .optim = &(const rt_optim_desc){.schedule = %s, .warmup = %" PRId64 ",", enums[k],
                   cg_config_int(m, "warmup"));
    for (size_t i = 0; i < sizeof dbls / sizeof *dbls; i++)
        sup_buf_printf(b, "%s.%s = %s,", i % 4 == 1 ? "\n        " : " ", dbls[i],
                       cg_fmt_double(cg_config_double(m, dbls[i]), num, sizeof num));
    sup_buf_puts(b, "},\n");
}

/* The RoPE scaling fields.  Bad llama3 parameters in hand-written IR would
 * make every rotation NaN at run time, so they are refused here, where the
 * config is read. */
static void cg_rope_scaling(sup_buf *b, const ir_module *m) {
    const char *kind = ir_config_get(m, "rope_scaling");
    if (!kind || !strcmp(kind, "none")) {
        sup_buf_puts(b, "    .rope_scaling = RT_ROPE_NONE,\n");
        return;
    }
    if (strcmp(kind, "llama3")) {
        sup_error(sup_noloc(), "codegen: config rope_scaling = '%s' is not one of none, llama3", kind);
        return;
    }
    double f = cg_config_double(m, "rope_factor"), lo = cg_config_double(m, "rope_low_freq_factor");
    double hi = cg_config_double(m, "rope_high_freq_factor");
    int64_t orig = cg_config_int(m, "rope_original_max_pos");
    if (!(f > 0 && lo > 0 && hi > lo && orig > 0))
        sup_error(sup_noloc(), "codegen: config llama3 rope scaling needs rope_factor > 0, rope_low_freq_factor > 0, "
                               "rope_high_freq_factor > rope_low_freq_factor and rope_original_max_pos > 0");
    char nf[48], nlo[48], nhi[48];
    sup_buf_printf(b, "    .rope_scaling = RT_ROPE_LLAMA3, .rope_factor = %s, .rope_low_freq_factor = %s,\n",
                   cg_fmt_double(f, nf, sizeof nf), cg_fmt_double(lo, nlo, sizeof nlo));
    sup_buf_printf(b, "    .rope_high_freq_factor = %s, .rope_original_max_pos = %" PRId64 ",\n",
                   cg_fmt_double(hi, nhi, sizeof nhi), orig);
}

/* Qwen's attention features, for checkpoints and imports (absent: 0). */
/* Started collectives: the runtime runs MPI's progress for them. */
static void cg_started_field(sup_buf *b, const ir_module *m) {
    int n = 0;
    for (int i = 0; i < m->nops; i++) n += ir_op_async(&m->ops[i]);
    if (n) sup_buf_printf(b, "    .started = %d,\n", n);
}

static void cg_features(sup_buf *b, const ir_module *m) {
    const char *bias = ir_config_get(m, "qkv_bias"), *norm = ir_config_get(m, "qk_norm");
    bool qb = bias && !strcmp(bias, "true"), qn = norm && !strcmp(norm, "true");
    if (qb || qn) sup_buf_printf(b, "    .qkv_bias = %d, .qk_norm = %d,\n", qb, qn);
    int64_t ring = ir_config_int(m, "seq_ring", 0);
    if (ring > 1) sup_buf_printf(b, "    .seq_ring = %" PRId64 ", /* the ring's zig-zag sequence order */\n", ring);
    /* the strategy's name for the start-up banner, where it is not plain
     * Ulysses: hybrid with its degree, else the strategy's own title */
    const char *seq = ir_config_get(m, "sequence");
    const layout_strategy *st = layout_variant_find("a2a", ir_config_get(m, "a2a"));
    if (ring > 1 && seq && !strcmp(seq, "hybrid"))
        sup_buf_printf(b, "    .layout = \"Ulysses x Ring (R=%" PRId64 ")\",\n", ring);
    else if (ring > 1)
        sup_buf_puts(b, "    .layout = \"ring attention\",\n");
    else if (st && st->title)
        sup_buf_printf(b, "    .layout = \"%s\",\n", st->title);
}

/* The CUDA device workspaces' places in their shared region
 * (ir/ir_mem_work.c); a slot outside it: offset -1.  The same with or
 * without a memory plan: the region does not depend on the arena's. */
static void cg_work_fields(sup_buf *b, const cg_names *n) {
    if (n->ctx->target != SUP_TARGET_CUDA) return;
    ir_mem_work_slot slot[IR_MEM_WORK_MAX];
    int ns = ir_mem_work_slots(n->m, ir_mem_target_named(true), slot);
    int64_t region = ir_mem_work_region(slot, ns);
    if (region <= 0) return;
    sup_buf_printf(b,
                   "    .ws_region_bytes = %" PRId64 ", .ws_nslots = %d, /* the device workspaces' shared region */\n",
                   region, (int)CM_WS_CUDA_NSLOTS);
    for (int pass = 0; pass < 2; pass++) {
        sup_buf_puts(b, pass ? "    .ws_slot_bytes = (const int64_t[]){" : "    .ws_slot_off = (const int64_t[]){");
        for (int k = 0; k < CM_WS_CUDA_NSLOTS; k++)
            sup_buf_printf(b, "%s%" PRId64, k ? ", " : "", pass ? slot[k].bytes : slot[k].off);
        sup_buf_puts(b, "},\n");
    }
}

/* The memory plan's whole-arena facts (every value's offset is in its row). */
static void cg_mem_fields(sup_buf *b, const cg_names *n) {
    const ir_module *m = n->m;
    cg_work_fields(b, n);
    if (ir_mem_opt_on_host(m)) /* with or without a plan */
        sup_buf_puts(b, "    .opt_on_host = 1, /* AdamW's state in the host arena, the update on the host */\n");
    if (!n->ctx->memory_plan) {
        sup_buf_puts(b, "    .mem_arena_bytes = 0, /* no memory plan (--no-memory-plan): one buffer per value */\n");
        return;
    }
    sup_buf_printf(b, "    .mem_arena_bytes = %" PRId64 ", .mem_opt_offset = %" PRId64 ",\n",
                   ir_config_int(m, "mem.peak", 0), ir_config_int(m, "mem.opt_offset", 0));
    sup_buf_printf(b, "    .mem_comm_offset = %" PRId64 ", .mem_comm_bytes = {%" PRId64 ", %" PRId64 "},\n",
                   ir_config_int(m, "mem.comm_offset", 0), ir_config_int(m, "mem.comm_bytes0", 0),
                   ir_config_int(m, "mem.comm_bytes1", 0));
    if (ir_config_get(m, "mem.host_peak"))
        sup_buf_printf(b, "    .mem_host_bytes = %" PRId64 ", /* the host arena: offloaded values */\n",
                       ir_config_int(m, "mem.host_peak", 0));
    if (ir_mem_opt_on_host(m))
        sup_buf_printf(b, "    .mem_host_stage_offset = %" PRId64 ", .mem_host_stage_bytes = %" PRId64 ",\n",
                       ir_config_int(m, "mem.host_stage_offset", 0), ir_config_int(m, "mem.host_stage_bytes", 0));
}

/* batch_aware dynamic: the index of the variant of all N ranks, which
 * validates, or -1; and its loss value. */
static int cg_dyn_eval_variant(const ir_module *m) {
    int sizes[64], ns = cg_dyn_sizes(m, sizes, 64);
    for (int k = 0; k < ns && k < 64; k++)
        if (sizes[k] == ir_world(m)) return k;
    return -1;
}

static int cg_dyn_world_loss(const ir_module *m) {
    char name[32];
    snprintf(name, sizeof name, "v%d.loss", ir_world(m));
    return ir_value_find(m, name);
}

/* batch_aware dynamic: the table of variants (their sizes from config
 * dyn_sizes, each with its inputs, loss and step function). */
static void cg_variants(sup_buf *b, const cg_names *n) {
    const ir_module *m = n->m;
    int sizes[64], ns = cg_dyn_sizes(m, sizes, 64), nc = 0;
    int64_t T = ir_config_int(m, "dyn_tokens", 0);
    double comm[64]; /* config dyn_comm: one per size, the assignment's exchange costs */
    for (const char *s = ir_config_get(m, "dyn_comm"); s && *s && nc < 64;) {
        char *end;
        comm[nc] = strtod(s, &end);
        if (end == s) break;
        nc++, s = end;
    }
    sup_buf_puts(b, "/* The variants of the dynamic step: one per group size, each a group's micro-step on one\n"
                    " * row of size * dyn_tokens tokens; the runtime runs the one of this rank's group. */\n");
    sup_buf_puts(b, "static const rt_variant variants[] = {\n");
    for (int k = 0; k < ns; k++) {
        char name[64], key[64];
        int v[3];
        static const char *const what[] = {"tokens", "targets", "loss"};
        for (int i = 0; i < 3; i++) {
            snprintf(name, sizeof name, "v%d.%s", sizes[k], what[i]);
            v[i] = ir_value_find(m, name);
            if (v[i] < 0 || !n->value[v[i]][0])
                sup_error(sup_noloc(), "codegen: variant %d has no %%%s", sizes[k], name);
        }
        snprintf(key, sizeof key, "v%d.seq_ring", sizes[k]);
        sup_buf_printf(b, "    {.size = %d, .seq_len = %" PRId64 ", .seq_ring = %" PRId64 ",", sizes[k], sizes[k] * T,
                       ir_config_int(m, key, 0));
        for (int i = 0; i < 3; i++) sup_buf_printf(b, " .%s = %s,", what[i], v[i] >= 0 ? n->value[v[i]] : "-1");
        char num[48];
        sup_buf_printf(b, " .step = step_v%d, .comm = %s},\n", sizes[k],
                       cg_fmt_double(k < nc ? comm[k] : 0, num, sizeof num));
    }
    sup_buf_puts(b, "};\n\n");
}

static void cg_program(sup_buf *b, const cg_names *n, const char *spec, int nopt, bool eval) {
    const ir_module *m = n->m;
    bool dyn = cg_dyn_sizes(m, NULL, 0) > 0;
    if (dyn) cg_variants(b, n);
    sup_buf_puts(b, "static const rt_program program = {\n    .model = ");
    cg_cstr(b, m->name);
    sup_buf_puts(b, ",\n    .spec = ");
    cg_cstr(b, spec);
    sup_buf_printf(b, ",\n    .world = %d, .nodes = %d, .devices_per_node = %d,\n", ir_world(m), m->mesh.nodes,
                   m->mesh.devices_per_node);
    for (int r = 0; m->mesh.node_of && r < ir_world(m); r++) /* consecutive: none (rank r on r / dpn) */
        sup_buf_printf(b, "%s%d", r ? (r % 32 ? "," : ",\n        ") : "    .node_of = (const int[]){",
                       m->mesh.node_of[r]);
    sup_buf_puts(b, m->mesh.node_of ? "},\n" : "");
    sup_buf_printf(b, "    .ngroups = NGROUPS, .groups = %s,\n", m->ngroups ? "groups" : "0");
    sup_buf_puts(b, "    .nvalues = NVALUES, .values = values,\n");
    sup_buf_printf(b, "    .nopt = %d, .opt = %s,\n", nopt, nopt ? "opt" : "0");
    cg_index_field(b, n, "tokens", cg_special(n, "tokens", IR_I32, 2));
    cg_index_field(b, n, "targets", cg_special(n, "targets", IR_I32, 2));
    cg_index_field(b, n, "loss", cg_loss(n));
    cg_config_fields(b, m);
    cg_optim_field(b, m);
    cg_document_fields(b, m);
    cg_rope_scaling(b, m);
    cg_features(b, m);
    cg_started_field(b, m);
    cg_mem_fields(b, n);
    int64_t accum = ir_config_int(m, "accum", 1);
    if (accum > 1) sup_buf_printf(b, "    .accum = %lld, .apply = apply_step,\n", (long long)accum);
    if (dyn) {
        if (accum <= 1) sup_buf_puts(b, "    .apply = apply_step,\n");
        char num[48];
        sup_buf_printf(b, "    .nvariants = %d, .variants = variants, .dyn_tokens = %" PRId64 ", .dyn_linear = %s,\n",
                       cg_dyn_sizes(m, NULL, 0), ir_config_int(m, "dyn_tokens", 0),
                       cg_fmt_double(cg_config_double(m, "dyn_linear"), num, sizeof num));
        if (eval) /* the variant of all N ranks' forward (cg_dyn_eval_variant) */
            sup_buf_printf(b, "    .step = step_v%d, .eval = eval_step, .eval_variant = %d,\n};\n\n", cg_dyn_first(m),
                           cg_dyn_eval_variant(m));
        else
            sup_buf_printf(
                b, "    .step = step_v%d, .eval = 0, /* no group of all ranks: --val-data is refused */\n};\n\n",
                cg_dyn_first(m));
    } else
        sup_buf_puts(b, eval ? "    .step = step, .eval = eval_step,\n};\n\n" : "    .step = step, .eval = 0,\n};\n\n");
    sup_buf_puts(b, "int main(int argc, char **argv) { return rt_main(argc, argv, &program); }\n");
}

/* Every value the runtime would have to hold must be describable. */
static bool cg_check_values(const cg_names *n) {
    bool ok = true, any = false;
    for (int v = 0; v < n->m->nvalues; v++) {
        any |= n->value[v][0] != '\0';
        const ir_value *val = &n->m->values[v];
        if (n->value[v][0] && val->type.rank > CM_MAX_RANK) {
            sup_error(val->loc, "codegen: %%%s has rank %d; the runtime holds at most %d dims", val->name,
                      val->type.rank, CM_MAX_RANK);
            ok = false;
        }
    }
    if (!any) {
        sup_error(sup_noloc(), "codegen: module @%s has no values: there is nothing to train", n->m->name);
        ok = false;
    }
    return ok;
}

static bool cg_emit_planned(const ir_module *m, const sup_context *ctx, const char *spec_path, FILE *out);

/* The module planned for the target's buffer sizes: m itself when its plan
 * is for this target, else a planned copy (*own, to be freed).  NULL when
 * planning failed. */
static const ir_module *cg_planned(const ir_module *m, const sup_context *ctx, ir_module **own) {
    *own = NULL;
    ir_mem_target want = ir_mem_target_named(ctx->target == SUP_TARGET_CUDA), have;
    if (ir_mem_planned(m) && ir_mem_target_of(m, &have) && have.cuda == want.cuda) return m;
    *own = ir_module_clone(m);
    ir_config_set(*own, "mem.target", want.cuda ? "cuda" : "cpu");
    if (!ir_mem_plan(*own, want, NULL)) return NULL;
    return *own;
}

/* ---- fully lowered for its world ------------------------------------------------ */

/* The op that defines value v, or NULL (a param or input). */
static const ir_op *cg_def_op(const ir_module *m, int v) {
    for (int i = 0; i < m->nops; i++)
        for (int o = 0; o < m->ops[i].nout; o++)
            if (m->ops[i].out[o] == v) return &m->ops[i];
    return NULL;
}

/* The op's group spans every rank of the world (one set of W ranks). */
static bool cg_over_world(const ir_module *m, const ir_op *op) {
    int g = ir_op_group(op);
    return g >= 0 && g < m->ngroups && m->groups[g].set_size == ir_world(m);
}

/* A gradient summed over the world: the result of an all_reduce or a
 * reduce_scatter over a group of all W ranks (ZeRO 0/1: all_reduce;
 * 2/3: reduce_scatter), or an all_gather of such a shard. */
static bool cg_grad_reduced(const ir_module *m, int v) {
    if (m->values[v].kind == IR_V_ACCUM) { /* reduced if every gradient accumulated into it is */
        bool any = false, all = true;
        for (int i = 0; i < m->nops; i++)
            if (m->ops[i].code == IR_ACCUMULATE && m->ops[i].nin == 2 && m->ops[i].in[0] == v) {
                any = true;
                all &= cg_grad_reduced(m, m->ops[i].in[1]);
            }
        return any && all;
    }
    const ir_op *d = cg_def_op(m, v);
    /* A copy to host memory (the optimizer offloaded) holds what it copied. */
    if (d && d->code == IR_OFFLOAD && d->nin == 1) d = cg_def_op(m, d->in[0]);
    if (d && d->code == IR_ALL_GATHER && d->nin == 1) d = cg_def_op(m, d->in[0]);
    return d && (d->code == IR_ALL_REDUCE || d->code == IR_REDUCE_SCATTER) && cg_over_world(m, d);
}

/* A value sharded over a group whose sets have more than one rank. */
static bool cg_sharded(const ir_module *m, int v) {
    const ir_type *t = &m->values[v].type;
    for (int d = 0; d < t->rank; d++) {
        int g = t->shard[d];
        if (g >= 0 && g < m->ngroups && m->groups[g].set_size > 1) return true;
    }
    return false;
}

/* A module for W > 1 ranks must be lowered for them; else every rank
 * would run the whole unsharded step (baspc --passes= or a pipeline
 * without ulysses / zero).  The rule, checked before any code is written:
 *  1. the sequence layout: every attention's operands are sharded over a
 *     group of more than one rank (Ulysses: heads over @sp after the
 *     all-to-all; batch-aware: also the batch over the groups) -- the
 *     'ulysses' pass (and 'batch-aware') produce it;
 *  2. the gradient reductions, for a module lowered from a spec (it
 *     carries config zero): every adamw gradient is the result of an
 *     all_reduce or reduce_scatter over all W ranks (or an all_gather of
 *     one, or an accumulator of such results) -- the 'zero' pass produces
 *     them, at every stage.
 * A single-rank module, and hand-written IR without config zero, need
 * only what they say (rule 1 still applies to hand-written IR). */
static bool cg_check_lowered(const ir_module *m) {
    int W = ir_world(m);
    if (W <= 1) return true;
    int unsharded = 0, first_attn = -1, unreduced = 0, first_opt = -1;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        /* a dynamic variant of one rank is data parallel: its rows differ by the assignment */
        if (ir_attr_int(op, "variant", 0) == 1) continue;
        if (op->code == IR_ATTENTION && op->nin >= 1 && !cg_sharded(m, op->in[0])) {
            if (!unsharded++) first_attn = i;
        }
    }
    bool from_spec = ir_config_get(m, "zero") != NULL;
    if (from_spec)
        for (int i = 0; i < m->nops; i++) {
            const ir_op *op = &m->ops[i];
            if (op->code == IR_ADAMW && op->nin >= 2 && !cg_grad_reduced(m, op->in[1]))
                if (!unreduced++) first_opt = i;
        }
    char what[160];
    if (unsharded) {
        sup_error(m->ops[first_attn].loc,
                  "codegen: module @%s is not lowered for its %d ranks: %d attention op(s), the first %s, "
                  "read operands sharded over no group, so every rank would run the whole unsharded step",
                  m->name, W, unsharded, ir_op_str(m, first_attn, what, sizeof what));
        sup_note(m->ops[first_attn].loc, "the 'ulysses' pass shards the sequence (and 'batch-aware' the batch); "
                                         "run the default pipeline (baspc without --passes) or name them in "
                                         "--passes");
    }
    if (unreduced) {
        sup_error(m->ops[first_opt].loc,
                  "codegen: module @%s is not lowered for its %d ranks: %d adamw gradient(s), the first %s, "
                  "are not reduced over all %d ranks (all_reduce or reduce_scatter over @world), so the replicas "
                  "would diverge",
                  m->name, W, unreduced, ir_op_str(m, first_opt, what, sizeof what), W);
        sup_note(m->ops[first_opt].loc, "the 'zero' pass inserts the gradient reductions (at every ZeRO stage); "
                                        "run the default pipeline or add 'zero' to --passes");
    }
    return !unsharded && !unreduced;
}

bool cg_emit_c(const ir_module *m0, const sup_context *ctx, const char *spec_path, FILE *out) {
    if (!ir_verify(m0, "before codegen")) return false;
    if (!cg_check_lowered(m0)) return false;
    ir_module *own;
    const ir_module *m = cg_planned(m0, ctx, &own);
    bool ok = m && cg_emit_planned(m, ctx, spec_path, out);
    if (own) ir_module_free(own);
    return ok;
}

static bool cg_emit_planned(const ir_module *m, const sup_context *ctx, const char *spec_path, FILE *out) {
    int errors = sup_error_count();
    const char *spec = spec_path ? spec_path : m->name;
    cg_names n;
    cg_names_init(&n, m);
    n.ctx = ctx;
    sup_buf b = {0};
    cg_header(&b, &n, spec);
    cg_value_enum(&b, &n);
    cg_groups(&b, &n);
    cg_values(&b, &n);
    int nopt = cg_opt(&b, &n);
    bool ok = cg_check_values(&n);
    ok &= cg_emit_step(&n, &b);
    sup_buf_puts(&b, "\n");
    /* batch_aware dynamic validates with the variant of all N ranks, if it
     * has one: every batch one row of B*S tokens, as one rank would */
    bool eval = cg_dyn_sizes(m, NULL, 0) == 0
                    ? cg_emit_eval(&n, cg_loss(&n), &b)
                    : cg_dyn_eval_variant(m) >= 0 && cg_emit_eval(&n, cg_dyn_world_loss(m), &b);
    sup_buf_puts(&b, "\n");
    cg_program(&b, &n, spec, nopt, eval);
    ok &= sup_error_count() == errors;
    if (ok && (fputs(b.data, out) < 0 || fflush(out) != 0)) {
        sup_error(sup_noloc(), "codegen: cannot write the C program: %s", strerror(errno));
        ok = false;
    }
    sup_buf_free(&b);
    cg_names_free(&n);
    return ok;
}
