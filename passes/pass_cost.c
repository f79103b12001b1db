/* pass_cost.c — the `cost` pass (per-op annotations, config summary, one
 * remark) and the predicted one-step timeline as a Chrome trace.
 *
 * The pass changes no op and no value: it only adds the float attr
 * `cost_us` to every op and the config keys cost.step_ms, cost.a2a_ms,
 * cost.mem_peak_bytes and cost.fits, so running it twice gives the same
 * module and the annotated module round-trips through the printer. */
#include "pass_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Rounded so the annotations stay readable; sums use unrounded times. */
static double round_to(double v, double unit) { return round(v / unit) * unit; }

static void set_cfg_double(ir_module *m, const char *key, double v) {
    char buf[40];
    ir_config_set(m, key, sup_fmt_double(v, buf, sizeof buf));
}

/* "17.80 GiB", "22.0 KiB": the largest binary unit that keeps a digit. */
static const char *fmt_bytes(double b, char *buf, size_t n) {
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (b >= 1024 && u < 4) {
        b /= 1024;
        u++;
    }
    snprintf(buf, n, u ? "%.2f %s" : "%.0f %s", b, units[u]);
    return buf;
}

bool pass_cost(ir_module *m, const pass_options *opt) {
    pass_cost_params p = pass_cost_default_params(m);
    for (int i = 0; i < m->nops; i++) {
        pass_op_cost c = pass_op_cost_of(m, &m->ops[i], &p);
        ir_attr_set_float(&m->ops[i], "cost_us", round_to(c.seconds * 1e6, 1e-3));
    }
    pass_cost_report r = pass_cost_estimate(m, &p);
    set_cfg_double(m, "cost.step_ms", round_to(r.step_s * 1e3, 1e-3));
    set_cfg_double(m, "cost.a2a_ms", round_to(r.a2a_s * 1e3, 1e-3));
    if (r.host_s > 0) set_cfg_double(m, "cost.host_ms", round_to(r.host_s * 1e3, 1e-3));
    ir_config_set_int(m, "cost.mem_peak_bytes", (int64_t)llround(r.mem_peak));
    ir_config_set(m, "cost.fits", r.fits ? "true" : "false");
    char peak[32], dev[32], cap[80] = "", host[96] = "";
    if (r.host_s > 0) snprintf(host, sizeof host, ", host copies %.3f ms", r.host_s * 1e3);
    if (r.device_mem > 0)
        snprintf(cap, sizeof cap, " of %s: %s", fmt_bytes(r.device_mem, dev, sizeof dev),
                 r.fits ? "fits" : "does not fit");
    pu_remark(opt,
              "cost: step %.3f ms (compute %.3f ms, communication %.3f ms%s), all-to-all %.3f ms "
              "(%.1f%% of step); peak memory %s per rank%s",
              r.step_s * 1e3, r.compute_s * 1e3, r.comm_s * 1e3, host, r.a2a_s * 1e3, 100 * r.a2a_fraction,
              fmt_bytes(r.mem_peak, peak, sizeof peak), cap);
    return true;
}

/* ---- Chrome trace ---------------------------------------------------------
 * Every rank runs the same op sequence in this model (SPMD, times of the
 * slowest rank), so each rank's track is the schedule placed on two streams
 * by the cost model (pass_streams_place): collectives and host copies on
 * tid 1, compute on tid 0; a started collective (async = 1) overlaps the
 * compute until its wait, a host copy (cuda target) until its first
 * reader, a blocking collective holds both.  With gradient accumulation the micro-step repeats
 * accum times before the apply phase.  Ranks past TRACE_MAX_RANKS are left out (otherData
 * says so) to keep the file loadable. */
enum { TRACE_MAX_RANKS = 64 };

static void trace_meta(cJSON *ev, int rank) {
    static const char *const threads[2] = {"compute", "communication"};
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "name", "process_name");
    cJSON_AddStringToObject(p, "ph", "M");
    cJSON_AddNumberToObject(p, "pid", rank);
    cJSON_AddItemToObject(p, "args", cJSON_CreateObject());
    char name[32];
    snprintf(name, sizeof name, "rank %d", rank);
    cJSON_AddStringToObject(cJSON_GetObjectItem(p, "args"), "name", name);
    cJSON_AddItemToArray(ev, p);
    for (int t = 0; t < 2; t++) {
        cJSON *e = cJSON_CreateObject();
        cJSON_AddStringToObject(e, "name", "thread_name");
        cJSON_AddStringToObject(e, "ph", "M");
        cJSON_AddNumberToObject(e, "pid", rank);
        cJSON_AddNumberToObject(e, "tid", t);
        cJSON *a = cJSON_AddObjectToObject(e, "args");
        cJSON_AddStringToObject(a, "name", threads[t]);
        cJSON_AddItemToArray(ev, e);
    }
}

static cJSON *trace_event(const ir_module *m, const ir_op *op, const pass_op_cost *c, int rank, double ts) {
    cJSON *e = cJSON_CreateObject();
    cJSON_AddStringToObject(e, "name", ir_op_desc_of(op->code)->name);
    cJSON_AddStringToObject(e, "ph", "X");
    cJSON_AddNumberToObject(e, "ts", ts);
    cJSON_AddNumberToObject(e, "dur", c->seconds * 1e6);
    cJSON_AddNumberToObject(e, "pid", rank);
    cJSON_AddNumberToObject(e, "tid", c->comm ? 1 : 0);
    cJSON *a = cJSON_AddObjectToObject(e, "args");
    int v = op->nout > 0 ? op->out[0] : op->nin > 0 ? op->in[0] : -1;
    if (v >= 0) cJSON_AddStringToObject(a, "value", m->values[v].name);
    cJSON_AddNumberToObject(a, "layer", ir_op_layer(op));
    cJSON_AddStringToObject(a, "phase", ir_op_phase(op));
    if (c->comm) {
        int g = ir_op_group(op);
        if (ir_op_async(op)) /* started: runs on while the compute track goes on, until its wait */
            cJSON_AddBoolToObject(a, "started", true);
        cJSON_AddStringToObject(a, "group", g >= 0 && g < m->ngroups ? m->groups[g].name : "");
        cJSON_AddNumberToObject(a, "bytes_sent", c->bytes);
    } else {
        cJSON_AddNumberToObject(a, "flops", c->flops);
        cJSON_AddNumberToObject(a, "bytes", c->bytes);
    }
    if (ir_op_desc_of(op->code)->attention)
        cJSON_AddStringToObject(a, "impl", cm_attn_impl_names[pass_attention_impl(m, op)]);
    return e;
}

void pass_trace_json(const ir_module *m, const pass_cost_params *p, FILE *out) {
    int world = ir_world(m), shown = world < TRACE_MAX_RANKS ? world : TRACE_MAX_RANKS;
    pass_op_cost *cost = malloc(((size_t)m->nops + 1) * sizeof *cost);
    cJSON *root = cJSON_CreateObject(), *ev = cJSON_AddArrayToObject(root, "traceEvents");
    if (!cost || !root || !ev) goto out;
    for (int i = 0; i < m->nops; i++) cost[i] = pass_op_cost_of(m, &m->ops[i], p);
    /* Gradient accumulation: the micro-step's ops laid out accum times (args
     * micro_step = 0 ..), then the apply phase (phase = opt) once. */
    int accum = (int)ir_config_int(m, "accum", 1);
    for (int r = 0; r < shown; r++) {
        trace_meta(ev, r);
        pass_streams st;
        pass_streams_init(&st, m);
        for (int pass = 0; pass <= (accum > 1 ? accum : 0); pass++)
            for (int i = 0; i < m->nops; i++) {
                bool opt = strcmp(ir_op_phase(&m->ops[i]), "opt") == 0;
                if (accum > 1 && opt != (pass == accum)) continue;
                pass_op_cost c = cost[i];
                double t0 = pass_streams_place(&st, &m->ops[i], &c);
                if (m->ops[i].code == IR_FREE || m->ops[i].code == IR_WAIT) continue;
                cJSON *e = trace_event(m, &m->ops[i], &c, r, t0 * 1e6);
                if (accum > 1 && !opt) cJSON_AddNumberToObject(cJSON_GetObjectItem(e, "args"), "micro_step", pass);
                cJSON_AddItemToArray(ev, e);
            }
        pass_streams_free(&st);
    }
    cJSON_AddStringToObject(root, "displayTimeUnit", "ms");
    cJSON *meta = cJSON_AddObjectToObject(root, "otherData");
    cJSON_AddStringToObject(meta, "module", m->name);
    cJSON_AddNumberToObject(meta, "world", world);
    cJSON_AddNumberToObject(meta, "ranks_shown", shown);
    cJSON_AddBoolToObject(meta, "ranks_capped", world > shown);
    cJSON_AddStringToObject(meta, "model",
                            "two streams per rank (compute, communication), ops in schedule "
                            "order on each; a started collective overlaps the compute until its "
                            "wait; times of the slowest rank");
    char *text = cJSON_PrintUnformatted(root);
    if (text) {
        fputs(text, out);
        fputc('\n', out);
        free(text);
    }
out:
    cJSON_Delete(root);
    free(cost);
}
