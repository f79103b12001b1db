/* ir_op.h — shared by the op family files (ir_op_*.c) and the op table
 * (ir_ops.c); private to ir/.  Each family file defines the descriptors of
 * its ops (ir_op_<name>, listed in ir_ops.def) and keeps every function
 * they point to static. */
#ifndef BASP_IR_OP_H
#define BASP_IR_OP_H

#include "ir_verify.h"

#define IR_OP(e, d) extern const ir_op_desc ir_op_##d;
#include "ir_ops.def"
#undef IR_OP

#endif
