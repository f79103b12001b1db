/* ir_ops.c — the op table: opcode -> descriptor, from ir_ops.def.  The
 * descriptors themselves live in the family files (ir_op_*.c). */
#include "ir_op.h"

#include <string.h>

static const ir_op_desc *const ir_op_table[IR_NUM_OPS] = {
#define IR_OP(e, d) [IR_##e] = &ir_op_##d,
#include "ir_ops.def"
#undef IR_OP
};

const ir_op_desc *ir_op_desc_of(ir_opcode op)
{
    if ((int)op < 0 || op >= IR_NUM_OPS)
        return NULL;
    return ir_op_table[op];
}

int ir_opcode_lookup(const char *name)
{
    for (int i = 0; i < IR_NUM_OPS; i++)
        if (strcmp(ir_op_table[i]->name, name) == 0)
            return i;
    return -1;
}
