/* ir_mem.c — what a memory plan is made of: buffer sizes per target, live
 * ranges over the op order, the whole-step regions (optimizer state,
 * collective staging), and the verifier rule that no two buffers live at
 * the same time share a byte.  The plan itself is made by passes/memplan;
 * everything that reads one (the verifier, codegen, the cost model,
 * `baspc --memory`) takes its sizes and lifetimes from here, so that they
 * cannot disagree. */
#include "ir_internal.h"
#include "ir_op.h"

#include <stdlib.h>
#include <string.h>

static const char *const mem_cat_names[IR_MEM_NCATS] = {"params",      "grads", "optimizer",
                                                        "activations", "comm",  "workspace"};

const char *ir_mem_cat_name(ir_mem_cat c) { return c >= 0 && c < IR_MEM_NCATS ? mem_cat_names[c] : "?"; }

ir_mem_target ir_mem_target_named(bool cuda) { return (ir_mem_target){cuda, cuda ? 256 : 64}; }

/* bf16 on a GPU device (a preset other than cpu*): the spec describes the
 * CUDA backend's run. */
bool ir_mem_default_cuda(const char *device, const char *precision) {
    return device && precision && strcmp(precision, "bf16") == 0 && strncmp(device, "cpu", 3) != 0;
}

bool ir_mem_target_of(const ir_module *m, ir_mem_target *t) {
    const char *s = ir_config_get(m, "mem.target");
    bool cuda =
        s ? strcmp(s, "cuda") == 0 : ir_mem_default_cuda(ir_config_get(m, "device"), ir_config_get(m, "precision"));
    *t = ir_mem_target_named(cuda);
    return !s || cuda || strcmp(s, "cpu") == 0;
}

bool ir_mem_planned(const ir_module *m) { return ir_config_get(m, "mem.peak") != NULL; }

bool ir_mem_has_buffer(const ir_module *m, int v) {
    const ir_value *val = &m->values[v];
    return val->kind != IR_V_RESULT || (val->def >= 0 && val->def < m->nops);
}

bool ir_mem_params_on_host(const ir_module *m) { return ir_config_int(m, "offload.params", 0) == 1; }

bool ir_mem_on_host(const ir_module *m, int v) {
    int d = m->values[v].def;
    if (m->values[v].kind == IR_V_PARAM) return ir_mem_params_on_host(m);
    if (m->values[v].kind != IR_V_RESULT || d < 0 || d >= m->nops) return false;
    const ir_op *op = &m->ops[d];
    const ir_op_desc *desc = ir_op_desc_of(op->code);
    unsigned host = desc ? desc->host_outs : 0;
    for (int k = 0; k < op->nout; k++)
        if (op->out[k] == v && (host >> k & 1u)) return true;
    return false;
}

bool ir_mem_keeps_f32(const ir_module *m, int v) {
    int d = m->values[v].def;
    if (m->values[v].kind != IR_V_RESULT || d < 0 || d >= m->nops) return false;
    const ir_op *op = &m->ops[d];
    /* A copy between device and host keeps its operand's element size. */
    if (ir_op_desc_of(op->code)->comm == IR_COMM_HOST && op->nin == 1 && op->in[0] >= 0 && op->in[0] < m->nvalues)
        return ir_mem_keeps_f32(m, op->in[0]);
    unsigned f32 = ir_op_desc_of(op->code)->f32_outs;
    for (int k = 0; k < op->nout; k++)
        if (op->out[k] == v && (f32 >> k & 1u)) return true;
    return false;
}

/* Element size in the runtime's buffers (the CPU computes in fp32; the CUDA
 * backend keeps every floating tensor in bf16, as cuda_esize does, except
 * those ir_mem_keeps_f32 names). */
static int64_t mem_esize(const ir_module *m, int v, ir_mem_target t) {
    const ir_value *val = &m->values[v];
    if (!t.cuda || val->type.dtype == IR_I32 || val->type.rank == 0 || ir_mem_keeps_f32(m, v)) return 4;
    return 2;
}

static int64_t mem_align(int64_t n, int64_t a) {
    if (n > INT64_MAX - a) return -1;
    return (n + a - 1) / a * a;
}

int64_t ir_mem_value_bytes(const ir_module *m, int v, ir_mem_target t) {
    if (!ir_mem_has_buffer(m, v)) return 0;
    const ir_value *val = &m->values[v];
    int64_t n = ir_type_local_elems(m, &val->type);
    if (n < 1) n = 1;
    int64_t b = ir_mem_mul(n, mem_esize(m, v, t));
    return b < 0 ? -1 : mem_align(b, t.align);
}

int ir_mem_loss_value(const ir_module *m) {
    int v = ir_value_find(m, "loss");
    return v >= 0 && ir_mem_has_buffer(m, v) ? v : ir_loss_all_reduce(m);
}

bool *ir_weight_flags(const ir_module *m) {
    bool *w = sup_xcalloc((size_t)(m->nvalues ? m->nvalues : 1), sizeof *w);
    for (int v = 0; v < m->nvalues; v++) w[v] = m->values[v].kind == IR_V_PARAM || m->values[v].kind == IR_V_ACCUM;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        const ir_op_desc *d = ir_op_desc_of(op->code);
        for (int o = 0; o < op->nout; o++)
            if (d->wgrad_outs >> o & 1u) w[op->out[o]] = true;
        /* Sums and reductions of weight-like values stay weight-like (the
         * tied-embedding gradient sum, ZeRO's collectives). */
        if (d->keeps_weight && op->nin > 0 && w[op->in[0]])
            for (int o = 0; o < op->nout; o++) w[op->out[o]] = true;
    }
    return w;
}

ir_mem_cat *ir_mem_value_cats(const ir_module *m) {
    bool *w = ir_weight_flags(m);
    ir_mem_cat *cat = sup_xcalloc((size_t)(m->nvalues ? m->nvalues : 1), sizeof *cat);
    for (int v = 0; v < m->nvalues; v++) {
        const ir_value *val = &m->values[v];
        const ir_op *def = val->kind == IR_V_RESULT && val->def >= 0 && val->def < m->nops ? &m->ops[val->def] : NULL;
        /* A ZeRO working copy (all_gather of a parameter) is a parameter. */
        bool gathered = def && def->code == IR_ALL_GATHER && def->nin > 0 && m->values[def->in[0]].kind == IR_V_PARAM;
        cat[v] = val->kind == IR_V_PARAM || gathered ? IR_MEM_PARAMS : w[v] ? IR_MEM_GRADS : IR_MEM_ACTS;
    }
    free(w);
    return cat;
}

int64_t ir_mem_opt_bytes(const ir_module *m, ir_mem_target t) {
    int64_t total = 0;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        if (op->code != IR_ADAMW || op->nin < 1) continue;
        int64_t n = ir_type_local_elems(m, &m->values[op->in[0]].type);
        int64_t one = mem_align(ir_mem_mul(n < 1 ? 1 : n, 4), t.align);
        int64_t all = ir_mem_mul(one, t.cuda ? 3 : 2);
        if (one < 0 || all < 0 || total > INT64_MAX - all) return -1;
        total += all;
    }
    return total;
}

bool ir_mem_opt_on_host(const ir_module *m) {
    const char *s = ir_config_get(m, "offload");
    return s && (strcmp(s, "optimizer") == 0 || strcmp(s, "all") == 0);
}

int64_t ir_mem_host_stage_bytes(const ir_module *m, ir_mem_target t) {
    if (!t.cuda || !ir_mem_opt_on_host(m)) return 0;
    int64_t most = 0;
    for (int i = 0; i < m->nops; i++)
        if (m->ops[i].code == IR_ADAMW && m->ops[i].nin >= 1) {
            int64_t n = ir_type_local_elems(m, &m->values[m->ops[i].in[0]].type);
            most = n > most ? n : most;
        }
    return most ? mem_align(ir_mem_mul(most, 4), t.align) : 0;
}

bool ir_op_stages(const ir_module *m, const ir_op *op) {
    const ir_op_desc *d = ir_op_desc_of(op->code);
    int64_t e[2] = {0, 0};
    if (d->staging) d->staging(m, op, e);
    return e[0] > 0 || e[1] > 0;
}

void ir_mem_comm_bytes(const ir_module *m, ir_mem_target t, int64_t out[2]) {
    out[0] = out[1] = 0;
    if (t.cuda) /* the CUDA backend stages in its own device workspaces */
        return;
    for (int i = 0; i < m->nops; i++) {
        int64_t e[2] = {0, 0};
        const ir_op_desc *d = ir_op_desc_of(m->ops[i].code);
        if (d->staging) d->staging(m, &m->ops[i], e);
        for (int k = 0; k < 2; k++) {
            int64_t b = e[k] > 0 ? mem_align(ir_mem_mul(e[k], 4), t.align) : 0;
            if (b < 0)
                out[k] = -1;
            else if (out[k] >= 0 && b > out[k])
                out[k] = b;
        }
    }
}

void ir_mem_live(const ir_module *m, int *start, int *end) {
    for (int v = 0; v < m->nvalues; v++) {
        if (!ir_mem_has_buffer(m, v)) {
            start[v] = end[v] = -2;
        } else if (m->values[v].kind != IR_V_RESULT) {
            start[v] = -1, end[v] = m->nops;
        } else {
            start[v] = end[v] = m->values[v].def;
        }
    }
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        for (int k = 0; k < op->nin; k++) {
            int v = op->in[k];
            if (v >= 0 && v < m->nvalues && start[v] != -2 && end[v] < i) end[v] = i;
        }
        /* A started collective reads its operands until its wait: they live
         * at least to it, so no later value takes their bytes while the
         * transfer may still read them. */
        if (op->code == IR_WAIT)
            for (int k = 0; k < op->nin; k++) {
                int s = op->in[k] >= 0 && op->in[k] < m->nvalues ? m->values[op->in[k]].def : -1;
                for (int j = 0; s >= 0 && s < i && j < m->ops[s].nin; j++) {
                    int v = m->ops[s].in[j];
                    if (v >= 0 && v < m->nvalues && start[v] != -2 && end[v] < i) end[v] = i;
                }
            }
        /* The runtime reads the gradients adamw takes after the step (the
         * non-finite guard, --save-grads). */
        if (op->code == IR_ADAMW && op->nin == 2 && op->in[1] >= 0 && op->in[1] < m->nvalues && start[op->in[1]] != -2)
            end[op->in[1]] = m->nops;
    }
    int loss = ir_mem_loss_value(m);
    if (loss >= 0) end[loss] = m->nops;
    /* batch_aware dynamic: each variant's loss is read after its micro-step
     * (its run of ops), so it lives to the run's end. */
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        int64_t K = ir_attr_int(op, "variant", 0);
        if (K <= 0 || op->code != IR_ALL_REDUCE || op->nin < 1 || op->nout < 1 || op->in[0] < 0) continue;
        if (!ir_is_partial_loss(m, op->in[0])) continue;
        int last = i;
        while (last + 1 < m->nops && ir_attr_int(&m->ops[last + 1], "variant", 0) == K) last++;
        if (op->out[0] >= 0 && end[op->out[0]] < last) end[op->out[0]] = last;
    }
}

/* ---- the verifier's rule ------------------------------------------------------ */
typedef struct mem_item {
    int v; /* value index, or -1 - region */
    int64_t off, bytes;
    int start, end;
    int host; /* 1: in the host arena */
} mem_item;

/* By arena (device first), then offset. */
static int item_by_off(const void *a, const void *b) {
    const mem_item *x = a, *y = b;
    if (x->host != y->host) return x->host - y->host;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : 0;
}

static const char *item_name(const ir_module *m, const mem_item *it, char *buf, size_t n) {
    static const char *const regions[] = {"the optimizer state", "the collectives' staging area",
                                          "the host staging area"};
    if (it->v >= 0)
        snprintf(buf, n, "%%%s", m->values[it->v].name);
    else
        snprintf(buf, n, "%s", regions[-1 - it->v]);
    return buf;
}

static int64_t cfg_i64(const ir_module *m, const char *key) { return ir_config_int(m, key, -1); }

/* The two whole-step regions, checked against what the module needs and
 * added to it[]: the optimizer state, and the collectives' send area
 * followed by their receive area.  Returns how many were added. */
static int mem_regions(ir_vctx *c, ir_mem_target t, mem_item *it) {
    const ir_module *m = c->m;
    int n = 0;
    int64_t comm[2];
    ir_mem_comm_bytes(m, t, comm);
    int64_t need[3] = {ir_mem_opt_bytes(m, t), comm[0] + comm[1], ir_mem_host_stage_bytes(m, t)};
    int64_t roff[3] = {cfg_i64(m, "mem.opt_offset"), cfg_i64(m, "mem.comm_offset"),
                       cfg_i64(m, "mem.host_stage_offset")};
    int64_t rbytes[3] = {cfg_i64(m, "mem.opt_bytes"), -1,
                         ir_config_get(m, "mem.host_stage_bytes") ? cfg_i64(m, "mem.host_stage_bytes") : 0};
    int host[3] = {ir_mem_opt_on_host(m), 0, 1};
    int64_t b0 = cfg_i64(m, "mem.comm_bytes0"), b1 = cfg_i64(m, "mem.comm_bytes1");
    if (b0 < comm[0] || b1 < comm[1])
        ir_verr(c, sup_noloc(),
                "memory plan: the collectives need %lld + %lld staging bytes, the plan gives "
                "%lld + %lld (mem.comm_bytes0/1)",
                (long long)comm[0], (long long)comm[1], (long long)b0, (long long)b1);
    else
        rbytes[1] = b0 > INT64_MAX - b1 ? INT64_MAX : b0 + b1;
    for (int r = 0; r < 3; r++) {
        char nb[64];
        mem_item named = {-1 - r, 0, 0, 0, 0, 0};
        if (rbytes[r] >= 0 && rbytes[r] < need[r])
            ir_verr(c, sup_noloc(), "memory plan: %s needs %lld bytes, the plan gives %lld",
                    item_name(m, &named, nb, sizeof nb), (long long)need[r], (long long)rbytes[r]);
        else if (rbytes[r] > 0 && roff[r] < 0)
            ir_verr(c, sup_noloc(), "memory plan: %s has no offset", item_name(m, &named, nb, sizeof nb));
        else if (rbytes[r] > 0)
            it[n++] = (mem_item){-1 - r, roff[r], rbytes[r], -1, m->nops, host[r]};
    }
    return n;
}

/* True when the items may share bytes while live: a check of each arena
 * that is near-linear, so that the pairwise search below (quadratic where
 * buffers reuse the same bytes layer after layer) runs only to report.
 * Items it cannot judge (an empty or overflowing size, a lifetime outside
 * the ops) count as a clash and go to the search. */
static bool mem_may_clash(const ir_module *m, const mem_item *it, int n) {
    ir_mem_box *box = sup_xmalloc(sizeof *box * (size_t)(n > 0 ? n : 1));
    bool clash = false;
    for (int host = 0; host <= 1 && !clash; host++) {
        int nb = 0;
        for (int i = 0; i < n && !clash; i++) {
            if (it[i].host != host) continue;
            clash = it[i].bytes <= 0 || it[i].off < 0 || it[i].off > INT64_MAX - it[i].bytes || it[i].start < -1 ||
                    it[i].end > m->nops || it[i].start > it[i].end;
            box[nb++] = (ir_mem_box){it[i].off, it[i].bytes, it[i].start, it[i].end};
        }
        clash = clash || !ir_mem_boxes_disjoint(m->nops, box, nb);
    }
    free(box);
    return clash;
}

/* Every buffer placed, aligned, inside the arena, and no two buffers whose
 * live ranges meet share a byte.  Items sorted by offset; each is compared
 * with the later ones that start before it ends (when mem_may_clash finds
 * that some may). */
void ir_verify_mem(ir_vctx *c) {
    const ir_module *m = c->m;
    bool any = false;
    for (int v = 0; v < m->nvalues && !any; v++) any = m->values[v].mem_off >= 0;
    if (!ir_mem_planned(m)) {
        if (any) ir_verr(c, sup_noloc(), "memory plan: values are placed but config mem.peak is missing");
        return;
    }
    ir_mem_target t;
    if (!ir_mem_target_of(m, &t)) {
        ir_verr(c, sup_noloc(), "memory plan: mem.target must be cpu or cuda, found '%s'",
                ir_config_get(m, "mem.target"));
        return;
    }
    int64_t peak = cfg_i64(m, "mem.peak"),
            host_peak = ir_config_get(m, "mem.host_peak") ? cfg_i64(m, "mem.host_peak") : 0;
    if (peak < 0 || host_peak < 0) {
        const char *k = peak < 0 ? "mem.peak" : "mem.host_peak";
        ir_verr(c, sup_noloc(), "memory plan: %s must be a byte count, found '%s'", k, ir_config_get(m, k));
        return;
    }
    int *start = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
    int *end = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1));
    ir_mem_live(m, start, end);
    mem_item *it = sup_xmalloc(sizeof *it * (size_t)(m->nvalues + 4));
    int n = mem_regions(c, t, it);
    for (int v = 0; v < m->nvalues; v++) {
        const ir_value *val = &m->values[v];
        if (!ir_mem_has_buffer(m, v)) continue;
        int64_t bytes = ir_mem_value_bytes(m, v, t);
        if (val->mem_off < 0) {
            ir_verr(c, val->loc, "memory plan: %%%s has no arena offset", val->name);
            continue;
        }
        if (val->mem_off % t.align != 0)
            ir_verr(c, val->loc, "memory plan: %%%s at offset %lld is not aligned to %lld bytes", val->name,
                    (long long)val->mem_off, (long long)t.align);
        it[n++] = (mem_item){v, val->mem_off, bytes, start[v], end[v], ir_mem_on_host(m, v)};
    }
    qsort(it, (size_t)n, sizeof *it, item_by_off);
    bool clash = mem_may_clash(m, it, n);
    for (int i = 0; i < n; i++) {
        char a[IR_NAME_MAX + 40], b[IR_NAME_MAX + 40];
        sup_loc loc = it[i].v >= 0 ? m->values[it[i].v].loc : sup_noloc();
        int64_t top = it[i].host ? host_peak : peak;
        if (it[i].bytes < 0 || it[i].off > top - it[i].bytes)
            ir_verr(c, loc, "memory plan: %s [%lld, +%lld) ends past the %sarena's %lld bytes (%s)",
                    item_name(m, &it[i], a, sizeof a), (long long)it[i].off, (long long)it[i].bytes,
                    it[i].host ? "host " : "", (long long)top, it[i].host ? "mem.host_peak" : "mem.peak");
        int64_t stop = it[i].bytes < 0 || it[i].off > INT64_MAX - it[i].bytes ? INT64_MAX : it[i].off + it[i].bytes;
        for (int j = i + 1; clash && j < n && it[j].host == it[i].host && it[j].off < stop; j++) {
            if (it[j].start > it[i].end || it[i].start > it[j].end) continue;
            int lo = it[i].start > it[j].start ? it[i].start : it[j].start;
            ir_verr(c, it[j].v >= 0 ? m->values[it[j].v].loc : loc,
                    "memory plan: %s [%lld, +%lld) and %s [%lld, +%lld) overlap while both are live (op %d)",
                    item_name(m, &it[i], a, sizeof a), (long long)it[i].off, (long long)it[i].bytes,
                    item_name(m, &it[j], b, sizeof b), (long long)it[j].off, (long long)it[j].bytes, lo < 0 ? 0 : lo);
        }
    }
    free(it);
    free(start);
    free(end);
}
