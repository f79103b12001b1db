/* ir_print.c — the textual form of a module (grammar in ir/README.md).
 *
 * The printer is the definition of the canonical form: its output parses back
 * (ir_parse.c) to a module that prints byte-identically.  It never fails: an
 * invalid module (bad indices after a buggy pass) still prints, with `?`
 * placeholders that the parser rejects, so a dump is always available. */
#include "ir.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static bool ir_name_char(int c) { return isalnum(c) || c == '_' || c == '.' || c == '-'; }

bool ir_is_name(const char *s) {
    if (!s || !*s || strlen(s) >= IR_NAME_MAX) return false;
    for (; *s; s++)
        if (!ir_name_char((unsigned char)*s)) return false;
    return true;
}

bool ir_is_ident(const char *s) { return ir_is_name(s) && (isalpha((unsigned char)*s) || *s == '_'); }

/* A double that reads back bit-exactly; non-finite values spelled the way
 * the lexer reads them back. */
static const char *ir_fmt_num(double v, char *buf, size_t n) {
    if (isnan(v))
        snprintf(buf, n, "nan");
    else if (isinf(v))
        snprintf(buf, n, v > 0 ? "inf" : "-inf");
    else
        sup_fmt_double(v, buf, n);
    return buf;
}

/* A float attribute must stay a float on re-read: "2" becomes "2.0". */
static const char *ir_fmt_float(double v, char *buf, size_t n) {
    ir_fmt_num(v, buf, n);
    if (!strpbrk(buf, ".eEni") && strlen(buf) + 3 <= n) strcat(buf, ".0");
    return buf;
}

static const char *ir_group_name(const ir_module *m, int g) {
    return g >= 0 && g < m->ngroups ? m->groups[g].name : "?";
}

static const char *ir_value_name(const ir_module *m, int v) {
    return v >= 0 && v < m->nvalues ? m->values[v].name : "?";
}

const char *ir_type_str(const ir_module *m, const ir_type *t, char *buf, size_t n) {
    size_t len = 0;
    len += (size_t)snprintf(buf, n, "%s[", ir_dtype_name(t->dtype));
    int rank = t->rank < 0 ? 0 : t->rank > IR_MAX_RANK ? IR_MAX_RANK : t->rank;
    for (int i = 0; i < rank && len < n; i++) {
        len += (size_t)snprintf(buf + len, n - len, "%s%lld", i ? "," : "", (long long)t->dims[i]);
        if (t->shard[i] != -1 && len < n)
            len += (size_t)snprintf(buf + len, n - len, "@%s", ir_group_name(m, t->shard[i]));
        if (t->unit[i] != 0 && len < n) len += (size_t)snprintf(buf + len, n - len, ":%lld", (long long)t->unit[i]);
    }
    if (len < n) snprintf(buf + len, n - len, "]");
    return buf;
}

const char *ir_op_str(const ir_module *m, int i, char *buf, size_t n) {
    const ir_op *op = &m->ops[i];
    const ir_op_desc *info = ir_op_desc_of(op->code);
    const char *name = info ? info->name : "?";
    if (op->nout > 0)
        snprintf(buf, n, "op %d '%s' (%%%s)", i, name, ir_value_name(m, op->out[0]));
    else if (op->nin > 0)
        snprintf(buf, n, "op %d '%s' (%%%s)", i, name, ir_value_name(m, op->in[0]));
    else
        snprintf(buf, n, "op %d '%s'", i, name);
    return buf;
}

/* Config values print bare when they are one token of [A-Za-z0-9_.+:-],
 * else as a quoted string with C-style escapes. */
static bool ir_config_bare(const char *s) {
    if (!*s) return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && !strchr("_.+-:", *s)) return false;
    return true;
}

static void ir_print_config_value(sup_buf *b, const char *s) {
    if (ir_config_bare(s)) {
        sup_buf_puts(b, s);
        return;
    }
    sup_buf_puts(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            sup_buf_printf(b, "\\%c", c);
        else if (c == '\n')
            sup_buf_puts(b, "\\n");
        else if (c == '\t')
            sup_buf_puts(b, "\\t");
        else if (c < 0x20 || c == 0x7f)
            sup_buf_printf(b, "\\x%02x", c);
        else
            sup_buf_printf(b, "%c", c);
    }
    sup_buf_puts(b, "\"");
}

static void ir_print_link(sup_buf *b, const char *which, const ir_link *l) {
    char bw[40], lat[40], eff[40];
    sup_buf_printf(b, "link %s kind = %s, bandwidth = %s, latency = %s, efficiency = %s\n", which,
                   l->kind[0] ? l->kind : "?", ir_fmt_num(l->bandwidth, bw, sizeof bw),
                   ir_fmt_num(l->latency, lat, sizeof lat), ir_fmt_num(l->efficiency, eff, sizeof eff));
}

static void ir_print_group(sup_buf *b, const ir_group *g) {
    sup_buf_printf(b, "group @%s = ", g->name);
    if (g->block > 0) sup_buf_printf(b, "block %d ", g->block);
    sup_buf_puts(b, "{");
    for (int s = 0; s < g->nsets; s++) {
        sup_buf_puts(b, s ? ",[" : "[");
        for (int j = 0; j < g->set_size; j++) sup_buf_printf(b, "%s%d", j ? "," : "", g->ranks[s * g->set_size + j]);
        sup_buf_puts(b, "]");
    }
    sup_buf_puts(b, "}\n");
}

static void ir_print_attr(sup_buf *b, const ir_module *m, const ir_attr *a) {
    char num[48];
    sup_buf_printf(b, "%s = ", a->key);
    switch (a->kind) {
    case IR_A_INT: sup_buf_printf(b, "%lld", (long long)a->i); break;
    case IR_A_FLOAT: sup_buf_puts(b, ir_fmt_float(a->f, num, sizeof num)); break;
    case IR_A_IDENT: sup_buf_puts(b, a->s[0] ? a->s : "?"); break;
    case IR_A_GROUP: sup_buf_printf(b, "@%s", ir_group_name(m, (int)a->i)); break;
    default: sup_buf_puts(b, "?"); break;
    }
}

/* %a, %b = name %x, %y {k = v, ...} : T, T */
static void ir_print_op(sup_buf *b, const ir_module *m, const ir_op *op) {
    const ir_op_desc *info = ir_op_desc_of(op->code);
    for (int o = 0; o < op->nout; o++) sup_buf_printf(b, "%s%%%s", o ? ", " : "", ir_value_name(m, op->out[o]));
    if (op->nout) sup_buf_puts(b, " = ");
    sup_buf_puts(b, info ? info->name : "?");
    for (int k = 0; k < op->nin; k++) sup_buf_printf(b, "%s%%%s", k ? ", " : " ", ir_value_name(m, op->in[k]));
    if (op->nattrs) {
        sup_buf_puts(b, " {");
        for (int a = 0; a < op->nattrs; a++) {
            if (a) sup_buf_puts(b, ", ");
            ir_print_attr(b, m, &op->attrs[a]);
        }
        sup_buf_puts(b, "}");
    }
    for (int o = 0; o < op->nout; o++) {
        char ty[IR_TYPE_STR_MAX];
        int v = op->out[o];
        const char *s = v >= 0 && v < m->nvalues ? ir_type_str(m, &m->values[v].type, ty, sizeof ty) : "?";
        sup_buf_printf(b, "%s%s", o ? ", " : " : ", s);
        if (v >= 0 && v < m->nvalues && m->values[v].mem_off >= 0)
            sup_buf_printf(b, " at %lld", (long long)m->values[v].mem_off);
    }
    sup_buf_puts(b, "\n");
}

static void ir_print_buf(sup_buf *b, const ir_module *m) {
    sup_buf_printf(b, "module @%s\n", m->name[0] ? m->name : "?");
    for (int i = 0; i < m->nconfig; i++) {
        sup_buf_printf(b, "config %s = ", m->config[i].key);
        ir_print_config_value(b, m->config[i].value);
        sup_buf_puts(b, "\n");
    }
    sup_buf_printf(b, "mesh nodes = %d, devices_per_node = %d", m->mesh.nodes, m->mesh.devices_per_node);
    for (int r = 0; m->mesh.node_of && r < ir_world(m); r++)
        sup_buf_printf(b, "%s%d", r ? "," : ", node_of = [", m->mesh.node_of[r]);
    sup_buf_puts(b, m->mesh.node_of ? "]\n" : "\n");
    ir_print_link(b, "intra", &m->mesh.intra);
    ir_print_link(b, "inter", &m->mesh.inter);
    for (int g = 0; g < m->ngroups; g++) ir_print_group(b, &m->groups[g]);
    for (int v = 0; v < m->nvalues; v++) {
        const ir_value *val = &m->values[v];
        if (val->kind == IR_V_RESULT) continue;
        char ty[IR_TYPE_STR_MAX];
        sup_buf_printf(b, "%s %%%s : %s", ir_value_kind_name(val->kind), val->name,
                       ir_type_str(m, &val->type, ty, sizeof ty));
        if (val->mem_off >= 0) sup_buf_printf(b, " at %lld", (long long)val->mem_off);
        sup_buf_puts(b, "\n");
    }
    for (int i = 0; i < m->nops; i++) ir_print_op(b, m, &m->ops[i]);
}

char *ir_print_to_string(const ir_module *m) {
    sup_buf b = {0};
    ir_print_buf(&b, m);
    if (!b.data) return sup_xstrdup("");
    return b.data;
}

void ir_print(const ir_module *m, FILE *out) {
    char *s = ir_print_to_string(m);
    fputs(s, out);
    free(s);
}
