/* cm_tables.c — the names of common.h's tables, generated from their rows
 * so that a row added there has its name here without a second list. */
#include "common.h"

#define CM_K_NAME_(kind, name) #name,
const char *const cm_kernel_names[CM_K_N] = {CM_KERNEL_KINDS(CM_K_NAME_)};
#undef CM_K_NAME_
