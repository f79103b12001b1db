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
    p.shared_core_overlap = cfg_double(m, "cost.shared_core_overlap", -1);
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

/* Whether the module runs on the CUDA backend (NCCL, streams) rather than
 * the CPU one (MPI). */
static bool on_cuda(const ir_module *m) {
    ir_mem_target t;
    return ir_mem_target_of(m, &t) && t.cuda;
}

/* Ranks of a node per core (CPU target, mesh cores_per_node > 0 and fewer
 * than the node's ranks); 1 on GPUs and when every rank has a core. */
static double core_ranks(const ir_module *m) {
    if (on_cuda(m)) return 1;
    double cores = cfg_double(m, "cores_per_node", 0), ranks = m->mesh.devices_per_node;
    return cores > 0 && ranks > cores ? ranks / cores : 1;
}

/* The factor by which the work of ranks sharing a core, and the copies
 * that run on those cores, stretch: r ranks take turns, and each keeps only
 * cost.shared_core_efficiency of its 1/r share (a rank finds the cache
 * refilled by the others after each switch; the device's figure, measured
 * by bench/calibrate.py: 0.90 for 4 copies of the emulated cluster's model
 * on one core of the development machine). */
static double core_share(const ir_module *m) {
    double r = core_ranks(m);
    if (r <= 1) return 1;
    double eff = cfg_double(m, "cost.shared_core_efficiency", 1);
    return r / (eff > 0 && eff <= 1 ? eff : 1);
}

/* Of `wire` seconds a rank waits on the inter-node network, those the
 * other ranks sharing its core (core_share r > 1) fill with their own
 * compute.  The r ranks of a core reach a collective one after another, the
 * core taking them in turn; while the first ones' transfers are on the
 * wire, the later ones still compute.  With arrivals spread evenly, a rank
 * finds on average (r - 1) / 2 of the r ranks' turns still to come: the
 * share (r - 1) / (2r), 0.375 for 4 ranks per core.  That work no longer
 * contends for the core afterwards, so pass_streams_place takes it off the
 * compute after the collective, as far as it reaches before the next one
 * (a collective alone hides nothing); the collective keeps its own time.
 * Not fitted; checked on the emulated cluster's steps and the choice
 * study's 71 runs (docs/link-model.md, "Ranks sharing cores").  Config
 * cost.shared_core_overlap overrides it. */
static double shared_core_hidden(const ir_module *m, const pass_cost_params *p, double wire) {
    double r = core_ranks(m);
    if (r <= 1) return 0;
    double phi = p->shared_core_overlap >= 0 ? p->shared_core_overlap : (r - 1) / (2 * r);
    return phi * wire;
}

/* ---- what collectives achieve, per link kind (docs/link-model.md) --------
 * An all-to-all does not reach a link's nominal bandwidth, and its latency
 * is not P-1 link latencies.  Per link kind, from published nccl-tests and
 * NCCL measurements and from our own (docs/link-model.md has the tables,
 * the sources and the validation, bench/results/validation/):
 *   eff     the large-message share of peak an all-to-all reaches: 0.80 on
 *           NVLink (255 GB/s of 300 on 8 A100s, 335 of 450 on 4 H100s) and
 *           on IB with one NIC per GPU (37.8 GB/s busbw on 2 x 8 A100s with
 *           8 HDR NICs: 20.2 GB/s per GPU, 0.81); 0.86 on the emulated
 *           cluster's shaped TCP links (bench_a2a, 8 ranks on 2 nodes, 4-16
 *           MiB per rank: 0.83-0.86);
 *   share   when several GPUs send through one NIC, the fraction of a fair
 *           share each achieves: measured 0.33, 0.36 and 0.67; the median
 *           0.36 used;
 *   call, peer  latency: a fixed cost per call and one per peer, the peers
 *           on the network and those inside the node served at once (the
 *           slower side counts).  1 KiB took 9.34 us on 8 A100s in a node,
 *           29.84 us on 2 nodes x 1 and 49.75 us on 2 x 8 (Azure NDmv4):
 *           NVLink 1.33 us per peer; IB 27.0 us per call + 2.84 us per
 *           off-node peer.  Other kinds (MPI over shared memory or TCP) take
 *           the link's latency per peer.
 *   ring_eff  the same for a ring collective, which streams large chunks
 *           per channel: all-gather at 1 GiB on 8 A100s, 254 GB/s busbw of
 *           300 (0.845), and on 2 x 8 over 8 HDR NICs, 22.1 of 25 GB/s
 *           each (0.885); elsewhere eff;
 *   ring_step NCCL's per-step latency of a ring (nccl_ring_latency);
 *   alone   the share of eff a node's only sender reaches through its NIC:
 *           15.5 GB/s per GPU on 2 x 1 A100s against 20.2 on 2 x 8 (0.77).
 * eff also applies to point-to-point transfers (link_ab): the
 * large-message share of a link the library reaches.
 * The per-peer latency is what makes mid-size messages slow (the
 * message-size curve of nccl-tests): at 128 KiB per peer on 8 x 8 H800s
 * (NDR) it predicts 369 us against 338 measured.  The spec's own
 * efficiency still applies (the lower of the two).  Both backends also
 * pack the send buffer and unpack the receive buffer (rt_comm.c, the CUDA
 * pack kernels): two passes over each side in device memory (config
 * cost.a2a_copies = off leaves them out, to compare with benchmarks of the
 * exchange alone). */
typedef struct link_kind {
    double eff, share;
    double call, peer; /* peer < 0: the link's latency */
    double ring_eff;   /* the large-message share a ring collective reaches */
    double ring_step;  /* NCCL's latency per ring step on this link (< 0: the link's latency) */
    double alone;      /* of eff, what a node's only rank reaches through its NIC */
} link_kind;

/* A link kind or a link preset named after it (nvlink3, ib_ndr, ...). */
static bool kind_is(const char *kind, const char *family) {
    size_t n = strlen(family);
    return !strncmp(kind, family, n) && (kind[n] == '\0' || kind[n] == '_' || (kind[n] >= '0' && kind[n] <= '9'));
}

static link_kind link_kind_of(const ir_link *l) {
    if (kind_is(l->kind, "nvlink")) return (link_kind){0.80, 1, 0, 1.33e-6, 0.845, 0.6e-6, 1};
    if (kind_is(l->kind, "ib") || kind_is(l->kind, "roce") || kind_is(l->kind, "ethernet"))
        return (link_kind){0.80, 0.36, 27.0e-6, 2.84e-6, 0.885, 2.7e-6, 0.77};
    if (kind_is(l->kind, "pcie")) return (link_kind){1, 1, 0, -1, 1, 1.0e-6, 1};
    if (!strcmp(l->kind, "tcp")) return (link_kind){0.86, 1, 0, -1, 0.86, -1, 1};
    return (link_kind){1, 1, 0, -1, 1, -1, 1};
}

/* The inter link when asked for and the mesh has one, else the intra link. */
static const ir_link *link_of(const ir_module *m, bool inter) {
    return inter && m->mesh.inter.bandwidth > 0 ? &m->mesh.inter : &m->mesh.intra;
}

/* α (s) and β (s/byte) of a link; a link with no bandwidth (a one-node mesh
 * names no inter link) falls back to the intra link. */
static void link_ab_of(const ir_module *m, bool inter, bool ring, double *alpha, double *beta) {
    const ir_link *l = link_of(m, inter);
    link_kind k = link_kind_of(l);
    double eff = l->efficiency > 0 ? l->efficiency : 1, kind = ring ? k.ring_eff : k.eff;
    eff = kind < eff ? kind : eff; /* what the collective library reaches on this kind of link */
    *alpha = l->latency;
    *beta = l->bandwidth > 0 ? 1.0 / (l->bandwidth * eff) : 0;
    if (!strcmp(l->kind, "shm")) *beta *= core_share(m); /* copied by the ranks' cores */
}

static void link_ab(const ir_module *m, bool inter, double *alpha, double *beta) {
    link_ab_of(m, inter, false, alpha, beta);
}

/* Factor on the network's β when a node's one rank is the only one
 * sending across (GPU target: one rank per node in its sets, and one set
 * per node crossing): that GPU both sends and receives through the NIC
 * alone (link_kind.alone, measured on 2 x 1 A100s; NCCL's own tuning
 * discounts the same case, ppn < 2). */
static double node_alone(const ir_module *m, span s) {
    if (!s.crosses || s.per_node != 1 || s.a2a_senders > 1 || !on_cuda(m)) return 1;
    double a = link_kind_of(link_of(m, true)).alone;
    return a > 0 ? 1 / a : 1;
}

/* Two-level all-to-all over a set on n nodes with p ranks per node, c bytes
 * per peer: first inside the node each rank hands each of its p-1 local
 * peers the n chunks bound for that peer's counterparts (one per node),
 * then each rank exchanges with its counterpart on each of the n-1 other
 * nodes the p chunks of its node bound there, one message per node. */
static double hierarchical_a2a(const ir_module *m, span s, double bytes_sent, int P, double *net) {
    double ai, bi, ae, be;
    link_ab(m, false, &ai, &bi);
    link_ab(m, true, &ae, &be);
    be *= nic_share(m, s.a2a_senders); /* every rank has a counterpart on each other node */
    double c = bytes_sent / (P - 1), n = s.nodes, p = s.per_node;
    *net = (n - 1) * (ae + p * c * be);
    return (p - 1) * (ai + n * c * bi) + *net;
}

/* Seconds for `peers` messages of c bytes each over a link, with
 * `nics_share` > 1 transfers per NIC.  Shared memory is copied by the
 * ranks' cores, so it stretches with them. */
static double a2a_part(const ir_module *m, bool inter, int peers, double c, double nics_share) {
    const ir_link *l = link_of(m, inter);
    link_kind a = link_kind_of(l);
    if (peers <= 0 || l->bandwidth <= 0) return 0;
    double alpha, beta; /* the link's latency; β at the kind's efficiency, shared memory stretched */
    link_ab(m, inter, &alpha, &beta);
    double share = nics_share > 1 ? nics_share / a.share : 1;
    return peers * ((a.peer < 0 ? alpha : a.peer) + c * share * beta);
}

/* The pack and unpack copies of an all-to-all: the local send and receive
 * buffers each read and written once more in device memory. */
static double a2a_copies(const ir_module *m, const ir_op *op, const pass_cost_params *prm) {
    double peak, bw, exps, bytes = 0;
    if (!cfg_bool(m, "cost.a2a_copies", true)) return 0;
    device_peaks(m, &peak, &bw, &exps);
    for (int k = 0; k < op->nin && k < op->nout; k++)
        bytes += 2 * (local_bytes(m, op->in[k]) + local_bytes(m, op->out[k]));
    return bw > 0 ? bytes * core_share(m) / (bw * prm->mem_bw_fraction) : 0;
}

/* A flat all-to-all: the messages bound for other nodes cross the network
 * while the rest move inside the node, both at once, so the slower side
 * sets the time (nccl-tests' reading of busbw, docs/link-model.md); plus
 * the call's fixed latency and the pack/unpack copies. */
static double all_to_all_seconds(const ir_module *m, const ir_op *op, const pass_cost_params *prm, span s, double sent,
                                 int P, double *wire) {
    if (prm->hierarchical_a2a && s.crosses && s.nodes < P)
        return hierarchical_a2a(m, s, sent, P, wire) + a2a_copies(m, op, prm);
    double c = sent / (P - 1);
    int off = s.crosses ? P - s.per_node : 0; /* peers of the most crowded node's ranks elsewhere */
    double t_net = a2a_part(m, true, off, c, nic_share(m, s.a2a_senders)) * node_alone(m, s);
    double t_local = a2a_part(m, false, P - 1 - off, c, 1);
    double call = link_kind_of(link_of(m, s.crosses)).call;
    /* the node-local part and the copies keep the core busy; beyond them
     * the rank waits on the network */
    *wire = s.crosses ? call + fmax(0, t_net - t_local) : 0;
    return call + fmax(t_net, t_local) + a2a_copies(m, op, prm);
}

/* β of a ring collective whose sets cross nodes.  NCCL runs a ring as
 * several channels and puts them on different NICs, so one set's ring uses
 * up to as many of a node's NICs as it has ranks there (all-gather on 2 x 8
 * A100s with 8 HDR NICs per node: busbw 186 GB/s, [ndmv4]); the rings of
 * `senders` crossing sets share them.  The edges inside a node run at the
 * intra link's rate, so the slower of the two sets the pace. */
static double ring_beta(const ir_module *m, span s, double inter_beta) {
    double nics = cfg_double(m, "nics_per_node", m->mesh.devices_per_node);
    double lanes = fmin(nics, s.per_node);
    return inter_beta * (lanes > 0 ? s.ring_senders / lanes : 1);
}

/* A ring collective of `sent` bytes per rank over P ranks whose sets cross
 * nodes: the crossing edges at ring_beta and the node-local edges at the
 * intra link's rate, both at once.  NCCL (cuda target) runs rings, whose
 * crossing edge carries all `sent` bytes.  Open MPI (cpu target) reduces
 * by recursive halving and doubling, whose steps between nodes come last
 * and first, so a node boundary carries (n-1)/n of the data per pass where
 * a ring's edge carries (P-1)/P: MPI_Allreduce of 1 and 3.1 MiB on the 2 x 4
 * emulated cluster took 4.5 and 17.5 ms, about the data once through the
 * shaped link, against 1.75 times it for a ring (bench_allreduce,
 * bench/results/validation/emulated_a2a.md). */
static double ring_crossing(const ir_module *m, span s, double sent, int P, double inter_beta, double *wire) {
    double ai, bi, cross = sent;
    link_ab_of(m, false, true, &ai, &bi);
    if (!on_cuda(m) && s.nodes > 1 && P > 1) cross = sent * ((s.nodes - 1.0) / s.nodes) / ((P - 1.0) / P);
    double t_net = cross * ring_beta(m, s, inter_beta) * node_alone(m, s);
    *wire = fmax(0, t_net - sent * bi);
    return fmax(sent * bi, t_net);
}

/* The latency of a ring collective under NCCL (cuda target), as NCCL's own
 * tuning model has it (src/graph/tuning.cc, ring with the LL protocol that
 * it picks for small messages): 6.6 us per call, then per step the intra
 * link's latency (NVLink 0.6 us, PCIe 1.0), the steps that cross a node
 * boundary the network's 2.7 us, and once the ring crosses nodes no step
 * faster than the network proxy's 2 us overhead (NCCL's figure for AMD EPYC
 * hosts, as on NDmv4; 1 us on Intel ones).  A pass has P - 1 steps, n - 1
 * of them crossing; an all-reduce (two passes) crosses 2n times. */
static double nccl_ring_latency(const ir_module *m, span s, int P, int passes) {
    const double base = 6.6e-6, net_step = 2.7e-6, proxy = 2.0e-6;
    const ir_link *l = link_of(m, false);
    double intra = link_kind_of(l).ring_step;
    if (intra < 0) intra = l->latency;
    int steps = passes * (P - 1), inter = !s.crosses ? 0 : passes > 1 ? passes * s.nodes : s.nodes - 1;
    if (inter > steps) inter = steps;
    if (s.crosses && intra < proxy) intra = proxy;
    return base + (steps - inter) * intra + inter * net_step;
}

/* Latency steps of a ring collective: P - 1 for NCCL's rings, the
 * ceil(log2 P) steps of MPI's recursive algorithms on the cpu target. */
static int ring_steps(const ir_module *m, int P) {
    if (on_cuda(m)) return P - 1;
    int k = 0;
    while ((1 << k) < P) k++;
    return k;
}

/* Seconds of a collective on the slowest rank; *wire the part of them its
 * rank spends waiting on the inter-node network rather than working on its
 * core (latencies and the bytes beyond what the node-local side moves at
 * once), which the ranks sharing that core use (shared_core_hidden). */
static double collective_seconds(const ir_module *m, const ir_op *op, const pass_cost_params *prm, double *bytes,
                                 double *wire) {
    int gi = ir_op_group(op);
    *wire = 0;
    if (gi < 0 || gi >= m->ngroups || m->groups[gi].set_size <= 1) return 0;
    const ir_group *g = &m->groups[gi];
    int P = g->set_size;
    span s = group_span(m, g);
    double a, b;
    link_ab(m, s.crosses, &a, &b);
    const ir_op_desc *d = ir_op_desc_of(op->code);
    if (s.crosses && d->comm != IR_COMM_RING) b *= nic_share(m, s.ring_senders);
    if (d->comm == IR_COMM_SEND || d->comm == IR_COMM_RECV) {
        /* Counted once, on the send; the receive waits for it. */
        *bytes = d->comm == IR_COMM_SEND ? local_bytes(m, op->in[0]) : 0;
        double t = d->comm == IR_COMM_SEND ? a + *bytes * b : 0;
        *wire = s.crosses ? t : 0;
        return t;
    }
    pass_traffic t = pass_op_traffic(m, op);
    *bytes = t.bytes_sent;
    if (d->comm == IR_COMM_ALL_TO_ALL) return all_to_all_seconds(m, op, prm, s, t.bytes_sent, P, wire);
    /* A ring collective: NCCL's latency model on cuda, else ring_latencies
     * latencies per step (ring_steps). */
    if (d->comm != IR_COMM_RING) return 0;
    double lat =
        on_cuda(m) ? nccl_ring_latency(m, s, P, (int)d->ring_latencies) : d->ring_latencies * ring_steps(m, P) * a;
    if (!s.crosses) {
        link_ab_of(m, false, true, &a, &b);
        return lat + t.bytes_sent * b;
    }
    link_ab_of(m, true, true, &a, &b);
    double x = ring_crossing(m, s, t.bytes_sent, P, b, wire);
    *wire += lat;
    return lat + x;
}

/* ---- attention: the kernel that runs it ------------------------------------ */
cm_attn_impl pass_attention_impl(const ir_module *m, const ir_op *op) {
    bool cuda = on_cuda(m);
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
static double ring_hop(const ir_module *m, const ir_op *op, double bytes, bool *crosses) {
    int gi = ir_op_group(op);
    *crosses = false;
    if (gi < 0 || gi >= m->ngroups || m->groups[gi].set_size <= 1) return 0;
    span s = group_span(m, &m->groups[gi]);
    double a, b;
    link_ab(m, s.crosses, &a, &b);
    if (s.crosses) b *= nic_share(m, s.ring_senders);
    *crosses = s.crosses;
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
    tf *= core_share(m); /* ranks sharing cores take turns; the hops are the link's */
    /* The CUDA backend moves the next block on its communication stream
     * while the current one computes; MPI on the CPU moves a large message
     * only inside MPI calls (no progress thread), so the hop completes in the
     * wait after the block: measured on the emulated cluster, ring layouts
     * ran 10-30% slower than overlapped hops predict (bench/results/choice/). */
    bool overlap = on_cuda(m), crosses;
    double block = tf / R, hop = ring_hop(m, op, w.hop_bytes, &crosses);
    double t = block + (R - 1) * (overlap ? fmax(block, hop) : block + hop);
    double tail = w.tail_hops ? R * ring_hop(m, op, w.tail_bytes, &crosses) : 0;
    t += tail;
    /* the hops the rank waits for, not overlapped with its own blocks */
    if (!overlap && crosses) t -= fmin(shared_core_hidden(m, p, (R - 1) * hop + tail), (R - 1) * block);
    double tm = bw > 0 ? c.bytes * core_share(m) / (bw * p->mem_bw_fraction) : 0;
    c.seconds = (t > tm ? t : tm) + p->op_overhead * core_share(m);
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
    /* on the CPU target the "host link" is a memcpy by the rank's core */
    return cfg_double(m, "host_latency", 0) + bytes * core_share(m) / (bw * (eff > 0 ? eff : 1));
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
        double wire;
        c.seconds = collective_seconds(m, op, p, &c.bytes, &wire);
        c.shared = shared_core_hidden(m, p, wire);
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
    /* roofline: the slower of the two; ranks sharing cores take turns */
    c.seconds = ((tf > tm ? tf : tm) + p->op_overhead) * core_share(m);
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
    s->compute = s->comm = s->since_comm = s->credit = 0;
    s->ready = sup_xcalloc((size_t)m->nvalues + 1, sizeof(double));
    ir_mem_target t;
    s->host_started = ir_mem_target_of(m, &t) && t.cuda;
}

void pass_streams_free(pass_streams *s) {
    free(s->ready);
    s->ready = NULL;
}

double pass_streams_place(pass_streams *s, const ir_op *op, pass_op_cost *c) {
    bool comm = c->comm;
    if (comm) {
        /* what the core's other ranks do while this rank waits on the
         * network is compute this rank's next phase no longer contends
         * with; unused, it lapses at the next collective after compute */
        if (s->since_comm > 0) s->credit = 0;
        s->credit += c->shared;
        s->since_comm = 0;
    } else if (op->code != IR_WAIT) {
        double h = fmin(s->credit, c->seconds);
        s->since_comm += c->seconds;
        c->seconds -= h;
        s->credit -= h;
    }
    double sec = c->seconds;
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
        if (accum > 1 && strcmp(ir_op_phase(&m->ops[i]), "opt") != 0) {
            c.seconds *= accum;
            c.shared *= accum;
        }
        pass_streams_place(&st, &m->ops[i], &c);
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
