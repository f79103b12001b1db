/* ir_emit.c — the helpers the ops' emit functions (ir_op_*.c) build a
 * runtime call from.  Every argument goes through the emitter interface
 * (ir.h), so the C syntax and the names stay codegen's; what is here is how
 * the runtime's sizes follow from the IR: local sizes, which dims a kernel
 * needs whole. */
#include "ir_op.h"

#include <inttypes.h>
#include <stdarg.h>

const ir_value *ir_emit_in(const ir_emit *e, int k) { return &e->m->values[e->op->in[k]]; }
const ir_value *ir_emit_out(const ir_emit *e, int k) { return &e->m->values[e->op->out[k]]; }

void ir_emit_fail(ir_emit *e, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    e->fail(e, msg);
}

void ir_emit_call(ir_emit *e) {
    const ir_op_desc *d = ir_op_desc_of(e->op->code);
    if (ir_op_async(e->op) && !d->rt_start_fn) {
        ir_emit_fail(e, "this op cannot be started asynchronously (async = 1)");
        return;
    }
    e->call(e, ir_op_async(e->op) ? d->rt_start_fn : d->rt_fn);
}
void ir_emit_end(ir_emit *e) { e->end(e); }
void ir_emit_int(ir_emit *e, int64_t v) { e->i64(e, v); }
void ir_emit_dbl(ir_emit *e, double v) { e->f64(e, v); }
void ir_emit_f32(ir_emit *e, const ir_value *v) { e->buf(e, (int)(v - e->m->values), false); }
void ir_emit_i32(ir_emit *e, const ir_value *v) { e->buf(e, (int)(v - e->m->values), true); }
void ir_emit_val(ir_emit *e, const ir_value *v) { e->value(e, (int)(v - e->m->values)); }

int64_t ir_emit_lprod(const ir_emit *e, const ir_value *v, int from, int to) {
    int64_t p = 1;
    for (int d = from; d < to; d++) p *= ir_type_max_local_dim(e->m, &v->type, d);
    return p;
}

bool ir_emit_whole(ir_emit *e, const ir_value *v, int from, int to, const char *why) {
    for (int d = from; d < to && d < v->type.rank; d++) {
        int g = v->type.shard[d];
        if (g < 0) continue;
        ir_emit_fail(e, "dim %d of %%%s is sharded by @%s, but %s must be whole on every rank", d, v->name,
                     e->m->groups[g].name, why);
        return false;
    }
    return true;
}

bool ir_emit_rank(ir_emit *e, const ir_value *v, int want) {
    if (v->type.rank == want) return true;
    ir_emit_fail(e, "%%%s has rank %d; the runtime call expects rank %d", v->name, v->type.rank, want);
    return false;
}

void ir_emit_row0(ir_emit *e, const ir_value *v) {
    int g = v->type.shard[0];
    if (g >= 0)
        e->group_pos(e, g, ir_type_max_local_dim(e->m, &v->type, 0));
    else
        e->i64(e, 0);
}

double ir_emit_attr_or_config(ir_emit *e, const char *attr, const char *key) {
    const ir_attr *a = ir_attr_get(e->op, attr);
    if (a && a->kind == IR_A_FLOAT) return a->f;
    if (a && a->kind == IR_A_INT) return (double)a->i;
    return e->config_double(e, key);
}
