/* ir_internal.h — helpers shared inside ir/ only. */
#ifndef BASP_IR_INTERNAL_H
#define BASP_IR_INTERNAL_H

#include "ir.h"

/* ir_value_add without the duplicate-name check (the parser checks first, to
 * report a redefinition with a location). */
int ir_value_append(ir_module *m, const char *name, ir_value_kind kind, ir_type type);

/* ir_name_index (ir.h): lookups compare against the module's names, so it
 * stores only indices. */

/* Returns the index whose name (names(ctx, i)) equals `name`, or -1. */
typedef const char *(*ir_name_of)(const void *ctx, int i);
int ir_name_index_find(const ir_name_index *ix, const char *name, ir_name_of names, const void *ctx);
void ir_name_index_add(ir_name_index *ix, int i, ir_name_of names, const void *ctx);
void ir_name_index_free(ir_name_index *ix);

/* A buffer as the memory plan's check sees it: bytes [off, off + bytes) of
 * one arena, live over ops [start, end] (start >= -1, end <= nops). */
typedef struct ir_mem_box {
    int64_t off, bytes;
    int start, end;
} ir_mem_box;
/* True when no two boxes whose lifetimes meet share a byte (ir_memplan.c:
 * a sweep over the ops, O(n log n), where comparing pairs by offset is
 * quadratic once many buffers reuse the same bytes).  Boxes need bytes > 0
 * and start <= end. */
bool ir_mem_boxes_disjoint(int nops, const ir_mem_box *b, int n);
/* Empties ir_mem_plan's cache of recent plans (tests: a plan made afresh
 * to compare the cached one with). */
void ir_mem_plan_forget(void);

/* What ir/ keeps between calls, in the compilation context (sup_ctx()->ir,
 * created on first use): the intern table of attribute keys and identifier
 * values (ir.c: open addressing, never shrunk) and ir_mem_plan's recent
 * plans (ir_memplan.c). */
struct ir_plan_cache;
struct ir_context {
    const char **interned;
    size_t cap, n;
    struct ir_plan_cache *plans;
};
struct ir_context *ir_ctx(void);

#endif
