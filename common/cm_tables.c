/* cm_tables.c — the names of common.h's tables, generated from their rows
 * so that a row added there has its name here without a second list. */
#include "common.h"

#define CM_K_NAME_(kind, name) #name,
const char *const cm_kernel_names[CM_K_N] = {CM_KERNEL_KINDS(CM_K_NAME_)};
#undef CM_K_NAME_

#define CM_ATTN_NAME_(impl, name) name,
const char *const cm_attn_impl_names[CM_ATTN_N] = {CM_ATTN_IMPLS(CM_ATTN_NAME_)};
#undef CM_ATTN_NAME_

cm_attn_impl cm_attention_impl(bool cuda, bool ring, bool documents, bool cudnn) {
    if (!cuda) return CM_ATTN_CPU;
    return ring || documents || !cudnn ? CM_ATTN_CUDA_BASP : CM_ATTN_CUDNN;
}
