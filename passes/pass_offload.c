/* pass_offload.c — offload to host memory (config `offload`: none |
 * activations | optimizer | all | auto; spec key train.offload).  The
 * optimizer's part (optimizer, all) is the memory plan's placement of its
 * state in the host arena (ir_mem_opt_on_host) and the runtime's update
 * there; this pass moves the activations (activations, all), the gradients
 * the host update reads (optimizer, all) and the parameters (all).
 *
 * Without it every forward value the backward reads stays on the device
 * from its forward to its backward: at the turn from forward to backward
 * the device holds what every layer saved.  This pass moves those values to
 * host memory for that time:
 *
 *   %v.host = offload %v      right after the last forward op reading %v
 *                             (its device buffer dies there)
 *   %v.dev  = fetch %v.host   right before the first op of the backward
 *                             block that first reads %v (that layer's first
 *                             backward op, recompute clones included); for
 *                             the cuda target one block earlier (prefetch)
 *
 * and every backward read of %v reads %v.dev.  The copies are exact, so
 * losses, gradients and weights do not change.  The device then holds one
 * layer's saved values at a time in the backward; the host arena holds the
 * rest (ir_mem_on_host, the second space of the memory plan).
 *
 * What moves: op results in the activations category (ir_mem_value_cats)
 * defined in the forward and read by a decoder layer's backward (phase bwd,
 * layer >= 0).  With `recompute full` that is the layer inputs the
 * recompute pass keeps (DeepSpeed ALST's checkpoint offload); with
 * `selective`, also attention's operands and result; with none, every
 * saved activation.  Values read first by the backward outside the layers
 * (the final norm's and the LM head's, whose backward follows the forward
 * at once) stay: a round trip there frees nothing at the peak.
 *
 * With `all` the parameters move too where only gathers read them
 * (offload_params).
 *
 * The CPU backend copies in line where the pass puts them.  The CUDA
 * backend copies on its communication stream beside the kernels, and the
 * first reader of a fetched copy waits for it: an offload overlaps the rest
 * of the forward, and a fetch placed one backward block early (prefetch,
 * the cuda target) overlaps that block, for one more layer's saved values
 * on the device.  The cost model times the copies at the host link's
 * bandwidth (config host_bw, host_latency, host_efficiency;
 * IR_COMM_HOST).  A module whose mesh has no host link (host_bw 0) cannot
 * offload: an error.
 *
 * auto takes none when it fits, else the setting that fits the device and
 * the host with the lowest predicted step (offload_choose).
 *
 * Run after recompute (it moves what recompute keeps) and before memplan.
 * Applied once: a module with offload ops is left alone. */
#include "pass_util.h"

#include <stdlib.h>
#include <string.h>

typedef struct off_plan {
    int after;  /* offload right after this op (-1: not moved) */
    int before; /* fetch right before this op */
    int first;  /* the first backward reader: reads from here on take the fetched copy */
} off_plan;

/* What the plans read of the step, from one pass over it (the plans would
 * otherwise scan the rest of the step once per value: quadratic in the
 * layers).  Per value: its last forward reader before its first backward
 * reader, and that reader (-1: none); per adamw op, the last op before it
 * reading its gradient (-1: none); per layer, the first op of its backward
 * (-1: none). */
typedef struct off_index {
    int *last_fwd, *first_bwd, *grad_last, *bwd_start;
    int nlayers;
} off_index;

static off_index index_of(const ir_module *m) {
    int nl = 0;
    for (int i = 0; i < m->nops; i++)
        if (ir_op_layer(&m->ops[i]) + 1 > nl) nl = ir_op_layer(&m->ops[i]) + 1;
    off_index x = {sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1)),
                   sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1)),
                   sup_xmalloc(sizeof(int) * (size_t)(m->nops + 1)), sup_xmalloc(sizeof(int) * (size_t)(nl + 1)), nl};
    int *last = sup_xmalloc(sizeof(int) * (size_t)(m->nvalues + 1)); /* each value's latest reader so far */
    for (int v = 0; v < m->nvalues; v++) x.last_fwd[v] = x.first_bwd[v] = last[v] = -1;
    for (int l = 0; l < nl; l++) x.bwd_start[l] = -1;
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        bool bwd = strcmp(ir_op_phase(op), "bwd") == 0;
        int layer = ir_op_layer(op);
        if (bwd && layer >= 0 && x.bwd_start[layer] < 0) x.bwd_start[layer] = i;
        x.grad_last[i] = op->code == IR_ADAMW && op->nin == 2 && op->in[1] >= 0 ? last[op->in[1]] : -1;
        for (int k = 0; k < op->nin; k++) {
            int v = op->in[k];
            if (v < 0 || v >= m->nvalues) continue;
            last[v] = i;
            if (x.first_bwd[v] >= 0) continue;
            if (bwd)
                x.first_bwd[v] = i;
            else
                x.last_fwd[v] = i;
        }
    }
    free(last);
    return x;
}

static void index_free(off_index *x) { free(x->last_fwd), free(x->first_bwd), free(x->grad_last), free(x->bwd_start); }

/* The first op at or after `from` of layer `layer`'s backward. */
static int bwd_block_start(const ir_module *m, const off_index *x, int layer, int from) {
    if (layer >= 0 && layer < x->nlayers && x->bwd_start[layer] >= from) return x->bwd_start[layer];
    for (int i = from; i < m->nops; i++) /* from inside the layer's backward: rare */
        if (ir_op_layer(&m->ops[i]) == layer && strcmp(ir_op_phase(&m->ops[i]), "bwd") == 0) return i;
    return -1;
}

/* The first op of the backward block right before the one starting at b:
 * the run of backward ops of op b-1's layer that ends there; b itself when
 * op b-1 is no backward op. */
static int bwd_block_before(const ir_module *m, int b) {
    if (b <= 0 || strcmp(ir_op_phase(&m->ops[b - 1]), "bwd") != 0) return b;
    int layer = ir_op_layer(&m->ops[b - 1]), i = b - 1;
    while (i > 0 && strcmp(ir_op_phase(&m->ops[i - 1]), "bwd") == 0 && ir_op_layer(&m->ops[i - 1]) == layer) i--;
    return i;
}

/* Where value v would move, or false when it stays on the device; with
 * prefetch the fetch comes one backward block early. */
static bool plan_value(const ir_module *m, const off_index *x, const ir_mem_cat *cat, int v, bool prefetch,
                       off_plan *p) {
    const ir_value *val = &m->values[v];
    if (val->kind != IR_V_RESULT || cat[v] != IR_MEM_ACTS || val->def < 0 || ir_mem_on_host(m, v) ||
        strcmp(ir_op_phase(&m->ops[val->def]), "fwd") != 0)
        return false;
    int first_bwd = x->first_bwd[v], last_fwd = x->last_fwd[v] > val->def ? x->last_fwd[v] : val->def;
    if (first_bwd < 0 || ir_op_layer(&m->ops[first_bwd]) < 0) return false;
    int before = bwd_block_start(m, x, ir_op_layer(&m->ops[first_bwd]), last_fwd + 1);
    if (before < 0 || before > first_bwd || before <= last_fwd + 1) return false;
    int early = prefetch ? bwd_block_before(m, before) : before;
    if (early > last_fwd + 1) before = early;
    *p = (off_plan){last_fwd, before, first_bwd};
    return true;
}

/* With the optimizer offloaded the update runs on the host, so it reads
 * each gradient there: a gradient laid out like its parameter moves to host
 * memory right after its last reader before the adamw that takes it (its
 * device buffer dies there), and that adamw reads the host copy; nothing
 * fetches it back.  ZeRO-1's whole gradient of a sharded parameter stays:
 * the update slices it on the device.  Gradient accumulators (accum > 1)
 * live the whole run and stay too. */
static bool plan_grad(const ir_module *m, const off_index *x, int adamw, off_plan *p) {
    const ir_op *a = &m->ops[adamw];
    int w = a->in[0], g = a->in[1];
    const ir_value *gv = &m->values[g];
    if (gv->kind != IR_V_RESULT || gv->def < 0 || ir_mem_on_host(m, g) || gv->type.rank != m->values[w].type.rank)
        return false;
    for (int d = 0; d < gv->type.rank; d++)
        if (gv->type.shard[d] != m->values[w].type.shard[d]) return false;
    int last = x->grad_last[adamw] > gv->def ? x->grad_last[adamw] : gv->def;
    *p = (off_plan){last, -1, adamw};
    return true;
}

/* A copy op: out = code(in), tagged like `like` (layer and phase). */
static ir_op copy_op(ir_opcode code, int in, int out, const ir_op *like) {
    ir_op op = ir_op_make(code);
    ir_op_add_input(&op, in);
    ir_op_add_output(&op, out);
    pu_tag_like(&op, like);
    return op;
}

/* The copies in place: each op's backward reads rewired (to the fetched
 * copy, or for a gradient to the host copy), then through pass_edits
 * fetches before their op and offloads after theirs, each gap in value
 * order (the "after" ones recorded last value first: pass_edits puts the
 * latest recorded first). */
static void insert_copies(ir_module *m, const off_plan *plan, const int *host, const int *dev, int nvals) {
    for (int i = 0; i < m->nops; i++) {
        ir_op *op = &m->ops[i];
        for (int j = 0; j < op->nin; j++) {
            int v = op->in[j];
            if (v >= 0 && v < nvals && plan[v].after >= 0 && i >= plan[v].first)
                op->in[j] = plan[v].before >= 0 ? dev[v] : host[v];
        }
    }
    pass_edits e = {0};
    for (int v = 0; v < nvals; v++)
        if (plan[v].after >= 0 && plan[v].before >= 0) {
            ir_op f = copy_op(IR_FETCH, host[v], dev[v], &m->ops[plan[v].before]);
            pass_insert_before(&e, plan[v].before, &f);
        }
    for (int v = nvals - 1; v >= 0; v--)
        if (plan[v].after >= 0) {
            ir_op o = copy_op(IR_OFFLOAD, v, host[v], &m->ops[plan[v].after]);
            pass_insert_after(&e, plan[v].after, &o);
        }
    pass_edits_apply(m, &e);
}

/* What moves: plan[v] for every value v (after = -1: stays), with counts
 * and bytes per rank (as the target stores them) of the activations and
 * of the gradients. */
static void plan_all(const ir_module *m, bool acts, bool grads, bool prefetch, off_plan *plan, int *moved,
                     double *bytes, int *ngrads, double *gbytes) {
    ir_mem_target t;
    ir_mem_target_of(m, &t);
    ir_mem_cat *cat = ir_mem_value_cats(m);
    off_index x = index_of(m);
    for (int v = 0; v < m->nvalues; v++) plan[v] = (off_plan){-1, -1, -1};
    for (int v = 0; acts && v < m->nvalues; v++)
        if (plan_value(m, &x, cat, v, prefetch, &plan[v])) (*moved)++, *bytes += (double)ir_mem_value_bytes(m, v, t);
    for (int i = 0; grads && i < m->nops; i++) {
        off_plan p;
        if (m->ops[i].code != IR_ADAMW || m->ops[i].nin != 2 || plan[m->ops[i].in[1]].after >= 0 ||
            !plan_grad(m, &x, i, &p))
            continue;
        int g = m->ops[i].in[1];
        plan[g] = p;
        (*ngrads)++, *gbytes += (double)ir_mem_value_bytes(m, g, t);
    }
    index_free(&x);
    free(cat);
}

/* The parameters to host memory, ZeRO-Infinity's parameter offload (mode
 * all): possible when every read of a parameter is a gather (train.zero 1
 * or more: ZeRO-3 gathers per layer, ZeRO-1/2 once a step) or its AdamW,
 * which with the optimizer offloaded runs on the host.  Each
 * gather then reads a device copy of its shard fetched right before it,
 * which dies at the gather; the device holds only the gathered weights of
 * the layer at work.  Returns the parameters moved (their bytes in *bytes),
 * or -1 with `why` saying what reads a parameter directly. */
static int offload_params(ir_module *m, double *bytes, char *why, size_t nwhy) {
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        for (int k = 0; k < op->nin; k++) {
            if (op->in[k] < 0 || m->values[op->in[k]].kind != IR_V_PARAM) continue;
            if ((op->code == IR_ALL_GATHER || op->code == IR_ADAMW) && k == 0) continue;
            snprintf(why, nwhy,
                     "%s reads %%%s directly (with train.zero 1 or more every parameter is gathered before use)",
                     ir_op_desc_of(op->code)->name, m->values[op->in[k]].name);
            return -1;
        }
    }
    ir_mem_target t;
    ir_mem_target_of(m, &t);
    int moved = 0;
    for (int v = 0; v < m->nvalues; v++)
        if (m->values[v].kind == IR_V_PARAM) moved++, *bytes += (double)ir_mem_value_bytes(m, v, t);
    pass_edits e = {0};
    for (int i = 0; i < m->nops; i++) {
        ir_op *op = &m->ops[i];
        int w = op->nin > 0 ? op->in[0] : -1;
        if (op->code != IR_ALL_GATHER || w < 0 || m->values[w].kind != IR_V_PARAM) continue;
        char base[IR_NAME_MAX + 8];
        snprintf(base, sizeof base, "%.54s.dev", m->values[w].name);
        int dev = ir_value_add_fresh(m, base, m->values[w].type);
        ir_op fetch = copy_op(IR_FETCH, w, dev, op);
        pass_insert_before(&e, i, &fetch);
        op->in[0] = dev;
    }
    pass_edits_apply(m, &e); /* renumbers */
    ir_config_set(m, "offload.params", "1");
    return moved;
}

/* Applies mode (activations, optimizer or all) to m, fetching one block
 * early with prefetch; the config says which (ir_mem_opt_on_host reads
 * it). */
static bool offload_apply_as(ir_module *m, const char *mode, bool prefetch, const pass_options *opt) {
    bool acts = strcmp(mode, "activations") == 0 || strcmp(mode, "all") == 0;
    int nvals = m->nvalues;
    off_plan *plan = sup_xmalloc(sizeof *plan * (size_t)(nvals + 1));
    int *host = sup_xmalloc(sizeof(int) * (size_t)(nvals + 1)), *dev = sup_xmalloc(sizeof(int) * (size_t)(nvals + 1));
    bool grads = ir_mem_opt_on_host(m);
    int moved = 0, ngrads = 0;
    double bytes = 0, gbytes = 0;
    plan_all(m, acts, grads, prefetch, plan, &moved, &bytes, &ngrads, &gbytes);
    for (int v = 0; v < nvals; v++) {
        if (plan[v].after < 0) continue;
        char name[IR_NAME_MAX], base[IR_NAME_MAX + 8];
        ir_type t = m->values[v].type;
        snprintf(base, sizeof base, "%.54s.host", m->values[v].name);
        ir_value_fresh_name(m, base, name);
        host[v] = ir_value_add(m, name, IR_V_RESULT, t);
        if (plan[v].before < 0) continue;
        snprintf(base, sizeof base, "%.54s.dev", m->values[v].name);
        ir_value_fresh_name(m, base, name);
        dev[v] = ir_value_add(m, name, IR_V_RESULT, t);
    }
    if (moved || ngrads) insert_copies(m, plan, host, dev, nvals);
    free(plan);
    free(host);
    free(dev);
    char b[32], c[32];
    if (acts)
        pu_remark(opt,
                  "offload: activations: %d value(s) to host memory between forward and backward, %s per rank "
                  "each way",
                  moved, sup_fmt_bytes(bytes, b, sizeof b));
    if (grads)
        pu_remark(opt,
                  "offload: optimizer: AdamW's state in host memory, the update on the host; %d gradient(s), %s "
                  "per rank, to host memory once computed",
                  ngrads, sup_fmt_bytes(gbytes, c, sizeof c));
    if (strcmp(mode, "all") == 0) {
        char why[160];
        double pbytes = 0;
        int nparams = offload_params(m, &pbytes, why, sizeof why);
        if (nparams < 0)
            pu_remark(opt, "offload: parameters stay on the device: %s", why);
        else
            pu_remark(opt,
                      "offload: parameters: %d in host memory, %s per rank; each gather reads a copy of its shard "
                      "fetched right before it",
                      nparams, sup_fmt_bytes(pbytes, b, sizeof b));
    }
    return true;
}

static double cfg_num(const ir_module *m, const char *key) {
    const char *s = ir_config_get(m, key);
    return s ? strtod(s, NULL) : 0;
}

/* m's device peak per rank (arena and workspace) once planned, or -1. */
static int64_t planned_peak(ir_module *m, ir_mem_target t, ir_mem_stats *st) {
    if (!ir_mem_plan(m, t, st)) return -1;
    int64_t w = ir_mem_work_bytes(m, t);
    return w >= 0 ? st->arena + w : -1;
}

/* Prefetch where the copies run beside the kernels (the CUDA backend's
 * communication stream) and its plan, built on a clone, fits the device
 * (device_mem; unknown: prefetch).  It holds one more layer's fetched
 * values during the backward, which at the longest sequence that fits
 * would not: there the fetches stay right before their blocks.  The CPU
 * backend copies in line, where an early fetch would only hold memory
 * longer. */
static bool offload_apply(ir_module *m, const char *mode, const pass_options *opt) {
    ir_mem_target t;
    bool acts = strcmp(mode, "activations") == 0 || strcmp(mode, "all") == 0;
    if (!acts || !ir_mem_target_of(m, &t) || !t.cuda) return offload_apply_as(m, mode, false, opt);
    double cap = cfg_num(m, "device_mem");
    if (cap > 0) {
        pass_options quiet = opt ? *opt : pass_default_options();
        quiet.quiet = true;
        ir_module *c = ir_module_clone(m);
        ir_mem_stats st;
        int64_t peak = offload_apply_as(c, mode, true, &quiet) ? planned_peak(c, t, &st) : -1;
        ir_module_free(c);
        if (peak < 0 || (double)peak > cap) {
            char pb[32], cb[32];
            pu_remark(opt,
                      "offload: fetches right before their blocks: prefetching one block early needs %s per "
                      "rank, over %s",
                      peak < 0 ? "?" : sup_fmt_bytes((double)peak, pb, sizeof pb), sup_fmt_bytes(cap, cb, sizeof cb));
            return offload_apply_as(m, mode, false, opt);
        }
    }
    pu_remark(opt, "offload: prefetch: each fetch one backward block early, beside that block's kernels");
    return offload_apply_as(m, mode, true, opt);
}

/* offload auto: none when its plan (built on a clone, as recompute auto
 * does) fits the device (arena and workspace within device_mem): moving
 * state off the device saves memory, never time.  Else, of activations,
 * optimizer and all, the one that fits the device and the host (the host
 * arenas of a node's ranks within host_mem) with the lowest predicted step
 * (the cost model: the copies over the host link, the host update; the
 * earlier on a tie); all when none fits.  Without a host link, none. */
static const char *offload_choose(const ir_module *m, const pass_options *opt) {
    static const char *const order[4] = {"none", "activations", "optimizer", "all"};
    double cap = cfg_num(m, "device_mem"), host_cap = cfg_num(m, "host_mem");
    if (cfg_num(m, "host_bw") <= 0) {
        pu_remark(opt, "offload: auto: none (the mesh has no host link)");
        return "none";
    }
    ir_mem_target t;
    if (cap <= 0 || !ir_mem_target_of(m, &t)) {
        pu_remark(opt, "offload: auto: device_mem unknown; none");
        return "none";
    }
    pass_options quiet = opt ? *opt : pass_default_options();
    quiet.quiet = true;
    char pb[4][32], hb[4][32], cb[32];
    double ms[4];
    bool fits[4];
    int best = -1, per_node = m->mesh.devices_per_node > 0 ? m->mesh.devices_per_node : 1;
    for (int k = 0; k < 4; k++) {
        ir_module *c = ir_module_clone(m);
        ir_config_set(c, "offload", order[k]);
        ir_mem_stats st = {0};
        bool ok = k == 0 || offload_apply(c, order[k], &quiet);
        int64_t peak = ok ? planned_peak(c, t, &st) : -1;
        pass_cost_params p = pass_cost_default_params(c);
        ms[k] = peak >= 0 ? pass_cost_estimate_time(c, &p).step_s * 1e3 : 0;
        ir_module_free(c);
        snprintf(pb[k], sizeof pb[k], "?");
        if (peak >= 0) sup_fmt_bytes((double)peak, pb[k], sizeof pb[k]);
        sup_fmt_bytes((double)(peak >= 0 ? st.host_arena : 0), hb[k], sizeof hb[k]);
        bool host_fits = host_cap <= 0 || (peak >= 0 && (double)st.host_arena * per_node <= host_cap);
        fits[k] = peak >= 0 && (double)peak <= cap && host_fits;
        if (fits[k] && (best < 0 || ms[k] < ms[best])) best = k;
        if (k == 0 && fits[0]) break; /* none fits: nothing to weigh */
    }
    sup_fmt_bytes(cap, cb, sizeof cb);
    if (best < 0) {
        pu_remark(opt, "offload: auto: all, but %s per rank does not fit %s (none needs %s)", pb[3], cb, pb[0]);
        return "all";
    }
    char others[160] = "";
    for (int k = 1, n = 0; k < 4 && best > 0; k++)
        if (k != best && fits[k])
            n += snprintf(others + n, sizeof others - (size_t)n, "%s%s %.1f ms",
                          n ? ", " : "; also fitting: ", order[k], ms[k]);
    pu_remark(opt, "offload: auto: %s: %s per rank fits %s (host memory %s per rank)%s%s, predicted %.1f ms/step%s",
              order[best], pb[best], cb, hb[best], best ? "; none needs " : "", best ? pb[0] : "", ms[best], others);
    return order[best];
}

bool pass_offload(ir_module *m, const pass_options *opt) {
    const char *mode = pu_cfg(m, "offload", "none");
    static const char *const modes[] = {"none", "activations", "optimizer", "all", "auto"};
    bool known = false;
    for (int k = 0; k < 5; k++) known |= strcmp(mode, modes[k]) == 0;
    if (!known) {
        sup_error(sup_noloc(), "offload: config offload must be none, activations, optimizer, all or auto, found '%s'",
                  mode);
        return false;
    }
    if (pu_count_ops(m, IR_OFFLOAD) > 0 || ir_mem_params_on_host(m)) {
        pu_remark(opt, "offload: the module already offloads; left as is");
        return true;
    }
    if (strcmp(mode, "auto") == 0) {
        mode = offload_choose(m, opt);
        ir_config_set(m, "offload", mode);
        mode = pu_cfg(m, "offload", "none");
    }
    if (strcmp(mode, "none") == 0) {
        pu_remark(opt, "offload: none (config offload)");
        return true;
    }
    const char *bw = ir_config_get(m, "host_bw");
    if (!bw || strtod(bw, NULL) <= 0) {
        sup_error(sup_noloc(),
                  "offload: the mesh has no host link (config host_bw is %s), so nothing can move to "
                  "host memory; give the mesh one (`link host pcie5`) or set offload none",
                  bw ? bw : "absent");
        return false;
    }
    if (!offload_apply(m, mode, opt)) return false;
    if (ir_mem_planned(m)) { /* the plan of the module as it was no longer holds */
        ir_mem_target t;
        if (ir_mem_target_of(m, &t) && !ir_mem_plan(m, t, NULL)) return false;
    }
    return true;
}
