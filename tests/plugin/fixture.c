/* fixture.c — plugins for the tests, one per -D (tests/lit/plugin/):
 *   FIXTURE_VERSION    built against another pass API version
 *   FIXTURE_NO_ENTRY   a shared object without basp_pass_plugin_info
 *   FIXTURE_DUP_PASS   registers a pass named like a built-in one
 *   FIXTURE_DUP_WORD   registers a strategy with two-level's spec words
 *   FIXTURE_BREAKS_IR  a pass whose output the verifier rejects
 *   FIXTURE_STRIDED    a correct strategy (a2a strided): batch-aware's groups
 *                      rebuilt as strided @sp sets and contiguous @dp sets
 *   FIXTURE_SP_ONLY    the same rewrite of @sp alone, @dp left as it was:
 *                      two ranks then hold the same (batch, sequence) block
 *   FIXTURE_NO_FAMILY  a strategy whose passes leave out its family's pass
 *   FIXTURE_ONE_GROUP  a strategy whose pass leaves the step at one group
 *                      (config batch_groups = 1) for a G = 2 layout
 *   FIXTURE_FAILS      passes that fail without a message (fail-silently)
 *                      and that pass a bad handle and return true (bad-handle)
 *   FIXTURE_LEGAL_FILL a strategy whose legal() fills the whole hint buffer
 *                      without a NUL */
#include <basp/basp_pass.h>

#include <stdlib.h>
#include <string.h>

/* Shards the first rank-2 parameter's dim 0 over @world without changing
 * the ops that read it: their operands no longer agree. */
static __attribute__((unused)) bool break_ir(basp_module *m) {
    int world = basp_ir_group_find(m, "world");
    for (int v = 0; v < basp_ir_value_count(m); v++)
        if (basp_ir_value_kind(m, v) == BASP_V_PARAM && basp_ir_value_rank(m, v) == 2 &&
            basp_ir_value_shard(m, v, 0) < 0) {
            basp_ir_value_set_shard(m, v, 0, world);
            return true;
        }
    return true;
}

/* Batch-aware's groups in the other order: @sp set g = {g, g+G, ...}
 * (strided) and @dp set i = {iG, ..., iG+G-1} (contiguous), so rank iG+g
 * holds batch block g and sequence block i, as rank gK+i did before.  With
 * FIXTURE_SP_ONLY @dp keeps its strided sets: ranks 0 and 1 of 4 both hold
 * block (batch 0, sequence 0). */
static __attribute__((unused)) bool strided(basp_module *m) {
    int sp = basp_ir_group_find(m, "sp"), dp = basp_ir_group_find(m, "dp");
    if (sp < 0 || dp < 0) {
        basp_pass_remark("strided: no @sp and @dp (one group); unchanged");
        return true;
    }
    int G = basp_ir_group_sets(m, sp), K = basp_ir_group_set_size(m, sp);
    int *r = malloc(sizeof *r * (size_t)(G * K));
    for (int g = 0; g < G; g++)
        for (int i = 0; i < K; i++) r[g * K + i] = i * G + g;
    basp_ir_group_add(m, "sp", G, K, r);
#ifndef FIXTURE_SP_ONLY
    for (int i = 0; i < G * K; i++) r[i] = i;
    basp_ir_group_add(m, "dp", K, G, r);
#endif
    free(r);
    basp_pass_remark("strided: @sp strided, @dp contiguous (G=%d, K=%d)", G, K);
    return true;
}

/* The banner's and the loss scale's G undone: the step of one group. */
static __attribute__((unused)) bool one_group(basp_module *m) {
    basp_ir_config_set(m, "batch_groups", "1");
    return true;
}

static __attribute__((unused)) bool fail_silently(basp_module *m) {
    (void)m;
    return false;
}

static __attribute__((unused)) bool bad_handle(basp_module *m) {
    return basp_ir_value_name(m, basp_ir_value_count(m) + 7) != NULL;
}

/* Fills every byte of the hint, no NUL; on entry the buffer must be zeroed
 * (basp_pass.h), else the rule says so instead. */
static __attribute__((unused)) const char *fill_legal(const basp_layout_dims *d, const basp_layout_choice *c, char *fix,
                                                      size_t nfix) {
    (void)d, (void)c;
    for (size_t i = 0; fix && i < nfix; i++)
        if (fix[i]) return "fill: the hint buffer was not zeroed before legal()";
    if (fix && nfix) memset(fix, 'x', nfix);
    return "fill: never legal";
}

static bool fixture_register(void) {
#if defined(FIXTURE_STRIDED) || defined(FIXTURE_SP_ONLY)
    static const basp_strategy s = {.name = "ulysses+strided",
                                    .family = "ulysses",
                                    .key = "a2a",
                                    .word = "strided",
                                    .title = "Ulysses, strided groups",
                                    .passes = "ulysses,strided"};
    return basp_register_pass("strided", "batch-aware's groups as strided @sp and contiguous @dp", strided) &&
           basp_register_strategy(&s);
#elif defined(FIXTURE_NO_FAMILY)
    static const basp_strategy s = {
        .name = "ulysses+mine", .family = "ulysses", .key = "a2a", .word = "mine", .passes = "one-group"};
    return basp_register_pass("one-group", "sets batch_groups = 1", one_group) && basp_register_strategy(&s);
#elif defined(FIXTURE_ONE_GROUP)
    static const basp_strategy s = {
        .name = "ulysses+mine", .family = "ulysses", .key = "a2a", .word = "mine", .passes = "ulysses,one-group"};
    return basp_register_pass("one-group", "sets batch_groups = 1", one_group) && basp_register_strategy(&s);
#elif defined(FIXTURE_FAILS)
    return basp_register_pass("fail-silently", "returns false and says nothing", fail_silently) &&
           basp_register_pass("bad-handle", "asks for a value that is not there", bad_handle);
#elif defined(FIXTURE_LEGAL_FILL)
    static const basp_strategy s = {.name = "ulysses+fill",
                                    .family = "ulysses",
                                    .key = "a2a",
                                    .word = "fill",
                                    .legal = fill_legal,
                                    .passes = "ulysses"};
    return basp_register_strategy(&s);
#elif defined(FIXTURE_DUP_PASS)
    return basp_register_pass("zero", "a second zero", break_ir);
#elif defined(FIXTURE_DUP_WORD)
    static const basp_strategy s = {
        .name = "ulysses+mine", .family = "ulysses", .key = "a2a", .word = "two_level", .passes = "ulysses"};
    return basp_register_strategy(&s);
#else
    return basp_register_pass("break-ir", "leaves a parameter sharded under its readers", break_ir);
#endif
}

#ifndef FIXTURE_NO_ENTRY
BASP_PLUGIN_EXPORT basp_plugin_info basp_pass_plugin_info(void) {
#ifdef FIXTURE_VERSION
    return (basp_plugin_info){BASP_PASS_API_VERSION + 1, "from-the-future", "9.9", fixture_register};
#else
    return (basp_plugin_info){BASP_PASS_API_VERSION, "fixture", "1.0", fixture_register};
#endif
}
#else
BASP_PLUGIN_EXPORT int not_a_plugin(void);
BASP_PLUGIN_EXPORT int not_a_plugin(void) { return fixture_register(); }
#endif
