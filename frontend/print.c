/* print.c — fe_spec_print: the checked spec back in the language, every
 * default written out, so `baspc --print-spec` shows what the compiler will
 * actually use and its output parses back to the same spec. */
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ast.h"

/* Whole numbers in plain digits (500000, not 5e+05), the rest in the
 * shortest form that reads back exactly. */
static const char *fmt_num(double v, char *buf, size_t n) {
    if (v == (double)(int64_t)v && v > -1e15 && v < 1e15) {
        snprintf(buf, n, "%" PRId64, (int64_t)v);
        return buf;
    }
    return sup_fmt_double(v, buf, n);
}

/* Tries each unit of the class and keeps the shortest text that reads back
 * (through the lexer's own factors) as exactly v. */
const char *fe_fmt_unit(double v, fe_unit_class cls, char *buf, size_t n) {
    static const char *const bytes[] = {"B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB"};
    static const char *const bw[] = {"B/s", "KB/s", "MB/s", "GB/s", "TB/s"};
    static const char *const time[] = {"s", "ms", "us", "ns"};
    const char *const *u = cls == FE_U_BYTES ? bytes : cls == FE_U_BW ? bw : time;
    int nu = cls == FE_U_BYTES ? 9 : cls == FE_U_BW ? 5 : 4;
    char best[64] = "", cand[64], num[40];
    for (int i = 0; i < nu; i++) {
        fe_unit_class c;
        double mul, div;
        if (!fe_unit_lookup(u[i], &c, &mul, &div)) continue;
        fmt_num(v * div / mul, num, sizeof num);
        if (strtod(num, NULL) * mul / div != v) continue;
        snprintf(cand, sizeof cand, "%s%s", num, u[i]);
        if (!best[0] || strlen(cand) < strlen(best)) snprintf(best, sizeof best, "%s", cand);
    }
    if (!best[0]) snprintf(best, sizeof best, "%s%s", fmt_num(v, num, sizeof num), u[0]);
    snprintf(buf, n, "%s", best);
    return buf;
}

static void print_link(FILE *out, const char *which, const fe_link *l) {
    char bw[64], lat[64], eff[40];
    fprintf(out, "  link %s %s bandwidth %s latency %s efficiency %s\n", which, l->kind,
            fe_fmt_unit(l->bandwidth, FE_U_BW, bw, sizeof bw), fe_fmt_unit(l->latency, FE_U_TIME, lat, sizeof lat),
            fmt_num(l->efficiency, eff, sizeof eff));
}

static void print_model(FILE *out, const fe_model *m) {
    char a[40], b[40], c[40];
    fprintf(out, "model %s {\n", m->name);
    fprintf(out, "  hidden %" PRId64 "\n  layers %" PRId64 "\n  heads %" PRId64 "\n", m->hidden, m->layers, m->heads);
    fprintf(out, "  kv_heads %" PRId64 "\n  head_dim %" PRId64 "\n  ffn %" PRId64 "\n", m->kv_heads, m->head_dim,
            m->ffn);
    fprintf(out, "  vocab %" PRId64 "\n  rope_theta %s\n", m->vocab, fmt_num(m->rope_theta, a, sizeof a));
    /* The llama3 parameters only exist with llama3 scaling; printing them
     * under `none` would read back as keys that do nothing. */
    fprintf(out, "  rope_scaling %s\n", m->rope_scaling[0] ? m->rope_scaling : "none");
    if (!strcmp(m->rope_scaling, "llama3"))
        fprintf(out,
                "  rope_factor %s\n  rope_low_freq_factor %s\n  rope_high_freq_factor %s\n"
                "  rope_original_max_pos %" PRId64 "\n",
                fmt_num(m->rope_factor, a, sizeof a), fmt_num(m->rope_low_freq_factor, b, sizeof b),
                fmt_num(m->rope_high_freq_factor, c, sizeof c), m->rope_original_max_pos);
    fprintf(out, "  norm_eps %s\n", fmt_num(m->norm_eps, b, sizeof b));
    fprintf(out, "  tie_embeddings %s\n", m->tie_embeddings ? "true" : "false");
    fprintf(out, "  qkv_bias %s\n  qk_norm %s\n}\n", m->qkv_bias ? "true" : "false", m->qk_norm ? "true" : "false");
}

static void print_mesh(FILE *out, const fe_mesh *m) {
    char mem[64];
    fprintf(out, "mesh %s {\n", m->name);
    fprintf(out, "  nodes %" PRId64 "\n  devices_per_node %" PRId64 "\n  nics_per_node %" PRId64 "\n", m->nodes,
            m->devices_per_node, m->nics_per_node);
    if (m->cores_per_node > 0) fprintf(out, "  cores_per_node %" PRId64 "\n", m->cores_per_node);
    bool word = !strcmp(m->placement, "consecutive") || !strcmp(m->placement, "round_robin");
    fprintf(out, word ? "  placement %s\n" : "  placement \"%s\"\n", m->placement);
    fprintf(out, "  device %s\n  memory %s\n", m->device, fe_fmt_unit(m->device_mem, FE_U_BYTES, mem, sizeof mem));
    print_link(out, "intra", &m->intra);
    print_link(out, "inter", &m->inter);
    fprintf(out, "  host_memory %s\n", fe_fmt_unit(m->host_mem, FE_U_BYTES, mem, sizeof mem));
    print_link(out, "host", &m->host);
    fprintf(out, "}\n");
}

static void print_train(FILE *out, const fe_spec *spec) {
    const fe_train *t = &spec->train;
    char lr[40];
    fprintf(out, "train {\n");
    fprintf(out, "  micro_batch %" PRId64 "\n  seq_len %" PRId64 "\n  global_batch %" PRId64 "\n", t->micro_batch,
            t->seq_len, t->global_batch);
    fprintf(out, "  precision %s\n  zero %d\n  optimizer %s\n", t->precision, t->zero, t->optimizer);
    fprintf(out, "  lr %s\n  steps %" PRId64 "\n  seed %" PRId64 "\n  recompute %s\n", fmt_num(t->lr, lr, sizeof lr),
            t->steps, t->seed, t->recompute);
    fprintf(out, "  offload %s\n", t->offload);
    if (t->attention_chunks == FE_CHUNKS_AUTO)
        fprintf(out, "  attention_chunks auto\n");
    else
        fprintf(out, "  attention_chunks %" PRId64 "\n", t->attention_chunks);
    /* auto has no word: left out, it parses back to auto */
    if (t->mlp_chunk == FE_MLP_AUTO)
        fprintf(out, "  # mlp_chunk: chosen when built (unfused if the step fits, else %" PRId64 ")\n",
                fe_mlp_chunk_alst(spec));
    else
        fprintf(out, "  mlp_chunk %" PRId64 "\n", t->mlp_chunk);
    char n[5][40];
    fprintf(out, "  schedule %s\n  warmup %" PRId64 "\n  min_lr %s\n", t->schedule, t->warmup,
            fmt_num(t->min_lr, n[0], sizeof n[0]));
    if (!strcmp(t->schedule, "wsd")) fprintf(out, "  wsd_decay %s\n", fmt_num(t->wsd_decay, n[0], sizeof n[0]));
    fprintf(out, "  weight_decay %s\n  beta1 %s\n  beta2 %s\n  eps %s\n  grad_clip %s\n",
            fmt_num(t->weight_decay, n[0], sizeof n[0]), fmt_num(t->beta1, n[1], sizeof n[1]),
            fmt_num(t->beta2, n[2], sizeof n[2]), fmt_num(t->eps, n[3], sizeof n[3]),
            fmt_num(t->grad_clip, n[4], sizeof n[4]));
    if (t->overlap) fprintf(out, "  overlap on\n");
    if (!t->fuse_loss) fprintf(out, "  fuse_loss off\n"); /* on, the default, is left out */
    if (!t->fuse_elem) fprintf(out, "  fuse_elem off\n");
    if (!t->fuse_rope) fprintf(out, "  fuse_rope off\n");
    if (!t->attention_lse) fprintf(out, "  attention_lse off\n");
    if (t->documents) fprintf(out, "  documents on\n  eot_token %" PRId64 "\n  packing %s\n", t->eot_token, t->packing);
    fprintf(out, "}\n");
}

static void print_layout(FILE *out, const fe_layout *l) {
    static const char *const modes[] = {"auto", "on", "off", "groups", "dynamic"};
    fprintf(out, "layout {\n  sequence %s\n", l->sequence);
    if (l->ring_degree > 0) fprintf(out, "  ring_degree %" PRId64 "\n", l->ring_degree);
    /* The default flat exchange is left out, so that specs written before
     * two-level existed print as they did. */
    if (l->a2a[0] && strcmp(l->a2a, "flat")) fprintf(out, "  a2a %s\n", l->a2a);
    if (l->group_sizes[0]) fprintf(out, "  group_sizes \"%s\"\n", l->group_sizes);
    if (l->batch_aware == FE_BA_GROUPS)
        fprintf(out, "  batch_aware groups %" PRId64 "\n}\n", l->groups);
    else
        fprintf(out, "  batch_aware %s\n}\n", modes[l->batch_aware]);
}

void fe_spec_print(const fe_spec *spec, FILE *out) {
    print_model(out, &spec->model);
    print_mesh(out, &spec->mesh);
    print_train(out, spec);
    print_layout(out, &spec->layout);
}
