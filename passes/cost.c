/* cost.c — the analytical cost model: predicted time of every op on the
 * slowest rank, memory per rank (read off the memory plan, memreport.c),
 * and a one-step Chrome trace.
 *
 * Everything is read from the module (mesh links, config device peaks and
 * device_mem, local shapes), so the model works on lowered specs and on
 * hand-written textual IR alike.  passes/README.md ("cost") states the
 * formulas and what is approximate; the comments here say why. */
#include "pass_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static double local_bytes(const ir_module *m, int v) {
    const ir_type *t = &m->values[v].type;
    return (double)ir_type_local_elems(m, t) * ir_dtype_size(t->dtype);
}

static double cfg_double(const ir_module *m, const char *key, double def) {
    const char *s = ir_config_get(m, key);
    if (!s) return def;
    char *end;
    double v = strtod(s, &end);
    return end != s && *end == '\0' ? v : def;
}

static bool cfg_bool(const ir_module *m, const char *key, bool def) {
    const char *s = ir_config_get(m, key);
    if (!s) return def;
    return !strcmp(s, "true") || !strcmp(s, "on") || !strcmp(s, "1");
}

pass_cost_params pass_cost_default_params(const ir_module *m) {
    pass_cost_params p;
    p.compute_fraction = cfg_double(m, "cost.compute_fraction", 0.5);
    /* Attention runs in our own tiled kernel, not the GEMM library, so the
     * fraction of peak it reaches is a parameter of its own. */
    p.attention_fraction = cfg_double(m, "cost.attention_fraction", p.compute_fraction);
    p.attention_rates = ir_config_get(m, "cost.attention_fraction") == NULL;
    p.mem_bw_fraction = cfg_double(m, "cost.mem_bw_fraction", 0.7);
    /* A fixed cost per compute op (a kernel launch, a library call and its
     * bookkeeping): negligible for large ops, most of the time of tiny ones. */
    p.op_overhead = cfg_double(m, "cost.op_overhead", 0.0);
    p.hierarchical_a2a = cfg_bool(m, "cost.hierarchical_a2a", false);
    /* The CUDA backend's host update (optimizer offloaded): the gradient
     * widened, AdamW on the fp32 master and moments, the weight narrowed,
     * on the host's cores.  Measured: Llama-3.2-1B's 1.24 G parameters in
     * 1.68 s a step on one H200 machine's 16 cores (bench/README.md), about
     * the cores a DGX node has per GPU. */
    p.host_update_s = cfg_double(m, "cost.host_update_s", 1.35e-9);
    return p;
}

/* Peak FLOP/s and memory bandwidth: the config keys lower writes, else the
 * preset the config `device` names (hand-written IR), else the cpu preset. */
static void device_peaks(const ir_module *m, double *flops, double *bw, double *exps) {
    const layout_device_preset *d = layout_device_lookup(pu_cfg(m, "device", "cpu"));
    if (!d) d = layout_device_lookup("cpu");
    bool fp32 = !strcmp(pu_cfg(m, "precision", "bf16"), "fp32");
    *flops = cfg_double(m, "device_peak_flops", fp32 ? d->peak_flops_fp32 : d->peak_flops_bf16);
    *bw = cfg_double(m, "device_mem_bw", d->mem_bw);
    *exps = cfg_double(m, "device_exp_rate", d->exp_rate);
}

/* ---- collectives ---------------------------------------------------------- */
/* Shape of a group on the mesh: whether some set crosses nodes, the most
 * nodes one set touches and the most ranks of one set on one node.  And how
 * many transfers leave one node at once when the sets cross: in an
 * all-to-all every rank of a crossing set sends off its node; in a ring
 * (all-gather, reduce-scatter, all-reduce, send/recv) each crossing set has
 * one edge leaving each node it touches.  They share the node's NICs. */
typedef struct span {
    bool crosses;
    int nodes, per_node;
    int a2a_senders, ring_senders; /* most on one node */
} span;

/* The span by comparing every pair of ranks of a set: O(set_size^2) per
 * set.  Kept for ranks outside the mesh's nodes (hand-written IR), where
 * group_span's per-node counters do not reach. */
static span group_span_pairs(const ir_module *m, const ir_group *g) {
    span s = {false, 1, 1, 0, 0};
    int nn = m->mesh.nodes > 0 ? m->mesh.nodes : 1;
    int *ranks_out = calloc((size_t)nn, sizeof(int)), *sets_out = calloc((size_t)nn, sizeof(int));
    for (int k = 0; k < g->nsets; k++) {
        const int *set = &g->ranks[k * g->set_size];
        int nodes = 0;
        for (int a = 0; a < g->set_size; a++) {
            int same = 0, first = 1;
            for (int b = 0; b < g->set_size; b++) {
                same += ir_node_of(m, set[b]) == ir_node_of(m, set[a]);
                first &= !(b < a && ir_node_of(m, set[b]) == ir_node_of(m, set[a]));
            }
            nodes += first;
            s.per_node = same > s.per_node ? same : s.per_node;
        }
        s.nodes = nodes > s.nodes ? nodes : s.nodes;
        for (int a = 0; nodes > 1 && ranks_out && sets_out && a < g->set_size; a++) {
            int nd = ir_node_of(m, set[a]);
            if (nd < 0 || nd >= nn) continue;
            bool first = true;
            for (int b = 0; b < a; b++) first &= ir_node_of(m, set[b]) != nd;
            ranks_out[nd]++;
            sets_out[nd] += first;
        }
    }
    for (int n = 0; ranks_out && sets_out && n < nn; n++) {
        s.a2a_senders = ranks_out[n] > s.a2a_senders ? ranks_out[n] : s.a2a_senders;
        s.ring_senders = sets_out[n] > s.ring_senders ? sets_out[n] : s.ring_senders;
    }
    free(ranks_out);
    free(sets_out);
    s.crosses = s.nodes > 1;
    return s;
}

/* The same numbers with a counter per node: O(ranks) per group.  Every
 * collective op asks, and @world's one set holds every rank, so comparing
 * pairs cost O(N^2) per op: minutes at thousands of ranks. */
static span group_span(const ir_module *m, const ir_group *g) {
    /* BASP_COST_SPAN_PAIRS=1: the pairwise reference, which the test
     * tests/unit/compile_scale.sh compares choices and costs against (read
     * on every call: one short scan of the environment, no state). */
    const char *pairs = getenv("BASP_COST_SPAN_PAIRS");
    int nn = m->mesh.nodes > 0 ? m->mesh.nodes : 1;
    if (pairs && !strcmp(pairs, "1")) return group_span_pairs(m, g);
    for (int i = 0; i < g->nsets * g->set_size; i++)
        if (ir_node_of(m, g->ranks[i]) < 0 || ir_node_of(m, g->ranks[i]) >= nn) return group_span_pairs(m, g);
    span s = {false, 1, 1, 0, 0};
    int *ranks_out = sup_xcalloc((size_t)nn, sizeof(int)), *sets_out = sup_xcalloc((size_t)nn, sizeof(int));
    int *count = sup_xcalloc((size_t)nn, sizeof(int)); /* ranks of the current set per node */
    for (int k = 0; k < g->nsets; k++) {
        const int *set = &g->ranks[k * g->set_size];
        int nodes = 0;
        for (int a = 0; a < g->set_size; a++) {
            int c = ++count[ir_node_of(m, set[a])];
            nodes += c == 1;
            s.per_node = c > s.per_node ? c : s.per_node;
        }
        s.nodes = nodes > s.nodes ? nodes : s.nodes;
        for (int a = 0; a < g->set_size; a++) {
            int nd = ir_node_of(m, set[a]);
            if (nodes > 1) {
                ranks_out[nd]++;
                sets_out[nd] += count[nd] > 0; /* the set's first rank on the node */
            }
            count[nd] = 0;
        }
    }
    for (int n = 0; n < nn; n++) {
        s.a2a_senders = ranks_out[n] > s.a2a_senders ? ranks_out[n] : s.a2a_senders;
        s.ring_senders = sets_out[n] > s.ring_senders ? sets_out[n] : s.ring_senders;
    }
    free(ranks_out);
    free(sets_out);
    free(count);
    s.crosses = s.nodes > 1;
    return s;
}

/* Factor on β of the inter link when `senders` transfers leave a node at
 * once over its nics_per_node NICs (config; default devices_per_node, one
 * NIC per device): 1 while each transfer has a NIC of its own. */
static double nic_share(const ir_module *m, int senders) {
    double nics = cfg_double(m, "nics_per_node", m->mesh.devices_per_node);
    return nics > 0 && senders > nics ? senders / nics : 1;
}

/* α (s) and β (s/byte) of a link; a link with no bandwidth (a one-node mesh
 * names no inter link) falls back to the intra link. */
static void link_ab(const ir_module *m, bool inter, double *alpha, double *beta) {
    const ir_link *l = inter && m->mesh.inter.bandwidth > 0 ? &m->mesh.inter : &m->mesh.intra;
    double eff = l->efficiency > 0 ? l->efficiency : 1;
    *alpha = l->latency;
    *beta = l->bandwidth > 0 ? 1.0 / (l->bandwidth * eff) : 0;
}

/* Two-level all-to-all over a set on n nodes with p ranks per node, c bytes
 * per peer: first inside the node each rank hands each of its p-1 local
 * peers the n chunks bound for that peer's counterparts (one per node),
 * then each rank exchanges with its counterpart on each of the n-1 other
 * nodes the p chunks of its node bound there, one message per node. */
static double hierarchical_a2a(const ir_module *m, span s, double bytes_sent, int P) {
    double ai, bi, ae, be;
    link_ab(m, false, &ai, &bi);
    link_ab(m, true, &ae, &be);
    be *= nic_share(m, s.a2a_senders); /* every rank has a counterpart on each other node */
    double c = bytes_sent / (P - 1), n = s.nodes, p = s.per_node;
    return (p - 1) * (ai + n * c * bi) + (n - 1) * (ae + p * c * be);
}

/* ---- achieved all-to-all bandwidth (docs/link-model.md) ------------------
 * An all-to-all does not reach a link's nominal bandwidth.  Per link kind,
 * from published nccl-tests and NCCL measurements (docs/link-model.md has
 * the table and the sources):
 *   eff     the large-message share of peak an all-to-all reaches: 0.80 on
 *           NVLink (255 GB/s of 300 on 8 A100s, 335 of 450 on H100) and on
 *           IB with one NIC per GPU (HDR 0.53–0.81, NDR up to 0.97 per pair);
 *   m_half  the per-peer message size at which half of that is reached:
 *           NVLink 3 0.3 MiB, NVLink 4 0.5 MiB, IB 128 KiB;
 *   share   when several GPUs send through one NIC, the fraction of a fair
 *           share each achieves: measured 0.33, 0.36 and 0.67; 0.5 used.
 * The spec's own efficiency still applies (the lower of the two).  Links of
 * other kinds (tcp, shm, pcie: the emulated cluster, calibrated by
 * bench/calibrate.py) keep the plain α-β model.  Both backends also pack
 * the send buffer and unpack the receive buffer (rt_comm.c, the CUDA pack
 * kernels): two passes over each side in device memory. */
typedef struct a2a_link {
    double eff, m_half, share;
} a2a_link;

static a2a_link a2a_link_of(const ir_link *l) {
    a2a_link a = {1, 0, 1};
    if (!strcmp(l->kind, "nvlink"))
        a = (a2a_link){0.80, (l->bandwidth > 350e9 ? 0.5 : 0.3) * 1048576.0, 1};
    else if (!strcmp(l->kind, "ib") || !strcmp(l->kind, "roce"))
        a = (a2a_link){0.80, 131072.0, 0.5};
    return a;
}

/* β of an all-to-all over a link for chunks of c bytes per peer, with
 * `share` > 1 transfers per NIC. */
static double a2a_beta(const ir_module *m, bool inter, double c, double nics_share) {
    const ir_link *l = inter && m->mesh.inter.bandwidth > 0 ? &m->mesh.inter : &m->mesh.intra;
    a2a_link a = a2a_link_of(l);
    double eff = l->efficiency > 0 && l->efficiency < a.eff ? l->efficiency : a.eff;
    double size = a.m_half > 0 && c > 0 ? c / (c + a.m_half) : 1;
    double share = nics_share > 1 ? nics_share / a.share : 1;
    return l->bandwidth > 0 ? share / (l->bandwidth * eff * size) : 0;
}

/* The pack and unpack copies of an all-to-all: the local send and receive
 * buffers each read and written once more in device memory. */
static double a2a_copies(const ir_module *m, const ir_op *op, const pass_cost_params *prm) {
    double peak, bw, exps, bytes = 0;
    device_peaks(m, &peak, &bw, &exps);
    for (int k = 0; k < op->nin && k < op->nout; k++)
        bytes += 2 * (local_bytes(m, op->in[k]) + local_bytes(m, op->out[k]));
    return bw > 0 ? bytes / (bw * prm->mem_bw_fraction) : 0;
}

static double all_to_all_seconds(const ir_module *m, const ir_op *op, const pass_cost_params *prm, span s, double sent,
                                 int P) {
    if (prm->hierarchical_a2a && s.crosses && s.nodes < P)
        return hierarchical_a2a(m, s, sent, P) + a2a_copies(m, op, prm);
    double a, b;
    link_ab(m, s.crosses, &a, &b);
    b = a2a_beta(m, s.crosses, sent / (P - 1), s.crosses ? nic_share(m, s.a2a_senders) : 1);
    return (P - 1) * a + sent * b + a2a_copies(m, op, prm);
}

static double collective_seconds(const ir_module *m, const ir_op *op, const pass_cost_params *prm, double *bytes) {
    int gi = ir_op_group(op);
    if (gi < 0 || gi >= m->ngroups || m->groups[gi].set_size <= 1) return 0;
    const ir_group *g = &m->groups[gi];
    int P = g->set_size;
    span s = group_span(m, g);
    double a, b;
    link_ab(m, s.crosses, &a, &b);
    if (s.crosses) b *= nic_share(m, s.ring_senders);
    const ir_op_desc *d = ir_op_desc_of(op->code);
    if (d->comm == IR_COMM_SEND || d->comm == IR_COMM_RECV) {
        /* Counted once, on the send; the receive waits for it. */
        *bytes = d->comm == IR_COMM_SEND ? local_bytes(m, op->in[0]) : 0;
        return d->comm == IR_COMM_SEND ? a + *bytes * b : 0;
    }
    pass_traffic t = pass_op_traffic(m, op);
    *bytes = t.bytes_sent;
    if (d->comm == IR_COMM_ALL_TO_ALL) return all_to_all_seconds(m, op, prm, s, t.bytes_sent, P);
    /* A ring collective: ring_latencies latencies per step of P - 1 steps. */
    return d->comm == IR_COMM_RING ? d->ring_latencies * (P - 1) * a + t.bytes_sent * b : 0;
}

/* ---- attention: the kernel that runs it ------------------------------------ */
cm_attn_impl pass_attention_impl(const ir_module *m, const ir_op *op) {
    ir_mem_target t;
    bool cuda = ir_mem_target_of(m, &t) && t.cuda;
    bool ring = op->code == IR_RING_ATTENTION || op->code == IR_RING_ATTENTION_BWD;
    bool docs = ir_config_int(m, "documents", 0) != 0;
    return cm_attention_impl(cuda, ring, docs, strcmp(pu_cfg(m, "cost.attention_impl", "auto"), "own") != 0);
}

/* The measured rate of that kernel at the op's head dim and the sequence
 * one of its blocks covers (the whole sequence for attention, a rank's
 * slice for a ring block), else cost.attention_fraction. */
double pass_attention_fraction(const ir_module *m, const ir_op *op, const pass_cost_params *p) {
    if (!p->attention_rates) return p->attention_fraction;
    bool bwd = op->code == IR_ATTENTION_BWD || op->code == IR_RING_ATTENTION_BWD;
    int q = op->nin > (bwd ? 1 : 0) ? op->in[bwd ? 1 : 0] : -1;
    if (q < 0 || m->values[q].type.rank < 4) return p->attention_fraction;
    const ir_type *t = &m->values[q].type;
    double f = layout_attention_fraction(pu_cfg(m, "device", "cpu"), pass_attention_impl(m, op), bwd,
                                         ir_type_max_local_dim(m, t, 3), ir_type_max_local_dim(m, t, 1));
    return f > 0 ? f : p->attention_fraction;
}

/* ---- compute overlapped with a ring (IR_COMM_RING_OVERLAP) ----------------
 * ring_attention q, k, v {group = @ring} on R ranks: each rank's q block
 * meets all R kv blocks, one per step, while the next block travels one hop
 * around the ring, so a step costs the slower of its block's compute and
 * one transfer (ir_op_work.hop_bytes); what the next block must wait for
 * (tail_bytes) adds R hops that do not overlap. */
/* Seconds to send `bytes` one hop around the ring group of op. */
static double ring_hop(const ir_module *m, const ir_op *op, double bytes) {
    int gi = ir_op_group(op);
    if (gi < 0 || gi >= m->ngroups || m->groups[gi].set_size <= 1) return 0;
    span s = group_span(m, &m->groups[gi]);
    double a, b;
    link_ab(m, s.crosses, &a, &b);
    if (s.crosses) b *= nic_share(m, s.ring_senders);
    return a + bytes * b;
}

static pass_op_cost ring_cost(const ir_module *m, const ir_op *op, const pass_cost_params *p) {
    pass_op_cost c = {0};
    int gi = ir_op_group(op);
    int R = gi >= 0 && gi < m->ngroups && m->groups[gi].set_size > 0 ? m->groups[gi].set_size : 1;
    double peak, bw, exp_rate;
    device_peaks(m, &peak, &bw, &exp_rate);
    ir_op_work w = ir_op_work_of(m, op);
    c.flops = w.flops;
    c.exps = w.exps;
    c.bytes = w.bytes;
    double tf = peak > 0 ? c.flops / (peak * pass_attention_fraction(m, op, p)) : 0;
    if (exp_rate > 0) tf += c.exps / exp_rate;
    double block = tf / R, t = block + (R - 1) * fmax(block, ring_hop(m, op, w.hop_bytes));
    if (w.tail_hops) t += R * ring_hop(m, op, w.tail_bytes);
    double tm = bw > 0 ? c.bytes / (bw * p->mem_bw_fraction) : 0;
    c.seconds = (t > tm ? t : tm) + p->op_overhead;
    return c;
}

/* ---- copies over the host link (IR_COMM_HOST: offload, fetch) -------------
 * One copy of the operand between device and host memory: a latency plus
 * the bytes at the host link's bandwidth times its efficiency (config
 * host_bw, host_latency, host_efficiency, from the mesh's `link host`).
 * Every device of a node has its own link (one PCIe x16 per GPU on DGX
 * H100/H200 boards), so ranks do not share it.  No host link: the copy
 * cannot run; the offload pass refuses such a mesh, and a hand-written
 * module costs it nothing. */
static double host_copy_seconds(const ir_module *m, double bytes) {
    double bw = cfg_double(m, "host_bw", 0), eff = cfg_double(m, "host_efficiency", 1);
    if (bw <= 0) return 0;
    return cfg_double(m, "host_latency", 0) + bytes / (bw * (eff > 0 ? eff : 1));
}

pass_op_cost pass_op_cost_of(const ir_module *m, const ir_op *op, const pass_cost_params *p) {
    pass_op_cost c = {0};
    const ir_op_desc *d = ir_op_desc_of(op->code);
    if (d->comm == IR_COMM_RING_OVERLAP) return ring_cost(m, op, p);
    if (d->comm == IR_COMM_HOST) {
        c.comm = true;
        c.bytes = ir_op_work_of(m, op).bytes;
        c.seconds = host_copy_seconds(m, c.bytes);
        return c;
    }
    if (d->comm != IR_COMM_NONE) {
        c.comm = true;
        c.seconds = collective_seconds(m, op, p, &c.bytes);
        return c;
    }
    if (d->kind == IR_K_MEM) return c; /* free: bookkeeping only */
    ir_mem_target t;
    if (op->code == IR_ADAMW && ir_mem_opt_on_host(m) && ir_mem_target_of(m, &t) && t.cuda) {
        /* On the host, per element, plus the bf16 weight up the host link
         * (and the gradient down, when it is still on the device). */
        double n = (double)ir_type_local_elems(m, &m->values[op->in[0]].type);
        c.bytes = ir_op_work_of(m, op).bytes;
        c.seconds = n * p->host_update_s + host_copy_seconds(m, 2 * n) +
                    (ir_mem_on_host(m, op->in[1]) ? 0 : host_copy_seconds(m, 2 * n));
        return c;
    }
    double peak, bw, exp_rate;
    device_peaks(m, &peak, &bw, &exp_rate);
    ir_op_work w = ir_op_work_of(m, op);
    c.flops = w.flops;
    c.bytes = w.bytes;
    c.exps = w.exps;
    double frac = d->attention ? pass_attention_fraction(m, op, p) : p->compute_fraction;
    double tf = peak > 0 ? c.flops / (peak * frac) : 0;
    if (exp_rate > 0) tf += c.exps / exp_rate;
    double tm = bw > 0 ? c.bytes / (bw * p->mem_bw_fraction) : 0;
    c.seconds = (tf > tm ? tf : tm) + p->op_overhead; /* roofline: the slower of the two */
    return c;
}

/* ---- memory per rank ------------------------------------------------------
 * Memory comes from the memory plan (pass_memory_report: the module's own
 * plan, or a plan of a clone when the module has none), so that the cost
 * pass, the planner's mem column and `baspc --memory` give one number.
 *
 * Activation recomputation is a pass of its own (train.recompute,
 * passes/pass_recompute.c): the plan of a recomputing step already has
 * fewer bytes live. */

/* ---- two streams (passes.h) ------------------------------------------------ */
void pass_streams_init(pass_streams *s, const ir_module *m) {
    s->compute = s->comm = 0;
    s->ready = sup_xcalloc((size_t)m->nvalues + 1, sizeof(double));
    ir_mem_target t;
    s->host_started = ir_mem_target_of(m, &t) && t.cuda;
}

void pass_streams_free(pass_streams *s) {
    free(s->ready);
    s->ready = NULL;
}

double pass_streams_place(pass_streams *s, const ir_op *op, double sec, bool comm) {
    /* An op reading a started op's result starts after it: a wait for a
     * collective's (before any reader, the verifier's rule), the first
     * reader for a host copy's. */
    double in_ready = 0;
    for (int k = 0; k < op->nin; k++)
        if (s->ready[op->in[k]] > in_ready) in_ready = s->ready[op->in[k]];
    if (op->code == IR_WAIT) {
        if (in_ready > s->compute) s->compute = in_ready;
        return s->compute;
    }
    if (!comm) {
        double t0 = s->compute > in_ready ? s->compute : in_ready;
        s->compute = t0 + sec;
        return t0;
    }
    double t0 = s->compute > s->comm ? s->compute : s->comm;
    if (in_ready > t0) t0 = in_ready;
    s->comm = t0 + sec;
    if (ir_op_async(op) || (s->host_started && ir_op_desc_of(op->code)->comm == IR_COMM_HOST)) {
        for (int k = 0; k < op->nout; k++) s->ready[op->out[k]] = s->comm;
    } else {
        s->compute = s->comm;
    }
    return t0;
}

pass_cost_report pass_cost_estimate_time(const ir_module *m, const pass_cost_params *p) {
    pass_cost_report r;
    memset(&r, 0, sizeof r);
    int accum = (int)ir_config_int(m, "accum", 1);
    pass_streams st;
    pass_streams_init(&st, m);
    for (int i = 0; i < m->nops; i++) {
        pass_op_cost c = pass_op_cost_of(m, &m->ops[i], p);
        /* Gradient accumulation: the micro-step's ops run accum times a step,
         * the apply phase's (phase = opt) once.  Started collectives are
         * waited in the micro-step that starts them (the verifier's rule),
         * so accum identical micro-steps take accum times one. */
        if (accum > 1 && strcmp(ir_op_phase(&m->ops[i]), "opt") != 0) c.seconds *= accum;
        pass_streams_place(&st, &m->ops[i], c.seconds, c.comm);
        if (c.comm)
            r.comm_s += c.seconds;
        else
            r.compute_s += c.seconds;
        const ir_op_desc *d = ir_op_desc_of(m->ops[i].code);
        if (d->comm == IR_COMM_ALL_TO_ALL) r.a2a_s += c.seconds;
        if (d->comm == IR_COMM_HOST) r.host_s += c.seconds;
        if (d->attention) r.attn_s += c.seconds;
    }
    r.step_s = pass_streams_end(&st);
    pass_streams_free(&st);
    r.hidden_s = r.compute_s + r.comm_s - r.step_s;
    if (r.hidden_s < 0) r.hidden_s = 0;
    r.a2a_fraction = r.step_s > 0 ? r.a2a_s / r.step_s : 0;
    r.device_mem = cfg_double(m, "device_mem", 0);
    r.fits = true;
    return r;
}

pass_cost_report pass_cost_estimate(const ir_module *m, const pass_cost_params *p) {
    pass_cost_report r = pass_cost_estimate_time(m, p);
    pass_mem_report mr;
    if (pass_memory_report(m, &mr)) {
        r.mem_params = (double)mr.live[IR_MEM_PARAMS];
        r.mem_grads = (double)mr.live[IR_MEM_GRADS];
        r.mem_optim = (double)mr.live[IR_MEM_OPTIM];
        r.mem_acts = (double)mr.live[IR_MEM_ACTS];
        r.mem_comm = (double)mr.live[IR_MEM_COMM];
        r.mem_work = (double)mr.live[IR_MEM_WORK];
        r.mem_unused = (double)mr.unused_bytes;
        r.mem_peak = (double)mr.peak_bytes;
    } else {
        /* A size overflows 64 bits (the plan said which): it fits nowhere. */
        r.mem_peak = INFINITY;
    }
    r.fits = r.device_mem <= 0 || r.mem_peak <= r.device_mem;
    return r;
}
