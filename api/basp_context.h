/* basp_context.h — private to api/: the compilation context as the API's
 * entry points reach it. */
#ifndef BASP_API_CONTEXT_H
#define BASP_API_CONTEXT_H

#include "../support/support.h"

/* The process's compilation context (sup_ctx), with the library started:
 * passes.def's passes and basp's own strategies (api/strategies/)
 * registered, once, before anything else can register.  Every entry point
 * of basp.h and basp_pass.h that reaches a registry calls it first. */
__attribute__((visibility("hidden"))) sup_context *basp_ctx(void);

#endif
