/* cm_tables.c — the names of common.h's tables, generated from their rows
 * so that a row added there has its name here without a second list. */
#include "common.h"

#define CM_K_NAME_(kind, name) #name,
const char *const cm_kernel_names[CM_K_N] = {CM_KERNEL_KINDS(CM_K_NAME_)};
#undef CM_K_NAME_

/* The workspace rows: their names and what each holds, per target (SUMS
 * rows after the slots, as their numbering runs). */
#define CM_WS_NAME_(name, what) #name,
#define CM_WS_WHAT_(name, what) what,
const char *const cm_ws_cpu_names[CM_WS_CPU_N] = {CM_WS_CPU_SLOTS(CM_WS_NAME_) CM_WS_CPU_SUMS(CM_WS_NAME_)};
const char *const cm_ws_cpu_what[CM_WS_CPU_N] = {CM_WS_CPU_SLOTS(CM_WS_WHAT_) CM_WS_CPU_SUMS(CM_WS_WHAT_)};
const char *const cm_ws_cuda_names[CM_WS_CUDA_N] = {CM_WS_CUDA_SLOTS(CM_WS_NAME_) CM_WS_CUDA_SUMS(CM_WS_NAME_)};
const char *const cm_ws_cuda_what[CM_WS_CUDA_N] = {CM_WS_CUDA_SLOTS(CM_WS_WHAT_) CM_WS_CUDA_SUMS(CM_WS_WHAT_)};
#undef CM_WS_NAME_
#undef CM_WS_WHAT_

#define CM_ATTN_NAME_(impl, name) name,
const char *const cm_attn_impl_names[CM_ATTN_N] = {CM_ATTN_IMPLS(CM_ATTN_NAME_)};
#undef CM_ATTN_NAME_

int64_t cm_docs_padded(int64_t len) {
    int64_t p = 128;
    while (p < len) p *= 2;
    return p;
}

cm_attn_impl cm_attention_impl(bool cuda, bool ring, bool documents, bool cudnn) {
    if (!cuda) return CM_ATTN_CPU;
    if (!cudnn || (documents && ring)) return CM_ATTN_CUDA_BASP;
    return ring ? CM_ATTN_CUDNN_RING : documents ? CM_ATTN_CUDNN_DOCS : CM_ATTN_CUDNN;
}
