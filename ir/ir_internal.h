/* ir_internal.h — helpers shared inside ir/ only. */
#ifndef BASP_IR_INTERNAL_H
#define BASP_IR_INTERNAL_H

#include "ir.h"

/* ir_value_add without the duplicate-name scan, for the parser, which keeps
 * its own name index so that reading a large module stays linear. */
int ir_value_append(ir_module *m, const char *name, ir_value_kind kind, ir_type type);

/* A small open-addressing index from names to indices (values or groups).
 * Lookups compare against the module's names, so it stores only indices. */
typedef struct ir_name_index {
    int *slots; /* -1 = empty */
    int cap;    /* power of two */
    int count;
} ir_name_index;

/* Returns the index whose name (names(ctx, i)) equals `name`, or -1. */
typedef const char *(*ir_name_of)(const void *ctx, int i);
int ir_name_index_find(const ir_name_index *ix, const char *name, ir_name_of names, const void *ctx);
void ir_name_index_add(ir_name_index *ix, int i, ir_name_of names, const void *ctx);
void ir_name_index_free(ir_name_index *ix);

#endif
