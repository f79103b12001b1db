/* strategies.h — private to api/: basp's own strategies, each written
 * against api/basp_pass.h only and exporting an entry point as a plugin
 * does (under a name of its own, since they are linked together).  The
 * library runs them when it starts (basp_pass.c), in this order: the
 * families' rows first, then the variants that build on them. */
#ifndef BASP_API_STRATEGIES_H
#define BASP_API_STRATEGIES_H

#include "../basp_pass.h"

/* Inside the library only: a program that loads plugins exports the
 * basp_* functions of the API, not these. */
#define BASP_STRATEGY_ENTRY __attribute__((visibility("hidden"))) basp_plugin_info

/* The sequence families' rows: ulysses, ring, hybrid (sequence.c). */
BASP_STRATEGY_ENTRY basp_strategies_sequence(void);
/* The two-level all-to-all: its pass and its strategy (two_level.c). */
BASP_STRATEGY_ENTRY basp_strategies_two_level(void);

#endif
