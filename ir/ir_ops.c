/* ir_ops.c — the op table: opcode -> descriptor, from ir_ops.def.  The
 * descriptors themselves live in the family files (ir_op_*.c). */
#include "ir_op.h"

#include <string.h>

static const ir_op_desc *const ir_op_table[IR_NUM_OPS] = {
#define IR_OP(e, d) [IR_##e] = &ir_op_##d,
#include "ir_ops.def"
#undef IR_OP
};

const ir_op_desc *ir_op_desc_of(ir_opcode op) {
    if ((int)op < 0 || op >= IR_NUM_OPS) return NULL;
    return ir_op_table[op];
}

bool ir_is_partial_loss(const ir_module *m, int v) {
    if (v < 0 || v >= m->nvalues) return false;
    int def = m->values[v].def;
    if (def < 0 || def >= m->nops || m->ops[def].nout < 1 || m->ops[def].out[0] != v) return false;
    const ir_op_desc *d = ir_op_desc_of(m->ops[def].code);
    return d && d->partial_loss;
}

int ir_loss_all_reduce(const ir_module *m) {
    for (int i = 0; i < m->nops; i++) {
        const ir_op *op = &m->ops[i];
        if (op->code == IR_ALL_REDUCE && op->nin >= 1 && op->nout >= 1 && ir_is_partial_loss(m, op->in[0]))
            return op->out[0];
    }
    return -1;
}

int ir_opcode_lookup(const char *name) {
    for (int i = 0; i < IR_NUM_OPS; i++)
        if (strcmp(ir_op_table[i]->name, name) == 0) return i;
    return -1;
}

double ir_op_local_bytes(const ir_module *m, int v) {
    const ir_type *t = &m->values[v].type;
    return (double)ir_type_local_elems(m, t) * ir_dtype_size(t->dtype);
}

double ir_op_tail_local(const ir_module *m, const ir_type *t, int n) {
    double p = 1;
    for (int d = t->rank - n; d < t->rank; d++)
        if (d >= 0) p *= (double)ir_type_max_local_dim(m, t, d);
    return p;
}

double ir_op_bytes_moved(const ir_module *m, const ir_op *op) {
    double b = 0;
    for (int k = 0; k < op->nin; k++) b += ir_op_local_bytes(m, op->in[k]);
    for (int k = 0; k < op->nout; k++) b += ir_op_local_bytes(m, op->out[k]);
    return b;
}

ir_op_work ir_op_work_of(const ir_module *m, const ir_op *op) {
    const ir_op_desc *d = ir_op_desc_of(op->code);
    if (d && d->work) return d->work(m, op);
    return (ir_op_work){.bytes = ir_op_bytes_moved(m, op)};
}
